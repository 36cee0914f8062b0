//! The report's tables as a header and rows of cells, shared by the text and
//! the HTML renderings so both show the same figures in the same format: the
//! summary columns of a group of dispatches (per op, layer, scope, kernel),
//! the counter table and the rows of a comparison.

use kernelscope::profile::{
    Aggregate, Bound, ComparisonRow, DispatchRecord, Phase, Placement, Profile, Roofline, placements,
};

use crate::summary::Summary;

/// Milliseconds with three decimals.
pub(crate) fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// Microseconds with one decimal.
pub(crate) fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn percent(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "-".to_string()
    }
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// Arithmetic intensity (declared flops per declared byte), `-` where the
/// group declares no flops or no bytes.
fn flops_per_byte(row: &Aggregate) -> String {
    if row.flops > 0 && row.bytes > 0 {
        format!("{:.2}", row.flops as f64 / row.bytes as f64)
    } else {
        "-".to_string()
    }
}

/// How close `row` came to the peak that bounds it: `83.1% BW`,
/// `61.0% FLOP/s`, `72.4% roofline`, or `-`.
fn share_of_peak(placement: &Placement, roofline: Roofline, row: &Aggregate) -> String {
    placement.share_of_peak(roofline, row).map_or_else(
        || "-".to_string(),
        |share| format!("{:.1}% {}", share.percent, share.peak.name()),
    )
}

/// The columns after the key of a summary table.
pub(crate) const SUMMARY_COLUMNS: [&str; 9] = [
    "calls",
    "total ms",
    "avg µs",
    "share",
    "GB/s",
    "GFLOP/s",
    "FLOP/B",
    "bound",
    "% of peak",
];

/// The cells of `rows` (the groups of `summary`'s records by `key`): the
/// key, then [`SUMMARY_COLUMNS`].
pub(crate) fn summary_cells(
    summary: &Summary<'_>,
    rows: &[Aggregate],
    key: impl Fn(&DispatchRecord) -> String,
) -> Vec<Vec<String>> {
    let roofline = summary.roofline;
    let placements = placements(summary.records.iter().copied(), roofline, key);
    rows.iter()
        .map(|row| {
            let placement = placements.get(&row.key);
            vec![
                row.key.clone(),
                row.calls.to_string(),
                ms(row.total_ns),
                us(row.total_ns as f64 / row.calls.max(1) as f64),
                percent(row.total_ns as f64, summary.total_ns as f64),
                optional(row.gigabytes_per_second(), 1),
                optional(row.gigaflops_per_second(), 1),
                flops_per_byte(row),
                placement
                    .and_then(Placement::bound)
                    .map_or("-", Bound::name)
                    .to_string(),
                placement.map_or_else(
                    || "-".to_string(),
                    |placement| share_of_peak(placement, roofline, row),
                ),
            ]
        })
        .collect()
}

/// The counter table: its header and rows (run total, then per prefill and
/// per decode token where the run had such tokens).
pub(crate) fn counter_table(profile: &Profile) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let prefill = profile.phase_counters(Phase::Prefill);
    let decode = profile.phase_counters(Phase::Decode);
    let mut header = vec!["counter", "run total"];
    if prefill.is_some() {
        header.push("per prefill token");
    }
    if decode.is_some() {
        header.push("per decode token");
    }
    let rows = profile
        .counters
        .entries()
        .iter()
        .enumerate()
        .map(|(row, (name, total))| {
            let mut cells = vec![name.to_string(), total.to_string()];
            for (count, sum) in [prefill, decode].into_iter().flatten() {
                let value = sum.entries()[row].1 as f64 / count as f64;
                cells.push(format!("{value:.2}"));
            }
            cells
        })
        .collect();
    (header, rows)
}

/// The columns of a comparison table.
pub(crate) const COMPARISON_COLUMNS: [&str; 7] =
    ["section", "what", "base", "new", "change", "noise", "verdict"];

/// A comparison row as its table shows it: [`COMPARISON_COLUMNS`], timings
/// in ms, counters as counted.
pub(crate) fn comparison_cells(row: &ComparisonRow) -> Vec<String> {
    let timing = row.section != "counter";
    let value = |value: Option<f64>| match value {
        None => "-".to_string(),
        Some(v) if timing => format!("{:.3} ms", v / 1e6),
        Some(v) if v.fract() == 0.0 => format!("{v}"),
        Some(v) => format!("{v:.3}"),
    };
    vec![
        row.section.to_string(),
        row.key.clone(),
        value(row.base),
        value(row.new),
        row.change
            .map_or("-".to_string(), |change| format!("{:+.1}%", change * 100.0)),
        if timing {
            format!("{:.3} ms", row.noise / 1e6)
        } else {
            "-".to_string()
        },
        row.verdict.name().to_string(),
    ]
}
