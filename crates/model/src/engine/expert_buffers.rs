//! A pass's buffers for a sparse model's experts: the router's logits,
//! every sparse layer's choice (kept, so a step's routing can be read
//! back), the chosen experts' activations, and prefill's runs of rows
//! grouped by expert.

use kernelscope::{Buffer, DType, Device};

use crate::config::Experts;
use crate::error::Result;

/// A pass's buffers for the experts: `rows` rows of each, and every
/// layer's choice kept (so the routing of a step can be read back).
#[derive(Clone, Debug)]
pub(crate) struct ExpertBuffers {
    /// `[rows, experts]` f32 router logits (each sparse layer in turn).
    pub router_logits: Buffer,
    /// `[layers, capacity, k]` u32 each layer's chosen experts.
    pub(super) ids: Buffer,
    /// `[layers, capacity, k]` f32 their weights.
    pub(super) weights: Buffer,
    /// `[rows, k, expert_inter]` f32 each chosen expert's SiLU-gated activation.
    pub activated: Buffer,
    /// Rows of this pass.
    pub(super) rows: usize,
    /// Rows the per-layer buffers have room for.
    pub(super) capacity: usize,
    /// Experts chosen per row.
    pub(super) per_token: usize,
    /// Prefill's grouped runs, where the buffers serve a chunk.
    pub(super) grouped: Option<GroupedBuffers>,
    /// f32 zeros of `[capacity, hidden]`, on ranks other than the first of a
    /// split model: their partial sums of the experts' down projections
    /// start from zero (the first rank's from the residual stream), so one
    /// all-reduce of the residual stream adds the experts in once.
    pub(super) zeros: Option<Buffer>,
}

/// A chunk's rows grouped by expert (`capacity · k` positions each).
#[derive(Clone, Debug)]
pub(super) struct GroupedBuffers {
    /// u32: the row each position copies.
    pub(super) order: Buffer,
    /// u32: the position of each row's j-th choice.
    pub(super) position: Buffer,
    /// `[positions, hidden]` in the GEMM input's dtype: the copied rows.
    pub(super) input: Buffer,
    /// `[positions, expert_inter]` f32: each expert's gate and up products.
    pub(super) gate: Buffer,
    pub(super) up: Buffer,
    /// `[positions, expert_inter]` in the GEMM input's dtype: SiLU(gate) · up.
    pub(super) activated: Buffer,
    /// `[positions, hidden]` f32: each expert's down projection.
    pub(super) output: Buffer,
}

impl ExpertBuffers {
    /// Buffers for `rows` rows of `experts` over `layers` layers on `device`.
    pub fn new(device: &Device, experts: &Experts, layers: usize, rows: usize) -> Result<ExpertBuffers> {
        let chosen = rows * experts.per_token;
        Ok(ExpertBuffers {
            router_logits: device.alloc(DType::F32, &[rows * experts.count])?,
            ids: device.alloc(DType::U32, &[layers * chosen])?,
            weights: device.alloc(DType::F32, &[layers * chosen])?,
            activated: device.alloc(DType::F32, &[chosen * experts.intermediate_size])?,
            rows,
            capacity: rows,
            per_token: experts.per_token,
            grouped: None,
            zeros: None,
        })
    }

    /// Buffers for prefill chunks of up to `capacity` rows: these and the
    /// grouped runs of `hidden`-wide rows whose GEMM inputs are `gemm_input`.
    pub fn for_chunks(
        device: &Device,
        experts: &Experts,
        layers: usize,
        capacity: usize,
        hidden: usize,
        gemm_input: DType,
    ) -> Result<ExpertBuffers> {
        let positions = capacity * experts.per_token;
        let inter = experts.intermediate_size;
        Ok(ExpertBuffers {
            grouped: Some(GroupedBuffers {
                order: device.alloc(DType::U32, &[positions])?,
                position: device.alloc(DType::U32, &[positions])?,
                input: device.alloc(gemm_input, &[positions * hidden])?,
                gate: device.alloc(DType::F32, &[positions * inter])?,
                up: device.alloc(DType::F32, &[positions * inter])?,
                activated: device.alloc(gemm_input, &[positions * inter])?,
                output: device.alloc(DType::F32, &[positions * hidden])?,
            }),
            ..ExpertBuffers::new(device, experts, layers, capacity)?
        })
    }

    /// These buffers with zeros for `hidden`-wide rows: a rank after the
    /// first of a split model.
    pub fn with_zeros(self, device: &Device, hidden: usize) -> Result<ExpertBuffers> {
        let zeros = device.alloc(DType::F32, &[self.capacity * hidden])?;
        zeros.write_from(&vec![0.0f32; self.capacity * hidden])?;
        Ok(ExpertBuffers {
            zeros: Some(zeros),
            ..self
        })
    }

    /// The first `rows` rows (a chunk shorter than the buffers' capacity).
    pub fn rows(&self, experts: &Experts, rows: usize) -> Result<ExpertBuffers> {
        let chosen = rows * experts.per_token;
        Ok(ExpertBuffers {
            router_logits: self.router_logits.slice(0, rows * experts.count)?,
            activated: self.activated.slice(0, chosen * experts.intermediate_size)?,
            zeros: match &self.zeros {
                Some(zeros) => Some(zeros.slice(0, rows * (zeros.len() / self.capacity.max(1)))?),
                None => None,
            },
            rows,
            ..self.clone()
        })
    }

    /// Layer `layer`'s chosen experts `[rows, k]` (u32).
    pub fn ids(&self, layer: usize) -> Result<Buffer> {
        let chosen = self.per_token * self.rows;
        Ok(self.ids.slice(layer * self.capacity * self.per_token, chosen)?)
    }

    /// Layer `layer`'s expert weights `[rows, k]` (f32).
    pub fn weights(&self, layer: usize) -> Result<Buffer> {
        let chosen = self.per_token * self.rows;
        Ok(self
            .weights
            .slice(layer * self.capacity * self.per_token, chosen)?)
    }

    /// Every layer's chosen experts of the first row, read back (`[layers][k]`).
    pub fn read_first_row(&self, layers: usize) -> Result<Vec<Vec<u32>>> {
        let all: Vec<u32> = self.ids.to_vec()?;
        let stride = self.capacity * self.per_token;
        Ok((0..layers)
            .map(|layer| all[layer * stride..layer * stride + self.per_token].to_vec())
            .collect())
    }
}
