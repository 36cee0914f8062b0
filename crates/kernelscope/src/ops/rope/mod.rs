//! Rotary position embedding (the "rotate half" layout of Hugging Face
//! Llama/Qwen2), applied in place to `[heads, head_dim]` at the position held
//! in device memory. The inverse frequencies are computed once on the host
//! ([`inverse_frequencies`]), including Llama-3's `rope_scaling`.

mod cpu;

use super::{bytes_of, expect};
use crate::error::Result;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Dispatch, Kernel, KernelRegistry, LaunchGrid, OpKind,
};

/// Registers `rope_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("rope_f32", cpu::rope);
    registry.register_cuda_source("rope_f32", super::cuda_source(include_str!("rope.cu")));
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

/// `inv_freq[i] = theta^(-2i/head_dim)` for `i < head_dim/2`, rescaled as
/// Hugging Face's `_compute_llama3_parameters` does when `scaling` is given.
pub fn inverse_frequencies(head_dim: usize, theta: f32, scaling: Option<Llama3Scaling>) -> Vec<f32> {
    let base: Vec<f32> = (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let Some(scaling) = scaling else { return base };
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

    /// Rotates `x[heads, head_dim]` in place by the position in
    /// `position_slot[index]`, with `inverse_frequencies[head_dim / 2]`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        inverse_frequencies: &Buffer,
        position_slot: &Buffer,
        index: usize,
        heads: usize,
    ) -> Result<()> {
        let head_dim = x.len() / heads.max(1);
        expect("rope", "input", x, DType::F32, &[heads, head_dim])?;
        expect(
            "rope",
            "inverse frequencies",
            inverse_frequencies,
            DType::F32,
            &[head_dim / 2],
        )?;
        expect(
            "rope",
            "position",
            position_slot,
            DType::U32,
            position_slot.shape(),
        )?;
        super::expect_slot("rope", position_slot, index)?;
        encoder.dispatch(
            Dispatch::new(&self.kernel)
                .read_write(x)
                .read(inverse_frequencies)
                .read(position_slot)
                .param(index as u32)
                .param(heads as u32)
                .param(head_dim as u32)
                .grid(LaunchGrid::linear(x.len() / 2, 128))
                .cost(
                    bytes_of(2 * x.len() + head_dim / 2, DType::F32),
                    6 * x.len() as u64,
                )
                .op_kind(OpKind::Rope),
        )
    }
}
