//! Any bytes as a scenario file: parsing either fails with a `ScenarioError` or gives a scenario
//! whose run ends with a report. A panic, an abort, a hang or an allocation past libFuzzer's
//! limit is a bug.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(scenario) = sim_clr::scenario::Scenario::parse("fuzz.toml", text) {
        let report = scenario.run();
        assert_eq!(report.calls.len(), scenario.calls.len());
    }
});
