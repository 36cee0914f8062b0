//! Qwen3's fused decode prologue (`rope_append_normed`: each head of q and
//! k RMS-normalised, RoPE, the KV append) against the ops it replaces on
//! the same device (two `head_norm`s, then `rope_append`), for every
//! norm-weight and cache dtype, at head sizes under, at and over a warp's
//! width and odd head counts, on seeded random values with the caches'
//! other rows random too (nothing else may be written). The arithmetic is
//! the same, but CUDA's compiler may contract a rotation's two products
//! into a multiply-add either way round in two kernels (seen on an H200),
//! so the query and the key agree to f32 rounding (a cache in f16 or bf16
//! to one step of its dtype); the copied values agree exactly.

use half::{bf16, f16};
use kernelscope::ops::attention::Heads;
use kernelscope::ops::head_norm::HeadNorm;
use kernelscope::ops::rope::{RopeFrequencies, inverse_frequencies};
use kernelscope::ops::rope_append::RopeAppend;
use kernelscope::ops::rope_append::normed::RopeAppendNormed;
use kernelscope::profile::ProfileLevel;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions, OpKind, Primitive};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const EPS: f32 = 1e-6;

fn random(seed: u64, count: usize, low: f32, high: f32) -> Vec<f32> {
    SplitMix64::new(seed).vec_f32(count, low, high)
}

/// `values` rounded to `dtype` and uploaded.
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
        _ => buffer
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect(),
    }
}

/// The relative step of `dtype`: what one rounding of it may move a value.
fn step_of(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 4e-7,
        DType::F16 => 1.0 / 1024.0,
        _ => 1.0 / 128.0,
    }
}

/// Every pair within `steps` steps of `dtype`, relative to the larger or
/// to 1 (the normalised heads' scale, so that a rotation's cancellation,
/// where the two products nearly meet, is judged by the products' size).
fn assert_within(actual: &[f32], expected: &[f32], dtype: DType, steps: f32, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}");
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        let bound = steps * step_of(dtype) * a.abs().max(e.abs()).max(1.0);
        assert!((a - e).abs() <= bound, "{what} [{index}]: {a} against {e}");
    }
}

fn fused_equals_head_norms_then_rope_append(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let registry = kernelscope::ops::registry();
    let geometries = [(4, 2, 8), (3, 3, 6), (32, 8, 128), (4, 2, 48), (5, 1, 64)];
    for weight_dtype in DTYPES {
        for cache_dtype in DTYPES {
            let fused = RopeAppendNormed::new(&registry, &device, weight_dtype, cache_dtype).unwrap();
            let (head_norm, rope_append) = (
                HeadNorm::new(&registry, &device, weight_dtype).unwrap(),
                RopeAppend::new(&registry, &device, cache_dtype).unwrap(),
            );
            for (case, (query_heads, kv_heads, dim)) in geometries.into_iter().enumerate() {
                let heads = Heads {
                    query: query_heads,
                    key_value: kv_heads,
                    dim,
                };
                let (q, kv, positions) = (query_heads * dim, kv_heads * dim, 29);
                let seed = 500 * case as u64 + 7;
                let (query, key, value) = (
                    random(seed, q, -3.0, 3.0),
                    random(seed + 1, kv, -3.0, 3.0),
                    random(seed + 2, kv, -1.0, 1.0),
                );
                let norms = [random(seed + 3, dim, 0.5, 1.5), random(seed + 4, dim, 0.5, 1.5)]
                    .map(|values| upload(&device, weight_dtype, &values, &[dim]));
                let cache_values = random(seed + 5, positions * kv, -1.0, 1.0);
                let inverse = inverse_frequencies(dim, 1_000_000.0, None);
                let frequencies = RopeFrequencies {
                    inverse_frequencies: device.buffer_from_slice(&inverse, &[inverse.len()]).unwrap(),
                    attention_scaling: 1.0,
                };
                let step = device.buffer_from_slice(&[3u32, 11 + case as u32], &[2]).unwrap();
                let run = |fuse: bool| {
                    let query = device.buffer_from_slice(&query, &[query_heads, dim]).unwrap();
                    let key = device.buffer_from_slice(&key, &[kv_heads, dim]).unwrap();
                    let value = device.buffer_from_slice(&value, &[kv_heads, dim]).unwrap();
                    let key_cache = upload(&device, cache_dtype, &cache_values, &[positions, kv]);
                    let value_cache = upload(&device, cache_dtype, &cache_values, &[positions, kv]);
                    let mut encoder = device.command_encoder();
                    if fuse {
                        fused
                            .encode(
                                &mut encoder,
                                &query,
                                &key,
                                &value,
                                &key_cache,
                                &value_cache,
                                [&norms[0], &norms[1]],
                                EPS,
                                &frequencies,
                                &step,
                                1,
                                heads,
                            )
                            .unwrap();
                    } else {
                        head_norm.encode(&mut encoder, &query, &norms[0], EPS).unwrap();
                        head_norm.encode(&mut encoder, &key, &norms[1], EPS).unwrap();
                        rope_append
                            .encode(
                                &mut encoder,
                                &query,
                                &key,
                                &value,
                                &key_cache,
                                &value_cache,
                                &frequencies,
                                &step,
                                1,
                                heads,
                            )
                            .unwrap();
                    }
                    encoder.commit_and_wait().unwrap();
                    [read(&query), read(&key_cache), read(&value_cache)]
                };
                let (fused_outputs, unfused_outputs) = (run(true), run(false));
                let what = format!("{weight_dtype} norms, {cache_dtype} cache, {heads:?}");
                let [fused_query, fused_keys, fused_values] = &fused_outputs;
                let [query_unfused, keys_unfused, values_unfused] = &unfused_outputs;
                assert_within(
                    fused_query,
                    query_unfused,
                    DType::F32,
                    8.0,
                    &format!("{what}: query"),
                );
                assert_within(
                    fused_keys,
                    keys_unfused,
                    cache_dtype,
                    1.0,
                    &format!("{what}: key cache"),
                );
                assert_eq!(fused_values, values_unfused, "{what}: value cache");
                // The key cache's row at the position changed, the others did not.
                let untouched = read(&upload(&device, cache_dtype, &cache_values, &[positions, kv]));
                let row = (11 + case) * kv..(12 + case) * kv;
                assert_ne!(
                    fused_outputs[1][row.clone()],
                    untouched[row.clone()],
                    "{what}: the key row"
                );
                for (index, (a, b)) in fused_outputs[1].iter().zip(&untouched).enumerate() {
                    assert!(
                        row.contains(&index) || a == b,
                        "{what}: key cache [{index}] written"
                    );
                }
            }
        }
    }
    let fused_kind = OpKind::fused(&[Primitive::RmsNorm, Primitive::Rope, Primitive::Copy]);
    assert!(
        device
            .profiler()
            .dispatches()
            .iter()
            .any(|dispatch| dispatch.op_kind == fused_kind
                && dispatch.kernel.starts_with("rope_append_normed_")),
        "no fused dispatch recorded"
    );
}

kernelscope::device_tests!(fused_equals_head_norms_then_rope_append);
