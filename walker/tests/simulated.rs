//! The collector against the simulated runtime: what it collects equals the thread's ground
//! truth, and native-run contexts carry the registers a native unwinder starts from.

use corprof::{FunctionId, ProfilerInfo};
use sim_clr::scenario::Scenario;
use sim_clr::CallContext;
use simclr_walker::{snapshot, Contexts, Frame, StackBuffer, WalkOutcome};

const SCENARIO: &str = r#"
platform = "unix"
[runtime]
version = "3.1"
[[code]]
name = "App::Inner"
kind = "jit"
[[code]]
name = "App::Outer"
kind = "jit"
[[code]]
name = "native!middle"
kind = "native"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [
  { fn = "App::Inner", repeat = 2 },
  { frame = "UMThkCallFrame" },
  { fn = "native!middle", repeat = 3 },
  { frame = "InlinedCallFrame" },
  { fn = "App::Outer" },
  { fn = "host!main" },
]
"#;

#[test]
fn a_synchronous_walk_matches_the_ground_truth() {
    let scenario = Scenario::parse("walker.toml", SCENARIO).unwrap();
    let runtime = scenario.runtime();
    runtime
        .on_thread("main", CallContext::PInvoke, |rt| {
            let mut buffer = StackBuffer::with_capacity(16);
            assert_eq!(
                snapshot(
                    rt,
                    corprof::ThreadId::NULL,
                    None,
                    Contexts::NativeRuns,
                    &mut buffer
                ),
                Ok(WalkOutcome::Complete)
            );
            let thread = rt.thread("main").unwrap();
            let calls = &thread.layout.calls;
            let id = |name: &str| rt.with_code(|c| c.function(c.by_name(name).unwrap()).function_id);
            // Calls: PInvokeEntry, Inner, Inner, middle x3, Outer, host.
            let Frame::NativeRun {
                ip,
                context: Some(index),
            } = buffer.frames()[2]
            else {
                panic!("{:?}", buffer.frames())
            };
            let ctx = buffer.context(index);
            assert_eq!(ip, calls[3].rip);
            assert_eq!(ctx.rip, calls[3].rip);
            for r in corprof::Register::ALL {
                if !corprof::Register::VOLATILE.contains(&r) {
                    assert_eq!(ctx.get(r), calls[3].regs[r as usize], "{r:?}");
                }
            }
            let managed: Vec<(FunctionId, u64)> = buffer
                .frames()
                .iter()
                .filter_map(|f| match f {
                    Frame::Managed { function, ip } => Some((*function, *ip)),
                    Frame::NativeRun { .. } => None,
                })
                .collect();
            assert_eq!(
                managed,
                [
                    (id("App::Inner"), calls[1].rip),
                    (id("App::Inner"), calls[2].rip),
                    (id("App::Outer"), calls[6].rip)
                ]
            );
            assert_eq!(rt.get_function_from_ip(calls[6].rip), Ok(id("App::Outer")));
        })
        .expect("the scenario declares `main`");
}
