//! The CPU's compute ceiling, measured the way the best CPU kernels reach
//! it: the widest multiply-add instructions the CPU has, on operands held in
//! registers (no memory in the way), on every thread at once. A GEMM's rate
//! says how good that GEMM is; this says what the cores can do. Each
//! instruction set the CPU has is measured, widest first: AVX-512 BF16
//! (`vdpbf16ps`: 16 lanes × 2 products, 64 flops), AVX-512 F32 FMA (32
//! flops), AVX2 FMA (16 flops), and plain scalar multiply-add (2 flops),
//! which every CPU has.

use rayon::prelude::*;

/// Independent accumulators per thread: enough to cover the multiply-add
/// latency (4 to 6 cycles) on two issue ports many times over, few enough
/// to stay in the 16 or 32 vector registers.
const CHAINS: usize = 16;

/// One instruction set's measured rate.
#[derive(Clone, Debug, PartialEq)]
pub struct InstructionPeak {
    /// The instruction, as a reader would look it up (`AVX-512 BF16 vdpbf16ps`).
    pub instruction: &'static str,
    /// GFLOP/s over all threads.
    pub gflops: f64,
    /// Threads that ran it at once.
    pub threads: usize,
}

/// A kernel: runs `iterations` rounds of [`CHAINS`] multiply-adds and
/// returns something of the result, so nothing is optimised away.
type Kernel = fn(u64) -> f32;

/// Every instruction set this CPU has, widest first, with its flops per
/// instruction and its kernel.
fn available() -> Vec<(&'static str, u64, Kernel)> {
    let mut kernels: Vec<(&'static str, u64, Kernel)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512bf16") && std::arch::is_x86_feature_detected!("avx512f")
        {
            kernels.push(("AVX-512 BF16 vdpbf16ps", 64, x86::dot_bf16_512));
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            kernels.push(("AVX-512 F32 vfmadd", 32, x86::fma_512));
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            kernels.push(("AVX2 F32 vfmadd", 16, x86::fma_256));
        }
    }
    kernels.push(("scalar F32 multiply-add", 2, scalar));
    kernels
}

/// Measures each instruction set the CPU has (widest first) on every
/// thread of rayon's pool at once, each run long enough (`iterations`
/// rounds per thread; about 20 ms at 2 × 10^6 on a 3 GHz core) that
/// starting the threads does not count. The best of five runs: the
/// development machine's two threads share their host, and a run can
/// lose half its rate to a neighbour.
pub fn measure_cpu_peaks(iterations: u64) -> Vec<InstructionPeak> {
    let threads = rayon::current_num_threads();
    available()
        .into_iter()
        .map(|(instruction, flops_per_instruction, kernel)| {
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let start = std::time::Instant::now();
                let sink: f32 = (0..threads).into_par_iter().map(|_| kernel(iterations)).sum();
                best = best.min(start.elapsed().as_secs_f64());
                std::hint::black_box(sink);
            }
            let flops = (threads as u64 * iterations * CHAINS as u64 * flops_per_instruction) as f64;
            InstructionPeak {
                instruction,
                gflops: flops / best.max(1e-9) / 1e9,
                threads,
            }
        })
        .collect()
}

/// Scalar multiply-adds: `CHAINS` independent chains `a = a·m + c`, which
/// settle (|m| < 1), so the values stay normal however long it runs.
fn scalar(iterations: u64) -> f32 {
    let multiplier = std::hint::black_box(0.999_f32);
    let addend = std::hint::black_box(0.001_f32);
    let mut chains = [0.5_f32; CHAINS];
    for _ in 0..iterations {
        for chain in &mut chains {
            *chain = *chain * multiplier + addend;
        }
    }
    chains.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The vector kernels, each compiled for its own instruction set and
    //! only called after the CPU was seen to have it.

    use std::arch::x86_64::*;

    use super::CHAINS;

    pub(super) fn fma_512(iterations: u64) -> f32 {
        // SAFETY: only listed by `available` when the CPU has AVX-512F.
        unsafe { fma_512_inner(iterations) }
    }

    pub(super) fn fma_256(iterations: u64) -> f32 {
        // SAFETY: only listed by `available` when the CPU has AVX2 and FMA.
        unsafe { fma_256_inner(iterations) }
    }

    pub(super) fn dot_bf16_512(iterations: u64) -> f32 {
        // SAFETY: only listed by `available` when the CPU has AVX-512F and
        // AVX-512 BF16.
        unsafe { dot_bf16_512_inner(iterations) }
    }

    #[target_feature(enable = "avx512f")]
    fn fma_512_inner(iterations: u64) -> f32 {
        let multiplier = _mm512_set1_ps(std::hint::black_box(0.999));
        let addend = _mm512_set1_ps(std::hint::black_box(0.001));
        let mut chains = [_mm512_set1_ps(0.5); CHAINS];
        for _ in 0..iterations {
            for chain in &mut chains {
                *chain = _mm512_fmadd_ps(*chain, multiplier, addend);
            }
        }
        chains.iter().map(|chain| _mm512_reduce_add_ps(*chain)).sum()
    }

    #[target_feature(enable = "avx2,fma")]
    fn fma_256_inner(iterations: u64) -> f32 {
        let multiplier = _mm256_set1_ps(std::hint::black_box(0.999));
        let addend = _mm256_set1_ps(std::hint::black_box(0.001));
        let mut chains = [_mm256_set1_ps(0.5); CHAINS];
        for _ in 0..iterations {
            for chain in &mut chains {
                *chain = _mm256_fmadd_ps(*chain, multiplier, addend);
            }
        }
        let mut lanes = [0f32; 8];
        let mut total = 0.0;
        for chain in chains {
            // SAFETY: `lanes` holds the 8 floats the store writes.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), chain) };
            total += lanes.iter().sum::<f32>();
        }
        total
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    fn dot_bf16_512_inner(iterations: u64) -> f32 {
        // Small products so the sums grow slowly: 2 × 10^6 rounds add
        // about 0.8 to each lane, well inside f32.
        let small = _mm512_set1_ps(std::hint::black_box(1.0 / 64.0) / 40.0);
        let operand = _mm512_cvtne2ps_pbh(small, small);
        let mut chains = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iterations {
            for chain in &mut chains {
                *chain = _mm512_dpbf16_ps(*chain, operand, operand);
            }
        }
        chains.iter().map(|chain| _mm512_reduce_add_ps(*chain)).sum()
    }
}
