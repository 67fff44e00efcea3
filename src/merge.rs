//! `simclr merge`: the `--json` reports of every shard of one run, combined into the report the
//! whole run prints, byte for byte.
//!
//! A sharded run's report is the whole run's kind of report with one more key, `shard`
//! (`"I/N"`). Each kind's keys are listed below with how the shards' values combine: some must
//! be the same in every shard (the run's parameters), counts add up, tallies add up key by key,
//! lists of findings are joined in the order the whole run finds them.

use serde_json::{Map, Value};
use sim_clr::process::Shard;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// How the shards' values of one key combine.
#[derive(Clone, Copy)]
enum Rule {
    /// The same in every shard.
    Same,
    /// Numbers that add up.
    Sum,
    /// Objects of numbers that add up key by key (keys sorted, as the whole run prints them).
    SumEach,
    /// Arrays of findings joined, ordered by this number key of each finding (the order the
    /// whole run finds them in: every finding is one shard's).
    Join(&'static str),
    /// The object with the smallest value of this number key, or null if every shard has null.
    Earliest(&'static str),
    /// An object of such objects: for each key, the one with the smallest value of this
    /// number key among the shards that have it.
    EarliestEach(&'static str),
    /// Arrays of rows in one fixed order, named by this key: the rows' numbers add up.
    SumRows(&'static str),
    /// An exploration's coverage ([`sim_clr::coverage::Coverage`]): every count adds up.
    Coverage,
    /// What an exploration as a whole failed to reach: worked out from the merged coverage
    /// and `reach` (shards leave it empty).
    Unmet,
}

/// A kind of report: its name and its keys, in the order it prints them.
struct Kind {
    command: &'static str,
    keys: &'static [(&'static str, Rule)],
}

/// The reports `--shard` runs print.
const KINDS: [Kind; 3] = [
    Kind {
        command: "explore",
        keys: &[
            ("scenario", Rule::Same),
            ("strategy", Rule::Same),
            ("seed", Rule::Same),
            ("schedules_run", Rule::Sum),
            ("exhaustive", Rule::Same),
            ("outcomes", Rule::SumEach),
            ("stops", Rule::Sum),
            ("hazards", Rule::SumEach),
            ("reach", Rule::Same),
            ("coverage", Rule::Coverage),
            ("unmet", Rule::Unmet),
            ("first_failure", Rule::Earliest("index")),
            ("failures", Rule::EarliestEach("index")),
        ],
    },
    Kind {
        command: "fuzz",
        keys: &[
            ("sampler", Rule::Same),
            ("seed", Rule::Same),
            ("platform", Rule::Same),
            ("processes", Rule::Sum),
            ("schedules_per_process", Rule::Same),
            ("schedules_run", Rule::Sum),
            ("failures", Rule::Join("process")),
            ("stops", Rule::Sum),
            ("hazards", Rule::SumRows("hazard")),
            ("coverage", Rule::Coverage),
        ],
    },
    Kind {
        command: "walk-fuzz",
        keys: &[
            ("seed", Rule::Same),
            ("platform", Rule::Same),
            ("processes", Rule::Sum),
            ("walks", Rule::Sum),
            ("mismatches", Rule::Join("process")),
        ],
    },
];

/// The largest report read (reports hold reproducer files, but not megabytes of them).
const MAX_REPORT: u64 = 256 << 20;

/// Prints `report` as JSON, with its `shard` key when it is one shard's.
pub fn print_shard(report: &impl serde::Serialize, shard: Option<Shard>) -> Result<(), ExitCode> {
    /// The report's keys, then `shard`.
    #[derive(serde::Serialize)]
    struct Sharded<'a, R> {
        #[serde(flatten)]
        report: &'a R,
        shard: String,
    }
    match shard {
        None => crate::print_json(report),
        Some(shard) => crate::print_json(&Sharded {
            report,
            shard: shard.to_string(),
        }),
    }
}

/// Merges the shard reports in `paths` and prints the whole run's; exit 2 if they are not
/// every shard of one run.
pub fn run(paths: &[PathBuf]) -> ExitCode {
    match read(paths).and_then(|shards| merge(&shards)) {
        Ok(report) => crate::print_json(&report).err().unwrap_or(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Every report, its `shard` key taken out, in shard order; an error unless they are shards
/// `1/N` … `N/N`, each once.
fn read(paths: &[PathBuf]) -> Result<Vec<Map<String, Value>>, String> {
    let mut shards = Vec::new();
    for path in paths {
        let name = sim_clr::scenario::printable(&crate::cut(&path.display().to_string(), 200)).into_owned();
        let text = sim_clr::input::read_text(path, MAX_REPORT).map_err(|e| format!("{name}: {e}"))?;
        let Ok(Value::Object(mut report)) = serde_json::from_str::<Value>(&text) else {
            return Err(format!("{name}: not a JSON report (`--json` output)"));
        };
        let shard = match report.shift_remove("shard") {
            Some(Value::String(s)) => s.parse::<Shard>().map_err(|e| format!("{name}: {e}"))?,
            _ => {
                return Err(format!(
                    "{name}: no `shard`: the report of a run without `--shard`"
                ))
            }
        };
        shards.push((shard, name, report));
    }
    let count = shards[0].0.count();
    if let Some((shard, name, _)) = shards.iter().find(|(s, _, _)| s.count() != count) {
        return Err(format!("{name} is shard {shard}, the others are of {count}"));
    }
    shards.sort_by_key(|(s, _, _)| s.index_of(0));
    for pair in shards.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(format!(
                "{} and {} are both shard {}",
                pair[0].1, pair[1].1, pair[0].0
            ));
        }
    }
    if shards.len() as u64 != count {
        let have: Vec<Shard> = shards.iter().map(|(s, _, _)| *s).collect();
        let missing = (1..=count)
            .filter_map(|i| Shard::new(i, count))
            .filter(|s| !have.contains(s))
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(format!("missing shards: {missing}"));
    }
    Ok(shards.into_iter().map(|(_, _, report)| report).collect())
}

/// The whole run's report from its shards' (in shard order).
fn merge(shards: &[Map<String, Value>]) -> Result<Value, String> {
    let first = &shards[0];
    let kind = KINDS
        .iter()
        .find(|k| {
            first
                .keys()
                .map(String::as_str)
                .eq(k.keys.iter().map(|(key, _)| *key))
        })
        .ok_or("not the report of `explore`, `fuzz` or `walk-fuzz` (`--json`)")?;
    if let Some(i) = shards.iter().position(|s| !s.keys().eq(first.keys())) {
        return Err(format!(
            "shard {} is not a `{}` report like shard 1",
            i + 1,
            kind.command
        ));
    }
    let mut merged = Map::new();
    for &(key, rule) in kind.keys {
        let value = match rule {
            Rule::Unmet => unmet(&merged)?,
            _ => {
                let values: Vec<&Value> = shards.iter().map(|s| &s[key]).collect();
                combine(rule, &values).map_err(|e| format!("`{key}`: {e}"))?
            }
        };
        merged.insert(key.to_string(), value);
    }
    Ok(Value::Object(merged))
}

/// An exploration's `unmet`, from its merged `coverage` and its `reach`.
fn unmet(merged: &Map<String, Value>) -> Result<Value, String> {
    let coverage: sim_clr::coverage::Coverage =
        serde_json::from_value(merged["coverage"].clone()).map_err(|e| format!("`coverage`: {e}"))?;
    let reach: Vec<String> =
        serde_json::from_value(merged["reach"].clone()).map_err(|e| format!("`reach`: {e}"))?;
    serde_json::to_value(coverage.unmet(&reach)).map_err(|e| e.to_string())
}

/// One key's value in the whole run's report.
fn combine(rule: Rule, values: &[&Value]) -> Result<Value, String> {
    let number = |v: &Value| v.as_u64().ok_or_else(|| format!("{v} is not a count"));
    match rule {
        Rule::Same => match values.iter().find(|v| **v != values[0]) {
            Some(other) => Err(format!(
                "{} in one shard, {other} in another: shards of different runs",
                values[0]
            )),
            None => Ok(values[0].clone()),
        },
        Rule::Sum => Ok(values.iter().map(|v| number(v)).sum::<Result<u64, _>>()?.into()),
        Rule::SumEach => {
            let mut total: BTreeMap<&str, u64> = BTreeMap::new();
            for v in values {
                let map = v.as_object().ok_or_else(|| format!("{v} is not an object"))?;
                for (k, n) in map {
                    *total.entry(k).or_default() += number(n)?;
                }
            }
            Ok(Value::Object(
                total
                    .into_iter()
                    .map(|(k, n)| (k.to_string(), n.into()))
                    .collect(),
            ))
        }
        Rule::Join(order) => {
            let mut all = Vec::new();
            for v in values {
                all.extend(
                    v.as_array()
                        .ok_or_else(|| format!("{v} is not an array"))?
                        .iter()
                        .cloned(),
                );
            }
            let keys: Vec<u64> = all.iter().map(|f| number(&f[order])).collect::<Result<_, _>>()?;
            let mut keyed: Vec<(u64, Value)> = keys.into_iter().zip(all).collect();
            keyed.sort_by_key(|(k, _)| *k);
            Ok(Value::Array(keyed.into_iter().map(|(_, f)| f).collect()))
        }
        Rule::Earliest(order) => {
            let mut best: Option<(u64, &Value)> = None;
            for v in values.iter().filter(|v| !v.is_null()) {
                let k = number(&v[order])?;
                if best.is_none_or(|(b, _)| k < b) {
                    best = Some((k, v));
                }
            }
            Ok(best.map_or(Value::Null, |(_, v)| v.clone()))
        }
        Rule::EarliestEach(order) => {
            let mut each: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
            for v in values {
                let map = v.as_object().ok_or_else(|| format!("{v} is not an object"))?;
                for (k, first) in map {
                    each.entry(k).or_default().push(first);
                }
            }
            let mut out = serde_json::Map::new();
            for (k, firsts) in each {
                out.insert(k.to_string(), combine(Rule::Earliest(order), &firsts)?);
            }
            Ok(Value::Object(out))
        }
        Rule::Coverage => {
            let mut total = sim_clr::coverage::Coverage::default();
            for v in values {
                let shard: sim_clr::coverage::Coverage =
                    serde_json::from_value((*v).clone()).map_err(|e| e.to_string())?;
                total.merge(&shard);
            }
            serde_json::to_value(total).map_err(|e| e.to_string())
        }
        Rule::Unmet => Err("worked out after the other keys".into()),
        Rule::SumRows(name) => {
            let rows = |v: &Value| {
                v.as_array()
                    .cloned()
                    .ok_or_else(|| format!("{v} is not an array"))
            };
            let mut total = rows(values[0])?;
            for v in &values[1..] {
                let other = rows(v)?;
                if other.len() != total.len() {
                    return Err("the shards list different rows".into());
                }
                for (row, add) in total.iter_mut().zip(&other) {
                    if row[name] != add[name] {
                        return Err(format!(
                            "row {} in one shard, {} in another",
                            row[name], add[name]
                        ));
                    }
                    let (Some(row), Some(add)) = (row.as_object_mut(), add.as_object()) else {
                        return Err("a row is not an object".into());
                    };
                    for (k, n) in row.iter_mut().filter(|(k, _)| *k != name) {
                        *n = (number(n)? + number(&add[k.as_str()])?).into();
                    }
                }
            }
            Ok(Value::Array(total))
        }
    }
}
