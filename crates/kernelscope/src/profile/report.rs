//! The human report: per token, per layer and scope, per op and kernel, the
//! submission table, counters per token and the cross-check. In the spirit of
//! an inference engine's `--profile` report, with achieved bandwidth and FLOP/s from what each
//! dispatch declares it moves, and where each group sits on the device's
//! roofline (memory- or compute-bound, and how close to that peak).

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use comfy_table::{CellAlignment, Table, presets};

use super::aggregate::{Aggregate, aggregate, layer_of, scope_of};
use super::fold::{fold_inputs, fold_labels};
use super::roofline::{Bound, Placement, Roofline, placements};
use super::session::submission_table;
use super::{DRIFT_FLAG_THRESHOLD, DispatchRecord, Phase, Profile, TokenRecord, cross_check};

/// Milliseconds with three decimals.
fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// Microseconds with one decimal.
fn us(ns: f64) -> String {
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

fn new_table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(header.iter().copied());
    for index in 1..header.len() {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

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

/// Renders `profile` as the full human report (every layer, scope and
/// kernel on its own row); see [`render_report_with`] for the short one.
pub fn render_report(profile: &Profile) -> String {
    render_report_with(profile, ReportOptions::FULL)
}

/// Renders `profile` as the human report, as `options` say.
pub fn render_report_with(profile: &Profile, options: ReportOptions) -> String {
    let mut out = String::new();
    let conditions = &profile.conditions;
    let _ = writeln!(out, "kernelscope profile ({})", profile.tool);
    let _ = writeln!(
        out,
        "device: {} | backend: {} | mode: {} | profiling: {}",
        conditions.device, conditions.backend, conditions.mode, conditions.profiling
    );
    let _ = writeln!(
        out,
        "timing: submissions by {}, dispatches {}",
        conditions.submission_timing,
        conditions.dispatch_timing.describe()
    );
    if let Some(model) = &conditions.model {
        let _ = writeln!(out, "model: {model}");
    }
    let _ = writeln!(out, "{}", Roofline::of(conditions).describe());

    let dispatch_times = !profile.dispatches.is_empty();
    if !dispatch_times && conditions.profiling.times_dispatches() {
        let _ = writeln!(
            out,
            "\nper-dispatch timing: {} — per-op and per-layer rows are not available; submission times below are",
            conditions.dispatch_timing.describe()
        );
    }

    // The dispatches summarised and, in the short report, the folds of their
    // layers: made once, for the token lines and the tables alike.
    let summary = Summary::of(profile);
    let layer_labels = if options.full {
        HashMap::new()
    } else {
        fold_labels(&fold_inputs(summary.records.iter().copied(), |record| {
            layer_of(&record.scope)
        }))
    };
    render_tokens(profile, &layer_labels, &mut out);
    if dispatch_times {
        render_dispatch_summary(&summary, &layer_labels, options, &mut out);
    }
    render_submissions(profile, &mut out);
    render_counters(profile, &mut out);
    render_ranks(profile, options, &mut out);
    render_cross_check(profile, &mut out);
    for warning in &profile.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// One line per layer of a token: `layer.0  1.234 µs (MatVec×7 1.0 µs, ...)`;
/// in the short report one line per run of identical layers (`labels`, the
/// folds of the per-layer table: whether a layer differs is judged over the
/// whole run, not one token's jitter), their times each layer's mean in
/// this token (`layer.0–15 ×16 ±0.4%  87.0 µs each`).
fn render_token(
    profile: &Profile,
    token: &TokenRecord,
    title: &str,
    labels: &HashMap<String, String>,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "\n{title}: token {} ({:?}) {} ms, {} dispatches, {} syncs",
        token.index,
        token.phase,
        ms(token.duration_ns()),
        token.counters.dispatches,
        token.counters.syncs
    );
    let records: Vec<_> = profile
        .dispatches
        .iter()
        .filter(|record| record.token == Some(token.index))
        .collect();
    if records.is_empty() {
        return;
    }
    let mut members: HashMap<&str, u64> = HashMap::new();
    for label in labels.values() {
        *members.entry(label.as_str()).or_insert(0) += 1;
    }
    let row_of = |record: &DispatchRecord| {
        let layer = layer_of(&record.scope);
        labels.get(&layer).cloned().unwrap_or(layer)
    };
    // Each row's ops, grouped in one pass: a token of many layers must not
    // cost a scan of its records per layer.
    let mut ops_by_row: HashMap<String, Vec<&DispatchRecord>> = HashMap::new();
    for record in &records {
        ops_by_row.entry(row_of(record)).or_default().push(record);
    }
    let rows = aggregate(records.iter().copied(), row_of);
    let width = rows
        .iter()
        .map(|row| row.key.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    for row in rows {
        let count = members.get(row.key.as_str()).copied().unwrap_or(1).max(1);
        let in_row = ops_by_row.get(&row.key).map(Vec::as_slice).unwrap_or_default();
        let ops = aggregate(in_row.iter().copied(), |record| record.op_kind.name().to_string());
        let parts: Vec<String> = ops
            .iter()
            .map(|op| {
                let calls = op.calls / count;
                let times = if calls > 1 {
                    format!("×{calls}")
                } else {
                    String::new()
                };
                format!("{}{times} {} µs", op.key, us(op.total_ns as f64 / count as f64))
            })
            .collect();
        let each = if count > 1 { " each" } else { "" };
        let _ = writeln!(
            out,
            "  {:<width$} {:>9} µs{each}  ({})",
            row.key,
            us(row.total_ns as f64 / count as f64),
            parts.join(", ")
        );
    }
}

/// The token summary and the first and last token's lines, layers folded
/// under `layer_labels` (empty: every layer its own line).
fn render_tokens(profile: &Profile, layer_labels: &HashMap<String, String>, out: &mut String) {
    if profile.tokens.is_empty() {
        return;
    }
    let count = |phase| profile.tokens.iter().filter(|token| token.phase == phase).count();
    let decode: Vec<&TokenRecord> = profile
        .tokens
        .iter()
        .filter(|token| token.phase == Phase::Decode)
        .collect();
    let _ = writeln!(
        out,
        "\ntokens: {} prefill, {} decode",
        count(Phase::Prefill),
        count(Phase::Decode)
    );
    if !decode.is_empty() {
        // Saturating: a loaded profile's token times were checked to add up
        // within u64; summed in f64 would lose nanoseconds on long runs.
        let total = decode
            .iter()
            .fold(0u64, |total, token| total.saturating_add(token.duration_ns()));
        let mean = total as f64 / decode.len() as f64;
        // Tokens that took no measurable time have no rate, not an infinite one.
        let rate = if mean > 0.0 {
            format!("{:.1}", 1e9 / mean)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "decode: {} ms per token on average, {rate} tokens/s (host wall clock)",
            ms(mean as u64),
        );
    }
    let shown: Vec<&TokenRecord> = if decode.is_empty() {
        profile.tokens.iter().collect()
    } else {
        decode
    };
    if let Some(first) = shown.first() {
        render_token(profile, first, "first", layer_labels, out);
    }
    if shown.len() > 1
        && let Some(last) = shown.last()
    {
        render_token(profile, last, "last", layer_labels, out);
    }
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

/// The dispatches a summary's tables group (those of the repetition tokens,
/// or the whole run), and what each row is measured against.
pub(crate) struct Summary<'a> {
    pub records: Vec<&'a DispatchRecord>,
    pub total_ns: u64,
    pub roofline: Roofline,
    /// `the whole run` or `31 tokens`.
    pub over: String,
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

impl<'a> Summary<'a> {
    /// The summary of `profile`'s repetition tokens (decode, or every token).
    pub fn of(profile: &'a Profile) -> Self {
        // A set: a long token list must not cost a scan per dispatch.
        let repetition_tokens: HashSet<u32> = profile.repetition_tokens().into_iter().collect();
        let records: Vec<_> = if repetition_tokens.is_empty() {
            profile.dispatches.iter().collect()
        } else {
            profile
                .dispatches
                .iter()
                .filter(|record| {
                    record
                        .token
                        .is_some_and(|token| repetition_tokens.contains(&token))
                })
                .collect()
        };
        let over = if repetition_tokens.is_empty() {
            "the whole run".to_string()
        } else {
            format!("{} tokens", repetition_tokens.len())
        };
        // Saturating: see `aggregate`.
        let total_ns = records
            .iter()
            .fold(0u64, |total, record| total.saturating_add(record.duration_ns()));
        Summary {
            records,
            total_ns,
            roofline: Roofline::of(&profile.conditions),
            over,
        }
    }

    /// The cells of `rows` (the groups of the records by `key`): the key,
    /// then [`SUMMARY_COLUMNS`].
    pub fn cells(&self, rows: &[Aggregate], key: impl Fn(&DispatchRecord) -> String) -> Vec<Vec<String>> {
        let placements = placements(self.records.iter().copied(), self.roofline, key);
        rows.iter()
            .map(|row| {
                let placement = placements.get(&row.key);
                vec![
                    row.key.clone(),
                    row.calls.to_string(),
                    ms(row.total_ns),
                    us(row.total_ns as f64 / row.calls.max(1) as f64),
                    percent(row.total_ns as f64, self.total_ns as f64),
                    optional(row.gigabytes_per_second(), 1),
                    optional(row.gigaflops_per_second(), 1),
                    flops_per_byte(row),
                    placement
                        .and_then(Placement::bound)
                        .map_or("-", Bound::name)
                        .to_string(),
                    placement.map_or_else(
                        || "-".to_string(),
                        |placement| placement.percent_of_peak(self.roofline, row),
                    ),
                ]
            })
            .collect()
    }

    /// The table of `rows`, the groups of the records by `key`, headed `header`.
    fn table(&self, rows: &[Aggregate], key: impl Fn(&DispatchRecord) -> String, header: &str) -> Table {
        let mut columns = vec![header];
        columns.extend(SUMMARY_COLUMNS);
        let mut table = new_table(&columns);
        for cells in self.cells(rows, key) {
            table.add_row(cells);
        }
        table
    }
}

fn render_dispatch_summary(
    summary: &Summary<'_>,
    layer_labels: &HashMap<String, String>,
    options: ReportOptions,
    out: &mut String,
) {
    let (over, total_ns) = (&summary.over, summary.total_ns);
    let records = || summary.records.iter().copied();
    let by_total = |mut rows: Vec<Aggregate>| {
        rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.key.cmp(&b.key)));
        rows
    };

    let op_of = |r: &DispatchRecord| r.op_kind.name().to_string();
    let ops = by_total(aggregate(records(), op_of));
    let _ = writeln!(
        out,
        "\nper op, over {over} ({} ms of dispatch time):",
        ms(total_ns)
    );
    let _ = writeln!(out, "{}", summary.table(&ops, op_of, "op"));

    // Rows of identical layers fold into one (short report): the tables
    // group records under the fold's label instead of their own key.
    let layer = |r: &DispatchRecord| {
        let key = layer_of(&r.scope);
        layer_labels.get(&key).cloned().unwrap_or(key)
    };
    let layers = aggregate(records(), layer);
    let _ = writeln!(out, "\nper layer, over {over}:");
    let _ = writeln!(out, "{}", summary.table(&layers, layer, "layer"));

    let scope_labels = if options.full {
        HashMap::new()
    } else {
        fold_labels(&fold_inputs(records(), scope_of))
    };
    let scope = |r: &DispatchRecord| {
        let key = scope_of(r);
        scope_labels.get(&key).cloned().unwrap_or(key)
    };
    let scopes = aggregate(records(), scope);
    if scopes.len() != layers.len() {
        let _ = writeln!(out, "\nper scope, over {over}:");
        let _ = writeln!(out, "{}", summary.table(&scopes, scope, "scope"));
    }
    if layer_labels
        .values()
        .chain(scope_labels.values())
        .any(|label| label.ends_with(" *"))
    {
        let _ = writeln!(
            out,
            "*: differs from the layers that do the same work by more than the noise (the larger of {:.0}% and 3 of its per-token standard deviations); --full shows every layer",
            100.0 * super::fold::FOLD_TOLERANCE_FLOOR
        );
    }

    let kernel_of = |r: &DispatchRecord| r.kernel.to_string();
    let mut kernels = by_total(aggregate(records(), kernel_of));
    let hidden = options
        .top_kernels
        .map_or(0, |top| kernels.len().saturating_sub(top));
    kernels.truncate(kernels.len() - hidden);
    let _ = writeln!(out, "\nper kernel, over {over}:");
    let _ = writeln!(out, "{}", summary.table(&kernels, kernel_of, "kernel"));
    if hidden > 0 {
        let _ = writeln!(out, "… {hidden} more kernels (--top N shows more, --full all)");
    }
    let bounds = match summary.roofline.ridge_point() {
        Some(ridge) => format!(
            "each dispatch is memory-bound below the ridge point ({ridge:.2} FLOP/B), compute-bound at or above it; a row of both is mixed"
        ),
        None => "memory without flops, compute without bytes, ? for the rest (a peak is unknown)".to_string(),
    };
    let _ = writeln!(
        out,
        "FLOP/B: declared flops per declared byte. bound: {bounds}.\n% of peak: of the copy probe's bandwidth (BW) or the GEMM probe's rate (FLOP/s), whichever bounds the row; for a mixed row, the time its dispatches would take at their bounds over the time they took (roofline)."
    );
}

fn render_submissions(profile: &Profile, out: &mut String) {
    let table_rows = submission_table(&profile.submissions);
    if table_rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nsubmissions by label (sorted by total):");
    // Backends that run work as it is committed (the CPU) have no separate enqueue.
    let enqueue_measured = table_rows.iter().any(|row| row.host_enqueue_ns > 0);
    let mut header = vec![
        "label", "count", "total ms", "min µs", "max µs", "p50 µs", "p95 µs",
    ];
    if enqueue_measured {
        header.push("host enqueue µs (mean)");
    }
    let mut table = new_table(&header);
    for row in table_rows {
        let mut cells = vec![
            row.label,
            row.count.to_string(),
            ms(row.total_ns),
            us(row.min_ns as f64),
            us(row.max_ns as f64),
            us(row.p50_ns as f64),
            us(row.p95_ns as f64),
        ];
        if enqueue_measured {
            cells.push(us(row.host_enqueue_ns as f64 / row.count as f64));
        }
        table.add_row(cells);
    }
    let _ = writeln!(out, "{table}");
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

fn render_counters(profile: &Profile, out: &mut String) {
    let (header, rows) = counter_table(profile);
    let mut table = new_table(&header);
    for cells in rows {
        table.add_row(cells);
    }
    let _ = writeln!(out, "\ncounters:");
    let _ = writeln!(out, "{table}");
}

/// A split run: per rank its counters and the time its collectives took
/// and waited; per layer what communication cost and how long the fastest
/// rank waited for the slowest (the imbalance). Nothing for one device.
fn render_ranks(profile: &Profile, options: ReportOptions, out: &mut String) {
    let Some(topology) = &profile.conditions.topology else {
        return;
    };
    let _ = writeln!(
        out,
        "
ranks: {}",
        topology.describe()
    );
    let tokens = profile.tokens.len().max(1) as f64;
    let (costs, unmatched) = super::collective_costs(profile);
    let mut table = new_table(&[
        "rank",
        "device",
        "dispatches",
        "submissions",
        "syncs",
        "busy ms",
        "collectives",
        "collective µs/token",
        "waiting µs/token",
    ]);
    for view in profile.rank_views() {
        let busy: u64 = view.dispatches.iter().map(|record| record.duration_ns()).sum();
        let collectives: Vec<&DispatchRecord> = view
            .dispatches
            .iter()
            .filter(|record| record.op_kind.is_collective())
            .collect();
        let collective_ns: u64 = collectives.iter().map(|record| record.duration_ns()).sum();
        let waiting: u64 = costs.iter().map(|(_, cost)| cost.waiting_ns[view.rank]).sum();
        table.add_row(vec![
            view.rank.to_string(),
            view.device.to_string(),
            view.counters.dispatches.to_string(),
            view.counters.submissions.to_string(),
            view.counters.syncs.to_string(),
            ms(busy),
            collectives.len().to_string(),
            us(collective_ns as f64 / tokens),
            us(waiting as f64 / tokens),
        ]);
    }
    let _ = writeln!(out, "{table}");
    if let Some(note) = unmatched {
        let _ = writeln!(out, "collectives: {note}");
        return;
    }
    if costs.is_empty() {
        return;
    }
    let costs = if options.full { costs } else { fold_costs(costs) };
    let mut table = new_table(&[
        "scope",
        "collectives/token",
        "communication µs/token",
        "bus GB/s",
        "imbalance µs/token",
        "slowest rank",
    ]);
    for (group, cost) in &costs {
        // The rank that waited least arrived last: the slowest.
        let slowest = cost
            .waiting_ns
            .iter()
            .enumerate()
            .min_by_key(|(_, waiting)| **waiting)
            .map_or(0, |(rank, _)| rank);
        let bandwidth = if cost.communication_ns > 0 {
            format!("{:.1}", cost.bytes as f64 / cost.communication_ns as f64)
        } else {
            "-".into()
        };
        table.add_row(vec![
            group.clone(),
            format!("{:.1}", cost.count as f64 / tokens),
            us(cost.communication_ns as f64 / tokens),
            bandwidth,
            us(cost.imbalance_ns() as f64 / tokens),
            slowest.to_string(),
        ]);
    }
    let _ = writeln!(
        out,
        "collectives per scope (communication: from the last rank's arrival to the end; imbalance: the longest any rank waited for the last):"
    );
    let _ = writeln!(out, "{table}");
}

/// Collective costs with the scopes of identical layers folded into one
/// row each (compared by communication time), their costs summed.
fn fold_costs(costs: Vec<(String, super::CollectiveCost)>) -> Vec<(String, super::CollectiveCost)> {
    let inputs: Vec<super::fold::FoldInput> = costs
        .iter()
        .map(|(key, cost)| super::fold::FoldInput {
            key: key.clone(),
            value: cost.communication_ns as f64,
            relative_spread: None,
            signature: format!("{} collectives, {} B", cost.count, cost.bytes),
        })
        .collect();
    let labels = fold_labels(&inputs);
    let mut folded: super::aggregate::FirstSeen<super::CollectiveCost> = super::aggregate::FirstSeen::new();
    for (key, cost) in costs {
        let label = labels.get(&key).cloned().unwrap_or(key);
        let total = folded.entry(&label, || super::CollectiveCost {
            count: 0,
            communication_ns: 0,
            waiting_ns: vec![0; cost.waiting_ns.len()],
            bytes: 0,
        });
        total.count += cost.count;
        total.communication_ns = total.communication_ns.saturating_add(cost.communication_ns);
        total.bytes = total.bytes.saturating_add(cost.bytes);
        for (sum, waited) in total.waiting_ns.iter_mut().zip(&cost.waiting_ns) {
            *sum = sum.saturating_add(*waited);
        }
    }
    folded.into_groups()
}

fn render_cross_check(profile: &Profile, out: &mut String) {
    let checks = cross_check(profile);
    if checks.is_empty() {
        if !profile.submissions.is_empty() {
            let _ = writeln!(
                out,
                "\ncross-check: no per-dispatch times to check against submissions"
            );
        }
        return;
    }
    let _ = writeln!(out);
    for check in checks {
        let verdict = if check.flagged {
            format!(
                "FLAGGED: drift over {:.0}% means a measurement bug or idle gaps between dispatches",
                DRIFT_FLAG_THRESHOLD * 100.0
            )
        } else {
            "ok".to_string()
        };
        let _ = writeln!(
            out,
            "cross-check {}: dispatch sum {} ms vs submission {} ms over {} submissions, drift {:+.1}% (before the first dispatch {} ms, between and after dispatches {} ms) {verdict}",
            check.label,
            ms(check.dispatch_sum_ns),
            ms(check.submission_ns),
            check.submissions,
            check.drift * 100.0,
            ms(check.lead_ns),
            ms(check.gaps_ns)
        );
        if check.device_held > 0 {
            let _ = writeln!(
                out,
                "  {} of {} submissions held until fully enqueued (host enqueue {} ms in all): their time starts when the device could begin, not while the host was still launching",
                check.device_held,
                check.submissions,
                ms(check.host_enqueue_ns)
            );
        }
    }
}
