//! Small files that parse but ask for something without end: every one ends its run with a
//! clear outcome, or is refused at its line, in bounded time and memory.

use corprof::os::Sync;
use sim_clr::process::{Process, SimOs, Strategy};
use sim_clr::scenario::Scenario;
use std::sync::Arc;
use std::time::Duration;

const APP: &str = "[[code]]\nname = \"App::Main\"\nkind = \"jit\"\n[[threads]]\nname = \"main\"\nframes = [{ fn = \"App::Main\" }]\n";

/// Every outcome of 20 random schedules of `text`, with the first failure's message.
fn explored(text: &str) -> (Vec<String>, String) {
    let p = Process::new(Scenario::parse("hostile.toml", text).unwrap());
    let report = p.explore(Strategy::Random, 20, 1, |_, _| {});
    let message = report.first_failure.map(|f| f.fault.message).unwrap_or_default();
    (report.outcomes.into_keys().collect(), message)
}

#[test]
fn a_handler_that_raises_its_own_callback_overflows_the_stack() {
    let handlers = [
        ("MONITOR_EXCEPTIONS", "exception_thrown = [\"throw\"]", "throw"),
        ("MONITOR_THREADS", "thread_destroyed = [\"exit\"]", "exit"),
        (
            "MONITOR_EXCEPTIONS",
            "exception_thrown = [\"loop 2\", \"throw\", \"end\"]",
            "throw",
        ),
    ];
    for (mask, handler, step) in handlers {
        let text = format!(
            "platform = \"windows\"\n[runtime]\nevent_mask = [\"{mask}\"]\n[profiler]\n{handler}\n{APP}program = [\"{step}\", \"exit\"]\n"
        );
        let (kinds, message) = explored(&text);
        assert_eq!(kinds, ["stack_overflow"], "{handler}: {message}");
        assert!(message.contains("`callback_depth`"), "{message}");
        // A smaller limit is reached sooner; the default is 64.
        let limited = format!("{text}[limits]\ncallback_depth = 3\n");
        let (_, message) = explored(&limited);
        assert!(message.contains("top of 3 nested"), "{message}");
    }
    let refused =
        format!("platform = \"windows\"\n{APP}program = [\"exit\"]\n[limits]\ncallback_depth = 1\n");
    let err = Scenario::parse("hostile.toml", &refused).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (10, "callback_depth"), "{err}");
}

#[test]
fn declared_locks_and_events_are_limited_and_each_keeps_its_own_id() {
    let max = sim_clr::scenario::MAX_NAMES;
    for field in ["locks", "events"] {
        let names = |n: usize| {
            (0..n)
                .map(|i| format!("\"n{i}\""))
                .collect::<Vec<_>>()
                .join(",\n")
        };
        let text = |n: usize| format!("platform = \"windows\"\n{field} = [\n{}\n]\n{APP}", names(n));
        assert!(Scenario::parse("names.toml", &text(max)).is_ok());
        let err = Scenario::parse("names.toml", &text(max + 1)).unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (max + 3, field), "{err}");
        assert!(err.message.contains("at most 4096"), "{err}");
    }
}

/// Profiler code creates more mutexes than 16 bits can number: the last is still its own
/// mutex, not the runtime's loader lock (mutex 0), which `main` holds meanwhile.
#[test]
fn a_mutex_created_past_65536_is_its_own() {
    let text = format!(
        "platform = \"windows\"\nevents = [\"held\", \"go\"]\n{APP}program = [\"lock loader\", \"set_event held\", \"wait_event go\", \"unlock loader\"]\n\
         [[code]]\nname = \"sampler!loop\"\nkind = \"native\"\n[[threads]]\nname = \"sampler\"\nkind = \"native\"\nframes = [{{ fn = \"sampler!loop\" }}]\n\
         [limits]\nidle_steps = 1000000\n"
    );
    let mut p = Process::new(Scenario::parse("mutexes.toml", &text).unwrap());
    let body = |_: &sim_clr::Runtime, os: &SimOs| {
        let held = os.event_create("held");
        let go = os.event_create("go");
        // The runtime's locks come first: the last one created gets id 65,536.
        let created = (1 << 16) + 1 - sim_clr::process::program::RUNTIME_LOCKS.len();
        let mut last = None;
        for i in 0..created {
            last = Some(os.mutex_create(&format!("m{i}")));
        }
        let last = last.expect("one at least");
        assert!(os.event_wait(held, Duration::from_secs(3600)));
        os.mutex_lock(last);
        os.event_set(go);
        os.mutex_unlock(last);
    };
    p.thread_body("sampler", Arc::new(body)).unwrap();
    let report = p.explore(Strategy::Random, 2, 1, |_, _| {});
    assert_eq!(
        report.outcomes.keys().collect::<Vec<_>>(),
        ["ok"],
        "{:?}",
        report.first_failure
    );
}

/// An error is one line in the project's words, with its column, whatever the file holds.
#[test]
fn messages_are_one_line_with_a_column_and_no_terminal_escapes() {
    let cases = [
        (
            "platform = \"unix\"\n[[co\u{1b}[31mde]]\n",
            "bad\nname.toml",
            "bad\\nname.toml:2:5: field `co\\u{1b}[31mde`: invalid table header: expected `.`, `]]`",
        ),
        (
            "platform = \"unix\"\n[[code]]\nname = 3\n",
            "types.toml",
            "types.toml:3:8: field `name`: expected a string, found integer `3`",
        ),
        (
            &format!("platform = \"unix\"\n{APP}program = [\"spin 1\", \"loop 2\"]\n"),
            "loop.toml",
            "loop.toml:8:22: field `program`: this `loop` or `if_alive` block has no `end`",
        ),
    ];
    for (text, file, expected) in cases {
        let message = Scenario::parse(file, text).unwrap_err().to_string();
        assert_eq!(message, expected);
    }
}

/// In the frozen state `simclr run` performs its calls in, a thread that starts later does
/// not exist: `EnumThreads` does not list it, and it cannot make a call.
#[test]
fn threads_that_start_later_do_not_exist_in_a_frozen_run() {
    let file = |caller: &str| {
        format!(
            "platform = \"unix\"\n{APP}program = [\"spawn w\", \"exit\"]\n[[threads]]\nname = \"w\"\nstart = \"spawned\"\nframes = [{{ fn = \"App::Main\" }}]\nprogram = [\"exit\"]\n\
             [[calls]]\ncaller = \"{caller}\"\napi = \"EnumThreads\"\n"
        )
    };
    let report = Scenario::parse("later.toml", &file("main")).unwrap().run();
    assert_eq!(report.calls[0].result.as_deref(), Some("[main]"));
    let err = Scenario::parse("later.toml", &file("w")).unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (15, "caller"), "{err}");
    assert!(err.message.contains("starts later"), "{err}");
}

/// The frames a file's walks cover are limited, nested walks counted once per callback: a
/// nested walk at every callback of an n-frame walk covers n² frames, and a small file could
/// ask for billions. Just under the limit is accepted; one frame more is an error at the call.
#[test]
fn the_frames_all_walks_cover_are_limited() {
    let file = |frames: usize| {
        format!(
            "platform = \"unix\"\n[[code]]\nname = \"N\"\nkind = \"native\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\nframe_size = 16\n\
             [[threads]]\nname = \"t\"\nframes = [{{ fn = \"M\", repeat = {} }}, {{ fn = \"N\" }}]\n\
             [[calls]]\ncaller = \"t\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\n\
             [[calls.nested]]\nat = \"every\"\napi = \"DoStackSnapshot\"\n",
            frames - 1
        )
    };
    // n frames walked, and n more at each of n callbacks: n + n², against 2^19.
    let fits = 723; // 723 + 723² = 523,452
    assert!(fits + fits * fits <= sim_clr::scenario::MAX_WALKED_FRAMES);
    assert!(Scenario::parse("walks.toml", &file(fits)).is_ok());
    let e = Scenario::parse("walks.toml", &file(fits + 1)).unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (12, "calls"), "{e}");
    assert!(e.to_string().contains("524288 frames in all"), "{e}");
}
