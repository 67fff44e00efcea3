//! The documentation matches the code: every test and scenario `docs/rules.md` names exists
//! and every rule R1–R35 has a test; every scenario field and report key is documented.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Every `` `word` `` in a Markdown text.
fn quoted(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn rules_doc_names_real_tests_and_scenarios_and_covers_r1_to_r35() {
    let doc = read("docs/rules.md");
    let tests = read("tests/rules.rs");
    let scenarios: Vec<String> = fixtures::catalog()
        .iter()
        .map(|(f, _)| f.trim_end_matches(".toml").to_string())
        .collect();
    for word in quoted(&doc) {
        if word.starts_with('r')
            && word.as_bytes().get(1).is_some_and(u8::is_ascii_digit)
            && word.contains('_')
        {
            assert!(
                tests.contains(&format!("fn {word}(")),
                "docs/rules.md names a missing test `{word}`"
            );
        }
    }
    for line in doc.lines().filter(|l| l.starts_with("| R")) {
        let cells: Vec<&str> = line.split('|').collect();
        for word in quoted(cells.get(4).copied().unwrap_or("")) {
            if word != "every walk" && !word.contains(' ') {
                assert!(
                    scenarios.contains(&word),
                    "docs/rules.md names a missing scenario `{word}`"
                );
            }
        }
    }
    for n in 1..=35 {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| R{n} ")))
            .unwrap_or_else(|| panic!("no row for R{n}"));
        assert!(
            row.contains(&format!("`r{n:02}_")) || (n == 23 && row.contains("`r22_r23_")),
            "R{n} has no test"
        );
    }
}

#[test]
fn scenario_format_doc_lists_every_field() {
    let doc = quoted(&read("docs/scenario-format.md"));
    let model = read("sim-clr/src/scenario/model.rs");
    for line in model.lines() {
        let Some(rest) = line.trim().strip_prefix("pub ") else {
            continue;
        };
        let Some((field, _)) = rest.split_once(':') else {
            continue;
        };
        let documented = [field.to_string(), format!("[{field}]"), format!("[[{field}]]")];
        assert!(
            doc.iter()
                .any(|w| documented.contains(w) || w.starts_with(&format!("{field} ="))),
            "docs/scenario-format.md does not document `{field}`"
        );
    }
    assert!(
        doc.iter().any(|w| w.starts_with("{ fn = ")),
        "the `fn` frame key is documented"
    );
}

#[test]
fn json_doc_lists_every_report_key() {
    let doc = quoted(&read("docs/json-output.md"));
    let report = read("sim-clr/src/scenario/report.rs");
    for line in report.lines() {
        let Some(rest) = line.trim().strip_prefix("pub ") else {
            continue;
        };
        let Some((key, _)) = rest.split_once(':') else {
            continue;
        };
        if key.contains(' ') || key.contains('(') {
            continue;
        }
        assert!(
            doc.iter().any(|w| w == key),
            "docs/json-output.md does not document `{key}`"
        );
    }
}

#[test]
fn native_unwinding_doc_names_real_files_and_every_error() {
    let doc = read("docs/native-unwinding.md");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for word in quoted(&doc) {
        let path = word.split_whitespace().next().unwrap_or("");
        if path.contains('/') && (path.ends_with(".rs") || path.ends_with(".c") || path.ends_with(".sh")) {
            assert!(
                root.join(path).exists(),
                "docs/native-unwinding.md names a missing file `{path}`"
            );
        }
    }
    let errors = read("walker/src/unwind/mod.rs");
    let enum_body = errors
        .split("pub enum UnwindError {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("UnwindError");
    for line in enum_body.lines().map(str::trim) {
        if let Some(variant) = line
            .split('(')
            .next()
            .filter(|v| !v.is_empty() && !v.starts_with("///"))
        {
            assert!(
                doc.contains(&format!("`{variant}`")),
                "docs/native-unwinding.md misses `{variant}`"
            );
        }
    }
}

#[test]
fn process_docs_list_every_step_and_report_key() {
    let format = read("docs/scenario-format.md");
    let parser = read("sim-clr/src/spec/program.rs");
    // Every verb the parser matches (`"verb" =>`) is documented as a step.
    for verb in parser
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|w| parser.contains(&format!("\"{w}\" =>")) && !w.is_empty())
    {
        assert!(
            format.contains(&format!("`{verb}")),
            "docs/scenario-format.md misses step `{verb}`"
        );
    }
    let doc = quoted(&read("docs/json-output.md"));
    let model = read("sim-clr/src/process/mod.rs");
    for name in [
        "RunReport",
        "ExploreReport",
        "RunFault",
        "CycleLink",
        "TraceEntry",
        "FirstFailure",
    ] {
        let body = model
            .split(&format!("pub struct {name} {{"))
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .unwrap_or_else(|| panic!("{name}"));
        for line in body.lines() {
            let Some((key, _)) = line.trim().strip_prefix("pub ").and_then(|r| r.split_once(':')) else {
                continue;
            };
            assert!(
                doc.iter().any(|w| w == key),
                "docs/json-output.md does not document `{key}`"
            );
        }
    }
}

#[test]
fn scenario_format_doc_lists_every_template_where_it_goes() {
    let doc = read("docs/scenario-format.md");
    for t in sim_clr::scenario::TEMPLATES {
        assert!(
            doc.contains(&format!("| `{}` | {} |", t.name, t.doc)),
            "docs/scenario-format.md does not list template `{}` as: {}",
            t.name,
            t.doc
        );
    }
}

#[test]
fn scenario_format_doc_lists_every_enum_word() {
    use sim_clr::scenario::names::*;
    let words = quoted(&read("docs/scenario-format.md"));
    let tables: [(&str, Vec<&str>); 8] = [
        ("platform", PLATFORMS.iter().map(|(n, _)| *n).collect()),
        ("kind", CODE_KINDS.iter().map(|(n, _)| *n).collect()),
        ("thread kind", THREAD_KINDS.iter().map(|(n, _)| *n).collect()),
        ("mode", MODES.iter().map(|(n, _)| *n).collect()),
        ("state", LIFECYCLES.iter().map(|(n, _)| *n).collect()),
        ("exception", EXCEPTION_STATES.iter().map(|(n, _)| *n).collect()),
        ("os_context", OS_CONTEXTS.iter().map(|(n, _)| *n).collect()),
        ("funclet", FUNCLETS.iter().map(|(n, _)| *n).collect()),
    ];
    for (field, names) in tables {
        for name in names {
            assert!(
                words.iter().any(|w| w == name || w == &format!("\"{name}\"")),
                "docs/scenario-format.md does not list `{name}` ({field})"
            );
        }
    }
}

#[test]
fn pitfalls_doc_names_every_window_with_its_rule() {
    let doc = read("docs/pitfalls.md");
    for window in sim_clr::coverage::Window::ALL {
        let name = window.as_str();
        let rule = name.split('.').next().unwrap().to_uppercase();
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("docs/pitfalls.md has no row for window `{name}`"));
        assert!(
            name.starts_with("crash.") || row.contains(&rule),
            "the row of `{name}` does not name {rule}: {row}"
        );
    }
    assert!(doc.contains(&format!("`{}`", sim_clr::coverage::HOLDS_PROFILER_LOCK)));
}
