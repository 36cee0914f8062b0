//! Causal prefill attention: with and without history, at long context, its mask, any positions.

use kernelscope::ops;
use kernelscope::ops::attention::Heads;
use kernelscope::ops::prefill_attention::PrefillAttention;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device};

use crate::helpers::{
    ABS_TOL, DTYPES, REL_TOL, assert_close, device_for, download, poisoned, random, reference, rounded,
    upload,
};

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
    prefill_attention_matches_reference,
    prefill_attention_at_long_context,
    prefill_attention_is_causal,
    prefill_attention_takes_any_positions,
);
