//! kernelscope-report: what a kernelscope profile looks like to people. It
//! renders a [`Profile`](kernelscope::profile::Profile), live or loaded from
//! its JSON file (the same either way), as the text report, as one
//! self-contained HTML page and as a Chrome trace, and a comparison of two
//! profiles as text and as a page.
//!
//! ```text
//! kscope (CLI)
//!   └─ kernelscope-report   text report · HTML page · Chrome trace
//!       └─ kernelscope      runtime · profile: records, JSON file, analysis, comparison
//! ```
//!
//! It reads only the profile and the analysis kernelscope exports
//! (aggregation, roofline placement, the cross-check, which layers fold,
//! the comparison's verdicts) and judges nothing itself, so a new view
//! needs no change to the runtime. Every renderer returns a string (the
//! trace a JSON value) and none can fail, so the crate has no error type.
//!
//! # Example
//!
//! ```
//! use kernelscope_report::{ReportOptions, chrome_trace, render_html, render_report_with};
//!
//! let profile = kernelscope::testing::synthetic_profile(4, 1.0, 1);
//! let text = render_report_with(&profile, ReportOptions::SHORT);
//! assert!(text.starts_with("kernelscope profile"));
//! assert!(render_html(&profile).starts_with("<!DOCTYPE html>"));
//! assert!(chrome_trace(&profile)["traceEvents"].is_array());
//! ```

#![warn(missing_docs)]

mod formats;
mod html;
mod in_kernel;
mod rank_steps;
mod summary;
mod tables;
mod text;
mod trace;

pub use html::{render_comparison_html, render_gap_html, render_html};
pub use text::{ReportOptions, render_comparison, render_gap_account, render_report, render_report_with};
pub use trace::{chrome_trace, chrome_trace_of_tokens, write_chrome_trace};
