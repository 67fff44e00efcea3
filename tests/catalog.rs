//! The bundled catalog: every scenario parses, runs deterministically, meets its own
//! expectations, and its full report is pinned by an insta snapshot.

use sim_clr::scenario::Scenario;

fn catalog() -> Vec<Scenario> {
    fixtures::scenarios().unwrap_or_else(|e| panic!("catalog scenario does not parse: {e}"))
}

#[test]
fn catalog_has_at_least_thirty_scenarios() {
    assert!(
        fixtures::catalog().len() >= 30,
        "{} scenarios",
        fixtures::catalog().len()
    );
}

#[test]
fn every_scenario_meets_its_expectations() {
    for scenario in catalog() {
        let report = scenario.run();
        assert!(
            report.expectations.checked > 0 || !report.faults.is_empty(),
            "{} checks nothing",
            scenario.name
        );
        assert!(
            report.expectations.failed.is_empty(),
            "{}: {:#?}",
            scenario.name,
            report.expectations.failed
        );
    }
}

#[test]
fn runs_are_byte_identical() {
    for scenario in catalog() {
        let a = serde_json::to_string(&scenario.run()).unwrap();
        let b = serde_json::to_string(&scenario.run()).unwrap();
        assert_eq!(a, b, "{} is not deterministic", scenario.name);
    }
}

#[test]
fn reports_are_pinned() {
    for scenario in catalog() {
        let report = scenario.run();
        insta::assert_json_snapshot!(scenario.name.clone(), report);
    }
}

/// Every callback placed in the ground truth stands for entries of its own kind: a managed
/// callback for one call of its method at its IP, a `funcId == 0` marker for a run of native
/// code (and Frames) starting at its IP; spans follow each other leaf to root, below the
/// entry where the walk started.
#[test]
fn callbacks_stand_for_ground_truth_entries_of_their_kind() {
    let mut placed = 0;
    let mut runs = 0;
    for scenario in catalog() {
        let report = scenario.run();
        let calls = report
            .calls
            .iter()
            .flat_map(|c| std::iter::once(c).chain(&c.nested));
        for call in calls {
            let (Some(frames), Some(truth)) = (&call.frames, &call.ground_truth) else {
                continue;
            };
            let mut below = call.walk_start.unwrap_or(0);
            for f in frames {
                let Some([first, last]) = f.truth_span else {
                    continue;
                };
                let at = &truth[first];
                let name = &scenario.name;
                assert!(first >= below, "{name} call {}: spans out of order", call.index);
                assert_eq!(at.kind, "call", "{name}");
                assert_eq!(at.address, f.ip, "{name}");
                match &f.function {
                    Some(function) => {
                        assert_eq!(first, last, "{name}");
                        // The method, or one of its code versions (a tier-1 or OSR body).
                        let code = &scenario.code;
                        let running = code.by_name(&at.name).expect("a declared function");
                        let method = code.function(running).version_of.unwrap_or(running);
                        assert_eq!(&code.function(method).name, function, "{name}");
                    }
                    None => {
                        runs += 1;
                        for t in &truth[first..=last] {
                            let kind = t.code.and_then(sim_clr::code::CodeKind::parse);
                            assert!(
                                kind.is_none_or(|k| !k.is_managed()),
                                "{name} call {}: the native run covers managed {}",
                                call.index,
                                t.name
                            );
                        }
                    }
                }
                placed += 1;
                below = last + 1;
            }
        }
    }
    assert!(
        placed > 100 && runs > 20,
        "{placed} callbacks placed, {runs} native runs"
    );
}

/// The text report draws each walk as two columns; colors only when asked.
#[test]
fn text_report_has_two_columns_and_colors_on_request() {
    let scenario = catalog()
        .into_iter()
        .find(|s| s.name == "reverse-pinvoke-sandwich")
        .unwrap();
    let report = scenario.run();
    let plain = report.render();
    let row = |name: &str| {
        plain
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{plain}"))
            .to_string()
    };
    assert!(row("Program::Main ").contains("<- #7 Program::Main"), "{plain}");
    assert!(
        row("UMThunkStub").contains("\u{2510} #4 funcId 0 (native run)"),
        "{plain}"
    );
    assert!(row("corehost_main").contains("] #8 funcId 0"), "{plain}");
    assert!(row("PInvokeEntry").trim_end().ends_with("native"), "{plain}");
    assert!(plain.contains("> <InlinedCallFrame>"), "{plain}");
    assert!(!plain.contains('\u{1b}'));
    assert!(report.render_with(true).contains("\u{1b}[32mProgram::Main"));
}
