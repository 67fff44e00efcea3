//! `simclr record`: a log the conformance profiler wrote on a real runtime, turned into a
//! scenario file that reproduces every recorded answer.
//!
//! Each record's case label, minus its shape (`oa_d5_seed2` → `oa_d5`, `x_susp/target` →
//! `x_susp`), names a *moment* of the program: one thread per moment, whose frames are the
//! longest complete walk of that moment (a walk of another thread, `target…`, gives that
//! moment's target thread instead). Managed callbacks become methods: callbacks that share a
//! `FunctionID` share one, same-named callbacks that do not are distinct methods under one
//! metadata name (overloads, instantiations), and a callback whose IP lay outside its method's
//! `GetCodeInfo2` regions runs a tier-1 version of it. A `funcId == 0` run becomes one native
//! frame, with the Frame that hops it when managed code lies below. Each record becomes a call
//! with the record's arguments (from its shape) and expectations; an IP that resolved once and
//! later did not was unloaded in between, so its code is unloaded there.
//!
//! The native frames inside a run, and the runtime's own frame sequences (templates), are not
//! in the log: a recorded scenario reproduces the answers, not every frame of the process.

use fixtures::compose::toml_string as quote;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One callback of a recorded walk.
struct Callback {
    /// The method's name, `None` for `funcId == 0`.
    name: Option<String>,
    /// For `funcId == 0`: the native code's `module!symbol`, when the profiler resolved it.
    native: Option<String>,
    same_as: Option<usize>,
    /// False when the IP lay outside the method's `GetCodeInfo2` regions.
    in_code: bool,
}

/// One record of the log.
struct Record {
    case: String,
    caller: String,
    api: String,
    shape: String,
    hresult: String,
    frames: Option<Vec<Callback>>,
}

impl Record {
    fn parse(line: &str, number: usize) -> Result<Record, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {number}: {e}"))?;
        let text = |key: &str| {
            v[key]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("line {number}: no `{key}`"))
        };
        let frames = v["frames"].as_array().map(|frames| {
            frames
                .iter()
                .map(|f| Callback {
                    name: f["function"].as_str().map(str::to_string),
                    native: f["native"].as_str().map(str::to_string),
                    same_as: f["same_as"].as_u64().map(|k| k as usize),
                    in_code: f["in_code"].as_bool() != Some(false),
                })
                .collect()
        });
        Ok(Record {
            case: text("case")?,
            caller: text("caller")?,
            api: text("api")?,
            shape: text("shape")?,
            hresult: text("hresult")?,
            frames,
        })
    }

    /// The moment: the label without its shape, and whether the record walks its target.
    fn moment(&self) -> String {
        let label = self.case.strip_suffix("/inner").unwrap_or(&self.case);
        for sep in ['_', '/'] {
            if let Some(m) = label.strip_suffix(&format!("{sep}{}", self.shape)) {
                return m.to_string();
            }
        }
        label.to_string()
    }

    /// For a `saveK` walk, the method of callback K, whose IP the profiler kept.
    fn saved(&self) -> Option<Option<String>> {
        let k = self.shape.strip_prefix("save")?.parse::<usize>().ok()?;
        Some(
            self.frames
                .as_ref()
                .and_then(|f| f.get(k))
                .and_then(|c| c.name.clone()),
        )
    }

    fn walks_target(&self) -> bool {
        self.shape.starts_with("target")
    }

    /// The thread whose frames a complete walk of this record shows, if any.
    fn walked(&self) -> Option<String> {
        if self.walks_target() {
            Some(format!("{}.target", self.moment()))
        } else if self.caller != "native" {
            Some(self.moment())
        } else {
            None
        }
    }

    fn complete(&self) -> bool {
        self.api == "DoStackSnapshot"
            && self.hresult == "0x00000000"
            && self.frames.as_ref().is_some_and(|f| !f.is_empty())
    }
}

/// The code a recording declares, in declaration order.
#[derive(Default)]
struct Code {
    /// (name, declaration lines).
    functions: Vec<(String, String)>,
    known: BTreeMap<String, usize>,
}

impl Code {
    fn declare(&mut self, name: &str, kind: &str, extra: &str) {
        if self.known.contains_key(name) {
            return;
        }
        self.known.insert(name.to_string(), self.functions.len());
        let mut text = format!("[[code]]\nname = {}\nkind = \"{kind}\"\n", quote(name));
        text.push_str(extra);
        self.functions.push((name.to_string(), text));
    }
}

/// The native function standing for a run of native frames the profiler could not name.
const NATIVE: &str = "native!run";

/// The managed function of a moment whose stack no walk showed.
const LEAF: &str = "Recorded::Leaf";

/// One entry of a recorded thread's frames.
#[derive(Clone, Debug)]
enum Entry {
    /// A call of a function; `native` for native code.
    Call { function: String, native: bool },
    /// The `InlinedCallFrame` a managed caller of native code pushes.
    Transition,
}

impl Entry {
    fn toml(&self) -> String {
        match self {
            Entry::Call { function, .. } => format!("{{ fn = {} }}", quote(function)),
            Entry::Transition => "{ frame = \"InlinedCallFrame\" }".into(),
        }
    }
}

/// The frames of a walk, declaring their code.
fn frames_of(callbacks: &[Callback], code: &mut Code, module_of: &dyn Fn(&str) -> String) -> Vec<Entry> {
    // Each callback's method identity: (name, k) for the k-th distinct method of that name.
    let mut identities: Vec<Option<(String, usize)>> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, c) in callbacks.iter().enumerate() {
        let Some(name) = &c.name else {
            identities.push(None);
            let function = c.native.clone().unwrap_or_else(|| NATIVE.into());
            let module = function.split_once('!').map_or(function.as_str(), |(m, _)| m);
            code.declare(&function, "native", &format!("module = {}\n", quote(module)));
            out.push(Entry::Call {
                function,
                native: true,
            });
            if callbacks[i + 1..].iter().any(|c| c.name.is_some()) {
                out.push(Entry::Transition);
            }
            continue;
        };
        let identity = match c.same_as.and_then(|k| identities.get(k).cloned().flatten()) {
            Some(identity) => identity,
            None => {
                let k = seen.entry(name.clone()).or_insert(0);
                *k += 1;
                (name.clone(), *k)
            }
        };
        identities.push(Some(identity.clone()));
        let (method, k) = identity;
        let base = if k == 1 {
            method.clone()
        } else {
            format!("{method} #{k}")
        };
        let module = module_of(&base);
        let metadata = if k == 1 {
            format!("module = {}\n", quote(&module))
        } else {
            format!("module = {}\nmethod = {}\n", quote(&module), quote(&method))
        };
        code.declare(&base, "jit", &metadata);
        let function = if c.in_code {
            base
        } else {
            let tier = format!("{base} (tier 1)");
            code.declare(
                &tier,
                "jit",
                &format!("module = {}\nversion_of = {}\n", quote(&module), quote(&base)),
            );
            tier
        };
        out.push(Entry::Call {
            function,
            native: false,
        });
    }
    out
}

/// The scenario text reproducing the log `log` (named `name`).
pub fn scenario(name: &str, log: &str) -> Result<String, String> {
    let records: Vec<Record> = log
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Record::parse(l, i + 1))
        .collect::<Result<_, _>>()?;
    // Walks refused for the event mask: the program ran without COR_PRF_ENABLE_STACK_SNAPSHOT.
    let refused = format!("0x{:08X}", corprof::HResult::CORPROF_E_INCONSISTENT_WITH_FLAGS.0);
    let flagless = records
        .iter()
        .any(|r| r.api == "DoStackSnapshot" && r.hresult == refused);
    // Methods whose IP resolved and later did not were unloaded: each goes in its own module.
    let unloaded = unloaded_functions(&records);
    let module_of = |function: &str| match unloaded.iter().position(|f| f == function) {
        Some(i) => format!("unloaded{}.dll", i + 1),
        None => "recorded.exe".to_string(),
    };
    let mut code = Code::default();
    code.declare(NATIVE, "native", "module = \"native\"\n");
    // Each moment's thread (and target thread): the longest complete walk of it.
    let mut moments: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in &records {
        let callers = (r.caller != "native").then(|| r.moment());
        for thread in callers.into_iter().chain(r.walked()) {
            if !order.contains(&thread) {
                order.push(thread);
            }
        }
        if let (true, Some(thread)) = (r.complete(), r.walked()) {
            let frames = frames_of(r.frames.as_deref().unwrap_or_default(), &mut code, &module_of);
            let best = moments.entry(thread).or_default();
            if frames.len() > best.len() {
                *best = frames;
            }
        }
    }
    let mut threads = String::new();
    for thread in &order {
        let mut frames = match moments.get(thread) {
            Some(f) if !f.is_empty() => f.clone(),
            _ => {
                code.declare(LEAF, "jit", "module = \"recorded.exe\"\n");
                vec![Entry::Call {
                    function: LEAF.into(),
                    native: false,
                }]
            }
        };
        // The thread starts in native code (an aborted walk may not have reached it).
        if !matches!(frames.last(), Some(Entry::Call { native: true, .. })) {
            frames.push(Entry::Call {
                function: NATIVE.into(),
                native: true,
            });
        }
        let frames: Vec<String> = frames.iter().map(Entry::toml).collect();
        let _ = write!(
            threads,
            "[[threads]]\nname = {}\nframes = [\n  {},\n]\n\n",
            quote(thread),
            frames.join(",\n  ")
        );
    }
    let _ = write!(
        threads,
        "[[threads]]\nname = \"native\"\nkind = \"native\"\nframes = [{}]\n\n",
        Entry::Call {
            function: NATIVE.into(),
            native: true
        }
        .toml()
    );
    let calls = calls(&records, &order, &moments, &unloaded, &module_of)?;
    let mask = if flagless {
        ""
    } else {
        "\"ENABLE_STACK_SNAPSHOT\", "
    };
    let mut text = format!(
        "name = {}\ndescription = \"Recorded from a real runtime by `simclr record`.\"\nplatform = \"unix\"\n\n[runtime]\nevent_mask = [{mask}\"ENABLE_OBJECT_ALLOCATED\", \"MONITOR_OBJECT_ALLOCATED\", \"MONITOR_THREADS\", \"MONITOR_GC\", \"MONITOR_MODULE_LOADS\", \"MONITOR_ASSEMBLY_LOADS\"]\n\n",
        quote(name)
    );
    for (_, decl) in &code.functions {
        text.push_str(decl);
        text.push('\n');
    }
    text.push_str(&threads);
    text.push_str(&calls);
    Ok(text)
}

/// The functions of `saveK` callbacks that a later `fip_saved` no longer resolved.
fn unloaded_functions(records: &[Record]) -> Vec<String> {
    let mut out = Vec::new();
    let mut saved: Option<String> = None;
    let mut resolved = false;
    for r in records {
        if let Some(function) = r.saved() {
            (saved, resolved) = (function, false);
        }
        if r.shape == "fip_saved" {
            if r.hresult == "0x00000000" {
                resolved = true;
            } else if resolved {
                out.extend(saved.clone());
            }
        }
    }
    out
}

/// The `[[calls]]` tables.
fn calls(
    records: &[Record],
    order: &[String],
    moments: &BTreeMap<String, Vec<Entry>>,
    unloaded: &[String],
    module_of: &dyn Fn(&str) -> String,
) -> Result<String, String> {
    let mut out = String::new();
    let mut count = 0;
    let mut saved: Option<String> = None;
    let mut resolved = false;
    let mut gone: Vec<String> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if r.case.ends_with("/inner") {
            continue;
        }
        let moment = r.moment();
        let (caller, from) = match r.caller.as_str() {
            "native" => ("native".to_string(), None),
            "pinvoke" => (moment.clone(), Some("pinvoke")),
            other => (moment.clone(), Some(other)),
        };
        // The leaf of the moment's thread: managed, as every walked stack's leaf is.
        let leaf = match moments.get(&moment).and_then(|f| f.first()) {
            Some(Entry::Call {
                function,
                native: false,
            }) => function.clone(),
            _ => LEAF.to_string(),
        };
        let head = |api: &str| {
            let mut t = format!(
                "[[calls]]\ncase = {}\ncaller = {}\n",
                quote(&r.case),
                quote(&caller)
            );
            if let Some(from) = from {
                let _ = writeln!(t, "from = {}", quote(from));
            }
            let _ = writeln!(t, "api = {}", quote(api));
            t
        };
        let expect = format!("expect = {}\n", quote(&hresult_name(&r.hresult)));
        let table = match r.api.as_str() {
            "DoStackSnapshot" => {
                let target = format!("{moment}.target");
                let args = snapshot_args(&r.shape, &target, count + 1)
                    .ok_or_else(|| format!("record {} ({}): unknown shape `{}`", i + 1, r.case, r.shape))?;
                if let Some(capture) = &args.capture {
                    let mut t = head("DoStackSnapshot");
                    t.push_str(capture);
                    out.push_str(&t.replace(&format!("case = {}\n", quote(&r.case)), ""));
                    out.push('\n');
                    count += 1;
                }
                let mut t = head("DoStackSnapshot");
                t.push_str(&args.fields);
                t.push_str(&expect);
                if let Some(frames) = &r.frames {
                    let _ = writeln!(t, "expect_frames = {}", frames.len());
                }
                if r.shape == "nested" {
                    let inner = records.iter().find(|x| x.case == format!("{}/inner", r.case));
                    if let Some(inner) = inner {
                        let _ = write!(
                            t,
                            "[[calls.nested]]\ncase = {}\napi = \"DoStackSnapshot\"\nat = 0\nexpect = {}\n",
                            quote(&inner.case),
                            quote(&hresult_name(&inner.hresult))
                        );
                    }
                }
                t
            }
            "GetFunctionFromIP" | "GetFunctionFromIP2" => {
                let ip = match r.shape.as_str() {
                    "fip_native" => format!("{{ fn = {}, offset = 0x10 }}", quote(NATIVE)),
                    "fip_saved" => {
                        let f = saved.clone().unwrap_or_else(|| leaf.clone());
                        if r.hresult != "0x00000000"
                            && resolved
                            && unloaded.contains(&f)
                            && !gone.contains(&f)
                        {
                            // The moments that ran it are over; then its assembly unloads.
                            for thread in order.iter().filter(|t| {
                                moments.get(*t).is_some_and(|fr| {
                                    fr.iter()
                                        .any(|e| matches!(e, Entry::Call { function, .. } if *function == f))
                                })
                            }) {
                                let _ = write!(
                                    out,
                                    "[[calls]]\nevent = \"thread_exit\"\nthread = {}\n\n",
                                    quote(thread)
                                );
                                count += 1;
                            }
                            let _ = write!(
                                out,
                                "[[calls]]\nevent = \"unload\"\nthread = \"native\"\nmodule = {}\n\n",
                                quote(&module_of(&f))
                            );
                            count += 1;
                            gone.push(f.clone());
                        }
                        resolved |= r.hresult == "0x00000000";
                        format!("{{ fn = {}, offset = 0x10 }}", quote(&f))
                    }
                    _ => format!("{{ fn = {}, offset = 0x10 }}", quote(&leaf)),
                };
                let mut t = head(&r.api);
                let _ = writeln!(t, "ip = {ip}");
                t.push_str(&expect);
                t
            }
            "GetCurrentThreadID" | "InitializeCurrentThread" | "SuspendRuntime" | "ResumeRuntime" => {
                let mut t = head(&r.api);
                t.push_str(&expect);
                t
            }
            other => {
                return Err(format!(
                    "record {} ({}): API `{other}` cannot be recorded",
                    i + 1,
                    r.case
                ))
            }
        };
        if let Some(function) = r.saved() {
            (saved, resolved) = (function, false);
        }
        out.push_str(&table);
        out.push('\n');
        count += 1;
    }
    Ok(out)
}

/// A walk's arguments.
struct SnapshotArgs {
    /// The fields after `api`.
    fields: String,
    /// The fields of a walk with contexts made first, whose callback the seed is taken from.
    capture: Option<String>,
}

/// The arguments of the profiler's `DoStackSnapshot` shape `shape` (its `target…` shapes walk
/// `target`); `call` is the number the walk will have, for seeds taken from a capture walk
/// made just before it.
fn snapshot_args(shape: &str, target: &str, call: usize) -> Option<SnapshotArgs> {
    let (on_target, rest) = match shape.strip_prefix("target") {
        Some(rest) => (true, rest.strip_prefix('_').unwrap_or(rest)),
        None => (false, shape),
    };
    let mut fields = String::new();
    if on_target {
        let _ = writeln!(fields, "target = {}", quote(target));
    }
    let mut capture = None;
    let rest = if rest.is_empty() { "default" } else { rest };
    match rest {
        "default" | "nested" => {}
        _ if rest.starts_with("save") => {}
        "self" => fields.push_str("target = \"self\"\n"),
        "bogus" => fields.push_str("target = \"bogus\"\n"),
        "regctx" => fields.push_str("flags = [\"REGISTER_CONTEXT\"]\n"),
        "x86" => fields.push_str("flags = 2\n"),
        "zero" => fields.push_str("seed = \"zero\"\ncontext_size = 1232\n"),
        "zero16" => fields.push_str("seed = \"zero\"\ncontext_size = 16\n"),
        "null1232" => fields.push_str("context_size = 1232\n"),
        "flags4" => fields.push_str("flags = 4\n"),
        "flagshi" => fields.push_str("flags = 0x80000000\n"),
        "sfalse1" => fields.push_str("callback = { return = \"S_FALSE\", at = 1 }\n"),
        "efail1" => fields.push_str("callback = { return = \"E_FAIL\", at = 1 }\n"),
        "other0" => fields.push_str("callback = { return = \"0x00012345\", at = 0 }\n"),
        "nullcb" | "null" => fields.push_str("callback = \"null\"\n"),
        "seed2" | "seed2size0" => {
            capture = Some("flags = [\"REGISTER_CONTEXT\"]\n".to_string());
            let size = if rest == "seed2" {
                "\ncontext_size = 1232"
            } else {
                ""
            };
            let _ = writeln!(fields, "seed = {{ call = {call}, callback = 2 }}{size}");
        }
        _ => return None,
    }
    Some(SnapshotArgs { fields, capture })
}

fn hresult_name(hex: &str) -> String {
    corprof::HResult::parse(hex)
        .and_then(|hr| hr.name())
        .map_or_else(|| hex.to_string(), str::to_string)
}

/// Records every `NAME.jsonl` of `results` into `out/NAME.toml`.
pub fn folder(results: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let entries =
        std::fs::read_dir(results).map_err(|e| format!("cannot read {}: {e}", results.display()))?;
    let mut logs: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    logs.sort();
    if logs.is_empty() {
        return Err(format!("no NAME.jsonl log in {}", results.display()));
    }
    for log in logs {
        let name = log.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let text =
            std::fs::read_to_string(&log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        let scenario = scenario(&name, &text).map_err(|e| format!("{}: {e}", log.display()))?;
        let path = out.join(format!("{name}.toml"));
        std::fs::write(&path, scenario).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
