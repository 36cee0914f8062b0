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

/// Writes `preset` as a GGUF file of `quant` into `dir`.
fn gguf(dir: &Path, preset: &str, quant: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{preset}-{quant}.gguf"));
    crate::common::gen_gguf(preset, quant, &path);
    path
}

/// Overwrites bytes of tensor `name` in GGUF file `path`: `at` bytes into
/// its data, every `stride` bytes `times` times, with `bytes`.
fn poke_gguf(path: &Path, name: &str, at: usize, stride: usize, times: usize, bytes: &[u8]) {
    let offset = {
        let file = kernelscope_model::gguf::GgufFile::open(path).unwrap();
        let tensor = file.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
        assert!(at + stride * (times - 1) + bytes.len() <= tensor.byte_len());
        tensor.file_offset()
    };
    let mut data = std::fs::read(path).unwrap();
    for time in 0..times {
        let start = offset + at + time * stride;
        data[start..start + bytes.len()].copy_from_slice(bytes);
    }
    std::fs::write(path, data).unwrap();
}

/// Three GGUF files in `dir` whose logits come out non-finite: an
/// embedding all NaN (f32); one NaN block scale (Q8_0: the f16 scale leads
/// each 34-byte block); one +inf in a norm weight of an f16 file. With the
/// scope `--check-finite` names for each.
fn poisoned_files(dir: &Path) -> [(std::path::PathBuf, &'static str); 3] {
    let embedding = gguf(dir, "tiny", "f32");
    let rows = 128 * 2048;
    poke_gguf(
        &embedding,
        "token_embd.weight",
        0,
        4,
        rows,
        &f32::NAN.to_le_bytes(),
    );
    let scale = gguf(dir, "tiny", "q8_0");
    poke_gguf(
        &scale,
        "blk.1.attn_q.weight",
        34 * 5,
        34,
        1,
        &0x7e00u16.to_le_bytes(),
    );
    let norm = gguf(dir, "tiny", "f16");
    poke_gguf(
        &norm,
        "blk.0.attn_norm.weight",
        4 * 17,
        4,
        1,
        &f32::INFINITY.to_le_bytes(),
    );
    [
        (embedding, "in embed"),
        (scale, "in layer.1.attn"),
        (norm, "in layer.0.attn"),
    ]
}

#[test]
fn non_finite_logits_are_an_error_naming_the_weight_they_came_from() {
    let scratch = Scratch::new("nan-logits");
    let dir = &scratch.0;
    let files = poisoned_files(dir);
    let [(embedding, _), (scale, _), (norm, _)] = &files;
    let rows = 128 * 2048;
    for (file, needles) in [
        (
            &embedding,
            vec![
                "token_embd.weight",
                &format!("{rows} non-finite values"),
                "element 0 (NaN)",
            ],
        ),
        (
            &scale,
            vec!["blk.1.attn_q.weight", "32 non-finite values", "element 160 (NaN)"],
        ),
        (
            &norm,
            vec![
                "blk.0.attn_norm.weight",
                "1 non-finite values",
                "element 17 (inf)",
            ],
        ),
    ] {
        // Every path a prompt can take: the batched product, one position
        // at a time, and the portable kernels.
        for extra in [&[][..], &["--prefill-chunk", "1"], &["--cpu-kernels", "portable"]] {
            scratch.refuses(
                &run_args(file, extra),
                &[&needles[..], &["the logits after the prompt hold"]].concat(),
            );
        }
    }
    // --check-finite names the first kernel whose output stopped being
    // numbers, and where it ran.
    for (file, scope) in &files {
        scratch.refuses(
            &run_args(file, &["--check-finite"]),
            &["the first non-finite output: kernel `", scope],
        );
    }
    // A clean file runs through every check (minus infinity, which kernels
    // write on purpose, is no fault).
    let clean = gguf(dir, "tiny", "q4_k_m");
    let (code, _, stderr) = crate::common::kscope(&run_args(&clean, &["--check-finite"]));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn check_finite_on_a_gpu_names_the_layer_the_cpu_names() {
    // Each kernel's outputs are copied back after it, the step eager.
    let scratch = Scratch::new("nan-gpu");
    let files = poisoned_files(&scratch.0);
    let probe = run_args_on("cuda", &files[0].0, &["--check-finite"]);
    let (_, _, stderr) = crate::common::kscope(&probe);
    if stderr.contains("no CUDA support") || stderr.contains("backend unavailable") {
        assert!(
            std::env::var("KSCOPE_REQUIRE_GPU").as_deref() != Ok("1"),
            "KSCOPE_REQUIRE_GPU=1 but kscope cannot open a GPU: {stderr}"
        );
        eprintln!(
            "SKIPPED check_finite_on_a_gpu_names_the_layer_the_cpu_names: no usable GPU ({})",
            stderr.trim()
        );
        return;
    }
    for (file, scope) in &files {
        scratch.refuses(
            &run_args_on("cuda", file, &["--check-finite"]),
            &["the first non-finite output: kernel `", scope],
        );
    }
    let clean = gguf(&scratch.0, "tiny", "q4_k_m");
    let (code, _, stderr) = crate::common::kscope(&run_args_on("cuda", &clean, &["--check-finite"]));
    assert_eq!(code, 0, "{stderr}");
}

/// `kscope run` of `file` on the CPU with three prompt ids and `extra`.
fn run_args<'a>(file: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    run_args_on("cpu", file, extra)
}

/// `kscope run` of `file` on `device` with three prompt ids and `extra`.
fn run_args_on<'a>(device: &'a str, file: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "--model",
        file.to_str().unwrap(),
        "--device",
        device,
        "--token-ids",
        "1,2,3",
        "--max-tokens",
        "3",
    ];
    args.extend_from_slice(extra);
    args
}
