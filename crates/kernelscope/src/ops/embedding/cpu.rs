//! CPU reference of embedding.

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{FIRST, HIDDEN, OUT, ROWS, TABLE, TABLE_FIRST, TABLE_ROWS, TOKENS, VOCAB};

/// `out` f32 `[rows, hidden]`: row r is the row of token `tokens[first + r]`
/// in `table` `[table_rows, hidden]`, which holds ids `table_first..` of the
/// vocabulary; zeros for an id the table does not hold.
pub(super) fn embedding<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let table = args.input::<W>(TABLE)?;
    let tokens = args.input::<u32>(TOKENS)?;
    let out = args.output::<f32>(OUT)?;
    let (first, rows) = (args.u32(FIRST)? as usize, args.u32(ROWS)? as usize);
    let (vocab, hidden) = (args.u32(VOCAB)? as usize, args.u32(HIDDEN)? as usize);
    let (table_first, table_rows) = (args.u32(TABLE_FIRST)? as usize, args.u32(TABLE_ROWS)? as usize);
    let tokens = tokens
        .get(first..first + rows)
        .ok_or_else(|| Error::KernelFailed {
            kernel: "embedding".into(),
            message: format!(
                "tokens {first}..{} are beyond the {} given",
                first + rows,
                tokens.len()
            ),
        })?;
    for (&token, destination) in tokens.iter().zip(out.chunks_exact_mut(hidden.max(1))) {
        let token = token as usize;
        if token >= vocab {
            return Err(Error::KernelFailed {
                kernel: "embedding".into(),
                message: format!("token id {token} is not below the vocabulary size {vocab}"),
            });
        }
        if token < table_first || token - table_first >= table_rows {
            destination.fill(0.0);
            continue;
        }
        let row = token - table_first;
        let row = table
            .get(row * hidden..(row + 1) * hidden)
            .ok_or_else(|| Error::KernelFailed {
                kernel: "embedding".into(),
                message: format!(
                    "token id {token}'s row is beyond the table's {} elements",
                    table.len()
                ),
            })?;
        destination.iter_mut().zip(row).for_each(|(o, w)| *o = w.to_f32());
    }
    Ok(())
}
