//! The KV cache and attention ops against an independent f64 reference
//! written here: kv_append in every cache dtype; split decode attention at
//! positions on both sides of split boundaries and far beyond what one
//! block could hold (12,288, 65,536), replayed from one capture at several
//! positions; causal prefill attention over a chunk with and without
//! history and at repeated, out-of-order positions, its mask checked by
//! changing what a row may not see; and a bf16 cache against an f32 one.
//! Cached values are rounded to the cache dtype before the reference is
//! computed, so one f32-math tolerance serves every dtype; narrowed
//! outputs are compared within their rounding.

use half::{bf16, f16};
use kernelscope::ops;
use kernelscope::ops::attention::{Attention, Heads};
use kernelscope::ops::kv_append::KvAppend;
use kernelscope::ops::prefill_attention::PrefillAttention;
use kernelscope::profile::ProfileLevel;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// f32 softmax and sums against f64: relative error of a few ulps of the
/// largest terms, over up to 70,000 positions.
const REL_TOL: f64 = 2e-4;
const ABS_TOL: f64 = 2e-5;

fn device_for(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

fn random(seed: u64, count: usize, low: f32, high: f32) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, low, high)
}

/// `values` rounded to `dtype`, widened back.
fn rounded(values: &[f32], dtype: DType) -> Vec<f64> {
    values
        .iter()
        .map(|&v| match dtype {
            DType::F16 => f16::from_f32(v).to_f64(),
            DType::BF16 => bf16::from_f32(v).to_f64(),
            _ => f64::from(v),
        })
        .collect()
}

/// A buffer of `values` in `dtype`.
fn upload(device: &Device, values: &[f32], dtype: DType, shape: &[usize]) -> Buffer {
    match dtype {
        DType::F16 => {
            let narrow: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            device.buffer_from_slice(&narrow, shape).unwrap()
        }
        DType::BF16 => {
            let narrow: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            device.buffer_from_slice(&narrow, shape).unwrap()
        }
        _ => device.buffer_from_slice(values, shape).unwrap(),
    }
}

/// A buffer's values widened to f64, whatever its dtype.
fn download(buffer: &Buffer) -> Vec<f64> {
    match buffer.dtype() {
        DType::F16 => buffer
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f64())
            .collect(),
        DType::BF16 => buffer
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f64())
            .collect(),
        _ => buffer
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect(),
    }
}

/// A buffer of `dtype` filled with NaN.
fn poisoned(device: &Device, dtype: DType, len: usize) -> Buffer {
    upload(device, &vec![f32::NAN; len], dtype, &[len])
}

fn assert_close(actual: &[f64], expected: &[f64], rel_tol: f64, abs_tol: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bad: Vec<usize> = (0..actual.len())
        .filter(|&i| {
            let error = (actual[i] - expected[i]).abs();
            error.is_nan() || error > abs_tol + rel_tol * expected[i].abs()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} values mismatch; first [{}] expected {:e}, got {:e}",
        bad.len(),
        actual.len(),
        bad[0],
        expected[bad[0]],
        actual[bad[0]]
    );
}

/// Attention of one query row (`[heads.query * dim]`) over cache positions
/// `0..=position` (keys and values `[positions, kv_dim]`, already rounded).
fn reference(query: &[f32], keys: &[f64], values: &[f64], heads: Heads, position: usize) -> Vec<f64> {
    let (d, group) = (heads.dim, heads.query / heads.key_value);
    let kv_dim = heads.key_value * d;
    let mut out = vec![0.0; heads.query * d];
    for h in 0..heads.query {
        let kv = (h / group) * d;
        let scores: Vec<f64> = (0..=position)
            .map(|p| {
                let dot: f64 = (0..d)
                    .map(|i| f64::from(query[h * d + i]) * keys[p * kv_dim + kv + i])
                    .sum();
                dot / (d as f64).sqrt()
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = scores.iter().map(|s| (s - max).exp()).sum();
        for (p, score) in scores.iter().enumerate() {
            let weight = (score - max).exp() / total;
            for i in 0..d {
                out[h * d + i] += weight * values[p * kv_dim + kv + i];
            }
        }
    }
    out
}

fn kv_append_writes_exactly_its_rows(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let max_positions = 40;
    for dtype in DTYPES {
        let op = KvAppend::new(&ops::registry(), &device, dtype).unwrap();
        for kv_dim in [5, 32] {
            for targets in [vec![0usize], vec![39], vec![7, 2, 39]] {
                let rows = targets.len();
                let seed = (kv_dim * 100 + rows) as u64;
                let old_keys = random(seed, max_positions * kv_dim, -1.0, 1.0);
                let old_values = random(seed + 1, max_positions * kv_dim, -1.0, 1.0);
                let (key, value) = (
                    random(seed + 2, rows * kv_dim, 2.0, 3.0),
                    random(seed + 3, rows * kv_dim, -3.0, -2.0),
                );
                let key_cache = upload(&device, &old_keys, dtype, &[max_positions, kv_dim]);
                let value_cache = upload(&device, &old_values, dtype, &[max_positions, kv_dim]);
                // The positions sit after two unrelated slots, as the step buffer's do.
                let mut slots = vec![11u32, 12];
                slots.extend(targets.iter().map(|&t| t as u32));
                let positions = device.buffer_from_slice(&slots, &[slots.len()]).unwrap();
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &device.buffer_from_slice(&key, &[rows, kv_dim]).unwrap(),
                    &device.buffer_from_slice(&value, &[rows, kv_dim]).unwrap(),
                    &key_cache,
                    &value_cache,
                    &positions,
                    2,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();
                let (mut expected_keys, mut expected_values) =
                    (rounded(&old_keys, dtype), rounded(&old_values, dtype));
                for (row, &target) in targets.iter().enumerate() {
                    let (source, destination) = (
                        row * kv_dim..(row + 1) * kv_dim,
                        target * kv_dim..(target + 1) * kv_dim,
                    );
                    expected_keys[destination.clone()].copy_from_slice(&rounded(&key[source.clone()], dtype));
                    expected_values[destination].copy_from_slice(&rounded(&value[source], dtype));
                }
                let what = format!("kv_append {dtype} kv_dim {kv_dim} rows {targets:?}");
                assert_close(
                    &download(&key_cache),
                    &expected_keys,
                    0.0,
                    0.0,
                    &format!("{what} keys"),
                );
                assert_close(
                    &download(&value_cache),
                    &expected_values,
                    0.0,
                    0.0,
                    &format!("{what} values"),
                );
            }
        }
    }
}

fn heads(query: usize, key_value: usize, dim: usize) -> Heads {
    Heads {
        query,
        key_value,
        dim,
    }
}

/// Runs decode attention once at `position` (through a slot at index 2).
#[allow(clippy::too_many_arguments)]
fn decode_once(
    device: &Device,
    op: &Attention,
    heads: Heads,
    query: &[f32],
    key_cache: &Buffer,
    value_cache: &Buffer,
    max_positions: usize,
    position: usize,
) -> Vec<f64> {
    let slot = device
        .buffer_from_slice(&[0u32, 9, position as u32], &[3])
        .unwrap();
    let scratch = device
        .alloc(DType::F32, &[Attention::scratch_len(heads, max_positions)])
        .unwrap();
    let out = poisoned(device, DType::F32, heads.query * heads.dim);
    let query = device
        .buffer_from_slice(query, &[heads.query, heads.dim])
        .unwrap();
    let mut encoder = device.command_encoder();
    op.encode(
        &mut encoder,
        &query,
        key_cache,
        value_cache,
        &slot,
        2,
        heads,
        position + 1,
        &scratch,
        &out,
    )
    .unwrap();
    encoder.commit_and_wait().unwrap();
    download(&out)
}

/// A layer's caches on the device and their length.
struct Caches<'a> {
    keys: &'a Buffer,
    values: &'a Buffer,
    max_positions: usize,
}

/// Decode attention at each of `positions` (a random query each, seeded by
/// `seed` + position) against the f64 reference over `expected` (the
/// caches' keys and values as stored).
#[allow(clippy::too_many_arguments)]
fn check_positions(
    device: &Device,
    op: &Attention,
    heads: Heads,
    caches: &Caches<'_>,
    expected: &(Vec<f64>, Vec<f64>),
    positions: &[usize],
    seed: u64,
    what: &str,
) {
    for &position in positions {
        let query = random(seed + position as u64, heads.query * heads.dim, -3.0, 3.0);
        let out = decode_once(
            device,
            op,
            heads,
            &query,
            caches.keys,
            caches.values,
            caches.max_positions,
            position,
        );
        let reference = reference(&query, &expected.0, &expected.1, heads, position);
        assert_close(
            &out,
            &reference,
            REL_TOL,
            ABS_TOL,
            &format!("{what} at {position}"),
        );
    }
}

fn decode_attention_matches_reference(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    // Each case names the split kernel it must take (the cache dtype
    // appended): the vector kernels for the padded head dim and group, the
    // generic one for heads that are no whole number of 16-byte loads or
    // longer than 128.
    let cases = [
        (heads(8, 2, 16), 1000, vec![0, 1, 62, 63, 64, 65, 999], "d64_g4"),
        (heads(4, 4, 8), 40, vec![0, 5, 39], "d64_g1"),
        (heads(3, 1, 5), 300, vec![0, 18, 19, 20, 299], "generic"),
        (heads(32, 8, 128), 200, vec![0, 127, 199], "d128_g4"),
        // Groups of two, and the first positions, where a split holds one
        // position or none.
        (heads(4, 2, 32), 130, vec![0, 1, 2, 3, 128, 129], "d64_g2"),
        (heads(8, 1, 64), 70_000, vec![12_300, 65_600, 69_999], "d64_g8"),
        // Qwen2-0.5B's geometry: groups of 7 padded to 8, and a head of 64.
        (heads(14, 2, 64), 3000, vec![0, 9, 2999], "d64_g8"),
        // A head of 96 padded to 128 (lanes past the head idle), groups of 1.
        (heads(3, 3, 96), 500, vec![0, 63, 499], "d128_g1"),
        (heads(16, 2, 128), 20_000, vec![1, 13_000, 19_999], "d128_g8"),
        (heads(4, 2, 128), 777, vec![0, 776], "d128_g2"),
        (heads(4, 1, 160), 300, vec![0, 299], "generic"),
    ];
    for dtype in DTYPES {
        let op = Attention::new(&ops::registry(), &device, dtype).unwrap();
        for (heads, max_positions, positions, kernel) in &cases {
            let (heads, max_positions) = (*heads, *max_positions);
            let kv_dim = heads.key_value * heads.dim;
            let seed = (heads.query * 1000 + heads.dim + max_positions) as u64;
            let keys = random(seed + 1, max_positions * kv_dim, -1.0, 1.0);
            let values = random(seed + 2, max_positions * kv_dim, -1.0, 1.0);
            let key_cache = upload(&device, &keys, dtype, &[max_positions, kv_dim]);
            let value_cache = upload(&device, &values, dtype, &[max_positions, kv_dim]);
            let expected_kernel = match *kernel {
                "generic" => format!("attention_split_{dtype}"),
                vector => format!("attention_split_{vector}_{dtype}"),
            };
            assert_eq!(
                op.split_kernel_name(heads, &key_cache, &value_cache),
                expected_kernel,
                "{heads:?} {dtype}"
            );
            let caches = Caches {
                keys: &key_cache,
                values: &value_cache,
                max_positions,
            };
            let expected = (rounded(&keys, dtype), rounded(&values, dtype));
            let what = format!(
                "decode attention {dtype} {heads:?} of {max_positions} ({} splits)",
                Attention::splits(heads, max_positions)
            );
            check_positions(&device, &op, heads, &caches, &expected, positions, seed, &what);
        }
    }
}

/// Caches that start one element past a 16-byte boundary (a slice of a
/// larger buffer) cannot be read 16 bytes at a time: they take the generic
/// kernel, with the same answer.
fn decode_attention_from_unaligned_caches(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let heads = heads(8, 2, 128);
    let max_positions = 600;
    let kv_dim = heads.key_value * heads.dim;
    let length = max_positions * kv_dim;
    for dtype in DTYPES {
        let op = Attention::new(&ops::registry(), &device, dtype).unwrap();
        let keys = random(91, length + 1, -1.0, 1.0);
        let values = random(92, length + 1, -1.0, 1.0);
        let key_buffer = upload(&device, &keys, dtype, &[length + 1]);
        let value_buffer = upload(&device, &values, dtype, &[length + 1]);
        let shape = [max_positions, kv_dim];
        let key_cache = key_buffer.slice(1, length).unwrap().reshape(&shape).unwrap();
        let value_cache = value_buffer.slice(1, length).unwrap().reshape(&shape).unwrap();
        assert_eq!(
            op.split_kernel_name(heads, &key_cache, &value_cache),
            format!("attention_split_{dtype}")
        );
        let caches = Caches {
            keys: &key_cache,
            values: &value_cache,
            max_positions,
        };
        let expected = (rounded(&keys[1..], dtype), rounded(&values[1..], dtype));
        let what = format!("decode attention {dtype} from unaligned caches");
        check_positions(&device, &op, heads, &caches, &expected, &[0, 311, 599], 93, &what);
    }
}

/// One capture, replayed with the position slot changed between replays:
/// each replay answers for its own position (what graph-mode decode does).
fn decode_attention_replays_at_any_position(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let heads = Heads {
        query: 4,
        key_value: 2,
        dim: 32,
    };
    let max_positions = 5000;
    let kv_dim = heads.key_value * heads.dim;
    let op = Attention::new(&ops::registry(), &device, DType::BF16).unwrap();
    let keys = random(71, max_positions * kv_dim, -1.0, 1.0);
    let values = random(72, max_positions * kv_dim, -1.0, 1.0);
    let key_cache = upload(&device, &keys, DType::BF16, &[max_positions, kv_dim]);
    let value_cache = upload(&device, &values, DType::BF16, &[max_positions, kv_dim]);
    let (keys, values) = (rounded(&keys, DType::BF16), rounded(&values, DType::BF16));
    let query_values = random(73, heads.query * heads.dim, -3.0, 3.0);
    let query = device
        .buffer_from_slice(&query_values, &[heads.query, heads.dim])
        .unwrap();
    let slot = device.buffer_from_slice(&[0u32, 3], &[2]).unwrap();
    let scratch = device
        .alloc(DType::F32, &[Attention::scratch_len(heads, max_positions)])
        .unwrap();
    let out = poisoned(&device, DType::F32, heads.query * heads.dim);
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    op.encode(
        &mut encoder,
        &query,
        &key_cache,
        &value_cache,
        &slot,
        1,
        heads,
        4,
        &scratch,
        &out,
    )
    .unwrap();
    let graph = encoder.end_capture().unwrap();
    for position in [3usize, 4999, 1, 2500] {
        slot.write_from(&[0u32, position as u32]).unwrap();
        encoder.replay_at(&graph, position + 1).unwrap();
        encoder.commit_and_wait().unwrap();
        let expected = reference(&query_values, &keys, &values, heads, position);
        assert_close(
            &download(&out),
            &expected,
            REL_TOL,
            ABS_TOL,
            &format!("replay at {position}"),
        );
    }
}

/// The same random keys and values cached as bf16 and as f32: attention
/// outputs (weighted means of values in [-1, 1]) agree within 2e-2. Each
/// cached value is off by at most 2^-9 of itself in bf16, which moves the
/// output by about that much, and the scores (|q·k|/sqrt(d) up to ~10 here)
/// by ~2 %·|score| at worst, which shifts the softmax weights by about as
/// much.
fn bf16_cache_stays_close_to_f32(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let heads = Heads {
        query: 8,
        key_value: 2,
        dim: 64,
    };
    let max_positions = 3000;
    let kv_dim = heads.key_value * heads.dim;
    let keys = random(81, max_positions * kv_dim, -1.0, 1.0);
    let values = random(82, max_positions * kv_dim, -1.0, 1.0);
    let query = random(83, heads.query * heads.dim, -3.0, 3.0);
    let mut outputs = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        let op = Attention::new(&ops::registry(), &device, dtype).unwrap();
        let key_cache = upload(&device, &keys, dtype, &[max_positions, kv_dim]);
        let value_cache = upload(&device, &values, dtype, &[max_positions, kv_dim]);
        outputs.push(decode_once(
            &device,
            &op,
            heads,
            &query,
            &key_cache,
            &value_cache,
            max_positions,
            2999,
        ));
    }
    assert_close(&outputs[1], &outputs[0], 0.0, 2e-2, "bf16 cache against f32");
    assert_ne!(outputs[1], outputs[0], "the bf16 cache must round something");
}

/// Runs prefill attention for `rows` rows whose positions are
/// `start..start + rows` (after two unrelated slots).
#[allow(clippy::too_many_arguments)]
fn prefill_once(
    device: &Device,
    op: &PrefillAttention,
    out_dtype: DType,
    heads: Heads,
    query: &[f32],
    key_cache: &Buffer,
    value_cache: &Buffer,
    start: usize,
    rows: usize,
) -> Vec<f64> {
    let mut slots = vec![5u32, 6];
    slots.extend((start..start + rows).map(|p| p as u32));
    let positions = device.buffer_from_slice(&slots, &[slots.len()]).unwrap();
    let query = device
        .buffer_from_slice(query, &[rows, heads.query, heads.dim])
        .unwrap();
    let out = poisoned(device, out_dtype, rows * heads.query * heads.dim);
    let mut encoder = device.command_encoder();
    op.encode(
        &mut encoder,
        &query,
        key_cache,
        value_cache,
        &positions,
        2,
        heads,
        start + rows,
        &out,
    )
    .unwrap();
    encoder.commit_and_wait().unwrap();
    download(&out)
}

/// The reference for every row, rounded to `out_dtype`'s neighbourhood by
/// the tolerance: one rounding of the output (2^-8 relative for bf16,
/// 2^-11 for f16) on top of the f32 math.
fn prefill_reference(
    query: &[f32],
    keys: &[f64],
    values: &[f64],
    heads: Heads,
    start: usize,
    rows: usize,
) -> Vec<f64> {
    let width = heads.query * heads.dim;
    (0..rows)
        .flat_map(|row| {
            reference(
                &query[row * width..(row + 1) * width],
                keys,
                values,
                heads,
                start + row,
            )
        })
        .collect()
}

fn output_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 1.0 / 128.0,
        DType::F16 => 1.0 / 1024.0,
        _ => REL_TOL,
    }
}

/// With a bf16 cache and a head dim of 64 or 128 the GPU runs the
/// tensor-core kernel, which rounds the scaled queries and the softmax
/// weights to bf16 (2^-9 relative each, as FlashAttention does): outputs,
/// weighted means of values in [-1, 1], move by up to ~1e-2 where scores are
/// large. The CPU reference and the CUDA-core kernel stay within `REL_TOL`.
fn cache_tolerance(cache: DType, heads: Heads) -> (f64, f64) {
    if cache == DType::BF16 && (heads.dim == 64 || heads.dim == 128) {
        (1e-2, 1e-2)
    } else {
        (0.0, 0.0)
    }
}

fn prefill_attention_matches_reference(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let geometries = [
        Heads {
            query: 8,
            key_value: 2,
            dim: 16,
        },
        Heads {
            query: 3,
            key_value: 1,
            dim: 5,
        },
        Heads {
            query: 4,
            key_value: 1,
            dim: 128,
        },
        Heads {
            query: 2,
            key_value: 1,
            dim: 160,
        },
    ];
    let max_positions = 160;
    for cache_dtype in DTYPES {
        for out_dtype in DTYPES {
            let op = PrefillAttention::new(&ops::registry(), &device, cache_dtype, out_dtype).unwrap();
            for heads in geometries {
                let kv_dim = heads.key_value * heads.dim;
                let seed = (heads.query * 1000 + heads.dim) as u64;
                let keys = random(seed + 1, max_positions * kv_dim, -1.0, 1.0);
                let values = random(seed + 2, max_positions * kv_dim, -1.0, 1.0);
                let key_cache = upload(&device, &keys, cache_dtype, &[max_positions, kv_dim]);
                let value_cache = upload(&device, &values, cache_dtype, &[max_positions, kv_dim]);
                let (keys, values) = (rounded(&keys, cache_dtype), rounded(&values, cache_dtype));
                for (start, rows) in [
                    (0, 1),
                    (0, 2),
                    (0, 7),
                    (0, 33),
                    (0, 65),
                    (20, 1),
                    (20, 17),
                    (90, 70),
                ] {
                    let query = random(
                        seed + (start * 100 + rows) as u64,
                        rows * heads.query * heads.dim,
                        -3.0,
                        3.0,
                    );
                    let out = prefill_once(
                        &device,
                        &op,
                        out_dtype,
                        heads,
                        &query,
                        &key_cache,
                        &value_cache,
                        start,
                        rows,
                    );
                    let expected = prefill_reference(&query, &keys, &values, heads, start, rows);
                    let what = format!(
                        "prefill attention {cache_dtype}->{out_dtype} {heads:?} rows {start}..{}",
                        start + rows
                    );
                    let (extra_relative, extra_absolute) = cache_tolerance(cache_dtype, heads);
                    assert_close(
                        &out,
                        &expected,
                        output_tolerance(out_dtype) + extra_relative,
                        ABS_TOL + extra_absolute,
                        &what,
                    );
                }
            }
        }
    }
}

/// Far into a long cache: three rows past 65,536 positions.
fn prefill_attention_at_long_context(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let heads = Heads {
        query: 2,
        key_value: 1,
        dim: 16,
    };
    let max_positions = 70_000;
    let op = PrefillAttention::new(&ops::registry(), &device, DType::BF16, DType::F32).unwrap();
    let keys = random(91, max_positions * heads.dim, -1.0, 1.0);
    let values = random(92, max_positions * heads.dim, -1.0, 1.0);
    let key_cache = upload(&device, &keys, DType::BF16, &[max_positions, heads.dim]);
    let value_cache = upload(&device, &values, DType::BF16, &[max_positions, heads.dim]);
    let (keys, values) = (rounded(&keys, DType::BF16), rounded(&values, DType::BF16));
    for start in [12_290, 65_540] {
        let query = random(93 + start as u64, 3 * heads.query * heads.dim, -3.0, 3.0);
        let out = prefill_once(
            &device,
            &op,
            DType::F32,
            heads,
            &query,
            &key_cache,
            &value_cache,
            start,
            3,
        );
        let expected = prefill_reference(&query, &keys, &values, heads, start, 3);
        assert_close(&out, &expected, REL_TOL, ABS_TOL, &format!("prefill at {start}"));
    }
}

/// The causal mask: changing the key and value at a position changes the
/// rows at or after it and no row before it.
fn prefill_attention_is_causal(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    // f32 on CUDA cores, and bf16 with a head dim the tensor-core kernel takes.
    for (cache_dtype, dim) in [(DType::F32, 32), (DType::BF16, 64)] {
        let heads = Heads {
            query: 4,
            key_value: 2,
            dim,
        };
        let (max_positions, rows) = (160, 140);
        let kv_dim = heads.key_value * heads.dim;
        let op = PrefillAttention::new(&ops::registry(), &device, cache_dtype, DType::F32).unwrap();
        let mut keys = random(101, max_positions * kv_dim, -1.0, 1.0);
        let mut values = random(102, max_positions * kv_dim, -1.0, 1.0);
        let query = random(103, rows * heads.query * heads.dim, -3.0, 3.0);
        let run = |keys: &[f32], values: &[f32]| {
            let key_cache = upload(&device, keys, cache_dtype, &[max_positions, kv_dim]);
            let value_cache = upload(&device, values, cache_dtype, &[max_positions, kv_dim]);
            prefill_once(
                &device,
                &op,
                DType::F32,
                heads,
                &query,
                &key_cache,
                &value_cache,
                0,
                rows,
            )
        };
        let before = run(&keys, &values);
        // In the second key tile of the tensor-core kernel, not on a tile edge.
        let changed = 93;
        for i in 0..kv_dim {
            keys[changed * kv_dim + i] += 0.5;
            values[changed * kv_dim + i] -= 0.5;
        }
        let after = run(&keys, &values);
        let width = heads.query * heads.dim;
        for row in 0..rows {
            let (a, b) = (
                &after[row * width..(row + 1) * width],
                &before[row * width..(row + 1) * width],
            );
            if row < changed {
                assert_eq!(a, b, "{cache_dtype}: row {row} saw position {changed}");
            } else {
                assert_ne!(a, b, "{cache_dtype}: row {row} must see position {changed}");
            }
        }
    }
}

/// Rows need not be consecutive positions: repeated, out-of-order and
/// far-apart positions in one chunk (as several sequences sharing a batch
/// would give) each attend their own prefix. So many rows at low positions
/// also make the declared work's closed form for a consecutive chunk
/// (rows × context_end − rows·(rows − 1)/2) negative, which must not
/// overflow.
fn prefill_attention_takes_any_positions(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let slots: Vec<u32> = vec![9, 0, 2, 0, 1, 0, 0, 2, 1, 0, 2];
    let (first, rows, context_end) = (1, 9, 3);
    // f32 on CUDA cores, and bf16 with a head dim the tensor-core kernel takes.
    for (cache_dtype, dim) in [(DType::F32, 16), (DType::BF16, 64)] {
        let heads = Heads {
            query: 4,
            key_value: 2,
            dim,
        };
        let max_positions = 8;
        let kv_dim = heads.key_value * heads.dim;
        let width = heads.query * heads.dim;
        let keys = random(111, max_positions * kv_dim, -1.0, 1.0);
        let values = random(112, max_positions * kv_dim, -1.0, 1.0);
        let query = random(113, rows * width, -3.0, 3.0);
        let key_cache = upload(&device, &keys, cache_dtype, &[max_positions, kv_dim]);
        let value_cache = upload(&device, &values, cache_dtype, &[max_positions, kv_dim]);
        let positions = device.buffer_from_slice(&slots, &[slots.len()]).unwrap();
        let op = PrefillAttention::new(&ops::registry(), &device, cache_dtype, DType::F32).unwrap();
        let query_buffer = device
            .buffer_from_slice(&query, &[rows, heads.query, heads.dim])
            .unwrap();
        let out = poisoned(&device, DType::F32, rows * width);
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &query_buffer,
            &key_cache,
            &value_cache,
            &positions,
            first,
            heads,
            context_end,
            &out,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        let (keys, values) = (rounded(&keys, cache_dtype), rounded(&values, cache_dtype));
        let expected: Vec<f64> = (0..rows)
            .flat_map(|row| {
                reference(
                    &query[row * width..(row + 1) * width],
                    &keys,
                    &values,
                    heads,
                    slots[first + row] as usize,
                )
            })
            .collect();
        let (extra_relative, extra_absolute) = cache_tolerance(cache_dtype, heads);
        assert_close(
            &download(&out),
            &expected,
            REL_TOL + extra_relative,
            ABS_TOL + extra_absolute,
            &format!(
                "prefill attention {cache_dtype} at positions {:?}",
                &slots[first..first + rows]
            ),
        );
    }
}

kernelscope::device_tests!(
    kv_append_writes_exactly_its_rows,
    decode_attention_matches_reference,
    decode_attention_from_unaligned_caches,
    decode_attention_replays_at_any_position,
    bf16_cache_stays_close_to_f32,
    prefill_attention_matches_reference,
    prefill_attention_at_long_context,
    prefill_attention_is_causal,
    prefill_attention_takes_any_positions,
);
