//! A quantized linear layer's bf16 input: on CUDA, prefill writes the
//! GEMM inputs of a quantized model in bf16 (RMSNorm, attention and
//! SiLU·mul write them so), and the products must equal those of an f32
//! input holding the same values, bit for bit: a chunk of `GEMM_ROWS` rows
//! or more goes to the GEMM without the narrowing, fewer are widened to f32
//! for the mat-vec kernels (a chunk's last row into the LM head). Every
//! format, random blocks. The CPU takes f32 inputs only and refuses bf16
//! with an error. The CUDA test says it skipped without a GPU (and fails
//! under KSCOPE_REQUIRE_GPU=1).

use half::bf16;
use kernelscope::ops::quantized::linear::{Activations, BlockLayout, GEMM_ROWS, QuantizedLinear};
use kernelscope::ops::registry;
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions};

/// `n` rows of `k` random values quantized to `format`, on `device` in the
/// layout its kernels read.
fn random_weight(device: &Device, format: QuantFormat, n: usize, k: usize, seed: u64) -> Buffer {
    let values = SplitMix64::new(seed).vec_f32(n * k, -2.0, 2.0);
    let row_bytes = format.row_bytes(k).unwrap();
    let mut blocks = vec![0u8; n * row_bytes];
    for (row, stored) in blocks.chunks_mut(row_bytes).enumerate() {
        format
            .quantize_row(&values[row * k..(row + 1) * k], stored)
            .unwrap();
    }
    let arranged =
        BlockLayout::of(device).arrange(format, n, |row| &blocks[row * row_bytes..(row + 1) * row_bytes]);
    let buffer = device.alloc(DType::U8, &[n, arranged.len() / n]).unwrap();
    buffer.write_bytes(&arranged).unwrap();
    buffer
}

/// `weight · x` for `x` on `device` as given; the output and the kernels
/// that ran.
fn product(
    device: &Device,
    op: &QuantizedLinear,
    weight: &Buffer,
    x: &Buffer,
    rows: usize,
    n: usize,
) -> (Vec<f32>, Vec<String>) {
    let out = device
        .buffer_from_slice(&vec![f32::NAN; rows * n], &[rows, n])
        .unwrap();
    device.profiler().reset();
    let mut encoder = device.command_encoder();
    op.encode(&mut encoder, weight, x, &out).unwrap();
    encoder.commit_and_wait().unwrap();
    let kernels = device
        .profiler()
        .dispatches()
        .iter()
        .map(|d| d.kernel.to_string())
        .collect();
    (out.to_vec::<f32>().unwrap(), kernels)
}

#[test]
fn cuda_quantized_products_take_bf16_inputs_as_their_f32_values() {
    let Some(device) = Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let registry = registry();
    for (index, format) in QuantFormat::ALL.into_iter().enumerate() {
        let op = QuantizedLinear::new(&registry, &device, format, Activations::Int8).unwrap();
        assert!(op.takes_bf16_input(), "{format}");
        let (n, k) = (37, 2 * 256);
        let weight = random_weight(&device, format, n, k, 40 + index as u64);
        for rows in [1usize, 3, GEMM_ROWS, GEMM_ROWS + 5] {
            let values: Vec<bf16> = SplitMix64::new(rows as u64 * 31 + index as u64)
                .vec_f32(rows * k, -3.0, 3.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let wide: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
            let narrow_input = device.buffer_from_slice(&values, &[rows, k]).unwrap();
            let wide_input = device.buffer_from_slice(&wide, &[rows, k]).unwrap();
            let (from_bf16, bf16_kernels) = product(&device, &op, &weight, &narrow_input, rows, n);
            let (from_f32, f32_kernels) = product(&device, &op, &weight, &wide_input, rows, n);
            let what = format!("{format} rows {rows}: {bf16_kernels:?} against {f32_kernels:?}");
            assert!(from_bf16.iter().all(|v| v.is_finite()), "{what}");
            assert_eq!(
                from_bf16.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                from_f32.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{what}"
            );
            if rows >= GEMM_ROWS {
                // The GEMM takes bf16 as it is: the f32 input's narrowing
                // is the one kernel the bf16 input does without.
                assert_eq!(f32_kernels[1], "narrow_f32_bf16", "{what}");
                assert!(
                    !bf16_kernels
                        .iter()
                        .any(|k| k.contains("narrow") || k.contains("widen")),
                    "{what}"
                );
                assert_eq!(bf16_kernels.len() + 1, f32_kernels.len(), "{what}");
            } else {
                assert_eq!(bf16_kernels[0], "widen_bf16_f32", "{what}");
                assert_eq!(bf16_kernels[1..], f32_kernels[..], "{what}");
            }
        }
    }
}

#[test]
fn the_cpu_refuses_a_bf16_input_to_a_quantized_product() {
    let device = Device::cpu();
    let op = QuantizedLinear::new(&registry(), &device, QuantFormat::Q8_0, Activations::Int8).unwrap();
    assert!(!op.takes_bf16_input());
    let weight = random_weight(&device, QuantFormat::Q8_0, 4, 64, 9);
    let x = device
        .buffer_from_slice(&[bf16::from_f32(0.5); 64], &[1, 64])
        .unwrap();
    let out = device.alloc(DType::F32, &[1, 4]).unwrap();
    let mut encoder = device.command_encoder();
    let error = op
        .encode(&mut encoder, &weight, &x, &out)
        .unwrap_err()
        .to_string();
    assert!(error.contains("input") && error.contains("f32"), "{error}");
}
