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
        let mean_square = source.iter().map(|v| v * v).sum::<f32>() / n as f32;
        let scale = 1.0 / (mean_square + eps).sqrt();
        for ((o, v), w) in destination.iter_mut().zip(source).zip(weight) {
            *o = O::from_f32(v * scale * w.to_f32());
        }
    }
    Ok(())
}
