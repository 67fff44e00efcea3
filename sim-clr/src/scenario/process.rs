//! Validation of a scenario's moving parts: thread programs, profiler handlers, locks, events,
//! limits and the built-in samplers' settings, into a [`ProcessSpec`].

use super::error::{ScenarioError, Source};
use super::model::{ExploreModel, FileModel, LimitsModel, SamplerModel, ThreadModel};
use super::types::MAX_NAMES;
use crate::code::CodeMap;
use crate::spec::program::{self, Instr, Line, Names, Op, RUNTIME_LOCKS};
use crate::spec::{
    Ending, ExploreSpec, Handlers, Limits, NamedBody, ProcessSpec, Program, Reuses, SamplerSettings, Strategy,
};
use crate::thread::Thread;
use corprof::os::SignalFlags;
use std::collections::HashSet;
use std::ops::RangeInclusive;
use toml::Spanned;

type Res<T> = Result<T, ScenarioError>;

/// Checks and resolves everything that moves. `declared_calls[i]` is thread `i`'s number of
/// declared calls (its stack depth before its program runs).
pub(super) fn process_spec(
    src: &Source<'_>,
    m: &FileModel,
    threads: &[Thread],
    declared_calls: &[usize],
    code: &CodeMap,
) -> Res<ProcessSpec> {
    let locks = declared_names(src, &m.locks, "locks", &RUNTIME_LOCKS)?;
    let events = declared_names(src, &m.events, "events", &[])?;
    let thread_names: Vec<String> = threads.iter().map(|t| t.name.clone()).collect();
    let names = Names::new(&thread_names, &locks, &events, code);
    let mut programs = Vec::new();
    let mut spawned = Vec::new();
    let mut created = Vec::new();
    let mut bodies = Vec::new();
    for (i, t) in m.threads.iter().enumerate() {
        let t = t.get_ref();
        let program = match &t.program {
            Some(lines) => {
                let p = parse(src, lines, &names, "program")?;
                check_balance(src, &p, declared_calls[i], lines)?;
                Some(p)
            }
            None => None,
        };
        let start = start(src, t, program.is_some())?;
        spawned.push(start == Start::Spawned);
        created.push(start == Start::Profiler);
        bodies.push(match &t.body {
            Some(body) if program.is_some() => {
                return Err(src.error(
                    body.span(),
                    "body",
                    "a thread runs a `program` or a `body`, not both",
                ))
            }
            Some(body) if start == Start::Profiler => {
                return Err(src.error(
                    body.span(),
                    "body",
                    "a thread the profiler creates runs the code the profiler gives it, not a `body`",
                ))
            }
            Some(body) => Some(NamedBody {
                name: body.get_ref().clone(),
                line: src.line(body.span().start),
            }),
            None => None,
        });
        programs.push(program);
    }
    for (p, model) in programs.iter().zip(&m.threads) {
        let (Some(p), Some(steps)) = (p, &model.get_ref().program) else {
            continue;
        };
        for instr in p.iter() {
            let problem = match instr.op {
                Op::Spawn(x) if !spawned[x] => Some(("spawn", x, "does not have `start = \"spawned\"`")),
                Op::Join(x) if programs[x].is_none() => Some(("join", x, "has no `program`: it never ends")),
                _ => None,
            };
            if let Some((verb, x, what)) = problem {
                let message = format!("`{verb} {}`: that thread {what}", thread_names[x]);
                return Err(src.error(steps[instr.step].span(), "program", message));
            }
        }
    }
    let reuses = reuses(src, m, threads, &spawned, &programs)?;
    let handlers = match &m.profiler {
        None => Handlers::default(),
        Some(p) => {
            let handler = |lines: &Option<Vec<Spanned<String>>>, field: &str| {
                lines.as_ref().map(|l| parse(src, l, &names, field)).transpose()
            };
            Handlers {
                thread_created: handler(&p.thread_created, "thread_created")?,
                thread_destroyed: handler(&p.thread_destroyed, "thread_destroyed")?,
                object_allocated: handler(&p.object_allocated, "object_allocated")?,
                exception_thrown: handler(&p.exception_thrown, "exception_thrown")?,
                signal: handler(&p.signal_handler, "signal_handler")?,
                signal_flags: signal_flags(src, p.signal_flags.as_ref())?,
            }
        }
    };
    let exports = names.exports.take();
    drop(names);
    let explore = explore(src, m.explore.as_ref(), &locks)?;
    Ok(ProcessSpec {
        programs,
        spawned,
        created,
        reuses,
        bodies,
        handlers,
        locks,
        events,
        limits: limits(src, m.limits.as_ref())?,
        explore,
        sampler: sampler(src, m.sampler.as_ref())?,
        exports,
    })
}

/// `[sampler]`: each setting within its range.
fn sampler(src: &Source<'_>, m: Option<&SamplerModel>) -> Res<SamplerSettings> {
    let Some(m) = m else {
        return Ok(SamplerSettings::default());
    };
    let field = |v: &Option<Spanned<u64>>, name: &str, range: RangeInclusive<u64>| -> Res<Option<u64>> {
        bounded(src, v, name, range)
    };
    Ok(SamplerSettings {
        rounds: field(&m.rounds, "rounds", 1..=10_000)?.map(|v| v as u32),
        max_frames: field(&m.max_frames, "max_frames", 1..=65_536)?.map(|v| v as u32),
        period_us: field(&m.period_us, "period_us", 0..=60_000_000)?,
        watchdog_ms: field(&m.watchdog_ms, "watchdog_ms", 1..=3_600_000)?,
    })
}

/// An optional number within `range`: an error at its line naming `name` otherwise.
fn bounded(
    src: &Source<'_>,
    v: &Option<Spanned<u64>>,
    name: &str,
    range: RangeInclusive<u64>,
) -> Res<Option<u64>> {
    match v {
        Some(v) if !range.contains(v.get_ref()) => Err(src.error(
            v.span(),
            name,
            format!("must be between {} and {}", range.start(), range.end()),
        )),
        Some(v) => Ok(Some(*v.get_ref())),
        None => Ok(None),
    }
}

/// `signal_flags`: `sa_flags` by name (`SA_RESTART`, `SA_SIGINFO`, `SA_ONSTACK`).
fn signal_flags(src: &Source<'_>, names: Option<&Spanned<Vec<String>>>) -> Res<SignalFlags> {
    let Some(names) = names else {
        return Ok(SignalFlags::default());
    };
    names
        .get_ref()
        .iter()
        .try_fold(SignalFlags::default(), |flags, name| {
            let flag = SignalFlags::named(name).ok_or_else(|| {
                let known: Vec<&str> = SignalFlags::NAMED.iter().map(|(_, n)| *n).collect();
                let message = format!("unknown flag `{name}` (known: {})", known.join(", "));
                src.error(names.span(), "signal_flags", message)
            })?;
            Ok(flags | flag)
        })
}

/// `builtin` names, then the declared ones (each new, non-empty and a single word).
fn declared_names(
    src: &Source<'_>,
    declared: &[Spanned<String>],
    field: &str,
    builtin: &[&str],
) -> Res<Vec<String>> {
    if let Some(extra) = declared.get(MAX_NAMES) {
        return Err(src.error(extra.span(), field, format!("at most {MAX_NAMES} names")));
    }
    let mut seen: HashSet<&str> = builtin.iter().copied().collect();
    for name in declared {
        let text = name.get_ref();
        if text.is_empty() || text.split_whitespace().count() != 1 || text.trim() != text {
            return Err(src.error(name.span(), field, format!("`{text}` is not a one-word name")));
        }
        if !seen.insert(text) {
            return Err(src.error(
                name.span(),
                field,
                format!("`{text}` is declared twice (or is the runtime's)"),
            ));
        }
    }
    Ok(builtin
        .iter()
        .map(|s| s.to_string())
        .chain(declared.iter().map(|n| n.get_ref().clone()))
        .collect())
}

fn parse(src: &Source<'_>, steps: &[Spanned<String>], names: &Names<'_>, field: &str) -> Res<Program> {
    let lines: Vec<Line<'_>> = steps
        .iter()
        .map(|l| Line {
            text: l.get_ref(),
            line: src.line(l.span().start),
        })
        .collect();
    let program =
        program::parse(&lines, names).map_err(|e| src.error(steps[e.step].span(), field, e.message))?;
    Ok(program.into())
}

/// Calls and returns must balance: a thread never returns from its root frame.
fn check_balance(src: &Source<'_>, program: &[Instr], declared: usize, steps: &[Spanned<String>]) -> Res<()> {
    let mut depth = declared;
    for instr in program {
        let unbalanced = |what: &str| {
            src.error(
                steps[instr.step].span(),
                "program",
                format!("unbalanced: `{what}` here would leave the thread without its root frame ({depth} frame(s) on the stack)"),
            )
        };
        match instr.op {
            Op::Call(_) | Op::PInvoke(_) | Op::ReversePInvoke(_) => depth += 1,
            Op::Return | Op::PInvokeReturn | Op::ReversePInvokeReturn if depth < 2 => {
                return Err(unbalanced("return"))
            }
            Op::Return | Op::PInvokeReturn | Op::ReversePInvokeReturn => depth -= 1,
            Op::Catch(n) if depth <= n as usize => return Err(unbalanced("catch")),
            Op::Catch(n) => depth -= n as usize,
            _ => {}
        }
    }
    Ok(())
}

/// `reuses_thread_id` and `reuses_os_id`: each names another thread that ends (it has a
/// `program`; one whose `ThreadID` is taken over frees its `Thread` at an `exit` step), taken
/// over by one spawned thread at most, with no cycle; a `ThreadID` passes between managed
/// threads only.
fn reuses(
    src: &Source<'_>,
    m: &FileModel,
    threads: &[Thread],
    spawned: &[bool],
    programs: &[Option<Program>],
) -> Res<Vec<Reuses>> {
    let mut out = vec![Reuses::default(); threads.len()];
    let mut taken: [Vec<bool>; 2] = [vec![false; threads.len()], vec![false; threads.len()]];
    for (t, model) in m.threads.iter().enumerate() {
        let model = model.get_ref();
        let fields = [
            (&model.reuses_thread_id, "reuses_thread_id"),
            (&model.reuses_os_id, "reuses_os_id"),
        ];
        for (which, (value, field)) in fields.into_iter().enumerate() {
            let Some(value) = value else { continue };
            let fail = |message: String| Err(src.error(value.span(), field, message));
            let name = value.get_ref();
            let Some(from) = threads.iter().position(|x| &x.name == name) else {
                return fail(format!("no thread is named `{name}`"));
            };
            let thread_id = which == 0;
            if from == t {
                return fail("a thread cannot take over its own id".into());
            }
            if !spawned[t] {
                return fail(format!(
                    "a thread takes over `{name}`'s id once `{name}` has ended, so it starts later: it needs `start = \"spawned\"`"
                ));
            }
            let Some(program) = &programs[from] else {
                return fail(format!("`{name}` has no `program`: it never ends"));
            };
            if thread_id && !(threads[t].is_managed() && threads[from].is_managed()) {
                return fail("a ThreadID belongs to a managed thread: both threads must be managed".into());
            }
            if thread_id && !program.iter().any(|i| i.op == Op::Exit) {
                return fail(format!(
                    "`{name}` has no `exit` step: its Thread is never freed, so its ThreadID never becomes free"
                ));
            }
            if std::mem::replace(&mut taken[which][from], true) {
                return fail(format!("another thread already takes over `{name}`'s id"));
            }
            let slot = if thread_id {
                &mut out[t].thread_id
            } else {
                &mut out[t].os_id
            };
            *slot = Some(from);
        }
    }
    // A cycle (each waits for the other's end) never starts: refused at its first thread.
    if let Some(t) = cycle(&out) {
        let model = m.threads[t].get_ref();
        let (value, field) = match (&model.reuses_thread_id, &model.reuses_os_id) {
            (Some(v), _) => (v, "reuses_thread_id"),
            (None, Some(v)) => (v, "reuses_os_id"),
            (None, None) => unreachable!("a thread in a cycle takes over an id"),
        };
        let message = format!(
            "`{}` takes over ids in a cycle: each thread would wait for the other's end",
            threads[t].name
        );
        return Err(src.error(value.span(), field, message));
    }
    Ok(out)
}

/// A thread whose takeovers lead back to it, if any: a depth-first walk of the edges from
/// each thread to the threads it waits for, linear in the number of threads.
fn cycle(reuses: &[Reuses]) -> Option<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Seen {
        No,
        OnPath,
        Done,
    }
    let mut seen = vec![Seen::No; reuses.len()];
    for start in 0..reuses.len() {
        if seen[start] != Seen::No {
            continue;
        }
        seen[start] = Seen::OnPath;
        let mut path = vec![(start, reuses[start].after())];
        while let Some((x, next)) = path.last_mut() {
            match next.next() {
                Some(y) if seen[y] == Seen::OnPath => return Some(y),
                Some(y) if seen[y] == Seen::No => {
                    seen[y] = Seen::OnPath;
                    path.push((y, reuses[y].after()));
                }
                Some(_) => {}
                None => {
                    seen[*x] = Seen::Done;
                    path.pop();
                }
            }
        }
    }
    None
}

/// For each thread, the first owner of the id `pick` says it takes over (itself when it takes
/// over none): a chain of takeovers passes one id on. `reuses` has no cycle ([`cycle`]); each
/// thread's owner is found once.
pub(super) fn first_owners(reuses: &[Reuses], pick: fn(&Reuses) -> Option<usize>) -> Vec<usize> {
    let mut first: Vec<Option<usize>> = vec![None; reuses.len()];
    for t in 0..reuses.len() {
        let mut chain = vec![t];
        let owner = loop {
            let x = chain[chain.len() - 1];
            match (first[x], pick(&reuses[x])) {
                (Some(owner), _) => break owner,
                (None, Some(from)) => chain.push(from),
                (None, None) => break x,
            }
        };
        for x in chain {
            first[x] = Some(owner);
        }
    }
    first.into_iter().map(|o| o.unwrap_or_default()).collect()
}

/// When a thread starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// From the beginning (`start = "running"`, the default).
    Running,
    /// At another thread's `spawn` step (`start = "spawned"`).
    Spawned,
    /// When the profiler creates a thread (`start = "profiler"`).
    Profiler,
}

/// When the thread starts: a spawned thread needs a `program`; one the profiler creates is a
/// native thread without one.
fn start(src: &Source<'_>, t: &ThreadModel, has_program: bool) -> Res<Start> {
    let Some(start) = &t.start else {
        return Ok(Start::Running);
    };
    let native = t.kind.as_ref().is_some_and(|k| k.get_ref() == "native");
    match start.get_ref().as_str() {
        "running" => Ok(Start::Running),
        "spawned" if has_program => Ok(Start::Spawned),
        "spawned" => Err(src.error(start.span(), "start", "a spawned thread needs a `program`")),
        "profiler" if has_program || !native => Err(src.error(
            start.span(),
            "start",
            "a thread the profiler creates is `kind = \"native\"` and has no `program`",
        )),
        "profiler" => Ok(Start::Profiler),
        other => Err(src.error(
            start.span(),
            "start",
            format!("`{other}` is not one of `running`, `spawned`, `profiler`"),
        )),
    }
}

fn limits(src: &Source<'_>, m: Option<&LimitsModel>) -> Res<Limits> {
    let mut limits = Limits::default();
    let Some(m) = m else {
        return Ok(limits);
    };
    let field = |v: &Option<Spanned<u64>>, name: &str, range: RangeInclusive<u64>| -> Res<Option<u64>> {
        bounded(src, v, name, range)
    };
    if let Some(v) = field(&m.step_us, "step_us", 1..=1_000_000)? {
        limits.step_us = v;
    }
    if let Some(v) = field(&m.livelock_ms, "livelock_ms", 1..=86_400_000)? {
        limits.livelock_us = v * 1000;
    }
    if let Some(v) = field(&m.max_steps, "max_steps", 1..=100_000_000)? {
        limits.max_steps = v;
    }
    if let Some(v) = field(&m.idle_steps, "idle_steps", 1..=100_000_000)? {
        limits.idle_steps = v;
    }
    if let Some(v) = field(&m.callback_depth, "callback_depth", 2..=4096)? {
        limits.callback_depth = v as usize;
    }
    Ok(limits)
}

/// `[explore]`; `reach` names windows of a process with the locks `locks`.
fn explore(src: &Source<'_>, m: Option<&ExploreModel>, locks: &[String]) -> Res<ExploreSpec> {
    let mut spec = ExploreSpec::default();
    let Some(m) = m else {
        return Ok(spec);
    };
    let bound = m.bound.as_ref().map(|b| *b.get_ref());
    if let Some(b) = m.bound.as_ref().filter(|b| *b.get_ref() > 16) {
        return Err(src.error(b.span(), "bound", "at most 16"));
    }
    if let Some(s) = &m.strategy {
        spec.strategy = match s.get_ref().as_str() {
            "random" => Strategy::Random,
            "pct" => Strategy::Pct(bound.unwrap_or(3).max(1)),
            "dfs" => Strategy::Dfs(bound.unwrap_or(2)),
            "cover" => Strategy::Cover,
            other => {
                return Err(src.error(
                    s.span(),
                    "strategy",
                    format!("`{other}` is not one of `random`, `pct`, `dfs`, `cover`"),
                ))
            }
        };
    }
    if let Some(n) = &m.schedules {
        if !(1..=10_000_000).contains(n.get_ref()) {
            return Err(src.error(n.span(), "schedules", "must be between 1 and 10000000"));
        }
        spec.schedules = *n.get_ref();
    }
    spec.seed = m.seed.unwrap_or(1);
    if let Some(expect) = &m.expect {
        if let Some(o) = expect.get_ref().iter().find(|o| !Ending::is_outcome(o)) {
            return Err(src.error(
                expect.span(),
                "expect",
                format!("`{o}` is not an outcome (see the scenario format's outcomes)"),
            ));
        }
        let mut set = expect.get_ref().clone();
        set.sort();
        set.dedup();
        spec.expect = Some(set);
    }
    if let Some(reach) = &m.reach {
        let known = crate::coverage::windows(locks);
        if let Some(w) = reach.get_ref().iter().find(|w| !known.contains(w)) {
            return Err(src.error(
                reach.span(),
                "reach",
                format!(
                    "`{w}` is not a window of this process (docs/pitfalls.md lists them: {})",
                    known.join(", ")
                ),
            ));
        }
        spec.reach = reach.get_ref().clone();
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takes(thread_id: Option<usize>, os_id: Option<usize>) -> Reuses {
        Reuses { thread_id, os_id }
    }

    #[test]
    fn a_chain_declared_out_of_order_passes_its_first_owners_id_on() {
        // 0 takes 2's ThreadID, 2 takes 1's; 3 takes 0's OS id.
        let reuses = [
            takes(Some(2), None),
            takes(None, None),
            takes(Some(1), None),
            takes(None, Some(0)),
        ];
        assert_eq!(cycle(&reuses), None);
        assert_eq!(first_owners(&reuses, |r| r.thread_id), [1, 1, 1, 3]);
        assert_eq!(first_owners(&reuses, |r| r.os_id), [0, 1, 2, 0]);
    }

    #[test]
    fn a_cycle_through_both_kinds_of_id_is_found() {
        let reuses = [takes(None, None), takes(Some(2), None), takes(None, Some(1))];
        assert_eq!(cycle(&reuses), Some(1));
    }
}
