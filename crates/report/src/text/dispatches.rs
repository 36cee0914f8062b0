//! The text report's tables of dispatch time: per op, per layer, per scope
//! (rows of identical layers folded in the short report) and per kernel
//! (the slowest first, cut to the top N), each with its roofline columns,
//! the phases of kernels timed inside them, and per format where kernels
//! read quantized weights.

use std::collections::HashMap;
use std::fmt::Write;

use comfy_table::Table;
use kernelscope::profile::{
    Aggregate, DispatchRecord, FOLD_TOLERANCE_FLOOR, fold_inputs, layer_of, scope_of,
};

use super::folds::{DIFFERS_MARK, fold_labels, shown_as};
use super::options::ReportOptions;
use super::table::table;
use crate::formats::{FORMAT_HEADING, format_of, reads_block_formats};
use crate::in_kernel::{IN_KERNEL_NOTE, PHASE_COLUMNS, PHASE_NOTE, has_phases, phase_cells};
use crate::summary::{Summary, kernel_of, op_of};
use crate::tables::{SUMMARY_COLUMNS, ms, summary_cells};

/// The table of `rows`, the groups of the summary's records by `key`,
/// its key column headed `header`.
fn summary_table(
    summary: &Summary<'_>,
    rows: &[Aggregate],
    key: impl Fn(&DispatchRecord) -> String,
    header: &str,
) -> Table {
    let mut columns = vec![header];
    columns.extend(SUMMARY_COLUMNS);
    table(&columns, summary_cells(summary, rows, key))
}

/// Every table of dispatch time, layers folded under `layer_labels`.
pub(super) fn render_dispatch_summary(
    summary: &Summary<'_>,
    layer_labels: &HashMap<String, String>,
    options: ReportOptions,
    out: &mut String,
) {
    render_grouped_tables(summary, layer_labels, options, out);
    render_kernel_table(summary, options, out);
    render_phase_table(summary, out);
    render_format_table(summary, out);
}

/// The phases of the kernels timed inside them, where any were: each
/// phase's time per launch, its share of the launch and the time its
/// blocks waited at the barrier that ends it.
fn render_phase_table(summary: &Summary<'_>, out: &mut String) {
    if !has_phases(&summary.records) {
        return;
    }
    let _ = writeln!(
        out,
        "
inside the kernels, over {}:",
        summary.over
    );
    let _ = writeln!(out, "{}", table(&PHASE_COLUMNS, phase_cells(&summary.records)));
    let _ = writeln!(
        out,
        "{IN_KERNEL_NOTE}
{PHASE_NOTE}"
    );
}

/// Time by the format each kernel reads, where a kernel reads a block
/// format (a quantized model's run).
fn render_format_table(summary: &Summary<'_>, out: &mut String) {
    if !reads_block_formats(summary) {
        return;
    }
    let formats = summary.heaviest_groups(format_of);
    let _ = writeln!(out, "\nper format, over {}:", summary.over);
    let _ = writeln!(out, "{}", summary_table(summary, &formats, format_of, "format"));
    let _ = writeln!(out, "{FORMAT_HEADING}");
}

/// The per-op, per-layer and per-scope tables, and what `*` means where a
/// row is marked.
fn render_grouped_tables(
    summary: &Summary<'_>,
    layer_labels: &HashMap<String, String>,
    options: ReportOptions,
    out: &mut String,
) {
    let over = &summary.over;
    let ops = summary.heaviest_groups(op_of);
    let _ = writeln!(
        out,
        "\nper op, over {over} ({} ms of dispatch time):",
        ms(summary.total_ns)
    );
    let _ = writeln!(out, "{}", summary_table(summary, &ops, op_of, "op"));

    // Rows of identical layers fold into one (short report): the tables
    // group records under the fold's label instead of their own key.
    let layer = |r: &DispatchRecord| shown_as(layer_labels, layer_of(&r.scope));
    let layers = summary.groups(layer);
    let _ = writeln!(out, "\nper layer, over {over}:");
    let _ = writeln!(out, "{}", summary_table(summary, &layers, layer, "layer"));

    let scope_labels = if options.full {
        HashMap::new()
    } else {
        fold_labels(&fold_inputs(summary.records.iter().copied(), scope_of))
    };
    let scope = |r: &DispatchRecord| shown_as(&scope_labels, scope_of(r));
    let scopes = summary.groups(scope);
    if scopes.len() != layers.len() {
        let _ = writeln!(out, "\nper scope, over {over}:");
        let _ = writeln!(out, "{}", summary_table(summary, &scopes, scope, "scope"));
    }
    if layer_labels
        .values()
        .chain(scope_labels.values())
        .any(|label| label.ends_with(DIFFERS_MARK))
    {
        let _ = writeln!(
            out,
            "*: differs from the layers that do the same work by more than the noise (the larger of {:.0}% and 3 of its per-token standard deviations); --full shows every layer",
            100.0 * FOLD_TOLERANCE_FLOOR
        );
    }
}

/// The per-kernel table, the slowest `options.top_kernels`, and what its
/// roofline columns mean.
fn render_kernel_table(summary: &Summary<'_>, options: ReportOptions, out: &mut String) {
    let mut kernels = summary.heaviest_groups(kernel_of);
    let hidden = options
        .top_kernels
        .map_or(0, |top| kernels.len().saturating_sub(top));
    kernels.truncate(kernels.len() - hidden);
    let _ = writeln!(out, "\nper kernel, over {}:", summary.over);
    let _ = writeln!(out, "{}", summary_table(summary, &kernels, kernel_of, "kernel"));
    if hidden > 0 {
        let _ = writeln!(out, "… {hidden} more kernels (--top N shows more, --full all)");
    }
    if has_phases(&summary.records) {
        let _ = writeln!(out, "{IN_KERNEL_NOTE}");
    }
    let bounds = match summary.roofline.ridge_point() {
        Some(ridge) => format!(
            "each dispatch is memory-bound below the ridge point ({ridge:.2} FLOP/B), compute-bound at or above it; a row of both is mixed"
        ),
        None => "memory without flops, compute without bytes, ? for the rest (a peak is unknown)".to_string(),
    };
    let _ = writeln!(
        out,
        "FLOP/B: declared flops per declared byte. bound: {bounds}.\n% of peak: the time the row's dispatches would take at the ceilings that bound them over the time they took: bytes read at the read ceiling plus bytes written at the write ceiling (BW; a profile from before schema 3: all bytes at its copy ceiling), or flops at the compute ceiling (FLOP/s); both for a mixed row (roofline)."
    );
}
