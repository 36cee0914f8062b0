//! x quantized to 8-bit blocks in global memory, as one dispatch leaves it
//! for the products after it: normalised, or (o_proj's staging for the
//! norm after it) still waiting for its RMSNorm, with what the reader
//! finishes the norm with.

use crate::error::{Error, Result};
use crate::runtime::Buffer;

/// x normalised and quantized to 8-bit blocks by
/// [`QuantizedFused::encode_norm_stage`](super::QuantizedFused::encode_norm_stage),
/// for the products of any format
/// (the layout does not depend on the weights' format).
#[derive(Clone, Debug)]
pub struct StagedInput {
    pub(super) buffer: Buffer,
    /// x's elements.
    pub(super) length: usize,
    /// Where x was staged before its RMSNorm (o_proj staging the residual
    /// stream for the norm after it, `norm_stage`): what the reader
    /// normalises with.
    pub(super) pending_norm: Option<PendingNorm>,
}

/// The RMSNorm still to apply to a staged x: its chunks' sums of squares
/// (f32 `[length / 32]`) and the norm's epsilon. x was staged times the
/// norm weight, so only the RMS is left.
#[derive(Clone, Debug)]
pub(super) struct PendingNorm {
    pub(super) squares: Buffer,
    pub(super) eps: f32,
}

impl StagedInput {
    /// x of `length` values as its stage kernel left it, normalised where
    /// its norm asked.
    pub(super) fn normalised(buffer: Buffer, length: usize) -> Self {
        StagedInput {
            buffer,
            length,
            pending_norm: None,
        }
    }

    /// Where x still waits for its RMSNorm (o_proj staged it before the
    /// norm, `encode_matvec_add_norm_staged`): the sums of squares of its
    /// blocks of 32 (f32 `[length / 32]`) the reader finishes the norm
    /// with. Only the staging gate/up reads such an x.
    pub fn pending_squares(&self) -> Option<&Buffer> {
        self.pending_norm.as_ref().map(|pending| &pending.squares)
    }

    /// An error naming `kernel` where x still waits for its RMSNorm: the
    /// products other than the staging gate/up read a normalised x.
    pub(super) fn expect_normalised(&self, kernel: &str, index: usize) -> Result<()> {
        match self.pending_norm {
            None => Ok(()),
            Some(_) => Err(Error::KernelArgument {
                kernel: kernel.to_string(),
                index,
                problem: "x was staged before its RMSNorm (o_proj's norm staging); \
                          only gate/up's staging kernel normalises it"
                    .into(),
            }),
        }
    }

    /// The bytes (u8, `staged_bytes(length)`): x's 8-bit values, then its
    /// blocks' scales, then their scaled sums, for a kernel that writes x
    /// so itself (the attention's combine, `Attention::encode_quantized`).
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }
}
