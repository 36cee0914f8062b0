//! The ops of a sparse model's experts, bound to its device: a file of
//! their own, so that the device state holds them without importing the
//! passes (`experts`, `expert_prefill`) that run them.

use std::sync::Mutex;

use kernelscope::ops::matmul::MatMul;
use kernelscope::ops::moe::experts::{MoeDownAdd, MoeGateUp, MoeNormGateUp};
use kernelscope::ops::moe::group::{MoeCombine, MoeGather};
use kernelscope::ops::moe::route::MoeRoute;
use kernelscope::ops::quantized::experts::MoeQuantized;
use kernelscope::ops::quantized::linear::Activations as QuantizedActivations;
use kernelscope::ops::silu_mul::SiluMul;
use kernelscope::quant::QuantFormat;
use kernelscope::{Buffer, DType, Device};

use crate::config::Experts;
use crate::error::{ModelError, Result};

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

/// What prefill needs to run quantized experts as bf16 GEMMs: each
/// projection's experts dequantized at once into scratch, the rows and the
/// activations in bf16. One dequantizing dispatch a projection and layer
/// replaces a dequantize, a narrowing and a GEMM per expert and
/// projection (qwen3-30b-a3b Q4_K_M ran pp512 at 3,369 tok/s that way,
/// 0.39x llama.cpp's, one H200).
pub(crate) struct DequantizedPrefill {
    /// f32 normed rows into bf16 runs.
    pub gather: MoeGather,
    /// SiLU·mul into bf16.
    pub silu_mul: SiluMul,
    /// bf16 GEMMs (cuBLASLt).
    pub matmul: MatMul,
    /// One projection's experts in bf16, grown to the largest and reused
    /// by the next projection (the stream runs them in turn).
    pub scratch: Mutex<Option<Buffer>>,
}
