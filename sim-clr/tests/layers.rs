//! The crate's modules stack in layers: each imports only modules of lower layers, so there is
//! no import circle. The test reads the sources (tests inside a module, which may build a
//! whole scenario, and comments are left out) and checks every `crate::` path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, lowest first.
const LAYERS: [&[&str]; 6] = [
    &[
        "memory",
        "leaf_first",
        "synth",
        "platform",
        "runtime_locks",
        "trace",
        "input",
        "parallel",
        "coverage",
    ],
    &["code"],
    &["thread", "fiber", "spec"],
    &["runtime"],
    &["scenario"],
    &["process"],
];

/// What the crate root re-exports, by the module that holds it.
const ROOT_ITEMS: [(&str, &str); 3] = [
    ("Runtime", "runtime"),
    ("CallContext", "runtime"),
    ("MAX_WALK_FRAMES", "runtime"),
];

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer: add it to LAYERS"))
}

/// The crate's modules named by `crate::` paths in `code`.
fn imports(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap_or(group.len())]
                .split(',')
                .collect(),
            None => vec![rest],
        };
        for name in names {
            let name: String = name
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let module = ROOT_ITEMS
                .iter()
                .find(|(item, _)| *item == name)
                .map_or(name.clone(), |(_, m)| m.to_string());
            if !module.is_empty() {
                out.push(module);
            }
        }
    }
    out
}

/// `text` without its unit tests and comments.
fn shipped(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_imports_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut upward: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        if relative == Path::new("lib.rs") {
            continue;
        }
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        for target in imports(&shipped(&text)) {
            if target != module && layer(&target) >= layer(&module) {
                upward
                    .entry(relative.display().to_string())
                    .or_default()
                    .push(target);
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports of the same or a higher layer: {upward:?}"
    );
}

#[test]
fn an_upward_import_is_found() {
    let text = "use crate::{code::CodeMap, process::Process};\nfn f() { crate::Runtime::new(); }\n\
                // crate::scenario in a comment\n#[cfg(test)]\nmod tests { use crate::scenario; }";
    assert_eq!(imports(&shipped(text)), ["code", "process", "runtime"]);
}
