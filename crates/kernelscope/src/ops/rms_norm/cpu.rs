//! CPU reference of RMSNorm (Llama/Qwen2: normalise in f32, then scale).

use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{EPS, N, OUT, WEIGHT, X};

/// Each row of `x` f32 `[rows, n]` normalised by its root mean square (plus
/// `eps`) and multiplied by `weight` `[n]`, into `out` `[rows, n]` rounded
/// to `O`.
pub(super) fn rms_norm<W: WeightElement, O: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.input::<f32>(X)?;
    let weight = args.input::<W>(WEIGHT)?;
    let out = args.output::<O>(OUT)?;
    let eps = args.f32(EPS)?;
    let n = (args.u32(N)? as usize).max(1);
    for (source, destination) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let scale = scale_of(source, eps);
        for ((o, v), w) in destination.iter_mut().zip(source).zip(weight) {
            *o = O::from_f32(v * scale * w.to_f32());
        }
    }
    Ok(())
}

/// `1 / sqrt(mean(x²) + eps)` of one row, in f32: the factor RMSNorm
/// multiplies it by (shared with the fused norm-and-mat-vec reference).
pub(crate) fn scale_of(row: &[f32], eps: f32) -> f32 {
    let mean_square = row.iter().map(|v| v * v).sum::<f32>() / row.len().max(1) as f32;
    1.0 / (mean_square + eps).sqrt()
}
