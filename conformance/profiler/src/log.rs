//! The log: one JSON line per API call, appended to the file `CONF_LOG` names.

use crate::names;
use std::io::Write;
use std::sync::Mutex;

static LOG: Mutex<()> = Mutex::new(());

/// One frame as logged: the method name (`None` for `funcId == 0`), `contextSize`, and the
/// first earlier frame of the walk with the same `FunctionID`, if any.
pub type LoggedFrame = (Option<String>, u32, Option<usize>);

fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Names the frames of a walk (after it, never inside a callback), and says which repeat an
/// earlier frame's `FunctionID`.
pub fn name_frames(frames: &[(usize, u32)]) -> Vec<LoggedFrame> {
    let mut first_with = std::collections::HashMap::new();
    frames
        .iter()
        .enumerate()
        .map(|(i, &(f, size))| {
            // The first frame with this FunctionID, if it is an earlier one.
            let first = *first_with.entry(f).or_insert(i);
            let same_as = (f != 0 && first < i).then_some(first);
            ((f != 0).then(|| names::function_name(f)), size, same_as)
        })
        .collect()
}

/// Appends one record: the case label, the caller kind, the API, the argument shape, the
/// HRESULT and, for walks, each callback's method name (`null` for `funcId == 0`), context
/// size, and `same_as`: the first earlier callback with the same `FunctionID`.
pub fn record(case: &str, caller: &str, api: &str, shape: &str, hr: i32, frames: Option<&[LoggedFrame]>) {
    let frames = frames.map_or("null".to_string(), |frames| {
        let items: Vec<String> = frames
            .iter()
            .map(|(name, size, same_as)| {
                let name = name.as_deref().map_or("null".to_string(), quote);
                let same_as = same_as.map_or(String::new(), |k| format!(",\"same_as\":{k}"));
                format!("{{\"function\":{name},\"context_size\":{size}{same_as}}}")
            })
            .collect();
        format!("[{}]", items.join(","))
    });
    let line = format!(
        "{{\"case\":{},\"caller\":{},\"api\":{},\"shape\":{},\"hresult\":\"0x{:08X}\",\"frames\":{frames}}}\n",
        quote(case),
        quote(caller),
        quote(api),
        quote(shape),
        hr as u32
    );
    let _guard = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = std::env::var_os("CONF_LOG") {
        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = file.write_all(line.as_bytes());
        }
    }
}
