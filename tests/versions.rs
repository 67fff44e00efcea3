//! Runtime versions: a scenario answers as CoreCLR 3.1 or .NET 8 (`[runtime] version`, the
//! default 8.0), each difference as the real runtimes showed it, and bad versions are errors
//! with their line.

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
fn a_frame_in_a_loop_runs_the_osr_body_on_net8_only() {
    for (version, osr) in [(RuntimeVersion::Net8, true), (RuntimeVersion::Core31, false)] {
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
    let head = "platform = \"unix\"\n[runtime]\nversion = \"9.0\"\n";
    let err = Scenario::parse("v.toml", head).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (3, "version"), "{err}");
    assert!(err.message.contains("`3.1`, `8.0`"), "{err}");
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
}
