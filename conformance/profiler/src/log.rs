//! The log: one JSON line per API call, appended to the file `CONF_LOG` names.

use crate::info::Info;
use crate::names;
use std::io::Write;
use std::sync::Mutex;

static LOG: Mutex<()> = Mutex::new(());

/// One frame as logged: the method name (`None` for `funcId == 0`), `contextSize`, the first
/// earlier frame of the walk with the same `FunctionID`, if any, whether its IP lies in the
/// method's `GetCodeInfo2` regions (`None` for `funcId == 0` or when the call failed), and for
/// `funcId == 0` the native code's `module!symbol`, when a loaded module holds the IP.
pub struct LoggedFrame {
    name: Option<String>,
    context_size: u32,
    same_as: Option<usize>,
    in_code: Option<bool>,
    native: Option<String>,
}

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

/// Names the frames of a walk, given as (`FunctionID`, context size, IP), after it (never
/// inside a callback); says which repeat an earlier frame's `FunctionID` and which lie
/// outside their method's code regions.
pub fn name_frames(frames: &[(usize, u32, usize)]) -> Vec<LoggedFrame> {
    let mut first_with = std::collections::HashMap::new();
    frames
        .iter()
        .enumerate()
        .map(|(i, &(f, context_size, ip))| {
            // The first frame with this FunctionID, if it is an earlier one.
            let first = *first_with.entry(f).or_insert(i);
            let managed = f != 0;
            LoggedFrame {
                name: managed.then(|| names::function_name(f)),
                context_size,
                same_as: (managed && first < i).then_some(first),
                in_code: if managed {
                    Info::get().code_contains(f, ip)
                } else {
                    None
                },
                native: if managed {
                    None
                } else {
                    crate::symbols::native_name(ip)
                },
            }
        })
        .collect()
}

/// Appends one record: the case label, the caller kind, the API, the argument shape, the
/// HRESULT and, for walks, each callback's method name (`null` for `funcId == 0`), context
/// size, `same_as`: the first earlier callback with the same `FunctionID`, and for a managed
/// callback `in_code`: whether its IP is in the method's `GetCodeInfo2` regions (`null` when
/// that call failed), and for a `funcId == 0` callback `native`: the `module!symbol` of its IP.
pub fn record(case: &str, caller: &str, api: &str, shape: &str, hr: i32, frames: Option<&[LoggedFrame]>) {
    let frames = frames.map_or("null".to_string(), |frames| {
        let items: Vec<String> = frames
            .iter()
            .map(|f| {
                let name = f.name.as_deref().map_or("null".to_string(), quote);
                let same_as = f.same_as.map_or(String::new(), |k| format!(",\"same_as\":{k}"));
                // A managed callback's `in_code`, a native one's `native`.
                let code = match (&f.name, f.in_code) {
                    (None, _) => {
                        (f.native.as_deref()).map_or(String::new(), |n| format!(",\"native\":{}", quote(n)))
                    }
                    (Some(_), Some(inside)) => format!(",\"in_code\":{inside}"),
                    (Some(_), None) => ",\"in_code\":null".to_string(),
                };
                format!(
                    "{{\"function\":{name},\"context_size\":{}{same_as}{code}}}",
                    f.context_size
                )
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
