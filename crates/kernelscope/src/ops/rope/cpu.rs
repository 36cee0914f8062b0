//! CPU reference of RoPE, rotate-half layout: for i < d/2,
//! `x[i], x[i+d/2] ← x[i]·cos − x[i+d/2]·sin, x[i+d/2]·cos + x[i]·sin`
//! with the angle `position · inv_freq[i]` computed in f32 as transformers does.

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{ATTENTION_SCALING, HEAD_DIM, INDEX, INVERSE_FREQUENCIES, POSITION_SLOT, X};

/// Rotates `x` f32 `[heads, head_dim]` in place by position
/// `position_slot[index]`, cos and sin multiplied by `attention_scaling`.
pub(super) fn rope(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.output::<f32>(X)?;
    let inverse_frequencies = args.input::<f32>(INVERSE_FREQUENCIES)?;
    let position = args.input::<u32>(POSITION_SLOT)?[args.u32(INDEX)? as usize] as f32;
    let head_dim = args.u32(HEAD_DIM)? as usize;
    let half = head_dim / 2;
    let attention_scaling = args.f32(ATTENTION_SCALING)?;
    let rotations: Vec<(f32, f32)> = inverse_frequencies
        .iter()
        .map(|f| (position * f).sin_cos())
        .map(|(s, c)| (c * attention_scaling, s * attention_scaling))
        .collect();
    for head in x.chunks_exact_mut(head_dim) {
        let (first, second) = head.split_at_mut(half);
        for ((a, b), (cos, sin)) in first.iter_mut().zip(second.iter_mut()).zip(&rotations) {
            let (x0, x1) = (*a, *b);
            *a = x0 * cos - x1 * sin;
            *b = x1 * cos + x0 * sin;
        }
    }
    Ok(())
}
