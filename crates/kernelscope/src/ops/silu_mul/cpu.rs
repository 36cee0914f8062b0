//! CPU reference of SiLU-gate-multiply: both threads, each over whole
//! chunks, with an `exp` the compiler turns into vector instructions
//! (`cpu_simd::exp`), compiled for AVX2 where the CPU has it.

use rayon::prelude::*;

use crate::cpu_simd::exp::exp;
use crate::error::Result;
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{GATE, OUT, UP};

/// Values per parallel task: 64 KiB of gate and up, big enough that a task
/// outweighs handing it to a thread, small enough to share a 64-token
/// prefill's 512 Ki values between threads.
const CHUNK: usize = 8192;

/// `out` = silu(`gate`) · `up`, elementwise in f32, rounded to `O`.
pub(super) fn silu_mul<O: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let (gate, up) = (args.input::<f32>(GATE)?, args.input::<f32>(UP)?);
    let out = args.output::<O>(OUT)?;
    let length = out.len().min(gate.len()).min(up.len());
    out[..length]
        .par_chunks_mut(CHUNK)
        .zip(gate[..length].par_chunks(CHUNK))
        .zip(up[..length].par_chunks(CHUNK))
        .for_each(|((out, gate), up)| chunk(out, gate, up));
    Ok(())
}

/// One chunk, with the AVX2 build of the loop where the CPU has AVX2 (no
/// fused multiply-add: the same roundings as the plain build).
fn chunk<O: WeightElement>(out: &mut [O], gate: &[f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        unsafe { chunk_avx2(out, gate, up) };
        return;
    }
    chunk_body(out, gate, up);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn chunk_avx2<O: WeightElement>(out: &mut [O], gate: &[f32], up: &[f32]) {
    chunk_body(out, gate, up);
}

#[inline(always)]
fn chunk_body<O: WeightElement>(out: &mut [O], gate: &[f32], up: &[f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = O::from_f32(g / (1.0 + exp(-g)) * u);
    }
}
