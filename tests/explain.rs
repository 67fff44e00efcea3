//! `simclr explain`: the SVG it draws parses as XML and shows what the walk did, the picture in
//! the README is the current one, and bad arguments are errors.

use std::path::{Path, PathBuf};
use std::process::Command;

fn simclr(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_simclr"))
        .args(args)
        .output()
        .expect("simclr runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/scenarios")
        .join(name)
}

/// `simclr explain FILE --call CALL -o OUT`.
fn run_explain(file: &Path, call: &str, out: &Path) -> std::process::Output {
    simclr(&[
        "explain",
        file.to_str().unwrap(),
        "--call",
        call,
        "-o",
        out.to_str().unwrap(),
    ])
}

/// Draws `call` of `scenario` into a temporary file and returns the SVG.
fn explain(scenario: &str, call: &str) -> String {
    // Tests run in parallel and may draw the same call: each drawing gets its own file.
    static DRAWINGS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = DRAWINGS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{scenario}-{call}-{n}.svg"));
    let run = run_explain(&fixture(scenario), call, &out);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    std::fs::read_to_string(out).unwrap()
}

/// The text of every `<text>` element with class `class` (any, when `None`).
fn texts(doc: &roxmltree::Document<'_>, class: Option<&str>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter(|n| class.is_none_or(|c| n.attribute("class").is_some_and(|a| a.split(' ').any(|x| x == c))))
        .map(|n| n.text().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_picture_shows_frames_chain_start_and_callbacks() {
    let svg = explain("reverse-pinvoke-sandwich.toml", "1");
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    assert!(doc
        .root_element()
        .has_tag_name(("http://www.w3.org/2000/svg", "svg")));
    let all = texts(&doc, None);
    // Every frame of the ground truth, each explicit Frame, and every callback in order.
    for name in [
        "libprofiler.so!PInvokeEntry",
        "Program::Inner",
        "libcoreclr.so!UMThunkStub",
        "dotnet!corehost_main",
    ] {
        assert!(all.iter().any(|t| t == name), "no frame {name}");
    }
    let frames = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("frame"))
        .count();
    assert_eq!(frames, 11, "one box per call of the stack");
    let chain = texts(&doc, None)
        .into_iter()
        .filter(|t| t.starts_with("<") && t.ends_with("Frame>"))
        .count();
    assert_eq!(chain, 3, "InlinedCallFrame, UMThkCallFrame, InlinedCallFrame");
    let callbacks = texts(&doc, Some("callback"));
    assert_eq!(callbacks.len(), 8);
    assert!(callbacks[0].starts_with("#1 Program::Inner"));
    assert!(callbacks[3].starts_with("#4 funcId 0 (native run)"));
    assert!(callbacks[7].starts_with("#8 funcId 0 (native run)"));
    let brackets = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("bracket"))
        .count();
    assert_eq!(brackets, 2, "one bracket per native run");
    // The walk started at the first InlinedCallFrame (the thread is in a P/Invoke).
    let start = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("start"))
        .expect("a start mark");
    let said: String = start.descendants().filter_map(|n| n.text()).collect();
    assert!(said.contains("Frame returns into"), "{said}");
    // The return-address slots are marked with the caller they return into.
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    assert!(
        titles.contains(&"return address into Program::Main"),
        "{titles:?}"
    );
    assert!(svg.contains("S_OK"));
}

#[test]
fn a_seeded_walk_starts_at_its_seed_and_a_bogus_one_is_on_no_frame() {
    let seeded = explain("unseeded-skips-top-frames.toml", "2");
    let doc = roxmltree::Document::parse(&seeded).unwrap();
    let start = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("start"))
        .unwrap();
    assert!(start
        .descendants()
        .filter_map(|n| n.text())
        .any(|t| t.contains("at the seed")));
    let bogus = explain("bad-seed-windows.toml", "3");
    let doc = roxmltree::Document::parse(&bogus).unwrap();
    let unplaced = texts(&doc, Some("unplaced"));
    assert_eq!(unplaced.len(), 1, "{unplaced:?}");
    assert!(unplaced[0].starts_with("#1 App::Main"));
}

#[test]
fn the_readme_picture_is_current() {
    let svg = explain("reverse-pinvoke-sandwich.toml", "1");
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/walk.svg")).unwrap();
    assert!(
        svg == committed,
        "docs/walk.svg is stale: cargo run --release -- explain fixtures/scenarios/reverse-pinvoke-sandwich.toml --call 1 -o docs/walk.svg"
    );
}

#[test]
fn calls_that_walk_no_thread_are_errors() {
    let file = fixture("code-info.toml");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("none.svg");
    for call in ["1", "999", "0"] {
        let run = run_explain(&file, call, &out);
        assert_eq!(run.status.code(), Some(2), "call {call}");
        assert!(String::from_utf8_lossy(&run.stderr).starts_with("error: "));
    }
}
