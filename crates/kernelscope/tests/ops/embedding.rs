//! Embedding: token rows copied from the table, vocabulary shards, ids past the vocabulary.

use kernelscope::DType;
use kernelscope::ops;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;

use crate::helpers::{
    ROWS, WEIGHT_DTYPES, assert_close, assert_kernel, poisoned, profiled_device, random, weights, widen,
};

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

kernelscope::device_tests!(
    embedding_copies_the_token_rows,
    embedding_shares_sum_to_the_whole_table,
    embedding_rejects_a_token_beyond_the_vocabulary,
);
