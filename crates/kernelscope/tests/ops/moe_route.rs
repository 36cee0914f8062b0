//! The mixture-of-experts router against a reference written here in f64:
//! the softmax over every expert, the k largest (ties to the lower index)
//! and their weights, renormalised or not, for Mixtral's 2 of 8, Qwen3-MoE's
//! 8 of 128 and odd sizes, at 1, 3 and 17 rows, with ties planted among the
//! largest logits; outputs poisoned first. Impossible choices are refused.

use kernelscope::ops::moe::route::MoeRoute;
use kernelscope::testing::Backend;
use kernelscope::{DType, OpKind, ops};

use crate::helpers::{ROWS, assert_dispatched, profiled_device, random};

fn moe_route_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for (experts, k) in [(8, 2), (128, 8), (60, 4), (33, 1), (300, 6)] {
        for renormalize in [false, true] {
            let op = MoeRoute::new(&registry, &device, experts, k, renormalize).unwrap();
            for rows in ROWS {
                let seed = (experts * 100 + k * 10 + rows) as u64;
                let mut logits = random(seed, rows * experts, -4.0, 4.0);
                // Ties: in every row the largest logit appears at two experts,
                // and the third largest at two more.
                for row in logits.chunks_mut(experts) {
                    let top = row.iter().copied().fold(f32::MIN, f32::max) + 1.0;
                    row[experts - 1] = top;
                    row[experts / 2] = top;
                    if experts > 4 {
                        row[1] = top - 0.5;
                        row[3] = top - 0.5;
                    }
                }
                let input = device.buffer_from_slice(&logits, &[rows, experts]).unwrap();
                let ids = device
                    .buffer_from_slice(&vec![u32::MAX; rows * k], &[rows, k])
                    .unwrap();
                let weights = device
                    .buffer_from_slice(&vec![f32::NAN; rows * k], &[rows, k])
                    .unwrap();
                // Tallies start where an earlier layer left them.
                let start: Vec<u32> = (0..experts as u32).map(|e| e % 5).collect();
                let counts = device.buffer_from_slice(&start, &[experts]).unwrap();
                let mut encoder = device.command_encoder();
                op.encode(&mut encoder, &input, &ids, &weights, &counts).unwrap();
                encoder.commit_and_wait().unwrap();
                let (ids, weights) = (ids.to_vec::<u32>().unwrap(), weights.to_vec::<f32>().unwrap());
                let mut expected_counts = start.clone();
                ids.iter().for_each(|&id| expected_counts[id as usize] += 1);
                assert_eq!(
                    counts.to_vec::<u32>().unwrap(),
                    expected_counts,
                    "{experts} experts, k {k}, rows {rows}: each choice tallied once"
                );
                for (row_index, row) in logits.chunks(experts).enumerate() {
                    let largest = row.iter().map(|&v| f64::from(v)).fold(f64::MIN, f64::max);
                    let total: f64 = row.iter().map(|&v| (f64::from(v) - largest).exp()).sum();
                    let mut order: Vec<usize> = (0..experts).collect();
                    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                    let chosen = &order[..k];
                    let probabilities: Vec<f64> = chosen
                        .iter()
                        .map(|&e| (f64::from(row[e]) - largest).exp() / total)
                        .collect();
                    let kept: f64 = probabilities.iter().sum();
                    let what = format!(
                        "{experts} experts, k {k}, renormalize {renormalize}, row {row_index} of {rows}"
                    );
                    let got_ids: Vec<usize> = ids[row_index * k..(row_index + 1) * k]
                        .iter()
                        .map(|&i| i as usize)
                        .collect();
                    assert_eq!(got_ids, chosen, "{what}");
                    for (slot, probability) in probabilities.iter().enumerate() {
                        let expected = if renormalize {
                            probability / kept
                        } else {
                            *probability
                        };
                        let got = f64::from(weights[row_index * k + slot]);
                        assert!(
                            (got - expected).abs() <= 1e-5 * expected + 1e-7,
                            "{what} [{slot}]: {got} against {expected}"
                        );
                    }
                }
            }
        }
    }
    assert_dispatched(&device, OpKind::Softmax, "moe_route_f32");
    for (experts, k) in [(8, 0), (8, 9), (64, 33)] {
        assert!(
            MoeRoute::new(&registry, &device, experts, k, true).is_err(),
            "{k} of {experts}"
        );
    }
    // Logits that are not whole rows of the experts, or not f32, are refused.
    let op = MoeRoute::new(&registry, &device, 8, 2, true).unwrap();
    let (ids, weights) = (
        device.alloc(DType::U32, &[2]).unwrap(),
        device.alloc(DType::F32, &[2]).unwrap(),
    );
    let counts = device.alloc(DType::U32, &[8]).unwrap();
    let ragged = device.buffer_from_slice(&[0.5f32; 7], &[7]).unwrap();
    assert!(
        op.encode(&mut device.command_encoder(), &ragged, &ids, &weights, &counts)
            .is_err()
    );
    // Tallies of another number of experts are refused.
    let logits = device.buffer_from_slice(&[0.5f32; 8], &[8]).unwrap();
    let short = device.alloc(DType::U32, &[7]).unwrap();
    assert!(
        op.encode(&mut device.command_encoder(), &logits, &ids, &weights, &short)
            .is_err()
    );
}

kernelscope::device_tests!(moe_route_matches_reference);
