//! Where a GGUF model's non-finite numbers are: the first tensor, in file
//! order, holding a NaN or an infinity once its blocks are dequantized (a
//! NaN scale makes its whole block NaN). Asked when a run's logits came
//! out non-finite, to name the weight they came from; it reads every
//! tensor, so it is never run otherwise.

use rayon::prelude::*;

use super::config::widen;
use super::model::GgufModel;
use crate::error::{ModelError, Result};
use kernelscope::ops::WeightFormat;

/// A non-finite number in a model's weights.
#[derive(Clone, Debug, PartialEq)]
pub struct NonFiniteWeight {
    /// The tensor, as the file names it.
    pub tensor: String,
    /// Its first non-finite element, counted from 0 in the file's order.
    pub element: u64,
    /// The value: NaN, inf or -inf.
    pub value: f32,
    /// How many of the tensor's elements are not finite.
    pub count: u64,
}

impl GgufModel {
    /// The first tensor holding a NaN or an infinity, or `None` where
    /// every weight is finite.
    pub fn first_non_finite_weight(&self) -> Result<Option<NonFiniteWeight>> {
        let path = self.file.path();
        for info in self.file.tensors() {
            let format = info.supported_format(path)?;
            let columns = info.dims().first().copied().unwrap_or(1).max(1) as usize;
            let bytes = self.file.tensor_bytes(info);
            let rows = (info.element_count() as usize).div_ceil(columns);
            let row_bytes = bytes.len() / rows.max(1);
            let failed = |error: kernelscope::quant::QuantError| ModelError::Gguf {
                path: path.to_path_buf(),
                problem: format!("tensor `{}`: {error}", info.name()),
            };
            // Per row: (first non-finite column, its value, how many).
            let found: Vec<Option<(usize, f32, u64)>> = bytes
                .par_chunks(row_bytes.max(1))
                .map_init(
                    || vec![0.0f32; columns],
                    |values, row| {
                        match format {
                            WeightFormat::Dense(dtype) => widen(dtype, row, values),
                            WeightFormat::Quantized(quant) => {
                                quant.dequantize_row(row, values).map_err(failed)?
                            }
                        }
                        let count = values.iter().filter(|value| !value.is_finite()).count() as u64;
                        Ok::<_, ModelError>(
                            values
                                .iter()
                                .position(|value| !value.is_finite())
                                .map(|column| (column, values[column], count)),
                        )
                    },
                )
                .collect::<Result<_>>()?;
            let count: u64 = found.iter().flatten().map(|&(_, _, count)| count).sum();
            if let Some((row, &Some((column, value, _)))) =
                found.iter().enumerate().find(|(_, found)| found.is_some())
            {
                return Ok(Some(NonFiniteWeight {
                    tensor: info.name().to_string(),
                    element: (row * columns + column) as u64,
                    value,
                    count,
                }));
            }
        }
        Ok(None)
    }
}
