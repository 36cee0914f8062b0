//! q, k and v's quantized products with RoPE and the KV-cache append in
//! their stores (`matvecs_rope_<format>_q8_bf16`,
//! ops/quantized/linear/products.cuh): the rotated query and both caches
//! must be, bit for bit, what `matvecs_<format>_q8` into q, k and v then
//! `rope_append` leave, and the query and the stored key must match the
//! exact products rotated. Random weights, inputs and cache contents; head
//! dims 64 and 128, grouped heads, the matrices of one format or split over
//! two (a Q4_K_M layer's v in Q6_K, or q alone), the position first, inside
//! and last in the cache, and one past it (the query rotated, nothing
//! stored). Where Q4_K rows of 2,048 to 8,192 values stream on Hopper
//! (`stream_matvecs_rope_q4_k_held*_bf16`, streamed.cuh: a warp a pair of
//! rows, sums in another order), the bit-for-bit comparison gives way to
//! the exact products' bound for the query, the key and the value, and
//! every other cache row must be untouched. They say they skipped without
//! a GPU and fail so under KSCOPE_REQUIRE_GPU=1.

use half::bf16;
use kernelscope::ops;
use kernelscope::ops::attention::Heads;
use kernelscope::ops::quantized::linear::fused::rope::QueryKeyValue;
use kernelscope::ops::quantized::linear::fused::{QuantizedFused, Reader};
use kernelscope::ops::rope::{RopeFrequencies, inverse_frequencies};
use kernelscope::ops::rope_append::RopeAppend;
use kernelscope::ops::rope_append::RopeAppendStores;
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions};

mod common;
use common::quantized::{EPS, Matrix, exact_products, normed, random, random_matrix, staged};

fn cuda() -> Option<Device> {
    Backend::Cuda.device(DeviceOptions::new().profile(ProfileLevel::Dispatch))
}

/// A case: the heads, each of q, k and v's format, blocks a row, the
/// positions the caches hold and the position decoded.
struct Case {
    heads: Heads,
    formats: [QuantFormat; 3],
    blocks: usize,
    max_positions: usize,
    position: u32,
}

fn heads(query: usize, key_value: usize, dim: usize) -> Heads {
    Heads {
        query,
        key_value,
        dim,
    }
}

fn bf16_cache(device: &Device, values: &[f32], max_positions: usize, kv_dim: usize) -> Buffer {
    let values: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
    device
        .buffer_from_slice(&values, &[max_positions, kv_dim])
        .unwrap()
}

fn bits(buffer: &Buffer) -> Vec<u16> {
    buffer
        .to_vec::<bf16>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The kernel a product of `format` over rows of `k` values runs on
/// `device`: the streamed one where it has bulk copies and a kernel holds
/// the row (Q4_K, 2,048 to 8,192 values), else the register loop.
fn kernel_of(device: &Device, format: QuantFormat, k: usize) -> String {
    let streams = device.capabilities().bulk_copies && format == QuantFormat::Q4_K;
    match k {
        2048..=4096 if streams => "stream_matvecs_rope_q4_k_held2_bf16".into(),
        4097..=8192 if streams => "stream_matvecs_rope_q4_k_held4_bf16".into(),
        _ => format!("matvecs_rope_{}_q8_bf16", format.name()),
    }
}

/// Consecutive parts of one format: (first part, first matrix, count).
fn groups(formats: [QuantFormat; 3]) -> Vec<(usize, usize)> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < 3 {
        let count = formats[start..]
            .iter()
            .take_while(|&&f| f == formats[start])
            .count();
        groups.push((start, count));
        start += count;
    }
    groups
}

#[test]
fn cuda_products_with_rope_store_what_rope_append_stores() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let (q4_k, q6_k, q8_0, q5_k, q4_0) = (
        QuantFormat::Q4_K,
        QuantFormat::Q6_K,
        QuantFormat::Q8_0,
        QuantFormat::Q5_K,
        QuantFormat::Q4_0,
    );
    let cases = [
        // llama-3.2-1b's heads, v in Q6_K as a Q4_K_M file has it.
        Case {
            heads: heads(32, 8, 64),
            formats: [q4_k, q4_k, q6_k],
            blocks: 8,
            max_positions: 37,
            position: 17,
        },
        Case {
            heads: heads(32, 8, 64),
            formats: [q4_k, q4_k, q4_k],
            blocks: 8,
            max_positions: 37,
            position: 0,
        },
        Case {
            heads: heads(8, 2, 128),
            formats: [q8_0, q8_0, q8_0],
            blocks: 24,
            max_positions: 300,
            position: 299,
        },
        Case {
            heads: heads(6, 3, 128),
            formats: [q5_k, q6_k, q6_k],
            blocks: 3,
            max_positions: 64,
            position: 40,
        },
        Case {
            heads: heads(4, 4, 64),
            formats: [q4_0, q4_0, q4_0],
            blocks: 16,
            max_positions: 9,
            position: 5,
        },
        // Streamed where the GPU has bulk copies: llama-3-8b's head dim, x
        // held in four units a lane; q in Q6_K and the Q4_K product from
        // the key on, its value rows in pairs; rows past the longest held.
        Case {
            heads: heads(8, 2, 128),
            formats: [q4_k, q4_k, q6_k],
            blocks: 24,
            max_positions: 20,
            position: 19,
        },
        Case {
            heads: heads(4, 2, 64),
            formats: [q6_k, q4_k, q4_k],
            blocks: 12,
            max_positions: 8,
            position: 3,
        },
        Case {
            heads: heads(4, 1, 128),
            formats: [q4_k, q4_k, q4_k],
            blocks: 40,
            max_positions: 5,
            position: 0,
        },
        // One past the cache: the query rotated, nothing stored.
        Case {
            heads: heads(8, 1, 128),
            formats: [q4_k, q4_k, q6_k],
            blocks: 4,
            max_positions: 12,
            position: 12,
        },
    ];
    for (index, case) in cases.iter().enumerate() {
        let Case {
            heads,
            formats,
            blocks,
            max_positions,
            position,
        } = *case;
        let what = format!("{formats:?} {heads:?} blocks {blocks} at {position} of {max_positions}");
        let seed = 12_000 + 100 * index as u64;
        let kv_dim = heads.key_value * heads.dim;
        let part_rows = [heads.query * heads.dim, kv_dim, kv_dim];
        // Every matrix's rows as long: whole blocks of the largest format.
        let k = blocks * 256;
        let matrices: Vec<Matrix> = (0..3)
            .map(|part| {
                let format = formats[part];
                random_matrix(
                    format,
                    part_rows[part],
                    k / format.block_elements(),
                    seed + part as u64,
                )
            })
            .collect();
        let uploaded: Vec<Buffer> = matrices.iter().map(|m| m.upload(&device)).collect();
        let x = random(seed + 3, k, 3.0);
        let norm_weight = random(seed + 4, k, 1.5);
        let (x_buffer, norm_buffer) = (
            device.buffer_from_slice(&x, &[k]).unwrap(),
            device.buffer_from_slice(&norm_weight, &[k]).unwrap(),
        );
        let inverse = inverse_frequencies(heads.dim, 500_000.0, None);
        let frequencies = RopeFrequencies {
            inverse_frequencies: device.buffer_from_slice(&inverse, &[inverse.len()]).unwrap(),
            attention_scaling: 1.1,
        };
        let positions = device.buffer_from_slice(&[3u32, position], &[2]).unwrap();
        let cache_values = random(seed + 5, 2 * max_positions * kv_dim, 2.0);
        let (cached_keys, cached_values) = cache_values.split_at(max_positions * kv_dim);
        let fused: Vec<QuantizedFused> = formats
            .iter()
            .map(|&format| QuantizedFused::new(&registry, &device, format).unwrap())
            .collect();

        // Fused: each format's product rotates and stores.
        let query = device
            .buffer_from_slice(&vec![f32::NAN; part_rows[0]], &[heads.query, heads.dim])
            .unwrap();
        let key_cache = bf16_cache(&device, cached_keys, max_positions, kv_dim);
        let value_cache = bf16_cache(&device, cached_values, max_positions, kv_dim);
        let stores = RopeAppendStores {
            query: &query,
            key_cache: &key_cache,
            value_cache: &value_cache,
            frequencies: &frequencies,
            positions: &positions,
            first: 1,
            heads,
        };
        let parts = [QueryKeyValue::Query, QueryKeyValue::Key, QueryKeyValue::Value];
        device.profiler().reset();
        let mut encoder = device.command_encoder();
        // The norm lets a streamed reader launch before it waits.
        let (first, count) = groups(formats)[0];
        let weights: Vec<&Buffer> = uploaded[first..first + count].iter().collect();
        let reader = fused[0].matvecs_rope_reader(&weights);
        let input = fused[0]
            .encode_norm_stage(&mut encoder, &x_buffer, &norm_buffer, EPS, k, reader)
            .unwrap();
        for &(first, count) in &groups(formats) {
            let weights: Vec<&Buffer> = uploaded[first..first + count].iter().collect();
            fused[first]
                .encode_matvecs_rope_staged(&mut encoder, &input, &weights, parts[first], &stores)
                .unwrap();
        }
        encoder.commit_and_wait().unwrap();
        let dispatches = device.profiler().dispatches();
        let kernels: Vec<String> = groups(formats)
            .iter()
            .map(|&(first, _)| kernel_of(&device, formats[first], k))
            .collect();
        let ran: Vec<&str> = dispatches[1..].iter().map(|dispatch| &*dispatch.kernel).collect();
        assert_eq!(ran, kernels, "{what}");
        let streamed = kernels.iter().any(|kernel| kernel.starts_with("stream_"));
        let norm = match kernels[0].starts_with("stream_") {
            true => "norm_quantize_q8_streamed_reader",
            false => "norm_quantize_q8",
        };
        assert_eq!(&*dispatches[0].kernel, norm, "{what}: the norm for its reader");

        // Unfused: the products into q, k and v, then rope_append.
        let projections = device
            .buffer_from_slice(&vec![f32::NAN; part_rows.iter().sum()], &[part_rows.iter().sum()])
            .unwrap();
        let expected_query = projections
            .slice(0, part_rows[0])
            .unwrap()
            .reshape(&[heads.query, heads.dim])
            .unwrap();
        let part = |at: usize, rows: usize| {
            projections
                .slice(at, rows)
                .unwrap()
                .reshape(&[heads.key_value, heads.dim])
                .unwrap()
        };
        let (key, value) = (part(part_rows[0], kv_dim), part(part_rows[0] + kv_dim, kv_dim));
        let expected_key_cache = bf16_cache(&device, cached_keys, max_positions, kv_dim);
        let expected_value_cache = bf16_cache(&device, cached_values, max_positions, kv_dim);
        let mut encoder = device.command_encoder();
        let input = fused[0]
            .encode_norm_stage(&mut encoder, &x_buffer, &norm_buffer, EPS, k, Reader::Registers)
            .unwrap();
        for &(first, count) in &groups(formats) {
            let weights: Vec<&Buffer> = uploaded[first..first + count].iter().collect();
            let at: usize = part_rows[..first].iter().sum();
            let rows: usize = part_rows[first..first + count].iter().sum();
            let out = projections.slice(at, rows).unwrap();
            fused[first]
                .encode_matvecs_staged(&mut encoder, &input, &weights, &out)
                .unwrap();
        }
        RopeAppend::new(&registry, &device, DType::BF16)
            .unwrap()
            .encode(
                &mut encoder,
                &expected_query,
                &key,
                &value,
                &expected_key_cache,
                &expected_value_cache,
                &frequencies,
                &positions,
                1,
                heads,
            )
            .unwrap();
        encoder.commit_and_wait().unwrap();

        let fused_query = query.to_vec::<f32>().unwrap();
        let unfused_query = expected_query.to_vec::<f32>().unwrap();
        let row = position as usize * kv_dim..(position as usize + 1) * kv_dim;
        let (stored, expected_stored) = (bits(&value_cache), bits(&expected_value_cache));
        let (stored_keys, expected_keys) = (bits(&key_cache), bits(&expected_key_cache));
        if streamed {
            // Sums in another order: every row but the position's as it was.
            let outside = |cache: &[u16], expected: &[u16]| {
                (0..cache.len())
                    .filter(|i| !row.contains(i))
                    .position(|i| cache[i] != expected[i])
            };
            assert_eq!(
                outside(&stored_keys, &expected_keys),
                None,
                "{what}: keys outside the position"
            );
            assert_eq!(
                outside(&stored, &expected_stored),
                None,
                "{what}: values outside the position"
            );
        } else {
            let differs = fused_query
                .iter()
                .zip(&unfused_query)
                .position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(differs, None, "{what}: query against rope_append's");
            let differs = stored_keys.iter().zip(&expected_keys).position(|(a, b)| a != b);
            assert_eq!(differs, None, "{what}: key cache against rope_append's");
            let differs = stored.iter().zip(&expected_stored).position(|(a, b)| a != b);
            assert_eq!(differs, None, "{what}: value cache against rope_append's");
        }
        let untouched: Vec<u16> = cached_values
            .iter()
            .map(|&v| bf16::from_f32(v).to_bits())
            .collect();
        if (position as usize) < max_positions {
            assert_ne!(
                stored[row.clone()],
                untouched[row.clone()],
                "{what}: value not stored"
            );
        } else {
            assert_eq!(
                stored, untouched,
                "{what}: a position past the cache stored a value"
            );
        }

        // Against the exact products rotated.
        let h = staged(&normed(&x, &norm_weight));
        let exact: Vec<Vec<(f64, f64)>> = matrices.iter().map(|m| exact_products(m, &h)).collect();
        let rotate = |products: &[(f64, f64)]| -> Vec<(f64, f64)> {
            let half = heads.dim / 2;
            (0..products.len())
                .map(|row| {
                    let (head, within) = (row / heads.dim, row % heads.dim);
                    let i = within % half;
                    let angle = (position as f32 * inverse[i]) as f64;
                    let (s, c) = (angle.sin() * 1.1, angle.cos() * 1.1);
                    let (x0, x1) = (
                        products[head * heads.dim + i],
                        products[head * heads.dim + i + half],
                    );
                    let size = (x0.1 + x1.1) * 1.1;
                    if within < half {
                        (x0.0 * c - x1.0 * s, size)
                    } else {
                        (x1.0 * c + x0.0 * s, size)
                    }
                })
                .collect()
        };
        common::quantized::assert_matches(&fused_query, &rotate(&exact[0]), 3e-3, &format!("{what}: query"));
        if (position as usize) < max_positions {
            let keys: Vec<f32> = key_cache.to_vec::<bf16>().unwrap()[row.clone()]
                .iter()
                .map(|v| v.to_f32())
                .collect();
            common::quantized::assert_matches(&keys, &rotate(&exact[1]), 8e-3, &format!("{what}: key"));
            let values: Vec<f32> = value_cache.to_vec::<bf16>().unwrap()[row]
                .iter()
                .map(|v| v.to_f32())
                .collect();
            common::quantized::assert_matches(&values, &exact[2], 8e-3, &format!("{what}: value"));
        }
    }
}

/// Matrices that are not whole parts of [q; k; v], or more of them than
/// the parts left, are refused naming what is wrong.
#[test]
fn cuda_products_with_rope_refuse_matrices_of_other_parts() {
    let Some(device) = cuda() else {
        return;
    };
    let registry = ops::registry();
    let format = QuantFormat::Q4_K;
    let fused = QuantizedFused::new(&registry, &device, format).unwrap();
    let heads = heads(4, 2, 64);
    let (k, kv_dim) = (256, 2 * 64);
    let query = device.buffer_from_slice(&random(1, 256, 1.0), &[4, 64]).unwrap();
    let cache = || bf16_cache(&device, &random(2, 8 * kv_dim, 1.0), 8, kv_dim);
    let (key_cache, value_cache) = (cache(), cache());
    let inverse = inverse_frequencies(64, 10_000.0, None);
    let frequencies = RopeFrequencies {
        inverse_frequencies: device.buffer_from_slice(&inverse, &[32]).unwrap(),
        attention_scaling: 1.0,
    };
    let positions = device.buffer_from_slice(&[2u32], &[1]).unwrap();
    let stores = RopeAppendStores {
        query: &query,
        key_cache: &key_cache,
        value_cache: &value_cache,
        frequencies: &frequencies,
        positions: &positions,
        first: 0,
        heads,
    };
    let mut encoder = device.command_encoder();
    let x = device.buffer_from_slice(&random(3, k, 1.0), &[k]).unwrap();
    let input = fused.encode_quantize(&mut encoder, &x).unwrap();
    let key_sized = random_matrix(format, kv_dim, 1, 4).upload(&device);
    let error = fused
        .encode_matvecs_rope_staged(&mut encoder, &input, &[&key_sized], QueryKeyValue::Query, &stores)
        .unwrap_err()
        .to_string();
    assert!(error.contains("matrix 0 is Query's"), "{error}");
    let error = fused
        .encode_matvecs_rope_staged(
            &mut encoder,
            &input,
            &[&key_sized, &key_sized],
            QueryKeyValue::Value,
            &stores,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("from Value on"), "{error}");
}
