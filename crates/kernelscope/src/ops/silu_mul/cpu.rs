//! CPU reference of SiLU-gate-multiply.

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{GATE, OUT, UP};

/// `out` f32 = silu(`gate`) · `up`, elementwise.
pub(super) fn silu_mul(args: &KernelArgs<'_>) -> Result<()> {
    let (gate, up) = (args.input::<f32>(GATE)?, args.input::<f32>(UP)?);
    let out = args.output::<f32>(OUT)?;
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
    Ok(())
}
