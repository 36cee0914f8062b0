//! Synthetic weights generated where they live: one rank's cut (rows, or
//! columns of every row) of a seeded tensor, written by a kernel on the
//! device, so a preset of any size needs neither a file nor host memory for
//! its weights. The values are those the CPU generator
//! ([`SplitMix64::u64_at`](crate::rng::SplitMix64::u64_at) scaled by
//! [`SplitMix64::scale`](crate::rng::SplitMix64::scale)) gives for the same
//! element of the whole tensor, bit for bit.

mod arguments;
mod cpu;
pub(crate) use arguments::{
    ARGUMENTS, COLUMNS, COUNT, FIRST_COLUMN, FIRST_ROW, HIGH, LOW, OUT, ROW_LENGTH, SEED,
};

use super::{Arguments, WEIGHT_DTYPES, bytes_of, kernel_for, register_weight_kernels};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::synthetic_fill;

/// Registers `synthetic_fill_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "synthetic_fill",
        synthetic_fill,
        include_str!("synthetic.cu")
    );
}

/// Where a cut lies in the whole tensor, and how its values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cut {
    /// The sequence's seed.
    pub seed: u64,
    /// Elements per row of the whole tensor (1 for a vector).
    pub row_length: u64,
    /// The whole tensor's row the cut starts at.
    pub first_row: u64,
    /// The whole tensor's column the cut starts at.
    pub first_column: u64,
    /// Columns per row of the cut (`row_length` for whole rows).
    pub columns: u64,
    /// The values are uniform on `[low, high)`.
    pub low: f32,
    /// See `low`.
    pub high: f32,
}

/// The generator for one weight dtype.
#[derive(Clone, Debug)]
pub struct SyntheticFill {
    kernel: Kernel,
    dtype: DType,
}

impl SyntheticFill {
    /// The op writing `dtype` (f32, f16 or bf16) on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        if !WEIGHT_DTYPES.contains(&dtype) {
            return Err(Error::KernelMissing {
                name: format!("synthetic_fill_{dtype}"),
                backend: device.backend(),
                workaround: format!("synthetic weights are f32, f16 or bf16, not {dtype}"),
                remedies: &[],
            });
        }
        Ok(SyntheticFill {
            kernel: kernel_for(registry, device, "synthetic_fill", dtype)?,
            dtype,
        })
    }

    /// Fills all of `out` with `cut`'s values (`out` holds whole rows of
    /// `cut.columns` values).
    pub fn encode(&self, encoder: &mut CommandEncoder, out: &Buffer, cut: Cut) -> Result<()> {
        let count = out.len();
        if out.dtype() != self.dtype {
            return Err(Error::DTypeMismatch {
                context: "synthetic_fill output".into(),
                expected: self.dtype,
                found: out.dtype(),
            });
        }
        if cut.columns == 0
            || !(count as u64).is_multiple_of(cut.columns)
            || cut.first_column + cut.columns > cut.row_length
        {
            return Err(Error::ShapeMismatch {
                context: format!(
                    "synthetic_fill: a cut of {} columns from column {} of rows of {}",
                    cut.columns, cut.first_column, cut.row_length
                ),
                expected: vec![count.next_multiple_of(cut.columns.max(1) as usize)],
                found: vec![count],
            });
        }
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(OUT, out)
                .scalar(COUNT, count as u64)
                .scalar(SEED, cut.seed)
                .scalar(ROW_LENGTH, cut.row_length)
                .scalar(FIRST_ROW, cut.first_row)
                .scalar(FIRST_COLUMN, cut.first_column)
                .scalar(COLUMNS, cut.columns)
                .scalar(LOW, cut.low)
                .scalar(HIGH, cut.high)
                .dispatch(&self.kernel)?
                // Each thread strides over the rest past this many blocks.
                .grid(LaunchGrid::linear(count.min(1 << 24), 256))
                .cost(0, bytes_of(count, self.dtype), 0)
                .op_kind(OpKind::Other),
        )
    }
}
