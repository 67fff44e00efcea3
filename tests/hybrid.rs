//! Hybrid walks of simulated threads whose native frames are real code: the bundled walk
//! scenarios (pinned), random processes (a property test, shrinking to a minimal stack), and
//! a frame-pointer-only walker that the frameless scenarios catch.

use corprof::ProfilerInfo;
use fixtures::hybrid::{describe, expected, judge, walk, Judged, Mode};
use fixtures::random_stack::{random_stack, scenario};
use proptest::prelude::*;
use sim_clr::runtime::{Runtime, RuntimeVersion};
use sim_clr::scenario::Scenario;
use sim_clr::CallContext;
use walker::hybrid::{resolve_with, HybridFrame, HybridOutcome};

/// The bundled walk scenario named `name`.
fn walk_scenario(name: &str) -> Scenario {
    fixtures::walks()
        .unwrap()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap()
}

#[test]
fn bundled_walks_match_their_ground_truth_and_are_pinned() {
    for scenario in fixtures::walks().unwrap() {
        let runtime = scenario.runtime();
        let mut text = format!("{}\n\n", scenario.description);
        for &mode in Mode::for_platform(runtime.platform()) {
            let judged = walk(&runtime, "main", "sampler", mode).unwrap();
            assert_eq!(
                judged.mismatch,
                None,
                "{}\n{}",
                scenario.name,
                describe(&runtime, &judged)
            );
            text.push_str(&format!(
                "{mode:?} walk (got | ground truth):\n{}\n",
                describe(&runtime, &judged)
            ));
        }
        insta::assert_snapshot!(format!("walk-{}", scenario.name), text);
    }
}

#[test]
fn the_stub_scenario_truncates_only_at_the_interrupted_stub() {
    let scenario = walk_scenario("stub-without-unwind-info");
    let runtime = scenario.runtime();
    let judged = walk(&runtime, "main", "sampler", Mode::Hybrid).unwrap();
    let markers: Vec<usize> = judged
        .frames
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f, HybridFrame::Truncated(_)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(markers, [1], "{}", describe(&runtime, &judged));
    // Every frame below the marker is there: the stub in the middle unwinds by its RBP frame.
    assert_eq!(judged.frames.len(), judged.expected.len() + 1);
}

#[test]
fn a_run_below_a_reverse_pinvoke_is_expanded_on_every_version_and_platform() {
    // The 13 native frames between App::Inner and App::Outer are one run with its
    // `funcId == 0` callback on 3.1 and on 8.0 (lane cases `t_sandwich_framed`, `t_uco`): the
    // walker expands it from the callback's context, with or without unwind data for JIT code.
    let text = std::fs::read_to_string("fixtures/walks/deep-native-run.toml").unwrap();
    let natives = |frames: &[HybridFrame]| {
        frames
            .iter()
            .filter(|f| matches!(f, HybridFrame::Native { .. }))
            .count()
    };
    for version in [RuntimeVersion::Core31, RuntimeVersion::Net8] {
        for platform in ["windows", "unix"] {
            let text = text.replace("platform = \"unix\"", &format!("platform = \"{platform}\""));
            let runtime = Scenario::parse_as("deep-native-run.toml", &text, Some(version))
                .unwrap()
                .runtime();
            let judged = walk(&runtime, "main", "sampler", Mode::Hybrid).unwrap();
            let why = || format!("{version} {platform}\n{}", describe(&runtime, &judged));
            assert_eq!(judged.mismatch, None, "{}", why());
            // host!main, the root, is native too and always found.
            assert_eq!(natives(&judged.frames), 13 + 1, "{}", why());
        }
    }
}

/// The naive way: follow the RBP chain from the leaf (return address at RBP + 8, the
/// caller's RBP at RBP), resolving each IP. Right only if every frame keeps a frame pointer.
fn frame_pointer_walk(runtime: &Runtime, target: &str) -> Vec<HybridFrame> {
    let thread = runtime.thread(target).unwrap();
    let context = thread.leaf_context().unwrap();
    runtime
        .on_thread("sampler", CallContext::Thread, |rt| {
            let mut resolve = resolve_with(rt);
            let mut frame = |ip: u64| match resolve(ip) {
                Some(function) => HybridFrame::Managed { function, ip },
                None => HybridFrame::Native { ip },
            };
            let mut frames = vec![frame(context.rip)];
            let mut rbp = context.rbp;
            for _ in 0..256 {
                let (Some(next), Some(ret)) = (rt.read_memory(rbp), rt.read_memory(rbp.wrapping_add(8)))
                else {
                    break;
                };
                if ret == 0 {
                    break;
                }
                frames.push(frame(ret));
                if next <= rbp {
                    break;
                }
                rbp = next;
            }
            frames
        })
        .unwrap()
}

#[test]
fn a_frame_pointer_walker_is_caught_on_frameless_code() {
    for name in ["pinvoke-frameless-leaf", "deep-native-run", "leaf-in-prologue"] {
        let scenario = fixtures::walks()
            .unwrap()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap();
        let runtime = scenario.runtime();
        let frames = frame_pointer_walk(&runtime, "main");
        let truth = expected(&runtime, "main", Mode::Native).unwrap();
        let mismatch = judge(&frames, HybridOutcome::Complete, &truth, None);
        let judged = Judged {
            frames,
            outcome: HybridOutcome::Complete,
            expected: truth,
            mismatch,
        };
        let shown = describe(&runtime, &judged);
        assert!(
            judged.mismatch.is_some(),
            "{name}: the naive walk passed\n{shown}"
        );
        insta::assert_snapshot!(
            format!("naive-{name}"),
            format!("{}\n\n{shown}", judged.mismatch.unwrap())
        );
    }
}

#[test]
fn unwind_sections_come_from_the_module_list() {
    use corprof::modules::{Modules, SectionKind};
    let scenario = fixtures::walks()
        .unwrap()
        .into_iter()
        .find(|s| s.name == "helper-on-top")
        .unwrap();
    let unix = scenario.runtime().images();
    let kinds = |m: &corprof::modules::LoadedModule| m.sections.iter().map(|s| s.kind).collect::<Vec<_>>();
    let modules = unix.loaded_modules();
    // Unix: the shared objects with native code, never the JIT heap.
    let names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["libcoreclr.so", "native.so", "libprofiler.so"]);
    assert!(modules
        .iter()
        .all(|m| kinds(m) == [SectionKind::EhFrameHdr, SectionKind::EhFrame]));
    let hdr = modules[0].section(SectionKind::EhFrameHdr).unwrap();
    let mut version = [0u8; 1];
    unix.read_memory(hdr.address, &mut version).unwrap();
    assert_eq!(version, [1]);
    assert!(unix.read_memory(hdr.address + hdr.size, &mut version).is_err());
    // Windows: the JIT heap has unwind info too; stubs never.
    let windows = walk_scenario("helper-on-top-windows").runtime().images();
    let modules = windows.loaded_modules();
    assert!(modules.iter().any(|m| m.name == "<jit>"));
    assert!(modules
        .iter()
        .all(|m| kinds(m) == [SectionKind::Text, SectionKind::Pdata, SectionKind::Xdata]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any generated process, stopped at any instruction of its leaf: the hybrid walk (and the
    /// native one on Windows) equals the ground truth.
    #[test]
    fn random_processes_walk_to_their_ground_truth(stack in random_stack()) {
        let (text, scenario) = scenario(&stack).map_err(TestCaseError::fail)?;
        let runtime = scenario.runtime();
        for &mode in Mode::for_platform(runtime.platform()) {
            let judged = walk(&runtime, "main", "sampler", mode).map_err(TestCaseError::fail)?;
            prop_assert!(judged.mismatch.is_none(), "{mode:?}: {:?}\n{}\n{text}", judged.mismatch, describe(&runtime, &judged));
        }
    }
}

#[test]
fn get_function_from_ip_names_the_managed_frames_the_walk_reports() {
    let scenario = fixtures::walks()
        .unwrap()
        .into_iter()
        .find(|s| s.name == "deep-native-run")
        .unwrap();
    let runtime = scenario.runtime();
    let judged = walk(&runtime, "main", "sampler", Mode::Hybrid).unwrap();
    for frame in &judged.frames {
        if let HybridFrame::Managed { function, ip } = *frame {
            assert_eq!(runtime.get_function_from_ip(ip), Ok(function));
        }
    }
}

#[test]
fn code_ranges_resolve_what_the_runtime_resolves() {
    let runtime = walk_scenario("deep-native-run").runtime();
    runtime
        .on_thread("sampler", CallContext::Thread, |rt| {
            let ranges = fixtures::hybrid::code_ranges(rt).unwrap();
            let mut runtime_resolve = resolve_with(rt);
            for call in rt.thread("main").unwrap().layout.calls {
                assert_eq!(
                    ranges.resolve(call.rip),
                    runtime_resolve(call.rip),
                    "{:#x}",
                    call.rip
                );
            }
            assert_eq!(ranges.resolve(0), None);
        })
        .expect("the scenario declares `sampler`");
}

#[test]
fn bad_shapes_are_scenario_errors() {
    let file = |shape: &str, size: &str| {
        format!(
            "platform = \"unix\"\n[[code]]\nname = \"n\"\nkind = \"native\"\n{size}shape = {shape}\n[[threads]]\nname = \"t\"\nkind = \"native\"\nframes = [{{ fn = \"n\" }}]\n"
        )
    };
    for (shape, size, says) in [
        ("{ prologue = [\"push rsp\"] }", "", "RSP"),
        ("{ prologue = [\"pop rbx\"] }", "", "not a prologue instruction"),
        (
            "{ prologue = [\"sub rsp, 0x10\", \"push rbx\"] }",
            "",
            "pushes come before",
        ),
        ("{ epilogues = [\"iretq\"] }", "", "machine-frame"),
        (
            "{ prologue = [\"push rbx\"], calls = 16 }",
            "size = 0x40\n",
            "more than its size",
        ),
        ("\"fast\"", "", "expected \"leaf\""),
        ("{ prologue = [\"push rbx\"], colour = 1 }", "", "unknown key"),
    ] {
        let error = Scenario::parse("bad.toml", &file(shape, size))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("shape") && error.contains(says),
            "{shape}: {error}"
        );
    }
    let offset = "platform = \"unix\"\n[[code]]\nname = \"n\"\nkind = \"native\"\n[[threads]]\nname = \"t\"\nkind = \"native\"\nframes = [{ fn = \"n\", offset = \"epilogue:x\" }]\n";
    assert!(Scenario::parse("bad.toml", offset)
        .unwrap_err()
        .to_string()
        .contains("offset"));
}

/// A module list whose modules overlap.
struct Overlapping;

impl corprof::modules::Modules for Overlapping {
    fn loaded_modules(&self) -> Vec<corprof::modules::LoadedModule> {
        let module = |name: &str, start| corprof::modules::LoadedModule {
            name: name.into(),
            start,
            end: start + 0x2000,
            base: 0,
            sections: Vec::new(),
        };
        vec![module("a.so", 0x10000), module("b.so", 0x11000)]
    }

    fn read_memory(&self, address: u64, _: &mut [u8]) -> Result<(), corprof::os::OsError> {
        Err(corprof::os::OsError::BadAddress(address))
    }
}

#[test]
fn garbage_contexts_overlaps_and_unreadable_stacks_end_in_markers_or_errors() {
    use walker::hybrid::{HybridWalker, Stopped, Truncation};
    use walker::images::{ImageError, Images};
    use walker::unwind::{StackBounds, UnwindError};
    assert!(matches!(
        Images::load(&Overlapping),
        Err(ImageError::Overlap { .. })
    ));
    let runtime = walk_scenario("leaf-in-prologue").runtime();
    let source = runtime.images();
    let images = Images::load(&*source).unwrap();
    let unwinder = images.unwinder().unwrap();
    let thread = runtime.thread("main").unwrap();
    let leaf = thread.leaf_context().unwrap();
    let bounds = StackBounds {
        limit: thread.stack_limit,
        base: thread.stack_base,
    };
    let mut walker = HybridWalker::with_capacity(64);
    let mut none = |_| None;
    // An IP outside every module: the interrupted frame cannot be unwound.
    let mut garbage = leaf.clone();
    garbage.rip = 0xdead_beef;
    let target = Stopped {
        thread: thread.id,
        context: &garbage,
        bounds,
    };
    assert_eq!(
        walker.walk_native(&unwinder, &target, &mut |a| runtime.read_memory(a), &mut none),
        HybridOutcome::Complete
    );
    assert_eq!(
        walker.frames()[1],
        HybridFrame::Truncated(Truncation::NoUnwindInfo(0xdead_beef))
    );
    // A real IP over an unreadable stack, and over a stack outside its bounds.
    let target = Stopped {
        thread: thread.id,
        context: &leaf,
        bounds,
    };
    walker.walk_native(&unwinder, &target, &mut |_| None, &mut none);
    assert!(matches!(
        walker.frames()[1],
        HybridFrame::Truncated(Truncation::Unwind(UnwindError::MemoryRead(_)))
    ));
    let elsewhere = Stopped {
        bounds: StackBounds {
            limit: 0x1000,
            base: 0x2000,
        },
        ..target
    };
    walker.walk_native(&unwinder, &elsewhere, &mut |a| runtime.read_memory(a), &mut none);
    assert!(matches!(
        walker.frames()[1],
        HybridFrame::Truncated(Truncation::Unwind(UnwindError::OutOfBounds(_)))
    ));
    // A stack whose every word points back at the leaf: each step must move up, so it ends.
    let loop_word = leaf.rip;
    walker.walk_native(&unwinder, &target, &mut |_| Some(loop_word), &mut none);
    assert!(walker.frames().len() < 64);
    assert!(matches!(walker.frames().last(), Some(HybridFrame::Truncated(_))));
}
