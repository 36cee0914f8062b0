//! Rotary position embedding (the "rotate half" layout of Hugging Face
//! Llama/Qwen2), applied in place to `[rows, heads, head_dim]`, each row at
//! its own position held in device memory (decode rotates one row, a batched
//! prefill a chunk of the prompt's tokens). The inverse frequencies are computed once on the host
//! ([`inverse_frequencies`]), including the `rope_scaling` of linear, Llama-3 and YaRN checkpoints.

mod arguments;
pub(crate) mod cpu;
pub(crate) use arguments::{
    ARGUMENTS, ATTENTION_SCALING, FIRST, HEAD_DIM, HEADS, INVERSE_FREQUENCIES, POSITIONS, ROWS, X,
};

use super::{Arguments, bytes_of, expect, expect_rows, rows_of};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `rope_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("rope_f32", cpu::rope);
    registry.register_cuda_source("rope_f32", super::cuda_source(include_str!("rope.cu")));
    registry.register_format("rope_f32", "f32");
}

/// Llama-3's `rope_scaling` (`rope_type: "llama3"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    /// `factor`.
    pub factor: f32,
    /// `low_freq_factor`.
    pub low_freq_factor: f32,
    /// `high_freq_factor`.
    pub high_freq_factor: f32,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: f32,
}

/// YaRN's frequency ramp (`rope_type: "yarn"`). Its attention factor scales
/// the rotation (see [`Rope::encode`]) and is resolved by the caller, since
/// checkpoints spell it in several ways (`attention_factor`, `mscale`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnScaling {
    /// `factor`: how much longer the context is than the one trained on.
    pub factor: f32,
    /// `original_max_position_embeddings`: the context trained on.
    pub original_max_position_embeddings: f32,
    /// `beta_fast`: rotations above which a dimension is left unscaled.
    pub beta_fast: f32,
    /// `beta_slow`: rotations below which a dimension is fully interpolated.
    pub beta_slow: f32,
    /// `truncate`: round the ramp's ends to whole dimensions.
    pub truncate: bool,
}

/// How a checkpoint rescales RoPE's frequencies for a longer context.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// `linear`: every frequency divided by `factor`.
    Linear {
        /// `factor`.
        factor: f32,
    },
    /// `llama3`: low frequencies divided, high ones kept, a smooth band between.
    Llama3(Llama3Scaling),
    /// `yarn`: a ramp between interpolated and extrapolated frequencies.
    Yarn(YarnScaling),
}

impl std::fmt::Display for RopeScaling {
    /// As config.json names it: `llama3 scaling (factor 8, ...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RopeScaling::Linear { factor } => write!(f, "linear scaling (factor {factor})"),
            RopeScaling::Llama3(scaling) => write!(
                f,
                "llama3 scaling (factor {}, low_freq_factor {}, high_freq_factor {}, original_max_position_embeddings {})",
                scaling.factor,
                scaling.low_freq_factor,
                scaling.high_freq_factor,
                scaling.original_max_position_embeddings
            ),
            RopeScaling::Yarn(scaling) => write!(
                f,
                "yarn scaling (factor {}, original_max_position_embeddings {}, beta_fast {}, beta_slow {}, truncate {})",
                scaling.factor,
                scaling.original_max_position_embeddings,
                scaling.beta_fast,
                scaling.beta_slow,
                scaling.truncate
            ),
        }
    }
}

/// `scaling` in words, `no scaling` where there is none.
pub fn describe_scaling(scaling: Option<RopeScaling>) -> String {
    scaling.map_or_else(|| "no scaling".to_string(), |scaling| scaling.to_string())
}

/// `inv_freq[i] = theta^(-2i/head_dim)` for `i < head_dim/2`, rescaled as
/// Hugging Face's `_compute_*_parameters` do when `scaling` is given. Powers
/// are taken in f32 like transformers (`base ** (arange(0, d, 2).float() / d)`).
pub fn inverse_frequencies(head_dim: usize, theta: f32, scaling: Option<RopeScaling>) -> Vec<f32> {
    let powers: Vec<f32> = (0..head_dim / 2)
        .map(|i| theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let base: Vec<f32> = powers.iter().map(|power| 1.0 / power).collect();
    match scaling {
        None => base,
        Some(RopeScaling::Linear { factor }) => base.into_iter().map(|freq| freq / factor).collect(),
        Some(RopeScaling::Llama3(scaling)) => llama3(base, scaling),
        Some(RopeScaling::Yarn(scaling)) => yarn(&powers, head_dim, theta, scaling),
    }
}

fn llama3(base: Vec<f32>, scaling: Llama3Scaling) -> Vec<f32> {
    let low_freq_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor;
    let high_freq_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor;
    base.into_iter()
        .map(|freq| {
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_freq_wavelen {
                freq
            } else if wavelen > low_freq_wavelen {
                freq / scaling.factor
            } else {
                let smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor)
                    / (scaling.high_freq_factor - scaling.low_freq_factor);
                (1.0 - smooth) * freq / scaling.factor + smooth * freq
            }
        })
        .collect()
}

/// transformers' `_compute_yarn_parameters`: the correction range in f64
/// (Python floats), the ramp and the blend in f32 (torch tensors).
fn yarn(powers: &[f32], head_dim: usize, theta: f32, scaling: YarnScaling) -> Vec<f32> {
    let dim = head_dim as f64;
    let base = f64::from(theta);
    let context = f64::from(scaling.original_max_position_embeddings);
    let correction_dim =
        |rotations: f64| dim * (context / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
    let (mut low, mut high) = (
        correction_dim(f64::from(scaling.beta_fast)),
        correction_dim(f64::from(scaling.beta_slow)),
    );
    if scaling.truncate {
        low = low.floor();
        high = high.ceil();
    }
    let (low, mut high) = (low.max(0.0) as f32, high.min(dim - 1.0) as f32);
    if low == high {
        // As transformers does, to avoid dividing by zero.
        high += 0.001;
    }
    powers
        .iter()
        .enumerate()
        .map(|(i, &power)| {
            let extrapolated = 1.0 / power;
            let interpolated = 1.0 / (scaling.factor * power);
            let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation_weight = 1.0 - ramp;
            interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight
        })
        .collect()
}

/// What a rotation needs besides the position: the inverse frequencies on
/// the device (`[head_dim / 2]`, from [`inverse_frequencies`]) and the factor
/// cos and sin are multiplied by (1 but for YaRN).
#[derive(Clone, Debug)]
pub struct RopeFrequencies {
    /// `[head_dim / 2]` f32.
    pub inverse_frequencies: Buffer,
    /// Multiplies cos and sin, as transformers does, which scales the
    /// attention logits by its square.
    pub attention_scaling: f32,
}

/// The RoPE op.
#[derive(Clone, Debug)]
pub struct Rope {
    kernel: Kernel,
}

impl Rope {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Rope {
            kernel: super::kernel_for(registry, device, "rope", DType::F32)?,
        })
    }

    /// Rotates each row r of `x` f32 `[rows, heads, head_dim]` in place by
    /// the position `positions[first + r]`, with `frequencies`; head_dim is
    /// twice the number of inverse frequencies and rows is
    /// `x.len() / (heads · head_dim)`. `positions` is a flat u32 buffer (the
    /// decode engine passes its `[token, position]` step buffer, first 1).
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        frequencies: &RopeFrequencies,
        positions: &Buffer,
        first: usize,
        heads: usize,
    ) -> Result<()> {
        let inverse_frequencies = &frequencies.inverse_frequencies;
        let half = inverse_frequencies.len();
        let head_dim = 2 * half;
        expect(
            "rope",
            "inverse frequencies",
            inverse_frequencies,
            DType::F32,
            &[half],
        )?;
        let rows = rows_of("rope", "input", x, heads * head_dim)?;
        expect_rows("rope", "input", x, DType::F32, rows, &[heads, head_dim])?;
        super::expect_indices("rope", "positions", positions, first, rows)?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(INVERSE_FREQUENCIES, inverse_frequencies)
                .buffer(POSITIONS, positions)
                .scalar(FIRST, first as u32)
                .scalar(ROWS, rows as u32)
                .scalar(HEADS, heads as u32)
                .scalar(HEAD_DIM, head_dim as u32)
                .scalar(ATTENTION_SCALING, frequencies.attention_scaling)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(x.len() / 2, 128))
                // Rotated in place: x is read and written.
                .cost(
                    bytes_of(x.len() + half, DType::F32) + bytes_of(rows, DType::U32),
                    bytes_of(x.len(), DType::F32),
                    6 * x.len() as u64,
                )
                .op_kind(OpKind::Rope),
        )
    }
}
