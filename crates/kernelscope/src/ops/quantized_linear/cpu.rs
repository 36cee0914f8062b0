//! CPU reference of the quantized products: weight rows in parallel, each
//! read in its blocks. One position dots the row's blocks with x directly;
//! a chunk of rows dequantizes each weight row once into a scratch row and
//! dots it with every input row, so the weights are read once per chunk.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::dot;
use crate::quant::QuantFormat;
use crate::runtime::KernelArgs;

use super::{K, N, OUT, ROWS, WEIGHT, X};

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 16;

/// `out` f32 `[rows, n]` = `x` f32 `[rows, k]` times the transpose of
/// `weight`, `n` rows of `k` elements in `format`'s blocks.
pub(super) fn quantized_product(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let weight = args.input::<u8>(WEIGHT)?;
    let x = args.input::<f32>(X)?;
    let out = args.output::<f32>(OUT)?;
    let (n, k, rows) = (
        args.u32(N)? as usize,
        args.u32(K)? as usize,
        args.u32(ROWS)? as usize,
    );
    let failed = |message: String| Error::KernelFailed {
        kernel: format!("matmul_{}", format.name()),
        message,
    };
    let row_bytes = format
        .row_bytes(k)
        .ok_or_else(|| failed(format!("{k} elements are not whole {format} blocks")))?;
    if weight.len() < n * row_bytes || x.len() < rows * k || out.len() < rows * n {
        return Err(failed("a buffer is shorter than its shape".into()));
    }
    // Each task computes its weight rows for every input row, then the
    // results are placed: out is [rows, n], so a task's outputs are strided.
    let results: Vec<Result<Vec<f32>>> = (0..n.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let first = task * ROWS_PER_TASK;
            let last = (first + ROWS_PER_TASK).min(n);
            let mut values = Vec::with_capacity((last - first) * rows);
            let mut scratch = vec![0.0f32; if rows > 1 { k } else { 0 }];
            for row in first..last {
                let blocks = &weight[row * row_bytes..(row + 1) * row_bytes];
                if rows == 1 {
                    values.push(
                        format
                            .dot_row(blocks, &x[..k])
                            .map_err(|error| failed(error.to_string()))?,
                    );
                } else {
                    format
                        .dequantize_row(blocks, &mut scratch)
                        .map_err(|error| failed(error.to_string()))?;
                    values.extend(x.chunks_exact(k).take(rows).map(|input| dot(&scratch, input)));
                }
            }
            Ok(values)
        })
        .collect();
    for (task, values) in results.into_iter().enumerate() {
        let values = values?;
        let first = task * ROWS_PER_TASK;
        for (offset, per_row) in values.chunks_exact(rows).enumerate() {
            for (r, value) in per_row.iter().enumerate() {
                out[r * n + first + offset] = *value;
            }
        }
    }
    Ok(())
}
