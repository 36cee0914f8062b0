//! CPU reference of in-place add.

use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{X, Y};

/// `x` f32 is updated in place with `y` (the addend's dtype), repeated over
/// x's rows: `x[i] += y[i % y.len()]`.
pub(super) fn add<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let x = args.output::<f32>(X)?;
    let y = args.input::<W>(Y)?;
    for row in x.chunks_mut(y.len().max(1)) {
        row.iter_mut().zip(y).for_each(|(a, b)| *a += b.to_f32());
    }
    Ok(())
}
