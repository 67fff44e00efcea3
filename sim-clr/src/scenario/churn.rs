//! `[[churn]]`: threads that start, run and exit while the process is sampled, written once.
//!
//! The races a sampler must survive need threads created and destroyed while its rounds run:
//! `ThreadCreated` and `ThreadDestroyed` on threads it has listed or is walking. A `[[churn]]`
//! table names a prefix, a count, the thread that starts them and how far apart, their
//! frames and their program; it stands for that many `[[threads]]` tables (`NAME-1` …
//! `NAME-N`, each `start = "spawned"`) and for the spawner's steps that start them: `spawn
//! NAME-1`, `sleep EVERY`, `spawn NAME-2`, … before its own program, and `join NAME-1` …
//! `join NAME-N` after it.

use super::build::Res;
use super::error::Source;
use super::model::{ChurnModel, FileModel, ThreadModel};
use toml::Spanned;

/// The most threads one `[[churn]]` table starts.
pub const MAX_CHURN_THREADS: u32 = 256;

/// `m` with its `[[churn]]` tables written out as the threads and steps they stand for.
pub(super) fn expand(src: &Source<'_>, mut m: FileModel) -> Res<FileModel> {
    for churn in std::mem::take(&mut m.churn) {
        let span = churn.span();
        let c: ChurnModel = churn.into_inner();
        let count = *c.threads.get_ref();
        if !(1..=MAX_CHURN_THREADS).contains(&count) {
            return Err(src.error(
                c.threads.span(),
                "threads",
                format!("must be between 1 and {MAX_CHURN_THREADS}"),
            ));
        }
        if c.program.is_empty() {
            return Err(src.error(
                span,
                "program",
                "a churn thread needs a program (it exits at its end)",
            ));
        }
        let every = c
            .every
            .as_ref()
            .map_or("50us".to_string(), |e| e.get_ref().clone());
        let spawner = c.spawner.get_ref();
        let Some(at) = m
            .threads
            .iter()
            .position(|t| t.get_ref().name.get_ref() == spawner)
        else {
            return Err(src.error(
                c.spawner.span(),
                "spawner",
                format!("no thread named `{spawner}`"),
            ));
        };
        let names: Vec<String> = (1..=count).map(|k| format!("{}-{k}", c.name.get_ref())).collect();
        let step = |text: String| Spanned::new(span.clone(), text);
        let mut starts = Vec::new();
        for (k, name) in names.iter().enumerate() {
            if k > 0 {
                starts.push(step(format!("sleep {every}")));
            }
            starts.push(step(format!("spawn {name}")));
        }
        let spawner_model = m.threads[at].get_mut();
        let own = spawner_model.program.take().unwrap_or_default();
        let joins = names.iter().map(|name| step(format!("join {name}")));
        spawner_model.program = Some(starts.into_iter().chain(own).chain(joins).collect());
        for name in names {
            let thread = ThreadModel {
                name: Spanned::new(c.name.span(), name),
                kind: None,
                mode: None,
                frames: c.frames.clone(),
                state: None,
                gc_special: false,
                forbid_suspend: 0,
                hijack_lock_held: false,
                hijacked: false,
                exception: None,
                os_context: None,
                mode_race: false,
                suspend_fails: false,
                holds_code_manager_lock: false,
                program: Some(c.program.clone()),
                start: Some(Spanned::new(span.clone(), "spawned".to_string())),
                body: None,
                reuses_thread_id: None,
                reuses_os_id: None,
            };
            m.threads.push(Spanned::new(span.clone(), thread));
        }
    }
    Ok(m)
}
