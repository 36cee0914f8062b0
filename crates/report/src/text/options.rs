//! What the text report shows: a file of its own, so that the sections
//! the report is made of take the options without importing the report.

/// What the text report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    /// Every layer and scope on a row of its own. Without it, identical
    /// layers fold into one row (`layer.0–15 ×16 ±1.2%`) and a layer that
    /// differs from them by more than the noise stays apart, marked `*`.
    pub full: bool,
    /// How many kernels the per-kernel table shows, slowest first (`None`: all).
    pub top_kernels: Option<usize>,
}

impl ReportOptions {
    /// The short report: layers folded, the 10 slowest kernels.
    pub const SHORT: ReportOptions = ReportOptions {
        full: false,
        top_kernels: Some(10),
    };
    /// The full report: every layer, scope and kernel on its own row.
    pub const FULL: ReportOptions = ReportOptions {
        full: true,
        top_kernels: None,
    };
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions::SHORT
    }
}
