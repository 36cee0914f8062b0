//! The profiling kit: always-on counters, per-submission and per-dispatch
//! timing tables, and what is made of them (human report, JSON profile,
//! Chrome trace, comparison of two runs).
//!
//! This layer knows nothing of devices or models. The runtime owns one
//! [`Profiler`] per device and feeds it records; everything else here reads
//! a [`Profile`], the plain-data snapshot that is also the JSON file format.

mod aggregate;
mod compare;
mod counters;
mod cross_check;
mod data;
mod fold;
mod html;
mod level;
mod op_kind;
mod ranks;
mod records;
mod report;
mod roofline;
mod schema_1;
mod session;
mod stats;
mod timing;
mod trace;

pub use compare::{Comparison, ComparisonRow, Verdict, compare};
pub use counters::{CounterSnapshot, Counters};
pub use cross_check::{CrossCheck, DRIFT_FLAG_THRESHOLD, cross_check};
pub use data::{Conditions, MAX_PROFILE_BYTES, PROFILE_SCHEMA_VERSION, Profile};
pub use fold::FOLD_TOLERANCE_FLOOR;
pub use html::{render_comparison_html, render_html};
pub use level::{PROFILE_ENV_VAR, ProfileLevel};
pub use op_kind::{MAX_FUSED_PARTS, MAX_UNKNOWN_KINDS, MAX_UNKNOWN_NAME_BYTES, OpKind, Primitive};
pub use ranks::{CollectiveCost, RankRecords, RankView, Topology, collective_costs};
pub use records::{DispatchRecord, Enqueue, Phase, SubmissionRecord, TokenRecord};
pub use report::{ReportOptions, render_report, render_report_with};
pub use session::Profiler;
pub(crate) use session::{DispatchMeta, PositionCost};
pub use stats::{Spread, SubmissionStats};
pub use timing::{DispatchTiming, TimingMechanism, TimingMethod};
pub use trace::{chrome_trace, chrome_trace_of_tokens};
