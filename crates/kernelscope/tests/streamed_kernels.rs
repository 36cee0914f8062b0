//! The streamed quantized products on Hopper (`ops/quantized/linear/
//! streamed.cuh`: rows brought into shared memory by bulk copies, x held in
//! registers) against the exact products of the same 8-bit x, at every row
//! length each kernel holds, odd row counts and more rows than the grid has
//! warps, and the lengths that keep the register loop. They say they
//! skipped without a GPU, or without bulk copies (compute capability 9.0),
//! and fail so under KSCOPE_REQUIRE_GPU=1.

use kernelscope::ops;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Device, DeviceOptions};

mod common;
use common::quantized::{
    EPS, assert_gate_up_matches, assert_matches, exact_products, normed, poisoned, random, random_matrix,
    read, staged,
};

/// A CUDA device with bulk copies, dispatches recorded; `None` (said
/// loudly, failing under KSCOPE_REQUIRE_GPU) where there is none.
fn hopper() -> Option<Device> {
    let device = Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))?;
    if device.capabilities().bulk_copies {
        return Some(device);
    }
    eprintln!(
        "SKIPPED: {} has no bulk copies (compute capability 9.0); the register loop runs",
        device.name()
    );
    assert!(
        std::env::var("KSCOPE_REQUIRE_GPU").is_err(),
        "KSCOPE_REQUIRE_GPU is set and the GPU cannot run the streamed kernels"
    );
    None
}

/// The down projection streamed with each row split over two warps (Q4_K
/// and Q6_K; rows of 4,352 to 16,384 values, x held in registers), odd row
/// counts and more rows than the grid has groups, adding into a random
/// residual, against the exact products; o_proj's 4,096 values and rows
/// past 16,384 take the register loop.
#[test]
fn cuda_streamed_down_matches_the_exact_products() {
    let Some(device) = hopper() else {
        return;
    };
    let registry = ops::registry();
    for (case, (format, rows, blocks, kernel)) in [
        (QuantFormat::Q4_K, 37, 16, "matvec_add_q4_k_q8"),
        (QuantFormat::Q4_K, 5_003, 17, "stream_add_q4_k_split2_held2"),
        (QuantFormat::Q4_K, 301, 56, "stream_add_q4_k_split2_held4"),
        (QuantFormat::Q4_K, 33, 65, "matvec_add_q4_k_q8"),
        (QuantFormat::Q6_K, 4_099, 32, "stream_add_q6_k_split2_held2"),
        (QuantFormat::Q6_K, 77, 64, "stream_add_q6_k_split2_held4"),
    ]
    .into_iter()
    .enumerate()
    {
        let fused = QuantizedFused::new(&registry, &device, format).unwrap();
        let seed = 8_000 + 10 * case as u64;
        let weight = random_matrix(format, rows, blocks, seed);
        let k = weight.k;
        let x = random(seed + 1, k, 3.0);
        let residual = random(seed + 2, rows, 4.0);
        let out = device.buffer_from_slice(&residual, &[rows]).unwrap();
        device.profiler().reset();
        let mut encoder = device.command_encoder();
        fused
            .encode_matvec_add(
                &mut encoder,
                &weight.upload(&device),
                &device.buffer_from_slice(&x, &[k]).unwrap(),
                &out,
            )
            .unwrap();
        encoder.commit_and_wait().unwrap();
        assert_eq!(
            &*device.profiler().dispatches()[1].kernel,
            kernel,
            "{format} k {k}"
        );
        let expected: Vec<(f64, f64)> = exact_products(&weight, &staged(&x))
            .into_iter()
            .zip(&residual)
            .map(|((sum, size), &r)| (sum + r as f64, size + r.abs() as f64))
            .collect();
        assert_matches(
            &read(&out),
            &expected,
            1e-4,
            &format!("{kernel} {format} k {k} rows {rows}"),
        );
    }
}

/// Q4_K's gate/up streamed through shared memory (Hopper's bulk copies,
/// x held in registers) at every row length a kernel holds (k 2,304 to
/// 8,192), odd row counts, and more rows than the grid has warps (each warp
/// cycling its slots), against the exact products; rows of 2,048 values or
/// fewer, or more than 8,192, take the register loop.
#[test]
fn cuda_streamed_gate_up_matches_the_exact_products() {
    let Some(device) = hopper() else {
        return;
    };
    let registry = ops::registry();
    let format = QuantFormat::Q4_K;
    let fused = QuantizedFused::new(&registry, &device, format).unwrap();
    for (case, (rows, blocks, kernel)) in [
        (37, 8, "matvec_silu_q4_k_q8"),
        (9_001, 9, "stream_silu_q4_k_held2"),
        (1_003, 16, "stream_silu_q4_k_held2"),
        (301, 13, "stream_silu_q4_k_held2"),
        (77, 32, "stream_silu_q4_k_held4"),
        (41, 33, "matvec_silu_q4_k_q8"),
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 7_000 + 10 * case as u64;
        let (gate, up) = (
            random_matrix(format, rows, blocks, seed),
            random_matrix(format, rows, blocks, seed + 1),
        );
        let k = gate.k;
        let x = random(seed + 2, k, 3.0);
        let norm_weight = random(seed + 3, k, 1.5);
        let h = staged(&normed(&x, &norm_weight));
        let out = poisoned(&device, rows);
        device.profiler().reset();
        let mut encoder = device.command_encoder();
        fused
            .encode_norm_matvec_silu(
                &mut encoder,
                &device.buffer_from_slice(&x, &[k]).unwrap(),
                &device.buffer_from_slice(&norm_weight, &[k]).unwrap(),
                &gate.upload(&device),
                &up.upload(&device),
                &out,
                EPS,
            )
            .unwrap();
        encoder.commit_and_wait().unwrap();
        let dispatches = device.profiler().dispatches();
        assert_eq!(&*dispatches[1].kernel, kernel, "k {k}");
        assert_gate_up_matches(
            &gate,
            &up,
            &h,
            &read(&out),
            &format!("{kernel} k {k} rows {rows}"),
        );
    }
}
