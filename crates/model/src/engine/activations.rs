//! What a pass of the model math works on: the activation buffers a
//! step reads and writes, named by slot, and how the pass's rows reach
//! the kernels (one position, or a chunk of them).

use std::cell::RefCell;

use kernelscope::Buffer;
use kernelscope::ops::quantized::linear::fused::StagedInput;

use super::experts::ExpertBuffers;
use crate::error::Result;

/// An activation buffer a step reads or writes (see [`Activations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Normed,
    Query,
    Key,
    Value,
    Attention,
    Projected,
    Gate,
    Up,
    Activated,
    Logits,
    /// A sparse layer's router logits.
    RouterLogits,
}

/// How a pass's rows reach the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PassShape {
    /// One position (decode, and prompts run token by token): mat-vecs on
    /// f32 activations; the pattern of steps may fuse. `position` sizes
    /// attention's declared cost (the kernels read it from the device).
    Vector { position: usize },
    /// A chunk of prompt positions whose last is at `context_end - 1`:
    /// GEMMs, and what feeds a GEMM in the weights' dtype.
    Rows { context_end: usize },
}

/// The buffers one pass works on (`[rows, width]` each; `rows` is 1 for a
/// vector pass). Widths as in [`State`](super::state::State).
pub(super) struct Activations {
    pub shape: PassShape,
    /// The residual stream (f32).
    pub hidden: Buffer,
    /// RMSNorm's output: f32 in a vector pass, the weights' dtype for a GEMM.
    pub normed: Buffer,
    pub query: Buffer,
    pub key: Buffer,
    pub value: Buffer,
    /// `[q + 2 kv]`: query, key and value one after another, where they are
    /// views of one buffer (a fused kernel then writes all three at once).
    pub projections: Option<Buffer>,
    pub attention: Buffer,
    pub projected: Buffer,
    pub gate: Buffer,
    pub up: Buffer,
    pub activated: Buffer,
    /// This rank's logits (its share of the vocabulary when split).
    pub logits: Option<Buffer>,
    /// Where a vocabulary-split LM head's shares are gathered: the padded
    /// share `logits` views, and the gathered row. `None` leaves the gather
    /// to the caller.
    pub gather: Option<(Buffer, Buffer)>,
    /// Where the kernels read each row's position: a u32 buffer and the
    /// index of the first row's.
    pub positions: (Buffer, usize),
    /// A sparse model's router and expert buffers.
    pub experts: Option<ExpertBuffers>,
    /// A quantized input a product handed off, waiting for the step that
    /// reads it (`handoff`); empty at the start of a pass.
    pub handed_off: RefCell<Option<HandedOff>>,
}

impl Activations {
    pub(super) fn slot(&self, slot: Slot) -> Result<&Buffer> {
        Ok(match slot {
            Slot::Normed => &self.normed,
            Slot::Query => &self.query,
            Slot::Key => &self.key,
            Slot::Value => &self.value,
            Slot::Attention => &self.attention,
            Slot::Projected => &self.projected,
            Slot::Gate => &self.gate,
            Slot::Up => &self.up,
            Slot::Activated => &self.activated,
            Slot::Logits => self.logits.as_ref().ok_or_else(|| {
                crate::error::ModelError::InvalidInput("a pass without logits was asked for them".into())
            })?,
            Slot::RouterLogits => self
                .experts
                .as_ref()
                .map(|experts| &experts.router_logits)
                .ok_or_else(|| {
                    crate::error::ModelError::InvalidInput(
                        "a pass without expert buffers was asked for router logits".into(),
                    )
                })?,
        })
    }

    /// One buffer holding `slots` one after another, if there is one: what
    /// a fused kernel writing several outputs at once needs.
    pub(super) fn joined(&self, slots: &[Slot]) -> Option<Buffer> {
        let projections = self.projections.as_ref();
        let (query, key) = (self.query.len(), self.key.len());
        match slots {
            [single] => self.slot(*single).ok().cloned(),
            [Slot::Query, Slot::Key, Slot::Value] => projections.cloned(),
            [Slot::Query, Slot::Key] => projections?.slice(0, query + key).ok(),
            [Slot::Key, Slot::Value] => projections?.slice(query, key + self.value.len()).ok(),
            _ => None,
        }
    }
}

/// A quantized input a product staged, for the step after it (`handoff`).
pub(super) struct HandedOff {
    /// The activation slot whose values it holds.
    pub slot: Slot,
    pub staged: StagedInput,
    /// The encoder's position after the product: only a reader dispatched
    /// right there may take it.
    pub position: usize,
}
