//! The text report's one table style: ASCII Markdown, the first column
//! (the key) left-aligned and every figure right-aligned so digits line up.

use comfy_table::{CellAlignment, Table, presets};

/// An empty table headed `header`.
pub(super) fn new_table(header: &[&str]) -> Table {
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

/// The table of `rows` headed `header`.
pub(super) fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> Table {
    let mut table = new_table(header);
    for cells in rows {
        table.add_row(cells);
    }
    table
}
