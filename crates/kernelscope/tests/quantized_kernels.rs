//! The CUDA quantized kernels (`ops/quantized/linear/kernels.cu`) against
//! their CPU references, for every format: the mat-vec and the chunk
//! product (by rows, and dequantized to bf16 for the GEMM), the fused RMSNorm + mat-vecs, RMSNorm + gate/up + SiLU·mul and
//! mat-vec + residual add, and the embedding lookup. Weights are random
//! values quantized by the reference quantizers, block by block at extreme
//! scales (1e-3 to 40, some blocks all positive so the minimums work), at
//! odd row counts, rows of one block and rows longer than one unrolled pass,
//! more rows than the grid has warps; outputs are poisoned with NaN first.
//!
//! Two references: the CUDA kernels quantize x to 8-bit blocks of 32 as
//! llama.cpp's q8_1 does, so each product is checked tightly against the
//! same 8-bit x multiplied exactly on the host (any layout or scale slip is
//! off by far more), and against the CPU's f32 reference within the bound
//! that the 8-bit rounding of x allows (half a step per element). The CUDA
//! tests say they skipped without a GPU (and fail under
//! KSCOPE_REQUIRE_GPU=1). The last test is the CPU's chunk product on bf16
//! tiles; its integer chunk product is `quantized_int8_chunks.rs`'s (a
//! binary of its own, as it forces the CPU off the bf16 path).

use kernelscope::ops::quantized::embedding::QuantizedEmbedding;
use kernelscope::ops::quantized::linear::fused::{QuantizedFused, Reader};
use kernelscope::ops::quantized::linear::{Activations, GEMM_ROWS, QuantizedLinear};
use kernelscope::ops::{self, rms_norm::RmsNorm};
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions, OpKind};

mod common;
use common::quantized::{
    EPS, Matrix, assert_gate_up_matches, assert_matches, exact_products, normed, poisoned, random,
    random_matrix, read, staged,
};

fn cuda() -> Option<Device> {
    Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// (rows, blocks per row) of every format's cases: one block; odd rows;
/// rows longer than one unrolled pass of a warp (past 128 units); grids
/// of 188 and 375 blocks, and more rows than the grid has warps (528
/// blocks of 8).
fn cases(format: QuantFormat) -> [(usize, usize); 6] {
    let long = match format {
        QuantFormat::Q4_K | QuantFormat::Q5_K => 17,
        QuantFormat::Q6_K => 33,
        _ => 130,
    };
    [(1, 1), (37, 3), (5, long), (1500, 1), (3000, 1), (4500, 1)]
}

/// The CPU's f32 reference product of `m` and rows of `x`.
fn cpu_reference(m: &Matrix, x: &[f32], rows: usize) -> Vec<f32> {
    let cpu = Device::cpu();
    let op = QuantizedLinear::new(&ops::registry(), &cpu, m.format, Activations::F32).unwrap();
    let out = poisoned(&cpu, rows * m.n);
    let mut encoder = cpu.command_encoder();
    op.encode(
        &mut encoder,
        &m.upload(&cpu),
        &cpu.buffer_from_slice(x, &[rows, m.k]).unwrap(),
        &out,
    )
    .unwrap();
    encoder.commit_and_wait().unwrap();
    read(&out)
}

#[test]
fn cuda_quantized_matvec_and_matmul_match_their_references() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    for format in QuantFormat::ALL {
        let op = QuantizedLinear::new(&registry, &device, format, Activations::Int8).unwrap();
        for (case, (n, blocks)) in cases(format).into_iter().enumerate() {
            let m = random_matrix(format, n, blocks, 10 * case as u64 + format.ggml_type() as u64);
            let weight = m.upload(&device);
            for rows in [1usize, 3, GEMM_ROWS + 4] {
                let x = random(case as u64 + 77, rows * m.k, 2.5);
                let out = poisoned(&device, rows * n);
                device.profiler().reset();
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &weight,
                    &device.buffer_from_slice(&x, &[rows, m.k]).unwrap(),
                    &out,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();
                let actual = read(&out);
                let what = format!("{format} n {n} k {} rows {rows}", m.k);
                let dispatches = device.profiler().dispatches();
                if rows >= GEMM_ROWS {
                    // Dequantized to bf16, x narrowed, the GEMM: bf16 keeps
                    // 8 bits of each, so each product is within 2^-7 of
                    // its magnitude of the f32 reference.
                    // cuBLASLt may add kernels of its own (a split-k reduction).
                    let kernels: Vec<&str> = dispatches.iter().map(|d| &*d.kernel).collect();
                    assert!(kernels.len() >= 3, "{what}: {kernels:?}");
                    assert_eq!(kernels[0], format!("dequantize_{}_bf16", format.name()), "{what}");
                    assert_eq!(kernels[1], "narrow_f32_bf16", "{what}");
                    let reference = cpu_reference(&m, &x, rows);
                    let expected: Vec<(f64, f64)> = x
                        .chunks(m.k)
                        .flat_map(|row| exact_products(&m, row))
                        .zip(reference)
                        .map(|((_, size), r)| (r as f64, size))
                        .collect();
                    assert_matches(&actual, &expected, 8e-3, &what);
                    continue;
                }
                let kernel = if rows == 1 {
                    format!("matvec_{}_q8", format.name())
                } else {
                    format!("matmul_{}", format.name())
                };
                assert_eq!(dispatches.len(), 1, "{what}");
                assert_eq!(&*dispatches[0].kernel, kernel.as_str(), "{what}");
                let expected: Vec<(f64, f64)> = x
                    .chunks(m.k)
                    .flat_map(|row| exact_products(&m, &staged(row)))
                    .collect();
                assert_matches(&actual, &expected, 1e-4, &what);
                // Against the f32 reference: the 8-bit x is off by at most
                // half a step per element.
                let reference = cpu_reference(&m, &x, rows);
                let magnitudes: Vec<Vec<(f64, f64)>> =
                    x.chunks(m.k).map(|x_row| exact_products(&m, x_row)).collect();
                for (index, (&a, &r)) in actual.iter().zip(&reference).enumerate() {
                    let (row, column) = (index / n, index % n);
                    let x_row = &x[row * m.k..(row + 1) * m.k];
                    let w_row = &m.values[column * m.k..(column + 1) * m.k];
                    let bound: f64 = x_row
                        .chunks(32)
                        .zip(w_row.chunks(32))
                        .map(|(xs, ws)| {
                            let step = xs.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64 / 127.0;
                            ws.iter().map(|w| w.abs() as f64).sum::<f64>() * step * 0.5
                        })
                        .sum();
                    let magnitude = magnitudes[row][column].1;
                    assert!(
                        ((a - r) as f64).abs() <= 1.001 * bound + 1e-5 * magnitude + 1e-6,
                        "{what} [{index}]: {a} against the f32 reference {r} (bound {bound:e})"
                    );
                }
            }
        }
    }
}

/// The format after `format` in [`QuantFormat::ALL`], wrapping around.
fn next_format(format: QuantFormat) -> QuantFormat {
    let at = QuantFormat::ALL
        .iter()
        .position(|&other| other == format)
        .unwrap();
    QuantFormat::ALL[(at + 1) % QuantFormat::ALL.len()]
}

#[test]
fn cuda_fused_quantized_kernels_match_the_steps_they_replace() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    for format in QuantFormat::ALL {
        let fused = QuantizedFused::new(&registry, &device, format).unwrap();
        let plain = QuantizedLinear::new(&registry, &device, format, Activations::Int8).unwrap();
        for (case, blocks) in [1usize, 3, 9].into_iter().enumerate() {
            let seed = 1000 * case as u64 + format.ggml_type() as u64;
            let parts = [
                random_matrix(format, 37, blocks, seed),
                random_matrix(format, 13, blocks, seed + 1),
                random_matrix(format, 5, blocks, seed + 2),
            ];
            let k = parts[0].k;
            let x = random(seed + 3, k, 3.0);
            let norm_weight = random(seed + 4, k, 1.5);
            let x_buffer = device.buffer_from_slice(&x, &[k]).unwrap();
            let norm_buffer = device.buffer_from_slice(&norm_weight, &[k]).unwrap();
            let weights: Vec<Buffer> = parts.iter().map(|m| m.upload(&device)).collect();
            let h = staged(&normed(&x, &norm_weight));
            let what = format!("{format} k {k}");

            // RMSNorm + three mat-vecs, against the exact products of the
            // normalised 8-bit x (its rounding may differ by a step from
            // the host's where the two norms differ in the last bit), and
            // against the unfused RMSNorm op then the mat-vecs on CUDA.
            let out = poisoned(&device, 55);
            let unfused = poisoned(&device, 55);
            let normed_buffer = poisoned(&device, k);
            device.profiler().reset();
            let mut encoder = device.command_encoder();
            fused
                .encode_norm_matvec(
                    &mut encoder,
                    &x_buffer,
                    &norm_buffer,
                    &weights.iter().collect::<Vec<_>>(),
                    &out,
                    EPS,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();
            // Two dispatches: x normalised and quantized once, then the
            // product every block reads it from.
            let dispatches = device.profiler().dispatches();
            let kinds: Vec<OpKind> = dispatches.iter().map(|dispatch| dispatch.op_kind).collect();
            assert_eq!(kinds, [OpKind::RmsNorm, OpKind::MatVec]);
            assert_eq!(&*dispatches[0].kernel, "norm_quantize_q8");
            assert_eq!(&*dispatches[1].kernel, format!("matvecs_{}_q8", format.name()));
            let expected: Vec<(f64, f64)> = parts.iter().flat_map(|m| exact_products(m, &h)).collect();
            let fused_out = read(&out);
            assert_matches(&fused_out, &expected, 3e-3, &format!("norm_matvec {what}"));
            // The staged x is every format's: staged by another format's
            // kernels (as a Q4_K_M layer's q/k stage it for its Q6_K v),
            // this format's product gives the same bits.
            let other = QuantizedFused::new(&registry, &device, next_format(format)).unwrap();
            let shared = poisoned(&device, 55);
            let mut encoder = device.command_encoder();
            let input = other
                .encode_norm_stage(&mut encoder, &x_buffer, &norm_buffer, EPS, k, Reader::Registers)
                .unwrap();
            fused
                .encode_matvecs_staged(&mut encoder, &input, &weights.iter().collect::<Vec<_>>(), &shared)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            assert_eq!(read(&shared), fused_out, "{what}: x staged by {}", other.format());
            let mut encoder = device.command_encoder();
            RmsNorm::new(&registry, &device, DType::F32, DType::F32)
                .unwrap()
                .encode(&mut encoder, &x_buffer, &norm_buffer, &normed_buffer, EPS)
                .unwrap();
            let mut start = 0;
            for (m, weight) in parts.iter().zip(&weights) {
                let part = unfused.slice(start, m.n).unwrap();
                plain.encode(&mut encoder, weight, &normed_buffer, &part).unwrap();
                start += m.n;
            }
            encoder.commit_and_wait().unwrap();
            assert_matches(
                &read(&unfused),
                &expected,
                3e-3,
                &format!("unfused norm + matvecs {what}"),
            );

            // RMSNorm + gate/up + SiLU·mul.
            let (gate, up) = (&parts[0], &random_matrix(format, 37, blocks, seed + 5));
            let out = poisoned(&device, 37);
            let mut encoder = device.command_encoder();
            fused
                .encode_norm_matvec_silu(
                    &mut encoder,
                    &x_buffer,
                    &norm_buffer,
                    &weights[0],
                    &up.upload(&device),
                    &out,
                    EPS,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();
            assert_gate_up_matches(gate, up, &h, &read(&out), &format!("norm_matvec_silu {what}"));

            // Mat-vec + residual add.
            let residual = random(seed + 6, 37, 4.0);
            let out = device.buffer_from_slice(&residual, &[37]).unwrap();
            let mut encoder = device.command_encoder();
            fused
                .encode_matvec_add(&mut encoder, &weights[0], &x_buffer, &out)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let expected: Vec<(f64, f64)> = exact_products(gate, &staged(&x))
                .into_iter()
                .zip(&residual)
                .map(|((sum, size), &r)| (sum + r as f64, size + r.abs() as f64))
                .collect();
            assert_matches(&read(&out), &expected, 1e-4, &format!("matvec_add {what}"));
        }
    }
}

#[test]
fn cuda_quantized_embedding_matches_the_dequantized_rows() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    for format in QuantFormat::ALL {
        let table = random_matrix(format, 50, 3, 500 + format.ggml_type() as u64);
        let op = QuantizedEmbedding::new(&registry, &device, format).unwrap();
        let tokens: [u32; 5] = [9, 3, 49, 0, 17];
        let out = poisoned(&device, 4 * table.k);
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &table.upload(&device),
            &device.buffer_from_slice(&tokens, &[5]).unwrap(),
            1,
            &out,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        let actual = read(&out);
        // One rank's share: ids 20..70 of a vocabulary of 100; ids outside
        // it write zeros.
        let shard_tokens: [u32; 4] = [25, 3, 69, 70];
        let shard_out = poisoned(&device, 4 * table.k);
        let mut encoder = device.command_encoder();
        op.encode_shard(
            &mut encoder,
            &table.upload(&device),
            20,
            100,
            &device.buffer_from_slice(&shard_tokens, &[4]).unwrap(),
            0,
            &shard_out,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        let shard = read(&shard_out);
        for (r, &token) in shard_tokens.iter().enumerate() {
            let got = &shard[r * table.k..(r + 1) * table.k];
            if (20..70).contains(&token) {
                let at = (token - 20) as usize;
                let row = &table.values[at * table.k..(at + 1) * table.k];
                let largest = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (&g, &e) in got.iter().zip(row) {
                    assert!(
                        (g - e).abs() <= 1e-6 * largest,
                        "{format} shard id {token}: {g} against {e}"
                    );
                }
            } else {
                assert!(
                    got.iter().all(|&v| v == 0.0),
                    "{format} shard id {token}: {got:?}"
                );
            }
        }
        for (r, &token) in tokens[1..].iter().enumerate() {
            let row = &table.values[token as usize * table.k..(token as usize + 1) * table.k];
            let largest = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (e, &expected) in row.iter().enumerate() {
                let got = actual[r * table.k + e];
                assert!(
                    (got - expected).abs() <= 1e-6 * largest,
                    "{format} token {token} element {e}: {got} against {expected}"
                );
            }
        }
    }
}

/// On a CPU with AVX-512 BF16 a chunk product with 8-bit activations runs
/// on bf16 tiles (`matmul_<format>_bf16`): each weight and each activation
/// rounded to bf16 (half a unit in the 8th bit: 2^-9 of each), the
/// products exact, summed in f32, so each output is within about 2^-8 of
/// its terms' magnitudes of the exact product of the dequantized weights
/// and x. A row or layout slip is off by the magnitude itself. Shapes:
/// partial groups of six rows, depths past one 2048-value pass, and more
/// tokens than one block of 128, ending in a partial tile.
#[test]
fn cpu_bf16_tile_chunk_products_match_the_exact_product() {
    use kernelscope::cpu_simd::dot::dot_path;
    if !dot_path().takes_bf16_products() {
        eprintln!(
            "SKIPPED cpu_bf16_tile_chunk_products_match_the_exact_product: this CPU has no AVX-512 BF16 path"
        );
        return;
    }
    let cpu = Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
    let registry = ops::registry();
    for format in QuantFormat::ALL
        .into_iter()
        .filter(|format| format.int8_block().is_some())
    {
        let op = QuantizedLinear::new(&registry, &cpu, format, Activations::Int8).unwrap();
        let long = 2304 / format.block_elements();
        for (n, blocks, rows) in [(13usize, long, 5usize), (8, 1, 131), (7, long, 3)] {
            let m = random_matrix(format, n, blocks, 700 + n as u64 + rows as u64);
            let x = random(n as u64 + 11, rows * m.k, 2.0);
            let out = poisoned(&cpu, rows * n);
            cpu.profiler().reset();
            let mut encoder = cpu.command_encoder();
            op.encode(
                &mut encoder,
                &m.upload(&cpu),
                &cpu.buffer_from_slice(&x, &[rows, m.k]).unwrap(),
                &out,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();
            let what = format!("{format} n {n} k {} rows {rows}", m.k);
            let kernel = format!("matmul_{}_bf16", format.name());
            assert_eq!(&*cpu.profiler().dispatches()[0].kernel, kernel.as_str(), "{what}");
            let expected: Vec<(f64, f64)> = x.chunks(m.k).flat_map(|row| exact_products(&m, row)).collect();
            assert_matches(&read(&out), &expected, 4.5e-3, &what);
        }
    }
}
