//! Embedding from a block-quantized table (GGUF files often keep
//! `token_embd.weight` in Q4_K, Q6_K or Q8_0): each output row is one
//! table row dequantized to f32, read from its blocks. The token ids are
//! read from device memory, as the dense embedding reads them, so a
//! captured graph can be replayed for any token. The CPU reads ggml's
//! blocks; CUDA reads the table's rows in planes (see
//! `quantized::linear::BlockLayout`), its kernel in `embedding.cu` over
//! the family's shared headers.

mod cpu;

use crate::error::{Error, Result};
use crate::ops::embedding::{
    ARGUMENTS, FIRST, HIDDEN, OUT, ROWS, TABLE, TABLE_FIRST, TABLE_ROWS, TOKENS, VOCAB,
};
use crate::ops::quantized::linear::BlockLayout;
use crate::ops::{Arguments, dimensions, expect, expect_rows, rows_of};
use crate::quant::QuantFormat;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

// The dense embedding's arguments, name for name: a table may hold one
// rank's share of the vocabulary (`table_first`, `table_rows`) as there.

/// Registers `embedding_<format>` for every format, on the CPU and CUDA.
pub fn register(registry: &mut KernelRegistry) {
    for format in QuantFormat::ALL {
        let kernel = crate::ops::quantized::linear::cuda_source_for(format, include_str!("embedding.cu"));
        registry.register_cuda_source(&format!("embedding_{}", format.name()), kernel);
        registry.register_cpu(&format!("embedding_{}", format.name()), move |args| {
            cpu::quantized_embedding(format, args)
        });
        registry.register_format(&format!("embedding_{}", format.name()), format.name());
    }
}

/// The embedding op for tables of one quantized format.
#[derive(Clone, Debug)]
pub struct QuantizedEmbedding {
    kernel: Kernel,
    format: QuantFormat,
    layout: BlockLayout,
}

impl QuantizedEmbedding {
    /// The op for tables of `format` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, format: QuantFormat) -> Result<Self> {
        let kernel = crate::ops::quantized::linear::quantized_kernel(
            registry,
            device,
            format!("embedding_{}", format.name()),
            &format!("{format} embedding tables are read"),
        )?;
        Ok(QuantizedEmbedding {
            kernel,
            format,
            layout: BlockLayout::of(device),
        })
    }

    /// `out[r, :] = table[tokens[first + r], :]` dequantized, for every row
    /// r of `out` f32 `[rows, hidden]`; `table` is u8 `[vocab, row_bytes]`
    /// in the device's block layout.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        table: &Buffer,
        tokens: &Buffer,
        first: usize,
        out: &Buffer,
    ) -> Result<()> {
        let [vocab, _] = dimensions("quantized embedding", "table", table)?;
        self.encode_shard(encoder, table, 0, vocab, tokens, first, out)
    }

    /// As [`encode`](Self::encode) for a table holding ids `table_first..`
    /// of a vocabulary of `vocab` (one rank's share under tensor
    /// parallelism): an id outside the share writes zeros (another rank
    /// holds its row, and the ranks' rows are summed).
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
        const OP: &str = "quantized embedding";
        let [table_rows, row_bytes] = dimensions(OP, "table", table)?;
        expect(OP, "table", table, DType::U8, &[table_rows, row_bytes])?;
        let blocks = self
            .layout
            .blocks(self.format, row_bytes)
            .ok_or_else(|| Error::ShapeMismatch {
                context: format!(
                    "{OP} table: {} rows of {row_bytes} bytes are not whole blocks",
                    self.format
                ),
                expected: vec![table_rows, self.format.block_bytes()],
                found: vec![table_rows, row_bytes],
            })?;
        crate::ops::embedding::check_share(OP, table_first, table_rows, vocab)?;
        let hidden = blocks * self.format.block_elements();
        let rows = rows_of(OP, "output", out, hidden)?;
        expect_rows(OP, "output", out, DType::F32, rows, &[hidden])?;
        crate::ops::expect_indices(OP, "tokens", tokens, first, rows)?;
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
                .grid(match self.layout {
                    BlockLayout::Blocks => LaunchGrid {
                        blocks: [rows as u32, 1, 1],
                        threads_per_block: [1, 1, 1],
                        shared_memory_bytes: 0,
                    },
                    BlockLayout::Planes => LaunchGrid {
                        blocks: [hidden.div_ceil(256) as u32, rows.min(65_535) as u32, 1],
                        threads_per_block: [256, 1, 1],
                        shared_memory_bytes: 0,
                    },
                })
                .cost(
                    (rows * (blocks * self.format.block_bytes() + 4)) as u64,
                    (rows * hidden * 4) as u64,
                    0,
                )
                .op_kind(OpKind::Embedding),
        )
    }
}
