//! kernelscope's quantizers beside llama.cpp's bytes for the same rows, as
//! `tools/reference/quant_fixtures.py` writes them (the stored fixtures, or
//! a larger sweep): for the quantization tests and the `quant_sweep_diff`
//! example, which name the first block that differs.

use std::path::Path;

use crate::quant::QuantFormat;

/// Compares `format`'s quantizer, row by row of `row_elements` values,
/// with the bytes in `dir`: the rows compared, or the first block that
/// differs with its input, llama.cpp's bytes and ours.
pub fn compare_with_llama_cpp(dir: &Path, format: QuantFormat, row_elements: usize) -> Result<usize, String> {
    let read = |name: String| {
        let path = dir.join(&name);
        std::fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))
    };
    let input: Vec<f32> = read("quantize_input.f32".into())?
        .chunks_exact(4)
        .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        .collect();
    let expected = read(format!("{}.quantized.bin", format.name()))?;
    if input.is_empty() || !input.len().is_multiple_of(row_elements) || input.iter().all(|&x| x == 0.0) {
        return Err(format!(
            "{}: quantize_input.f32 holds {} values, not whole rows of {row_elements} with some not zero",
            dir.display(),
            input.len()
        ));
    }
    let row_bytes = format
        .row_bytes(row_elements)
        .ok_or_else(|| format!("{format}: a row of {row_elements} values is not whole blocks"))?;
    if expected.len() != row_bytes * (input.len() / row_elements) {
        return Err(format!(
            "{format}: {} bytes in its file, not {} rows of {row_bytes}",
            expected.len(),
            input.len() / row_elements
        ));
    }
    let (bytes, elements) = (format.block_bytes(), format.block_elements());
    let mut actual = vec![0u8; row_bytes];
    for (row, (values, expected)) in input
        .chunks(row_elements)
        .zip(expected.chunks(row_bytes))
        .enumerate()
    {
        format
            .quantize_row(values, &mut actual)
            .map_err(|error| error.to_string())?;
        if let Some(block) = (0..row_bytes / bytes).find(|&block| {
            let within = block * bytes..(block + 1) * bytes;
            actual[within.clone()] != expected[within]
        }) {
            return Err(format!(
                "{format}: row {row} block {block} differs from llama.cpp\n  input    {:?}\n  expected {:?}\n  actual   {:?}",
                &values[block * elements..(block + 1) * elements],
                &expected[block * bytes..(block + 1) * bytes],
                &actual[block * bytes..(block + 1) * bytes],
            ));
        }
    }
    Ok(input.len() / row_elements)
}
