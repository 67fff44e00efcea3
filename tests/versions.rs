//! Runtime versions: a scenario answers as CoreCLR 3.1, .NET 8, 9 or 10 (`[runtime] version`,
//! the default 8.0), each difference as the real runtimes showed it (3.1, 8.0) or as the
//! source has it (9.0, 10.0), and bad versions are errors with their line.

use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::{FrameReport, Scenario};

/// The bundled scenario of what differs on .NET 8.
const NET8: &str = include_str!("../fixtures/scenarios/net8-differences.toml");

/// The callbacks of call `index` (0-based) of a run of `scenario`.
fn walk(scenario: &Scenario, index: usize) -> Vec<FrameReport> {
    let mut report = scenario.run();
    report.calls.swap_remove(index).frames.expect("a walk")
}

/// The callbacks of call `index` as `expect_stack` writes them.
fn stack(scenario: &Scenario, index: usize) -> Vec<String> {
    let name = |f: FrameReport| f.method.or(f.function).unwrap_or_else(|| "0".into());
    walk(scenario, index).into_iter().map(name).collect()
}

/// The context sizes the callbacks of call `index` received.
fn context_sizes(scenario: &Scenario, index: usize) -> Vec<u32> {
    walk(scenario, index).iter().map(|f| f.context_size).collect()
}

#[test]
fn each_version_walks_the_same_stacks_as_its_real_runtime() {
    let net8 = Scenario::parse("net8.toml", NET8).unwrap();
    let core31 = Scenario::parse_as("net8.toml", NET8, Some(RuntimeVersion::Core31)).unwrap();
    assert_eq!(net8.config.version, RuntimeVersion::Net8);
    assert_eq!(core31.config.version, RuntimeVersion::Core31);
    // The reverse P/Invoke's native run: a funcId 0 on 3.1 only.
    let sandwich = |s: &Scenario| stack(s, 0);
    assert_eq!(
        sandwich(&net8),
        [
            "Program::Inner",
            "Program::Inner",
            "Program::Inner",
            "Program::Outer",
            "Program::Outer",
            "Program::Main",
            "0"
        ]
    );
    assert_eq!(
        sandwich(&core31),
        [
            "Program::Inner",
            "Program::Inner",
            "Program::Inner",
            "0",
            "Program::Outer",
            "Program::Outer",
            "Program::Main",
            "0"
        ]
    );
    // The CONTEXT: 3104 bytes on .NET 8 for Unix, 1232 on 3.1.
    assert!(context_sizes(&net8, 0).iter().all(|&s| s == 3104));
    assert!(context_sizes(&core31, 0).iter().all(|&s| s == 1232));
    // A thread's start: no managed frame below the start method on .NET 8.
    assert_eq!(stack(&net8, 3), ["Program::Inner", "Program::Started", "0"]);
    assert_eq!(
        stack(&core31, 3),
        [
            "Program::Inner",
            "Program::Started",
            "System.Threading.ThreadHelper::ThreadStart_Context",
            "System.Threading.ExecutionContext::RunInternal",
            "System.Threading.ThreadHelper::ThreadStart",
            "0"
        ]
    );
}

#[test]
fn a_frame_in_a_loop_runs_the_osr_body_from_net8_on() {
    for version in RuntimeVersion::ALL {
        let osr = version != RuntimeVersion::Core31;
        let scenario = Scenario::parse_as("net8.toml", NET8, Some(version)).unwrap();
        let frames = walk(&scenario, 1);
        let poll = &frames[1];
        assert_eq!(
            poll.method.as_deref().or(poll.function.as_deref()),
            Some("Program::Poll")
        );
        // The same FunctionID as the method's, whatever code runs.
        let base = scenario.code.by_name("Program::Poll").unwrap();
        let id = scenario.code.function(base).function_id;
        assert_eq!(poll.func_id, format!("{:#x}", id.0), "{version}");
        let ip = u64::from_str_radix(poll.ip.trim_start_matches("0x"), 16).unwrap();
        assert_eq!(
            !scenario.code.function(base).contains(ip),
            osr,
            "{version}: {ip:#x}"
        );
        assert_eq!(
            scenario.code.by_name("Program::Poll [OSR]").is_some(),
            osr,
            "{version}"
        );
    }
}

#[test]
fn a_file_without_a_version_answers_as_net8() {
    let text = |platform: &str| {
        format!(
            "platform = \"{platform}\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[threads]]\nname = \"t\"\nframes = [{{ fn = \"M\" }}]\n\
             [[calls]]\ncaller = \"t\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\nflags = [\"REGISTER_CONTEXT\"]\n"
        )
    };
    let unix = Scenario::parse("unix.toml", &text("unix")).unwrap();
    assert_eq!(unix.config.version, RuntimeVersion::Net8);
    assert!(context_sizes(&unix, 0).iter().all(|&s| s == 3104));
    // Windows' CONTEXT is the operating system's, the same in every version.
    let windows = Scenario::parse("windows.toml", &text("windows")).unwrap();
    assert!(context_sizes(&windows, 0).iter().all(|&s| s == 1232));
    // An explicit context_size wins over the version's.
    let sized = text("unix").replace(
        "platform = \"unix\"\n",
        "platform = \"unix\"\n[runtime]\ncontext_size = 2000\n",
    );
    let sized = Scenario::parse("sized.toml", &sized).unwrap();
    assert!(context_sizes(&sized, 0).iter().all(|&s| s == 2000));
}

#[test]
fn a_bad_version_or_in_loop_is_an_error_with_its_line() {
    let head = "platform = \"unix\"\n[runtime]\nversion = \"7.0\"\n";
    let err = Scenario::parse("v.toml", head).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (3, "version"), "{err}");
    assert!(err.message.contains("`3.1`, `8.0`, `9.0`, `10.0`"), "{err}");
    for (frames, why) in [
        ("[{ fn = \"N\", in_loop = true }]", "only a JIT-compiled method"),
        (
            "[{ template = \"thread_start\", in_loop = true }]",
            "stands alone",
        ),
        (
            "[{ frame = \"GCFrame\", in_loop = true }, { fn = \"M\" }]",
            "no offset, funclet or in_loop",
        ),
    ] {
        let text = format!(
            "platform = \"unix\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[code]]\nname = \"N\"\nkind = \"r2r\"\n\
             [[threads]]\nname = \"t\"\nframes = {frames}\n"
        );
        for version in RuntimeVersion::ALL {
            let err = Scenario::parse_as("l.toml", &text, Some(version)).unwrap_err();
            assert_eq!(err.line, 10, "{version}: {err}");
            assert!(err.message.contains(why), "{version}: {err}");
        }
    }
    // A code version is not what loops (its method is), and the OSR bodies' names are taken.
    let version_in_loop = "platform = \"unix\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[code]]\nname = \"M1\"\nkind = \"jit\"\nversion_of = \"M\"\n\
         [[threads]]\nname = \"t\"\nframes = [{ fn = \"M1\", in_loop = true }, { fn = \"M\" }]\n";
    let err = Scenario::parse("v.toml", version_in_loop).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (11, "in_loop"), "{err}");
    assert!(err.message.contains("not one of its code versions"), "{err}");
    let taken = "platform = \"unix\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[code]]\nname = \"M [OSR]\"\nkind = \"jit\"\n";
    let err = Scenario::parse("o.toml", taken).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (6, "name"), "{err}");
    assert!(err.message.contains("OSR bodies"), "{err}");
    // Nor are the instrumented tiers' (dynamic PGO, from 8.0).
    let taken = taken.replace("M [OSR]", "M [instrumented]");
    let err = Scenario::parse("i.toml", &taken).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (6, "name"), "{err}");
    assert!(err.message.contains("instrumented tiers"), "{err}");
}

/// A thread running a filter funclet (its exception dispatch laid out by the
/// `filter_dispatch` template), walked from a P/Invoke in the filter.
const IN_FILTER: &str = r#"
platform = "unix"
[[code]]
name = "App::Work"
kind = "jit"
[[code]]
name = "App::Filtered"
kind = "jit"
[[code]]
name = "App::Thrower"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "t"
frames = [
  { fn = "App::Work" },
  { fn = "App::Filtered", funclet = "filter" },
  { template = "filter_dispatch" },
  { fn = "App::Thrower" },
  { fn = "App::Filtered" },
  { fn = "App::Main" },
  { fn = "host!main" },
]
[[calls]]
caller = "t"
from = "pinvoke"
api = "DoStackSnapshot"
[[calls]]
caller = "t"
from = "pinvoke"
api = "GetFunctionFromIP"
ip = { fn = "System.Runtime.EH::DispatchEx", offset = 8 }
"#;

#[test]
fn a_filter_walk_shows_managed_dispatch_on_net9_and_hides_it_on_net10() {
    let below = ["App::Thrower", "App::Filtered", "App::Main", "0"];
    let native: Vec<&str> = ["App::Work", "App::Filtered", "0"]
        .into_iter()
        .chain(below)
        .collect();
    let managed: Vec<&str> = [
        "App::Work",
        "App::Filtered",
        "0",
        "System.Runtime.ExceptionServices.InternalCalls::RhpCallFilterFunclet",
        "System.Runtime.EH::FindFirstPassHandler",
        "System.Runtime.EH::DispatchEx",
        "System.Runtime.EH::RhThrowEx",
        "0",
    ]
    .into_iter()
    .chain(below)
    .collect();
    // 3.1 and 8 dispatch in native code; on 10 the managed dispatch is there but not reported,
    // nor is the native run of the QCall that entered the filter.
    let dispatch_names = ["System.Runtime.EH::DispatchEx"];
    for (version, expected) in [
        (RuntimeVersion::Core31, &native),
        (RuntimeVersion::Net8, &native),
        (RuntimeVersion::Net9, &managed),
        (RuntimeVersion::Net10, &native),
    ] {
        let text = if version.dispatches_exceptions_in_managed_code() {
            IN_FILTER.to_string()
        } else {
            // No managed dispatch code to look an IP up in: look up the thrower instead.
            IN_FILTER.replace(dispatch_names[0], "App::Thrower")
        };
        let scenario = Scenario::parse_as("filter.toml", &text, Some(version)).unwrap();
        assert_eq!(&stack(&scenario, 0), expected, "{version}");
        // A code lookup still finds the hidden methods: only the walk leaves them out.
        let report = scenario.run();
        assert_eq!(report.calls[1].hresult_name.as_deref(), Some("S_OK"), "{version}");
        assert_eq!(
            scenario.code.by_name(dispatch_names[0]).is_some(),
            version.dispatches_exceptions_in_managed_code(),
            "{version}"
        );
    }
}

#[test]
fn a_walk_from_an_enter_hook_has_no_frame_to_start_from_on_net10() {
    let hook = include_str!("../fixtures/scenarios/enter-hook-walk.toml");
    for version in RuntimeVersion::ALL {
        let scenario = Scenario::parse_as("enter-hook-walk.toml", hook, Some(version)).unwrap();
        let report = scenario.run();
        let walk = &report.calls[0];
        if version.hooks_push_a_frame() {
            assert_eq!(walk.hresult_name.as_deref(), Some("S_OK"), "{version}");
            assert_eq!(walk.frames.as_ref().map(Vec::len), Some(3), "{version}");
        } else {
            // No Frame below the hook: the walk stops nowhere (dotnet/runtime#130220).
            assert_eq!(walk.hresult_name.as_deref(), Some("E_FAIL"), "{version}");
            assert_eq!(walk.frames.as_ref().map(Vec::len), Some(0), "{version}");
        }
    }
}

#[test]
fn net10_code_lookups_take_no_lock_and_need_no_triggers_scope() {
    let locked = include_str!("../fixtures/scenarios/code-manager-lock.toml");
    let allocating = r#"
platform = "unix"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT", "ENABLE_OBJECT_ALLOCATED", "MONITOR_OBJECT_ALLOCATED"]
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Main" }, { fn = "host!main" }]
[[calls]]
caller = "main"
from = "ObjectAllocated"
api = "GetFunctionFromIP2"
ip = { fn = "App::Main", offset = 0 }
"#;
    let answers = |text: &str, version| {
        let scenario = Scenario::parse_as("s.toml", text, Some(version)).unwrap();
        let report = scenario.run();
        let hrs: Vec<String> = report
            .calls
            .iter()
            .map(|c| c.hresult_name.clone().unwrap_or_default())
            .collect();
        (hrs, report.faults.len())
    };
    for version in RuntimeVersion::ALL {
        let (lock, faults) = answers(locked, version);
        let refused = lock
            .iter()
            .filter(|h| *h == "CORPROF_E_ASYNCHRONOUS_UNSAFE")
            .count();
        if version.code_lookups_take_the_reader_lock() {
            assert_eq!((refused, faults), (2, 1), "{version}: {lock:?}");
        } else {
            // Nothing refused, and the sampler that waited for the suspended writer does not.
            assert_eq!((refused, faults), (0, 0), "{version}: {lock:?}");
        }
        // GetFunctionFromIP2 from ObjectAllocated (in a callback, not in a triggers scope).
        let (allocated, _) = answers(allocating, version);
        let expected = if version.code_version_lookups_trigger() {
            "CORPROF_E_UNSUPPORTED_CALL_SEQUENCE"
        } else {
            "S_OK"
        };
        assert_eq!(allocated, [expected], "{version}");
    }
}
