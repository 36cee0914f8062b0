//! CPU references of the expert kernels: each row's chosen experts, one
//! after another, with the mat-vec references' dot product (so the CUDA
//! kernels are tested against the same arithmetic the CPU path runs).

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::rms_norm::cpu::scale_of;
use crate::ops::{WeightElement, dot};
use crate::runtime::KernelArgs;

/// For each row and each of its k chosen experts e: `out[row, j, i] =
/// silu(gate[e, i] · x[row]) * (up[e, i] · x[row])`, with x in `X`'s dtype
/// (f32 in decode, the weights' dtype in prefill) widened to f32.
pub(super) fn moe_gate_up<W: WeightElement, X: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::gate_up::{EXPERT_ROWS, EXPERTS, GATE, HIDDEN_SIZE, IDS, K, OUT, UP, X};
    let hidden = args.u32(HIDDEN_SIZE)? as usize;
    let x = args.input::<X>(X)?;
    let input = |row: usize| -> Vec<f32> {
        x[row * hidden..(row + 1) * hidden]
            .iter()
            .map(|value| value.to_f32())
            .collect()
    };
    gate_up_rows::<W>(
        args,
        [GATE, UP, IDS, OUT],
        [HIDDEN_SIZE, EXPERT_ROWS, EXPERTS, K],
        input,
    )
}

/// [`moe_gate_up`] of `rmsnorm(x[row]) * norm_weight`, as the RMSNorm op
/// computes it.
pub(super) fn moe_norm_gate_up<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::norm_gate_up::{
        EPS, EXPERT_ROWS, EXPERTS, GATE, HIDDEN_SIZE, IDS, K, NORM_WEIGHT, OUT, UP, X,
    };
    let hidden = args.u32(HIDDEN_SIZE)? as usize;
    let (x, norm_weight, eps) = (
        args.input::<f32>(X)?,
        args.input::<W>(NORM_WEIGHT)?,
        args.f32(EPS)?,
    );
    let input = |row: usize| -> Vec<f32> {
        let values = &x[row * hidden..(row + 1) * hidden];
        let scale = scale_of(values, eps);
        values
            .iter()
            .zip(norm_weight)
            .map(|(value, weight)| value * scale * weight.to_f32())
            .collect()
    };
    gate_up_rows::<W>(
        args,
        [GATE, UP, IDS, OUT],
        [HIDDEN_SIZE, EXPERT_ROWS, EXPERTS, K],
        input,
    )
}

/// The gate/up body both kernels share: each row's input from `input(row)`,
/// the buffers and sizes at the given argument positions.
fn gate_up_rows<W: WeightElement>(
    args: &KernelArgs<'_>,
    [gate, up, ids, out]: [usize; 4],
    [hidden, expert_rows, experts, k]: [usize; 4],
    input: impl Fn(usize) -> Vec<f32> + Sync,
) -> Result<()> {
    let hidden = args.u32(hidden)? as usize;
    let rows_per_expert = args.u32(expert_rows)? as usize;
    let experts = args.u32(experts)? as usize;
    let k = (args.u32(k)? as usize).max(1);
    let ids = args.input::<u32>(ids)?;
    let (gate, up) = (args.input::<W>(gate)?, args.input::<W>(up)?);
    let matrix = rows_per_expert * hidden;
    args.output::<f32>(out)?
        .par_chunks_mut(rows_per_expert)
        .enumerate()
        .for_each(|(slot, out)| {
            let expert = ids[slot] as usize;
            if expert >= experts {
                out.fill(0.0);
                return;
            }
            let input = input(slot / k);
            let (gate, up) = (&gate[expert * matrix..], &up[expert * matrix..]);
            for (i, value) in out.iter_mut().enumerate() {
                let g = dot(&gate[i * hidden..(i + 1) * hidden], &input);
                let u = dot(&up[i * hidden..(i + 1) * hidden], &input);
                *value = g / (1.0 + (-g).exp()) * u;
            }
        });
    Ok(())
}

/// For each row: `hidden[row] += Σ_j weights[row, j] · (down[e_j] ·
/// activated[row, j])` over its k chosen experts e_j, in order.
pub(super) fn moe_down_add<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    use super::arguments::down::{
        ACTIVATED, DOWN, EXPERT_ROWS, EXPERTS, HIDDEN, HIDDEN_SIZE, IDS, K, WEIGHTS,
    };
    let hidden_size = args.u32(HIDDEN_SIZE)? as usize;
    let rows_per_expert = args.u32(EXPERT_ROWS)? as usize;
    let experts = args.u32(EXPERTS)? as usize;
    let k = (args.u32(K)? as usize).max(1);
    let activated = args.input::<f32>(ACTIVATED)?;
    let ids = args.input::<u32>(IDS)?;
    let weights = args.input::<f32>(WEIGHTS)?;
    let down = args.input::<W>(DOWN)?;
    let matrix = rows_per_expert * hidden_size;
    args.output::<f32>(HIDDEN)?
        .par_chunks_mut(hidden_size)
        .enumerate()
        .for_each(|(row, hidden)| {
            for (r, value) in hidden.iter_mut().enumerate() {
                let mut total = 0.0f32;
                for j in 0..k {
                    let slot = row * k + j;
                    let expert = ids[slot] as usize;
                    if expert >= experts {
                        continue;
                    }
                    let weight_row = &down[expert * matrix + r * rows_per_expert..][..rows_per_expert];
                    let input = &activated[slot * rows_per_expert..(slot + 1) * rows_per_expert];
                    total += weights[slot] * dot(weight_row, input);
                }
                *value += total;
            }
        });
    Ok(())
}
