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
