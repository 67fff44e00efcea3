//! Code versions: a method with a tier-0 and a tier-1 body (both possibly on one stack) and a
//! ReJIT version — one `FunctionID`, several code ranges — answered as CoreCLR 3.1 does:
//! `GetCodeInfo2` gives the first (tier-0) code even for a frame running tier-1 code,
//! `GetFunctionFromIP2` gives the ReJIT id, `GetReJITIDs` and `GetCodeInfo3` name and find the
//! ReJIT versions.

use corprof::{CodeInfo, FunctionId, HResult, ProfilerInfo, ReJitId, SnapshotFrame, ThreadId};
use sim_clr::scenario::Scenario;
use sim_clr::CallContext;

const SCENARIO: &str = r#"
platform = "unix"
[[code]]
name = "App::Hot"
kind = "jit"
[[code]]
name = "App::Hot (tier 1)"
kind = "jit"
version_of = "App::Hot"
[[code]]
name = "App::Hot (rejit 1)"
kind = "jit"
version_of = "App::Hot"
rejit = 1
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Hot (tier 1)" }, { fn = "App::Hot" }, { fn = "App::Hot (rejit 1)" }, { fn = "App::Main" }, { fn = "host!main" }]
"#;

#[test]
fn versions_share_the_function_id_and_get_code_info2_gives_the_first_code() {
    let rt = Scenario::parse("versions.toml", SCENARIO).unwrap().runtime();
    let hot = rt.with_code(|c| c.function(c.by_name("App::Hot").unwrap()).function_id);
    let frames: Vec<(FunctionId, u64)> = rt
        .on_thread("main", CallContext::PInvoke, |rt| {
            let mut frames = Vec::new();
            let mut cb = |f: &SnapshotFrame<'_>| {
                frames.push((f.func_id, f.ip));
                HResult::S_OK
            };
            assert_eq!(
                rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), 0, None, 0),
                HResult::S_OK
            );
            frames
        })
        .unwrap();
    let ids: Vec<FunctionId> = frames.iter().map(|f| f.0).collect();
    assert_eq!(
        &ids[..3],
        [hot, hot, hot],
        "every version is reported as the method"
    );
    // From a native thread (the SYNC APIs need one, or a callback).
    let rejits: Vec<ReJitId> = frames[..3]
        .iter()
        .map(|&(_, ip)| {
            let (f, rejit) = rt.get_function_from_ip2(ip).unwrap();
            assert_eq!(f, hot);
            rejit
        })
        .collect();
    assert_eq!(rejits, [ReJitId(0), ReJitId(0), ReJitId(1)]);
    let mut code = [CodeInfo::default(); 2];
    assert_eq!(rt.get_code_info2(hot, 2, Some(&mut code)), Ok(1));
    let inside = |ip: u64, c: &CodeInfo| ip >= c.start_address && ip < c.start_address + c.size;
    assert!(
        inside(frames[1].1, &code[0]),
        "the tier-0 frame is in GetCodeInfo2's range"
    );
    assert!(!inside(frames[0].1, &code[0]), "the tier-1 frame is outside it");
    assert_eq!(rt.get_rejit_ids(hot), Ok(vec![ReJitId(1)]));
    assert_eq!(rt.get_code_info3(hot, ReJitId(1), 2, Some(&mut code)), Ok(1));
    assert!(
        inside(frames[2].1, &code[0]),
        "GetCodeInfo3 finds the ReJIT version's code"
    );
    assert_eq!(
        rt.get_code_info3(hot, ReJitId(7), 2, Some(&mut code)),
        Err(HResult::CORPROF_E_FUNCTION_NOT_COMPILED)
    );
    // SYNC entrypoints that may trigger a GC: not from a P/Invoke on a managed thread.
    let refused = rt
        .on_thread("main", CallContext::PInvoke, |rt| rt.get_rejit_ids(hot))
        .unwrap();
    assert_eq!(refused, Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE));
}

#[test]
fn a_version_must_follow_a_method_with_metadata() {
    for (bad, why) in [
        (
            "[[code]]\nname = \"V\"\nkind = \"jit\"\nversion_of = \"Later\"\n[[code]]\nname = \"Later\"\nkind = \"jit\"\n",
            "declared before",
        ),
        ("[[code]]\nname = \"N\"\nkind = \"native\"\n[[code]]\nname = \"V\"\nkind = \"jit\"\nversion_of = \"N\"\n", "metadata"),
        ("[[code]]\nname = \"V\"\nkind = \"jit\"\nrejit = 2\n", "version_of"),
    ] {
        let err = Scenario::parse("bad.toml", &format!("platform = \"unix\"\n{bad}"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(why), "{err}");
        assert!(
            err.contains("field `version_of`") || err.contains("field `rejit`"),
            "the field at fault is named: {err}"
        );
    }
}
