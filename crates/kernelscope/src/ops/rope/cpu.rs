//! CPU reference of RoPE, rotate-half layout: for i < d/2,
//! `x[i], x[i+d/2] ← x[i]·cos − x[i+d/2]·sin, x[i+d/2]·cos + x[i]·sin`
//! with the angle `position · inv_freq[i]` computed in f32 as transformers does.

use crate::error::Result;
use crate::runtime::KernelArgs;

/// args: x f32 `[heads, d]` (read-write), inv_freq f32 `[d/2]`, position slot u32, slot index, heads, d,
/// attention scaling (multiplies cos and sin).
pub(super) fn rope(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.output::<f32>(0)?;
    let inverse_frequencies = args.input::<f32>(1)?;
    let position = args.input::<u32>(2)?[args.u32(3)? as usize] as f32;
    let head_dim = args.u32(5)? as usize;
    let half = head_dim / 2;
    let attention_scaling = args.f32(6)?;
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
