//! Code versions: a method with a tier-0 and a tier-1 body (both possibly on one stack) and a
//! ReJIT version — one `FunctionID`, several code ranges — answered as CoreCLR 3.1 does:
//! `GetCodeInfo2` gives the first (tier-0) code even for a frame running tier-1 code,
//! `GetFunctionFromIP2` gives the ReJIT id, `GetReJITIDs` and `GetCodeInfo3` name and find the
//! ReJIT versions.

use corprof::{CodeInfo, FunctionId, HResult, ProfilerInfo, ReJitId, SnapshotFrame, ThreadId};
use sim_clr::runtime::RuntimeVersion;
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

/// The thread of the lane's OSR probe (`conformance/programs/OsrProbe.cs`) calling the probe by
/// P/Invoke: in its method with a loop, in the loop's first round (`Moment::First`) or, a
/// million rounds later, in its last (`Moment::Last`: the loop runs in its OSR body on .NET
/// 8); then from the last call of its hot method without a loop (`Moment::Hot`: tier-1 code).
fn osr_thread(moment: Moment) -> String {
    let top = match moment {
        Moment::First => "{ fn = \"OsrProbe::Loop\" }",
        Moment::Last => "{ fn = \"OsrProbe::Loop\", in_loop = true }",
        Moment::Hot => "{ fn = \"OsrProbe::Hot (tier 1)\" }",
    };
    format!(
        "platform = \"unix\"\n[[code]]\nname = \"OsrProbe::Loop\"\nkind = \"jit\"\n[[code]]\nname = \"OsrProbe::Main\"\nkind = \"jit\"\n\
         [[code]]\nname = \"OsrProbe::Hot\"\nkind = \"jit\"\n\
         [[code]]\nname = \"OsrProbe::Hot (tier 1)\"\nkind = \"jit\"\nversion_of = \"OsrProbe::Hot\"\n\
         [[code]]\nname = \"dotnet!corehost_main\"\nkind = \"native\"\n[[threads]]\nname = \"t\"\n\
         frames = [{top}, {{ fn = \"OsrProbe::Main\" }}, {{ fn = \"dotnet!corehost_main\" }}]\n"
    )
}

/// Where the OSR probe is called from.
#[derive(Clone, Copy)]
enum Moment {
    First,
    Last,
    Hot,
}

/// What the probe (`conformance/probes/osr.c`) writes for one moment, asked of the simulator.
fn osr_round(version: RuntimeVersion, moment: Moment) -> String {
    let text = osr_thread(moment);
    let rt = Scenario::parse_as("osr.toml", &text, Some(version))
        .unwrap()
        .runtime();
    rt.on_thread("t", CallContext::PInvoke, |rt| {
        let mut first = None;
        let mut cb = |f: &SnapshotFrame<'_>| {
            if !f.func_id.is_null() && first.is_none() {
                first = Some((f.func_id, f.ip));
            }
            HResult::S_OK
        };
        assert_eq!(rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), 0, None, 0), HResult::S_OK);
        let (function, ip) = first.expect("a managed frame");
        let inside = |r: &CodeInfo| (r.start_address..r.start_address + r.size).contains(&ip);
        let mut regions = [CodeInfo::default(); 8];
        let n = rt.get_code_info2(function, 8, Some(&mut regions)).unwrap();
        let in_code_info2 = regions[..n as usize].iter().any(inside);
        let starts = rt.get_native_code_start_addresses(function, ReJitId(0)).unwrap();
        let body = starts
            .iter()
            .enumerate()
            .filter(|(_, &s)| s <= ip)
            .max_by_key(|(_, &s)| s)
            .map_or(-1, |(i, _)| i as i64);
        let info4 = rt.get_code_info4(starts[0], 8, Some(&mut regions)).err().unwrap_or(HResult::S_OK);
        format!(
            "IP in GetCodeInfo2 {}, GetNativeCodeStartAddresses 0x00000000 with {} bodies, the IP in body {body}, GetCodeInfo4 {:#010x}",
            u8::from(in_code_info2),
            starts.len(),
            info4.0
        )
    })
    .unwrap()
}

#[test]
fn osr_bodies_are_native_code_versions_as_each_real_runtime_lists_them() {
    for (version, real) in [
        (RuntimeVersion::Core31, "3.1.23"),
        (RuntimeVersion::Net8, "8.0.4"),
    ] {
        let line = format!(
            "osr: first round: {}; last round: {}; hot method's last call: {}\n",
            osr_round(version, Moment::First),
            osr_round(version, Moment::Last),
            osr_round(version, Moment::Hot)
        );
        let path = format!(
            "{}/conformance/probes/osr-{real}.expected",
            env!("CARGO_MANIFEST_DIR")
        );
        assert_eq!(line, std::fs::read_to_string(path).unwrap(), "{version}");
    }
}
