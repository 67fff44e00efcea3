//! Simulated threads: their runtime state and their ground-truth stack, leaf first.
//!
//! A thread's stack is a list of [`StackEntry`]s: calls (one per function activation) and the
//! runtime's explicit Frames (InlinedCallFrame, HelperMethodFrame, …) that sit between them.
//! [`Thread::materialize`] lays the calls out in the thread's stack memory by instantiating
//! each function's machine-code template at the frame's IP, root first — return addresses,
//! pushed and saved registers where the code put them, and each frame's registers — so that
//! the runtime's walk and a profiler's own unwinder read the stack from memory rather than
//! from the list.

use crate::code::{CodeKind, CodeMap, FunctionIndex};
use crate::leaf_first::LeafFirst;
use crate::memory::AddressSpace;
use corprof::context::{CONTEXT_CONTROL, CONTEXT_INTEGER};
use corprof::{Context, Register, ThreadId};

/// A runtime explicit Frame: a record the runtime links into a per-thread chain so that a walk
/// can hop over native code (R20.4, R21, R32). Frames never produce a callback themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Pushed by a managed method calling native code through P/Invoke; returns into it.
    InlinedCall,
    /// Pushed by a runtime helper (FCALL) called from managed code; returns into the caller.
    HelperMethod,
    /// Pushed when a runtime suspension parks a thread that was running managed code; returns
    /// into the interrupted method (a resumable frame).
    Redirected,
    /// Pushed where native code called into managed code (reverse P/Invoke); it returns into
    /// native code, so a walk crossing native code skips it.
    ReversePInvoke,
    /// A frame that protects GC references and points at no function (skipped, R32).
    Gc,
}

impl FrameKind {
    /// Every kind, for parsing and documentation.
    pub const ALL: [FrameKind; 5] = [
        FrameKind::InlinedCall,
        FrameKind::HelperMethod,
        FrameKind::Redirected,
        FrameKind::ReversePInvoke,
        FrameKind::Gc,
    ];

    /// The runtime's class name (`"InlinedCallFrame"`).
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::InlinedCall => "InlinedCallFrame",
            FrameKind::HelperMethod => "HelperMethodFrame",
            FrameKind::Redirected => "RedirectedThreadFrame",
            FrameKind::ReversePInvoke => "UMThkCallFrame",
            FrameKind::Gc => "GCFrame",
        }
    }

    /// Parses the class name.
    pub fn parse(text: &str) -> Option<FrameKind> {
        FrameKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// True when the Frame records a return address into the call below it, so that a walk
    /// can resume there.
    pub fn returns_into_caller(self) -> bool {
        matches!(
            self,
            FrameKind::InlinedCall | FrameKind::HelperMethod | FrameKind::Redirected
        )
    }
}

/// The kind of exception-handler funclet a call is (R28).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Funclet {
    /// A catch handler, run in the second pass.
    Catch,
    /// A finally (or fault) handler, run in the second pass.
    Finally,
    /// An exception filter, run in the first pass, before anything is unwound.
    Filter,
}

impl Funclet {
    /// True for handlers that run once the frames between them and their parent were unwound:
    /// a walk reports such a funclet under its method, then resumes after its parent (which it
    /// does not report again). Filters run before unwinding, so their parent is reported too.
    pub fn second_pass(self) -> bool {
        self != Funclet::Filter
    }
}

/// One element of a thread's ground-truth stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackEntry {
    /// An activation of `function`; `offset` is the IP's offset inside it (the current IP for
    /// the leaf, the return address for the others), `None` for the default.
    Call {
        /// The function executing.
        function: FunctionIndex,
        /// IP offset from the function's start.
        offset: Option<u64>,
        /// The handler funclet of `function` this activation is, if it is one.
        funclet: Option<Funclet>,
    },
    /// A runtime explicit Frame, living in the memory of the next call below it.
    Frame(FrameKind),
}

impl StackEntry {
    /// The stack bytes the entry's frame takes: its function's frame size for a call; none
    /// for an explicit Frame, which lives in the call below it.
    pub fn bytes(&self, code: &CodeMap) -> u64 {
        match self {
            StackEntry::Call { function, .. } => code.function(*function).frame_size,
            StackEntry::Frame(_) => 0,
        }
    }
}

/// Whether a thread has a runtime `Thread` object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    /// A thread the runtime knows (it has run managed code): it has a `ThreadID`.
    Managed,
    /// A thread that never ran managed code (e.g. a profiler's sampler thread).
    Native,
}

/// The GC mode of a managed thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Running managed code (or runtime code with GC disabled): the GC must wait for it.
    Cooperative,
    /// In native code, blocked, or parked: the GC may run.
    Preemptive,
}

/// Where a thread is in its life (R11.1, R37).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Created by the application but not started (a thread that waits for a `spawn`): not
    /// yet fully initialized, so `EnumThreads` does not list it and no callback has named it.
    Unstarted,
    /// Running.
    Alive,
    /// Inside `ThreadDestroyed`: still fully valid.
    Destroying,
    /// `ThreadDestroyed` returned: OS handle invalid, external count dropped, memory not yet
    /// freed. A Windows cross-thread walk of it is a fatal error (R11.1).
    Dead,
    /// The `Thread` object is freed and its stack unmapped: any use is a use-after-free.
    Deleted,
}

/// Exception-handling state relevant to R15/R16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExceptionState {
    /// No exception in flight.
    None,
    /// First pass (search for a handler); frames are intact.
    FirstPass,
    /// Second pass started and managed code not yet re-entered (R15).
    Unwinding,
    /// Second pass, a managed handler (funclet) running.
    UnwindingInManaged,
    /// `TEF_InconsistentExceptionState` (R16).
    Inconsistent,
}

/// What `GetThreadContext` on the thread would show (R13.1, R13.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsContext {
    /// A normal, safe context.
    Ok,
    /// A debugger filter context is set.
    DebuggerFilter,
    /// `GetThreadContext` fails.
    GetContextFails,
    /// The thread is in a system service (`CONTEXT_SERVICE_ACTIVE`).
    InKernel,
    /// The thread is in exception dispatch (`CONTEXT_EXCEPTION_ACTIVE`).
    ExceptionActive,
    /// The OS does not report exception state (`CONTEXT_EXCEPTION_REPORTING` absent).
    NoExceptionReporting,
    /// A stale context whose RSP lies above the most recent explicit Frame (R13.4).
    Stale,
}

/// What a CONTEXT of a laid-out call holds besides its registers: the control and integer
/// parts valid, user-mode segments and the usual flags; everything else zero.
pub(crate) fn call_context_base() -> Context {
    let mut context = Context::zeroed();
    context.context_flags = CONTEXT_CONTROL | CONTEXT_INTEGER;
    context.seg_cs = 0x33;
    context.seg_ss = 0x2b;
    context.e_flags = 0x246;
    context
}

/// A call laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaidCall {
    /// Depth in [`Thread::stack`] (position from the root): it stays while the stack above
    /// the call changes.
    pub depth: usize,
    /// The function executing.
    pub function: FunctionIndex,
    /// The IP in this frame (current IP for the leaf, return address otherwise).
    pub rip: u64,
    /// RSP while this frame runs (at its call site for non-leaf frames).
    pub rsp: u64,
    /// The canonical frame address: RSP before the call that created this frame.
    pub cfa: u64,
    /// The handler funclet this activation is, if any.
    pub funclet: Option<Funclet>,
    /// The stack bytes of the calls from the root up to this one: their functions' frame
    /// sizes ([`Thread::stack_bytes`] at the leaf).
    pub bytes: u64,
    /// The general-purpose registers while this frame runs (at its call site for non-leaf
    /// frames), by [`Register`] number: what its code left there.
    pub regs: [u64; 16],
}

/// An explicit Frame laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaidFrame {
    /// Depth in [`Thread::stack`] (position from the root).
    pub depth: usize,
    /// The Frame's class.
    pub kind: FrameKind,
    /// The Frame's address (inside the call below it).
    pub address: u64,
    /// The call the Frame returns into, if any, by its position from the root in
    /// [`Layout::calls`] (`calls.root_first()[i]`): it stays while the stack above it changes.
    pub returns_to: Option<usize>,
}

/// A thread's stack as laid out in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Calls, leaf first.
    pub calls: LeafFirst<LaidCall>,
    /// How many calls run a funclet ([`Layout::funclets`]).
    funclet_calls: usize,
    /// Explicit Frames, most recent (lowest address) first: the runtime's Frame chain.
    pub frames: LeafFirst<LaidFrame>,
    /// The return-address slot overwritten by a GC hijack, with the original value (R29).
    pub hijacked_slot: Option<(u64, u64)>,
    /// Index into [`Layout::calls`] of the call whose words a buffer overrun overwrote
    /// ([`Thread::overrun`]).
    pub overrun: Option<usize>,
}

impl Layout {
    /// True when a call runs a funclet: only then does a walk look for funclet parents (R28).
    pub fn funclets(&self) -> bool {
        self.funclet_calls > 0
    }
}

/// A simulated thread.
#[derive(Clone, Debug)]
pub struct Thread {
    /// Scenario name.
    pub name: String,
    /// Managed (has a `Thread` object) or native.
    pub kind: ThreadKind,
    /// The `ThreadID` (the `Thread*` value); null for native threads.
    pub id: ThreadId,
    /// The OS thread id.
    pub os_id: u32,
    /// GC mode.
    pub mode: Mode,
    /// Ground-truth stack, leaf first.
    pub stack: LeafFirst<StackEntry>,
    /// Lifecycle.
    pub lifecycle: Lifecycle,
    /// A GC thread (`Thread::IsGCSpecial`, R6).
    pub gc_special: bool,
    /// `m_dwForbidSuspendThread` (R10, R11.2).
    pub forbid_suspend: u32,
    /// The per-thread hijack lock is held by someone else (R8).
    pub hijack_lock_held: bool,
    /// The GC placed a return-address hijack on the first managed frame (R29).
    pub hijacked: bool,
    /// A native frame overran a buffer on its own stack (`overrun`).
    pub overrun: Option<Overrun>,
    /// Exception state (R15, R16).
    pub exception: ExceptionState,
    /// What `GetThreadContext` would show (R13).
    pub os_context: OsContext,
    /// The thread switches to preemptive mode between R12's and R13.3's checks.
    pub mode_race: bool,
    /// The runtime's one-try `SuspendThread` of this thread fails (R11.2).
    pub suspend_fails: bool,
    /// The thread holds the code manager's writer lock (R13.2, R14, R42).
    pub holds_writer_lock: bool,
    /// OS suspend count (suspensions by `DoStackSnapshot` or by a profiler).
    pub os_suspend_count: u32,
    /// `Some` while a cross-thread `DoStackSnapshot` holds the thread suspended (R11), until
    /// the walk ends (R18): the walking thread, when it is one of the process's.
    pub stopped_for_walk: Option<Option<usize>>,
    /// `InitializeCurrentThread` was called on it (R39).
    pub tls_initialized: bool,
    /// The mode it had before a runtime suspension parked it.
    pub parked: Option<Mode>,
    /// The thread runs code under the scheduler (a program or profiler code): a runtime
    /// suspension parks it at its next safe point instead of redirecting it at once.
    pub runs_code: bool,
    /// Highest stack address (exclusive).
    pub stack_base: u64,
    /// Lowest stack address.
    pub stack_limit: u64,
    /// The registers the root frame is entered with (RSP and RBP aside): each frame's
    /// registers follow from them through the code of the frames below it.
    pub nonvolatile: [u64; 16],
    /// The current layout (recomputed by [`Thread::materialize`]).
    pub layout: Layout,
}

/// Size of each thread's stack region.
pub const STACK_SIZE: u64 = 0x10_0000;

/// A buffer overrun by a native frame on its own stack ([`Thread::overrun`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun {
    /// The frame's position in [`Thread::stack`] counted from the root.
    pub depth: usize,
    /// What the overrun wrote.
    pub fill: OverrunFill,
}

/// What a buffer overrun wrote over its frame's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverrunFill {
    /// Text: every word from the frame's stack pointer up to and including its return
    /// address holds [`OVERRUN_WORD`], an address nothing is mapped at.
    Text,
    /// Pointers: every word from the frame's stack pointer up to its return address (which
    /// stays) holds this address in another thread's stack, as an array of pointers copied
    /// one element too far leaves. The saved RBP among them is what an unwinder restores
    /// for the caller: a caller that finds its frame from RBP is then looked for in the
    /// other thread's stack, whose memory is mapped.
    Pointer(u64),
}

/// What a buffer overrun leaves in the words it overwrote: the bytes of a text (`AAAAAAAA`),
/// as a string copied past its buffer leaves. As an address it is non-canonical: nothing is
/// mapped there.
pub const OVERRUN_WORD: u64 = 0x4141_4141_4141_4141;
const STACK_TOP: u64 = 0x7ffe_0000_0000;
const STACK_STRIDE: u64 = 0x100_0000;
const THREAD_OBJECT_BASE: u64 = 0x5555_0000_1000;

/// The index a managed thread's `ThreadID` was made from (see [`Thread::new`]), if `id` has
/// that form.
pub(crate) fn index_in_id(id: ThreadId) -> Option<usize> {
    let offset = id.0.checked_sub(THREAD_OBJECT_BASE)?;
    (offset % 0x800 == 0).then(|| usize::try_from(offset / 0x800).ok())?
}

impl Thread {
    /// A thread with default state; `index` makes its ids and stack addresses deterministic.
    pub fn new(name: &str, kind: ThreadKind, index: usize) -> Thread {
        let stack_base = STACK_TOP - STACK_STRIDE * index as u64;
        let mut nonvolatile = [0u64; 16];
        for r in Register::CALLBACK_VALID
            .into_iter()
            .filter(|r| !matches!(r, Register::Rsp | Register::Rbp))
        {
            nonvolatile[r as usize] = 0x5100_0000_0000_0000 | (index as u64) << 32 | r as u64;
        }
        Thread {
            name: name.to_string(),
            kind,
            id: match kind {
                ThreadKind::Managed => ThreadId(THREAD_OBJECT_BASE + 0x800 * index as u64),
                ThreadKind::Native => ThreadId::NULL,
            },
            os_id: 1000 + index as u32,
            mode: Mode::Preemptive,
            stack: LeafFirst::new(),
            lifecycle: Lifecycle::Alive,
            gc_special: false,
            forbid_suspend: 0,
            hijack_lock_held: false,
            hijacked: false,
            overrun: None,
            exception: ExceptionState::None,
            os_context: OsContext::Ok,
            mode_race: false,
            suspend_fails: false,
            holds_writer_lock: false,
            os_suspend_count: 0,
            stopped_for_walk: None,
            tls_initialized: false,
            parked: None,
            runs_code: false,
            stack_base,
            stack_limit: stack_base - STACK_SIZE,
            nonvolatile,
            layout: Layout::default(),
        }
    }

    /// Stack bytes the calls' frames take. (Once laid out, the leaf call's
    /// [`LaidCall::bytes`] says the same without reading the whole stack.)
    pub fn stack_bytes(&self, code: &CodeMap) -> u64 {
        self.stack.iter().map(|e| e.bytes(code)).sum()
    }

    /// The runtime adopts the native thread at index `index` (as happens once it calls into
    /// managed code): it gets a `Thread` object and a `ThreadID`, in preemptive mode; its
    /// stack is unchanged.
    pub fn adopt(&mut self, index: usize) {
        self.kind = ThreadKind::Managed;
        self.id = ThreadId(THREAD_OBJECT_BASE + 0x800 * index as u64);
        self.mode = Mode::Preemptive;
    }

    /// True for a thread with a runtime `Thread` object.
    pub fn is_managed(&self) -> bool {
        self.kind == ThreadKind::Managed
    }

    /// Lays out [`Thread::stack`] in memory, root first: the root is entered with RSP just
    /// below the top of the stack region (returning to 0) and RBP 0; each frame runs its
    /// function's code template at its IP (the current IP for the leaf, a return site
    /// otherwise) from the registers its caller left at the call, writing what the code
    /// writes; its callee is entered with the return address pushed. Explicit Frames live
    /// inside the call below them. Any previous contents of the region are erased.
    pub fn materialize(&mut self, code: &CodeMap, memory: &mut AddressSpace) {
        self.lay_out(code, memory, 0);
    }

    /// [`Thread::materialize`] after an edit of [`Thread::stack`], into the memory the
    /// current layout was written to: the calls rootward of the edit that are not (and were
    /// not) the leaf keep their frames, which are neither rewritten nor re-emulated, so a
    /// push or pop costs the frames it touches, not the whole stack.
    pub fn update_layout(&mut self, code: &CodeMap, memory: &mut AddressSpace) {
        let keep = self.unchanged_root_calls();
        self.lay_out(code, memory, keep);
    }

    /// How many of the laid-out calls, counted from the root, stay as they are: their
    /// entries are in the part of the stack no edit touched since the last layout
    /// ([`LeafFirst::untouched`]), and neither the old nor the new leaf is among them. None
    /// when a GC hijack is or was in place (its slot lives in one of those frames). Costs the
    /// log of the depth, whatever the edit.
    fn unchanged_root_calls(&self) -> usize {
        if self.hijacked || self.layout.hijacked_slot.is_some() {
            return 0;
        }
        let new_leaf = self
            .stack
            .iter()
            .position(|e| matches!(e, StackEntry::Call { .. }))
            .map(|i| self.stack.depth_of(i));
        let old_leaf = self.layout.calls.first().map(|c| c.depth);
        let below = [Some(self.stack.untouched()), old_leaf, new_leaf]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(0);
        // Calls are in stack order: those below `below` are a prefix from the root.
        self.layout
            .calls
            .root_first()
            .partition_point(|c| c.depth < below)
    }

    /// Lays the stack out with the `keep` rootmost calls of the current layout kept, and the
    /// Frames rootward of them: everything above the leafmost kept call is laid anew, in what
    /// it costs.
    fn lay_out(&mut self, code: &CodeMap, memory: &mut AddressSpace, keep: usize) {
        let layout = &mut self.layout;
        let dropped = layout.calls.len() - keep;
        layout.funclet_calls -= layout
            .calls
            .iter()
            .take(dropped)
            .filter(|c| c.funclet.is_some())
            .count();
        layout.calls.pop_leaves(dropped);
        let mut bytes = layout.calls.first().map_or(0, |c| c.bytes);
        let (mut entry, mut return_address, first_new) = match layout.calls.first() {
            None => {
                memory.clear(self.stack_limit, self.stack_base);
                let mut entry = self.nonvolatile;
                entry[Register::Rbp as usize] = 0;
                entry[Register::Rsp as usize] = self.stack_base - 0x48;
                (entry, 0, 0)
            }
            Some(lowest) => {
                // Everything leafward of the lowest kept frame is rewritten.
                memory.clear(self.stack_limit, lowest.rsp);
                let mut entry = lowest.regs;
                entry[Register::Rsp as usize] = lowest.rsp - 8;
                (entry, lowest.rip, lowest.depth + 1)
            }
        };
        // Frames rootward of the lowest kept call live in kept calls, at the same addresses.
        let kept_frames = layout
            .frames
            .root_first()
            .partition_point(|f| f.depth < first_new);
        layout.frames.truncate_to_depth(kept_frames);
        layout.hijacked_slot = None;
        layout.overrun = None;
        let stack = self.stack.root_first();
        let leaf_depth = stack.iter().rposition(|e| matches!(e, StackEntry::Call { .. }));
        // New Frames with the call below them (its position from the root), root first.
        let mut new_frames: Vec<(usize, FrameKind, Option<usize>)> = Vec::new();
        let mut below = layout.calls.len().checked_sub(1);
        for (depth, item) in stack.iter().enumerate().skip(first_new) {
            let (function, offset, funclet) = match *item {
                StackEntry::Frame(kind) => {
                    new_frames.push((depth, kind, below));
                    continue;
                }
                StackEntry::Call {
                    function,
                    offset,
                    funclet,
                } => (function, offset, funclet),
            };
            let machine = &code.function(function).machine;
            let offset = offset.unwrap_or_else(|| {
                if Some(depth) == leaf_depth {
                    machine.default_leaf()
                } else {
                    machine.default_return().unwrap_or_else(|| machine.default_leaf())
                }
            });
            let entry_rsp = entry[Register::Rsp as usize];
            memory.write_u64(entry_rsp, return_address);
            let regs = match machine.state_containing(offset) {
                Some(state) => {
                    for &(delta, value) in &state.writes {
                        memory.write_u64(entry_rsp.wrapping_add_signed(delta), value.resolve(&entry));
                    }
                    state.regs.map(|v| v.resolve(&entry))
                }
                None => entry,
            };
            bytes += item.bytes(code);
            let call = LaidCall {
                depth,
                function,
                rip: code.function(function).start + offset,
                rsp: regs[Register::Rsp as usize],
                cfa: entry_rsp + 8,
                funclet,
                bytes,
                regs,
            };
            // The callee is entered with this frame's return address pushed.
            entry = regs;
            entry[Register::Rsp as usize] = call.rsp - 8;
            return_address = call.rip;
            layout.funclet_calls += usize::from(funclet.is_some());
            layout.calls.push_leaf(call);
            below = Some(layout.calls.len() - 1);
        }
        // Explicit Frames live in the next call below them, lower entries at lower addresses:
        // counted from the leaf within each call.
        let mut laid: Vec<LaidFrame> = Vec::with_capacity(new_frames.len());
        let mut in_call = (None, 0);
        for &(depth, kind, below) in new_frames.iter().rev() {
            let Some(call) = below else { continue };
            if in_call.0 != Some(call) {
                in_call = (Some(call), 0);
            }
            laid.push(LaidFrame {
                depth,
                kind,
                address: layout.calls.root_first()[call].rsp + 8 * in_call.1,
                returns_to: kind.returns_into_caller().then_some(call),
            });
            in_call.1 += 1;
        }
        layout.frames.push_leaves(laid);
        self.stack.mark_untouched();
        // A GC hijack replaces the first managed frame's return address with the hijack stub.
        if self.hijacked {
            let stub = code.functions().iter().find(|f| f.kind == CodeKind::Stub);
            let managed = layout
                .calls
                .iter()
                .find(|c| code.function(c.function).kind.is_managed());
            if let (Some(stub), Some(call)) = (stub, managed) {
                let slot = call.cfa - 8;
                let original = memory.read_u64(slot).unwrap_or(0);
                memory.write_u64(slot, stub.start);
                layout.hijacked_slot = Some((slot, original));
            }
        }
        // A buffer overrun overwrote its frame's words: text up to and including the return
        // address, pointers up to it.
        if let Some(overrun) = self.overrun {
            let calls = layout.calls.root_first();
            let at = calls.partition_point(|c| c.depth < overrun.depth);
            let hit = calls.get(at).filter(|c| c.depth == overrun.depth);
            layout.overrun = hit.map(|_| layout.calls.index_of(at));
            if let Some(&call) = hit {
                let (word, end) = match overrun.fill {
                    OverrunFill::Text => (OVERRUN_WORD, call.cfa),
                    OverrunFill::Pointer(address) => (address, call.cfa - 8),
                };
                for slot in (call.rsp..end).step_by(8) {
                    memory.write_u64(slot, word);
                }
            }
        }
    }

    /// The registers of laid-out call `index` (what a CONTEXT for that frame holds).
    pub fn call_context(&self, index: usize) -> Context {
        let call = self.layout.calls[index];
        let mut context = call_context_base();
        for r in Register::ALL {
            context.set(r, call.regs[r as usize]);
        }
        context.rip = call.rip;
        context
    }
    /// The thread's current CPU context: the leaf call's registers.
    pub fn leaf_context(&self) -> Option<Context> {
        (!self.layout.calls.is_empty()).then(|| self.call_context(0))
    }

    /// What `GetThreadContext` of the thread answers, to the runtime's own walks (R13) and to
    /// a profiler's call alike: the leaf's registers, or for a stale context
    /// ([`OsContext::Stale`], R13.4) the same with RSP just above the most recent explicit
    /// Frame. `None` when no frame is laid.
    pub fn os_thread_context(&self) -> Option<Context> {
        let mut context = self.leaf_context()?;
        if self.os_context == OsContext::Stale {
            if let Some(frame) = self.layout.frames.first() {
                context.rsp = frame.address + 8;
            }
        }
        Some(context)
    }

    /// For a second-pass funclet at laid-out call `index`, the call of its parent method
    /// (the next activation of the same function that is not a funclet).
    pub fn funclet_parent(&self, index: usize) -> Option<usize> {
        let call = self.layout.calls.get(index)?;
        call.funclet.filter(|f| f.second_pass())?;
        (index + 1..self.layout.calls.len()).find(|&i| {
            self.layout.calls[i].function == call.function && self.layout.calls[i].funclet.is_none()
        })
    }

    /// Where each stack entry is, by position in [`Thread::stack`]: a call's return address
    /// (its IP), an explicit Frame's address, 0 for an entry not laid out. One pass.
    pub fn entry_addresses(&self) -> Vec<u64> {
        let mut at = vec![0; self.stack.len()];
        let calls = self.layout.calls.iter().map(|c| (c.depth, c.rip));
        let frames = self.layout.frames.iter().map(|f| (f.depth, f.address));
        // Backwards, so that the first laid out for an entry wins.
        for (depth, address) in calls.chain(frames).collect::<Vec<_>>().into_iter().rev() {
            if depth < at.len() {
                at[self.stack.index_of(depth)] = address;
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::FunctionSpec;

    #[test]
    fn layout_writes_a_walkable_frame_chain() {
        let code = CodeMap::build(
            &[
                FunctionSpec::new("Leaf", CodeKind::Jit),
                FunctionSpec::new("Main", CodeKind::Jit),
                FunctionSpec::new("host", CodeKind::Native),
            ],
            crate::platform::Platform::Unix,
        )
        .unwrap();
        let mut memory = AddressSpace::default();
        let mut t = Thread::new("main", ThreadKind::Managed, 0);
        memory.map(t.stack_limit, t.stack_base);
        t.stack = vec![
            StackEntry::Call {
                function: 2,
                offset: None,
                funclet: None,
            },
            StackEntry::Frame(FrameKind::InlinedCall),
            StackEntry::Call {
                function: 0,
                offset: None,
                funclet: None,
            },
            StackEntry::Call {
                function: 1,
                offset: None,
                funclet: None,
            },
            StackEntry::Frame(FrameKind::Gc),
            StackEntry::Call {
                function: 2,
                offset: None,
                funclet: None,
            },
        ]
        .into();
        t.materialize(&code, &mut memory);
        let calls = &t.layout.calls.to_vec();
        assert_eq!(calls.len(), 4);
        let machine = |i: usize| &code.function(i).machine;
        assert_eq!(calls[0].rip, code.function(2).start + machine(2).default_leaf());
        assert_eq!(calls[1].rip, code.function(0).start + 0x25);
        assert_eq!(
            calls[3].rip,
            code.function(2).start + machine(2).default_return().unwrap()
        );
        let rbp = Register::Rbp as usize;
        for pair in calls.windows(2) {
            assert_eq!(pair[0].cfa, pair[1].rsp);
            assert_eq!(memory.read_u64(pair[0].cfa - 8), Ok(pair[1].rip));
            assert_eq!(pair[0].rsp % 16, 0);
        }
        // Managed frames keep an RBP chain; the native ones leave RBP alone.
        for managed in &calls[1..3] {
            assert_eq!(managed.regs[rbp], managed.cfa - 16);
        }
        assert_eq!(memory.read_u64(calls[2].cfa - 16), Ok(calls[3].regs[rbp]));
        assert_eq!(memory.read_u64(calls[1].cfa - 16), Ok(calls[2].regs[rbp]));
        assert_eq!((calls[3].regs[rbp], calls[0].regs[rbp]), (0, calls[1].regs[rbp]));
        assert_eq!(memory.read_u64(calls[3].cfa - 8), Ok(0));
        let frames = &t.layout.frames;
        assert_eq!(
            (frames[0].kind, frames[0].returns_to),
            (FrameKind::InlinedCall, Some(t.layout.calls.depth_of(1)))
        );
        assert_eq!((frames[1].kind, frames[1].returns_to), (FrameKind::Gc, None));
        assert_eq!(frames[1].address, calls[3].rsp);
        assert!(frames[0].address < frames[1].address);
        assert_eq!(t.leaf_context().unwrap().rsp, calls[0].rsp);
    }

    #[test]
    fn an_updated_layout_equals_a_fresh_one_memory_included() {
        let code = CodeMap::build(
            &[
                FunctionSpec::new("A", CodeKind::Jit),
                FunctionSpec::new("B", CodeKind::Jit),
                FunctionSpec::new("native", CodeKind::Native),
                FunctionSpec::new("helper", CodeKind::Helper),
                FunctionSpec::new("host", CodeKind::Native),
            ],
            crate::platform::Platform::Windows,
        )
        .unwrap();
        let call = |function: usize, offset: Option<u64>| StackEntry::Call {
            function,
            offset,
            funclet: None,
        };
        let mut t = Thread::new("main", ThreadKind::Managed, 0);
        let mut memory = AddressSpace::default();
        memory.map(t.stack_limit, t.stack_base);
        t.stack = vec![call(0, None), call(4, None)].into();
        t.materialize(&code, &mut memory);
        // A fixed walk of pushes and pops (SplitMix-like steps), each compared with a fresh
        // layout in fresh memory: the calls, the Frames and every word of the frames.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..300 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pick = (x >> 33) as usize;
            let calls = t
                .stack
                .iter()
                .filter(|e| matches!(e, StackEntry::Call { .. }))
                .count();
            match pick % 7 {
                0 | 1 => t.stack.push_leaf(call(pick / 7 % 4, None)),
                2 => t
                    .stack
                    .push_leaves([call(2, None), StackEntry::Frame(FrameKind::InlinedCall)]),
                3 if calls > 2 => {
                    let leaf = t
                        .stack
                        .iter()
                        .position(|e| matches!(e, StackEntry::Call { .. }))
                        .unwrap();
                    t.stack.pop_leaves(leaf + 1);
                }
                4 => t.stack.push_leaf(StackEntry::Call {
                    function: pick / 7 % 2,
                    offset: None,
                    funclet: Some(Funclet::Catch),
                }),
                5 => {
                    // Entered and left, as a callback does: the stack put back is a clone.
                    let saved = t.stack.clone();
                    t.stack
                        .push_leaves([call(3, None), StackEntry::Frame(FrameKind::Gc)]);
                    t.update_layout(&code, &mut memory);
                    t.stack = saved;
                }
                _ => {
                    if let Some(StackEntry::Call { offset, function, .. }) = t.stack.first_mut() {
                        let boundaries = &code.function(*function).machine.boundaries;
                        *offset = Some(boundaries[pick % boundaries.len()]);
                    }
                }
            }
            t.update_layout(&code, &mut memory);
            let mut fresh = t.clone();
            let mut fresh_memory = AddressSpace::default();
            fresh_memory.map(t.stack_limit, t.stack_base);
            fresh.materialize(&code, &mut fresh_memory);
            assert_eq!(t.layout, fresh.layout);
            let low = t.layout.calls.first().map_or(t.stack_base, |c| c.rsp) - 0x200;
            for a in (low..t.stack_base).step_by(8) {
                assert_eq!(memory.read_u64(a), fresh_memory.read_u64(a), "word at {a:#x}");
            }
        }
    }
}
