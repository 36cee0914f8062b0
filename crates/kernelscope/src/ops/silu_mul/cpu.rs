//! CPU reference of SiLU-gate-multiply.

use crate::error::Result;
use crate::runtime::KernelArgs;

/// args: gate, up f32 (read), out f32 (write), n.
pub(super) fn silu_mul(args: &KernelArgs<'_>) -> Result<()> {
    let (gate, up) = (args.input::<f32>(0)?, args.input::<f32>(1)?);
    let out = args.output::<f32>(2)?;
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
    Ok(())
}
