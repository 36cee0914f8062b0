//! Embedding: the rows of the token-embedding table for token ids held in
//! device memory (so a captured graph can be replayed for any token), one
//! output row per token: the decode engine embeds one token, a batched
//! prefill a chunk of the prompt.

mod arguments;
mod cpu;
use arguments::THREADS;
pub(crate) use arguments::{
    ARGUMENTS, FIRST, HIDDEN, OUT, ROWS, TABLE, TABLE_FIRST, TABLE_ROWS, TOKENS, VOCAB,
};

use super::{
    Arguments, WEIGHT_DTYPES, bytes_of, dimensions, expect, expect_rows, kernel_for, register_weight_kernels,
    rows_of,
};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `embedding_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "embedding", embedding, include_str!("embedding.cu"));
}
use cpu::embedding;

/// The embedding op for one table dtype.
#[derive(Clone, Debug)]
pub struct Embedding {
    kernel: Kernel,
    dtype: DType,
}

impl Embedding {
    /// The op for tables of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        debug_assert!(WEIGHT_DTYPES.contains(&dtype));
        Ok(Embedding {
            kernel: kernel_for(registry, device, "embedding", dtype)?,
            dtype,
        })
    }

    /// `out[r, :] = table[tokens[first + r], :]` for every row r of `out`
    /// f32 `[rows, hidden]` (rows = `out.len() / hidden`); `table` is
    /// `[vocab, hidden]`, `tokens` a flat u32 buffer holding at least
    /// `first + rows` ids. The decode engine passes its `[token, position]`
    /// step buffer with `first` 0 and one row.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        table: &Buffer,
        tokens: &Buffer,
        first: usize,
        out: &Buffer,
    ) -> Result<()> {
        let [vocab, _] = dimensions("embedding", "table", table)?;
        self.encode_shard(encoder, table, 0, vocab, tokens, first, out)
    }

    /// [`encode`](Self::encode) with a table `[table_rows, hidden]` that holds
    /// only the ids `table_first..table_first + table_rows` of a vocabulary
    /// of `vocab` (one rank's share under tensor parallelism): a row whose
    /// token the table does not hold is zeros, so summing the ranks' outputs
    /// gives the embedding.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_shard(
        &self,
        encoder: &mut CommandEncoder,
        table: &Buffer,
        table_first: usize,
        vocab: usize,
        tokens: &Buffer,
        first: usize,
        out: &Buffer,
    ) -> Result<()> {
        let [table_rows, hidden] = dimensions("embedding", "table", table)?;
        expect("embedding", "table", table, self.dtype, &[table_rows, hidden])?;
        check_share("embedding", table_first, table_rows, vocab)?;
        let rows = rows_of("embedding", "output", out, hidden)?;
        expect_rows("embedding", "output", out, DType::F32, rows, &[hidden])?;
        super::expect_indices("embedding", "tokens", tokens, first, rows)?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(TABLE, table)
                .buffer(TOKENS, tokens)
                .buffer(OUT, out)
                .scalar(FIRST, first as u32)
                .scalar(ROWS, rows as u32)
                .scalar(VOCAB, vocab as u32)
                .scalar(HIDDEN, hidden as u32)
                .scalar(TABLE_FIRST, table_first as u32)
                .scalar(TABLE_ROWS, table_rows as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [rows as u32, 1, 1],
                    threads_per_block: [THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(rows * hidden, self.dtype) + bytes_of(rows, DType::U32),
                    bytes_of(rows * hidden, DType::F32),
                    0,
                )
                .op_kind(OpKind::Embedding),
        )
    }
}

/// That a table of `table_rows` ids from `table_first` lies within a
/// vocabulary of `vocab` (`op` names the embedding in the error): the
/// check of every embedding op's share, dense or quantized.
pub(crate) fn check_share(op: &str, table_first: usize, table_rows: usize, vocab: usize) -> Result<()> {
    if table_first.saturating_add(table_rows) > vocab {
        return Err(crate::Error::OutOfBounds {
            context: format!("{op}: the table's ids"),
            start: table_first,
            end: table_first.saturating_add(table_rows),
            available: vocab,
        });
    }
    Ok(())
}
