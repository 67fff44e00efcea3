//! Thread programs: the steps a simulated thread executes, one per scheduling point.
//!
//! A program is written in a scenario file as a list of strings, one step each (`"call Work"`,
//! `"lock heap"`, `"suspend worker"`), with `loop N … end` and `if_alive T … end` blocks.
//! [`parse`] resolves every name (functions, threads, locks, events) and unrolls loops, so the
//! engine runs a flat list of [`Instr`]s; an unknown name is an error at its line.

use crate::code::{CodeMap, FunctionIndex};
pub use crate::runtime_locks::{LockId, RUNTIME_LOCKS};
use std::collections::HashMap;

/// One step. Thread operands are thread indices; functions index the code map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Calls a function: the stack grows by one frame (managed callers stay cooperative).
    Call(FunctionIndex),
    /// Returns from the leaf frame.
    Return,
    /// Enters a P/Invoke into native `function`: InlinedCallFrame, preemptive mode.
    PInvoke(FunctionIndex),
    /// Returns from the P/Invoke to managed code: cooperative again (parks during a GC).
    PInvokeReturn,
    /// Native code calls managed `function` through a reverse P/Invoke (a delegate): the
    /// runtime first adopts a thread it does not know (a `Thread`, `ThreadCreated`,
    /// `ThreadAssignedToOSThread`), then the call enters cooperative mode above a
    /// `UMThkCallFrame`.
    ReversePInvoke(FunctionIndex),
    /// Returns from the reverse P/Invoke to native code: preemptive again. The thread stays
    /// the runtime's until it exits.
    ReversePInvokeReturn,
    /// Allocates: takes the heap lock, releases it at the next step, then (managed code only)
    /// raises ObjectAllocated when the mask says.
    Alloc,
    /// Takes a lock (blocks while another thread holds it).
    Lock(LockId),
    /// Releases a lock the thread holds.
    Unlock(LockId),
    /// Calls an export of the hosted profiler library (by P/Invoke from a managed thread,
    /// directly from a native one): the call at this index of [`Names::exports`].
    CallExport(u32),
    /// Throws: first pass, ExceptionThrown raised.
    Throw,
    /// Sets a thread's `Thread.Name` (to its name in the file): `ThreadNameChanged` for that
    /// thread, raised on this one when the mask says (managed code only).
    SetName(usize),
    /// Second pass: unwinds `n` frames and runs a catch funclet of the new leaf method.
    Catch(u32),
    /// Leaves the catch funclet: the exception is over.
    EndCatch,
    /// Induces a GC: suspends the runtime (cooperative threads park at their next step), then
    /// restarts it.
    Gc,
    /// Runs `n` steps without progress.
    Spin(u32),
    /// Sleeps for this many microseconds of virtual time. A signal's handler interrupts it; the
    /// sleep then goes on to its end, as the runtime's sleep and any loop on the remaining time
    /// do.
    Sleep(u64),
    /// A blocking `read` of a slow device (a pipe, a socket) whose data arrives after this
    /// many microseconds. A signal's handler interrupts it; the read is restarted if the
    /// handler was installed with `SA_RESTART`, and fails with `EINTR` otherwise, which the
    /// step does not handle (`app_saw_eintr`).
    Read(u64),
    /// Starts a thread declared with `start = "spawned"`.
    Spawn(usize),
    /// Waits until a thread's code has ended.
    Join(usize),
    /// Exits: ThreadDestroyed on this thread, then dead; its `Thread` is deleted afterwards.
    Exit,
    /// A foreign agent moves the thread's stack pointer off its stack: `GetThreadContext` and
    /// a signal handler see an RSP that no memory backs (until `restore_rsp`).
    HijackRsp,
    /// The agent puts the stack pointer back.
    RestoreRsp,
    /// The native leaf frame overruns a buffer on its own stack. `overrun`: every word from
    /// its stack pointer up to and including its return address is overwritten with text
    /// ([`crate::thread::OVERRUN_WORD`]), so an unwinder that steps past it reads a return
    /// address and saved registers that point nowhere. `overrun THREAD`: the words up to its
    /// return address hold an address in THREAD's stack (its stack pointer at that moment),
    /// so the saved RBP an unwinder restores points into a stack that is mapped but not this
    /// thread's ([`crate::thread::OverrunFill`]). Either way the frame can never be left
    /// again (its stack-cookie check would end the process).
    Overrun(Option<usize>),
    /// Blocks the profiling signal (Unix).
    MaskSignals,
    /// Unblocks the profiling signal.
    UnmaskSignals,
    /// The application installs its own handler for the profiling signal.
    ReplaceSignalHandler,
    /// `InitializeCurrentThread` (R39).
    InitThread,
    /// `SuspendThread` (Windows): asynchronous until `GetThreadContext` on the target.
    Suspend(usize),
    /// `ResumeThread`.
    Resume(usize),
    /// `GetThreadContext`: completes the target's suspension.
    GetContext(usize),
    /// A raw read of the target's stack at its stack pointer: faults if the memory is gone.
    ReadStack(usize),
    /// `DoStackSnapshot` of a thread (`None`: the caller's own stack).
    Walk(Option<usize>),
    /// `SuspendRuntime` (R41): takes the thread-store lock.
    SuspendRuntime,
    /// `ResumeRuntime`.
    ResumeRuntime,
    /// Sends the profiling signal to a thread (Unix).
    Signal(usize),
    /// `RtlLookupFunctionEntry`: takes the function-table lock for one step.
    LookupFunctionEntry,
    /// The profiler marks the thread it runs on as destroyed (in its ThreadDestroyed handler).
    MarkDestroyed,
    /// Skips to `end` when the profiler has marked `thread` destroyed.
    IfAlive {
        /// The thread checked.
        thread: usize,
        /// Index of the first instruction after the block.
        end: usize,
    },
    /// Sets an event.
    SetEvent(u32),
    /// Waits until an event is set.
    WaitEvent(u32),
}

/// A step and the line it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instr {
    /// The step.
    pub op: Op,
    /// The 1-based line in the scenario file.
    pub line: usize,
    /// The step it comes from: its index in the program as written (a loop's copies share
    /// their step).
    pub step: usize,
}

/// The most instructions one program may unroll to.
pub const MAX_INSTRS: usize = 1 << 16;
/// The largest loop count.
pub const MAX_LOOP: u32 = 10_000;

/// An argument of a call of a hosted library's export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportArg {
    /// An integer (a boolean is 0 or 1), passed as a 64-bit word.
    Int(i64),
    /// A string, passed as a `const char *` to a NUL-terminated copy.
    Str(String),
}

impl ExportArg {
    /// The text, for a string argument.
    pub fn text(&self) -> Option<&str> {
        match self {
            ExportArg::Str(s) => Some(s),
            ExportArg::Int(_) => None,
        }
    }

    /// A program's operand: an integer, `true`/`false`, or else a string.
    fn of_word(word: &str) -> ExportArg {
        match word {
            "true" => ExportArg::Int(1),
            "false" => ExportArg::Int(0),
            _ => word
                .parse()
                .map_or_else(|_| ExportArg::Str(word.to_string()), ExportArg::Int),
        }
    }
}

/// The most arguments an export call passes (the integer registers of the x86-64 C ABI).
pub const MAX_EXPORT_ARGS: usize = 6;

/// A call of a hosted library's export, as a `call_export` step gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportCall {
    /// The export's name.
    pub name: String,
    /// Its arguments, in order.
    pub args: Vec<ExportArg>,
}

/// Names a program may use, and the export calls its steps make.
pub struct Names<'a> {
    threads: HashMap<&'a str, usize>,
    locks: HashMap<&'a str, u32>,
    events: HashMap<&'a str, u32>,
    code: &'a CodeMap,
    /// The export calls of every program parsed with these names, in order.
    pub exports: std::cell::RefCell<Vec<ExportCall>>,
}

impl<'a> Names<'a> {
    /// Indexes the names (each looked up in constant time): threads by index, locks by
    /// [`LockId`] (the runtime's first), events by index, functions in `code`. A name given
    /// twice resolves to its first place.
    pub fn new(
        threads: &'a [String],
        locks: &'a [String],
        events: &'a [String],
        code: &'a CodeMap,
    ) -> Names<'a> {
        fn index<T: TryFrom<usize>>(names: &[String]) -> HashMap<&str, T> {
            let mut out = HashMap::with_capacity(names.len());
            for (i, name) in names.iter().enumerate() {
                if let Ok(i) = T::try_from(i) {
                    out.entry(name.as_str()).or_insert(i);
                }
            }
            out
        }
        Names {
            threads: index(threads),
            locks: index(locks),
            events: index(events),
            code,
            exports: std::cell::RefCell::new(Vec::new()),
        }
    }
}

/// A step's text and its line.
pub struct Line<'a> {
    /// The step as written.
    pub text: &'a str,
    /// The 1-based line.
    pub line: usize,
}

/// A program that does not parse: the line and what is wrong.
#[derive(Debug)]
pub struct ProgramError {
    /// The 1-based line.
    pub line: usize,
    /// The step at fault: its index in the lines given to [`parse`].
    pub step: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses and resolves a program.
pub fn parse(lines: &[Line<'_>], names: &Names<'_>) -> Result<Vec<Instr>, ProgramError> {
    let mut out = Vec::new();
    let mut open: Vec<Block> = Vec::new();
    for (step, l) in lines.iter().enumerate() {
        let err = |message: String| ProgramError {
            line: l.line,
            step,
            message,
        };
        let words: Vec<&str> = l.text.split_whitespace().collect();
        let Some((&verb, args)) = words.split_first() else {
            return Err(err("an empty step".into()));
        };
        let want = |n: usize| -> Result<(), ProgramError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(err(format!("`{verb}` takes {n} operand(s), got {}", args.len())))
            }
        };
        let thread = |name: &str| {
            names
                .threads
                .get(name)
                .copied()
                .ok_or_else(|| err(format!("no thread is named `{name}`")))
        };
        let function = |name: &str| {
            names
                .code
                .by_name(name)
                .ok_or_else(|| err(format!("no function is named `{name}`")))
        };
        let lock = |name: &str| {
            names.locks.get(name).map(|&i| LockId(i)).ok_or_else(|| {
                err(format!(
                    "no lock is named `{name}` (the runtime's are {}; declare others in `locks`)",
                    RUNTIME_LOCKS.join(", ")
                ))
            })
        };
        let event = |name: &str| {
            names
                .events
                .get(name)
                .copied()
                .ok_or_else(|| err(format!("no event is named `{name}` (declare it in `events`)")))
        };
        let count = |text: &str, max: u64| -> Result<u64, ProgramError> {
            match text.parse::<u64>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(err(format!("`{text}` is not a count between 1 and {max}"))),
            }
        };
        let simple = |op: Op| want(0).map(|_| Some(op));
        let op = match verb {
            "call" => want(1)
                .and_then(|_| function(args[0]))
                .map(|f| Some(Op::Call(f)))?,
            "return" => simple(Op::Return)?,
            "pinvoke" => want(1)
                .and_then(|_| function(args[0]))
                .map(|f| Some(Op::PInvoke(f)))?,
            "pinvoke_return" => simple(Op::PInvokeReturn)?,
            "reverse_pinvoke" => {
                want(1)?;
                let f = function(args[0])?;
                if !names.code.function(f).kind.is_managed() {
                    return Err(err(format!(
                        "`reverse_pinvoke` calls managed code: `{}` is not",
                        args[0]
                    )));
                }
                Some(Op::ReversePInvoke(f))
            }
            "reverse_pinvoke_return" => simple(Op::ReversePInvokeReturn)?,
            // `alloc gc`: an allocation that starts a GC once it has its memory.
            "alloc" => match args {
                [] => Some(Op::Alloc),
                ["gc"] => {
                    out.push(Instr {
                        op: Op::Alloc,
                        line: l.line,
                        step,
                    });
                    Some(Op::Gc)
                }
                _ => return Err(err("`alloc` takes no operand, or `gc`".into())),
            },
            "lock" => want(1).and_then(|_| lock(args[0])).map(|l| Some(Op::Lock(l)))?,
            "unlock" => want(1).and_then(|_| lock(args[0])).map(|l| Some(Op::Unlock(l)))?,
            "throw" => simple(Op::Throw)?,
            "call_export" => {
                let Some((&name, operands)) = args.split_first() else {
                    return Err(err("`call_export` names an export".into()));
                };
                if operands.len() > MAX_EXPORT_ARGS {
                    return Err(err(format!(
                        "`call_export` passes at most {MAX_EXPORT_ARGS} arguments"
                    )));
                }
                let mut exports = names.exports.borrow_mut();
                exports.push(ExportCall {
                    name: name.to_string(),
                    args: operands.iter().map(|w| ExportArg::of_word(w)).collect(),
                });
                Some(Op::CallExport((exports.len() - 1) as u32))
            }
            "set_name" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::SetName(t)))?,
            "catch" => want(1)
                .and_then(|_| count(args[0], 1 << 16))
                .map(|n| Some(Op::Catch(n as u32)))?,
            "end_catch" => simple(Op::EndCatch)?,
            "gc" => simple(Op::Gc)?,
            "spin" => want(1)
                .and_then(|_| count(args[0], u32::MAX as u64))
                .map(|n| Some(Op::Spin(n as u32)))?,
            "sleep" | "read" => {
                want(1)?;
                let us = match args[0].strip_suffix("ms") {
                    Some(ms) => count(ms, 3_600_000)? * 1000,
                    None => match args[0].strip_suffix("us") {
                        Some(us) => count(us, 3_600_000_000)?,
                        None => {
                            return Err(err(format!(
                                "`{}` is not a duration like `500ms` or `20us`",
                                args[0]
                            )))
                        }
                    },
                };
                Some(if verb == "sleep" {
                    Op::Sleep(us)
                } else {
                    Op::Read(us)
                })
            }
            "join" => want(1).and_then(|_| thread(args[0])).map(|t| Some(Op::Join(t)))?,
            "spawn" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::Spawn(t)))?,
            "exit" => simple(Op::Exit)?,
            "hijack_rsp" => simple(Op::HijackRsp)?,
            "restore_rsp" => simple(Op::RestoreRsp)?,
            "overrun" => match args {
                [] => Some(Op::Overrun(None)),
                [t] => Some(Op::Overrun(Some(thread(t)?))),
                _ => return Err(err("`overrun` takes at most one thread".into())),
            },
            "mask_signals" => simple(Op::MaskSignals)?,
            "unmask_signals" => simple(Op::UnmaskSignals)?,
            "replace_signal_handler" => simple(Op::ReplaceSignalHandler)?,
            "init_thread" => simple(Op::InitThread)?,
            "suspend" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::Suspend(t)))?,
            "resume" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::Resume(t)))?,
            "get_context" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::GetContext(t)))?,
            "read_stack" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::ReadStack(t)))?,
            "walk" => match args {
                [] => Some(Op::Walk(None)),
                [t] => Some(Op::Walk(Some(thread(t)?))),
                _ => return Err(err("`walk` takes at most one thread".into())),
            },
            "suspend_runtime" => simple(Op::SuspendRuntime)?,
            "resume_runtime" => simple(Op::ResumeRuntime)?,
            "signal" => want(1)
                .and_then(|_| thread(args[0]))
                .map(|t| Some(Op::Signal(t)))?,
            "lookup_function_entry" => simple(Op::LookupFunctionEntry)?,
            "mark_destroyed" => simple(Op::MarkDestroyed)?,
            "set_event" => want(1)
                .and_then(|_| event(args[0]))
                .map(|e| Some(Op::SetEvent(e)))?,
            "wait_event" => want(1)
                .and_then(|_| event(args[0]))
                .map(|e| Some(Op::WaitEvent(e)))?,
            "loop" => {
                want(1)?;
                let n = count(args[0], MAX_LOOP as u64)? as u32;
                open.push(Block::Loop {
                    start: out.len(),
                    count: n,
                    step,
                });
                None
            }
            "if_alive" => {
                want(1)?;
                let t = thread(args[0])?;
                open.push(Block::IfAlive { at: out.len(), step });
                out.push(Instr {
                    op: Op::IfAlive { thread: t, end: 0 },
                    line: l.line,
                    step,
                });
                None
            }
            "end" => {
                want(0)?;
                match open.pop() {
                    None => return Err(err("`end` without `loop` or `if_alive`".into())),
                    Some(Block::Loop { start, count, .. }) => {
                        let body: Vec<Instr> = out[start..].to_vec();
                        if body.len().saturating_mul(count as usize) + start > MAX_INSTRS {
                            return Err(err(format!(
                                "the program unrolls to more than {MAX_INSTRS} steps"
                            )));
                        }
                        for _ in 1..count {
                            let base = out.len() - start;
                            out.extend(body.iter().map(|i| shift(*i, base)));
                        }
                    }
                    Some(Block::IfAlive { at, .. }) => {
                        let end = out.len();
                        if let Op::IfAlive { end: e, .. } = &mut out[at].op {
                            *e = end;
                        }
                    }
                }
                None
            }
            _ => return Err(err(format!("`{verb}` is not a step (see the scenario format)"))),
        };
        if let Some(op) = op {
            out.push(Instr {
                op,
                line: l.line,
                step,
            });
        }
        if out.len() > MAX_INSTRS {
            return Err(err(format!("the program has more than {MAX_INSTRS} steps")));
        }
    }
    if let Some(Block::Loop { step, .. } | Block::IfAlive { step, .. }) = open.last() {
        return Err(ProgramError {
            line: lines[*step].line,
            step: *step,
            message: "this `loop` or `if_alive` block has no `end`".into(),
        });
    }
    Ok(out)
}

/// An open block while parsing.
enum Block {
    Loop { start: usize, count: u32, step: usize },
    IfAlive { at: usize, step: usize },
}

/// A copy of a loop body's instruction moved by `by` positions (jump targets move with it).
fn shift(mut instr: Instr, by: usize) -> Instr {
    if let Op::IfAlive { end, .. } = &mut instr.op {
        *end += by;
    }
    instr
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::{CodeKind, FunctionSpec};

    fn run(text: &[&str]) -> Result<Vec<Instr>, ProgramError> {
        let code = CodeMap::build(
            &[FunctionSpec::new("Work", CodeKind::Jit)],
            crate::platform::Platform::Unix,
        )
        .unwrap();
        let threads = ["main".to_string(), "sampler".to_string()];
        let locks: Vec<String> = RUNTIME_LOCKS.iter().map(|s| s.to_string()).collect();
        let events = ["go".to_string()];
        let names = Names::new(&threads, &locks, &events, &code);
        let lines: Vec<Line> = text
            .iter()
            .enumerate()
            .map(|(i, t)| Line { text: t, line: i + 1 })
            .collect();
        parse(&lines, &names)
    }

    #[test]
    fn loops_unroll_and_if_alive_jumps_past_its_block() {
        let p = run(&["loop 2", "if_alive main", "walk main", "end", "sleep 1ms", "end"]).unwrap();
        let ops: Vec<Op> = p.iter().map(|i| i.op).collect();
        assert_eq!(
            ops,
            vec![
                Op::IfAlive { thread: 0, end: 2 },
                Op::Walk(Some(0)),
                Op::Sleep(1000),
                Op::IfAlive { thread: 0, end: 5 },
                Op::Walk(Some(0)),
                Op::Sleep(1000),
            ]
        );
    }

    #[test]
    fn export_calls_keep_their_typed_arguments_in_the_names_table() {
        let code = CodeMap::build(&[], crate::platform::Platform::Unix).unwrap();
        let threads = ["main".to_string()];
        let names = Names::new(&threads, &[], &[], &code);
        let line = |text| Line { text, line: 1 };
        let p = parse(&[line("call_export Arm 7 -1 true walk:default")], &names).unwrap();
        assert_eq!(p[0].op, Op::CallExport(0));
        let call = &names.exports.borrow()[0];
        assert_eq!(call.name, "Arm");
        assert_eq!(
            call.args,
            [
                ExportArg::Int(7),
                ExportArg::Int(-1),
                ExportArg::Int(1),
                ExportArg::Str("walk:default".into())
            ]
        );
        assert!(parse(&[line("call_export")], &names).is_err());
        assert!(parse(&[line("call_export F 1 2 3 4 5 6 7")], &names)
            .unwrap_err()
            .message
            .contains("at most 6"));
    }

    #[test]
    fn unknown_names_and_bad_blocks_are_errors_at_their_line() {
        let e = run(&["call Work", "lock nosuch"]).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("no lock is named `nosuch`"), "{}", e.message);
        assert!(run(&["call Nope"]).unwrap_err().message.contains("no function"));
        assert!(run(&["suspend ghost"]).unwrap_err().message.contains("no thread"));
        assert!(run(&["end"]).unwrap_err().message.contains("without"));
        // An unclosed block is reported at its opening step.
        let unclosed = run(&["call Work", "loop 3", "return"]).unwrap_err();
        assert_eq!((unclosed.line, unclosed.step), (2, 1));
        assert_eq!(run(&["spin 1", "loop 2"]).unwrap_err().line, 2);
        assert!(run(&["sleep 5"]).unwrap_err().message.contains("duration"));
        assert!(run(&["loop 0", "end"]).is_err());
        assert!(run(&["frobnicate"]).is_err());
        assert!(run(&["loop 10000", "loop 10000", "spin 1", "end", "end"]).is_err());
    }
}
