//! What a model holds on its device besides the weights: the ops bound to
//! the device, the weight dtype and the KV cache's dtype, and one
//! sequence's activations and KV cache.

use kernelscope::ops::WeightFormat;
use kernelscope::ops::attention::Attention;
use kernelscope::ops::collective::{AllGather, AllReduce};
use kernelscope::ops::head_norm::HeadNorm;
use kernelscope::ops::matmul::MatMul;
use kernelscope::ops::matvec::residual::MatVecAdd;
use kernelscope::ops::norm_matvec::{NormMatVec, rope::NormMatVecRope, silu::NormMatVecSiluMul};
use kernelscope::ops::prefill_attention::PrefillAttention;
use kernelscope::ops::quantized::embedding::QuantizedEmbedding;
use kernelscope::ops::quantized::feed_forward::QuantizedFeedForward;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::ops::quantized::linear::{Activations, QuantizedLinear};
use kernelscope::ops::rope::{Rope, RopeFrequencies};
use kernelscope::ops::rope_append::RopeAppend;
use kernelscope::ops::rope_append::normed::RopeAppendNormed;
use kernelscope::ops::sample::Sample;
use kernelscope::ops::{
    add::Add, argmax::Argmax, copy::Copy as CopyOp, embedding::Embedding, kv_append::KvAppend,
    matvec::MatVec, rms_norm::RmsNorm, silu_mul::SiluMul,
};
use kernelscope::quant::QuantFormat;
use kernelscope::{Buffer, Communicator, DType, Device};

use crate::config::Config;
use crate::config::shard::Partition;
use crate::error::{ModelError, Result};

/// The ops the model uses, bound to its device, weight dtype and KV-cache
/// dtype. Built once, so a kernel missing for this device and dtype is an
/// error before any token.
pub(crate) struct Ops {
    pub embedding: Embedding,
    /// RMSNorm into f32, for a mat-vec (decode).
    pub rms_norm: RmsNorm,
    /// RMSNorm into [`Ops::gemm_input`], for a GEMM (prefill).
    pub rms_norm_narrow: RmsNorm,
    /// RMSNorm of each query and key head before RoPE (Qwen3), in place.
    pub head_norm: HeadNorm,
    /// The dtype of prefill's GEMM inputs (RMSNorm's, attention's and
    /// SiLU·mul's outputs): the weights' dtype, or bf16 where every linear
    /// layer is quantized and its chunk products run on bf16 tensor cores
    /// (CUDA), so that no product narrows its input (each narrowing was a
    /// kernel, 6 % of llama-3-8b Q4_K_M's pp512 on an H200).
    pub gemm_input: DType,
    /// The kernels of linear layers, for the weights' format.
    pub linear: LinearKernels,
    /// The products of the quantized formats the weights hold (GGUF).
    pub quantized: Vec<QuantizedLinear>,
    /// Decode's fused kernels of those formats, where the device has them
    /// (CUDA; the CPU runs the steps apart).
    pub quantized_fused: Vec<QuantizedFused>,
    /// A dense layer's feed-forward half in one persistent launch, for each
    /// pair of quantized formats (gate/up's, down's), where the device runs
    /// persistent kernels and the layers are not split over ranks.
    pub quantized_feed_forward: Vec<QuantizedFeedForward>,
    /// The embedding of a quantized table, when the table is one.
    pub quantized_embedding: Option<QuantizedEmbedding>,
    pub add_residual: Add,
    pub add_bias: Add,
    pub rope: Rope,
    /// The KV cache's element type, which the ops below read or write.
    pub kv_dtype: DType,
    pub kv_append: KvAppend,
    /// RoPE on q and k + the KV-cache append, fused (decode).
    pub rope_append: RopeAppend,
    /// The per-head norms of q and k + RoPE + the append, fused (decode),
    /// where the layers have those norms (Qwen3).
    pub rope_append_normed: Option<RopeAppendNormed>,
    /// Decode attention (split over the cached positions).
    pub attention: Attention,
    /// Causal attention of a prefill chunk, out in [`Ops::gemm_input`].
    pub prefill_attention: PrefillAttention,
    pub silu_mul: SiluMul,
    /// SiLU·mul into [`Ops::gemm_input`], for down_proj's GEMM (prefill).
    pub silu_mul_narrow: SiluMul,
    pub argmax: Argmax,
    /// Feeds a replayed step's choice back as the next step's token, and
    /// carries the KV cache over when it grows.
    pub copy: CopyOp,
    /// `Err` where the backend has no sampling kernel: the error is reported
    /// only when a temperature above 0 asks for it.
    pub sample: std::result::Result<Sample, std::sync::Arc<kernelscope::Error>>,
    /// Whether decode runs the fused kernels (on by default; off runs the
    /// unfused ops one by one, the reference the fused path is checked and
    /// compared against).
    pub fusion: bool,
    /// This rank's share of the model (all of it when not split).
    pub partition: Partition,
    /// The collectives, when the model is split over several ranks.
    pub collectives: Option<Collectives>,
    /// A sparse model's router and expert kernels.
    pub experts: Option<super::expert_ops::ExpertOps>,
}

/// The weight formats a model holds beyond its dense dtype.
#[derive(Clone, Debug)]
pub(crate) struct WeightFormats {
    /// The quantized formats of its linear layers, each once.
    pub linear: Vec<QuantFormat>,
    /// Whether any linear layer holds dense weights.
    pub dense_linear: bool,
    /// Whether the layers normalise each head of q and k (Qwen3).
    pub head_norms: bool,
    /// The embedding table's format.
    pub embedding: WeightFormat,
}

/// The collectives of one rank of a split model.
pub(crate) struct Collectives {
    /// Completes the partial sums of o_proj, down_proj and the embedding.
    pub all_reduce: AllReduce,
    /// Gathers the ranks' shares of the logits.
    pub all_gather: AllGather,
}

/// The kernels that multiply by the weights of one format: the plain
/// products and the fused decode kernels built around a mat-vec. A weight
/// format is one more of these.
pub(crate) struct LinearKernels {
    /// The weights' element type these kernels read.
    pub format: DType,
    /// One position: matrix times vector.
    pub matvec: MatVec,
    /// A chunk's rows: GEMM (cuBLASLt on CUDA).
    pub matmul: MatMul,
    /// A mat-vec adding into the residual stream (o_proj, down_proj).
    pub matvec_add: MatVecAdd,
    /// RMSNorm + up to three mat-vecs reading it (q/k/v; the LM head).
    pub norm_matvec: NormMatVec,
    /// RMSNorm + gate/up mat-vecs + SiLU·mul.
    pub norm_matvec_silu: NormMatVecSiluMul,
    /// RMSNorm + q/k/v mat-vecs with RoPE and the KV append in the stores.
    pub norm_matvec_rope: NormMatVecRope,
}

impl LinearKernels {
    fn new(registry: &kernelscope::KernelRegistry, device: &Device, format: DType) -> Result<LinearKernels> {
        Ok(LinearKernels {
            format,
            matvec: MatVec::new(registry, device, format)?,
            matmul: MatMul::new(registry, device, format)?,
            matvec_add: MatVecAdd::new(registry, device, format)?,
            norm_matvec: NormMatVec::new(registry, device, format)?,
            norm_matvec_silu: NormMatVecSiluMul::new(registry, device, format)?,
            norm_matvec_rope: NormMatVecRope::new(registry, device, format)?,
        })
    }
}

impl Ops {
    /// The ops for weights of `dtype`, with a KV cache of the same dtype,
    /// for the rank `partition` describes (with its communicator when the
    /// model is split); `formats` lists the formats of the weight matrices
    /// (linear layers and the embedding table), whose quantized ones get
    /// their kernels here, so a missing one is an error before any token.
    pub fn new(
        device: &Device,
        dtype: DType,
        formats: &WeightFormats,
        partition: Partition,
        communicator: Option<&Communicator>,
    ) -> Result<Ops> {
        let registry = kernelscope::ops::registry();
        let collectives = match communicator {
            Some(communicator) if partition.is_split() => Some(Collectives {
                all_reduce: AllReduce::new(communicator)?,
                all_gather: AllGather::new(communicator)?,
            }),
            _ => None,
        };
        let quantized = formats
            .linear
            .iter()
            .map(|format| QuantizedLinear::new(&registry, device, *format, Activations::default()))
            .collect::<kernelscope::Result<Vec<_>>>()?;
        // Fused kernels are an optimisation: a device without them runs the
        // steps apart, so their absence is not an error.
        let quantized_fused = formats
            .linear
            .iter()
            .filter_map(|format| QuantizedFused::new(&registry, device, *format).ok())
            .collect();
        let quantized_feed_forward = if device.capabilities().persistent_kernels && !partition.is_split() {
            formats
                .linear
                .iter()
                .flat_map(|gate| formats.linear.iter().map(move |down| (*gate, *down)))
                .filter_map(|(gate, down)| QuantizedFeedForward::new(&registry, device, gate, down).ok())
                .collect()
        } else {
            Vec::new()
        };
        let quantized_bf16 = !quantized.is_empty() && quantized.iter().all(QuantizedLinear::takes_bf16_input);
        let gemm_input = if dtype == DType::F32 && !formats.dense_linear && quantized_bf16 {
            DType::BF16
        } else {
            dtype
        };
        let quantized_embedding = match formats.embedding {
            WeightFormat::Quantized(format) => Some(QuantizedEmbedding::new(&registry, device, format)?),
            WeightFormat::Dense(_) => None,
        };
        Ok(Ops {
            quantized,
            quantized_fused,
            quantized_feed_forward,
            quantized_embedding,
            embedding: Embedding::new(&registry, device, dtype)?,
            rms_norm: RmsNorm::new(&registry, device, dtype, DType::F32)?,
            rms_norm_narrow: RmsNorm::new(&registry, device, dtype, gemm_input)?,
            head_norm: HeadNorm::new(&registry, device, dtype)?,
            gemm_input,
            linear: LinearKernels::new(&registry, device, dtype)?,
            add_residual: Add::new(&registry, device, DType::F32)?,
            add_bias: Add::new(&registry, device, dtype)?,
            rope: Rope::new(&registry, device)?,
            kv_dtype: dtype,
            kv_append: KvAppend::new(&registry, device, dtype)?,
            rope_append: RopeAppend::new(&registry, device, dtype)?,
            rope_append_normed: if formats.head_norms {
                Some(RopeAppendNormed::new(&registry, device, dtype, dtype)?)
            } else {
                None
            },
            attention: Attention::new(&registry, device, dtype)?,
            prefill_attention: PrefillAttention::new(&registry, device, dtype, gemm_input)?,
            silu_mul: SiluMul::new(&registry, device, DType::F32)?,
            silu_mul_narrow: SiluMul::new(&registry, device, gemm_input)?,
            argmax: Argmax::new(&registry, device)?,
            copy: CopyOp::new(&registry, device)?,
            sample: Sample::new(&registry, device).map_err(std::sync::Arc::new),
            fusion: true,
            partition,
            collectives,
            experts: None,
        })
    }

    /// The kernels for linear layers whose weights are of `format`.
    pub fn linear_kernels(&self, format: DType) -> Result<&LinearKernels> {
        if format == self.linear.format {
            Ok(&self.linear)
        } else {
            Err(ModelError::InvalidInput(format!(
                "a linear layer holds {format} weights, but this model's kernels read {}",
                self.linear.format
            )))
        }
    }

    /// The products of weights in the quantized `format`.
    pub fn quantized_linear(&self, format: QuantFormat) -> Result<&QuantizedLinear> {
        self.quantized
            .iter()
            .find(|kernels| kernels.format() == format)
            .ok_or_else(|| {
                ModelError::InvalidInput(format!(
                    "a linear layer holds {format} weights, but this model's kernels were made for other formats"
                ))
            })
    }

    /// Decode's fused kernels for weights in the quantized `format`, where
    /// the device has them.
    pub fn quantized_fused(&self, format: QuantFormat) -> Option<&QuantizedFused> {
        self.quantized_fused
            .iter()
            .find(|kernels| kernels.format() == format)
    }

    /// The feed-forward kernel for gate/up in `gate` and down in `down`,
    /// where the device has it.
    pub fn quantized_feed_forward(
        &self,
        gate: QuantFormat,
        down: QuantFormat,
    ) -> Option<&QuantizedFeedForward> {
        self.quantized_feed_forward
            .iter()
            .find(|kernels| kernels.formats() == (gate, down))
    }

    /// Rebinds the quantized mat-vecs to take `activations` (8-bit blocks
    /// by default, as llama.cpp; f32 for the reference).
    pub fn set_quantized_activations(&mut self, device: &Device, activations: Activations) -> Result<()> {
        let registry = kernelscope::ops::registry();
        let formats: Vec<QuantFormat> = self.quantized.iter().map(QuantizedLinear::format).collect();
        self.quantized = formats
            .into_iter()
            .map(|format| QuantizedLinear::new(&registry, device, format, activations))
            .collect::<kernelscope::Result<Vec<_>>>()?;
        if let Some(experts) = &mut self.experts {
            experts.set_quantized_activations(device, activations)?;
        }
        Ok(())
    }

    /// Rebinds the KV-cache ops to a cache of `kv_dtype` (prefill
    /// attention's output stays in [`Ops::gemm_input`]).
    pub fn set_kv_dtype(&mut self, device: &Device, kv_dtype: DType) -> Result<()> {
        let registry = kernelscope::ops::registry();
        self.kv_append = KvAppend::new(&registry, device, kv_dtype)?;
        self.rope_append = RopeAppend::new(&registry, device, kv_dtype)?;
        if self.rope_append_normed.is_some() {
            self.rope_append_normed = Some(RopeAppendNormed::new(
                &registry,
                device,
                self.linear.format,
                kv_dtype,
            )?);
        }
        self.attention = Attention::new(&registry, device, kv_dtype)?;
        self.prefill_attention = PrefillAttention::new(&registry, device, kv_dtype, self.gemm_input)?;
        self.kv_dtype = kv_dtype;
        Ok(())
    }
}

/// Slot of the token id in [`State::step`]: a replayed step's choice is
/// copied here on the device.
pub(crate) const TOKEN_SLOT: usize = 0;
/// Slot of the position in [`State::step`].
pub(crate) const POSITION_SLOT: usize = 1;

/// One sequence's device state. `hidden = hidden_size`, `q = heads * head_dim`,
/// `kv = kv_heads * head_dim`, `inter = intermediate_size`.
pub(crate) struct State {
    /// `[2]` u32: the token being processed and its position, written by the
    /// host each step and read by the kernels, so captured work can be replayed.
    pub step: Buffer,
    /// `[1]` u32: the token chosen from this step's logits.
    pub next_token: Buffer,
    /// `[hidden]` the residual stream.
    pub hidden: Buffer,
    /// `[hidden]` RMSNorm output.
    pub normed: Buffer,
    /// `[q + 2 kv]` this position's projections, one after another, so the
    /// fused kernel writes all three as one output.
    pub projections: Buffer,
    /// `[q]`, `[kv]`, `[kv]` views of `projections`.
    pub query: Buffer,
    pub key: Buffer,
    pub value: Buffer,
    /// `[q]` attention output.
    pub attention: Buffer,
    /// `[hidden]` output of o_proj and of down_proj.
    pub projected: Buffer,
    /// `[inter]` gate, up and their SiLU product.
    pub gate: Buffer,
    pub up: Buffer,
    pub activated: Buffer,
    /// `[ranks × vocabulary_stride]` f32: every rank's share of the logits,
    /// gathered (`[vocab]` when not split); `vocab_logits` views the first
    /// `vocab` of them, the logits in id order.
    pub logits: Buffer,
    pub vocab_logits: Buffer,
    /// Where the LM head writes this rank's share of the logits: a
    /// `[vocabulary_stride]` buffer's first ids when split (gathered into
    /// `logits`), `vocab_logits` itself otherwise.
    pub shard_logits: Buffer,
    /// The whole `[vocabulary_stride]` buffer of `shard_logits`, which the
    /// gather sends (equal shares from every rank), when split.
    pub shard_logits_padded: Option<Buffer>,
    /// RoPE's inverse frequencies and attention scaling.
    pub rope_frequencies: RopeFrequencies,
    /// Decode attention's per-split partials, sized with the caches.
    pub attention_scratch: Buffer,
    /// Per layer `[context, kv]`, in the ops' KV dtype.
    pub key_cache: Vec<Buffer>,
    pub value_cache: Vec<Buffer>,
    /// Positions the caches hold.
    pub context: usize,
    /// A sparse model's router and expert buffers for one position.
    pub experts: Option<super::experts::ExpertBuffers>,
}

impl State {
    /// The state of the rank `partition` describes; `config` is its local
    /// config (its heads and intermediate rows).
    pub fn new(config: &Config, partition: &Partition, device: &Device) -> Result<State> {
        let f32_buffer = |len: usize| device.alloc(DType::F32, &[len]);
        let frequencies = config.rope_inverse_frequencies();
        let (q, kv) = (config.q_dim(), config.kv_dim());
        let projections = f32_buffer(q + 2 * kv)?;
        let logits = f32_buffer(partition.ranks * partition.vocabulary_stride)?;
        let vocab_logits = logits.slice(0, config.vocab_size)?;
        let (shard_logits, shard_logits_padded) = if partition.is_split() {
            let padded = f32_buffer(partition.vocabulary_stride)?;
            (padded.slice(0, partition.vocabulary.len())?, Some(padded))
        } else {
            (vocab_logits.clone(), None)
        };
        Ok(State {
            step: device.alloc(DType::U32, &[2])?,
            next_token: device.alloc(DType::U32, &[1])?,
            hidden: f32_buffer(config.hidden_size)?,
            normed: f32_buffer(config.hidden_size)?,
            query: projections.slice(0, q)?,
            key: projections.slice(q, kv)?,
            value: projections.slice(q + kv, kv)?,
            projections,
            attention: f32_buffer(config.q_dim())?,
            projected: f32_buffer(config.hidden_size)?,
            gate: f32_buffer(config.intermediate_size)?,
            up: f32_buffer(config.intermediate_size)?,
            activated: f32_buffer(config.intermediate_size)?,
            logits,
            vocab_logits,
            shard_logits,
            shard_logits_padded,
            rope_frequencies: RopeFrequencies {
                inverse_frequencies: device.buffer_from_slice(&frequencies, &[frequencies.len()])?,
                attention_scaling: config.rope_attention_scaling,
            },
            attention_scratch: f32_buffer(1)?,
            key_cache: Vec::new(),
            value_cache: Vec::new(),
            context: 0,
            experts: config
                .experts
                .as_ref()
                .map(|experts| {
                    let buffers = super::experts::ExpertBuffers::new(device, experts, config.num_layers, 1)?;
                    if partition.rank > 0 {
                        buffers.with_zeros(device, config.hidden_size)
                    } else {
                        Ok(buffers)
                    }
                })
                .transpose()?,
        })
    }
}
