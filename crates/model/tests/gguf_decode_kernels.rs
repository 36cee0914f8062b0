//! Decode's fused and streamed kernels on a GPU, in a GGUF model end to
//! end: which kernels each layer runs where gate/up stages down's input,
//! where o_proj stages the MLP's norm for the streamed gate/up, and where
//! q and k stream with RoPE, and how close the logits stay to the CPU's.
//! Each skips loudly without a GPU (or without bulk copies).

use kernelscope::{DType, Device};
use kernelscope_model::gguf_export::{GgufFileType, write_gguf};
use kernelscope_model::gguf_model::GgufModel;
use kernelscope_model::synthetic::tensor_values;
use kernelscope_model::{Generation, LoadOptions, Model, preset};

mod common;
mod gguf_runs;
use gguf_runs::{
    INT8_ACTIVATION_TOLERANCE, SEED, agreeing_rows, cpu_in_f32, loaded, logits, sixteen_steps, written,
};

/// A GPU profiling every dispatch, or `None` (skipped loudly) without one.
fn profiled_cuda() -> Option<Device> {
    use kernelscope::profile::ProfileLevel;
    kernelscope::testing::Backend::Cuda
        .device(kernelscope::DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// A choice of dispatches by kernel name and scope.
type Pick = dyn Fn(&str, &str) -> bool;

/// How many of the dispatches `device`'s profiler recorded `pick` (by
/// kernel name and scope) chooses.
fn dispatch_counter(device: &Device) -> impl Fn(&Pick) -> usize {
    let dispatches = device.profiler().dispatches();
    move |pick| {
        dispatches
            .iter()
            .filter(|dispatch| pick(&dispatch.kernel, &dispatch.scope))
            .count()
    }
}

/// On a GPU a quantized file's decode stages the down projection's input
/// in gate/up (`QuantizedFused::encode_matvec_silu_staged`): no quantize
/// kernel in any layer, and every layer's gate/up the staging kernel; and
/// q/k/v rotate and append their own outputs
/// (`QuantizedFused::encode_matvecs_rope_staged`): no `rope_append` kernel,
/// every layer's q/k/v products the rotating kernels. (CUDA's logits
/// against the CPU's, which runs every step apart, are
/// `ggufs_run_on_every_backend`'s.) Skips loudly without a GPU.
#[test]
fn cuda_decode_stages_the_down_projections_input_in_gate_up() {
    let Some(device) = profiled_cuda() else {
        return;
    };
    let folder = std::env::temp_dir().join(format!("kscope-gguf-staged-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let gguf = GgufModel::open(&written("tiny-256", GgufFileType::Q4_K_M, &folder)).unwrap();
    let mut model =
        Model::load_gguf(&gguf, std::slice::from_ref(&device), LoadOptions { quiet: true }).unwrap();
    let layers = preset("tiny-256").unwrap().num_layers;
    device.profiler().reset();
    let steps = logits(&mut model).len();
    let count = dispatch_counter(&device);
    assert_eq!(
        count(&|kernel, scope| kernel == "quantize_q8" && scope.starts_with("layer.")),
        0
    );
    assert_eq!(
        count(&|kernel, _| kernel.starts_with("matvec_silu_") && kernel.ends_with("_q8_stage")),
        layers * steps
    );
    // Rows this short keep the MLP's norm kernel (o_proj stages nothing).
    assert_eq!(count(&|kernel, _| kernel.ends_with("_norm_stage")), 0);
    assert_eq!(count(&|kernel, _| kernel.starts_with("rope_append")), 0);
    assert!(count(&|kernel, _| kernel.starts_with("matvecs_rope_")) >= layers * steps);
    assert_eq!(
        count(&|kernel, scope| kernel.starts_with("matvecs_") && scope.starts_with("layer.")),
        count(&|kernel, _| kernel.starts_with("matvecs_rope_"))
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

/// A small Q4_K_M model whose rows stream on Hopper (2,304 hidden values,
/// two layers), written into `folder`: its config and the opened file.
fn wide_q4_k_m(folder: &std::path::Path) -> (kernelscope_model::Config, GgufModel) {
    std::fs::create_dir_all(folder).unwrap();
    let config = kernelscope_model::Config {
        hidden_size: 2_304,
        intermediate_size: 256,
        num_layers: 2,
        ..preset("tiny-256").unwrap()
    };
    let path = folder.join("wide-Q4_K_M.gguf");
    write_gguf(
        &config,
        &path,
        GgufFileType::Q4_K_M,
        "wide",
        true,
        true,
        |tensor, shape| Ok(tensor_values(tensor, shape, SEED)),
    )
    .unwrap();
    (config, GgufModel::open(&path).unwrap())
}

/// A profiled GPU with bulk copies, or `None`, said loudly (without one,
/// `what` does not run).
fn streaming_cuda(what: &str) -> Option<Device> {
    let device = profiled_cuda()?;
    if !device.capabilities().bulk_copies {
        eprintln!("skipped: {} has no bulk copies, so {what}", device.name());
        return None;
    }
    Some(device)
}

/// `fused`'s logits within the 8-bit activations' bound of the CPU's
/// `reference` over the rows both runs agree on (at least one), printed as
/// `what`.
fn assert_near_the_cpu(fused: &Generation, reference: &Generation, what: &str) {
    let same = agreeing_rows(fused, reference);
    assert!(same > 0, "no row's argmax agrees with the CPU's");
    let error = common::worst_relative_error(&fused.logits[..same], &reference.logits[..same]);
    eprintln!("{what}: {same} rows, worst relative error vs the CPU's f32 products {error:e}");
    assert!(error <= INT8_ACTIVATION_TOLERANCE, "relative error {error:e}");
}

/// On a GPU with bulk copies, a Q4_K_M file whose q and k rows stream
/// (2,304 values) decodes them with RoPE and the bf16 KV append in the
/// streamed kernel (`stream_matvecs_rope_q4_k_held2_bf16`, a warp a
/// rotated pair of rows), once a layer a step, and its logits stay within
/// the 8-bit activations' bound of the CPU's f32 products over the same
/// bf16 caches. Skips loudly without a GPU or bulk copies.
#[test]
fn cuda_decode_streams_q4_k_query_and_key_with_rope() {
    let Some(device) = streaming_cuda("q/k/v do not stream") else {
        return;
    };
    let folder = std::env::temp_dir().join(format!("kscope-gguf-streamed-rope-{}", std::process::id()));
    let (config, gguf) = wide_q4_k_m(&folder);
    let mut cpu = cpu_in_f32(&gguf);
    cpu.set_kv_dtype(DType::BF16).unwrap();
    let reference = sixteen_steps(&mut cpu);
    let mut model = loaded(&gguf, &device);
    model.set_kv_dtype(DType::BF16).unwrap();
    device.profiler().reset();
    let steps = logits(&mut model).len();
    let count = dispatch_counter(&device);
    assert_eq!(
        count(&|kernel, _| kernel == "stream_matvecs_rope_q4_k_held2_bf16"),
        config.num_layers * steps
    );
    let fused = sixteen_steps(&mut model);
    let what = format!("hidden 2,304 Q4_K_M, streamed q/k with RoPE on {}", device.name());
    assert_near_the_cpu(&fused, &reference, &what);
    std::fs::remove_dir_all(&folder).unwrap();
}

/// On a GPU, where gate/up's Q4_K rows stream (longer than 2,048 values:
/// a small model of 2,304 hidden values here), o_proj stages the residual
/// for the MLP's norm and the streamed gate/up finishes it
/// (`QuantizedFused::encode_matvec_add_norm_staged`): every layer's o_proj
/// and gate/up the norm-finishing kernels, the only norm kernels left in a
/// layer the attention's, and the logits within the 8-bit activations'
/// bound of the CPU's f32 products. Skips loudly without a GPU.
#[test]
fn cuda_decode_finishes_the_mlp_norm_in_streamed_gate_up() {
    let Some(device) = streaming_cuda("no streamed gate/up finishes the norm") else {
        return;
    };
    let folder = std::env::temp_dir().join(format!("kscope-gguf-norm-staged-{}", std::process::id()));
    let (config, gguf) = wide_q4_k_m(&folder);
    let reference = sixteen_steps(&mut cpu_in_f32(&gguf));
    let mut model = loaded(&gguf, &device);
    model.set_kv_dtype(DType::F32).unwrap();
    device.profiler().reset();
    let steps = logits(&mut model).len();
    let count = dispatch_counter(&device);
    let layers = config.num_layers;
    assert_eq!(
        count(&|kernel, _| kernel.starts_with("matvec_add_") && kernel.ends_with("_q8_norm_stage")),
        layers * steps
    );
    assert_eq!(
        count(&|kernel, _| kernel.starts_with("stream_silu_") && kernel.ends_with("_norm")),
        layers * steps
    );
    assert_eq!(
        count(&|kernel, scope| kernel == "norm_quantize_q8" && scope.starts_with("layer.")),
        layers * steps
    );
    let fused = sixteen_steps(&mut model);
    let what = format!(
        "hidden 2,304 Q4_K_M, the MLP norm finished in gate/up on {}",
        device.name()
    );
    assert_near_the_cpu(&fused, &reference, &what);
    std::fs::remove_dir_all(&folder).unwrap();
}
