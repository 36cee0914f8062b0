//! The expert kernels against a reference written here in f64, for every
//! weight dtype, x in f32, in the weights' dtype and RMS-normalised in the
//! kernel, Mixtral's 2 of 8,
//! Qwen3-MoE's 8 of 128 and odd shapes (rows not a whole number of 16-byte
//! chunks take the scalar path; experts of 6,400 rows, long runs of a row's
//! chunks over few experts), at 1, 3 and 17 rows, with three kinds of
//! choice: random (most experts get no row), every row on the same experts,
//! and an id past the last expert (which must contribute nothing). Outputs
//! are poisoned first; the residual add keeps what `hidden` held.

use kernelscope::ops::moe::experts::{MoeDownAdd, MoeGateUp, MoeNormGateUp};
use kernelscope::testing::Backend;
use kernelscope::{DType, OpKind, Primitive, ops};

use crate::common::{Choice, choose};
use crate::helpers::{ROWS, WEIGHT_DTYPES, poisoned, profiled_device, random, weights};

/// `|got - expected| <= 1e-5 · magnitude + 1e-6`, magnitude the sum of the
/// terms' absolute values (f32 accumulation in any order stays within it).
fn assert_within(got: &[f32], expected: &[f64], magnitude: &[f64], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    for (index, ((&got, &expected), &magnitude)) in got.iter().zip(expected).zip(magnitude).enumerate() {
        let error = (f64::from(got) - expected).abs();
        assert!(
            error <= 1e-5 * magnitude + 1e-6,
            "{what} [{index}]: {got} against {expected} (error {error:e}, magnitude {magnitude:e})"
        );
    }
}

fn silu(value: f64) -> f64 {
    value / (1.0 + (-value).exp())
}

fn moe_experts_match_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let gate_up = MoeGateUp::new(&registry, &device, dtype).unwrap();
        let norm_gate_up = MoeNormGateUp::new(&registry, &device, dtype).unwrap();
        let down_add = MoeDownAdd::new(&registry, &device, dtype).unwrap();
        for (experts, k, expert_rows, hidden) in [
            (8, 2, 40, 64),
            (128, 8, 24, 256),
            (16, 4, 13, 37),
            (4, 2, 6400, 16),
            // The widest x a block stages in shared memory (its launch at
            // the edge of the 48 KiB).
            (2, 1, 3, ops::moe::experts::MOST_HIDDEN),
        ] {
            let seed = (experts * 1000 + expert_rows * 10 + hidden) as u64;
            let gate_values = random(seed, experts * expert_rows * hidden, -0.5, 0.5);
            let up_values = random(seed + 1, experts * expert_rows * hidden, -0.5, 0.5);
            let down_values = random(seed + 2, experts * hidden * expert_rows, -0.5, 0.5);
            let (gate, gate_exact) = weights(&device, dtype, &gate_values, &[experts, expert_rows, hidden]);
            let (up, up_exact) = weights(&device, dtype, &up_values, &[experts, expert_rows, hidden]);
            let (down, down_exact) = weights(&device, dtype, &down_values, &[experts, hidden, expert_rows]);
            for rows in ROWS {
                for choice in [Choice::Random, Choice::Same, Choice::OutOfRange] {
                    let what = format!(
                        "{dtype} {experts} experts k {k} {expert_rows}x{hidden} rows {rows} {choice:?}"
                    );
                    let chosen = choose(choice, seed + rows as u64, rows, experts, k);
                    let ids = device.buffer_from_slice(&chosen, &[rows, k]).unwrap();
                    let routing_weights = random(seed + 3, rows * k, 0.05, 1.0);
                    let weights_buffer = device.buffer_from_slice(&routing_weights, &[rows, k]).unwrap();
                    // The reference of gate/up over inputs `x_exact` [rows, hidden].
                    let reference = |x_exact: &[f64]| {
                        let mut expected = Vec::new();
                        let mut magnitude = Vec::new();
                        for (slot, &expert) in chosen.iter().enumerate() {
                            let (row, expert) = (slot / k, expert as usize);
                            for i in 0..expert_rows {
                                if expert >= experts {
                                    expected.push(0.0);
                                    magnitude.push(0.0);
                                    continue;
                                }
                                let (mut g, mut u, mut size) = (0.0, 0.0, 0.0);
                                for h in 0..hidden {
                                    let xv = x_exact[row * hidden + h];
                                    let at = (expert * expert_rows + i) * hidden + h;
                                    g += gate_exact[at] * xv;
                                    u += up_exact[at] * xv;
                                    size += (gate_exact[at] * xv).abs() + (up_exact[at] * xv).abs();
                                }
                                expected.push(silu(g) * u);
                                magnitude.push(size * (1.0 + u.abs() + g.abs()));
                            }
                        }
                        (expected, magnitude)
                    };
                    for variant in ["wide", "narrow", "normed"] {
                        let x_dtype = if variant == "narrow" { dtype } else { DType::F32 };
                        let x_values = random(seed + 4, rows * hidden, -1.0, 1.0);
                        let (x, mut x_exact) = weights(&device, x_dtype, &x_values, &[rows, hidden]);
                        let activated = poisoned(&device, &[rows * k, expert_rows]);
                        let mut encoder = device.command_encoder();
                        if variant == "normed" {
                            let (norm, norm_exact) =
                                weights(&device, dtype, &random(seed + 7, hidden, 0.5, 1.5), &[hidden]);
                            let eps = 1e-5;
                            norm_gate_up
                                .encode(&mut encoder, &x, &norm, &ids, &gate, &up, &activated, eps)
                                .unwrap();
                            for row in x_exact.chunks_mut(hidden) {
                                let mean_square = row.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
                                let scale = 1.0 / (mean_square + f64::from(eps)).sqrt();
                                for (value, weight) in row.iter_mut().zip(&norm_exact) {
                                    *value *= scale * weight;
                                }
                            }
                        } else {
                            gate_up
                                .encode(&mut encoder, &x, &ids, &gate, &up, &activated)
                                .unwrap();
                        }
                        encoder.commit_and_wait().unwrap();
                        let got = activated.to_vec::<f32>().unwrap();
                        let (expected, magnitude) = reference(&x_exact);
                        assert_within(&got, &expected, &magnitude, &format!("gate_up {what} {variant}"));
                    }
                    // Down: the activations as the reference holds them.
                    let activated_values = random(seed + 5, rows * k * expert_rows, -1.0, 1.0);
                    let activated = device
                        .buffer_from_slice(&activated_values, &[rows * k, expert_rows])
                        .unwrap();
                    let start = random(seed + 6, rows * hidden, -2.0, 2.0);
                    let hidden_buffer = device.buffer_from_slice(&start, &[rows, hidden]).unwrap();
                    let mut encoder = device.command_encoder();
                    down_add
                        .encode(
                            &mut encoder,
                            &activated,
                            &ids,
                            &weights_buffer,
                            &down,
                            &hidden_buffer,
                        )
                        .unwrap();
                    encoder.commit_and_wait().unwrap();
                    let got = hidden_buffer.to_vec::<f32>().unwrap();
                    let mut expected = Vec::new();
                    let mut magnitude = Vec::new();
                    for row in 0..rows {
                        for r in 0..hidden {
                            let (mut total, mut size) = (
                                f64::from(start[row * hidden + r]),
                                f64::from(start[row * hidden + r]).abs(),
                            );
                            for j in 0..k {
                                let (slot, expert) = (row * k + j, chosen[row * k + j] as usize);
                                if expert >= experts {
                                    continue;
                                }
                                let weight = f64::from(routing_weights[slot]);
                                for i in 0..expert_rows {
                                    let term = weight
                                        * down_exact[(expert * hidden + r) * expert_rows + i]
                                        * f64::from(activated_values[slot * expert_rows + i]);
                                    total += term;
                                    size += term.abs();
                                }
                            }
                            expected.push(total);
                            magnitude.push(size);
                        }
                    }
                    assert_within(&got, &expected, &magnitude, &format!("down_add {what}"));
                }
            }
        }
    }
    // Each kernel declares the primitives it fuses.
    let dispatches = device.profiler().dispatches();
    for (prefix, kind) in [
        (
            "moe_gate_up_",
            OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]),
        ),
        (
            "moe_down_add_",
            OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]),
        ),
    ] {
        let ours: Vec<_> = dispatches
            .iter()
            .filter(|d| d.kernel.starts_with(prefix))
            .collect();
        assert!(!ours.is_empty(), "no {prefix} dispatch recorded");
        assert!(ours.iter().all(|d| d.op_kind == kind), "{prefix}: {:?}", ours[0]);
    }
    // Shapes that do not agree are refused before any launch.
    let gate_up = MoeGateUp::new(&registry, &device, DType::BF16).unwrap();
    let (gate, _) = weights(
        &device,
        DType::BF16,
        &random(1, 4 * 8 * 16, -1.0, 1.0),
        &[4, 8, 16],
    );
    let x = device.buffer_from_slice(&[0.5f32; 15], &[15]).unwrap();
    let ids = device.buffer_from_slice(&[0u32, 1], &[1, 2]).unwrap();
    let out = poisoned(&device, &[2, 8]);
    assert!(
        gate_up
            .encode(&mut device.command_encoder(), &x, &ids, &gate, &gate, &out)
            .is_err(),
        "x of 15 for rows of 16"
    );
}

kernelscope::device_tests!(moe_experts_match_reference);
