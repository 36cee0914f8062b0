//! The profiling kit: always-on counters, per-submission and per-dispatch
//! timing tables, the JSON profile they are saved as, and what is judged
//! from them (aggregation, roofline placement, the cross-check, folding of
//! identical layers, the comparison of two runs), and the splitting of a
//! kernel that runs several steps in one launch into its phases, by the
//! stamps it writes inside (`in_kernel.rs`).
//!
//! This layer knows nothing of devices or models. The runtime owns one
//! [`Profiler`] per device and feeds it records; everything else here reads
//! a [`Profile`], the plain-data snapshot that is also the JSON file format.
//! Rendering a profile (the text report, the HTML page, the Chrome trace)
//! is the kernelscope-report crate's, which reads only that snapshot and
//! the analysis exported here.

mod aggregate;
mod anatomy;
mod ceilings;
mod compare;
mod conditions;
mod counters;
mod cross_check;
mod data;
mod dispatch_meta;
mod experts;
mod fold;
mod gap;
mod idle;
mod in_kernel;
mod injected;
mod level;
mod load;
mod op_kind;
mod rank_steps;
mod ranks;
mod records;
mod roofline;
mod schema_1;
mod schema_2;
mod schema_3;
mod session;
mod stats;
mod timing;
mod token_selection;
mod validation;

pub use aggregate::{Aggregate, aggregate, layer_of, scope_of};
pub use anatomy::{
    Anatomy, GivenCosts, LayersFrom, ModelCosts, Role, Roles, TensorCost, annotate, apply_model_costs,
};
pub use ceilings::{BandwidthBasis, Ceiling, Ceilings};
pub use compare::{Comparison, ComparisonRow, Verdict, compare, require_timed_work};
pub use conditions::{Conditions, Program, Topology};
pub use counters::{CounterSnapshot, Counters};
pub use cross_check::{
    CLOCK_DRIFT_RATE, CLOCK_RESOLUTION_NS, CrossCheck, Disagreement, clock_resolution_ns, cross_check,
};
pub use data::{PROFILE_SCHEMA_VERSION, Profile};
pub(crate) use dispatch_meta::{DispatchMeta, PositionCost};
pub use experts::{ExpertRouting, LayerRouting, routing_changes};
pub use fold::{FOLD_TOLERANCE_FLOOR, FoldInput, Folded, fold, fold_inputs, outliers};
pub use gap::{
    GapAccount, GapKernel, GapKernels, GapLayer, GapLayerCounts, GapRow, GapSide, GapTotal, gap_account,
};
pub use idle::{idle_before_by, idle_gaps, submission_idle};
pub use in_kernel::{
    InKernelLaunch, LaunchStamps, PhaseMeta, PhasePlan, PhaseTotals, StampSource, phase_totals,
    split_into_phases,
};
pub use injected::{
    EVENT_TIMED_GRAPHS_MODE, ProcessTrace, StepRule, WHOLE_GRAPHS_MODE, profile_of_program,
    readable_kernel_name,
};
pub use level::{PROFILE_ENV_VAR, ProfileLevel};
pub use load::{MAX_PROFILE_BYTES, file_kind};
pub use op_kind::{MAX_FUSED_PARTS, MAX_UNKNOWN_KINDS, MAX_UNKNOWN_NAME_BYTES, OpKind, Primitive};
pub use rank_steps::{RankStep, RankStepTime, rank_steps};
pub use ranks::{CollectiveCost, RankView, collective_costs};
pub use records::{
    DispatchRecord, Enqueue, InKernelPhase, Phase, RankRecords, SubmissionIdle, SubmissionRecord, TokenRecord,
};
pub use roofline::{Bound, Peak, PeakShare, Placement, Roofline, placements};
#[cfg(test)]
pub(crate) use schema_3::format_of_kernel_name;
pub use session::{Profiler, submission_table};
pub use stats::{Spread, SubmissionStats};
pub use timing::{DispatchTiming, TimingMechanism, TimingMethod};
pub use token_selection::TokenSelection;
