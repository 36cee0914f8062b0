//! Embedding: the row of the token-embedding table for the token id held in
//! device memory (so a captured graph can be replayed for any token).

mod cpu;

use super::{
    Arguments, WEIGHT_DTYPES, bytes_of, dimensions, expect, kernel_arguments, kernel_for,
    register_weight_kernels,
};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `embedding_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "embedding", embedding, include_str!("embedding.cu"));
}
use cpu::embedding;

kernel_arguments! {
    TABLE: "table" Read,
    TOKEN_SLOT: "token_slot" Read,
    OUT: "out" Write,
    VOCAB: "vocab" U32,
    HIDDEN: "hidden" U32,
}

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

    /// `out[hidden] = table[token_slot[0], :]`; `table` is `[vocab, hidden]`,
    /// `token_slot` a u32 buffer whose element 0 is the token id.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        table: &Buffer,
        token_slot: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        let [vocab, hidden] = dimensions("embedding", "table", table)?;
        expect("embedding", "table", table, self.dtype, &[vocab, hidden])?;
        super::expect_slot("embedding", token_slot, 0)?;
        expect("embedding", "output", out, DType::F32, &[hidden])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(TABLE, table)
                .buffer(TOKEN_SLOT, token_slot)
                .buffer(OUT, out)
                .scalar(VOCAB, vocab as u32)
                .scalar(HIDDEN, hidden as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(hidden, 256))
                .cost(bytes_of(hidden, self.dtype) + bytes_of(hidden, DType::F32) + 4, 0)
                .op_kind(OpKind::Embedding),
        )
    }
}
