//! Decode attention quantizing its own output for a quantized o_proj
//! (`Attention::encode_quantized`): the f32 output is the plain op's, bit
//! for bit, and the 8-bit blocks are what quantize_q8 makes of it (written
//! here: the values, then the blocks' scales, then their scaled sums).

use kernelscope::ops;
use kernelscope::ops::attention::{Attention, Heads};
use kernelscope::testing::Backend;
use kernelscope::{DType, Device};

use crate::helpers::{
    ABS_TOL, REL_TOL, assert_close, device_for, download, poisoned, random, reference, rounded, upload,
};

/// `x` staged as the fused quantized products read it: per block of 32 the
/// values rounded at scale max|x| / 127, then every scale, then every
/// scale times its block's sum of rounded values.
fn staged_bytes_of(x: &[f32]) -> Vec<u8> {
    let (mut values, mut scales, mut sums) = (Vec::new(), Vec::new(), Vec::new());
    for block in x.chunks(32) {
        let largest = block
            .iter()
            .fold(0.0f32, |largest, value| largest.max(value.abs()));
        let scale = largest / 127.0;
        let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        let rounded: Vec<i32> = block
            .iter()
            .map(|value| (value * inverse).round() as i32)
            .collect();
        values.extend(rounded.iter().map(|&value| value as i8 as u8));
        scales.extend(scale.to_le_bytes());
        sums.extend((scale * rounded.iter().sum::<i32>() as f32).to_le_bytes());
    }
    [values, scales, sums].concat()
}

/// Runs the op at `position`, plain and quantizing, on one set of caches.
fn plain_and_quantized(
    device: &Device,
    dtype: DType,
    heads: Heads,
    max_positions: usize,
    position: usize,
    seed: u64,
) -> (Vec<f64>, Vec<f32>, Vec<u8>, Vec<f64>) {
    let op = Attention::new(&ops::registry(), device, dtype).unwrap();
    let kv_dim = heads.key_value * heads.dim;
    let keys = random(seed, max_positions * kv_dim, -1.0, 1.0);
    let values = random(seed + 1, max_positions * kv_dim, -1.0, 1.0);
    let query = random(seed + 2, heads.query * heads.dim, -3.0, 3.0);
    let key_cache = upload(device, &keys, dtype, &[max_positions, kv_dim]);
    let value_cache = upload(device, &values, dtype, &[max_positions, kv_dim]);
    let query_buffer = device
        .buffer_from_slice(&query, &[heads.query, heads.dim])
        .unwrap();
    let slot = device.buffer_from_slice(&[position as u32], &[1]).unwrap();
    let scratch = device
        .alloc(DType::F32, &[Attention::scratch_len(heads, max_positions)])
        .unwrap();
    let count = heads.query * heads.dim;
    let plain = poisoned(device, DType::F32, count);
    let out = poisoned(device, DType::F32, count);
    let quantized = device
        .buffer_from_slice(&vec![0xa5u8; count + count / 4], &[count + count / 4])
        .unwrap();
    let mut encoder = device.command_encoder();
    let inputs = (&query_buffer, &key_cache, &value_cache, &slot);
    op.encode(
        &mut encoder,
        inputs.0,
        inputs.1,
        inputs.2,
        inputs.3,
        0,
        heads,
        position + 1,
        &scratch,
        &plain,
    )
    .unwrap();
    op.encode_quantized(
        &mut encoder,
        inputs.0,
        inputs.1,
        inputs.2,
        inputs.3,
        0,
        heads,
        position + 1,
        &scratch,
        &out,
        Some(&quantized),
    )
    .unwrap();
    encoder.commit_and_wait().unwrap();
    let expected = reference(
        &query,
        &rounded(&keys, dtype),
        &rounded(&values, dtype),
        heads,
        position,
    );
    (
        download(&plain),
        out.to_vec::<f32>().unwrap(),
        quantized.to_vec::<u8>().unwrap(),
        expected,
    )
}

fn attention_quantizes_its_output_as_quantize_q8_would(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    // llama-3.2-1b's and llama-3-8b's heads, a head of 96, and several
    // splits at longer context.
    let cases = [
        (
            Heads {
                query: 32,
                key_value: 8,
                dim: 64,
            },
            300,
            171,
        ),
        (
            Heads {
                query: 32,
                key_value: 8,
                dim: 128,
            },
            2_000,
            1_999,
        ),
        (
            Heads {
                query: 6,
                key_value: 2,
                dim: 96,
            },
            90,
            0,
        ),
    ];
    for (case, (heads, max_positions, position)) in cases.into_iter().enumerate() {
        for dtype in [DType::F32, DType::BF16] {
            let what = format!("{heads:?} {dtype} at {position}");
            let (plain, out, quantized, expected) =
                plain_and_quantized(&device, dtype, heads, max_positions, position, 40 + case as u64);
            let out_wide: Vec<f64> = out.iter().map(|&value| f64::from(value)).collect();
            assert_eq!(out_wide, plain, "{what}: the f32 output is the plain op's");
            assert_close(&out_wide, &expected, REL_TOL, ABS_TOL, &what);
            assert_eq!(
                quantized,
                staged_bytes_of(&out),
                "{what}: quantized as quantize_q8 would"
            );
        }
    }
}

fn attention_refuses_to_quantize_what_it_cannot(backend: Backend) {
    let Some(device) = device_for(backend) else {
        return;
    };
    let op = Attention::new(&ops::registry(), &device, DType::F32).unwrap();
    let try_heads = |heads: Heads, quantized_len: usize| {
        let kv_dim = heads.key_value * heads.dim;
        let cache = device.alloc(DType::F32, &[16, kv_dim]).unwrap();
        let query = device.alloc(DType::F32, &[heads.query, heads.dim]).unwrap();
        let out = device.alloc(DType::F32, &[heads.query, heads.dim]).unwrap();
        let slot = device.buffer_from_slice(&[3u32], &[1]).unwrap();
        let scratch = device
            .alloc(DType::F32, &[Attention::scratch_len(heads, 16)])
            .unwrap();
        let quantized = device.alloc(DType::U8, &[quantized_len]).unwrap();
        let mut encoder = device.command_encoder();
        op.encode_quantized(
            &mut encoder,
            &query,
            &cache,
            &cache,
            &slot,
            0,
            heads,
            4,
            &scratch,
            &out,
            Some(&quantized),
        )
        .map(|_| ())
        .map_err(|error| error.to_string())
    };
    let uneven = Heads {
        query: 4,
        key_value: 2,
        dim: 48,
    };
    let error = try_heads(uneven, 4 * 48 + 48).expect_err("a head of 48 is not whole blocks of 32");
    assert!(error.contains("48"), "{error}");
    let heads = Heads {
        query: 4,
        key_value: 2,
        dim: 64,
    };
    let error = try_heads(heads, 4 * 64).expect_err("no room for the scales");
    assert!(error.contains("quantized output"), "{error}");
    try_heads(heads, 4 * 64 + 64).expect("the right size");
}

kernelscope::device_tests!(
    attention_quantizes_its_output_as_quantize_q8_would,
    attention_refuses_to_quantize_what_it_cannot,
);
