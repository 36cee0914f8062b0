//! The format a kernel reads, from its name: kernels over quantized weights
//! carry their block format (`matvec_q4_k_q8`, `norm_matvec_silu_q6_k_q8`,
//! `dequantize_q4_k_bf16`, `embedding_q6_k`, `matmul_q8_0`), dense kernels
//! end in their dtype (`matvec_bf16`, `attention_split_d64_g4_bf16`,
//! `add_f32`), and the rest (a library's GEMM, `copy_bytes`) name none. The
//! roofline colours its kernels by it and the report groups time by it.

use kernelscope::profile::DispatchRecord;
use kernelscope::quant::QuantFormat;

use crate::summary::Summary;

/// What a kernel named no format of is grouped under.
pub(crate) const OTHER: &str = "other";

/// The dense dtypes a kernel's name may end in.
const DENSE: [&str; 3] = ["bf16", "f16", "f32"];

/// The format kernel `name` reads: the first block format it names
/// (`q4_k`; the `_q8` of an 8-bit-quantized activation is no such
/// format), else the dtype it ends in (`bf16`), else [`OTHER`].
pub(crate) fn format_of_kernel(name: &str) -> &'static str {
    let parts: Vec<&str> = name.split('_').collect();
    let quantized = parts.windows(2).find_map(|pair| {
        QuantFormat::ALL.iter().find_map(|format| {
            let (block, kind) = format.name().split_once('_')?;
            (pair[0] == block && pair[1] == kind).then_some(format.name())
        })
    });
    quantized
        .or_else(|| {
            let last = parts.last()?;
            DENSE.iter().copied().find(|dense| dense == last)
        })
        .unwrap_or(OTHER)
}

/// A record's format, as rows grouped by format are keyed.
pub(crate) fn format_of(record: &DispatchRecord) -> String {
    format_of_kernel(&record.kernel).to_string()
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
        .any(|record| is_quantized(format_of_kernel(&record.kernel)))
}

/// What the per-format table groups by.
pub(crate) const FORMAT_HEADING: &str = "Time by the format each kernel reads, from its name: the block format of a kernel over quantized weights (matvec_q4_k_q8: q4_k), else the dtype its name ends in (the activations' kernels among them), else other.";

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

/// The colour of `format` on the page: one per block format, blues and
/// greys for the dense dtypes and the rest.
pub(crate) fn format_colour(format: &str) -> &'static str {
    match format {
        "q4_0" => "#d37295",
        "q4_1" => "#fabfd2",
        "q5_0" => "#8c564b",
        "q5_1" => "#c49c94",
        "q8_0" => "#59a14f",
        "q4_k" => "#e15759",
        "q5_k" => "#b07aa1",
        "q6_k" => "#f28e2b",
        "bf16" => "#4e79a7",
        "f16" => "#76b7b2",
        "f32" => "#a0cbe8",
        _ => "#bab0ac",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_name_the_format_they_read() {
        for (kernel, format) in [
            ("matvec_q4_k_q8", "q4_k"),
            ("matvec_add_q6_k_q8", "q6_k"),
            ("norm_matvec_q4_k_q8", "q4_k"),
            ("norm_matvec_silu_q5_k_q8", "q5_k"),
            ("matvec_q8_0_q8", "q8_0"),
            ("matvec_q4_1_f32", "q4_1"),
            ("matmul_q5_0", "q5_0"),
            ("matmul_q5_1", "q5_1"),
            ("matvec_q4_0_q8", "q4_0"),
            ("dequantize_q4_k_bf16", "q4_k"),
            ("embedding_q6_k", "q6_k"),
            ("matvec_bf16", "bf16"),
            ("rms_norm_bf16_bf16", "bf16"),
            ("attention_split_d64_g4_bf16", "bf16"),
            ("matmul_f16", "f16"),
            ("add_f32", "f32"),
            ("copy_bytes", OTHER),
            ("nvjet_sm90_tss_64x8_64x16_4x1_v_bz_TNT", OTHER),
            ("inc_one", OTHER),
        ] {
            assert_eq!(format_of_kernel(kernel), format, "{kernel}");
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
        assert_eq!(colours.len(), 12, "a colour of its own for each format");
    }
}
