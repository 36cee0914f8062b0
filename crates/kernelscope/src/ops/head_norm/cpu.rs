//! CPU reference of the per-head RMSNorm: each head normalised in f32 as
//! RMSNorm normalises a row, then scaled by the weight, in place.

use crate::error::Result;
use crate::ops::WeightElement;
use crate::ops::rms_norm::cpu::scale_of;
use crate::runtime::KernelArgs;

use super::{EPS, HEAD_DIM, WEIGHT, X};

/// Each `[head_dim]` head of `x` f32 normalised by its root mean square
/// (plus `eps`) and multiplied by `weight` `[head_dim]`, in place.
pub(super) fn head_norm<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.output::<f32>(X)?;
    let weight = args.input::<W>(WEIGHT)?;
    let eps = args.f32(EPS)?;
    let head_dim = (args.u32(HEAD_DIM)? as usize).max(1);
    for head in x.chunks_exact_mut(head_dim) {
        let scale = scale_of(head, eps);
        for (value, w) in head.iter_mut().zip(weight) {
            *value = *value * scale * w.to_f32();
        }
    }
    Ok(())
}
