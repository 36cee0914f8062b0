//! How a weight matrix is stored: dense in a float dtype, or in a
//! block-quantized format. Linear layers and embedding tables carry one, and
//! the model picks each product's kernels by it.

use std::fmt;

use crate::quant::QuantFormat;
use crate::runtime::DType;

/// The storage of a weight matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// One element per value, in f32, f16 or bf16: a buffer of that dtype,
    /// `[rows, columns]`.
    Dense(DType),
    /// Blocks of a quantized format: a u8 buffer `[rows, row bytes]`.
    Quantized(QuantFormat),
}

impl WeightFormat {
    /// The dense dtype, if the weights are dense.
    pub fn dense(self) -> Option<DType> {
        match self {
            WeightFormat::Dense(dtype) => Some(dtype),
            WeightFormat::Quantized(_) => None,
        }
    }

    /// Bytes of a `rows` × `columns` matrix in this format, or `None` when
    /// the columns are not whole blocks or the size overflows.
    pub fn matrix_bytes(self, rows: usize, columns: usize) -> Option<usize> {
        let row = match self {
            WeightFormat::Dense(dtype) => columns.checked_mul(dtype.size_in_bytes())?,
            WeightFormat::Quantized(format) => format.row_bytes(columns)?,
        };
        row.checked_mul(rows)
    }

    /// The lowercase name kernels are named by (`bf16`, `q4_k`).
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Dense(dtype) => dtype.name(),
            WeightFormat::Quantized(format) => format.name(),
        }
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightFormat::Dense(dtype) => write!(f, "{dtype}"),
            WeightFormat::Quantized(format) => write!(f, "{format}"),
        }
    }
}

impl From<DType> for WeightFormat {
    fn from(dtype: DType) -> Self {
        WeightFormat::Dense(dtype)
    }
}
