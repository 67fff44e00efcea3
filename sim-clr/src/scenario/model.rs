//! The TOML shape of a scenario file, as deserialized (before validation).
//!
//! Fields whose value may take several forms (a mask as bits or names, a seed as a word or a
//! table) are kept as spanned [`toml::Value`]s and interpreted by the builder, so that every
//! error can point at its line.

use serde::Deserialize;
use toml::{Spanned, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileModel {
    pub name: Option<String>,
    pub description: Option<String>,
    pub platform: Spanned<String>,
    #[serde(default)]
    pub runtime: RuntimeModel,
    #[serde(default)]
    pub code: Vec<Spanned<CodeModel>>,
    #[serde(default)]
    pub threads: Vec<Spanned<ThreadModel>>,
    #[serde(default)]
    pub calls: Vec<Spanned<CallModel>>,
    #[serde(default)]
    pub locks: Vec<Spanned<String>>,
    #[serde(default)]
    pub events: Vec<Spanned<String>>,
    pub profiler: Option<ProfilerModel>,
    pub limits: Option<LimitsModel>,
    pub explore: Option<ExploreModel>,
    pub sampler: Option<SamplerModel>,
    pub host: Option<HostModel>,
    #[serde(default)]
    pub fail: Vec<Spanned<FailModel>>,
    #[serde(default)]
    pub churn: Vec<Spanned<ChurnModel>>,
}

/// Threads that start, run and exit (`[[churn]]`): written out as `[[threads]]` tables and
/// the spawner's steps ([`super::churn`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChurnModel {
    pub name: Spanned<String>,
    pub threads: Spanned<u32>,
    pub spawner: Spanned<String>,
    pub every: Option<Spanned<String>>,
    #[serde(default)]
    pub frames: Vec<Spanned<FrameModel>>,
    #[serde(default)]
    pub program: Vec<Spanned<String>>,
}

/// Calls made to fail (`[[fail]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailModel {
    pub api: Spanned<String>,
    pub calls: Option<Spanned<Vec<u64>>>,
    pub thread: Option<Spanned<String>>,
    pub hresult: Option<Spanned<String>>,
}

/// Settings of the built-in samplers (`[sampler]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SamplerModel {
    pub rounds: Option<Spanned<u64>>,
    pub max_frames: Option<Spanned<u64>>,
    pub period_us: Option<Spanned<u64>>,
    pub watchdog_ms: Option<Spanned<u64>>,
}

/// How the program drives a hosted native profiler library.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostModel {
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub steps: Vec<Spanned<HostStepModel>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostStepModel {
    pub thread: Spanned<String>,
    pub call: Option<Spanned<String>>,
    pub arg: Option<Spanned<String>>,
    pub args: Option<Spanned<Vec<Value>>>,
    pub expect: Option<Spanned<i64>>,
    pub raise: Option<Spanned<String>>,
    pub class: Option<Spanned<String>>,
    pub gc: Option<bool>,
    pub unload: Option<Spanned<String>>,
    pub sleep_ms: Option<Spanned<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExploreModel {
    pub strategy: Option<Spanned<String>>,
    pub bound: Option<Spanned<u32>>,
    pub schedules: Option<Spanned<u64>>,
    pub seed: Option<u64>,
    pub expect: Option<Spanned<Vec<String>>>,
    pub reach: Option<Spanned<Vec<String>>>,
}

/// The profiler's callback handlers, each a program.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfilerModel {
    pub thread_created: Option<Vec<Spanned<String>>>,
    pub thread_destroyed: Option<Vec<Spanned<String>>>,
    pub object_allocated: Option<Vec<Spanned<String>>>,
    pub exception_thrown: Option<Vec<Spanned<String>>>,
    pub signal_handler: Option<Vec<Spanned<String>>>,
    pub signal_flags: Option<Spanned<Vec<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsModel {
    pub step_us: Option<Spanned<u64>>,
    pub livelock_ms: Option<Spanned<u64>>,
    pub max_steps: Option<Spanned<u64>>,
    pub idle_steps: Option<Spanned<u64>>,
    pub callback_depth: Option<Spanned<u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuntimeModel {
    pub version: Option<Spanned<String>>,
    pub started: Option<bool>,
    pub gc_initialized: Option<bool>,
    pub detaching: Option<bool>,
    pub attached: Option<bool>,
    pub suspend_in_progress: Option<bool>,
    pub event_mask: Option<Spanned<Value>>,
    pub event_mask_high: Option<Spanned<Value>>,
    pub context_size: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CodeModel {
    pub name: Spanned<String>,
    pub kind: Spanned<String>,
    pub module: Option<String>,
    pub size: Option<Spanned<u64>>,
    pub frame_size: Option<Spanned<u64>>,
    pub shape: Option<Spanned<Value>>,
    #[serde(default)]
    pub split: bool,
    pub compiled: Option<bool>,
    #[serde(default)]
    pub generic_definition: bool,
    pub method: Option<Spanned<String>>,
    pub type_args: Option<Vec<String>>,
    pub version_of: Option<String>,
    pub rejit: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ThreadModel {
    pub name: Spanned<String>,
    pub kind: Option<Spanned<String>>,
    pub mode: Option<Spanned<String>>,
    #[serde(default)]
    pub frames: Vec<Spanned<FrameModel>>,
    pub state: Option<Spanned<String>>,
    #[serde(default)]
    pub gc_special: bool,
    #[serde(default)]
    pub forbid_suspend: u32,
    #[serde(default)]
    pub hijack_lock_held: bool,
    #[serde(default)]
    pub hijacked: bool,
    pub exception: Option<Spanned<String>>,
    pub os_context: Option<Spanned<String>>,
    #[serde(default)]
    pub mode_race: bool,
    #[serde(default)]
    pub suspend_fails: bool,
    #[serde(default)]
    pub holds_code_manager_lock: bool,
    pub program: Option<Vec<Spanned<String>>>,
    pub start: Option<Spanned<String>>,
    pub body: Option<Spanned<String>>,
    pub reuses_thread_id: Option<Spanned<String>>,
    pub reuses_os_id: Option<Spanned<String>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FrameModel {
    #[serde(rename = "fn")]
    pub function: Option<Spanned<String>>,
    pub frame: Option<Spanned<String>>,
    pub repeat: Option<Spanned<u32>>,
    pub offset: Option<Spanned<Value>>,
    pub funclet: Option<Spanned<String>>,
    pub template: Option<Spanned<String>>,
    pub in_loop: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CallModel {
    pub caller: Option<Spanned<String>>,
    pub from: Option<Spanned<String>>,
    pub api: Option<Spanned<String>>,
    pub event: Option<Spanned<String>>,
    pub thread: Option<Spanned<String>>,
    pub target: Option<Spanned<Value>>,
    pub flags: Option<Spanned<Value>>,
    pub seed: Option<Spanned<Value>>,
    pub context_size: Option<Spanned<u32>>,
    pub callback: Option<Spanned<Value>>,
    pub nested: Option<Spanned<NestedModel>>,
    pub nested_at: Option<Spanned<Value>>,
    pub at: Option<Spanned<Value>>,
    pub ip: Option<Spanned<Value>>,
    pub function: Option<Spanned<Value>>,
    pub module: Option<Spanned<String>>,
    pub requested: Option<Spanned<u32>>,
    #[serde(default)]
    pub null_buffer: bool,
    pub frame_info: Option<Spanned<Value>>,
    pub mask: Option<Spanned<Value>>,
    pub expect: Option<Spanned<String>>,
    pub expect_frames: Option<Spanned<usize>>,
    pub expect_stack: Option<Spanned<Vec<String>>>,
    pub expect_fault: Option<Spanned<String>>,
    pub note: Option<String>,
    pub case: Option<String>,
}

/// A `DoStackSnapshot`'s nested calls: one table (`[calls.nested]`) or an array of them
/// (`[[calls.nested]]`). A lone table's span is the `nested` value's, set by the builder.
#[derive(Debug)]
pub(crate) enum NestedModel {
    One(Box<CallModel>),
    Many(Vec<Spanned<CallModel>>),
}

impl<'de> Deserialize<'de> for NestedModel {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NestedModel, D::Error> {
        // Not `#[serde(untagged)]`: that buffers the value and loses the spans inside it.
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NestedModel;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table or an array of tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<NestedModel, A::Error> {
                let one = CallModel::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(NestedModel::One(Box::new(one)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<NestedModel, A::Error> {
                let mut many = Vec::new();
                while let Some(call) = seq.next_element()? {
                    many.push(call);
                }
                Ok(NestedModel::Many(many))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}
