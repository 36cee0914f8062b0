//! RMSNorm, q/k/v's dense mat-vecs, RoPE and the KV append in one kernel
//! (`norm_matvec_rope_<dtype>`, ops/norm_matvec/rope.cu) against what it
//! replaces on the same device: `norm_matvec` into q, k and v, then
//! `rope_append`. The rotated query and both caches must agree bit for
//! bit, on the CPU (the references) and on CUDA, for every weight dtype,
//! at llama-3.2-1b's heads and at shapes that take the kernel's other
//! paths (scalar rows, more rows than the grid has warps, so the pairs'
//! exchange slots alternate), the position first, inside and last in the
//! cache, and on CUDA one past it (the query rotated, nothing stored).
//! Random weights, inputs and cache contents; the query poisoned with NaN
//! first. Bad shapes are refused with an error naming them.

use half::{bf16, f16};
use kernelscope::ops::attention::Heads;
use kernelscope::ops::norm_matvec::NormMatVec;
use kernelscope::ops::norm_matvec::rope::NormMatVecRope;
use kernelscope::ops::rope::{RopeFrequencies, inverse_frequencies};
use kernelscope::ops::rope_append::{RopeAppend, RopeAppendStores};
use kernelscope::profile::ProfileLevel;
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{Buffer, DType, Device, DeviceOptions, OpKind, Primitive};

const EPS: f32 = 1e-5;

fn profiled(backend: Backend) -> Option<Device> {
    backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// `values` rounded to `dtype` and uploaded.
fn upload(device: &Device, dtype: DType, values: &[f32], shape: &[usize]) -> Buffer {
    match dtype {
        DType::F32 => device.buffer_from_slice(values, shape),
        DType::F16 => {
            let values: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            device.buffer_from_slice(&values, shape)
        }
        DType::BF16 => {
            let values: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            device.buffer_from_slice(&values, shape)
        }
        other => panic!("{other} is not a weight dtype"),
    }
    .unwrap()
}

/// A buffer's raw bits, whatever its float dtype.
fn bits(buffer: &Buffer) -> Vec<u32> {
    match buffer.dtype() {
        DType::F32 => buffer
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::F16 => buffer
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u32)
            .collect(),
        DType::BF16 => buffer
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u32)
            .collect(),
        other => panic!("{other} is not a float dtype"),
    }
}

fn heads(query: usize, key_value: usize, dim: usize) -> Heads {
    Heads {
        query,
        key_value,
        dim,
    }
}

/// One case's inputs on a device.
struct Inputs {
    x: Buffer,
    norm_weight: Buffer,
    weights: [Buffer; 3],
    frequencies: RopeFrequencies,
    positions: Buffer,
    caches: Vec<f32>,
}

fn inputs(device: &Device, dtype: DType, heads: Heads, k: usize, positions: [u32; 2], seed: u64) -> Inputs {
    let kv_dim = heads.key_value * heads.dim;
    let rows = [heads.query * heads.dim, kv_dim, kv_dim];
    let x: Vec<f32> = random_f32(seed, k).iter().map(|v| 3.0 * v).collect();
    let weights = [0, 1, 2].map(|part| {
        let values = random_f32(seed + 1 + part as u64, rows[part] * k);
        upload(device, dtype, &values, &[rows[part], k])
    });
    let inverse = inverse_frequencies(heads.dim, 500_000.0, None);
    Inputs {
        x: device.buffer_from_slice(&x, &[k]).unwrap(),
        norm_weight: upload(device, dtype, &random_f32(seed + 4, k), &[k]),
        weights,
        frequencies: RopeFrequencies {
            inverse_frequencies: device.buffer_from_slice(&inverse, &[inverse.len()]).unwrap(),
            attention_scaling: 1.1,
        },
        positions: device.buffer_from_slice(&positions, &[2]).unwrap(),
        caches: random_f32(seed + 5, 2 * kv_dim * 64),
    }
}

fn fused_matches_norm_matvec_then_rope_append(backend: Backend) {
    let Some(device) = profiled(backend) else {
        return;
    };
    let registry = kernelscope::ops::registry();
    // (heads, k, cached positions, position decoded): the 1B's heads; k of
    // no whole 16-byte step (scalar rows); more rows than 528 blocks of 8
    // warps hold; a single head of each kind.
    let mut cases = vec![
        (heads(32, 8, 64), 2048, 37, 17),
        (heads(8, 2, 128), 1001, 64, 63),
        (heads(64, 8, 128), 64, 5, 0),
        (heads(1, 1, 16), 40, 3, 2),
    ];
    if backend == Backend::Cuda {
        cases.push((heads(8, 4, 32), 256, 9, 9));
    }
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let fused_op = NormMatVecRope::new(&registry, &device, dtype).unwrap();
        for (index, &(heads, k, max_positions, position)) in cases.iter().enumerate() {
            let what = format!("{backend:?} {dtype} {heads:?} k={k} position {position} of {max_positions}");
            let seed = 7_000 + 100 * index as u64;
            let inputs = inputs(&device, dtype, heads, k, [5, position], seed);
            let kv_dim = heads.key_value * heads.dim;
            let query_rows = heads.query * heads.dim;
            let cached = &inputs.caches[..2 * max_positions * kv_dim];
            let cache = |half: usize| {
                let values = &cached[half * max_positions * kv_dim..(half + 1) * max_positions * kv_dim];
                upload(&device, dtype, values, &[max_positions, kv_dim])
            };
            let weights = [&inputs.weights[0], &inputs.weights[1], &inputs.weights[2]];

            let query = device
                .buffer_from_slice(&vec![f32::NAN; query_rows], &[heads.query, heads.dim])
                .unwrap();
            let (key_cache, value_cache) = (cache(0), cache(1));
            let stores = RopeAppendStores {
                query: &query,
                key_cache: &key_cache,
                value_cache: &value_cache,
                frequencies: &inputs.frequencies,
                positions: &inputs.positions,
                first: 1,
                heads,
            };
            device.profiler().reset();
            let mut encoder = device.command_encoder();
            fused_op
                .encode(
                    &mut encoder,
                    &inputs.x,
                    &inputs.norm_weight,
                    weights,
                    &stores,
                    EPS,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let dispatches = device.profiler().dispatches();
            assert_eq!(dispatches.len(), 1, "{what}");
            assert_eq!(
                &*dispatches[0].kernel,
                format!("norm_matvec_rope_{dtype}"),
                "{what}"
            );
            let kinds = [
                Primitive::RmsNorm,
                Primitive::MatVec,
                Primitive::Rope,
                Primitive::Copy,
            ];
            assert_eq!(dispatches[0].op_kind, OpKind::fused(&kinds), "{what}");

            // Unfused: the products into q, k and v, then rope_append.
            let n = query_rows + 2 * kv_dim;
            let projections = device.buffer_from_slice(&vec![f32::NAN; n], &[n]).unwrap();
            let part = |at: usize, rows: usize, heads: usize| {
                let slice = projections.slice(at, rows).unwrap();
                slice.reshape(&[heads, rows / heads]).unwrap()
            };
            let expected_query = part(0, query_rows, heads.query);
            let key = part(query_rows, kv_dim, heads.key_value);
            let value = part(query_rows + kv_dim, kv_dim, heads.key_value);
            let (expected_key_cache, expected_value_cache) = (cache(0), cache(1));
            let mut encoder = device.command_encoder();
            NormMatVec::new(&registry, &device, dtype)
                .unwrap()
                .encode(
                    &mut encoder,
                    &inputs.x,
                    &inputs.norm_weight,
                    &weights,
                    &projections,
                    EPS,
                )
                .unwrap();
            RopeAppend::new(&registry, &device, dtype)
                .unwrap()
                .encode(
                    &mut encoder,
                    &expected_query,
                    &key,
                    &value,
                    &expected_key_cache,
                    &expected_value_cache,
                    &inputs.frequencies,
                    &inputs.positions,
                    1,
                    heads,
                )
                .unwrap();
            encoder.commit_and_wait().unwrap();

            let fused_query = query.to_vec::<f32>().unwrap();
            assert!(
                fused_query.iter().all(|v| v.is_finite()),
                "{what}: query not all written"
            );
            assert_eq!(bits(&query), bits(&expected_query), "{what}: query");
            assert_eq!(bits(&key_cache), bits(&expected_key_cache), "{what}: key cache");
            let stored = bits(&value_cache);
            assert_eq!(stored, bits(&expected_value_cache), "{what}: value cache");
            let untouched = bits(&cache(1));
            if position < max_positions as u32 {
                let row = position as usize * kv_dim..(position as usize + 1) * kv_dim;
                assert_ne!(stored[row.clone()], untouched[row], "{what}: value not stored");
            } else {
                assert_eq!(
                    stored, untouched,
                    "{what}: a position past the cache stored a value"
                );
            }
        }
    }
}

fn refuses_mismatched_shapes(backend: Backend) {
    let Some(device) = profiled(backend) else {
        return;
    };
    let registry = kernelscope::ops::registry();
    let op = NormMatVecRope::new(&registry, &device, DType::BF16).unwrap();
    let heads = heads(4, 2, 16);
    let inputs = inputs(&device, DType::BF16, heads, 64, [0, 1], 3);
    let query = device.buffer_from_slice(&vec![0.5f32; 64], &[4, 16]).unwrap();
    let cache = upload(&device, DType::BF16, &inputs.caches[..8 * 32], &[8, 32]);
    let value_cache = upload(&device, DType::BF16, &inputs.caches[8 * 32..16 * 32], &[8, 32]);
    let f32_cache = device
        .buffer_from_slice(&inputs.caches[..8 * 32], &[8, 32])
        .unwrap();
    let stores = |key_cache| RopeAppendStores {
        query: &query,
        key_cache,
        value_cache: &value_cache,
        frequencies: &inputs.frequencies,
        positions: &inputs.positions,
        first: 1,
        heads,
    };
    let weights = [&inputs.weights[0], &inputs.weights[1], &inputs.weights[2]];
    let swapped = [&inputs.weights[1], &inputs.weights[0], &inputs.weights[2]];
    let mut encoder = device.command_encoder();
    let error = op
        .encode(
            &mut encoder,
            &inputs.x,
            &inputs.norm_weight,
            swapped,
            &stores(&cache),
            EPS,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("q weight"), "{error}");
    let error = op
        .encode(
            &mut encoder,
            &inputs.x,
            &inputs.norm_weight,
            weights,
            &stores(&f32_cache),
            EPS,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("norm_matvec_rope"), "{error}");
    op.encode(
        &mut encoder,
        &inputs.x,
        &inputs.norm_weight,
        weights,
        &stores(&cache),
        EPS,
    )
    .unwrap();
}

kernelscope::device_tests!(
    fused_matches_norm_matvec_then_rope_append,
    refuses_mismatched_shapes
);
