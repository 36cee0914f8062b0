//! Every fused kernel against the composition of the unfused ops it
//! replaces, run on the CPU (the CPU references): RMSNorm then mat-vecs,
//! RMSNorm then gate and up mat-vecs then SiLU·mul, mat-vec then the
//! residual add, RoPE twice then the KV append, RoPE and the KV append then
//! attention. Inputs are seeded random
//! values at odd shapes and at shapes that take every path of the CUDA
//! kernels (scalar rows, 16-byte rows with a partial last step, rows shared
//! by 8, 4, 2 and 1 warps, more rows than the grid has warps), for every
//! weight dtype; outputs are poisoned
//! with NaN first, so a kernel that writes nothing fails. Each test also
//! checks the fused op kind its dispatches declare to the profiler.

use half::{bf16, f16};
use kernelscope::ops::attention::{Attention, Heads};
use kernelscope::ops::matvec::MatVec;
use kernelscope::ops::matvec::residual::MatVecAdd;
use kernelscope::ops::norm_matvec::silu::NormMatVecSiluMul;
use kernelscope::ops::norm_matvec::{self, NormMatVec};
use kernelscope::ops::rope::{Rope, RopeFrequencies, inverse_frequencies};
use kernelscope::ops::rope_append::RopeAppend;
use kernelscope::ops::{self, add::Add, kv_append::KvAppend, rms_norm::RmsNorm, silu_mul::SiluMul};
use kernelscope::profile::ProfileLevel;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions, Error, OpKind, Primitive};

const WEIGHT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const EPS: f32 = 1e-5;

/// The device under test. The CPU references here are held to f32 sums:
/// the rounding path (`--cpu-kernels avx512-bf16`: x in two bf16 parts,
/// about 2^-17 of each product) once put a CUDA result exact to f32 just
/// outside the tolerance on an H100 host, so where it was chosen the exact
/// path is forced for the whole binary (fused and unfused CPU ops alike).
fn profiled_device(backend: Backend) -> Option<Device> {
    use kernelscope::cpu_simd::dot::{DotPath, dot_path, force_dot_path};
    if dot_path() == DotPath::Avx512Bf16 {
        force_dot_path(DotPath::Avx512Bf16Exact).unwrap();
    }
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

fn random(seed: u64, count: usize) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, -1.0, 1.0)
}

/// `values` rounded to `dtype` and uploaded to `device`.
fn upload(device: &Device, dtype: DType, values: &[f32], shape: &[usize]) -> Buffer {
    match dtype {
        DType::F32 => device.buffer_from_slice(values, shape),
        DType::F16 => device.buffer_from_slice(
            &values.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>(),
            shape,
        ),
        DType::BF16 => device.buffer_from_slice(
            &values.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>(),
            shape,
        ),
        other => panic!("{other} is not a weight dtype"),
    }
    .unwrap()
}

/// A float buffer widened to f32.
fn read(buffer: &Buffer) -> Vec<f32> {
    match buffer.dtype() {
        DType::F32 => buffer.to_vec::<f32>().unwrap(),
        DType::F16 => buffer
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        DType::BF16 => buffer
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        other => panic!("{other} is not a float dtype"),
    }
}

fn poisoned(device: &Device, len: usize) -> Buffer {
    device.buffer_from_slice(&vec![f32::NAN; len], &[len]).unwrap()
}

/// Fails where `|actual - expected| > tolerance · (1 + |expected|)` or
/// either is NaN, naming the first mismatches.
fn assert_close(actual: &[f32], expected: &[f32], tolerance: f32, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bad: Vec<String> = (0..actual.len())
        .filter(|&i| {
            let error = (actual[i] - expected[i]).abs();
            error.is_nan() || error > tolerance * (1.0 + expected[i].abs())
        })
        .take(5)
        .map(|i| format!("[{i}] expected {:e}, got {:e}", expected[i], actual[i]))
        .collect();
    assert!(bad.is_empty(), "{what}: {}", bad.join("; "));
}

/// Every dispatch the profiler recorded declares `kind`, and runs `kernel_prefix...`.
fn assert_dispatched(device: &Device, kind: OpKind, kernel_prefix: &str) {
    let dispatches = device.profiler().dispatches();
    assert!(!dispatches.is_empty(), "no dispatch recorded");
    for dispatch in &dispatches {
        assert_eq!(dispatch.op_kind, kind, "{dispatch:?}");
        assert!(dispatch.kernel.starts_with(kernel_prefix), "{dispatch:?}");
    }
}

/// A tolerance for sums of `k` products of values in [-1, 1) in f32 (the
/// fused and unfused kernels may add in different orders).
fn sum_tolerance(k: usize) -> f32 {
    2e-6 * (k as f32).sqrt().max(1.0)
}

/// The x of the fused norm tests: random, scaled so the norm does work.
fn hidden(seed: u64, k: usize) -> Vec<f32> {
    random(seed, k).iter().map(|v| 3.0 * v).collect()
}

/// RMSNorm of `x` then the mat-vec of each matrix, on the CPU's unfused ops.
fn unfused_norm_matvec(
    dtype: DType,
    x: &[f32],
    norm: &[f32],
    matrices: &[(Vec<f32>, usize)],
    k: usize,
) -> Vec<f32> {
    let cpu = Device::cpu();
    let registry = ops::registry();
    let normed = poisoned(&cpu, k);
    let mut encoder = cpu.command_encoder();
    RmsNorm::new(&registry, &cpu, dtype, DType::F32)
        .unwrap()
        .encode(
            &mut encoder,
            &cpu.buffer_from_slice(x, &[k]).unwrap(),
            &upload(&cpu, dtype, norm, &[k]),
            &normed,
            EPS,
        )
        .unwrap();
    let matvec = MatVec::new(&registry, &cpu, dtype).unwrap();
    let outs: Vec<Buffer> = matrices.iter().map(|(_, rows)| poisoned(&cpu, *rows)).collect();
    for ((values, rows), out) in matrices.iter().zip(&outs) {
        if *rows > 0 {
            matvec
                .encode(
                    &mut encoder,
                    &upload(&cpu, dtype, values, &[*rows, k]),
                    &normed,
                    out,
                )
                .unwrap();
        }
    }
    encoder.commit_and_wait().unwrap();
    outs.iter().flat_map(read).collect()
}

fn norm_matvec_matches_norm_then_matvecs(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    // (rows of each matrix, k): odd k (scalar rows), k of several 16-byte
    // steps with a partial last one, more rows than the grid's warps, and the
    // longest rows whose staged x fits in shared memory.
    let longest = (norm_matvec::MOST_SHARED_BYTES - norm_matvec::STATIC_SHARED_BYTES) / 4;
    let cases: [(&[usize], usize); 8] = [
        (&[7, 3, 3], 5),
        (&[1], 64),
        (&[33, 9, 9], 257),
        (&[12, 4, 4], 4104),
        (&[4300], 64),
        (&[5, 0, 2], 1000),
        (&[2000, 50, 50], 72),
        (&[3, 1, 1], longest),
    ];
    for dtype in WEIGHT_DTYPES {
        let op = NormMatVec::new(&registry, &device, dtype).unwrap();
        for (case, &(rows, k)) in cases.iter().enumerate() {
            let seed = 100 * case as u64;
            let x = hidden(seed, k);
            let norm = random(seed + 1, k);
            let matrices: Vec<(Vec<f32>, usize)> = rows
                .iter()
                .enumerate()
                .map(|(slot, &n)| (random(seed + 2 + slot as u64, n * k), n))
                .collect();
            let weights: Vec<Buffer> = matrices
                .iter()
                .map(|(values, n)| upload(&device, dtype, values, &[*n, k]))
                .collect();
            let n: usize = rows.iter().sum();
            let out = poisoned(&device, n);
            let mut encoder = device.command_encoder();
            op.encode(
                &mut encoder,
                &device.buffer_from_slice(&x, &[k]).unwrap(),
                &upload(&device, dtype, &norm, &[k]),
                &weights.iter().collect::<Vec<_>>(),
                &out,
                EPS,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();
            let expected = unfused_norm_matvec(dtype, &x, &norm, &matrices, k);
            let what = format!("norm_matvec {dtype} rows {rows:?} k {k}");
            assert_close(&read(&out), &expected, sum_tolerance(k), &what);
        }
    }
    assert_dispatched(
        &device,
        OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec]),
        "norm_matvec_",
    );
}

fn norm_matvec_silu_matches_norm_then_gate_up_then_silu_mul(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    let cpu = Device::cpu();
    for dtype in WEIGHT_DTYPES {
        let op = NormMatVecSiluMul::new(&registry, &device, dtype).unwrap();
        for (case, &(n, k)) in [(1, 8), (7, 5), (33, 257), (20, 4104), (4300, 32)]
            .iter()
            .enumerate()
        {
            let seed = 1000 + 100 * case as u64;
            let (x, norm) = (hidden(seed, k), random(seed + 1, k));
            let (gate, up) = (random(seed + 2, n * k), random(seed + 3, n * k));
            let out = poisoned(&device, n);
            let mut encoder = device.command_encoder();
            op.encode(
                &mut encoder,
                &device.buffer_from_slice(&x, &[k]).unwrap(),
                &upload(&device, dtype, &norm, &[k]),
                &upload(&device, dtype, &gate, &[n, k]),
                &upload(&device, dtype, &up, &[n, k]),
                &out,
                EPS,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();

            let projected = unfused_norm_matvec(dtype, &x, &norm, &[(gate, n), (up, n)], k);
            let activated = poisoned(&cpu, n);
            let mut encoder = cpu.command_encoder();
            SiluMul::new(&registry, &cpu, DType::F32)
                .unwrap()
                .encode(
                    &mut encoder,
                    &cpu.buffer_from_slice(&projected[..n], &[n]).unwrap(),
                    &cpu.buffer_from_slice(&projected[n..], &[n]).unwrap(),
                    &activated,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let what = format!("norm_matvec_silu {dtype} n {n} k {k}");
            assert_close(&read(&out), &read(&activated), 4.0 * sum_tolerance(k), &what);
        }
    }
    assert_dispatched(
        &device,
        OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec, Primitive::SiluMul]),
        "norm_matvec_silu_",
    );
}

fn norm_matvec_refuses_rows_too_long_for_shared_memory(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let k = (norm_matvec::MOST_SHARED_BYTES - norm_matvec::STATIC_SHARED_BYTES) / 4 + 1;
    assert!(!norm_matvec::fits(k) && norm_matvec::fits(k - 1));
    let op = NormMatVec::new(&ops::registry(), &device, DType::F32).unwrap();
    let weight = device.buffer_from_slice(&random(7, 2 * k), &[2, k]).unwrap();
    let x = device.buffer_from_slice(&random(8, k), &[k]).unwrap();
    let mut encoder = device.command_encoder();
    match op.encode(&mut encoder, &x, &x, &[&weight], &poisoned(&device, 2), EPS) {
        Err(Error::ShapeMismatch { context, .. }) => {
            assert!(context.contains("RMSNorm and mat-vec"), "{context}")
        }
        other => panic!("expected a shape error naming the workaround, got {other:?}"),
    }
    // Four matrices are one too many.
    let small = device.buffer_from_slice(&random(9, 8), &[2, 4]).unwrap();
    let x = device.buffer_from_slice(&random(10, 4), &[4]).unwrap();
    let result = op.encode(&mut encoder, &x, &x, &[&small; 4], &poisoned(&device, 8), EPS);
    assert!(matches!(result, Err(Error::ShapeMismatch { .. })), "{result:?}");
}

fn matvec_add_matches_matvec_then_add(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    let cpu = Device::cpu();
    for dtype in WEIGHT_DTYPES {
        let op = MatVecAdd::new(&registry, &device, dtype).unwrap();
        for (case, &(n, k)) in [(1, 5), (7, 64), (300, 257), (9, 14344), (2100, 72), (33_000, 8)]
            .iter()
            .enumerate()
        {
            let seed = 2000 + 100 * case as u64;
            let (weight, x, residual) = (random(seed, n * k), random(seed + 1, k), random(seed + 2, n));
            let out = device.buffer_from_slice(&residual, &[n]).unwrap();
            let mut encoder = device.command_encoder();
            op.encode(
                &mut encoder,
                &upload(&device, dtype, &weight, &[n, k]),
                &device.buffer_from_slice(&x, &[k]).unwrap(),
                &out,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();

            let projected = poisoned(&cpu, n);
            let expected = cpu.buffer_from_slice(&residual, &[n]).unwrap();
            let mut encoder = cpu.command_encoder();
            MatVec::new(&registry, &cpu, dtype)
                .unwrap()
                .encode(
                    &mut encoder,
                    &upload(&cpu, dtype, &weight, &[n, k]),
                    &cpu.buffer_from_slice(&x, &[k]).unwrap(),
                    &projected,
                )
                .unwrap();
            Add::new(&registry, &cpu, DType::F32)
                .unwrap()
                .encode(&mut encoder, &expected, &projected)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let what = format!("matvec_add {dtype} n {n} k {k}");
            assert_close(&read(&out), &read(&expected), sum_tolerance(k), &what);
        }
    }
    assert_dispatched(
        &device,
        OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]),
        "matvec_add_",
    );
}

/// A layer's caches on `device` holding `values` (random, so rows the op
/// must not touch are checked too).
fn caches(device: &Device, dtype: DType, values: &[f32], positions: usize, kv_dim: usize) -> [Buffer; 2] {
    let half = values.len() / 2;
    [
        upload(device, dtype, &values[..half], &[positions, kv_dim]),
        upload(device, dtype, &values[half..], &[positions, kv_dim]),
    ]
}

fn rope_append_matches_rope_then_kv_append(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    let cpu = Device::cpu();
    let geometries = [
        Heads {
            query: 4,
            key_value: 2,
            dim: 8,
        },
        Heads {
            query: 3,
            key_value: 3,
            dim: 6,
        },
        Heads {
            query: 32,
            key_value: 8,
            dim: 128,
        },
    ];
    for cache_dtype in WEIGHT_DTYPES {
        let op = RopeAppend::new(&registry, &device, cache_dtype).unwrap();
        for (case, heads) in geometries.into_iter().enumerate() {
            let (q, kv) = (heads.query * heads.dim, heads.key_value * heads.dim);
            let positions = 37;
            let position = 5 + 13 * case as u32;
            let seed = 3000 + 100 * case as u64;
            let (query, key, value) = (random(seed, q), random(seed + 1, kv), random(seed + 2, kv));
            let cache_values = random(seed + 3, 2 * positions * kv);
            let inverse = inverse_frequencies(heads.dim, 10_000.0, None);
            let frequencies = |device: &Device| RopeFrequencies {
                inverse_frequencies: device.buffer_from_slice(&inverse, &[inverse.len()]).unwrap(),
                attention_scaling: 1.25,
            };
            // The position sits in slot 1 of a step buffer, as decode's does.
            let step = |device: &Device| device.buffer_from_slice(&[7u32, position], &[2]).unwrap();

            let fused_query = device.buffer_from_slice(&query, &[q]).unwrap();
            let [key_cache, value_cache] = caches(&device, cache_dtype, &cache_values, positions, kv);
            let mut encoder = device.command_encoder();
            op.encode(
                &mut encoder,
                &fused_query,
                &device.buffer_from_slice(&key, &[kv]).unwrap(),
                &device.buffer_from_slice(&value, &[kv]).unwrap(),
                &key_cache,
                &value_cache,
                &frequencies(&device),
                &step(&device),
                1,
                heads,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();

            let (expected_query, expected_key) = (
                cpu.buffer_from_slice(&query, &[q]).unwrap(),
                cpu.buffer_from_slice(&key, &[kv]).unwrap(),
            );
            let [expected_key_cache, expected_value_cache] =
                caches(&cpu, cache_dtype, &cache_values, positions, kv);
            let (rope, cpu_frequencies, cpu_step) =
                (Rope::new(&registry, &cpu).unwrap(), frequencies(&cpu), step(&cpu));
            let mut encoder = cpu.command_encoder();
            rope.encode(
                &mut encoder,
                &expected_query,
                &cpu_frequencies,
                &cpu_step,
                1,
                heads.query,
            )
            .unwrap();
            rope.encode(
                &mut encoder,
                &expected_key,
                &cpu_frequencies,
                &cpu_step,
                1,
                heads.key_value,
            )
            .unwrap();
            KvAppend::new(&registry, &cpu, cache_dtype)
                .unwrap()
                .encode(
                    &mut encoder,
                    &expected_key,
                    &cpu.buffer_from_slice(&value, &[kv]).unwrap(),
                    &expected_key_cache,
                    &expected_value_cache,
                    &cpu_step,
                    1,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();

            let what = format!("rope_append {cache_dtype} {heads:?}");
            // sincos on the GPU may differ from Rust's in the last bits.
            assert_close(
                &read(&fused_query),
                &read(&expected_query),
                1e-5,
                &format!("{what} query"),
            );
            let cache_tolerance = if cache_dtype == DType::F32 { 1e-5 } else { 1e-2 };
            assert_close(
                &read(&key_cache),
                &read(&expected_key_cache),
                cache_tolerance,
                &format!("{what} key cache"),
            );
            assert_eq!(
                read(&value_cache),
                read(&expected_value_cache),
                "{what} value cache"
            );
        }
    }
    assert_dispatched(
        &device,
        OpKind::fused(&[Primitive::Rope, Primitive::Copy]),
        "rope_append_",
    );
}

/// Attention with RoPE and the KV append fused in, against `rope_append`
/// then attention on the CPU (the unfused references): at head dims 64 and
/// 128, groups of 1, 2, 4 and 8 query heads (and the blocks that serve a
/// part of a group at short context), caches of one split and of several,
/// the position first, last, and at a split's edges, for every cache dtype.
/// The caches hold random rows, so a row the op must not touch is checked;
/// the query must come back unrotated.
fn attention_with_rope_matches_rope_append_then_attention(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    let cpu = Device::cpu();
    let heads = |query, key_value, dim| Heads {
        query,
        key_value,
        dim,
    };
    // (heads, cache positions, positions decoded at)
    let cases = [
        (heads(32, 8, 128), 37, vec![0, 17, 36]),
        (heads(32, 8, 64), 300, vec![59, 60, 61, 299]),
        (heads(8, 1, 128), 130, vec![64, 129]),
        (heads(6, 3, 128), 64, vec![1, 63]),
        (heads(4, 4, 64), 200, vec![7, 66, 199]),
        (heads(16, 2, 64), 700, vec![350, 699]),
        // Long caches, whose splits fill the GPU: each block serves a whole
        // group (the g2, g4 and g8 kernels).
        (heads(4, 2, 64), 8448, vec![8447]),
        (heads(32, 8, 128), 2112, vec![2047]),
        (heads(8, 1, 128), 16896, vec![16895]),
    ];
    for cache_dtype in WEIGHT_DTYPES {
        let attention = Attention::new(&registry, &device, cache_dtype).unwrap();
        let (cpu_attention, cpu_rope_append) = (
            Attention::new(&registry, &cpu, cache_dtype).unwrap(),
            RopeAppend::new(&registry, &cpu, cache_dtype).unwrap(),
        );
        for (case, (heads, max_positions, positions)) in cases.iter().enumerate() {
            let (heads, max_positions) = (*heads, *max_positions);
            let (q, kv) = (heads.query * heads.dim, heads.key_value * heads.dim);
            let inverse = inverse_frequencies(heads.dim, 500_000.0, None);
            let frequencies = |device: &Device| RopeFrequencies {
                inverse_frequencies: device.buffer_from_slice(&inverse, &[inverse.len()]).unwrap(),
                attention_scaling: 1.1,
            };
            for &position in positions {
                let seed = 7000 + 1000 * case as u64 + position as u64;
                let what =
                    format!("attention with RoPE {cache_dtype} {heads:?} at {position} of {max_positions}");
                let query = random(seed, q);
                let (key, value) = (random(seed + 1, kv), random(seed + 2, kv));
                let cache_values = random(seed + 3, 2 * max_positions * kv);
                // The position sits in slot 1 of a step buffer, as decode's does.
                let step = |device: &Device| device.buffer_from_slice(&[3u32, position], &[2]).unwrap();
                let scratch = |device: &Device| {
                    device
                        .alloc(DType::F32, &[Attention::scratch_len(heads, max_positions)])
                        .unwrap()
                };
                let buffer = |device: &Device, values: &[f32], rows: usize| {
                    device.buffer_from_slice(values, &[rows, heads.dim]).unwrap()
                };

                let fused_query = buffer(&device, &query, heads.query);
                let [key_cache, value_cache] = caches(&device, cache_dtype, &cache_values, max_positions, kv);
                assert!(
                    attention.fuses_rope(heads, &key_cache, &value_cache, &frequencies(&device)),
                    "{what}: not fused"
                );
                let out = poisoned(&device, q);
                let mut encoder = device.command_encoder();
                attention
                    .encode_with_rope(
                        &mut encoder,
                        &fused_query,
                        &buffer(&device, &key, heads.key_value),
                        &buffer(&device, &value, heads.key_value),
                        &key_cache,
                        &value_cache,
                        &frequencies(&device),
                        &step(&device),
                        1,
                        heads,
                        position as usize + 1,
                        &scratch(&device),
                        &out,
                    )
                    .unwrap();
                encoder.commit_and_wait().unwrap();

                let expected_query = buffer(&cpu, &query, heads.query);
                let [expected_key_cache, expected_value_cache] =
                    caches(&cpu, cache_dtype, &cache_values, max_positions, kv);
                let expected_out = poisoned(&cpu, q);
                let mut encoder = cpu.command_encoder();
                cpu_rope_append
                    .encode(
                        &mut encoder,
                        &expected_query,
                        &buffer(&cpu, &key, heads.key_value),
                        &buffer(&cpu, &value, heads.key_value),
                        &expected_key_cache,
                        &expected_value_cache,
                        &frequencies(&cpu),
                        &step(&cpu),
                        1,
                        heads,
                    )
                    .unwrap();
                cpu_attention
                    .encode(
                        &mut encoder,
                        &expected_query,
                        &expected_key_cache,
                        &expected_value_cache,
                        &step(&cpu),
                        1,
                        heads,
                        position as usize + 1,
                        &scratch(&cpu),
                        &expected_out,
                    )
                    .unwrap();
                encoder.commit_and_wait().unwrap();

                assert_eq!(read(&fused_query), query, "{what}: the query was changed");
                // sincos on the GPU may differ from Rust's in the last bits,
                // which a bf16 or f16 key can round apart.
                let cache_tolerance = if cache_dtype == DType::F32 { 1e-5 } else { 1e-2 };
                assert_close(
                    &read(&key_cache),
                    &read(&expected_key_cache),
                    cache_tolerance,
                    &format!("{what}: key cache"),
                );
                assert_eq!(
                    read(&value_cache),
                    read(&expected_value_cache),
                    "{what}: value cache"
                );
                assert_close(
                    &read(&out),
                    &read(&expected_out),
                    if cache_dtype == DType::F32 { 1e-5 } else { 1e-3 },
                    &format!("{what}: output"),
                );
            }
        }
    }
    let dispatches = device.profiler().dispatches();
    assert!(!dispatches.is_empty(), "no dispatch recorded");
    let fused = OpKind::fused(&[Primitive::Rope, Primitive::Copy, Primitive::Attention]);
    for pair in dispatches.chunks(2) {
        assert_eq!(pair.len(), 2, "{pair:?}");
        assert_eq!(pair[0].op_kind, fused, "{:?}", pair[0]);
        assert!(
            pair[0].kernel.starts_with("attention_rope_split_d"),
            "{:?}",
            pair[0]
        );
        assert_eq!(pair[1].kernel.as_ref(), "attention_combine_f32", "{:?}", pair[1]);
    }
    for group in ["_g1_", "_g2_", "_g4_", "_g8_"] {
        assert!(
            dispatches.iter().any(|dispatch| dispatch.kernel.contains(group)),
            "no {group} kernel ran"
        );
    }
}

/// Heads the fused kernels do not hold whole (a head of 96 elements, taken
/// by the 128-wide vector kernel with lanes left over) are refused with
/// the unfused ops named, and `fuses_rope` says so first.
fn attention_with_rope_refuses_heads_it_does_not_hold_whole(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    let attention = Attention::new(&registry, &device, DType::BF16).unwrap();
    let heads = Heads {
        query: 4,
        key_value: 2,
        dim: 96,
    };
    let (q, kv, positions) = (heads.query * heads.dim, heads.key_value * heads.dim, 16);
    let inverse = inverse_frequencies(heads.dim, 10_000.0, None);
    let frequencies = RopeFrequencies {
        inverse_frequencies: device.buffer_from_slice(&inverse, &[inverse.len()]).unwrap(),
        attention_scaling: 1.0,
    };
    let [key_cache, value_cache] = caches(
        &device,
        DType::BF16,
        &random(5, 2 * positions * kv),
        positions,
        kv,
    );
    assert!(!attention.fuses_rope(heads, &key_cache, &value_cache, &frequencies));
    let rows = |rows: usize, seed| {
        device
            .buffer_from_slice(&random(seed, rows * heads.dim), &[rows, heads.dim])
            .unwrap()
    };
    let mut encoder = device.command_encoder();
    let error = attention
        .encode_with_rope(
            &mut encoder,
            &rows(heads.query, 1),
            &rows(heads.key_value, 2),
            &rows(heads.key_value, 3),
            &key_cache,
            &value_cache,
            &frequencies,
            &device.buffer_from_slice(&[2u32], &[1]).unwrap(),
            0,
            heads,
            3,
            &device
                .alloc(DType::F32, &[Attention::scratch_len(heads, positions)])
                .unwrap(),
            &poisoned(&device, q),
        )
        .unwrap_err();
    assert!(matches!(error, Error::KernelMissing { .. }), "{error}");
    assert!(
        error.to_string().contains("encode rope_append, then attention"),
        "{error}"
    );
}

kernelscope::device_tests!(
    attention_with_rope_matches_rope_append_then_attention,
    attention_with_rope_refuses_heads_it_does_not_hold_whole,
    norm_matvec_matches_norm_then_matvecs,
    norm_matvec_silu_matches_norm_then_gate_up_then_silu_mul,
    norm_matvec_refuses_rows_too_long_for_shared_memory,
    matvec_add_matches_matvec_then_add,
    rope_append_matches_rope_then_kv_append,
);
