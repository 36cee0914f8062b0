//! GGUF models end to end on the CPU: a preset written as a GGUF file by
//! `gguf_export` (llama.cpp's layout: Q and K rows interleaved, Llama 3's
//! scaling as `rope_freqs.weight`) and loaded back runs to the same logits
//! as the preset itself; quantized files run in their blocks, close to the
//! dense file they were quantized from; the model's name carries the
//! format mix.

use kernelscope::ops::quantized::linear::Activations;
use kernelscope::{DType, Device};
use kernelscope_model::gguf_export::GgufFileType;
use kernelscope_model::gguf_model::GgufModel;
use kernelscope_model::{LoadOptions, Model, SyntheticOptions};

mod gguf_runs;
use gguf_runs::{
    INT8_ACTIVATION_TOLERANCE, SEED, agreeing_rows, cpu_in_f32, loaded, logits, sixteen_steps, written,
};

fn largest_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn spread(a: &[Vec<f32>]) -> f32 {
    let values: Vec<f32> = a.iter().flatten().copied().collect();
    let mean = values.iter().sum::<f32>() / values.len() as f32;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / values.len() as f32).sqrt()
}

#[test]
fn an_f32_gguf_of_a_preset_runs_to_the_presets_logits() {
    let folder = std::env::temp_dir().join(format!("kscope-gguf-model-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    for name in ["tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"] {
        let device = Device::cpu();
        let options = SyntheticOptions {
            dtype: kernelscope::DType::F32,
            seed: SEED,
            quiet: true,
        };
        let mut reference = Model::from_preset(name, &device, options).unwrap();
        let expected = logits(&mut reference);
        let path = written(name, GgufFileType::F32, &folder);
        let gguf = GgufModel::open(&path).unwrap();
        let mut config = gguf.config.clone();
        // The GGUF's own vocabulary names its end tokens.
        config.eos_token_ids = reference.config().eos_token_ids.clone();
        // Llama 3's scaling comes back as per-frequency divisors.
        let (read, wanted) = (
            config.rope_inverse_frequencies(),
            reference.config().rope_inverse_frequencies(),
        );
        for (read, wanted) in read.iter().zip(&wanted) {
            assert!(
                (read - wanted).abs() <= 1e-6 * wanted,
                "{name}: RoPE frequency {read} for {wanted}"
            );
        }
        config.rope_scaling = reference.config().rope_scaling;
        config.rope_frequency_factors = None;
        assert_eq!(config, *reference.config(), "{name}: the config read back");
        let mut model = Model::load_gguf(&gguf, &[device], LoadOptions { quiet: true }).unwrap();
        let found = logits(&mut model);
        let difference = largest_difference(&expected, &found);
        assert!(
            difference <= 1e-5 * spread(&expected),
            "{name}: logits differ by {difference} (spread {})",
            spread(&expected)
        );
        assert!(model.name().contains("F32"), "{}", model.name());
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn quantized_ggufs_run_in_their_blocks_near_the_dense_logits() {
    let folder = std::env::temp_dir().join(format!("kscope-gguf-quantized-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let device = Device::cpu();
    let dense = GgufModel::open(&written("tiny", GgufFileType::F32, &folder)).unwrap();
    let mut dense =
        Model::load_gguf(&dense, std::slice::from_ref(&device), LoadOptions { quiet: true }).unwrap();
    let expected = logits(&mut dense);
    // Worse formats drift further; each bound is about twice what was seen
    // (the largest difference of any logit, over the logits' spread). The
    // tiny preset's rows of 128 are not whole K-blocks, so its K-quant files
    // hold llama.cpp's fallbacks (Q6_K: Q8_0, Q5_K: Q5_1, Q4_K: Q5_0).
    for (file_type, bound, mix) in [
        (GgufFileType::Q8_0, 0.15, "Q8_0"),
        (GgufFileType::Q6_K, 0.15, "Q8_0"),
        (GgufFileType::Q5_K_M, 0.8, "Q5_1"),
        (GgufFileType::Q4_K_M, 0.8, "Q5_0"),
        (GgufFileType::Q4_0, 1.5, "Q4_0"),
    ] {
        let gguf = GgufModel::open(&written("tiny", file_type, &folder)).unwrap();
        let mut model =
            Model::load_gguf(&gguf, std::slice::from_ref(&device), LoadOptions { quiet: true }).unwrap();
        assert!(model.name().contains(mix), "{file_type:?}: {}", model.name());
        assert_eq!(model.weights().dtype, kernelscope::DType::F32);
        assert!(
            matches!(
                model.weights().layers[0].query.format(),
                kernelscope::ops::WeightFormat::Quantized(_)
            ),
            "{file_type:?} runs in its blocks"
        );
        let found = logits(&mut model);
        let relative = largest_difference(&expected, &found) / spread(&expected);
        assert!(
            relative < bound,
            "{file_type:?}: logits drift by {relative} of their spread"
        );
        assert!(relative > 0.0, "{file_type:?}: quantization changed nothing");
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// A GGUF file with every tensor of `source` dequantized to F32, the
/// metadata copied: the dense twin of a quantized file.
fn dequantized_twin(source: &std::path::Path, out: &std::path::Path) {
    use kernelscope_model::gguf::{GgufFile, GgufWriter, TensorType, WeightFormat};
    let file = GgufFile::open(source).unwrap();
    let mut writer = GgufWriter::new(out);
    for (key, value) in file.metadata().iter() {
        if key != "general.alignment" {
            writer.add_metadata(key, value.clone()).unwrap();
        }
    }
    for tensor in file.tensors() {
        writer
            .add_tensor_info(tensor.name(), tensor.dims(), TensorType::F32)
            .unwrap();
    }
    let mut data = writer.write_header().unwrap();
    for tensor in file.tensors() {
        let bytes = file.tensor_bytes(tensor);
        let row = tensor.dims()[0] as usize;
        let mut values = vec![0.0f32; tensor.element_count() as usize];
        match file.tensor_format(tensor).unwrap() {
            WeightFormat::Quantized(format) => {
                let row_bytes = format.row_bytes(row).unwrap();
                for (blocks, out) in bytes.chunks(row_bytes).zip(values.chunks_mut(row)) {
                    format.dequantize_row(blocks, out).unwrap();
                }
            }
            WeightFormat::Dense(kernelscope::DType::F32) => {
                for (value, bytes) in values.iter_mut().zip(bytes.chunks_exact(4)) {
                    *value = f32::from_le_bytes(bytes.try_into().unwrap());
                }
            }
            other => panic!("{other:?} in a quantized test file"),
        }
        let out: Vec<u8> = values.iter().flat_map(|value| value.to_le_bytes()).collect();
        data.write_tensor(&out).unwrap();
    }
    data.finish().unwrap();
}

#[test]
fn quantized_products_equal_the_dense_product_of_the_dequantized_weights() {
    let folder = std::env::temp_dir().join(format!("kscope-gguf-twin-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let device = Device::cpu();
    for (name, file_type) in [
        ("tiny", GgufFileType::Q4_0),
        ("tiny", GgufFileType::Q5_K_M),
        ("tiny-llama3", GgufFileType::Q8_0),
        ("tiny-qwen2", GgufFileType::Q4_K_M),
    ] {
        let quantized = written(name, file_type, &folder);
        let twin = folder.join(format!("{name}-{file_type:?}-twin.gguf"));
        dequantized_twin(&quantized, &twin);
        let open = |path: &std::path::Path, activations| {
            let gguf = GgufModel::open(path).unwrap();
            let mut model =
                Model::load_gguf(&gguf, std::slice::from_ref(&device), LoadOptions { quiet: true }).unwrap();
            model.set_quantized_activations(activations).unwrap();
            model
        };
        let expected = logits(&mut open(&twin, Activations::F32));
        let found = logits(&mut open(&quantized, Activations::F32));
        let difference = largest_difference(&expected, &found);
        assert!(
            difference <= 1e-4 * spread(&expected),
            "{name} {file_type:?}: blocks and their dense twin differ by {difference} (spread {})",
            spread(&expected)
        );
        // 8-bit activations (the default) round each activation to 1/254
        // of its block's largest: a percent or so of the logits' spread.
        let int8 = logits(&mut open(&quantized, Activations::Int8));
        let drift = largest_difference(&expected, &int8) / spread(&expected);
        assert!(
            drift < 0.1,
            "{name} {file_type:?}: 8-bit activations drift by {drift} of the spread"
        );
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// Prompt rows of [`chunk_steps`]: more than a chunk needs to take the
/// GEMM on a GPU.
const CHUNK_PROMPT_ROWS: usize = kernelscope::ops::quantized::linear::GEMM_ROWS + 4;

/// Every row's logits of a prompt of [`CHUNK_PROMPT_ROWS`] tokens, and
/// two steps after it.
fn chunk_steps(model: &mut Model) -> kernelscope_model::Generation {
    let prompt: Vec<u32> = (1..=CHUNK_PROMPT_ROWS as u32)
        .map(|token| token * 7 % 200 + 1)
        .collect();
    model
        .generate(&kernelscope_model::GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..kernelscope_model::GenerationRequest::new(&prompt, 2)
        })
        .unwrap()
}

fn ggufs_run_on_every_backend(backend: kernelscope::testing::Backend) {
    let Some(device) = backend.device(kernelscope::DeviceOptions::new()) else {
        return;
    };
    let folder = std::env::temp_dir().join(format!("kscope-gguf-backend-{}-{backend:?}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    // Q4_K_M mixes Q4_K and Q6_K within layers (the fused q/k/v split by
    // format); Q8_0 and Q4_0 are whole-file formats; Q5_K_M adds Q5_K.
    for (name, file_type) in [
        ("tiny-256", GgufFileType::Q4_K_M),
        ("tiny-qwen2", GgufFileType::Q8_0),
        ("tiny-256", GgufFileType::Q5_K_M),
        ("tiny", GgufFileType::Q4_0),
    ] {
        let gguf = GgufModel::open(&written(name, file_type, &folder)).unwrap();
        let mut cpu = cpu_in_f32(&gguf);
        let reference = sixteen_steps(&mut cpu);
        let mut model = loaded(&gguf, &device);
        let name_on_device = model.name().to_string();
        assert!(!name_on_device.contains("dequantized"), "{name_on_device}");
        if matches!(device, Device::Cpu(_)) {
            continue;
        }
        // A quantized file's KV cache is bf16 on a GPU (prefill attention
        // on tensor cores): within the same bound of the CPU's f32 products
        // and f32 cache. The comparisons after it take the cache in f32, so
        // that they measure the quantized products alone.
        assert_eq!(model.kv_dtype(), DType::BF16, "{name} {file_type:?}");
        let bf16_cache = sixteen_steps(&mut model);
        let same = agreeing_rows(&bf16_cache, &reference);
        let error = common::worst_relative_error(&bf16_cache.logits[..same], &reference.logits[..same]);
        eprintln!(
            "{name} {file_type:?} on {} with a bf16 KV cache: {same} rows, worst relative error vs the CPU's f32 products {error:e}",
            device.name()
        );
        assert!(
            error <= INT8_ACTIVATION_TOLERANCE,
            "{name} {file_type:?} with a bf16 KV cache: relative error {error:e}"
        );
        // A prompt of GEMM_ROWS + 4 tokens runs as one chunk through the
        // dequantized tensor-core GEMM, whose inputs the layers before it
        // write in bf16: every prompt row's logits within the same bound.
        let long = chunk_steps(&mut model);
        let long_reference = chunk_steps(&mut cpu);
        let rows = CHUNK_PROMPT_ROWS;
        let error = common::worst_relative_error(&long.logits[..rows], &long_reference.logits[..rows]);
        eprintln!(
            "{name} {file_type:?} on {}, a {rows}-row chunk through the GEMM: worst relative error vs the CPU's f32 products {error:e}",
            device.name()
        );
        assert!(
            error <= INT8_ACTIVATION_TOLERANCE,
            "{name} {file_type:?}, a {rows}-row chunk: relative error {error:e}"
        );
        model.set_kv_dtype(DType::F32).unwrap();
        // Fused and eager (the default), against the CPU's f32 products.
        let fused = sixteen_steps(&mut model);
        let same = agreeing_rows(&fused, &reference);
        let error = common::worst_relative_error(&fused.logits[..same], &reference.logits[..same]);
        eprintln!(
            "{name} {file_type:?} on {}: {same} rows, worst relative error vs the CPU's f32 products {error:e}",
            device.name()
        );
        assert!(
            error <= INT8_ACTIVATION_TOLERANCE,
            "{name} {file_type:?}: relative error {error:e}"
        );
        // Unfused: the RMSNorm op's output staged by each mat-vec rather
        // than the norm computed in each block; where the two norms differ
        // in their last bit an activation may round to the next 8-bit step
        // (1/127 of its block's largest), so the runs agree to about that.
        model.set_fusion(false);
        let unfused = sixteen_steps(&mut model);
        let same = agreeing_rows(&unfused, &reference);
        let error = common::worst_relative_error(&unfused.logits[..same], &reference.logits[..same]);
        assert!(
            error <= INT8_ACTIVATION_TOLERANCE,
            "{name} {file_type:?}: unfused, relative error {error:e}"
        );
        let same = agreeing_rows(&fused, &unfused);
        let error = common::worst_relative_error(&unfused.logits[..same], &fused.logits[..same]);
        assert!(
            error <= 3e-2,
            "{name} {file_type:?}: unfused against fused {error:e}"
        );
        // A replayed graph runs the very same kernels: the same logits.
        model.set_fusion(true);
        model.set_execution_mode(kernelscope_model::ExecutionMode::Graph);
        let replayed = sixteen_steps(&mut model);
        assert_eq!(
            replayed.generated, fused.generated,
            "{name} {file_type:?}: graph against eager"
        );
        let error = common::worst_relative_error(&replayed.logits, &fused.logits);
        assert!(
            error <= 1e-6,
            "{name} {file_type:?}: graph against eager {error:e}"
        );
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

mod common;

kernelscope::device_tests!(ggufs_run_on_every_backend);

#[test]
fn bytes_per_token_are_the_bytes_the_weights_take() {
    let device = Device::cpu();
    // Dense presets: every weight once in its dtype, one embedding row.
    for name in ["tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"] {
        let options = SyntheticOptions {
            dtype: kernelscope::DType::BF16,
            seed: SEED,
            quiet: true,
        };
        let model = Model::from_preset(name, &device, options).unwrap();
        let config = model.config();
        assert_eq!(
            model.weight_bytes_per_token(),
            (config.weight_elements_per_token() * 2) as u64,
            "{name}"
        );
    }
    // A quantized file: its tensors' bytes, the embedding table one row of it.
    let folder = std::env::temp_dir().join(format!("kscope-gguf-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let gguf = GgufModel::open(&written("tiny-256", GgufFileType::Q4_K_M, &folder)).unwrap();
    let model = Model::load_gguf(&gguf, std::slice::from_ref(&device), LoadOptions { quiet: true }).unwrap();
    let file = &gguf.file;
    let embedding = file.tensor("token_embd.weight").unwrap();
    let vectors: usize = file
        .tensors()
        .iter()
        .filter(|tensor| tensor.dims().len() == 1)
        .map(|tensor| tensor.byte_len())
        .sum();
    let matrices: usize = file
        .tensors()
        .iter()
        .filter(|tensor| tensor.dims().len() == 2 && tensor.name() != "token_embd.weight")
        .map(|tensor| tensor.byte_len())
        .sum();
    let row = embedding.byte_len() / embedding.dims()[1] as usize;
    // Vectors are F32 in the file and f32 on the CPU.
    assert_eq!(model.weight_bytes_per_token(), (matrices + vectors + row) as u64);
    std::fs::remove_dir_all(&folder).unwrap();
}
