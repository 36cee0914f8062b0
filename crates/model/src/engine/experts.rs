//! A sparse layer's mixture of experts in the engine: the router's logits,
//! the device-side choice (`moe::route`), and the chosen experts' kernels,
//! each row reading its own experts' ids from device memory, so a decode
//! step needs no host sync and stays one graph launch.

use std::sync::Mutex;

use kernelscope::ops::WeightFormat;
use kernelscope::ops::matmul::MatMul;
use kernelscope::ops::moe::experts::{MoeDownAdd, MoeGateUp, MoeNormGateUp};
use kernelscope::ops::moe::group::{MoeCombine, MoeGather};
use kernelscope::ops::moe::route::MoeRoute;
use kernelscope::ops::quantized::experts::MoeQuantized;
use kernelscope::ops::quantized::linear::Activations as QuantizedActivations;
use kernelscope::ops::silu_mul::SiluMul;
use kernelscope::quant::QuantFormat;
use kernelscope::{Buffer, CommandEncoder, DType, Device};

pub(crate) use super::expert_buffers::ExpertBuffers;
pub(crate) use super::expert_prefill::DequantizedPrefill;
use super::forward::Forward;
use super::layer::{Activations, PassShape, Slot, Step};
use crate::config::Experts;
use crate::error::{ModelError, Result};
use crate::weights::ExpertWeights;

/// The ops of a sparse model's experts, bound to its device and dtype.
pub(crate) struct ExpertOps {
    /// Logits to the k chosen experts' ids and weights.
    pub route: MoeRoute,
    /// The chosen experts' gate/up + SiLU·mul.
    pub gate_up: MoeGateUp,
    /// The same with the RMSNorm before it fused in (decode).
    pub norm_gate_up: MoeNormGateUp,
    /// The chosen experts' down projections, weighted into the residual.
    pub down: MoeDownAdd,
    /// The products of experts in each quantized format the model's
    /// experts hold (GGUF).
    pub quantized: Vec<MoeQuantized>,
    /// Prefill over quantized experts on tensor cores, where the device
    /// dequantizes them (CUDA).
    pub dequantized: Option<DequantizedPrefill>,
    /// Prefill: a chunk's rows copied into runs grouped by expert (rows in
    /// the GEMM input's dtype).
    pub gather: MoeGather,
    /// Prefill: each row's expert outputs weighted into the residual.
    pub combine: MoeCombine,
    /// u32 `[layers, experts]`: the rows each layer routed to each expert
    /// since the model was made or the tallies cleared (the router adds
    /// them on the device; the profile reads them once).
    pub counts: Buffer,
    /// Experts per layer (a row of `counts`).
    pub experts: usize,
}

impl ExpertOps {
    /// The ops for `experts` with weights of `dtype` (dense experts) or of
    /// the `quantized` formats on `device`, prefill's GEMMs taking
    /// `gemm_input`.
    pub fn new(
        device: &Device,
        dtype: DType,
        quantized: &[QuantFormat],
        gemm_input: DType,
        experts: &Experts,
        layers: usize,
    ) -> Result<ExpertOps> {
        let registry = kernelscope::ops::registry();
        let counts = device.alloc(DType::U32, &[layers * experts.count])?;
        counts.write_from(&vec![0u32; layers * experts.count])?;
        let quantized_ops = quantized
            .iter()
            .map(|&format| MoeQuantized::new(&registry, device, format, QuantizedActivations::default()))
            .collect::<kernelscope::Result<Vec<_>>>()?;
        Ok(ExpertOps {
            route: MoeRoute::new(
                &registry,
                device,
                experts.count,
                experts.per_token,
                experts.normalize_weights,
            )?,
            gate_up: MoeGateUp::new(&registry, device, dtype)?,
            norm_gate_up: MoeNormGateUp::new(&registry, device, dtype)?,
            down: MoeDownAdd::new(&registry, device, dtype)?,
            dequantized: if !quantized_ops.is_empty() && quantized_ops.iter().all(MoeQuantized::dequantizes) {
                Some(DequantizedPrefill {
                    gather: MoeGather::narrow(&registry, device)?,
                    silu_mul: SiluMul::new(&registry, device, DType::BF16)?,
                    matmul: MatMul::new(&registry, device, DType::BF16)?,
                    scratch: Mutex::default(),
                })
            } else {
                None
            },
            quantized: quantized_ops,
            gather: MoeGather::new(&registry, device, gemm_input)?,
            combine: MoeCombine::new(&registry, device)?,
            counts,
            experts: experts.count,
        })
    }

    /// The tallies, `[layers][experts]`, read back (one host copy).
    pub fn read_counts(&self) -> Result<Vec<Vec<u64>>> {
        let counts: Vec<u32> = self.counts.to_vec()?;
        Ok(counts
            .chunks(self.experts.max(1))
            .map(|layer| layer.iter().map(|&count| u64::from(count)).collect())
            .collect())
    }

    /// The products of experts in the quantized `format`.
    pub fn quantized(&self, format: QuantFormat) -> Result<&MoeQuantized> {
        self.quantized
            .iter()
            .find(|op| op.format() == format)
            .ok_or_else(|| {
                ModelError::InvalidInput(format!(
                    "a sparse layer holds experts in {format}, but this model's expert kernels were made for other formats"
                ))
            })
    }

    /// The dtype of prefill's grouped runs (rows and activations): bf16
    /// where quantized experts run as bf16 GEMMs, else `gemm_input`.
    pub fn grouped_input(&self, gemm_input: DType) -> DType {
        if self.dequantized.is_some() {
            DType::BF16
        } else {
            gemm_input
        }
    }

    /// Rebinds the quantized experts' products to take `activations`
    /// (8-bit blocks by default; f32 for the CPU's reference path).
    pub fn set_quantized_activations(
        &mut self,
        device: &Device,
        activations: QuantizedActivations,
    ) -> Result<()> {
        let registry = kernelscope::ops::registry();
        for op in &mut self.quantized {
            *op = MoeQuantized::new(&registry, device, op.format(), activations)?;
        }
        Ok(())
    }

    /// Zeroes the tallies.
    pub fn clear_counts(&self) -> Result<()> {
        Ok(self.counts.write_from(&vec![0u32; self.counts.len()])?)
    }
}

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
