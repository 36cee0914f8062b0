//! The plain records the profiler keeps: one per submission, one per dispatch,
//! one per token. They are also the rows of the JSON profile.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::CounterSnapshot;
use super::OpKind;
use super::Roles;
use super::SubmissionIdle;

/// Whether a token was part of prompt processing or of generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Processing the prompt.
    Prefill,
    /// Generating one new token.
    Decode,
}

/// One timed submission (a committed batch of dispatches).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmissionRecord {
    /// The label it was committed with (`(unlabeled)` when none).
    pub label: Arc<str>,
    /// Sequence number of the submission on its device, from 0.
    pub submission: u64,
    /// The queue or stream it ran on.
    pub stream: u32,
    /// The token it belongs to, when tokens are being marked.
    pub token: Option<u32>,
    /// Start, in ns since the profiler's epoch.
    pub start_ns: u64,
    /// End, in ns since the profiler's epoch.
    pub end_ns: u64,
    /// How many dispatch records it carried: one per dispatch, except a
    /// library call (a cuBLASLt GEMM) timed by CUPTI, which has one per
    /// kernel the library launched.
    pub dispatches: u32,
    /// How the host enqueued it, where the backend enqueues work for the
    /// device to run later (CUDA); `None` where work runs as it is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueue: Option<Enqueue>,
    /// Where its time went on the device: busy, and idle before, between
    /// and after its dispatches (see [`SubmissionIdle`]). Absent where its
    /// dispatches were not all timed; filled on load for profiles written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<SubmissionIdle>,
}

/// How the host enqueued a submission on a backend that runs it later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueue {
    /// Host time spent enqueueing it (launch calls, on the host clock), in ns.
    pub host_ns: u64,
    /// Whether the device was held until the host finished enqueueing, so
    /// that `start_ns` is when the device could begin rather than when the
    /// host began: done where a profiler (CUPTI) slows the enqueue enough to
    /// leave the device idle inside the submission.
    pub device_held: bool,
}

impl SubmissionRecord {
    /// Device time of the submission.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Host time spent enqueueing it, 0 where not measured.
    pub fn host_enqueue_ns(&self) -> u64 {
        self.enqueue.map_or(0, |enqueue| enqueue.host_ns)
    }

    /// Whether the device was held until the host finished enqueueing it.
    pub fn device_held(&self) -> bool {
        self.enqueue.is_some_and(|enqueue| enqueue.device_held)
    }
}

/// One timed dispatch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchRecord {
    /// The label of the submission it ran in.
    pub label: Arc<str>,
    /// Sequence number of that submission.
    pub submission: u64,
    /// Position inside the submission, from 0.
    pub index: u32,
    /// The kernel's name.
    pub kernel: Arc<str>,
    /// What kind of operation it is.
    pub op_kind: OpKind,
    /// Where in the model it ran (`layer.3.attn`), empty when unscoped.
    pub scope: Arc<str>,
    /// The queue or stream it ran on.
    pub stream: u32,
    /// The token it belongs to, when tokens are being marked.
    pub token: Option<u32>,
    /// Start, in ns since the profiler's epoch.
    pub start_ns: u64,
    /// End, in ns since the profiler's epoch.
    pub end_ns: u64,
    /// Bytes the dispatch declares it moves (reads plus writes).
    pub bytes: u64,
    /// How many of those bytes it writes (the rest it reads): its floor
    /// time takes each share at its own ceiling. 0 in profiles before
    /// schema 3, whose only ceiling (the copy's) needs no split.
    #[serde(default)]
    pub bytes_written: u64,
    /// Floating-point operations the dispatch declares.
    pub flops: u64,
    /// What it does for the model (q/k/v projection, attention, ...):
    /// several for a fused kernel, none where nothing said (a library
    /// user's dispatch; a program's before its roles are found). Absent
    /// (none) from profiles written before roles were recorded.
    #[serde(default, skip_serializing_if = "Roles::is_none")]
    pub roles: Roles,
    /// DRAM bytes measured for it (read plus written, PM sampling), kept
    /// beside `bytes` where `--model` replaced them with the bytes of the
    /// model's tensors it reads; 0 (absent) otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub measured_bytes: u64,
}

/// Whether a count is 0 (left out of the JSON).
fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl DispatchRecord {
    /// Device time of the dispatch.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// One token's span and what the counters did during it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Token number in the run, from 0 (prefill tokens first).
    pub index: u32,
    /// Prefill or decode.
    pub phase: Phase,
    /// Start, in ns since the profiler's epoch.
    pub start_ns: u64,
    /// End, in ns since the profiler's epoch.
    pub end_ns: u64,
    /// Counter increments during the token.
    pub counters: CounterSnapshot,
    /// Whether its work was timed: false for the tokens a token selection
    /// (`--profile-tokens`) left out, which are counted but have no
    /// submission or dispatch records. Absent (true) from profiles written
    /// before selections existed.
    #[serde(default = "timed_by_default", skip_serializing_if = "is_true")]
    pub timed: bool,
}

fn timed_by_default() -> bool {
    true
}

fn is_true(timed: &bool) -> bool {
    *timed
}

impl TokenRecord {
    /// Wall time of the token on the host.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}
