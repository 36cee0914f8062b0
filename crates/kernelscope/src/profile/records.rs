//! The plain records the profiler keeps: one per submission, one per dispatch
//! (or per phase of a kernel timed inside it), one per token, and the idle
//! accounting a submission's record carries (`idle.rs` computes it). They
//! are also the rows of the JSON profile.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::CounterSnapshot;
use super::OpKind;
use super::Roles;

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
    /// How many dispatches it carried, each of which has a record (or, for
    /// a kernel timed inside it, one record per phase, all of one index),
    /// except a library call (a cuBLASLt GEMM) timed by CUPTI, which has
    /// one per kernel the library launched.
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
    /// The format of the weights or data the kernel reads, as the kernel
    /// declares it at registration: a block format's lowercase name
    /// (`q4_k`, as [`QuantFormat::name`](crate::quant::QuantFormat::name)
    /// gives), or for a dense kernel the dtype it is instantiated for
    /// (`bf16`, `f16`, `f32`; of a kernel of two, such as
    /// `rms_norm_f32_bf16`, the one its name ends in). None where nothing
    /// says: a kernel that declares none (a copy), or another program's
    /// kernel seen by the injection library, whose name is no declaration.
    /// Profiles before schema 4 had no such field: theirs are filled on
    /// load from the kernel's name (`profile/schema_3.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Arc<str>>,
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
    /// Where the record is one phase of a kernel that runs several of the
    /// model's steps in one launch, timed inside it by the kernel's own
    /// stamps (`profile/in_kernel.rs`): which phase, and how long its blocks
    /// waited at the grid barrier that ends it. The phases of one launch
    /// share its `index` and tile its span. Absent for a record of a whole
    /// launch, and from every profile written before such kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_kernel: Option<InKernelPhase>,
}

/// The phase of a kernel a [`DispatchRecord`] is, where the kernel was
/// timed inside by stamps at its phase boundaries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InKernelPhase {
    /// The phase's name (`gate/up`, `down`), as the kernel's op declares it.
    pub phase: Arc<str>,
    /// Its position among the launch's phases, from 0.
    pub index: u32,
    /// How many phases the launch had.
    pub phases: u32,
    /// The mean over blocks of the time a block waited at the grid barrier
    /// that ends the phase, for the last block to arrive (0 where the phase
    /// ends at none): the bubble a barrier costs, inside the phase's time.
    pub waiting_ns: u64,
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

    /// Whether the record counts as a launch of its own where launches are
    /// counted: every record except a kernel's phases after its first,
    /// which ran in the same launch.
    pub fn is_launch(&self) -> bool {
        self.in_kernel.as_ref().is_none_or(|phase| phase.index == 0)
    }

    /// The kernel's name, followed for a phase timed inside it by the
    /// phase's (`feed_forward_q4_k_q6_k · gate/up`): how its rows are named
    /// wherever kernels are listed, so a launch's phases stay apart.
    pub fn kernel_and_phase(&self) -> String {
        match &self.in_kernel {
            Some(phase) => format!("{} · {}", self.kernel, phase.phase),
            None => self.kernel.to_string(),
        }
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

/// Where a submission's time went: busy plus the three idle parts add up to
/// its span exactly (all in ns, on the profiler's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmissionIdle {
    /// Time at least one of its dispatches was running (the union of their
    /// intervals, clipped to the submission).
    pub busy_ns: u64,
    /// Idle from the submission's start to its first dispatch.
    pub before_ns: u64,
    /// Idle between dispatches.
    pub between_ns: u64,
    /// Idle from the end of its last dispatch to the submission's end.
    pub after_ns: u64,
}

impl SubmissionIdle {
    /// All the idle time: before, between and after.
    pub fn idle_ns(&self) -> u64 {
        self.before_ns
            .saturating_add(self.between_ns)
            .saturating_add(self.after_ns)
    }

    /// Busy plus idle: the submission's span.
    pub fn span_ns(&self) -> u64 {
        self.busy_ns.saturating_add(self.idle_ns())
    }

    /// The sum of `self` and `other`, part by part.
    pub fn saturating_add(self, other: SubmissionIdle) -> SubmissionIdle {
        SubmissionIdle {
            busy_ns: self.busy_ns.saturating_add(other.busy_ns),
            before_ns: self.before_ns.saturating_add(other.before_ns),
            between_ns: self.between_ns.saturating_add(other.between_ns),
            after_ns: self.after_ns.saturating_add(other.after_ns),
        }
    }

    /// Idle over span, 0 for an empty span.
    pub fn idle_share(&self) -> f64 {
        let span = self.span_ns();
        if span == 0 {
            0.0
        } else {
            self.idle_ns() as f64 / span as f64
        }
    }
}

/// One rank's records (a rank other than 0, whose records are the profile's
/// own), with times on rank 0's clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankRecords {
    /// The rank.
    pub rank: usize,
    /// Its device.
    pub device: String,
    /// Its counters over the run.
    pub counters: CounterSnapshot,
    /// Its tokens.
    pub tokens: Vec<TokenRecord>,
    /// Its timed submissions.
    pub submissions: Vec<SubmissionRecord>,
    /// Its timed dispatches.
    pub dispatches: Vec<DispatchRecord>,
}
