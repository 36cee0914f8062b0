//! CPU reference of SiLU-gate-multiply.

use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{GATE, OUT, UP};

/// `out` = silu(`gate`) · `up`, elementwise in f32, rounded to `O`.
pub(super) fn silu_mul<O: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let (gate, up) = (args.input::<f32>(GATE)?, args.input::<f32>(UP)?);
    let out = args.output::<O>(OUT)?;
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = O::from_f32(g / (1.0 + (-g).exp()) * u);
    }
    Ok(())
}
