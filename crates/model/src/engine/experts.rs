//! A sparse layer's mixture of experts in the engine: the router's logits,
//! the device-side choice (`moe_route`), and the chosen experts' kernels,
//! each row reading its own experts' ids from device memory, so a decode
//! step needs no host sync and stays one graph launch.

use kernelscope::ops::WeightFormat;
use kernelscope::ops::moe_experts::{MoeDownAdd, MoeGateUp};
use kernelscope::ops::moe_route::MoeRoute;
use kernelscope::{Buffer, CommandEncoder, DType, Device};

use super::forward::Forward;
use super::layer::Activations;
use crate::config::Experts;
use crate::error::{ModelError, Result};
use crate::weights::ExpertWeights;

/// The ops of a sparse model's experts, bound to its device and dtype.
pub(crate) struct ExpertOps {
    /// Logits to the k chosen experts' ids and weights.
    pub route: MoeRoute,
    /// The chosen experts' gate/up + SiLU·mul.
    pub gate_up: MoeGateUp,
    /// The chosen experts' down projections, weighted into the residual.
    pub down: MoeDownAdd,
}

impl ExpertOps {
    /// The ops for `experts` with weights of `dtype` on `device`.
    pub fn new(device: &Device, dtype: DType, experts: &Experts) -> Result<ExpertOps> {
        let registry = kernelscope::ops::registry();
        Ok(ExpertOps {
            route: MoeRoute::new(
                &registry,
                device,
                experts.count,
                experts.per_token,
                experts.normalize_weights,
            )?,
            gate_up: MoeGateUp::new(&registry, device, dtype)?,
            down: MoeDownAdd::new(&registry, device, dtype)?,
        })
    }
}

/// A pass's buffers for the experts: `rows` rows of each, and every
/// layer's choice kept (so the routing of a step can be read back).
#[derive(Clone, Debug)]
pub(crate) struct ExpertBuffers {
    /// `[rows, experts]` f32 router logits (each sparse layer in turn).
    pub router_logits: Buffer,
    /// `[layers, capacity, k]` u32 each layer's chosen experts.
    ids: Buffer,
    /// `[layers, capacity, k]` f32 their weights.
    weights: Buffer,
    /// `[rows, k, expert_inter]` f32 each chosen expert's SiLU-gated activation.
    pub activated: Buffer,
    /// Rows of this pass.
    rows: usize,
    /// Rows the per-layer buffers have room for.
    capacity: usize,
    /// Experts chosen per row.
    per_token: usize,
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
        })
    }

    /// The first `rows` rows (a chunk shorter than the buffers' capacity).
    pub fn rows(&self, experts: &Experts, rows: usize) -> Result<ExpertBuffers> {
        let chosen = rows * experts.per_token;
        Ok(ExpertBuffers {
            router_logits: self.router_logits.slice(0, rows * experts.count)?,
            activated: self.activated.slice(0, chosen * experts.intermediate_size)?,
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

impl Forward<'_> {
    /// The ops and buffers of a sparse layer's pass, or the error saying
    /// the model was built without them.
    fn expert_parts<'a>(
        &'a self,
        activations: &'a Activations,
    ) -> Result<(&'a ExpertOps, &'a ExpertBuffers)> {
        match (&self.ops.experts, &activations.experts) {
            (Some(ops), Some(buffers)) => Ok((ops, buffers)),
            _ => Err(ModelError::InvalidInput(
                "a sparse layer ran in a model built without expert kernels".into(),
            )),
        }
    }

    /// The router's choice: its logits (already in `router_logits`) to
    /// each row's k experts and weights.
    pub(super) fn encode_route(
        &self,
        encoder: &mut CommandEncoder,
        layer: usize,
        activations: &Activations,
    ) -> Result<()> {
        let (ops, buffers) = self.expert_parts(activations)?;
        Ok(ops.route.encode(
            encoder,
            &buffers.router_logits,
            &buffers.ids(layer)?,
            &buffers.weights(layer)?,
        )?)
    }

    /// The chosen experts' gate/up + SiLU·mul over the pass's normed rows.
    pub(super) fn encode_experts_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        layer: usize,
        experts: &ExpertWeights,
        activations: &Activations,
    ) -> Result<()> {
        check_dense(experts)?;
        let (ops, buffers) = self.expert_parts(activations)?;
        Ok(ops.gate_up.encode(
            encoder,
            &activations.normed,
            &buffers.ids(layer)?,
            &experts.gate,
            &experts.up,
            &buffers.activated,
        )?)
    }

    /// The chosen experts' down projections, weighted and added into the
    /// residual stream.
    pub(super) fn encode_experts_down(
        &self,
        encoder: &mut CommandEncoder,
        layer: usize,
        experts: &ExpertWeights,
        activations: &Activations,
    ) -> Result<()> {
        check_dense(experts)?;
        let (ops, buffers) = self.expert_parts(activations)?;
        Ok(ops.down.encode(
            encoder,
            &buffers.activated,
            &buffers.ids(layer)?,
            &buffers.weights(layer)?,
            &experts.down,
            &activations.hidden,
        )?)
    }
}

/// Experts in quantized blocks have no kernels yet: an error naming it.
fn check_dense(experts: &ExpertWeights) -> Result<()> {
    match experts.format {
        WeightFormat::Dense(_) => Ok(()),
        WeightFormat::Quantized(format) => Err(ModelError::InvalidInput(format!(
            "experts in {format} blocks have no kernels yet: convert the model's experts to bf16"
        ))),
    }
}
