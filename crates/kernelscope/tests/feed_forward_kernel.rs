//! The persistent feed-forward kernel (`ops/quantized/feed_forward`: norm,
//! gate/up, quantize and down in one launch, its blocks meeting at grid
//! barriers) against the exact products of the same 8-bit activations, and
//! against the four kernels it replaces, for pairs of formats at shapes
//! that take each of its variants: the register loop, down streamed with
//! two and with four units of x a lane, rows not a multiple of the grid.
//! Three launches in a row from different inputs check that the barriers
//! reset themselves; with dispatch timing on, the launch's record must come
//! back as its four steps, timed inside the kernel, tiling its span. The
//! tests say they skipped without a GPU (and fail under
//! KSCOPE_REQUIRE_GPU=1).

use kernelscope::ops;
use kernelscope::ops::quantized::feed_forward::QuantizedFeedForward;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::profile::{ProfileLevel, Role};
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Device, DeviceOptions};

mod common;
use common::quantized::{
    EPS, Matrix, assert_matches, exact_products, normed, random, random_matrix, read, staged,
};

fn cuda() -> Option<Device> {
    Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// One case: gate/up's and down's formats, and k (model values) and n
/// (hidden values) in blocks of each format.
struct Case {
    gate: QuantFormat,
    down: QuantFormat,
    k_blocks: usize,
    n_blocks: usize,
}

fn cases() -> Vec<Case> {
    let case = |gate, down, k_blocks, n_blocks| Case {
        gate,
        down,
        k_blocks,
        n_blocks,
    };
    vec![
        // llama-3.2-1b's shape in Q4_K_M: down streamed, two units a lane.
        case(QuantFormat::Q4_K, QuantFormat::Q6_K, 8, 32),
        case(QuantFormat::Q4_K, QuantFormat::Q4_K, 8, 32),
        // Rows past 8,192 values: four units a lane; an odd k.
        case(QuantFormat::Q4_K, QuantFormat::Q6_K, 3, 37),
        // Formats whose down takes the register loop.
        case(QuantFormat::Q8_0, QuantFormat::Q8_0, 24, 70),
        case(QuantFormat::Q5_K, QuantFormat::Q5_0, 2, 46),
    ]
}

/// `x + down · q8(silu(gate · q8(n)) * (up · q8(n)))` on the host, exact
/// over the 8-bit activations, `n = rmsnorm(x) * norm_weight`, with each
/// row's magnitude.
fn reference(x: &[f32], norm_weight: &[f32], gate: &Matrix, up: &Matrix, down: &Matrix) -> Vec<(f64, f64)> {
    let input = staged(&normed(x, norm_weight));
    let gates = exact_products(gate, &input);
    let ups = exact_products(up, &input);
    let h: Vec<f32> = gates
        .iter()
        .zip(&ups)
        .map(|(&(g, _), &(u, _))| (g / (1.0 + (-g).exp()) * u) as f32)
        .collect();
    exact_products(down, &staged(&h))
        .into_iter()
        .zip(x)
        .map(|((sum, size), &residual)| (sum + residual as f64, size + residual.abs() as f64))
        .collect()
}

#[test]
fn cuda_feed_forward_in_one_launch_matches_its_references_and_its_four_kernels() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    for (index, case) in cases().into_iter().enumerate() {
        let seed = 900 + 10 * index as u64;
        let k = case.k_blocks * case.gate.block_elements();
        let n = case.n_blocks * case.down.block_elements();
        let gate = random_matrix(case.gate, n, case.k_blocks, seed);
        let up = random_matrix(case.gate, n, case.k_blocks, seed + 1);
        let down = random_matrix(case.down, k, case.n_blocks, seed + 2);
        let (gate_buffer, up_buffer, down_buffer) =
            (gate.upload(&device), up.upload(&device), down.upload(&device));
        let norm_weight = random(seed + 3, k, 1.5);
        let norm_buffer = device.buffer_from_slice(&norm_weight, &[k]).unwrap();
        let persistent = QuantizedFeedForward::new(&registry, &device, case.gate, case.down).unwrap();
        let what = format!("{} gate/up, {} down, k {k}, n {n}", case.gate, case.down);
        // Three launches from three inputs: the barriers' words carry over.
        for launch in 0..3u64 {
            let x = random(seed + 4 + launch, k, 3.0);
            let expected = reference(&x, &norm_weight, &gate, &up, &down);
            let out = device.buffer_from_slice(&x, &[k]).unwrap();
            let mut encoder = device.command_encoder();
            persistent
                .encode(
                    &mut encoder,
                    &out,
                    &norm_buffer,
                    &gate_buffer,
                    &up_buffer,
                    &down_buffer,
                    EPS,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();
            // h's 8-bit rounding may round one value a step the other way
            // from the host's (h differs in its last bits): the bound of
            // the fused norm + mat-vec tests.
            assert_matches(
                &read(&out),
                &expected,
                3e-3,
                &format!("feed_forward {what}, launch {launch}"),
            );

            // The four kernels it replaces, on the same input.
            let split = device.buffer_from_slice(&x, &[k]).unwrap();
            let h = device.alloc(kernelscope::DType::F32, &[n]).unwrap();
            let mut encoder = device.command_encoder();
            QuantizedFused::new(&registry, &device, case.gate)
                .unwrap()
                .encode_norm_matvec_silu(
                    &mut encoder,
                    &split,
                    &norm_buffer,
                    &gate_buffer,
                    &up_buffer,
                    &h,
                    EPS,
                )
                .unwrap();
            QuantizedFused::new(&registry, &device, case.down)
                .unwrap()
                .encode_matvec_add(&mut encoder, &down_buffer, &h, &split)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let split_values = read(&split);
            let agreeing: Vec<(f64, f64)> = split_values
                .iter()
                .zip(&expected)
                .map(|(&value, &(_, size))| (value as f64, size))
                .collect();
            assert_matches(
                &read(&out),
                &agreeing,
                3e-3,
                &format!("feed_forward against the split kernels, {what}"),
            );
        }
    }
}

#[test]
fn cuda_feed_forward_profile_sees_its_four_steps_inside_the_launch() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let (k_blocks, n_blocks) = (8, 32);
    let gate = random_matrix(QuantFormat::Q4_K, n_blocks * 256, k_blocks, 71);
    let up = random_matrix(QuantFormat::Q4_K, n_blocks * 256, k_blocks, 72);
    let down = random_matrix(QuantFormat::Q6_K, k_blocks * 256, n_blocks, 73);
    let k = k_blocks * 256;
    let op = QuantizedFeedForward::new(&registry, &device, QuantFormat::Q4_K, QuantFormat::Q6_K).unwrap();
    let x = device.buffer_from_slice(&random(74, k, 2.0), &[k]).unwrap();
    let norm = device.buffer_from_slice(&random(75, k, 1.0), &[k]).unwrap();
    let (gate, up, down) = (gate.upload(&device), up.upload(&device), down.upload(&device));
    device.profiler().reset();
    for _ in 0..3 {
        let mut encoder = device.command_encoder();
        op.encode(&mut encoder, &x, &norm, &gate, &up, &down, EPS)
            .unwrap();
        encoder.commit_and_wait().unwrap();
    }
    let phases: Vec<_> = device
        .profiler()
        .dispatches()
        .into_iter()
        .filter(|record| record.kernel.starts_with("feed_forward_q4_k_q6_k"))
        .collect();
    assert_eq!(phases.len(), 12, "three launches of four steps: {phases:#?}");
    let expected_roles = [
        Role::MlpNorm,
        Role::GateUp,
        Role::ActivationQuantization,
        Role::Down,
    ];
    for launch in phases.chunks(4) {
        for (index, (record, role)) in launch.iter().zip(expected_roles).enumerate() {
            let phase = record.in_kernel.as_ref().expect("a step timed inside the kernel");
            assert_eq!(phase.index as usize, index);
            assert_eq!(phase.phases, 4);
            assert!(record.roles.contains(role), "step {index} has {:?}", record.roles);
            assert!(record.bytes > 0);
        }
        // The steps tile the launch: each begins where the one before ended.
        for pair in launch.windows(2) {
            assert_eq!(pair[0].end_ns, pair[1].start_ns);
        }
        // Gate/up reads most of the bytes and takes a real share of the time.
        assert!(launch[1].duration_ns() > 0);
    }
}

#[test]
fn cuda_feed_forward_unprofiled_stamps_nothing_and_matches_its_reference() {
    let Some(device) = Backend::Cuda.device(DeviceOptions::new()) else {
        return;
    };
    let registry = ops::registry();
    let (k_blocks, n_blocks) = (8, 32);
    let k = k_blocks * 256;
    let gate = random_matrix(QuantFormat::Q4_K, n_blocks * 256, k_blocks, 81);
    let up = random_matrix(QuantFormat::Q4_K, n_blocks * 256, k_blocks, 82);
    let down = random_matrix(QuantFormat::Q4_K, k, n_blocks, 83);
    let norm_weight = random(84, k, 1.0);
    let op = QuantizedFeedForward::new(&registry, &device, QuantFormat::Q4_K, QuantFormat::Q4_K).unwrap();
    let (gate_buffer, up_buffer, down_buffer) =
        (gate.upload(&device), up.upload(&device), down.upload(&device));
    let norm = device.buffer_from_slice(&norm_weight, &[k]).unwrap();
    for launch in 0..2u64 {
        let x = random(85 + launch, k, 2.0);
        let out = device.buffer_from_slice(&x, &[k]).unwrap();
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &out,
            &norm,
            &gate_buffer,
            &up_buffer,
            &down_buffer,
            EPS,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        let expected = reference(&x, &norm_weight, &gate, &up, &down);
        assert_matches(
            &read(&out),
            &expected,
            3e-3,
            &format!("unprofiled feed_forward, launch {launch}"),
        );
    }
    assert!(device.profiler().dispatches().is_empty());
}
