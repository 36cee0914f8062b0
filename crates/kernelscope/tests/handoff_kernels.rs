//! The fused quantized products handing their output to the next product
//! (`ops/quantized/linear/handoff.cuh`): the staged bytes their last block
//! writes are, bit for bit, what `norm_quantize_q8` (after o_proj and the
//! down projection) or `quantize_q8` (after gate/up) writes of the same
//! output in a kernel of its own; the outputs themselves match the exact
//! products. Random weights and inputs, formats with and without streamed
//! kernels, register-loop and streamed shapes, outputs whose length is an
//! odd number of 32s, grids from a few blocks to hundreds, and two rounds
//! through one kernel (the arrival count is set back each time). They say
//! they skipped without a GPU and fail so under KSCOPE_REQUIRE_GPU=1.

use kernelscope::ops;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, Device, DeviceOptions};

mod common;
use common::quantized::{EPS, assert_matches, exact_products, normed, random, random_matrix, read, staged};

fn cuda() -> Option<Device> {
    Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

fn bytes(buffer: &Buffer) -> Vec<u8> {
    buffer.to_vec::<u8>().unwrap()
}

/// The first index at which two staged vectors differ, for the message.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// o_proj and the down projection: `out += W · x`, then the last block
/// stages `rmsnorm(out) * norm_weight`, which must equal norm_quantize_q8's
/// bytes of the same `out`.
#[test]
fn cuda_matvec_add_hands_off_the_bytes_norm_quantize_writes() {
    let Some(device) = cuda() else {
        return;
    };
    let streams = device.capabilities().bulk_copies;
    let registry = ops::registry();
    // (format, rows, blocks a row, kernel where rows stream, or None).
    for (case, (format, rows, blocks, streamed)) in [
        (QuantFormat::Q4_K, 2_080, 8, None),
        (QuantFormat::Q6_K, 4_128, 16, None),
        (QuantFormat::Q8_0, 1_056, 96, None),
        (QuantFormat::Q4_0, 96, 64, None),
        (
            QuantFormat::Q4_K,
            2_080,
            17,
            Some("stream_add_q4_k_split2_held2_norm_stage"),
        ),
        (
            QuantFormat::Q4_K,
            4_128,
            56,
            Some("stream_add_q4_k_split2_held4_norm_stage"),
        ),
        (
            QuantFormat::Q6_K,
            96,
            64,
            Some("stream_add_q6_k_split2_held4_norm_stage"),
        ),
        (
            QuantFormat::Q6_K,
            2_048,
            32,
            Some("stream_add_q6_k_split2_held2_norm_stage"),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let fused = QuantizedFused::new(&registry, &device, format).unwrap();
        let weight = random_matrix(format, rows, blocks, 9_000 + 10 * case as u64);
        let uploaded = weight.upload(&device);
        let k = weight.k;
        let kernel = match streamed {
            Some(name) if streams => name.to_string(),
            _ => format!("matvec_add_{}_q8_norm_stage", format.name()),
        };
        for round in 0..2u64 {
            let seed = 9_001 + 10 * case as u64 + 1_000 * round;
            let x = random(seed, k, 3.0);
            let residual = random(seed + 1, rows, 4.0);
            let norm_weight = random(seed + 2, rows, 1.5);
            let out = device.buffer_from_slice(&residual, &[rows]).unwrap();
            let norm_buffer = device.buffer_from_slice(&norm_weight, &[rows]).unwrap();
            device.profiler().reset();
            let mut encoder = device.command_encoder();
            let input = fused
                .encode_quantize(&mut encoder, &device.buffer_from_slice(&x, &[k]).unwrap())
                .unwrap();
            let handed = fused
                .encode_matvec_add_handing_off(&mut encoder, &uploaded, &input, &out, &norm_buffer, EPS)
                .unwrap()
                .unwrap_or_else(|| panic!("{kernel}: did not hand off"));
            let separate = fused
                .encode_norm_stage(&mut encoder, &out, &norm_buffer, EPS, rows)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let what = format!("{kernel} {format} k {k} rows {rows} round {round}");
            let dispatches = device.profiler().dispatches();
            assert_eq!(&*dispatches[1].kernel, kernel, "{what}");
            assert_eq!(&*dispatches[2].kernel, "norm_quantize_q8", "{what}");
            let expected: Vec<(f64, f64)> = exact_products(&weight, &staged(&x))
                .into_iter()
                .zip(&residual)
                .map(|((sum, size), &r)| (sum + r as f64, size + r.abs() as f64))
                .collect();
            let sums = read(&out);
            assert_matches(&sums, &expected, 1e-4, &what);
            let (handed, separate) = (bytes(handed.buffer()), bytes(separate.buffer()));
            assert_eq!(handed.len(), rows + 8 * (rows / 32), "{what}");
            assert_eq!(
                first_difference(&handed, &separate[..handed.len()]),
                None,
                "{what}: handed-off bytes against norm_quantize_q8's"
            );
            // Not a vector of zeros: the norm's output of random sums.
            let normalised = normed(&sums, &norm_weight);
            assert!(normalised.iter().any(|v| v.abs() > 0.1), "{what}");
            assert!(
                handed[..rows].iter().filter(|&&b| b != 0).count() > rows / 2,
                "{what}"
            );
        }
    }
}

/// Gate/up: `out = silu(gate · x) * (up · x)`, then the last block stages
/// `out`, which must equal quantize_q8's bytes of the same `out`.
#[test]
fn cuda_gate_up_hands_off_the_bytes_quantize_writes() {
    let Some(device) = cuda() else {
        return;
    };
    let streams = device.capabilities().bulk_copies;
    let registry = ops::registry();
    for (case, (format, rows, blocks, streamed)) in [
        (QuantFormat::Q4_K, 4_128, 8, None),
        (QuantFormat::Q6_K, 2_080, 8, None),
        (QuantFormat::Q8_0, 1_056, 16, None),
        (
            QuantFormat::Q4_K,
            14_336,
            16,
            Some("stream_silu_q4_k_held2_stage"),
        ),
        (QuantFormat::Q4_K, 96, 32, Some("stream_silu_q4_k_held4_stage")),
    ]
    .into_iter()
    .enumerate()
    {
        let fused = QuantizedFused::new(&registry, &device, format).unwrap();
        let seed = 9_500 + 10 * case as u64;
        let (gate, up) = (
            random_matrix(format, rows, blocks, seed),
            random_matrix(format, rows, blocks, seed + 1),
        );
        let (gate_buffer, up_buffer) = (gate.upload(&device), up.upload(&device));
        let k = gate.k;
        let kernel = match streamed {
            Some(name) if streams => name.to_string(),
            _ => format!("matvec_silu_{}_q8_stage", format.name()),
        };
        for round in 0..2u64 {
            let seed = seed + 2 + 1_000 * round;
            let x = random(seed, k, 3.0);
            let norm_weight = random(seed + 1, k, 1.5);
            let out = device
                .buffer_from_slice(&random(seed + 2, rows, 1.0), &[rows])
                .unwrap();
            device.profiler().reset();
            let mut encoder = device.command_encoder();
            let input = fused
                .encode_norm_stage(
                    &mut encoder,
                    &device.buffer_from_slice(&x, &[k]).unwrap(),
                    &device.buffer_from_slice(&norm_weight, &[k]).unwrap(),
                    EPS,
                    k,
                )
                .unwrap();
            let handed = fused
                .encode_matvec_silu_staged(&mut encoder, &input, &gate_buffer, &up_buffer, &out, true)
                .unwrap()
                .unwrap_or_else(|| panic!("{kernel}: did not hand off"));
            let separate = fused.encode_quantize(&mut encoder, &out).unwrap();
            encoder.commit_and_wait().unwrap();
            let what = format!("{kernel} {format} k {k} rows {rows} round {round}");
            let dispatches = device.profiler().dispatches();
            assert_eq!(&*dispatches[1].kernel, kernel, "{what}");
            assert_eq!(&*dispatches[2].kernel, "quantize_q8", "{what}");
            let h = staged(&normed(&x, &norm_weight));
            let (gates, ups, actual) = (exact_products(&gate, &h), exact_products(&up, &h), read(&out));
            for i in 0..rows {
                let (g, u) = (gates[i].0, ups[i].0);
                let expected = g / (1.0 + (-g).exp()) * u;
                let bound = 3e-3 * (1.1 * gates[i].1 * u.abs() + ups[i].1 * g.abs().max(1.0)) + 1e-6;
                assert!(
                    (actual[i] as f64 - expected).abs() <= bound,
                    "{what} [{i}]: {} against {expected} (bound {bound:e})",
                    actual[i]
                );
            }
            let (handed, separate) = (bytes(handed.buffer()), bytes(separate.buffer()));
            assert_eq!(handed.len(), rows + 8 * (rows / 32), "{what}");
            assert_eq!(
                first_difference(&handed, &separate[..handed.len()]),
                None,
                "{what}: handed-off bytes against quantize_q8's"
            );
            assert!(
                handed[..rows].iter().filter(|&&b| b != 0).count() > rows / 2,
                "{what}"
            );
        }
    }
}

/// A handoff to a norm weight of the wrong length, or of x staged for
/// another length, is refused naming what is wrong, before anything runs.
#[test]
fn cuda_handoffs_of_the_wrong_shapes_are_refused() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let format = QuantFormat::Q4_K;
    let fused = QuantizedFused::new(&registry, &device, format).unwrap();
    let weight = random_matrix(format, 64, 2, 9_900).upload(&device);
    let out = device.buffer_from_slice(&random(9_901, 64, 1.0), &[64]).unwrap();
    let mut encoder = device.command_encoder();
    let input = fused
        .encode_quantize(
            &mut encoder,
            &device
                .buffer_from_slice(&random(9_902, 512, 1.0), &[512])
                .unwrap(),
        )
        .unwrap();
    let short_norm = device.buffer_from_slice(&random(9_903, 32, 1.0), &[32]).unwrap();
    let error = fused
        .encode_matvec_add_handing_off(&mut encoder, &weight, &input, &out, &short_norm, EPS)
        .unwrap_err()
        .to_string();
    assert!(error.contains("next norm's weight"), "{error}");
    let other = fused
        .encode_quantize(
            &mut encoder,
            &device
                .buffer_from_slice(&random(9_904, 256, 1.0), &[256])
                .unwrap(),
        )
        .unwrap();
    let norm = device.buffer_from_slice(&random(9_905, 64, 1.0), &[64]).unwrap();
    let error = fused
        .encode_matvec_add_handing_off(&mut encoder, &weight, &other, &out, &norm, EPS)
        .unwrap_err()
        .to_string();
    assert!(error.contains("staged for another length"), "{error}");
}
