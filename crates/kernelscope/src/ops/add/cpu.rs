//! CPU reference of in-place add.

use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

/// args: x f32 (read-write), y (read), n.
pub(super) fn add<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.output::<f32>(0)?;
    let y = args.input::<W>(1)?;
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b.to_f32());
    Ok(())
}
