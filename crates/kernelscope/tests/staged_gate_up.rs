//! Gate/up staging its own output for the down projection
//! (`matvec_silu_<format>_q8_stage`, ops/quantized/linear/products.cuh):
//! each block quantizes the 32 rows it computed, and the staged bytes must
//! be, bit for bit, what `quantize_q8` writes of the same output in a
//! kernel of its own; the output itself matches the exact products. Random
//! weights and inputs in several formats, an odd number of 32-row chunks,
//! two rounds through one kernel; outputs of other lengths, and the rows
//! Q4_K streams, keep the plain kernel and stage nothing. They say they
//! skipped without a GPU and fail so under KSCOPE_REQUIRE_GPU=1.

use kernelscope::ops;
use kernelscope::ops::quantized::linear::fused::{QuantizedFused, Reader};
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Device, DeviceOptions};

mod common;
use common::quantized::{EPS, assert_gate_up_matches, normed, random, random_matrix, read, staged};

fn cuda() -> Option<Device> {
    Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

#[test]
fn cuda_gate_up_stages_the_bytes_quantize_writes() {
    let Some(device) = cuda() else {
        return;
    };
    let streams = device.capabilities().bulk_copies;
    let registry = ops::registry();
    // (format, rows, blocks a row): rows a multiple of 32 stage, others not;
    // Q4_K's rows of 4,096 values stream where the device has bulk copies.
    for (case, (format, rows, blocks)) in [
        (QuantFormat::Q4_K, 4_128, 8),
        (QuantFormat::Q6_K, 2_080, 8),
        (QuantFormat::Q8_0, 1_056, 16),
        (QuantFormat::Q5_K, 96, 4),
        (QuantFormat::Q4_0, 8_192, 64),
        (QuantFormat::Q4_K, 37, 8),
        (QuantFormat::Q4_K, 1_024, 16),
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
        let streamed = streams && format == QuantFormat::Q4_K && k > 2_048;
        let stages = rows % 32 == 0 && !streamed;
        let kernel = match (streamed, stages) {
            (true, _) => "stream_silu_q4_k_held2".to_string(),
            (false, true) => format!("matvec_silu_{}_q8_stage", format.name()),
            (false, false) => format!("matvec_silu_{}_q8", format.name()),
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
                    Reader::Registers,
                )
                .unwrap();
            let handed = fused
                .encode_matvec_silu_staged(&mut encoder, &input, &gate_buffer, &up_buffer, &out)
                .unwrap();
            let what = format!("{kernel} {format} k {k} rows {rows} round {round}");
            assert_eq!(handed.is_some(), stages, "{what}");
            let separate = handed
                .is_some()
                .then(|| fused.encode_quantize(&mut encoder, &out).unwrap());
            encoder.commit_and_wait().unwrap();
            let dispatches = device.profiler().dispatches();
            assert_eq!(&*dispatches[1].kernel, kernel, "{what}");
            let h = staged(&normed(&x, &norm_weight));
            assert_gate_up_matches(&gate, &up, &h, &read(&out), &what);
            let (Some(handed), Some(separate)) = (handed, separate) else {
                continue;
            };
            assert_eq!(&*dispatches[2].kernel, "quantize_q8", "{what}");
            let handed = handed.buffer().to_vec::<u8>().unwrap();
            let separate = separate.buffer().to_vec::<u8>().unwrap();
            assert_eq!(handed.len(), rows + 8 * (rows / 32), "{what}");
            let differs = handed.iter().zip(&separate).position(|(a, b)| a != b);
            assert_eq!(differs, None, "{what}: staged bytes against quantize_q8's");
            assert!(handed[..rows].iter().any(|&b| b != 0), "{what}: all zero");
        }
    }
}

/// Gate/up over x staged for another length than its rows is refused
/// naming what is wrong, before anything runs.
#[test]
fn cuda_gate_up_over_x_of_another_length_is_refused() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let format = QuantFormat::Q4_K;
    let fused = QuantizedFused::new(&registry, &device, format).unwrap();
    let (gate, up) = (
        random_matrix(format, 64, 2, 9_900).upload(&device),
        random_matrix(format, 64, 2, 9_901).upload(&device),
    );
    let out = device.buffer_from_slice(&random(9_902, 64, 1.0), &[64]).unwrap();
    let mut encoder = device.command_encoder();
    let x = device
        .buffer_from_slice(&random(9_903, 256, 1.0), &[256])
        .unwrap();
    let input = fused.encode_quantize(&mut encoder, &x).unwrap();
    let error = fused
        .encode_matvec_silu_staged(&mut encoder, &input, &gate, &up, &out)
        .unwrap_err()
        .to_string();
    assert!(error.contains("x's length differs"), "{error}");
}
