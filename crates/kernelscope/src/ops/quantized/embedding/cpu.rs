//! CPU reference of the quantized embedding: each token's row dequantized
//! from its blocks; zeros for an id another rank's share holds.

use crate::error::{Error, Result};
use crate::quant::QuantFormat;
use crate::runtime::KernelArgs;

use super::{FIRST, HIDDEN, OUT, ROWS, TABLE, TABLE_FIRST, TABLE_ROWS, TOKENS, VOCAB};

/// `out` f32 `[rows, hidden]`: row r is the table's row for id
/// `tokens[first + r]` (the table holds ids `table_first..` of them), or
/// zeros where the id is outside the table's share.
pub(super) fn quantized_embedding(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let table = args.input::<u8>(TABLE)?;
    let tokens = args.input::<u32>(TOKENS)?;
    let out = args.output::<f32>(OUT)?;
    let (first, rows) = (args.u32(FIRST)? as usize, args.u32(ROWS)? as usize);
    let (vocab, hidden) = (args.u32(VOCAB)? as usize, args.u32(HIDDEN)? as usize);
    let (table_first, table_rows) = (args.u32(TABLE_FIRST)? as usize, args.u32(TABLE_ROWS)? as usize);
    let failed = |message: String| Error::KernelFailed {
        kernel: format!("embedding_{}", format.name()),
        message,
    };
    let row_bytes = format
        .row_bytes(hidden)
        .ok_or_else(|| failed(format!("{hidden} elements are not whole {format} blocks")))?;
    let tokens = tokens.get(first..first + rows).ok_or_else(|| {
        failed(format!(
            "tokens {first}..{} are beyond the {} given",
            first + rows,
            tokens.len()
        ))
    })?;
    for (&token, destination) in tokens.iter().zip(out.chunks_exact_mut(hidden.max(1))) {
        let token = token as usize;
        if token >= vocab {
            return Err(failed(format!(
                "token id {token} is not below the vocabulary size {vocab}"
            )));
        }
        if token < table_first || token - table_first >= table_rows {
            destination.fill(0.0);
            continue;
        }
        let at = token - table_first;
        let row = table
            .get(at * row_bytes..(at + 1) * row_bytes)
            .ok_or_else(|| failed(format!("token id {token}'s row is beyond the table")))?;
        format
            .dequantize_row(row, destination)
            .map_err(|error| failed(error.to_string()))?;
    }
    Ok(())
}
