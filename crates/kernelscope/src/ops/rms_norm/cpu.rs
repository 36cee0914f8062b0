//! CPU reference of RMSNorm (Llama/Qwen2: normalise in f32, then scale).

use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{EPS, OUT, WEIGHT, X};

/// `out` f32 = `x` f32 normalised by its root mean square (plus `eps`), times `weight`.
pub(super) fn rms_norm<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.input::<f32>(X)?;
    let weight = args.input::<W>(WEIGHT)?;
    let out = args.output::<f32>(OUT)?;
    let eps = args.f32(EPS)?;
    let mean_square = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let scale = 1.0 / (mean_square + eps).sqrt();
    for ((o, v), w) in out.iter_mut().zip(x).zip(weight) {
        *o = v * scale * w.to_f32();
    }
    Ok(())
}
