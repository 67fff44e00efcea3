//! Property tests over random scenarios (fixtures::strategies): every synchronous walk equals
//! what an independent oracle derives from the thread's ground-truth list, runs are
//! deterministic, and contexts climb the stack.

use fixtures::strategies::{context, deep_pieces, pieces, scenario_text};
use proptest::prelude::*;
use sim_clr::scenario::{Report, Scenario, TruthEntry};

/// The oracle: DoStackSnapshot's reporting rules (R20, R21, R32) applied to the ground-truth
/// list directly — no memory, no unwinding. Returns (name or "0", ip) per callback.
fn expected(truth: &[TruthEntry]) -> Vec<(String, String)> {
    let is_call = |e: &TruthEntry| e.kind == "call";
    let managed = |e: &TruthEntry| matches!(e.code, Some("jit" | "r2r" | "il_stub" | "lcg"));
    let metadata = |e: &TruthEntry| matches!(e.code, Some("jit" | "r2r"));
    let returns = |e: &TruthEntry| {
        ["InlinedCallFrame", "HelperMethodFrame", "RedirectedThreadFrame"].contains(&e.name.as_str())
    };
    // The next usable Frame at or after `from`: its call below must be managed.
    let hop = |from: usize| -> Option<usize> {
        (from..truth.len())
            .filter(|&i| !is_call(&truth[i]) && returns(&truth[i]))
            .find_map(|i| {
                let below = (i + 1..truth.len()).find(|&j| is_call(&truth[j]))?;
                managed(&truth[below]).then_some(below)
            })
    };
    let mut out = Vec::new();
    let mut at = hop(0);
    while let Some(i) = at {
        if metadata(&truth[i]) {
            out.push((truth[i].name.clone(), truth[i].address.clone()));
        }
        match (i + 1..truth.len()).find(|&j| is_call(&truth[j])) {
            Some(next) if managed(&truth[next]) => at = Some(next),
            Some(next) => {
                out.push(("0".to_string(), truth[next].address.clone()));
                at = hop(i + 1);
            }
            None => at = None,
        }
    }
    out
}

fn reported(report: &Report) -> Vec<(String, String)> {
    report.calls[0]
        .frames
        .as_ref()
        .unwrap()
        .iter()
        .map(|f| (f.function.clone().unwrap_or_else(|| "0".into()), f.ip.clone()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn synchronous_walks_match_the_oracle(
        // Deep stacks too: the runtime records a walk's frames a batch at a time, so walks of
        // hundreds of frames pause and resume, with and without contexts.
        stack in prop_oneof![pieces(8), deep_pieces(6)],
        from in context(),
        windows in any::<bool>(),
        flags in 0u32..2,
    ) {
        let platform = if windows { "windows" } else { "unix" };
        let text = scenario_text(platform, &stack, from, flags);
        let scenario = Scenario::parse("generated.toml", &text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let report = scenario.run();
        let call = &report.calls[0];
        prop_assert!(report.faults.is_empty(), "{:?}", report.faults);
        let truth = call.ground_truth.as_ref().unwrap();
        let want = expected(truth);
        prop_assert_eq!(reported(&report), want.clone(), "{}", report.render());
        let hr = call.hresult_name.as_deref().unwrap();
        prop_assert_eq!(hr, if want.is_empty() { "E_FAIL" } else { "S_OK" });
        let size = if flags == 1 { 1232 } else { 0 };
        prop_assert!(call.frames.as_ref().unwrap().iter().all(|f| f.context_size == size));
    }

    #[test]
    fn runs_are_deterministic(stack in pieces(6), from in context()) {
        let text = scenario_text("unix", &stack, from, 1);
        let scenario = Scenario::parse("generated.toml", &text).unwrap();
        let a = serde_json::to_string(&scenario.run()).unwrap();
        let b = serde_json::to_string(&scenario.run()).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn aborting_at_any_frame_reports_exactly_that_many(
        (stack, at) in prop_oneof![
            (pieces(6), 0usize..12),
            // Around the ends of the runtime's batches of frames.
            (deep_pieces(6), prop_oneof![250usize..262, 506usize..518]),
        ]
    ) {
        let mut text = scenario_text("unix", &stack, "pinvoke", 0);
        text.push_str(&format!("callback = {{ return = \"S_FALSE\", at = {at} }}\n"));
        let report = Scenario::parse("generated.toml", &text).unwrap().run();
        let total = expected(report.calls[0].ground_truth.as_ref().unwrap()).len();
        let got = report.calls[0].frames.as_ref().unwrap().len();
        if at < total {
            prop_assert_eq!(got, at + 1);
            prop_assert_eq!(report.calls[0].hresult_name.as_deref(), Some("CORPROF_E_STACKSNAPSHOT_ABORTED"));
        } else {
            prop_assert_eq!(got, total);
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_seeds_never_panic_and_stay_bounded(rip in any::<u64>(), rsp in any::<u64>(), rbp in any::<u64>(), windows in any::<bool>()) {
        let platform = if windows { "windows" } else { "unix" };
        let mut text = scenario_text(platform, &[fixtures::strategies::Piece::Managed(0, 2)], "ObjectAllocated", 1);
        text.push_str(&format!("seed = {{ rip = {}, rsp = {}, rbp = {} }}\n", rip as i64, rsp as i64, rbp as i64));
        let report = Scenario::parse("generated.toml", &text).unwrap().run();
        prop_assert!(report.calls[0].frames.as_ref().unwrap().len() <= sim_clr::MAX_WALK_FRAMES);
    }
}

proptest! {
    /// A function's machine code built once and moved is the code built where it lies: what
    /// lets a file's functions of one shape share one build.
    #[test]
    fn moved_machine_code_equals_code_built_in_place(shape in fixtures::strategies::function_shape(), page in 1u64..0x10_0000) {
        use sim_clr::code::machine::MachineCode;
        let (first, there) = (0x7f00_0000_0000, 0x7f00_0000_0000 + page * 0x1000 + 0x10);
        let size = 0x400;
        if let Ok(built) = MachineCode::build(&shape, first, size) {
            let in_place = MachineCode::build(&shape, there, size).expect("it builds at the first base");
            if let Some(moved) = built.moved_to(there) {
                prop_assert_eq!(moved, in_place);
            }
        }
    }
}
