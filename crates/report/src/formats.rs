//! The format a kernel reads, as the kernel declares it: each dispatch
//! record carries it (`DispatchRecord::format`: a block format such as
//! `q4_k` for a kernel over quantized weights, a dense dtype such as `bf16`,
//! or none for a copy or another program's kernel; profiles before schema 4
//! had it filled from kernel names on load). The roofline colours its
//! kernels by it and the report groups time by it; what declares nothing
//! is grouped under [`OTHER`].

use std::collections::HashMap;

use kernelscope::profile::DispatchRecord;
use kernelscope::quant::QuantFormat;

use crate::summary::{Summary, kernel_of};

/// What a kernel that declares no format is grouped under.
pub(crate) const OTHER: &str = "other";

/// The dense dtypes a kernel may declare.
const DENSE: [&str; 3] = ["bf16", "f16", "f32"];

/// The format `record` reads, as one of the names the report knows (the
/// block formats, the dense dtypes): a format this kscope does not know (a
/// newer one's) is grouped, and coloured, as [`OTHER`], so that nothing
/// read from a file is written into the page as it stands.
fn format_name(record: &DispatchRecord) -> &'static str {
    let declared = record.format.as_deref();
    QuantFormat::ALL
        .iter()
        .map(|format| format.name())
        .chain(DENSE)
        .find(|known| Some(*known) == declared)
        .unwrap_or(OTHER)
}

/// A record's format, as rows grouped by format are keyed.
pub(crate) fn format_of(record: &DispatchRecord) -> String {
    format_name(record).to_string()
}

/// The format each kernel of the summary reads, by the kernel's row name
/// (as the roofline keys its kernels, a phase timed inside a kernel apart):
/// the one its first record declares.
pub(crate) fn kernel_formats(summary: &Summary<'_>) -> HashMap<String, &'static str> {
    let mut formats = HashMap::new();
    for record in &summary.records {
        formats
            .entry(kernel_of(record))
            .or_insert_with(|| format_name(record));
    }
    formats
}

/// Whether `format` is a block format (not a dense dtype nor [`OTHER`]).
pub(crate) fn is_quantized(format: &str) -> bool {
    QuantFormat::ALL.iter().any(|known| known.name() == format)
}

/// Whether any of the summary's kernels reads a block format: the report
/// then groups time by format too (a dense run's would only repeat its dtype).
pub(crate) fn reads_block_formats(summary: &Summary<'_>) -> bool {
    summary
        .records
        .iter()
        .any(|record| is_quantized(format_name(record)))
}

/// What the per-format table groups by.
pub(crate) const FORMAT_HEADING: &str = "Time by the format each kernel declares it reads: the block format of a kernel over quantized weights (matvec_q4_k_q8: q4_k), else the dtype a dense kernel is made for (the activations' kernels among them), else other (a kernel that declares none: a copy, another program's kernel).";

/// The formats in the order legends list them: the block formats in
/// ggml's order, then the dense dtypes, then [`OTHER`].
fn order(format: &str) -> usize {
    QuantFormat::ALL
        .iter()
        .map(|known| known.name())
        .chain(DENSE)
        .chain([OTHER])
        .position(|known| known == format)
        .unwrap_or(usize::MAX)
}

/// `formats` once each, in legend order.
pub(crate) fn in_legend_order<'a>(formats: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut formats: Vec<&str> = formats.into_iter().collect();
    formats.sort_by_key(|format| (order(format), *format));
    formats.dedup();
    formats
}

/// The block formats' colours, in `QuantFormat::ALL`'s order, with spares:
/// a new format takes the next one, so adding a format touches no report code.
const BLOCK_FORMAT_COLOURS: [&str; 12] = [
    "#d37295", "#fabfd2", "#8c564b", "#c49c94", "#59a14f", "#e15759", "#b07aa1", "#f28e2b", "#9c755f",
    "#edc948", "#ff9da7", "#86bcb6",
];

/// The colour of `format` on the page: one per block format, blues and
/// greys for the dense dtypes and the rest.
pub(crate) fn format_colour(format: &str) -> &'static str {
    if let Some(position) = QuantFormat::ALL.iter().position(|known| known.name() == format) {
        // More formats than colours: the last spare is shared.
        return BLOCK_FORMAT_COLOURS[position.min(BLOCK_FORMAT_COLOURS.len() - 1)];
    }
    match format {
        "bf16" => "#4e79a7",
        "f16" => "#76b7b2",
        "f32" => "#a0cbe8",
        _ => "#bab0ac",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn records_are_grouped_by_the_format_they_declare_in_legend_order() {
        let mut profile = kernelscope::testing::synthetic_profile(1, 1.0, 7);
        let record = &mut profile.dispatches[0];
        // A name that says nothing: the declared format alone decides.
        record.kernel = Arc::from("fused_step");
        for (declared, grouped) in [
            (Some("q6_k"), "q6_k"),
            (Some("q4_k"), "q4_k"),
            (Some("bf16"), "bf16"),
            (None, OTHER),
            // A format this kscope does not know, as a newer one may write.
            (Some("q1_x"), OTHER),
            (Some("<b>"), OTHER),
        ] {
            record.format = declared.map(Arc::from);
            assert_eq!(format_of(record), grouped, "{declared:?}");
        }
        assert!(is_quantized("q6_k") && !is_quantized("bf16") && !is_quantized(OTHER));
        assert_eq!(
            in_legend_order(["f32", OTHER, "q6_k", "bf16", "q4_k", "q6_k"]),
            ["q4_k", "q6_k", "bf16", "f32", OTHER]
        );
        let colours: std::collections::HashSet<_> = QuantFormat::ALL
            .iter()
            .map(|format| format.name())
            .chain(DENSE)
            .chain([OTHER])
            .map(format_colour)
            .collect();
        assert_eq!(
            colours.len(),
            QuantFormat::ALL.len() + DENSE.len() + 1,
            "a colour of its own for each format"
        );
        assert!(
            QuantFormat::ALL.len() <= BLOCK_FORMAT_COLOURS.len(),
            "more block formats than colours: add colours to BLOCK_FORMAT_COLOURS"
        );
    }
}
