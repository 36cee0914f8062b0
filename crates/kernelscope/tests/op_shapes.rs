//! Every op refuses an operand of the wrong rank with `Error::ShapeMismatch`
//! when it is encoded, instead of panicking on a missing dimension. Each
//! case first encodes valid operands of random sizes (so the refusal comes
//! from the rank alone), then swaps in one operand at a time holding the same
//! elements under a wrong shape. Validation happens before any backend work,
//! so the CPU device covers every backend.

use kernelscope::ops;
use kernelscope::ops::attention::Heads;
use kernelscope::ops::rope::RopeFrequencies;
use kernelscope::ops::sample::Sampling;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::random_f32;
use kernelscope::{Buffer, CommandEncoder, DType, Device, Error, Result};

/// Random sizes for one case, reproducible from the case's seed.
struct Sizes(SplitMix64);

impl Sizes {
    fn new(seed: u64) -> Self {
        Sizes(SplitMix64::new(seed))
    }

    /// A size in `2..=limit` (2 at least, so no shape is all ones).
    fn next(&mut self, limit: u32) -> usize {
        2 + self.0.below(u64::from(limit - 1)) as usize
    }
}

fn f32_buffer(device: &Device, seed: u64, shape: &[usize]) -> Buffer {
    let count = shape.iter().product();
    device.buffer_from_slice(&random_f32(seed, count), shape).unwrap()
}

/// Encodes `operands` as they are (which must succeed), then with operand
/// `index` reshaped to each of `shapes` (which must be refused as a shape
/// mismatch), for each `(index, shapes)` of `wrong`.
fn refuses_wrong_ranks(
    device: &Device,
    operands: &[Buffer],
    wrong: &[(usize, &[&[usize]])],
    encode: impl Fn(&mut CommandEncoder, &[Buffer]) -> Result<()>,
) {
    let mut encoder = device.command_encoder();
    encode(&mut encoder, operands).expect("the valid operands are accepted");
    encoder.commit_and_wait().unwrap();
    for (index, shapes) in wrong {
        for shape in *shapes {
            let mut replaced = operands.to_vec();
            replaced[*index] = operands[*index].reshape(shape).unwrap();
            let mut encoder = device.command_encoder();
            match encode(&mut encoder, &replaced) {
                Err(Error::ShapeMismatch { found, .. }) => assert_eq!(found, shape.to_vec()),
                other => panic!(
                    "operand {index} reshaped from {:?} to {shape:?}: {other:?}",
                    operands[*index].shape()
                ),
            }
        }
    }
}

#[test]
fn add_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::add::Add::new(&ops::registry(), &device, DType::F32).unwrap();
    let n = Sizes::new(1).next(64);
    let operands = [f32_buffer(&device, 2, &[n]), f32_buffer(&device, 3, &[n])];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[1, n], &[n, 1]]), (1, &[&[1, n]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1]),
    );
}

#[test]
fn argmax_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::argmax::Argmax::new(&ops::registry(), &device).unwrap();
    let n = Sizes::new(4).next(64);
    let out = device.alloc(DType::U32, &[1]).unwrap();
    let operands = [f32_buffer(&device, 5, &[n]), out];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[1, n]]), (1, &[&[1, 1], &[]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1]),
    );
}

#[test]
fn attention_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::attention::Attention::new(&ops::registry(), &device).unwrap();
    let mut sizes = Sizes::new(6);
    let key_value = sizes.next(3);
    let heads = Heads {
        query: key_value * sizes.next(3),
        key_value,
        dim: sizes.next(16),
    };
    let max_positions = sizes.next(8);
    let kv_dim = heads.key_value * heads.dim;
    let position = max_positions - 1;
    let operands = [
        f32_buffer(&device, 7, &[heads.query, heads.dim]),
        f32_buffer(&device, 8, &[max_positions, kv_dim]),
        f32_buffer(&device, 9, &[max_positions, kv_dim]),
        device.buffer_from_slice(&[position as u32, 0], &[2]).unwrap(),
        device.alloc(DType::F32, &[heads.query, heads.dim]).unwrap(),
    ];
    let caches: &[&[usize]] = &[
        &[1, max_positions, kv_dim],
        &[max_positions, heads.key_value, heads.dim],
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[
            (0, &[&[1, heads.query, heads.dim]]),
            (1, caches),
            (2, caches),
            (3, &[&[1, 2]]),
            (4, &[&[heads.query, 1, heads.dim]]),
        ],
        |encoder, buffers| {
            op.encode(
                encoder,
                &buffers[0],
                &buffers[1],
                &buffers[2],
                &buffers[3],
                0,
                heads,
                position + 1,
                &buffers[4],
            )
        },
    );
}

#[test]
fn embedding_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::embedding::Embedding::new(&ops::registry(), &device, DType::F32).unwrap();
    let mut sizes = Sizes::new(10);
    let (vocab, hidden) = (sizes.next(32), sizes.next(32));
    let operands = [
        f32_buffer(&device, 11, &[vocab, hidden]),
        device.buffer_from_slice(&[(vocab - 1) as u32], &[1]).unwrap(),
        device.alloc(DType::F32, &[hidden]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        // The table's shape is read, so a flat table is refused too.
        &[
            (0, &[&[vocab * hidden], &[1, vocab, hidden]]),
            (1, &[&[1, 1]]),
            (2, &[&[1, hidden]]),
        ],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2]),
    );
}

#[test]
fn kv_append_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::kv_append::KvAppend::new(&ops::registry(), &device).unwrap();
    let mut sizes = Sizes::new(12);
    let (kv_dim, max_positions) = (sizes.next(32), sizes.next(8));
    let operands = [
        f32_buffer(&device, 13, &[kv_dim]),
        f32_buffer(&device, 14, &[kv_dim]),
        f32_buffer(&device, 15, &[max_positions, kv_dim]),
        f32_buffer(&device, 16, &[max_positions, kv_dim]),
        device
            .buffer_from_slice(&[0u32, (max_positions - 1) as u32], &[2])
            .unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[
            (0, &[&[1, kv_dim]]),
            (1, &[&[kv_dim, 1]]),
            (2, &[&[1, max_positions, kv_dim]]),
            (3, &[&[max_positions, 1, kv_dim]]),
            (4, &[&[2, 1]]),
        ],
        |encoder, buffers| {
            op.encode(
                encoder,
                &buffers[0],
                &buffers[1],
                &buffers[2],
                &buffers[3],
                &buffers[4],
                1,
            )
        },
    );
}

#[test]
fn matmul_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::matmul::MatMul::new(&ops::registry(), &device, DType::F32).unwrap();
    let mut sizes = Sizes::new(17);
    let (m, n, k) = (sizes.next(8), sizes.next(32), sizes.next(32));
    let operands = [
        f32_buffer(&device, 18, &[n, k]),
        f32_buffer(&device, 19, &[m, k]),
        device.alloc(DType::F32, &[m, n]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        // The weight's shape is read, so a flat weight is refused too.
        &[
            (0, &[&[n * k], &[1, n, k]]),
            (1, &[&[1, m, k]]),
            (2, &[&[m, n, 1]]),
        ],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2]),
    );
}

#[test]
fn matvec_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::matvec::MatVec::new(&ops::registry(), &device, DType::F32).unwrap();
    let mut sizes = Sizes::new(20);
    let (n, k) = (sizes.next(32), sizes.next(32));
    let operands = [
        f32_buffer(&device, 21, &[n, k]),
        f32_buffer(&device, 22, &[k]),
        device.alloc(DType::F32, &[n]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[n * k], &[n, k, 1]]), (1, &[&[1, k]]), (2, &[&[n, 1]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2]),
    );
}

#[test]
fn rms_norm_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::rms_norm::RmsNorm::new(&ops::registry(), &device, DType::F32).unwrap();
    let n = Sizes::new(23).next(64);
    let operands = [
        f32_buffer(&device, 24, &[n]),
        f32_buffer(&device, 25, &[n]),
        device.alloc(DType::F32, &[n]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[1, n]]), (1, &[&[n, 1]]), (2, &[&[1, n]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2], 1e-5),
    );
}

#[test]
fn rope_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::rope::Rope::new(&ops::registry(), &device).unwrap();
    let mut sizes = Sizes::new(26);
    let (heads, head_dim) = (sizes.next(4), 2 * sizes.next(8));
    let frequencies = ops::rope::inverse_frequencies(head_dim, 10_000.0, None);
    let operands = [
        f32_buffer(&device, 27, &[heads, head_dim]),
        device.buffer_from_slice(&frequencies, &[head_dim / 2]).unwrap(),
        device.buffer_from_slice(&[0u32, 5], &[2]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[
            (0, &[&[1, heads, head_dim]]),
            (1, &[&[1, head_dim / 2]]),
            (2, &[&[1, 2]]),
        ],
        |encoder, buffers| {
            let frequencies = RopeFrequencies {
                inverse_frequencies: buffers[1].clone(),
                attention_scaling: 1.0,
            };
            op.encode(encoder, &buffers[0], &frequencies, &buffers[2], 1, heads)
        },
    );
}

#[test]
fn sample_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::sample::Sample::new(&ops::registry(), &device).unwrap();
    let n = Sizes::new(28).next(64);
    let sampling = Sampling {
        temperature: 0.8,
        top_p: 0.9,
    };
    let operands = [
        f32_buffer(&device, 29, &[n]),
        device.alloc(DType::U32, &[1]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[n, 1]]), (1, &[&[1, 1], &[]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], sampling, 0.5),
    );
}

#[test]
fn silu_mul_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::silu_mul::SiluMul::new(&ops::registry(), &device).unwrap();
    let n = Sizes::new(30).next(64);
    let operands = [
        f32_buffer(&device, 31, &[n]),
        f32_buffer(&device, 32, &[n]),
        device.alloc(DType::F32, &[n]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[1, n]]), (1, &[&[n, 1]]), (2, &[&[1, n]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2]),
    );
}

/// Copy is the exception: it moves bytes, so any shapes of the same length
/// and dtype are accepted (the decode engine copies a `[positions, kv]`
/// cache into a flat slice of a larger one); only the length is checked.
#[test]
fn copy_checks_length_not_rank() {
    let device = Device::cpu();
    let op = ops::copy::Copy::new(&ops::registry(), &device).unwrap();
    let mut sizes = Sizes::new(33);
    let (rows, columns) = (sizes.next(16), sizes.next(16));
    let data = random_f32(34, rows * columns);
    let source = device.buffer_from_slice(&data, &[rows, columns]).unwrap();
    let destination = device.alloc(DType::F32, &[1, rows * columns]).unwrap();
    let mut encoder = device.command_encoder();
    op.encode(&mut encoder, &source, &destination).unwrap();
    encoder.commit_and_wait().unwrap();
    assert_eq!(destination.to_vec::<f32>().unwrap(), data);
    let shorter = device.alloc(DType::F32, &[rows * columns - 1]).unwrap();
    assert!(matches!(
        op.encode(&mut encoder, &source, &shorter),
        Err(Error::ShapeMismatch { .. })
    ));
}
