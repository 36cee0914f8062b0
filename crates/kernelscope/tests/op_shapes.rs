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
    let mut sizes = Sizes::new(1);
    let rows = sizes.next(8);
    let n = rows + sizes.next(64);
    // As long as the accumulator: its shape or flat.
    let operands = [
        f32_buffer(&device, 2, &[rows, n]),
        f32_buffer(&device, 3, &[rows, n]),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(1, &[&[n, rows], &[1, rows, n]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1]),
    );
    // A bias row: flat, and the accumulator's rows end in its length.
    let operands = [f32_buffer(&device, 2, &[rows, n]), f32_buffer(&device, 3, &[n])];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(0, &[&[n, rows]]), (1, &[&[1, n], &[n, 1]])],
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
    let op = ops::attention::Attention::new(&ops::registry(), &device, DType::F32).unwrap();
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
        device
            .alloc(
                DType::F32,
                &[ops::attention::Attention::scratch_len(heads, max_positions)],
            )
            .unwrap(),
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
                &buffers[5],
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
    let (vocab, rows) = (sizes.next(32), sizes.next(8));
    let hidden = rows + sizes.next(32);
    let tokens: Vec<u32> = (0..rows + 1).map(|row| (row % vocab) as u32).collect();
    let operands = [
        f32_buffer(&device, 11, &[vocab, hidden]),
        device.buffer_from_slice(&tokens, &[rows + 1]).unwrap(),
        device.alloc(DType::F32, &[rows, hidden]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        // The table's shape is read, so a flat table is refused too.
        &[
            (0, &[&[vocab * hidden], &[1, vocab, hidden]]),
            (1, &[&[1, rows + 1]]),
            (2, &[&[hidden, rows], &[rows, hidden, 1]]),
        ],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], 1, &buffers[2]),
    );
}

#[test]
fn kv_append_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::kv_append::KvAppend::new(&ops::registry(), &device, DType::F32).unwrap();
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
            (0, &[&[kv_dim, 1]]),
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
    let m = sizes.next(8);
    let (n, k) = (m + sizes.next(32), m + sizes.next(32));
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
            (1, &[&[1, m, k], &[k, m]]),
            (2, &[&[m, n, 1], &[n, m]]),
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
    let op = ops::rms_norm::RmsNorm::new(&ops::registry(), &device, DType::F32, DType::F32).unwrap();
    let mut sizes = Sizes::new(23);
    let rows = sizes.next(8);
    let n = rows + sizes.next(64);
    let operands = [
        f32_buffer(&device, 24, &[rows, n]),
        f32_buffer(&device, 25, &[n]),
        device.alloc(DType::F32, &[rows, n]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[
            (0, &[&[n, rows], &[1, rows, n]]),
            (1, &[&[n, 1], &[1, n]]),
            (2, &[&[n, rows]]),
        ],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2], 1e-5),
    );
}

#[test]
fn rope_refuses_wrong_ranks() {
    let device = Device::cpu();
    let op = ops::rope::Rope::new(&ops::registry(), &device).unwrap();
    let mut sizes = Sizes::new(26);
    let rows = sizes.next(4);
    let heads = rows + sizes.next(4);
    let head_dim = 2 * (heads + sizes.next(8));
    let frequencies = ops::rope::inverse_frequencies(head_dim, 10_000.0, None);
    let positions: Vec<u32> = (0..rows as u32 + 1).map(|row| 5 * row).collect();
    let operands = [
        f32_buffer(&device, 27, &[rows, heads, head_dim]),
        device.buffer_from_slice(&frequencies, &[head_dim / 2]).unwrap(),
        device.buffer_from_slice(&positions, &[rows + 1]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[
            (0, &[&[heads, rows, head_dim], &[rows * heads, head_dim]]),
            (1, &[&[1, head_dim / 2]]),
            (2, &[&[1, rows + 1]]),
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
    let op = ops::silu_mul::SiluMul::new(&ops::registry(), &device, DType::F32).unwrap();
    let mut sizes = Sizes::new(30);
    let rows = sizes.next(8);
    let n = rows + sizes.next(64);
    // gate's shape is the op's; up and out have it or are flat.
    let operands = [
        f32_buffer(&device, 31, &[rows, n]),
        f32_buffer(&device, 32, &[rows, n]),
        device.alloc(DType::F32, &[rows, n]).unwrap(),
    ];
    refuses_wrong_ranks(
        &device,
        &operands,
        &[(1, &[&[n, rows]]), (2, &[&[n, rows], &[1, rows, n]])],
        |encoder, buffers| op.encode(encoder, &buffers[0], &buffers[1], &buffers[2]),
    );
}

/// The row-batched ops count their rows from one operand: a length that is
/// not a whole number of rows is a shape mismatch, and token ids or
/// positions that stop short of the last row are out of bounds.
#[test]
fn row_ops_refuse_partial_rows_and_short_indices() {
    let device = Device::cpu();
    let registry = ops::registry();
    let mut sizes = Sizes::new(40);
    let rows = sizes.next(8);
    let n = rows + sizes.next(32);
    let partial = f32_buffer(&device, 41, &[rows * n + 1]);
    let mut encoder = device.command_encoder();

    let rms_norm = ops::rms_norm::RmsNorm::new(&registry, &device, DType::F32, DType::F32).unwrap();
    let weight = f32_buffer(&device, 42, &[n]);
    let out = device.alloc(DType::F32, &[rows, n]).unwrap();
    assert!(matches!(
        rms_norm.encode(&mut encoder, &partial, &weight, &out, 1e-5),
        Err(Error::ShapeMismatch { .. })
    ));
    let rows_input = f32_buffer(&device, 43, &[rows, n]);
    let empty = device.alloc(DType::F32, &[0]).unwrap();
    assert!(matches!(
        rms_norm.encode(&mut encoder, &rows_input, &empty, &out, 1e-5),
        Err(Error::ShapeMismatch { .. })
    ));

    let embedding = ops::embedding::Embedding::new(&registry, &device, DType::F32).unwrap();
    let table = f32_buffer(&device, 44, &[3, n]);
    let tokens = device.buffer_from_slice(&vec![1u32; rows], &[rows]).unwrap();
    assert!(matches!(
        embedding.encode(&mut encoder, &table, &tokens, 0, &partial),
        Err(Error::ShapeMismatch { .. })
    ));
    // rows ids from index 1 need rows + 1 of them.
    assert!(matches!(
        embedding.encode(&mut encoder, &table, &tokens, 1, &out),
        Err(Error::OutOfBounds { .. })
    ));

    let rope = ops::rope::Rope::new(&registry, &device).unwrap();
    let frequencies = ops::rope::inverse_frequencies(2 * n, 10_000.0, None);
    let frequencies = ops::rope::RopeFrequencies {
        inverse_frequencies: device
            .buffer_from_slice(&frequencies, &[frequencies.len()])
            .unwrap(),
        attention_scaling: 1.0,
    };
    let x = f32_buffer(&device, 45, &[rows, 2 * n]);
    let positions = device.buffer_from_slice(&vec![4u32; rows], &[rows]).unwrap();
    assert!(matches!(
        rope.encode(&mut encoder, &partial, &frequencies, &positions, 0, 1),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        rope.encode(&mut encoder, &x, &frequencies, &positions, 1, 1),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        rope.encode(&mut encoder, &x, &frequencies, &positions, 0, 0),
        Err(Error::ShapeMismatch { .. })
    ));

    let matmul = ops::matmul::MatMul::new(&registry, &device, DType::F32).unwrap();
    assert!(matches!(
        matmul.encode(&mut encoder, &f32_buffer(&device, 46, &[rows, n]), &partial, &out),
        Err(Error::ShapeMismatch { .. })
    ));
    // x is in the weight's dtype.
    let bf16_matmul = ops::matmul::MatMul::new(&registry, &device, DType::BF16).unwrap();
    let bf16_weight = device.alloc(DType::BF16, &[rows, n]).unwrap();
    assert!(matches!(
        bf16_matmul.encode(
            &mut encoder,
            &bf16_weight,
            &rows_input,
            &device.alloc(DType::F32, &[rows, rows]).unwrap()
        ),
        Err(Error::DTypeMismatch { .. })
    ));
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
