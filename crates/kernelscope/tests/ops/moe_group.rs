//! Grouping a chunk's rows by expert: the host's grouping puts every
//! choice at one position, experts' positions in runs, rows in order
//! within a run; the gather copies rows exactly (every dtype); the
//! combine adds each row's weighted expert outputs against an f64
//! reference. Random choices (most experts idle at few rows), every row
//! on the same experts, and an id past the last expert (refused).

use kernelscope::ops::moe::group::{MoeCombine, MoeGather, group_by_expert};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{DType, ops};

use crate::helpers::{ROWS, WEIGHT_DTYPES, profiled_device, random, weights};

fn choices(seed: u64, rows: usize, experts: usize, k: usize, same: bool) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    let mut ids = Vec::new();
    for _ in 0..rows {
        let mut chosen: Vec<u32> = Vec::new();
        while chosen.len() < k {
            let id = if same {
                (chosen.len() * 3 + 1) as u32 % experts as u32
            } else {
                (rng.next_u64() % experts as u64) as u32
            };
            if !chosen.contains(&id) {
                chosen.push(id);
            }
        }
        ids.extend(chosen);
    }
    ids
}

#[test]
fn grouping_places_every_choice_once_in_runs_by_expert() {
    for (experts, k, rows, same) in [(8, 2, 17, false), (128, 8, 64, false), (16, 4, 9, true)] {
        let ids = choices(experts as u64 + rows as u64, rows, experts, k, same);
        let (order, position, offsets) = group_by_expert(&ids, k, experts).unwrap();
        assert_eq!(offsets.len(), experts + 1);
        assert_eq!(offsets[experts], rows * k);
        for (slot, &id) in ids.iter().enumerate() {
            let p = position[slot] as usize;
            assert_eq!(
                order[p] as usize,
                slot / k,
                "slot {slot}: position {p} copies its row"
            );
            let id = id as usize;
            assert!(
                (offsets[id]..offsets[id + 1]).contains(&p),
                "slot {slot}: in expert {id}'s run"
            );
        }
        let mut seen = position.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..(rows * k) as u32).collect::<Vec<_>>(), "a permutation");
        for expert in 0..experts {
            let run = &order[offsets[expert]..offsets[expert + 1]];
            assert!(
                run.windows(2).all(|pair| pair[0] < pair[1]),
                "rows in order in expert {expert}'s run"
            );
        }
    }
    assert!(
        group_by_expert(&[0, 8], 2, 8).is_none(),
        "an id past the last expert"
    );
}

fn gather_and_combine_match_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    let combine = MoeCombine::new(&registry, &device).unwrap();
    for (experts, k, width) in [(8, 2, 64), (128, 8, 48), (16, 4, 37)] {
        for rows in ROWS {
            for same in [false, true] {
                let what = format!("{experts} experts k {k} width {width} rows {rows} same {same}");
                let ids = choices(width as u64 * 7 + rows as u64, rows, experts, k, same);
                let (order, position, _) = group_by_expert(&ids, k, experts).unwrap();
                let positions = rows * k;
                let order_buffer = device.buffer_from_slice(&order, &[positions]).unwrap();
                let position_buffer = device.buffer_from_slice(&position, &[rows, k]).unwrap();
                let values = random(rows as u64 + 11, rows * width, -2.0, 2.0);
                for dtype in WEIGHT_DTYPES {
                    let gather = MoeGather::new(&registry, &device, dtype).unwrap();
                    let (x, exact) = weights(&device, dtype, &values, &[rows, width]);
                    let out = device.alloc(dtype, &[positions, width]).unwrap();
                    let mut encoder = device.command_encoder();
                    gather.encode(&mut encoder, &x, &order_buffer, &out).unwrap();
                    encoder.commit_and_wait().unwrap();
                    let got = crate::helpers::read_f32(&out);
                    for p in 0..positions {
                        let row = order[p] as usize;
                        for i in 0..width {
                            assert_eq!(
                                f64::from(got[p * width + i]),
                                exact[row * width + i],
                                "gather {what} {dtype} position {p}"
                            );
                        }
                    }
                }
                // f32 rows into bf16 runs: each value rounded to nearest even.
                let narrow = MoeGather::narrow(&registry, &device).unwrap();
                let x = device.buffer_from_slice(&values, &[rows, width]).unwrap();
                let out = device.alloc(DType::BF16, &[positions, width]).unwrap();
                let mut encoder = device.command_encoder();
                narrow.encode(&mut encoder, &x, &order_buffer, &out).unwrap();
                encoder.commit_and_wait().unwrap();
                let got = crate::helpers::read_f32(&out);
                for p in 0..positions {
                    let row = order[p] as usize;
                    for i in 0..width {
                        let wanted = half::bf16::from_f32(values[row * width + i]).to_f32();
                        assert_eq!(got[p * width + i], wanted, "narrow gather {what} position {p}");
                    }
                }
                let expert_out = random(rows as u64 + 12, positions * width, -1.0, 1.0);
                let routing = random(rows as u64 + 13, positions, 0.05, 1.0);
                let start = random(rows as u64 + 14, rows * width, -3.0, 3.0);
                let expert_out_buffer = device
                    .buffer_from_slice(&expert_out, &[positions, width])
                    .unwrap();
                let routing_buffer = device.buffer_from_slice(&routing, &[rows, k]).unwrap();
                let hidden = device.buffer_from_slice(&start, &[rows, width]).unwrap();
                let mut encoder = device.command_encoder();
                combine
                    .encode(
                        &mut encoder,
                        &expert_out_buffer,
                        &position_buffer,
                        &routing_buffer,
                        &hidden,
                    )
                    .unwrap();
                encoder.commit_and_wait().unwrap();
                let got = hidden.to_vec::<f32>().unwrap();
                for row in 0..rows {
                    for r in 0..width {
                        let (mut expected, mut size) = (f64::from(start[row * width + r]), 0.0f64);
                        for j in 0..k {
                            let p = position[row * k + j] as usize;
                            let term = f64::from(routing[row * k + j]) * f64::from(expert_out[p * width + r]);
                            expected += term;
                            size += term.abs();
                        }
                        let error = (f64::from(got[row * width + r]) - expected).abs();
                        assert!(
                            error <= 1e-6 * (size + expected.abs()) + 1e-6,
                            "combine {what} row {row} [{r}]: {} against {expected}",
                            got[row * width + r]
                        );
                    }
                }
            }
        }
    }
    // An order whose length is not the output's rows is refused.
    let gather = MoeGather::new(&registry, &device, DType::F32).unwrap();
    let x = device.buffer_from_slice(&[1.0f32; 8], &[2, 4]).unwrap();
    let order = device.buffer_from_slice(&[0u32, 1, 0], &[3]).unwrap();
    let out = device.alloc(DType::F32, &[2, 4]).unwrap();
    assert!(
        gather
            .encode(&mut device.command_encoder(), &x, &order, &out)
            .is_err()
    );
}

kernelscope::device_tests!(gather_and_combine_match_reference);
