//! CPU references of the quantized expert products: the staged input
//! dequantized (`value · scale` per element, what the integer products
//! compute exactly; `_q8`) or taken in f32 (`_f32`, the reference the
//! model's f32-activation path runs), each chosen expert's rows dotted
//! with it in f32 block by block (`QuantFormat::dot_row`), outputs in
//! parallel.
//! The CUDA kernels agree with `_q8` up to the order of their f32 sums.

use rayon::prelude::*;

use super::arguments::{Input, down, gate_up};
use crate::error::{Error, Result};
use crate::ops::quantized::linear::stage::staged_row;
use crate::quant::QuantFormat;
use crate::runtime::KernelArgs;

/// Bytes of a row of `elements` values of `format`, or the error naming
/// `kernel`.
fn row_bytes(format: QuantFormat, kernel: &str, elements: usize) -> Result<usize> {
    format.row_bytes(elements).ok_or_else(|| Error::KernelFailed {
        kernel: kernel.to_string(),
        message: format!("{elements} elements are not whole {format} blocks"),
    })
}

/// Row `row` of a stacked weight of rows of `bytes` bytes dotted with `x`
/// in f32, block by block (no dequantized copy of the row).
fn row_dot(format: QuantFormat, weight: &[u8], bytes: usize, row: usize, x: &[f32]) -> f32 {
    format
        .dot_row(&weight[row * bytes..(row + 1) * bytes], x)
        .expect("row lengths checked")
}

/// Row `row` of an input of `total` values in rows of `length`: staged
/// and dequantized, or as it is.
fn input_row(
    input: Input,
    args: &KernelArgs<'_>,
    index: usize,
    total: usize,
    length: usize,
    row: usize,
) -> Result<Vec<f32>> {
    Ok(match input {
        Input::Staged => staged_row(args.input::<u8>(index)?, total, length, row),
        Input::F32 => args.input::<f32>(index)?[row * length..(row + 1) * length].to_vec(),
    })
}

/// `moe_gate_up_<format>_<input>`: for each row and each of its k chosen
/// experts e, `out[row, j, i] = silu(gate[e, i] · x[row]) * (up[e, i] ·
/// x[row])`.
pub(super) fn moe_gate_up(format: QuantFormat, input: Input, args: &KernelArgs<'_>) -> Result<()> {
    use gate_up::{EXPERT_ROWS, EXPERTS, GATE, HIDDEN_SIZE, IDS, K, OUT, ROWS, UP, X};
    let kernel = format!("moe_gate_up_{}_{}", format.name(), input.suffix());
    let rows = args.u32(ROWS)? as usize;
    let hidden = args.u32(HIDDEN_SIZE)? as usize;
    let expert_rows = args.u32(EXPERT_ROWS)? as usize;
    let experts = args.u32(EXPERTS)? as usize;
    let k = (args.u32(K)? as usize).max(1);
    let bytes = row_bytes(format, &kernel, hidden)?;
    let ids = args.input::<u32>(IDS)?;
    let (gate, up) = (args.input::<u8>(GATE)?, args.input::<u8>(UP)?);
    let out = args.output::<f32>(OUT)?;
    let stacked = experts * expert_rows * bytes;
    if gate.len() < stacked
        || up.len() < stacked
        || ids.len() < rows * k
        || out.len() < rows * k * expert_rows
    {
        return Err(Error::KernelFailed {
            kernel,
            message: "a buffer is shorter than its shape".into(),
        });
    }
    let inputs = (0..rows)
        .map(|row| input_row(input, args, X, rows * hidden, hidden, row))
        .collect::<Result<Vec<_>>>()?;
    out[..rows * k * expert_rows]
        .par_chunks_mut(expert_rows)
        .enumerate()
        .for_each(|(slot, out)| {
            let expert = ids[slot] as usize;
            if expert >= experts {
                out.fill(0.0);
                return;
            }
            let input = &inputs[slot / k];
            for (i, value) in out.iter_mut().enumerate() {
                let row = expert * expert_rows + i;
                let g = row_dot(format, gate, bytes, row, input);
                let u = row_dot(format, up, bytes, row, input);
                *value = g / (1.0 + (-g).exp()) * u;
            }
        });
    Ok(())
}

/// `moe_down_add_<format>_<input>`: for each row, `hidden[row] += Σ_j
/// weights[row, j] · (down[e_j] · activated[row, j])` over its k chosen
/// experts, in order.
pub(super) fn moe_down_add(format: QuantFormat, input: Input, args: &KernelArgs<'_>) -> Result<()> {
    use down::{ACTIVATED, DOWN, EXPERT_ROWS, EXPERTS, HIDDEN, HIDDEN_SIZE, IDS, K, ROWS, WEIGHTS};
    let kernel = format!("moe_down_add_{}_{}", format.name(), input.suffix());
    let rows = args.u32(ROWS)? as usize;
    let hidden_size = args.u32(HIDDEN_SIZE)? as usize;
    let expert_rows = args.u32(EXPERT_ROWS)? as usize;
    let experts = args.u32(EXPERTS)? as usize;
    let k = (args.u32(K)? as usize).max(1);
    let bytes = row_bytes(format, &kernel, expert_rows)?;
    let (ids, weights) = (args.input::<u32>(IDS)?, args.input::<f32>(WEIGHTS)?);
    let down = args.input::<u8>(DOWN)?;
    let hidden = args.output::<f32>(HIDDEN)?;
    if down.len() < experts * hidden_size * bytes
        || ids.len() < rows * k
        || weights.len() < rows * k
        || hidden.len() < rows * hidden_size
    {
        return Err(Error::KernelFailed {
            kernel,
            message: "a buffer is shorter than its shape".into(),
        });
    }
    let total = rows * k * expert_rows;
    let inputs = (0..rows * k)
        .map(|slot| input_row(input, args, ACTIVATED, total, expert_rows, slot))
        .collect::<Result<Vec<_>>>()?;
    // Element by element in parallel: decode has one row.
    hidden[..rows * hidden_size]
        .par_iter_mut()
        .enumerate()
        .for_each(|(at, value)| {
            let (row, r) = (at / hidden_size, at % hidden_size);
            let mut sum = 0.0f32;
            for j in 0..k {
                let slot = row * k + j;
                let expert = ids[slot] as usize;
                if expert >= experts {
                    continue;
                }
                sum += weights[slot] * row_dot(format, down, bytes, expert * hidden_size + r, &inputs[slot]);
            }
            *value += sum;
        });
    Ok(())
}
