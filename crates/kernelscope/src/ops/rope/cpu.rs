//! CPU reference of RoPE, rotate-half layout: for i < d/2,
//! `x[i], x[i+d/2] ← x[i]·cos − x[i+d/2]·sin, x[i+d/2]·cos + x[i]·sin`
//! with the angle `position · inv_freq[i]` computed in f32 as transformers does.

use crate::error::{Error, Result};
use crate::runtime::KernelArgs;

use super::{ATTENTION_SCALING, FIRST, HEAD_DIM, HEADS, INVERSE_FREQUENCIES, POSITIONS, ROWS, X};

/// Rotates each row r of `x` f32 `[rows, heads, head_dim]` in place by
/// position `positions[first + r]`, cos and sin multiplied by
/// `attention_scaling`.
pub(super) fn rope(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.output::<f32>(X)?;
    let inverse_frequencies = args.input::<f32>(INVERSE_FREQUENCIES)?;
    let positions = args.input::<u32>(POSITIONS)?;
    let (first, rows) = (args.u32(FIRST)? as usize, args.u32(ROWS)? as usize);
    let heads = args.u32(HEADS)? as usize;
    let head_dim = (args.u32(HEAD_DIM)? as usize).max(2);
    let attention_scaling = args.f32(ATTENTION_SCALING)?;
    let positions = positions
        .get(first..first + rows)
        .ok_or_else(|| Error::KernelFailed {
            kernel: "rope".into(),
            message: format!(
                "positions {first}..{} are beyond the {} given",
                first + rows,
                positions.len()
            ),
        })?;
    for (&position, row) in positions
        .iter()
        .zip(x.chunks_exact_mut((heads * head_dim).max(1)))
    {
        let rotations = rotations(position, inverse_frequencies, attention_scaling);
        for head in row.chunks_exact_mut(head_dim) {
            rotate(head, &rotations);
        }
    }
    Ok(())
}

/// `(cos, sin)` of `position · inv_freq[i]` for each frequency, both
/// multiplied by `attention_scaling`.
pub(crate) fn rotations(
    position: u32,
    inverse_frequencies: &[f32],
    attention_scaling: f32,
) -> Vec<(f32, f32)> {
    let position = position as f32;
    inverse_frequencies
        .iter()
        .map(|f| (position * f).sin_cos())
        .map(|(s, c)| (c * attention_scaling, s * attention_scaling))
        .collect()
}

/// Rotates one head in place, rotate-half layout.
pub(crate) fn rotate(head: &mut [f32], rotations: &[(f32, f32)]) {
    let (first_half, second_half) = head.split_at_mut(head.len() / 2);
    for ((a, b), (cos, sin)) in first_half.iter_mut().zip(second_half.iter_mut()).zip(rotations) {
        let (x0, x1) = (*a, *b);
        *a = x0 * cos - x1 * sin;
        *b = x1 * cos + x0 * sin;
    }
}
