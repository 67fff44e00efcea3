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
//! later did not was unloaded in between, so its code is unloaded there. A target's answers say
//! more of it than its frames: a zeroed seed that walked means preemptive mode, `UNSAFE` another
//! walk holding it, `E_FAIL` with no callback a stack without managed code. Methods are
//! optimized JIT code without a frame pointer, as the Windows lane's bad seeds show.
//!
//! The native frames inside a run, and the runtime's own frame sequences (templates), are not
//! in the log: a recorded scenario reproduces the answers, not every frame of the process.

use corprof::flags::snapshot::REGISTER_CONTEXT;
use corprof::{Context, HResult, Register};
use fixtures::compose::{CallSpec, CodeSpec, Compose, Frame, ThreadSpec, Value as Toml};
use serde_json::Value;
use sim_clr::code::CodeKind;
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::{CallbackBehavior, IpRef, NestedAt, Seed, SeedBase, SeedValue, Target};
use sim_clr::thread::FrameKind;
use sim_clr::{CallContext, Platform};
use std::collections::BTreeMap;

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
    hresult: HResult,
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
            hresult: HResult::parse(&text("hresult")?)
                .ok_or_else(|| format!("line {number}: `hresult` is not an HRESULT"))?,
            frames,
        })
    }

    /// The moment: the label without its shape.
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

    fn succeeded(&self) -> bool {
        self.hresult == HResult::S_OK
    }

    /// A walk that reached the end of its stack.
    fn complete(&self) -> bool {
        self.api == "DoStackSnapshot"
            && self.succeeded()
            && self.frames.as_ref().is_some_and(|f| !f.is_empty())
    }
}

/// The native function standing for a run of native frames the profiler could not name.
const NATIVE: &str = "native!run";

/// The RSP or RBP of the lane's bad seeds (`badseed_…` shapes): an address no stack holds.
const BAD_STACK_REGISTER: u64 = 0x1000;

/// The managed function of a moment whose stack no walk showed.
const LEAF: &str = "Recorded::Leaf";

/// The module of the program's own methods.
const PROGRAM: &str = "recorded.exe";

/// A recorded method: its metadata name when it shares one with another method, and the
/// method it is a tier-1 version of.
#[derive(Default)]
struct Method {
    method: Option<String>,
    version_of: Option<String>,
}

/// The code a recording declares, in declaration order: native functions with their module,
/// and methods, whose module is known only once the unloads are (an unloaded method gets a
/// module of its own).
#[derive(Default)]
struct Code {
    order: Vec<String>,
    natives: BTreeMap<String, String>,
    methods: BTreeMap<String, Method>,
}

impl Code {
    fn native(&mut self, name: &str) {
        if !self.natives.contains_key(name) && !self.methods.contains_key(name) {
            let module = name.split_once('!').map_or(name, |(m, _)| m);
            self.natives.insert(name.into(), module.into());
            self.order.push(name.into());
        }
    }

    fn method(&mut self, name: &str, method: Method) {
        if !self.natives.contains_key(name) && !self.methods.contains_key(name) {
            self.methods.insert(name.into(), method);
            self.order.push(name.into());
        }
    }

    /// The `[[code]]` tables; the methods of `unloaded` each in a module of its own.
    fn specs(&self, unloaded: &[String]) -> Vec<CodeSpec> {
        let module_of = |name: &str| match unloaded.iter().position(|f| f == name) {
            Some(i) => format!("unloaded{}.dll", i + 1),
            None => PROGRAM.into(),
        };
        (self.order.iter())
            .map(|name| match (self.natives.get(name), self.methods.get(name)) {
                (Some(module), _) => CodeSpec::new(name, CodeKind::Native).set("module", module.as_str()),
                (None, Some(m)) => {
                    let base = m.version_of.as_deref().unwrap_or(name);
                    let mut spec = CodeSpec::new(name, CodeKind::Jit)
                        .set("module", module_of(base))
                        .set("shape", jit_shape());
                    if let Some(method) = &m.method {
                        spec = spec.set("method", method.as_str());
                    }
                    if let Some(base) = &m.version_of {
                        spec = spec.set("version_of", base.as_str());
                    }
                    spec
                }
                (None, None) => unreachable!("every ordered name is declared"),
            })
            .collect()
    }
}

/// The machine code of a recorded method. Optimized x64 JIT code keeps no frame pointer: a
/// seed's RBP is never read by a walk and its RSP always is (Windows lane cases
/// `w_*/target_badseed_rbp` walk every frame, `w_*/target_badseed_rsp` fault before the first
/// callback), so the method saves RBP and is unwound from RSP.
fn jit_shape() -> Toml {
    let prologue = Toml::Array(vec!["push rbp".into(), "sub rsp, 0x20".into()]);
    Toml::Table(
        [
            ("prologue".to_string(), prologue),
            ("calls".to_string(), 1u32.into()),
        ]
        .into(),
    )
}

/// One entry of a recorded thread's frames.
#[derive(Clone, Debug)]
enum Entry {
    /// A call of a function; `native` for native code.
    Call { function: String, native: bool },
    /// The `InlinedCallFrame` a managed caller of native code pushes.
    Transition,
}

impl Entry {
    fn frame(&self) -> Frame<'_> {
        match self {
            Entry::Call { function, .. } => Frame::Call(function),
            Entry::Transition => Frame::Explicit(FrameKind::InlinedCall),
        }
    }
}

/// The frames of a walk, declaring their code.
fn frames_of(callbacks: &[Callback], code: &mut Code) -> Vec<Entry> {
    // Each callback's method identity: (name, k) for the k-th distinct method of that name.
    let mut identities: Vec<Option<(String, usize)>> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, c) in callbacks.iter().enumerate() {
        let Some(name) = &c.name else {
            identities.push(None);
            let function = c.native.clone().unwrap_or_else(|| NATIVE.into());
            code.native(&function);
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
            code.method(&method, Method::default());
            method
        } else {
            let base = format!("{method} #{k}");
            let metadata = Method {
                method: Some(method),
                version_of: None,
            };
            code.method(&base, metadata);
            base
        };
        let function = if c.in_code {
            base
        } else {
            let tier = format!("{base} (tier 1)");
            let version = Method {
                method: None,
                version_of: Some(base),
            };
            code.method(&tier, version);
            tier
        };
        out.push(Entry::Call {
            function,
            native: false,
        });
    }
    out
}

/// Each moment's thread (and target thread), in order of first appearance, with the frames of
/// its longest complete walk.
struct Moments {
    order: Vec<String>,
    frames: BTreeMap<String, Vec<Entry>>,
}

impl Moments {
    fn of(records: &[Record], code: &mut Code) -> Moments {
        let mut moments = Moments {
            order: Vec::new(),
            frames: BTreeMap::new(),
        };
        for r in records {
            let caller = (r.caller != "native").then(|| r.moment());
            for thread in caller.into_iter().chain(r.walked()) {
                if !moments.order.contains(&thread) {
                    moments.order.push(thread);
                }
            }
            if let (true, Some(thread)) = (r.complete(), r.walked()) {
                let frames = frames_of(r.frames.as_deref().unwrap_or_default(), code);
                let best = moments.frames.entry(thread).or_default();
                if frames.len() > best.len() {
                    *best = frames;
                }
            }
        }
        moments
    }

    /// The frames of thread `thread`: its walk's, or a managed leaf, above a native bottom
    /// (an aborted walk may not have reached it).
    fn stack(&self, thread: &str, code: &mut Code) -> Vec<Entry> {
        let mut frames = match self.frames.get(thread) {
            Some(f) if !f.is_empty() => f.clone(),
            _ => {
                code.method(LEAF, Method::default());
                vec![Entry::Call {
                    function: LEAF.into(),
                    native: false,
                }]
            }
        };
        if !matches!(frames.last(), Some(Entry::Call { native: true, .. })) {
            frames.push(Entry::Call {
                function: NATIVE.into(),
                native: true,
            });
        }
        frames
    }

    /// The first function of thread `thread`: managed, as every walked stack's leaf is.
    fn leaf(&self, thread: &str) -> String {
        match self.frames.get(thread).and_then(|f| f.first()) {
            Some(Entry::Call {
                function,
                native: false,
            }) => function.clone(),
            _ => LEAF.into(),
        }
    }

    /// The threads whose frames call `function`.
    fn running<'m>(&'m self, function: &'m str) -> impl Iterator<Item = &'m String> + 'm {
        self.order.iter().filter(move |t| {
            self.frames.get(*t).is_some_and(|frames| {
                (frames.iter()).any(|e| matches!(e, Entry::Call { function: f, .. } if f == function))
            })
        })
    }
}

/// What the answers of cross-thread walks say about their target threads, beyond the frames.
#[derive(Default)]
struct TargetStates {
    /// Targets a zeroed seed walked: the runtime discarded the seed, so the thread is in
    /// preemptive mode (R12); its walks show no native frame on top, so one is added, with the
    /// `InlinedCallFrame` below it.
    preemptive: std::collections::BTreeSet<String>,
    /// Targets a walk found being walked by another (`CORPROF_E_STACKSNAPSHOT_UNSAFE`: the
    /// other walk holds the thread's hijack lock, R8).
    walked: std::collections::BTreeSet<String>,
    /// Targets whose walks found no frame at all (`E_FAIL` with no callback, R17): no managed
    /// code on their stack.
    frameless: std::collections::BTreeSet<String>,
}

impl TargetStates {
    fn of(records: &[Record]) -> TargetStates {
        let mut states = TargetStates::default();
        for r in records
            .iter()
            .filter(|r| r.api == "DoStackSnapshot" && r.walks_target())
        {
            let Some(thread) = r.walked() else { continue };
            let no_callback = r.frames.as_ref().is_none_or(|f| f.is_empty());
            if r.complete() && matches!(r.shape.as_str(), "target_zero" | "target_zero16") {
                states.preemptive.insert(thread);
            } else if r.hresult == HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE {
                states.walked.insert(thread);
            } else if r.hresult == HResult::E_FAIL && no_callback {
                states.frameless.insert(thread);
            }
        }
        states
    }

    /// Thread `thread`'s frames.
    fn stack(&self, thread: &str, moments: &Moments, code: &mut Code) -> Vec<Entry> {
        let native = || Entry::Call {
            function: NATIVE.into(),
            native: true,
        };
        if self.frameless.contains(thread) && !moments.frames.contains_key(thread) {
            code.native(NATIVE);
            return vec![native()];
        }
        let frames = moments.stack(thread, code);
        if self.preemptive.contains(thread) {
            return [native(), Entry::Transition].into_iter().chain(frames).collect();
        }
        frames
    }
}

/// The scenario text reproducing the log `log` (named `name`) that runtime `version` wrote.
pub fn scenario(
    name: &str,
    log: &str,
    version: RuntimeVersion,
    platform: Platform,
) -> Result<String, String> {
    let records: Vec<Record> = log
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Record::parse(l, i + 1))
        .collect::<Result<_, _>>()?;
    let mut code = Code::default();
    code.native(NATIVE);
    let moments = Moments::of(&records, &mut code);
    let (calls, unloaded) = calls(&records, &moments)?;
    let states = TargetStates::of(&records);
    let threads: Vec<(String, Vec<Entry>)> = (moments.order.iter())
        .map(|t| (t.clone(), states.stack(t, &moments, &mut code)))
        .collect();
    // Walks refused for the event mask: the program ran without COR_PRF_ENABLE_STACK_SNAPSHOT.
    let flagless = (records.iter())
        .any(|r| r.api == "DoStackSnapshot" && r.hresult == HResult::CORPROF_E_INCONSISTENT_WITH_FLAGS);
    let mut mask = vec![
        "ENABLE_OBJECT_ALLOCATED",
        "MONITOR_OBJECT_ALLOCATED",
        "MONITOR_THREADS",
        "MONITOR_GC",
        "MONITOR_MODULE_LOADS",
        "MONITOR_ASSEMBLY_LOADS",
    ];
    if !flagless {
        mask.insert(0, "ENABLE_STACK_SNAPSHOT");
    }
    let mut compose = Compose::new(platform)
        .named(name, "Recorded from a real runtime by `simclr record`.")
        .runtime("version", version.as_str())
        .event_mask(&mask);
    for spec in code.specs(&unloaded) {
        compose = compose.function(spec);
    }
    for (thread, frames) in &threads {
        let frames: Vec<Frame<'_>> = frames.iter().map(Entry::frame).collect();
        let mut spec = ThreadSpec::new(thread, &frames);
        if states.walked.contains(thread) {
            spec = spec.set("hijack_lock_held", true);
        }
        compose = compose.thread(spec);
    }
    compose = compose.thread(ThreadSpec::native("native", &[Frame::Call(NATIVE)]));
    Ok(compose.calls(calls).text())
}

/// The calls, and the methods found unloaded: a method whose IP a `saveK` walk kept, which a
/// `fip_saved` lookup resolved and a later one did not, was unloaded in between, so the
/// moments that ran it exit and its assembly unloads there.
fn calls(records: &[Record], moments: &Moments) -> Result<(Vec<CallSpec>, Vec<String>), String> {
    let mut out: Vec<CallSpec> = Vec::new();
    let mut unloaded: Vec<String> = Vec::new();
    let (mut saved, mut resolved): (Option<String>, bool) = (None, false);
    for (i, r) in records.iter().enumerate() {
        if r.case.ends_with("/inner") {
            continue;
        }
        let moment = r.moment();
        let (caller, context) = match r.caller.as_str() {
            "native" => ("native".to_string(), CallContext::Thread),
            "pinvoke" => (moment.clone(), CallContext::PInvoke),
            other => {
                let kind = sim_clr::CallbackKind::parse(other)
                    .ok_or_else(|| format!("record {} ({}): unknown caller `{other}`", i + 1, r.case))?;
                (moment.clone(), CallContext::Callback(kind))
            }
        };
        let call = |api: &str| {
            CallSpec::api(api, &caller, context)
                .set("case", r.case.as_str())
                .expect(r.hresult)
        };
        let call = match r.api.as_str() {
            "DoStackSnapshot" => {
                let target = Target::Thread(format!("{moment}.target"));
                let shape = Shape::parse(&r.shape, target)
                    .ok_or_else(|| format!("record {} ({}): unknown shape `{}`", i + 1, r.case, r.shape))?;
                // A seed from a callback: a walk with contexts just before, to take it from.
                let capture = shape.seed_from.map(|_| {
                    let capture = CallSpec::snapshot(&caller, context).flags(REGISTER_CONTEXT);
                    match &shape.target {
                        Some(target) => capture.target(target.clone()),
                        None => capture,
                    }
                });
                let walk = shape.apply(
                    call("DoStackSnapshot"),
                    out.len() + usize::from(capture.is_some()),
                );
                out.extend(capture);
                let mut walk = match &r.frames {
                    Some(frames) => walk.set("expect_frames", frames.len() as u32),
                    None => walk,
                };
                if r.shape == "nested" {
                    let label = format!("{}/inner", r.case);
                    if let Some(inner) = records.iter().find(|x| x.case == label) {
                        let nested = CallSpec::inner("DoStackSnapshot")
                            .set("case", label.as_str())
                            .expect(inner.hresult);
                        walk = walk.nested(NestedAt::Frames(vec![0]), nested);
                    }
                }
                walk
            }
            "GetFunctionFromIP" | "GetFunctionFromIP2" => {
                let function = match r.shape.as_str() {
                    "fip_native" => NATIVE.to_string(),
                    "fip_saved" => {
                        let f = saved.clone().unwrap_or_else(|| moments.leaf(&moment));
                        if !r.succeeded() && resolved && !unloaded.contains(&f) {
                            for thread in moments.running(&f) {
                                out.push(CallSpec::event("thread_exit", thread));
                            }
                            unloaded.push(f.clone());
                            let module = format!("unloaded{}.dll", unloaded.len());
                            out.push(CallSpec::event("unload", "native").set("module", module));
                        }
                        resolved |= r.succeeded();
                        f
                    }
                    _ => moments.leaf(&moment),
                };
                call(&r.api).ip(IpRef::Function(function, 0x10))
            }
            "GetCurrentThreadID" | "InitializeCurrentThread" | "SuspendRuntime" | "ResumeRuntime" => {
                call(&r.api)
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
        out.push(call);
    }
    Ok((out, unloaded))
}

/// The arguments of one of the profiler's `DoStackSnapshot` shapes.
struct Shape {
    target: Option<Target>,
    flags: u32,
    seed: Option<Seed>,
    context_size: u32,
    callback: CallbackBehavior,
    /// The callback of a capture walk made just before, whose context is the seed.
    seed_from: Option<usize>,
    /// Registers of that seed overridden (the bad seeds).
    overrides: Vec<(Option<Register>, SeedValue)>,
}

impl Shape {
    /// Shape `name` (`target…` shapes walk `target`), `None` when unknown. The Windows lane's
    /// `own_suspend…` shapes walk inside the profiler's own `SuspendThread`, which changes
    /// nothing the runtime answers, the seeded ones with the target's own registers.
    fn parse(name: &str, target: Target) -> Option<Shape> {
        let (on_target, rest) = match name.strip_prefix("target") {
            Some(rest) => (true, rest.strip_prefix('_').unwrap_or(rest)),
            None => (false, name),
        };
        let own = match &target {
            Target::Thread(thread) => SeedBase::Frame(thread.clone(), 0),
            _ => SeedBase::Zero,
        };
        let mut shape = Shape {
            target: on_target.then_some(target),
            flags: 0,
            seed: None,
            context_size: 0,
            callback: CallbackBehavior::Ok,
            seed_from: None,
            overrides: Vec::new(),
        };
        let own_seed = |overrides| {
            Some(Seed::Context {
                base: own.clone(),
                overrides,
            })
        };
        // `seedK`: seeded with callback K's context of a walk with contexts.
        let seed_from = rest.strip_prefix("seed").and_then(|k| k.parse::<usize>().ok());
        let full = Context::SIZE as u32;
        let zero = || {
            Some(Seed::Context {
                base: SeedBase::Zero,
                overrides: vec![],
            })
        };
        let abort = |at, value| CallbackBehavior::Return { at, value };
        match rest {
            "" | "default" | "nested" => {}
            _ if rest
                .strip_prefix("save")
                .is_some_and(|k| k.parse::<usize>().is_ok()) => {}
            "self" => shape.target = Some(Target::Thread("self".into())),
            "bogus" => shape.target = Some(Target::Raw(1)),
            "regctx" => shape.flags = REGISTER_CONTEXT,
            "x86" => shape.flags = 2,
            "flags4" => shape.flags = 4,
            "flagshi" => shape.flags = 0x8000_0000,
            "zero" => (shape.seed, shape.context_size) = (zero(), full),
            "zero16" => (shape.seed, shape.context_size) = (zero(), 16),
            "null1232" => shape.context_size = full,
            "sfalse1" => shape.callback = abort(1, HResult::S_FALSE),
            "efail1" => shape.callback = abort(1, HResult::E_FAIL),
            "other0" => shape.callback = abort(0, HResult(0x12345)),
            "nullcb" | "null" => shape.callback = CallbackBehavior::Null,
            "seed2size0" => shape.seed_from = Some(2),
            _ if seed_from.is_some() => (shape.seed_from, shape.context_size) = (seed_from, full),
            "own_suspend" => {}
            "own_suspend_seed" => (shape.seed, shape.context_size) = (own_seed(vec![]), full),
            "own_suspend_seed16" => (shape.seed, shape.context_size) = (own_seed(vec![]), 16),
            "own_suspend_seed_native_ip" => {
                let native_ip = vec![(None, SeedValue::Function(NATIVE.into(), 0))];
                (shape.seed, shape.context_size) = (own_seed(native_ip), full);
            }
            "badseed_rsp" | "badseed_rbp" => {
                let register = if rest == "badseed_rsp" {
                    Register::Rsp
                } else {
                    Register::Rbp
                };
                (shape.seed_from, shape.context_size) = (Some(0), full);
                shape.overrides = vec![(Some(register), SeedValue::Raw(BAD_STACK_REGISTER))];
            }
            _ => return None,
        }
        Some(shape)
    }

    /// `walk` with these arguments; a seed from a capture walk takes it from call `capture`
    /// (1-based).
    fn apply(self, walk: CallSpec, capture: usize) -> CallSpec {
        let mut walk = walk.flags(self.flags).callback(self.callback);
        if let Some(target) = self.target {
            walk = walk.target(target);
        }
        if self.context_size != 0 {
            walk = walk.context_size(self.context_size);
        }
        let overrides = self.overrides;
        let seed = self.seed.or(self.seed_from.map(|callback| Seed::Context {
            base: SeedBase::Callback {
                call: capture,
                callback,
            },
            overrides,
        }));
        match seed {
            Some(seed) => walk.seed(seed),
            None => walk,
        }
    }
}

/// Records every `NAME.jsonl` of `results`, which runtime `version` wrote on `platform`, into
/// `out/NAME.toml`.
pub fn folder(
    results: &std::path::Path,
    out: &std::path::Path,
    version: RuntimeVersion,
    platform: Platform,
) -> Result<(), String> {
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
        let text = sim_clr::input::read_text(&log, sim_clr::scenario::MAX_FILE_BYTES)
            .map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        let scenario =
            scenario(&name, &text, version, platform).map_err(|e| format!("{}: {e}", log.display()))?;
        let path = out.join(format!("{name}.toml"));
        std::fs::write(&path, scenario).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
