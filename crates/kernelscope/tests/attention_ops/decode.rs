//! Split decode attention: the kernel each geometry takes, unaligned caches, replays, a bf16 cache.

use kernelscope::ops;
use kernelscope::ops::attention::{Attention, Heads};
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device};

use crate::helpers::{
    ABS_TOL, DTYPES, REL_TOL, assert_close, device_for, download, poisoned, random, reference, rounded,
    upload,
};

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
    // appended): the vector kernels for the padded head dim and the query
    // heads a block serves (the whole group where the KV heads' splits fill
    // 264 blocks; fewer, over more blocks, in short caches), the generic
    // one for heads that are no whole number of 16-byte loads or longer
    // than 128.
    let cases = [
        (heads(8, 2, 16), 1000, vec![0, 1, 62, 63, 64, 65, 999], "d64_g1"),
        (heads(4, 4, 8), 40, vec![0, 5, 39], "d64_g1"),
        (heads(3, 1, 5), 300, vec![0, 18, 19, 20, 299], "generic"),
        (heads(32, 8, 128), 200, vec![0, 127, 199], "d128_g1"),
        // The first positions, where a split holds one position or none.
        (heads(4, 2, 32), 130, vec![0, 1, 2, 3, 128, 129], "d64_g1"),
        // Groups of four over two blocks of two (70 splits of 2 KV heads).
        (heads(8, 2, 32), 4480, vec![0, 1, 2000, 4479], "d64_g2"),
        (heads(8, 1, 64), 70_000, vec![12_300, 65_600, 69_999], "d64_g8"),
        // Qwen2-0.5B's geometry: groups of 7 over blocks of 4 (the second
        // serving 3), and a head of 64.
        (heads(14, 2, 64), 3000, vec![0, 9, 2999], "d64_g4"),
        // A head of 96 padded to 128 (lanes past the head idle), groups of 1.
        (heads(3, 3, 96), 500, vec![0, 63, 499], "d128_g1"),
        (heads(16, 2, 128), 20_000, vec![1, 13_000, 19_999], "d128_g8"),
        // Qwen3-30B-A3B's geometry in a short cache: groups of 8, a head a block.
        (heads(32, 4, 128), 129, vec![0, 11, 128], "d128_g1"),
        (heads(4, 2, 128), 777, vec![0, 776], "d128_g1"),
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

kernelscope::device_tests!(
    decode_attention_matches_reference,
    decode_attention_from_unaligned_caches,
    decode_attention_replays_at_any_position,
    bf16_cache_stays_close_to_f32,
);
