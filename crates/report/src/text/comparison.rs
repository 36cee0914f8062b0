//! A comparison of two profiles as text: every compared row in one table,
//! the notes the reader should know, and a one-line verdict.

use std::fmt::Write;

use comfy_table::{CellAlignment, Table, presets};
use kernelscope::profile::Comparison;

use crate::tables::{COMPARISON_COLUMNS, comparison_cells};

/// `comparison` as text: a table of every row, the notes and the verdict.
pub fn render_comparison(comparison: &Comparison) -> String {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(COMPARISON_COLUMNS);
    // The figures right-aligned; what is compared and the verdict are words.
    for index in 2..6 {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    for row in &comparison.rows {
        table.add_row(comparison_cells(row));
    }
    let mut out = format!("{table}\n");
    for note in &comparison.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let regressions = comparison.regressions();
    if regressions > 0 {
        let _ = writeln!(
            out,
            "result: REGRESSION in {regressions} rows (threshold {:.1}%)",
            comparison.threshold * 100.0
        );
    } else {
        let _ = writeln!(
            out,
            "result: no regression (threshold {:.1}%)",
            comparison.threshold * 100.0
        );
    }
    out
}
