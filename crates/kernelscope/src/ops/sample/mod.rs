//! Token sampling: temperature and nucleus (top-p) sampling from the
//! logits, given a uniform random number from the host's seeded generator
//! (so a run is reproducible from its seed). A temperature of 0 is greedy.

mod arguments;
mod cpu;
pub(crate) use arguments::{ARGUMENTS, LOGITS, N, OUT, TEMPERATURE, TOP_P, UNIFORM};

use super::{Arguments, bytes_of, expect};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `sample_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("sample_f32", cpu::sample);
    registry.register_cuda_source("sample_f32", super::cuda_source(include_str!("sample.cu")));
    registry.register_format("sample_f32", "f32");
}

/// How to pick the next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 picks the largest logit.
    pub temperature: f32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f32,
}

impl Sampling {
    /// Greedy decoding.
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
    };
}

/// The sampling op.
#[derive(Clone, Debug)]
pub struct Sample {
    kernel: Kernel,
}

impl Sample {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Sample {
            kernel: super::kernel_for(registry, device, "sample", DType::F32)?,
        })
    }

    /// `out[0]` = a token drawn from `softmax(logits / temperature)` restricted
    /// to the top-p nucleus, using `uniform` in `[0, 1)`.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        logits: &Buffer,
        out: &Buffer,
        sampling: Sampling,
        uniform: f32,
    ) -> Result<()> {
        let n = logits.len();
        expect("sample", "logits", logits, DType::F32, &[n])?;
        expect("sample", "output", out, DType::U32, &[1])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(LOGITS, logits)
                .buffer(OUT, out)
                .scalar(TEMPERATURE, sampling.temperature)
                .scalar(TOP_P, sampling.top_p)
                .scalar(UNIFORM, uniform)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(1024, 1024))
                .cost(bytes_of(n, DType::F32), 4, 4 * n as u64)
                .op_kind(OpKind::Sample),
        )
    }
}
