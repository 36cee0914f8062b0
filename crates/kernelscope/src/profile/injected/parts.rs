//! What the injected profile is built from and into: one process's record
//! file as read, the units (kernels, copies, sets) found in it, and the
//! records of the rank it becomes, shared by the reading (`process.rs`,
//! `records.rs`) and the assembly of the profile (`mod.rs`).

use std::path::PathBuf;

use kernelscope_trace::Trace;

use super::steps::StepRule;
use crate::profile::{CounterSnapshot, DispatchRecord, OpKind, SubmissionRecord, TokenRecord};

/// One process's record file, read.
pub struct ProcessTrace {
    /// The file.
    pub path: PathBuf,
    /// What it held.
    pub trace: Trace,
}

/// A kernel, copy or set, as read.
pub(super) struct Unit {
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    pub(super) correlation: u32,
    pub(super) name: String,
    pub(super) op_kind: OpKind,
    pub(super) stream: u32,
    pub(super) device: u32,
    pub(super) graph: u32,
    pub(super) bytes: u64,
    pub(super) bytes_written: u64,
    pub(super) host_copy: bool,
    /// A kernel (not a copy or set): what the dispatch counter counts.
    pub(super) kernel: bool,
}

/// One process's records as a rank's.
pub(super) struct Built {
    pub(super) rank: Option<u32>,
    pub(super) first_ns: u64,
    pub(super) device: String,
    pub(super) rule: StepRule,
    pub(super) graphs: bool,
    /// Whether its graphs were traced whole (`--graphs whole`), each launch
    /// one dispatch with the kernels inside it untraced.
    pub(super) whole_graphs: bool,
    /// Its graph launches were timed by CUDA events in the program, CUPTI not attached.
    pub(super) events_timed: bool,
    /// The median length of its DRAM samples, ns, where its kernels' bytes
    /// were measured by PM sampling.
    pub(super) bytes_measured: Option<u64>,
    /// Whether a kernel began before the one before it on its stream ended.
    pub(super) early_launch: bool,
    pub(super) records: RankParts,
}

/// A rank's counters, tokens, submissions and dispatches.
pub(super) type RankParts = (
    CounterSnapshot,
    Vec<TokenRecord>,
    Vec<SubmissionRecord>,
    Vec<DispatchRecord>,
);

impl Built {
    /// Puts every time on the profile's epoch.
    pub(super) fn shift(&mut self, epoch: u64) {
        let (_, tokens, submissions, dispatches) = &mut self.records;
        for token in tokens {
            token.start_ns -= epoch;
            token.end_ns -= epoch;
        }
        for submission in submissions {
            submission.start_ns -= epoch;
            submission.end_ns -= epoch;
        }
        for dispatch in dispatches {
            dispatch.start_ns -= epoch;
            dispatch.end_ns -= epoch;
        }
    }
}
