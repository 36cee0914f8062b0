//! Every op against an independent naive reference written here in f64
//! (plain loops, no code shared with the crate), on seeded random inputs at
//! several shapes including odd sizes, for every weight dtype the op
//! supports, and for the row-batched ops at 1, 3 and 17 rows and every
//! output dtype. Outputs are poisoned with NaN (or u32::MAX) before each run
//! so a kernel that writes nothing fails. f16/bf16 weights and inputs are
//! rounded to their dtype before the reference is computed (the ops widen
//! them exactly), so one f32-math tolerance (relative 1e-5) serves every
//! dtype; outputs stored in f16/bf16 must be what a result within that
//! tolerance rounds to (`assert_close_in`). Each test also checks the op
//! kind and kernel its dispatches declare to the profiler.

use half::{bf16, f16};
use kernelscope::ops;
use kernelscope::ops::rope::{
    Llama3Scaling, Rope, RopeFrequencies, RopeScaling, YarnScaling, inverse_frequencies,
};
use kernelscope::ops::sample::{Sample, Sampling};
use kernelscope::profile::ProfileLevel;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions, Error, OpKind};

/// Relative tolerance of f32 math against the f64 reference.
const REL_TOL: f64 = 1e-5;

const WEIGHT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn profiled_device(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// `count` values uniform in `[low, high)` from `seed`.
fn random(seed: u64, count: usize, low: f32, high: f32) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, low, high)
}

fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

/// `values` rounded to `dtype` and uploaded, with the rounded values in f64
/// for the reference.
fn weights(device: &Device, dtype: DType, values: &[f32], shape: &[usize]) -> (Buffer, Vec<f64>) {
    match dtype {
        DType::F32 => (device.buffer_from_slice(values, shape).unwrap(), widen(values)),
        DType::F16 => {
            let rounded: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            let exact = rounded.iter().map(|v| v.to_f64()).collect();
            (device.buffer_from_slice(&rounded, shape).unwrap(), exact)
        }
        DType::BF16 => {
            let rounded: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            let exact = rounded.iter().map(|v| v.to_f64()).collect();
            (device.buffer_from_slice(&rounded, shape).unwrap(), exact)
        }
        other => panic!("{other} is not a weight dtype"),
    }
}

/// An f32 output buffer filled with NaN.
fn poisoned(device: &Device, shape: &[usize]) -> Buffer {
    let buffer = device.alloc(DType::F32, shape).unwrap();
    buffer.write_from(&vec![f32::NAN; buffer.len()]).unwrap();
    buffer
}

/// A one-element u32 output holding u32::MAX.
fn poisoned_u32(device: &Device) -> Buffer {
    device.buffer_from_slice(&[u32::MAX], &[1]).unwrap()
}

/// Fails when some `|actual - expected| > abs_tol + rel_tol * |expected|`
/// (NaN always fails), printing the first mismatches.
fn assert_close(actual: &[f32], expected: &[f64], rel_tol: f64, abs_tol: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bad: Vec<usize> = (0..actual.len())
        .filter(|&i| {
            let error = (f64::from(actual[i]) - expected[i]).abs();
            error.is_nan() || error > abs_tol + rel_tol * expected[i].abs()
        })
        .collect();
    if !bad.is_empty() {
        let first: Vec<String> = bad
            .iter()
            .take(5)
            .map(|&i| format!("[{i}] expected {:e}, got {:e}", expected[i], actual[i]))
            .collect();
        panic!(
            "{what}: {} of {} values mismatch; {}",
            bad.len(),
            actual.len(),
            first.join("; ")
        );
    }
}

/// Every dispatch the profiler recorded declares `kind` and runs a kernel
/// named `<kernel_prefix>...`.
fn assert_dispatched(device: &Device, kind: OpKind, kernel_prefix: &str) {
    let dispatches = device.profiler().dispatches();
    assert!(!dispatches.is_empty(), "no dispatch recorded");
    for dispatch in &dispatches {
        assert_eq!(dispatch.op_kind, kind, "{dispatch:?}");
        assert!(dispatch.kernel.starts_with(kernel_prefix), "{dispatch:?}");
    }
}

/// Row counts every row-batched op is tested at: decode's single row and
/// odd batches.
const ROWS: [usize; 3] = [1, 3, 17];

/// An output buffer of `dtype` filled with NaN.
fn poisoned_as(device: &Device, dtype: DType, shape: &[usize]) -> Buffer {
    let count = shape.iter().product();
    match dtype {
        DType::F32 => poisoned(device, shape),
        DType::F16 => device.buffer_from_slice(&vec![f16::NAN; count], shape).unwrap(),
        DType::BF16 => device.buffer_from_slice(&vec![bf16::NAN; count], shape).unwrap(),
        other => panic!("{other} is not a float dtype"),
    }
}

/// A float buffer's values widened to f32 (exactly).
fn read_f32(buffer: &Buffer) -> Vec<f32> {
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

/// `value` rounded to nearest even in `dtype` by half's conversions
/// (independent of the crate's), widened back.
fn round_to(dtype: DType, value: f64) -> f64 {
    match dtype {
        DType::F32 => f64::from(value as f32),
        DType::F16 => f16::from_f32(value as f32).to_f64(),
        DType::BF16 => bf16::from_f32(value as f32).to_f64(),
        other => panic!("{other} is not a float dtype"),
    }
}

/// [`assert_close`] for an output stored in `dtype`. The op computes in f32
/// and rounds once to `dtype`, so each value must be what some result within
/// the f32 tolerance of the reference rounds to: between the roundings of
/// `expected ∓ (abs_tol + rel_tol·|expected|)` (rounding is monotonic).
/// That admits the one unit in the last place by which the f32 result and
/// the exact one differ when they straddle a rounding boundary (2^-7 of the
/// value for bf16, 2^-10 for f16), and nothing else: a conversion that
/// truncates, or rounds ties away, fails.
fn assert_close_in(dtype: DType, actual: &[f32], expected: &[f64], rel_tol: f64, abs_tol: f64, what: &str) {
    if dtype == DType::F32 {
        return assert_close(actual, expected, rel_tol, abs_tol, what);
    }
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bounds = |i: usize| {
        let margin = abs_tol + rel_tol * expected[i].abs();
        (
            round_to(dtype, expected[i] - margin),
            round_to(dtype, expected[i] + margin),
        )
    };
    let bad: Vec<usize> = (0..actual.len())
        .filter(|&i| {
            let (low, high) = bounds(i);
            let value = f64::from(actual[i]);
            !(low <= value && value <= high)
        })
        .collect();
    if !bad.is_empty() {
        let first: Vec<String> = bad
            .iter()
            .take(5)
            .map(|&i| {
                let (low, high) = bounds(i);
                format!(
                    "[{i}] expected {:e} (stored in {low:e}..={high:e}), got {:e}",
                    expected[i], actual[i]
                )
            })
            .collect();
        panic!(
            "{what}: {} of {} {dtype} values mismatch; {}",
            bad.len(),
            actual.len(),
            first.join("; ")
        );
    }
}

/// The output dtypes an op that narrows to the weights' dtype supports for
/// `weight`: f32 and, when different, the weight's own.
fn output_dtypes(weight: DType) -> Vec<DType> {
    if weight == DType::F32 {
        vec![DType::F32]
    } else {
        vec![DType::F32, weight]
    }
}

/// Every dispatch since the last check ran `kernel`; clears the profile.
fn assert_kernel(device: &Device, kernel: &str) {
    let dispatches = device.profiler().dispatches();
    assert!(!dispatches.is_empty(), "no dispatch recorded for {kernel}");
    for dispatch in &dispatches {
        assert_eq!(&*dispatch.kernel, kernel, "{dispatch:?}");
    }
    device.profiler().reset();
}

fn embedding_copies_the_token_rows(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::embedding::Embedding::new(&registry, &device, dtype).unwrap();
        for (vocab, hidden) in [(1, 1), (5, 7), (37, 64)] {
            let (table, exact) = weights(
                &device,
                dtype,
                &random(11, vocab * hidden, -1.0, 1.0),
                &[vocab, hidden],
            );
            for rows in ROWS {
                // Decode's step buffer: the token at 0, then the position
                // (beyond the vocabulary, so reading it would show).
                let first = if rows == 1 { 0 } else { 2 };
                let mut rng = SplitMix64::new((vocab * 100 + rows) as u64);
                let mut ids: Vec<u32> = (0..rows).map(|_| rng.below(vocab as u64) as u32).collect();
                if rows > 2 {
                    // Repeated and out of order.
                    ids[2] = ids[0];
                    ids[1] = (vocab - 1) as u32;
                    ids[rows - 1] = 0;
                }
                let mut tokens = vec![u32::MAX; first];
                tokens.extend(&ids);
                tokens.push(12_345);
                let token_buffer = device.buffer_from_slice(&tokens, &[tokens.len()]).unwrap();
                let out = poisoned(&device, &[rows, hidden]);
                let mut encoder = device.command_encoder();
                op.encode(&mut encoder, &table, &token_buffer, first, &out)
                    .unwrap();
                encoder.commit_and_wait().unwrap();
                let expected: Vec<f64> = ids
                    .iter()
                    .flat_map(|&id| exact[id as usize * hidden..(id as usize + 1) * hidden].to_vec())
                    .collect();
                let what = format!("embedding {dtype} vocab {vocab} hidden {hidden} tokens {ids:?}");
                assert_close(&out.to_vec::<f32>().unwrap(), &expected, 0.0, 0.0, &what);
            }
        }
        assert_kernel(&device, &format!("embedding_{dtype}"));
    }
}

/// A table split by vocabulary (tensor parallelism): each share embeds the
/// ids it holds and writes zeros for the rest, so the shares' outputs sum to
/// the whole table's embedding; a share reaching past the vocabulary is refused.
fn embedding_shares_sum_to_the_whole_table(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::embedding::Embedding::new(&ops::registry(), &device, DType::F32).unwrap();
    let (vocab, hidden, rows) = (23, 16, 9);
    let values = random(14, vocab * hidden, -1.0, 1.0);
    let mut rng = SplitMix64::new(15);
    let ids: Vec<u32> = (0..rows).map(|_| rng.below(vocab as u64) as u32).collect();
    let tokens = device.buffer_from_slice(&ids, &[rows]).unwrap();
    for shares in [2usize, 3, 4] {
        let stride = vocab.div_ceil(shares);
        let mut sum = vec![0f64; rows * hidden];
        for share in 0..shares {
            let first = share * stride;
            let held = stride.min(vocab - first);
            let table = device
                .buffer_from_slice(&values[first * hidden..(first + held) * hidden], &[held, hidden])
                .unwrap();
            let out = poisoned(&device, &[rows, hidden]);
            let mut encoder = device.command_encoder();
            op.encode_shard(&mut encoder, &table, first, vocab, &tokens, 0, &out)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let out = out.to_vec::<f32>().unwrap();
            for (row, &id) in ids.iter().enumerate() {
                let held_here = (first..first + held).contains(&(id as usize));
                for column in 0..hidden {
                    let value = out[row * hidden + column];
                    if !held_here {
                        assert_eq!(value, 0.0, "share {share} of {shares}: id {id} is not held");
                    }
                    sum[row * hidden + column] += f64::from(value);
                }
            }
        }
        let expected: Vec<f64> = ids
            .iter()
            .flat_map(|&id| {
                values[id as usize * hidden..(id as usize + 1) * hidden]
                    .iter()
                    .map(|&v| f64::from(v))
            })
            .collect();
        let sum: Vec<f32> = sum.iter().map(|&v| v as f32).collect();
        assert_close(&sum, &expected, 0.0, 0.0, &format!("{shares} shares"));
    }
    let table = device.alloc(DType::F32, &[10, hidden]).unwrap();
    let out = device.alloc(DType::F32, &[rows, hidden]).unwrap();
    let mut encoder = device.command_encoder();
    assert!(
        op.encode_shard(&mut encoder, &table, 20, vocab, &tokens, 0, &out)
            .is_err()
    );
}

fn embedding_rejects_a_token_beyond_the_vocabulary(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::embedding::Embedding::new(&ops::registry(), &device, DType::F32).unwrap();
    let (vocab, hidden) = (11, 8);
    let values = random(12, vocab * hidden, -1.0, 1.0);
    let table = device.buffer_from_slice(&values, &[vocab, hidden]).unwrap();
    for token in [11u32, 4_000_000] {
        // The bad token is the middle one of three rows.
        let tokens = device.buffer_from_slice(&[7u32, 3, token, 10], &[4]).unwrap();
        let out = device
            .buffer_from_slice(&random(13, 3 * hidden, -1.0, 1.0), &[3, hidden])
            .unwrap();
        let mut encoder = device.command_encoder();
        op.encode(&mut encoder, &table, &tokens, 1, &out).unwrap();
        match backend {
            // The CPU queue runs at commit and reports the kernel's error.
            Backend::Cpu => {
                let error = encoder
                    .commit_and_wait()
                    .expect_err("token beyond the vocabulary must fail")
                    .to_string();
                assert!(
                    error.contains(&token.to_string()),
                    "the error names the token {token}: {error}"
                );
            }
            // A GPU kernel cannot return an error: it poisons the row with
            // NaN instead (the model checks token ids on the host first);
            // the other rows are embedded.
            Backend::Cuda => {
                encoder.commit_and_wait().unwrap();
                let out = out.to_vec::<f32>().unwrap();
                assert!(
                    out[hidden..2 * hidden].iter().all(|v| v.is_nan()),
                    "token {token}"
                );
                let expected: Vec<f64> = [3, 10]
                    .iter()
                    .flat_map(|&id| widen(&values[id * hidden..(id + 1) * hidden]))
                    .collect();
                let embedded: Vec<f32> = [&out[..hidden], &out[2 * hidden..]].concat();
                assert_close(
                    &embedded,
                    &expected,
                    0.0,
                    0.0,
                    &format!("rows beside token {token}"),
                );
            }
        }
    }
}

fn rms_norm_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for weight_dtype in WEIGHT_DTYPES {
        for out_dtype in output_dtypes(weight_dtype) {
            let op = ops::rms_norm::RmsNorm::new(&registry, &device, weight_dtype, out_dtype).unwrap();
            // 300 and 4096 take the kernel's 4-wide path, 1, 7 and 33 its
            // scalar one; the offset input is misaligned for 4-wide loads.
            for (n, eps, offset) in [
                (1, 1e-6, 0),
                (7, 1e-5, 0),
                (33, 1e-6, 0),
                (300, 1e-5, 0),
                (300, 1e-5, 1),
                (4096, 1e-6, 0),
                (33, 0.25, 0),
            ] {
                for rows in ROWS {
                    let seed = (n * 100 + rows + offset) as u64;
                    let x = random(21 + seed, offset + rows * n, -2.0, 2.0);
                    let (weight, w) = weights(&device, weight_dtype, &random(22 + seed, n, -1.5, 1.5), &[n]);
                    let input = device
                        .buffer_from_slice(&x, &[x.len()])
                        .unwrap()
                        .slice(offset, rows * n)
                        .unwrap();
                    let input = if offset == 0 {
                        input.reshape(&[rows, n]).unwrap()
                    } else {
                        input
                    };
                    let out = poisoned_as(&device, out_dtype, &[rows, n]);
                    let mut encoder = device.command_encoder();
                    op.encode(&mut encoder, &input, &weight, &out, eps).unwrap();
                    encoder.commit_and_wait().unwrap();

                    let mut expected = Vec::with_capacity(rows * n);
                    for row in x[offset..].chunks_exact(n) {
                        let mut mean_square = 0.0;
                        for &v in row {
                            mean_square += f64::from(v) * f64::from(v);
                        }
                        mean_square /= n as f64;
                        let scale = 1.0 / (mean_square + f64::from(eps)).sqrt();
                        expected.extend((0..n).map(|i| f64::from(row[i]) * scale * w[i]));
                    }
                    let what =
                        format!("rms_norm {weight_dtype}->{out_dtype} n {n} rows {rows} offset {offset}");
                    assert_close_in(out_dtype, &read_f32(&out), &expected, REL_TOL, 1e-6, &what);
                }
            }
            let kernel = if out_dtype == DType::F32 {
                format!("rms_norm_{weight_dtype}")
            } else {
                format!("rms_norm_{weight_dtype}_{out_dtype}")
            };
            assert_kernel(&device, &kernel);
        }
    }
}

fn rms_norm_refuses_other_output_dtypes(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for (weight_dtype, out_dtype) in [
        (DType::F32, DType::BF16),
        (DType::F32, DType::F16),
        (DType::BF16, DType::F16),
        (DType::F16, DType::BF16),
        (DType::BF16, DType::U32),
    ] {
        match ops::rms_norm::RmsNorm::new(&registry, &device, weight_dtype, out_dtype) {
            Err(Error::KernelMissing { name, .. }) => {
                assert_eq!(name, format!("rms_norm_{weight_dtype}_{out_dtype}"));
            }
            other => panic!("rms_norm {weight_dtype}->{out_dtype}: {other:?}"),
        }
    }
}

fn matvec_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::matvec::MatVec::new(&registry, &device, dtype).unwrap();
        for n in [1, 7, 33, 300] {
            for k in [1, 5, 64, 257] {
                let seed = (n * 1000 + k) as u64;
                let (weight, w) = weights(&device, dtype, &random(seed, n * k, -1.0, 1.0), &[n, k]);
                let x = random(seed + 1, k, -1.0, 1.0);
                let out = poisoned(&device, &[n]);
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &weight,
                    &device.buffer_from_slice(&x, &[k]).unwrap(),
                    &out,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();

                let mut expected = vec![0.0; n];
                for row in 0..n {
                    for col in 0..k {
                        expected[row] += w[row * k + col] * f64::from(x[col]);
                    }
                }
                let what = format!("matvec {dtype} n {n} k {k}");
                let abs_tol = REL_TOL * (k as f64).sqrt();
                assert_close(&out.to_vec::<f32>().unwrap(), &expected, REL_TOL, abs_tol, &what);
            }
        }
    }
    assert_dispatched(&device, OpKind::MatVec, "matvec_");
}

fn matmul_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::matmul::MatMul::new(&registry, &device, dtype).unwrap();
        // m: one token, a part of the CPU version's 16-token block, whole
        // blocks, and blocks plus a part; n: parts of its 6-row panel; k: no
        // multiple of 8, and one past its 512-deep chunk (sums carried over).
        for m in [1, 5, 64, 130] {
            for n in [1, 7, 33] {
                for k in [1, 5, 67, 257, 601] {
                    let seed = (m * 100_000 + n * 1000 + k) as u64;
                    let (weight, w) = weights(&device, dtype, &random(seed, n * k, -1.0, 1.0), &[n, k]);
                    let (input, x) = weights(&device, dtype, &random(seed + 1, m * k, -1.0, 1.0), &[m, k]);
                    let out = poisoned(&device, &[m, n]);
                    let mut encoder = device.command_encoder();
                    op.encode(&mut encoder, &weight, &input, &out).unwrap();
                    encoder.commit_and_wait().unwrap();

                    let mut expected = vec![0.0; m * n];
                    for token in 0..m {
                        for row in 0..n {
                            for col in 0..k {
                                expected[token * n + row] += x[token * k + col] * w[row * k + col];
                            }
                        }
                    }
                    let what = format!("matmul {dtype} m {m} n {n} k {k}");
                    let abs_tol = REL_TOL * (k as f64).sqrt();
                    assert_close(&out.to_vec::<f32>().unwrap(), &expected, REL_TOL, abs_tol, &what);
                }
            }
        }
        if backend == Backend::Cpu {
            assert_kernel(&device, &format!("matmul_{dtype}"));
        } else {
            // cuBLASLt's own kernels (gemv, gemm, split-K reductions), timed
            // and named as CUPTI reports them, under the op's kind.
            let dispatches = device.profiler().dispatches();
            assert!(!dispatches.is_empty(), "no dispatch recorded for matmul_{dtype}");
            assert!(
                dispatches
                    .iter()
                    .all(|dispatch| dispatch.op_kind == OpKind::MatMul)
            );
            device.profiler().reset();
        }
    }
}

/// `theta^(-2i/head_dim)` for `i < head_dim / 2`.
fn reference_inverse_frequencies(head_dim: usize, theta: f64) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
        .collect()
}

/// transformers' `_compute_llama3_parameters`, transcribed in f64.
fn reference_llama3(base: &[f64], scaling: Llama3Scaling) -> Vec<f64> {
    let factor = f64::from(scaling.factor);
    let low_freq_factor = f64::from(scaling.low_freq_factor);
    let high_freq_factor = f64::from(scaling.high_freq_factor);
    let old_context_len = f64::from(scaling.original_max_position_embeddings);
    let low_freq_wavelen = old_context_len / low_freq_factor;
    let high_freq_wavelen = old_context_len / high_freq_factor;
    base.iter()
        .map(|&inv_freq| {
            let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
            // inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
            let inv_freq_llama = if wavelen > low_freq_wavelen {
                inv_freq / factor
            } else {
                inv_freq
            };
            let smooth_factor =
                (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            let smoothed = (1.0 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
            // is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
            let is_medium_freq = wavelen >= high_freq_wavelen && wavelen <= low_freq_wavelen;
            if is_medium_freq { smoothed } else { inv_freq_llama }
        })
        .collect()
}

fn rope_inverse_frequencies_unscaled(_backend: Backend) {
    for (head_dim, theta) in [(2, 10_000.0), (64, 10_000.0), (128, 500_000.0), (96, 1_000_000.0)] {
        let expected = reference_inverse_frequencies(head_dim, theta);
        let actual = inverse_frequencies(head_dim, theta as f32, None);
        let what = format!("inverse frequencies head_dim {head_dim} theta {theta}");
        assert_close(&actual, &expected, REL_TOL, 0.0, &what);
    }
}

fn rope_inverse_frequencies_llama3_scaling(_backend: Backend) {
    let configs = [
        // Llama 3.1.
        (
            128,
            500_000.0,
            Llama3Scaling {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        ),
        // Llama 3.2 1B.
        (
            64,
            500_000.0,
            Llama3Scaling {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        ),
        // Made up, with low_freq_factor != 1.
        (
            96,
            10_000.0,
            Llama3Scaling {
                factor: 4.0,
                low_freq_factor: 2.0,
                high_freq_factor: 8.0,
                original_max_position_embeddings: 4096.0,
            },
        ),
    ];
    for (head_dim, theta, scaling) in configs {
        let base = reference_inverse_frequencies(head_dim, theta);
        let expected = reference_llama3(&base, scaling);
        let actual = inverse_frequencies(head_dim, theta as f32, Some(RopeScaling::Llama3(scaling)));
        let what = format!("llama3 inverse frequencies head_dim {head_dim} {scaling:?}");
        assert_close(&actual, &expected, REL_TOL, 0.0, &what);

        // The three bands: high frequencies unchanged, low ones divided by
        // factor, the middle strictly in between. Each is non-empty here.
        let factor = f64::from(scaling.factor);
        let high_freq_wavelen =
            f64::from(scaling.original_max_position_embeddings / scaling.high_freq_factor);
        let low_freq_wavelen = f64::from(scaling.original_max_position_embeddings / scaling.low_freq_factor);
        let mut bands = [0; 3];
        for (i, (&actual, &freq)) in actual.iter().zip(&base).enumerate() {
            let (actual, wavelen) = (f64::from(actual), 2.0 * std::f64::consts::PI / freq);
            let close = |want: f64| (actual - want).abs() <= REL_TOL * want;
            if wavelen < high_freq_wavelen {
                bands[0] += 1;
                assert!(
                    close(freq),
                    "{what}: high frequency {i} must be unchanged: {actual} vs {freq}"
                );
            } else if wavelen > low_freq_wavelen {
                bands[2] += 1;
                assert!(
                    close(freq / factor),
                    "{what}: low frequency {i} must be divided by factor: {actual}"
                );
            } else {
                bands[1] += 1;
                assert!(
                    freq / factor < actual && actual < freq,
                    "{what}: middle frequency {i}: {actual}"
                );
            }
        }
        assert!(bands.iter().all(|&count| count > 0), "{what}: bands {bands:?}");
        // Smooth: monotonically decreasing across the bands.
        assert!(
            actual.windows(2).all(|pair| pair[1] < pair[0]),
            "{what}: not decreasing: {actual:?}"
        );
    }
}

fn rope_inverse_frequencies_linear_scaling(_backend: Backend) {
    for (head_dim, theta, factor) in [(64, 10_000.0, 4.0f32), (128, 250_000.0, 2.5)] {
        let expected: Vec<f64> = reference_inverse_frequencies(head_dim, theta)
            .iter()
            .map(|freq| freq / f64::from(factor))
            .collect();
        let actual = inverse_frequencies(head_dim, theta as f32, Some(RopeScaling::Linear { factor }));
        let what = format!("linear inverse frequencies head_dim {head_dim} factor {factor}");
        assert_close(&actual, &expected, REL_TOL, 0.0, &what);
    }
}

/// transformers' `_compute_yarn_parameters`, transcribed in f64.
fn reference_yarn(head_dim: usize, theta: f64, scaling: YarnScaling) -> Vec<f64> {
    let dim = head_dim as f64;
    let context = f64::from(scaling.original_max_position_embeddings);
    let correction_dim =
        |rotations: f64| dim * (context / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
    let mut low = correction_dim(f64::from(scaling.beta_fast));
    let mut high = correction_dim(f64::from(scaling.beta_slow));
    if scaling.truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        high += 0.001;
    }
    reference_inverse_frequencies(head_dim, theta)
        .iter()
        .enumerate()
        .map(|(i, &extrapolated)| {
            let interpolated = extrapolated / f64::from(scaling.factor);
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            interpolated * ramp + extrapolated * (1.0 - ramp)
        })
        .collect()
}

fn rope_inverse_frequencies_yarn_scaling(_backend: Backend) {
    let mut rng = SplitMix64::new(77);
    for (head_dim, theta) in [(16, 10_000.0), (64, 1_000_000.0), (128, 500_000.0)] {
        for truncate in [true, false] {
            let scaling = YarnScaling {
                factor: 2.0 + rng.below(30) as f32,
                original_max_position_embeddings: 4096.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
                truncate,
            };
            let expected = reference_yarn(head_dim, theta, scaling);
            let actual = inverse_frequencies(head_dim, theta as f32, Some(RopeScaling::Yarn(scaling)));
            let what = format!("yarn inverse frequencies head_dim {head_dim} {scaling:?}");
            assert_close(&actual, &expected, REL_TOL, 0.0, &what);
            // The fastest dimension is extrapolated (kept), the slowest interpolated.
            let base = reference_inverse_frequencies(head_dim, theta);
            assert!(
                (f64::from(actual[0]) - base[0]).abs() <= REL_TOL * base[0],
                "{what}"
            );
            let last = base.len() - 1;
            let interpolated = base[last] / f64::from(scaling.factor);
            assert!(
                (f64::from(actual[last]) - interpolated).abs() <= REL_TOL * interpolated,
                "{what}"
            );
        }
    }
}

fn rope_rotates_half_by_position(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = Rope::new(&ops::registry(), &device).unwrap();
    let llama3 = Llama3Scaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };
    for (heads, head_dim) in [(1, 2), (3, 16), (4, 128)] {
        let unscaled = reference_inverse_frequencies(head_dim, 10_000.0);
        let scaled = reference_llama3(&reference_inverse_frequencies(head_dim, 500_000.0), llama3);
        // 1 for most checkpoints; YaRN's attention factor scales cos and sin.
        for (frequencies, attention_scaling) in [(unscaled, 1.0f32), (scaled, 1.138_629_4)] {
            let frequencies: Vec<f32> = frequencies.iter().map(|&f| f as f32).collect();
            let frequency_buffer = device.buffer_from_slice(&frequencies, &[head_dim / 2]).unwrap();
            let rope_frequencies = RopeFrequencies {
                inverse_frequencies: frequency_buffer.clone(),
                attention_scaling,
            };
            for rows in ROWS {
                // Positions per row, neither contiguous nor sorted, some past
                // 65,536 (where an f16 or a 16-bit index would break).
                let mut rng = SplitMix64::new((heads * 1000 + head_dim * 10 + rows) as u64);
                let picks = [0u32, 65_537, 37, 4000, 1, 131_071, 1_000_003];
                let positions: Vec<u32> = (0..rows)
                    .map(|row| {
                        if row < picks.len() {
                            picks[(row * 3 + rows) % picks.len()]
                        } else {
                            rng.below(300_000) as u32
                        }
                    })
                    .collect();
                // Decode passes its [token, position] slots with first 1;
                // the batch's positions sit between junk.
                let first = if rows == 1 { 1 } else { 3 };
                let mut slots = vec![99u32; first];
                slots.extend(&positions);
                slots.push(123);
                let slot_buffer = device.buffer_from_slice(&slots, &[slots.len()]).unwrap();
                let x = random(
                    u64::from(positions[0]) + (head_dim * rows) as u64,
                    rows * heads * head_dim,
                    -1.0,
                    1.0,
                );
                // Decode's layout for one row, the batch's otherwise.
                let shape: &[usize] = if rows == 1 {
                    &[heads, head_dim]
                } else {
                    &[rows, heads, head_dim]
                };
                let buffer = device.buffer_from_slice(&x, shape).unwrap();
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &buffer,
                    &rope_frequencies,
                    &slot_buffer,
                    first,
                    heads,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();

                let half = head_dim / 2;
                let mut expected = vec![0.0; rows * heads * head_dim];
                for (row, &position) in positions.iter().enumerate() {
                    for head in 0..heads {
                        let base = (row * heads + head) * head_dim;
                        for i in 0..half {
                            // The angle is an f32 product, as in transformers
                            // (`inv_freq @ position_ids` in float32).
                            let angle = f64::from(position as f32 * frequencies[i]);
                            let (cos, sin) = (
                                angle.cos() * f64::from(attention_scaling),
                                angle.sin() * f64::from(attention_scaling),
                            );
                            let (x0, x1) = (f64::from(x[base + i]), f64::from(x[base + i + half]));
                            expected[base + i] = x0 * cos - x1 * sin;
                            expected[base + i + half] = x1 * cos + x0 * sin;
                        }
                    }
                }
                let what = format!("rope heads {heads} head_dim {head_dim} positions {positions:?}");
                assert_close(&buffer.to_vec::<f32>().unwrap(), &expected, REL_TOL, 1e-6, &what);
            }
        }
    }
    assert_kernel(&device, "rope_f32");
}

fn silu_mul_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for out_dtype in WEIGHT_DTYPES {
        let op = ops::silu_mul::SiluMul::new(&registry, &device, out_dtype).unwrap();
        for n in [1, 7, 33, 300, 1025] {
            for rows in ROWS {
                let seed = (n * 100 + rows) as u64;
                let gate = random(41 + seed, rows * n, -10.0, 10.0);
                let up = random(42 + seed, rows * n, -1.0, 1.0);
                let out = poisoned_as(&device, out_dtype, &[rows, n]);
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &device.buffer_from_slice(&gate, &[rows, n]).unwrap(),
                    &device.buffer_from_slice(&up, &[rows * n]).unwrap(),
                    &out,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();
                let expected: Vec<f64> = (0..rows * n)
                    .map(|i| {
                        let g = f64::from(gate[i]);
                        g / (1.0 + (-g).exp()) * f64::from(up[i])
                    })
                    .collect();
                let what = format!("silu_mul -> {out_dtype} n {n} rows {rows}");
                assert_close_in(out_dtype, &read_f32(&out), &expected, REL_TOL, 1e-7, &what);
            }
        }
        assert_kernel(&device, &format!("silu_mul_{out_dtype}"));
    }
}

fn add_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::add::Add::new(&registry, &device, dtype).unwrap();
        for n in [1, 7, 33, 300] {
            for rows in ROWS {
                // A residual as long as x, and a bias row added to every row.
                for broadcast in [false, true] {
                    let seed = (n * 100 + rows * 2 + usize::from(broadcast)) as u64;
                    let x = random(51 + seed, rows * n, -1.0, 1.0);
                    let y_shape = if broadcast { vec![n] } else { vec![rows, n] };
                    let (addend, y) = weights(
                        &device,
                        dtype,
                        &random(52 + seed, y_shape.iter().product(), -1.0, 1.0),
                        &y_shape,
                    );
                    // In place: the accumulator is the output, so it cannot be poisoned.
                    let accumulator = device.buffer_from_slice(&x, &[rows, n]).unwrap();
                    let mut encoder = device.command_encoder();
                    op.encode(&mut encoder, &accumulator, &addend).unwrap();
                    encoder.commit_and_wait().unwrap();
                    let expected: Vec<f64> =
                        (0..rows * n).map(|i| f64::from(x[i]) + y[i % y.len()]).collect();
                    let what = format!("add {dtype} n {n} rows {rows} addend {y_shape:?}");
                    assert_close(
                        &accumulator.to_vec::<f32>().unwrap(),
                        &expected,
                        REL_TOL,
                        1e-7,
                        &what,
                    );
                }
            }
        }
        assert_kernel(&device, &format!("add_{dtype}"));
    }
}

fn add_refuses_an_addend_whose_length_does_not_divide(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::add::Add::new(&ops::registry(), &device, DType::F32).unwrap();
    let accumulator = device
        .buffer_from_slice(&random(53, 21, -1.0, 1.0), &[3, 7])
        .unwrap();
    for length in [5, 8, 42] {
        let addend = device
            .buffer_from_slice(&random(54, length, -1.0, 1.0), &[length])
            .unwrap();
        let mut encoder = device.command_encoder();
        let result = op.encode(&mut encoder, &accumulator, &addend);
        assert!(
            matches!(result, Err(Error::ShapeMismatch { .. })),
            "an addend of {length} onto 21: {result:?}"
        );
    }
}

/// The first index of the largest value; NaN never wins.
fn reference_argmax(values: &[f32]) -> u32 {
    let mut best: Option<usize> = None;
    for (i, &v) in values.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|b| v > values[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or(0) as u32
}

/// Logit vectors for argmax and greedy sampling: random sizes, ties, all
/// negative, and NaNs.
fn argmax_cases() -> Vec<Vec<f32>> {
    let mut cases: Vec<Vec<f32>> = [1, 7, 33, 300, 32_000]
        .iter()
        .map(|&n| random(61 + n, n as usize, -1.0, 1.0))
        .collect();
    cases.push(vec![1.0, 3.0, 0.0, 3.0, 3.0]);
    cases.push(vec![0.5; 9]);
    cases.push(random(62, 100, -9.0, -1.0));
    let mut late_tie = random(63, 500, -1.0, 1.0);
    (late_tie[250], late_tie[499]) = (2.0, 2.0);
    cases.push(late_tie);
    cases.push(vec![f32::NAN, 1.0, 3.0, f32::NAN, 2.0]);
    // A vocabulary that spreads over many blocks: the largest value in the
    // last block's share, then tied across blocks (the earlier one wins),
    // then NaN in every block but one, then no number at all.
    let mut vocabulary = random(64, 128_256, -1.0, 1.0);
    vocabulary[128_255] = 5.0;
    cases.push(vocabulary.clone());
    (vocabulary[3_000], vocabulary[100_000]) = (7.0, 7.0);
    cases.push(vocabulary.clone());
    let mut mostly_nan = vec![f32::NAN; 70_000];
    mostly_nan[65_537] = -3.0;
    cases.push(mostly_nan);
    cases.push(vec![f32::NAN; 9_000]);
    cases.push(vec![f32::NEG_INFINITY; 9_000]);
    cases
}

fn argmax_picks_the_first_largest(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::argmax::Argmax::new(&ops::registry(), &device).unwrap();
    for logits in argmax_cases() {
        let out = poisoned_u32(&device);
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &device.buffer_from_slice(&logits, &[logits.len()]).unwrap(),
            &out,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        let expected = reference_argmax(&logits);
        let shown = &logits[..logits.len().min(8)];
        assert_eq!(
            out.to_vec::<u32>().unwrap(),
            [expected],
            "argmax of {} logits {shown:?}...",
            logits.len()
        );
    }
    assert_dispatched(&device, OpKind::Argmax, "argmax_");
}

fn sample_at_temperature_zero_is_argmax(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = Sample::new(&ops::registry(), &device).unwrap();
    for logits in argmax_cases() {
        let buffer = device.buffer_from_slice(&logits, &[logits.len()]).unwrap();
        for (top_p, uniform) in [(1.0, 0.0), (1.0, 0.5), (0.3, 0.9999)] {
            let out = poisoned_u32(&device);
            let mut encoder = device.command_encoder();
            op.encode(
                &mut encoder,
                &buffer,
                &out,
                Sampling {
                    temperature: 0.0,
                    top_p,
                },
                uniform,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();
            let expected = reference_argmax(&logits);
            let shown = &logits[..logits.len().min(8)];
            assert_eq!(
                out.to_vec::<u32>().unwrap(),
                [expected],
                "greedy sample, uniform {uniform}, {shown:?}..."
            );
        }
    }
    assert_dispatched(&device, OpKind::Sample, "sample_");
}

/// How often each token is drawn over the uniform grid `j / 10_000`.
fn sample_frequencies(device: &Device, logits: &[f32], sampling: Sampling) -> Vec<f64> {
    const DRAWS: usize = 10_000;
    let op = Sample::new(&ops::registry(), device).unwrap();
    let buffer = device.buffer_from_slice(logits, &[logits.len()]).unwrap();
    let out = device
        .buffer_from_slice(&vec![u32::MAX; DRAWS], &[DRAWS])
        .unwrap();
    let mut encoder = device.command_encoder();
    for draw in 0..DRAWS {
        let uniform = draw as f32 / DRAWS as f32;
        op.encode(
            &mut encoder,
            &buffer,
            &out.slice(draw, 1).unwrap(),
            sampling,
            uniform,
        )
        .unwrap();
        // Committed in batches: an open batch checks each dispatch against
        // the ranges of all the others.
        if draw % 100 == 99 {
            encoder.commit_and_wait().unwrap();
        }
    }
    encoder.commit_and_wait().unwrap();
    let mut counts = vec![0usize; logits.len()];
    for token in out.to_vec::<u32>().unwrap() {
        assert!(
            (token as usize) < logits.len(),
            "sampled token {token} of {} ({sampling:?})",
            logits.len()
        );
        counts[token as usize] += 1;
    }
    counts.iter().map(|&count| count as f64 / DRAWS as f64).collect()
}

fn sample_frequencies_match_the_nucleus_softmax(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    for (seed, n) in [(71, 2), (72, 10), (73, 37)] {
        let logits = random(seed, n, -2.0, 2.0);
        for temperature in [0.5f32, 1.0, 1.7] {
            for top_p in [1.0f32, 0.8] {
                let sampling = Sampling { temperature, top_p };
                let actual = sample_frequencies(&device, &logits, sampling);

                let max = logits
                    .iter()
                    .map(|&l| f64::from(l))
                    .fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = logits
                    .iter()
                    .map(|&l| ((f64::from(l) - max) / f64::from(temperature)).exp())
                    .collect();
                let total: f64 = weights.iter().sum();
                // The nucleus: the most likely tokens until their mass reaches top_p.
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]));
                let (mut kept, mut mass) = (0, 0.0);
                while mass < f64::from(top_p) && kept < n {
                    mass += weights[order[kept]] / total;
                    kept += 1;
                }
                let nucleus = &order[..kept];
                let nucleus_total: f64 = nucleus.iter().map(|&i| weights[i]).sum();
                let mut expected = vec![0.0; n];
                for &i in nucleus {
                    expected[i] = weights[i] / nucleus_total;
                }
                let what = format!("sample frequencies of {n} logits, {sampling:?}");
                let actual: Vec<f32> = actual.iter().map(|&f| f as f32).collect();
                assert_close(&actual, &expected, 0.0, 0.01, &what);
            }
        }
    }
    assert_dispatched(&device, OpKind::Sample, "sample_");
}

fn sample_with_small_top_p_picks_the_top_token(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    for (seed, n) in [(81, 2), (82, 10), (83, 300)] {
        let logits = random(seed, n, -2.0, 2.0);
        let top = reference_argmax(&logits) as usize;
        for temperature in [0.5, 1.0, 3.0] {
            // Below 1/n, the top token alone reaches top_p.
            let sampling = Sampling {
                temperature,
                top_p: 0.001,
            };
            let frequencies = sample_frequencies(&device, &logits, sampling);
            assert_eq!(
                frequencies[top], 1.0,
                "{n} logits, {sampling:?}: top token {top}, frequencies {frequencies:?}"
            );
        }
    }
    assert_dispatched(&device, OpKind::Sample, "sample_");
}

fn copy_copies_every_byte(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::copy::Copy::new(&ops::registry(), &device).unwrap();
    for n in [1, 7, 1000, 300_001] {
        let source = random(91 + n as u64, n, -1.0, 1.0);
        let destination = poisoned(&device, &[n]);
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &device.buffer_from_slice(&source, &[n]).unwrap(),
            &destination,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        assert_close(
            &destination.to_vec::<f32>().unwrap(),
            &widen(&source),
            0.0,
            0.0,
            &format!("copy of {n} f32"),
        );
    }
    // Two-byte elements go as 32-bit words: an even count copies, an odd one is refused.
    let halves: Vec<bf16> = random(92, 6, -1.0, 1.0)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let destination = device.buffer_from_slice(&[bf16::NAN; 6], &[6]).unwrap();
    let mut encoder = device.command_encoder();
    op.encode(
        &mut encoder,
        &device.buffer_from_slice(&halves, &[6]).unwrap(),
        &destination,
    )
    .unwrap();
    encoder.commit_and_wait().unwrap();
    let bits = |values: &[bf16]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&destination.to_vec::<bf16>().unwrap()),
        bits(&halves),
        "copy of 6 bf16"
    );
    let odd = device.alloc(DType::BF16, &[3]).unwrap();
    assert!(
        op.encode(&mut encoder, &odd, &device.alloc(DType::BF16, &[3]).unwrap())
            .is_err()
    );
    assert!(
        op.encode(&mut encoder, &odd, &device.alloc(DType::F16, &[3]).unwrap())
            .is_err()
    );
    assert_dispatched(&device, OpKind::Copy, "copy_");
}

kernelscope::device_tests!(
    embedding_copies_the_token_rows,
    embedding_shares_sum_to_the_whole_table,
    embedding_rejects_a_token_beyond_the_vocabulary,
    rms_norm_matches_reference,
    rms_norm_refuses_other_output_dtypes,
    matvec_matches_reference,
    matmul_matches_reference,
    rope_inverse_frequencies_unscaled,
    rope_inverse_frequencies_llama3_scaling,
    rope_inverse_frequencies_linear_scaling,
    rope_inverse_frequencies_yarn_scaling,
    rope_rotates_half_by_position,
    silu_mul_matches_reference,
    add_matches_reference,
    add_refuses_an_addend_whose_length_does_not_divide,
    argmax_picks_the_first_largest,
    sample_at_temperature_zero_is_argmax,
    sample_frequencies_match_the_nucleus_softmax,
    sample_with_small_top_p_picks_the_top_token,
    copy_copies_every_byte,
);
