//! o_proj staging the residual stream for the RMSNorm after it
//! (`matvec_add_<format>_q8_norm_stage`, ops/quantized/linear/chunked.cuh)
//! and gate/up finishing that norm (`matvec_silu_<format>_q8_norm_stage`):
//! the new residual must be the exact products plus the old; the staged
//! bytes, bit for bit, the 8-bit blocks of `residual · norm_weight` as
//! every stage kernel writes them; each block's sum of squares the
//! residual's; and gate/up's output `silu(g) · u` of the staged values
//! times 1 / RMS, its own staging bit for bit what `quantize_q8` writes of
//! it (Q4_K's streamed gate/up finishes the norm and stages nothing).
//! Q4_K's o_proj of long rows streams where the device has bulk copies
//! (`stream_add_q4_k_held*_norm_stage`) and is held to the same checks.
//! Random weights and inputs, o_proj and gate/up in several formats,
//! an odd number of 32-row chunks, two rounds through the same kernels.
//! Products that do not finish a norm refuse such an input. They say they
//! skipped without a GPU and fail so under KSCOPE_REQUIRE_GPU=1.

use kernelscope::ops;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Device, DeviceOptions};

mod common;
use common::quantized::{
    EPS, assert_gate_up_matches, assert_matches, exact_products, random, random_matrix, read, staged,
};

fn cuda() -> Option<Device> {
    Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// x's bytes as the stage kernels write them (`Staged` in quantized.cuh):
/// the 8-bit values, then each block's scale, then its scale times the sum
/// of its values, in the kernels' f32 operations.
fn staged_bytes(x: &[f32]) -> Vec<u8> {
    let (mut values, mut scales, mut sums) = (Vec::new(), Vec::new(), Vec::new());
    for block in x.chunks(32) {
        let largest = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = largest / 127.0;
        let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        let quantized: Vec<i32> = block.iter().map(|v| (v * inverse).round() as i32).collect();
        values.extend(quantized.iter().map(|&q| q as i8 as u8));
        scales.extend(scale.to_le_bytes());
        sums.extend((scale * quantized.iter().sum::<i32>() as f32).to_le_bytes());
    }
    values.extend(scales);
    values.extend(sums);
    values
}

#[test]
fn cuda_o_proj_stages_the_next_norm_and_gate_up_finishes_it() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let streams = device.capabilities().bulk_copies;
    // (o_proj's format and blocks a row, gate/up's format, its rows and
    // blocks a row): the hidden size is o_proj's rows and gate/up's row
    // length, an odd number of 32-row chunks where the formats allow.
    for (case, (o_format, o_blocks, format, rows, blocks)) in [
        (QuantFormat::Q4_K, 2, QuantFormat::Q4_K, 2_080, 5),
        (QuantFormat::Q6_K, 3, QuantFormat::Q4_K, 96, 3),
        (QuantFormat::Q8_0, 24, QuantFormat::Q5_K, 1_056, 7),
        (QuantFormat::Q4_0, 16, QuantFormat::Q8_0, 4_128, 37),
        (QuantFormat::Q5_K, 1, QuantFormat::Q6_K, 544, 9),
        // Rows of 4,096 values: Q4_K's gate/up streams where the device
        // has bulk copies, finishing the norm but staging nothing.
        (QuantFormat::Q4_K, 1, QuantFormat::Q4_K, 352, 16),
        // o_proj's rows of 2,048 values and more stream too: x held two
        // units a lane (2,304 values: 36 units, lanes 0-3 hold a second;
        // 4,096) and four (8,192).
        (QuantFormat::Q4_K, 9, QuantFormat::Q6_K, 160, 3),
        (QuantFormat::Q4_K, 16, QuantFormat::Q4_K, 64, 7),
        (QuantFormat::Q4_K, 32, QuantFormat::Q5_K, 96, 9),
    ]
    .into_iter()
    .enumerate()
    {
        let (o_fused, fused) = (
            QuantizedFused::new(&registry, &device, o_format).unwrap(),
            QuantizedFused::new(&registry, &device, format).unwrap(),
        );
        let seed = 12_000 + 10 * case as u64;
        let (gate, up) = (
            random_matrix(format, rows, blocks, seed),
            random_matrix(format, rows, blocks, seed + 1),
        );
        let hidden = gate.k;
        let o_proj = random_matrix(o_format, hidden, o_blocks, seed + 2);
        let (gate_buffer, up_buffer, o_buffer) =
            (gate.upload(&device), up.upload(&device), o_proj.upload(&device));
        // The engine hands such an x only to the streamed kernel (the
        // register one measured slower than the norm kernel it saves).
        let streamed = streams && format == QuantFormat::Q4_K && hidden > 2_048;
        assert_eq!(
            fused.gate_up_reads_pending_norm(&gate_buffer),
            streamed,
            "{format} {rows}"
        );
        let o_name = match (streams && o_format == QuantFormat::Q4_K, o_proj.k) {
            (true, 2_048..=4_096) => "stream_add_q4_k_held2_norm_stage".to_string(),
            (true, 4_097..=8_192) => "stream_add_q4_k_held4_norm_stage".to_string(),
            _ => format!("matvec_add_{}_q8_norm_stage", o_format.name()),
        };
        let name = match streamed {
            true => "stream_silu_q4_k_held2_norm".to_string(),
            false => format!("matvec_silu_{}_q8_norm_stage", format.name()),
        };
        for round in 0..2u64 {
            let seed = seed + 3 + 1_000 * round;
            let what = format!("{o_name} then {name}, hidden {hidden}, rows {rows}, round {round}");
            let attention = random(seed, o_proj.k, 2.0);
            let old = random(seed + 1, hidden, 3.0);
            let norm_weight = random(seed + 2, hidden, 1.5);
            let residual = device.buffer_from_slice(&old, &[hidden]).unwrap();
            let norm_buffer = device.buffer_from_slice(&norm_weight, &[hidden]).unwrap();
            let out = device
                .buffer_from_slice(&random(seed + 3, rows, 1.0), &[rows])
                .unwrap();
            device.profiler().reset();
            let mut encoder = device.command_encoder();
            let attention_buffer = device.buffer_from_slice(&attention, &[o_proj.k]).unwrap();
            let input = o_fused.encode_quantize(&mut encoder, &attention_buffer).unwrap();
            let pending = o_fused
                .encode_matvec_add_norm_staged(&mut encoder, &o_buffer, &input, &residual, &norm_buffer, EPS)
                .unwrap();
            let handed = fused
                .encode_matvec_silu_staged(&mut encoder, &pending, &gate_buffer, &up_buffer, &out)
                .unwrap();
            assert_eq!(handed.is_some(), !streamed, "{what}: gate/up's output staged");
            let separate = fused.encode_quantize(&mut encoder, &out).unwrap();
            encoder.commit_and_wait().unwrap();
            let kernels: Vec<String> = device
                .profiler()
                .dispatches()
                .iter()
                .map(|dispatch| dispatch.kernel.to_string())
                .collect();
            assert_eq!(kernels, ["quantize_q8", &o_name, &name, "quantize_q8"], "{what}");

            // The residual: the old plus the exact products.
            let new = read(&residual);
            let expected: Vec<(f64, f64)> = exact_products(&o_proj, &staged(&attention))
                .into_iter()
                .zip(&old)
                .map(|((sum, size), &r)| (sum + r as f64, size + r.abs() as f64))
                .collect();
            assert_matches(&new, &expected, 1e-4, &format!("{what}: residual"));

            // Its staging: the blocks of residual · norm_weight, bit for bit,
            // and each block's sum of squares.
            let weighted: Vec<f32> = new.iter().zip(&norm_weight).map(|(r, w)| r * w).collect();
            let bytes = pending.buffer().to_vec::<u8>().unwrap();
            let differs = bytes
                .iter()
                .zip(staged_bytes(&weighted))
                .position(|(a, b)| *a != b);
            assert_eq!(bytes.len(), hidden + 8 * (hidden / 32), "{what}");
            assert_eq!(
                differs, None,
                "{what}: staged bytes against the blocks of residual · norm weight"
            );
            let squares = pending
                .pending_squares()
                .expect("a norm pending")
                .to_vec::<f32>()
                .unwrap();
            assert_eq!(squares.len(), hidden / 32, "{what}");
            for (block, (&square, values)) in squares.iter().zip(new.chunks(32)).enumerate() {
                let exact: f64 = values.iter().map(|&v| v as f64 * v as f64).sum();
                assert!(
                    (square as f64 - exact).abs() <= 1e-5 * exact + 1e-30,
                    "{what}: block {block}'s squares {square} against {exact}"
                );
            }

            // Gate/up over the staged values times 1 / RMS.
            let total: f64 = new.iter().map(|&v| v as f64 * v as f64).sum();
            let inverse_rms = (1.0 / (total / hidden as f64 + EPS as f64).sqrt()) as f32;
            let h: Vec<f32> = staged(&weighted).iter().map(|v| v * inverse_rms).collect();
            let activated = read(&out);
            assert_gate_up_matches(&gate, &up, &h, &activated, &what);
            assert!(activated.iter().any(|&v| v != 0.0), "{what}: all zero");
            let Some(handed) = handed else {
                continue;
            };
            let handed = handed.buffer().to_vec::<u8>().unwrap();
            let separate = separate.buffer().to_vec::<u8>().unwrap();
            let differs = handed.iter().zip(&separate).position(|(a, b)| a != b);
            assert_eq!(
                differs, None,
                "{what}: gate/up's staged bytes against quantize_q8's"
            );
        }
    }
}

/// An x staged before its norm is refused, naming why, by every product
/// but the staging gate/up, and o_proj's rows must be whole blocks of 32.
#[test]
fn cuda_products_that_do_not_finish_the_norm_refuse_its_input() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let format = QuantFormat::Q4_K;
    let fused = QuantizedFused::new(&registry, &device, format).unwrap();
    let o_proj = random_matrix(format, 256, 1, 13_000).upload(&device);
    let residual = device
        .buffer_from_slice(&random(13_001, 256, 1.0), &[256])
        .unwrap();
    let norm_weight = device
        .buffer_from_slice(&random(13_002, 256, 1.0), &[256])
        .unwrap();
    let attention = device
        .buffer_from_slice(&random(13_003, 256, 1.0), &[256])
        .unwrap();
    let mut encoder = device.command_encoder();
    let input = fused.encode_quantize(&mut encoder, &attention).unwrap();
    let pending = fused
        .encode_matvec_add_norm_staged(&mut encoder, &o_proj, &input, &residual, &norm_weight, EPS)
        .unwrap();
    let q = random_matrix(format, 64, 1, 13_004).upload(&device);
    let out = device.buffer_from_slice(&random(13_005, 64, 1.0), &[64]).unwrap();
    let error = fused
        .encode_matvecs_staged(&mut encoder, &pending, &[&q], &out)
        .unwrap_err()
        .to_string();
    assert!(error.contains("before its RMSNorm"), "{error}");
    let error = fused
        .encode_matvec_add_staged(&mut encoder, &o_proj, &pending, &residual)
        .unwrap_err()
        .to_string();
    assert!(error.contains("before its RMSNorm"), "{error}");
    // Gate/up of 40 rows is not whole 32-row chunks: the plain kernel,
    // which cannot finish the norm.
    let (gate, up) = (
        random_matrix(format, 40, 1, 13_006).upload(&device),
        random_matrix(format, 40, 1, 13_007).upload(&device),
    );
    let out = device.buffer_from_slice(&random(13_008, 40, 1.0), &[40]).unwrap();
    let error = fused
        .encode_matvec_silu_staged(&mut encoder, &pending, &gate, &up, &out)
        .unwrap_err()
        .to_string();
    assert!(error.contains("before its RMSNorm"), "{error}");
    let short = random_matrix(QuantFormat::Q8_0, 48, 8, 13_009).upload(&device);
    let short_out = device.buffer_from_slice(&random(13_010, 48, 1.0), &[48]).unwrap();
    let short_norm = device.buffer_from_slice(&random(13_011, 48, 1.0), &[48]).unwrap();
    let q8 = QuantizedFused::new(&registry, &device, QuantFormat::Q8_0).unwrap();
    let error = q8
        .encode_matvec_add_norm_staged(&mut encoder, &short, &input, &short_out, &short_norm, EPS)
        .unwrap_err()
        .to_string();
    assert!(error.contains("whole blocks of 32"), "{error}");
}
