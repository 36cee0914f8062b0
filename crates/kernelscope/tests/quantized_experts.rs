//! The quantized expert products (`ops::quantized::experts`) on the CPU and on
//! CUDA against an exact reference written here: for every format, the
//! chosen experts' gate/up + SiLU·mul and down + weighted residual add
//! over stacked weights quantized by the reference quantizers (each block
//! of 32 at its own scale), x quantized to 8-bit blocks of 32 as the ops
//! stage it and multiplied exactly in f64 (a layout, scale or expert slip
//! is off by far more than f32 sums are). Shapes: Mixtral's 2 of 8,
//! Qwen3-MoE's 8 of 128, rows of one block; 1, 3 and 17 rows; choices
//! random (most experts get no row), every row on the same experts, and
//! an id past the last expert (which must contribute nothing); on CUDA,
//! decode's RMSNorm fused into the gate/up input's quantization. Outputs
//! are poisoned first; the residual add keeps what `hidden` held.

use kernelscope::ops::quantized::experts::MoeQuantized;
use kernelscope::ops::quantized::linear::{Activations, BlockLayout};
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{Buffer, DType, Device, DeviceOptions, OpKind, Primitive, ops};

mod common;
use common::{Choice, choose};

/// Stacked quantized matrices `[experts, rows, columns]`: their ggml blocks
/// and what they dequantize to.
struct Stacked {
    format: QuantFormat,
    experts: usize,
    rows: usize,
    columns: usize,
    blocks: Vec<u8>,
    values: Vec<f64>,
}

/// Random stacked matrices of `format`, each block of 32 at its own scale
/// (1e-2, 1 or 8; every fifth all positive, so minimums and offsets work).
fn random_stacked(format: QuantFormat, experts: usize, rows: usize, columns: usize, seed: u64) -> Stacked {
    let mut raw = SplitMix64::new(seed).vec_f32(experts * rows * columns, -1.0, 1.0);
    for (index, block) in raw.chunks_mut(32).enumerate() {
        let scale = [1e-2f32, 1.0, 8.0][(index * 7 + seed as usize) % 3];
        for value in block {
            *value = if index % 5 == 2 { value.abs() + 0.5 } else { *value } * scale;
        }
    }
    let row_bytes = format.row_bytes(columns).unwrap();
    let mut blocks = vec![0u8; experts * rows * row_bytes];
    let mut values = Vec::with_capacity(raw.len());
    let mut row_values = vec![0.0f32; columns];
    for (row, stored) in blocks.chunks_mut(row_bytes).enumerate() {
        format
            .quantize_row(&raw[row * columns..(row + 1) * columns], stored)
            .unwrap();
        format.dequantize_row(stored, &mut row_values).unwrap();
        values.extend(row_values.iter().map(|&v| f64::from(v)));
    }
    Stacked {
        format,
        experts,
        rows,
        columns,
        blocks,
        values,
    }
}

impl Stacked {
    /// On `device` in the layout its kernels read, `[experts, rows, row_bytes]`.
    fn upload(&self, device: &Device) -> Buffer {
        let row_bytes = self.blocks.len() / (self.experts * self.rows);
        let arranged = BlockLayout::of(device).arrange(self.format, self.experts * self.rows, |row| {
            &self.blocks[row * row_bytes..(row + 1) * row_bytes]
        });
        let buffer = device
            .alloc(
                DType::U8,
                &[
                    self.experts,
                    self.rows,
                    arranged.len() / (self.experts * self.rows),
                ],
            )
            .unwrap();
        buffer.write_bytes(&arranged).unwrap();
        buffer
    }

    /// Row `row` of expert `expert`, dequantized.
    fn row(&self, expert: usize, row: usize) -> &[f64] {
        let at = (expert * self.rows + row) * self.columns;
        &self.values[at..at + self.columns]
    }
}

/// x as the ops stage it: blocks of 32 at scale max|x| / 127, each value a
/// whole number of steps (half away from zero), in the same f32 operations.
fn staged(x: &[f32]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(32) {
        let largest = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = largest / 127.0;
        let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        out.extend(block.iter().map(|v| f64::from((v * inverse).round() * scale)));
    }
    out
}

/// The exact product of two rows and the sum of its terms' magnitudes.
fn product(a: &[f64], b: &[f64]) -> (f64, f64) {
    a.iter().zip(b).fold((0.0, 0.0), |(sum, size), (x, y)| {
        (sum + x * y, size + (x * y).abs())
    })
}

/// `|got - expected| <= 2e-5 · magnitude + 1e-5` everywhere (NaN fails).
fn assert_within(got: &[f32], expected: &[(f64, f64)], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    let bad: Vec<String> = got
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (got, (value, size)))| {
            let error = (f64::from(**got) - value).abs();
            error.is_nan() || error > 2e-5 * size + 1e-5
        })
        .take(5)
        .map(|(i, (got, (value, size)))| format!("[{i}] expected {value:e} (terms {size:e}), got {got:e}"))
        .collect();
    assert!(bad.is_empty(), "{what}: {}", bad.join("; "));
}

fn poisoned(device: &Device, shape: &[usize]) -> Buffer {
    let buffer = device.alloc(DType::F32, shape).unwrap();
    buffer.write_from(&vec![f32::NAN; buffer.len()]).unwrap();
    buffer
}

fn quantized_experts_match_exact_products(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let registry = ops::registry();
    let mut fused_checks = 0;
    for format in QuantFormat::ALL {
        let op = MoeQuantized::new(&registry, &device, format, Activations::Int8).unwrap();
        let block = format.block_elements();
        // (experts, k, expert rows in blocks, hidden in blocks)
        for (experts, k, inter_blocks, hidden_blocks) in [(8, 2, 2, 2), (128, 8, 1, 1), (4, 2, 3, 1)] {
            let (inter, hidden) = (inter_blocks * block, hidden_blocks * block);
            // Rows of the gate/up matrices (down reads `inter` columns of its own
            // random inputs): a few per expert, not whole warps.
            let expert_rows = inter.min(40 + experts % 7);
            let seed = (experts * 100 + inter + hidden) as u64 + format as u64 * 7919;
            let gate = random_stacked(format, experts, expert_rows, hidden, seed);
            let up = random_stacked(format, experts, expert_rows, hidden, seed + 1);
            let down = random_stacked(format, experts, hidden, inter, seed + 2);
            let (gate_buffer, up_buffer, down_buffer) =
                (gate.upload(&device), up.upload(&device), down.upload(&device));
            for rows in [1usize, 3, 17] {
                for choice in [Choice::Random, Choice::Same, Choice::OutOfRange] {
                    let what = format!("{format} {experts} experts k {k} rows {rows} {choice:?}");
                    let chosen = choose(choice, seed + rows as u64, rows, experts, k);
                    let ids = device.buffer_from_slice(&chosen, &[rows, k]).unwrap();
                    // Gate/up.
                    let x = SplitMix64::new(seed + 3).vec_f32(rows * hidden, -2.0, 2.0);
                    let x_staged = staged(&x);
                    let activated = poisoned(&device, &[rows * k, expert_rows]);
                    let mut encoder = device.command_encoder();
                    op.encode_gate_up(
                        &mut encoder,
                        &device.buffer_from_slice(&x, &[rows, hidden]).unwrap(),
                        &ids,
                        &gate_buffer,
                        &up_buffer,
                        &activated,
                    )
                    .unwrap();
                    encoder.commit_and_wait().unwrap();
                    let mut expected = Vec::new();
                    for (slot, &expert) in chosen.iter().enumerate() {
                        let (row, expert) = (slot / k, expert as usize);
                        let input = &x_staged[row * hidden..(row + 1) * hidden];
                        for i in 0..expert_rows {
                            if expert >= experts {
                                expected.push((0.0, 0.0));
                                continue;
                            }
                            let (g, g_size) = product(gate.row(expert, i), input);
                            let (u, u_size) = product(up.row(expert, i), input);
                            let silu = g / (1.0 + (-g).exp());
                            expected
                                .push((silu * u, g_size * u.abs() + u_size * silu.abs() + g_size * u_size));
                        }
                    }
                    assert_within(
                        &activated.to_vec::<f32>().unwrap(),
                        &expected,
                        &format!("gate_up {what}"),
                    );
                    if rows == 1 && op.fuses_norm() {
                        // Decode's RMSNorm fused into the quantization: as
                        // the norm computed here, then staged (a value on a
                        // rounding edge may land a step away: looser bound).
                        let norm_weight = SplitMix64::new(seed + 7).vec_f32(hidden, 0.5, 1.5);
                        let scale =
                            1.0 / (x.iter().map(|v| v * v).sum::<f32>() / hidden as f32 + 1e-5).sqrt();
                        let normed: Vec<f32> =
                            x.iter().zip(&norm_weight).map(|(v, w)| v * scale * w).collect();
                        let normed = staged(&normed);
                        let activated = poisoned(&device, &[k, expert_rows]);
                        let mut encoder = device.command_encoder();
                        op.encode_norm_gate_up(
                            &mut encoder,
                            &device.buffer_from_slice(&x, &[1, hidden]).unwrap(),
                            &device.buffer_from_slice(&norm_weight, &[hidden]).unwrap(),
                            1e-5,
                            &ids,
                            &gate_buffer,
                            &up_buffer,
                            &activated,
                        )
                        .unwrap();
                        encoder.commit_and_wait().unwrap();
                        let got = activated.to_vec::<f32>().unwrap();
                        for (slot, &expert) in chosen.iter().enumerate() {
                            let expert = expert as usize;
                            for i in 0..expert_rows {
                                let got = f64::from(got[slot * expert_rows + i]);
                                if expert >= experts {
                                    assert_eq!(got, 0.0, "norm_gate_up {what}: idle slot");
                                    continue;
                                }
                                let (g, g_size) = product(gate.row(expert, i), &normed);
                                let (u, u_size) = product(up.row(expert, i), &normed);
                                let wanted = g / (1.0 + (-g).exp()) * u;
                                let size = g_size * u.abs() + u_size * g.abs() + g_size * u_size;
                                assert!(
                                    (got - wanted).abs() <= 5e-3 * size + 1e-5,
                                    "norm_gate_up {what} [{slot}, {i}]: {got} against {wanted} (terms {size})"
                                );
                            }
                        }
                        fused_checks += 1;
                    }
                    // Down, added into what hidden held.
                    let inputs = SplitMix64::new(seed + 4).vec_f32(rows * k * inter, -1.0, 1.0);
                    let inputs_staged = staged(&inputs);
                    let routing = SplitMix64::new(seed + 5).vec_f32(rows * k, 0.05, 1.0);
                    let start = SplitMix64::new(seed + 6).vec_f32(rows * hidden, -2.0, 2.0);
                    let hidden_buffer = device.buffer_from_slice(&start, &[rows, hidden]).unwrap();
                    let mut encoder = device.command_encoder();
                    op.encode_down_add(
                        &mut encoder,
                        &device.buffer_from_slice(&inputs, &[rows * k, inter]).unwrap(),
                        &ids,
                        &device.buffer_from_slice(&routing, &[rows, k]).unwrap(),
                        &down_buffer,
                        &hidden_buffer,
                    )
                    .unwrap();
                    encoder.commit_and_wait().unwrap();
                    let mut expected = Vec::new();
                    for row in 0..rows {
                        for r in 0..hidden {
                            let start = f64::from(start[row * hidden + r]);
                            let (mut total, mut size) = (start, start.abs());
                            for j in 0..k {
                                let (slot, expert) = (row * k + j, chosen[row * k + j] as usize);
                                if expert >= experts {
                                    continue;
                                }
                                let weight = f64::from(routing[slot]);
                                let input = &inputs_staged[slot * inter..(slot + 1) * inter];
                                let (value, magnitude) = product(down.row(expert, r), input);
                                total += weight * value;
                                size += weight * magnitude;
                            }
                            expected.push((total, size));
                        }
                    }
                    assert_within(
                        &hidden_buffer.to_vec::<f32>().unwrap(),
                        &expected,
                        &format!("down_add {what}"),
                    );
                }
            }
        }
    }
    // CUDA normalises into the quantization; the CPU runs the norm apart.
    assert_eq!(
        fused_checks > 0,
        backend == Backend::Cuda,
        "fused norm checks: {fused_checks}"
    );
    // Each product declares what it fuses, and its input is quantized once.
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
    let products = dispatches.iter().filter(|d| d.kernel.starts_with("moe_")).count();
    let stages = dispatches
        .iter()
        .filter(|d| matches!(&*d.kernel, "quantize_q8" | "norm_quantize_q8"))
        .count();
    assert_eq!(stages, products, "one quantization per product");
}

fn quantized_experts_refuse_mismatched_shapes(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let op = MoeQuantized::new(&ops::registry(), &device, QuantFormat::Q8_0, Activations::Int8).unwrap();
    let gate = random_stacked(QuantFormat::Q8_0, 4, 8, 64, 1).upload(&device);
    let up = random_stacked(QuantFormat::Q8_0, 4, 8, 32, 2).upload(&device);
    let x = device
        .buffer_from_slice(&SplitMix64::new(3).vec_f32(64, -1.0, 1.0), &[1, 64])
        .unwrap();
    let ids = device.buffer_from_slice(&[0u32, 1], &[1, 2]).unwrap();
    let out = poisoned(&device, &[2, 8]);
    let error = op
        .encode_gate_up(&mut device.command_encoder(), &x, &ids, &gate, &up, &out)
        .unwrap_err();
    assert!(error.to_string().contains("up projection"), "{error}");
    // A dense buffer is not a stacked quantized weight.
    let dense = device.alloc(DType::F32, &[4, 8, 64]).unwrap();
    let error = op
        .encode_gate_up(&mut device.command_encoder(), &x, &ids, &dense, &dense, &out)
        .unwrap_err();
    assert!(error.to_string().contains("gate"), "{error}");
}

kernelscope::device_tests!(
    quantized_experts_match_exact_products,
    quantized_experts_refuse_mismatched_shapes
);
