//! A run as the data of a picture: after every step, what each thread was doing, whom it
//! waited for, who held it suspended, which callback it was in and which locks it held
//! ([`Process::replay_timeline`](super::Process::replay_timeline)).

use serde::{Deserialize, Serialize};

/// What a thread was doing after one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "on")]
pub enum Doing {
    /// Not started yet (spawned later, or a profiler thread not yet created).
    NotStarted,
    /// It ran this step (and did not block).
    Ran,
    /// It could run, and another thread did.
    Ready,
    /// Blocked, waiting for what the text says (`lock heap`, `join worker`, `event done`),
    /// also in the step that ran into the wait.
    Blocked(String),
    /// Waiting, as [`Doing::Blocked`], for what the text says, but only until a virtual
    /// deadline (a timed condition-variable wait, an event waited on with a timeout): a wait
    /// that ends by itself.
    Waiting(String),
    /// Asleep until a virtual deadline.
    Sleeping,
    /// Parked at a safe point by a runtime suspension.
    Parked,
    /// Its code has ended.
    Done,
    /// It has no program: it stays as the file declares it.
    Frozen,
}

/// One thread after one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lane {
    /// What it was doing.
    pub doing: Doing,
    /// The threads that held it suspended, one entry per suspension.
    pub suspended_by: Vec<String>,
    /// The profiler callback it was running in, if any (`ThreadDestroyed`).
    pub callback: Option<String>,
    /// It was running the profiling signal's handler.
    pub signal: bool,
    /// The locks it held.
    pub locks: Vec<String>,
}

/// One step of a run, as the timeline records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The step's number, from 1.
    pub step: u64,
    /// The index of the thread that ran.
    pub ran: usize,
    /// The `DoStackSnapshot` the thread made in this step, if it made one: the target's name
    /// and the answer (`S_OK`, `E_FAIL`).
    pub walk: Option<(String, String)>,
    /// The windows ([`crate::coverage`]) the run reached for the first time in this step.
    pub reached: Vec<String>,
    /// Every thread, in the scenario's order.
    pub lanes: Vec<Lane>,
}

/// A whole run: its threads' names and every step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// The threads, in the scenario's order.
    pub threads: Vec<String>,
    /// Every step, in order.
    pub steps: Vec<Step>,
}
