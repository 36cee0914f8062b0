//! Weights that are not numbers: a NaN or an infinity in a checkpoint is
//! refused by `quantize` (no quantized block can hold it, and
//! llama-quantize refuses it too), naming the tensor and the element.

use std::path::Path;

use crate::helpers::Scratch;

/// Sets element `index` of bf16 tensor `name` in `file` (a safetensors
/// file) to the bf16 bits `bits`.
fn poke_bf16(file: &Path, name: &str, index: usize, bits: u16) {
    let mut bytes = std::fs::read(file).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let tensor = &header[name];
    assert_eq!(tensor["dtype"], "BF16", "{name}: {tensor}");
    let start = tensor["data_offsets"][0].as_u64().unwrap() as usize;
    let at = 8 + header_len + start + 2 * index;
    bytes[at..at + 2].copy_from_slice(&bits.to_le_bytes());
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn quantize_refuses_a_tensor_that_holds_nan_or_infinity() {
    let q_proj = "model.layers.0.self_attn.q_proj.weight";
    // (bits, where, what the message says)
    for (bits, index, value) in [
        (0x7fc0u16, 0usize, "NaN"),
        (0x7f80, 4_100, "inf"),
        (0xff80, 77, "-inf"),
    ] {
        let scratch = Scratch::new("non-finite");
        let model = scratch.model();
        poke_bf16(&model.join("model.safetensors"), q_proj, index, bits);
        let out = scratch.0.join("q8.gguf");
        let columns = 128;
        let (row, column) = (index / columns, index % columns);
        for quant in ["q8_0", "q4_k_m"] {
            scratch.refuses(
                &[
                    "quantize",
                    model.to_str().unwrap(),
                    "--out",
                    out.to_str().unwrap(),
                    "--quant",
                    quant,
                    "--quiet",
                ],
                &[
                    q_proj,
                    &format!("element {index} (row {row}, column {column}) is {value}"),
                    "llama-quantize",
                ],
            );
        }
    }
}
