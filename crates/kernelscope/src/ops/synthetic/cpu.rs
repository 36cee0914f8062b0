//! CPU reference of the synthetic weight generator.

use rayon::prelude::*;

use crate::error::Result;
use crate::ops::WeightElement;
use crate::rng::SplitMix64;
use crate::runtime::KernelArgs;

use super::{COLUMNS, COUNT, FIRST_COLUMN, FIRST_ROW, HIGH, LOW, OUT, ROW_LENGTH, SEED};

/// Element i of `out` is element `(first_row + i / columns) * row_length +
/// first_column + i % columns` of the whole tensor's sequence.
pub(super) fn synthetic_fill<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let out = args.output::<W>(OUT)?;
    let count = (args.u64(COUNT)? as usize).min(out.len());
    let seed = args.u64(SEED)?;
    let (row_length, first_row) = (args.u64(ROW_LENGTH)?, args.u64(FIRST_ROW)?);
    let (first_column, columns) = (args.u64(FIRST_COLUMN)?, args.u64(COLUMNS)?.max(1));
    let (low, high) = (args.f32(LOW)?, args.f32(HIGH)?);
    out[..count]
        .par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(chunk, values)| {
            let start = (chunk << 16) as u64;
            for (offset, value) in values.iter_mut().enumerate() {
                let i = start + offset as u64;
                let row = i / columns;
                let index = (first_row + row) * row_length + first_column + (i - row * columns);
                let unit = SplitMix64::unit_f32(SplitMix64::u64_at(seed, index));
                *value = W::from_f32(SplitMix64::scale(unit, low, high));
            }
        });
    Ok(())
}
