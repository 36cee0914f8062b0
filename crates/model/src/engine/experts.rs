//! A sparse layer's mixture of experts in the engine: the router's logits,
//! the device-side choice (`moe::route`), and the chosen experts' kernels,
//! each row reading its own experts' ids from device memory, so a decode
//! step needs no host sync and stays one graph launch.

use kernelscope::ops::WeightFormat;
use kernelscope::{Buffer, CommandEncoder};

pub(crate) use super::expert_buffers::ExpertBuffers;
use super::expert_ops::ExpertOps;
use super::forward_parts::Forward;
use super::layer::{Activations, PassShape, Slot, Step};
use crate::error::{ModelError, Result};
use crate::weights::ExpertWeights;

impl Forward<'_> {
    /// The ops and buffers of a sparse layer's pass, or the error saying
    /// the model was built without them.
    pub(super) fn expert_parts<'a>(
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

    /// A sparse layer's decode prologue fused: RMSNorm + the router's
    /// mat-vec as one dispatch, the choice, then the chosen experts' gate/up
    /// normalising x itself, so the norm is never a dispatch of its own (nor
    /// stored; quantized experts normalise x as they quantize it). Covers
    /// four steps, or none where the weights' formats have no such kernels.
    pub(super) fn fuse_sparse_prologue(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let [
            Step::Norm { weight },
            Step::Linear {
                linear: router,
                input: Slot::Normed,
                output: Slot::RouterLogits,
            },
            Step::Route { layer },
            Step::ExpertsGateUp {
                layer: experts_layer,
                experts,
            },
            ..,
        ] = steps
        else {
            return Ok(0);
        };
        let dense = WeightFormat::Dense(self.weights.dtype);
        if router.has_bias() || router.format() != dense || layer != experts_layer {
            return Ok(0);
        }
        let (ops, buffers) = self.expert_parts(activations)?;
        // Quantized experts fuse where the device normalises into their
        // input's quantization (CUDA).
        let quantized = match experts.format {
            WeightFormat::Quantized(format) => match ops.quantized(format)? {
                op if op.fuses_norm() => Some(op),
                _ => return Ok(0),
            },
            format if format == dense => None,
            WeightFormat::Dense(_) => return Ok(0),
        };
        let (x, eps) = (&activations.hidden, self.config.rms_norm_eps);
        self.ops.linear_kernels(self.weights.dtype)?.norm_matvec.encode(
            encoder,
            x,
            weight,
            &[&router.weight],
            &buffers.router_logits,
            eps,
        )?;
        self.encode_route(encoder, *layer, activations)?;
        let ids = buffers.ids(*layer)?;
        match quantized {
            Some(op) => op.encode_norm_gate_up(
                encoder,
                x,
                weight,
                eps,
                &ids,
                &experts.gate,
                &experts.up,
                &buffers.activated,
            )?,
            None => ops.norm_gate_up.encode(
                encoder,
                x,
                weight,
                &ids,
                &experts.gate,
                &experts.up,
                &buffers.activated,
                eps,
            )?,
        }
        Ok(4)
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
            &ops.counts.slice(layer * ops.experts, ops.experts)?,
        )?)
    }

    /// Whether this pass runs its experts as grouped GEMMs (a prefill
    /// chunk whose buffers have the runs; dense weights in the model's
    /// dtype, or quantized ones): then `ExpertsGateUp` does all of the
    /// experts' work and `ExpertsDown` none.
    pub(super) fn experts_grouped(&self, experts: &ExpertWeights, activations: &Activations) -> bool {
        let dense = WeightFormat::Dense(self.weights.dtype);
        let formats_grouped = match (experts.format, experts.down_format) {
            (WeightFormat::Quantized(_), WeightFormat::Quantized(_)) => true,
            (gate_up, down) => gate_up == dense && down == dense && self.ops.gemm_input == self.weights.dtype,
        };
        matches!(activations.shape, PassShape::Rows { .. })
            && formats_grouped
            && activations.normed.dtype() == self.ops.gemm_input
            && activations
                .experts
                .as_ref()
                .is_some_and(|buffers| buffers.grouped.is_some())
    }

    /// The chosen experts' gate/up + SiLU·mul over the pass's normed rows.
    pub(super) fn encode_experts_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        layer: usize,
        experts: &ExpertWeights,
        activations: &Activations,
    ) -> Result<()> {
        if self.experts_grouped(experts, activations) {
            return self.encode_grouped_experts(encoder, layer, experts, activations);
        }
        let (ops, buffers) = self.expert_parts(activations)?;
        if let WeightFormat::Quantized(format) = experts.format {
            return Ok(ops.quantized(format)?.encode_gate_up(
                encoder,
                &activations.normed,
                &buffers.ids(layer)?,
                &experts.gate,
                &experts.up,
                &buffers.activated,
            )?);
        }
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
        if self.experts_grouped(experts, activations) {
            // Done with the gate/up step's GEMMs.
            return Ok(());
        }
        let (ops, buffers) = self.expert_parts(activations)?;
        let hidden = &activations.hidden;
        self.begin_expert_sum(encoder, buffers, hidden)?;
        let (activated, ids, weights) = (&buffers.activated, &buffers.ids(layer)?, &buffers.weights(layer)?);
        match experts.down_format {
            WeightFormat::Quantized(format) => ops.quantized(format)?.encode_down_add(
                encoder,
                activated,
                ids,
                weights,
                &experts.down,
                hidden,
            )?,
            WeightFormat::Dense(_) => {
                ops.down
                    .encode(encoder, activated, ids, weights, &experts.down, hidden)?
            }
        }
        self.end_expert_sum(encoder, hidden)
    }

    /// Before the experts' outputs are added into `hidden`: on a rank
    /// after the first of a split model, `hidden` starts from zero, so its
    /// share of the experts' rows adds up to a partial sum (the first
    /// rank's starts from the residual stream).
    pub(super) fn begin_expert_sum(
        &self,
        encoder: &mut CommandEncoder,
        buffers: &ExpertBuffers,
        hidden: &Buffer,
    ) -> Result<()> {
        if self.ops.collectives.is_some() && self.ops.partition.rank > 0 {
            let zeros = buffers.zeros.as_ref().ok_or_else(|| {
                ModelError::InvalidInput(
                    "a split sparse model's later rank was built without its zeros".into(),
                )
            })?;
            self.ops
                .copy
                .encode(encoder, &zeros.slice(0, hidden.len())?, hidden)?;
        }
        Ok(())
    }

    /// After: the ranks' partial sums added up by one all-reduce of the
    /// residual stream.
    pub(super) fn end_expert_sum(&self, encoder: &mut CommandEncoder, hidden: &Buffer) -> Result<()> {
        if let Some(collectives) = &self.ops.collectives {
            collectives.all_reduce.encode(encoder, hidden)?;
        }
        Ok(())
    }
}
