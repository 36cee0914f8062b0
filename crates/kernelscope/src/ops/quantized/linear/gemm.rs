//! A prefill chunk's product with quantized weights on tensor cores: the
//! weight dequantized to bf16 into scratch (`dequantize_<format>_bf16`),
//! the chunk's f32 rows narrowed to bf16 (`narrow_f32_bf16`) unless the
//! layer before wrote them in bf16, then the bf16 GEMM (cuBLASLt) with f32
//! output. A bf16 input of fewer rows than the GEMM takes is widened to f32
//! (`widen_bf16_f32`) for the mat-vec kernels. The mat-vec kernel looped over
//! rows re-reads every weight block per row, which at 512 rows ran 17 times
//! slower than llama.cpp's prefill; dequantizing once per chunk costs a
//! read of the blocks and a write and read of the bf16 copy, small beside
//! the GEMM's flops at chunk sizes. The scratch grows to the largest matrix
//! and chunk seen and is shared by every clone of the op (one format's
//! layers run one after another on one stream).

use std::sync::{Arc, Mutex};

use super::cuda::quantized_kernel;
use crate::error::Result;
use crate::ops::matmul::MatMul;
use crate::ops::{Arguments, bytes_of, kernel_arguments};
use crate::quant::QuantFormat;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Chunks of at least this many rows take the GEMM; fewer run the
/// mat-vec kernel per row (its weight reads shared through L2).
pub const GEMM_ROWS: usize = 16;

/// The arguments of `dequantize_<format>_bf16` (kernels.cu).
pub(crate) mod dequantize {
    crate::ops::kernel_arguments! { WEIGHT: "weight" Read, OUT: "out" Write, N: "n" U32, K: "k" U32 }
}

// The arguments of `narrow_f32_bf16` and `widen_bf16_f32` (narrow.cu).
kernel_arguments! { X: "x" Read, OUT: "out" Write, COUNT: "count" U32 }

/// Registers `narrow_f32_bf16` and `widen_bf16_f32` on CUDA (the
/// per-format dequantization is registered with the format's other
/// kernels).
pub(super) fn register(registry: &mut KernelRegistry) {
    let source: Arc<str> = crate::ops::cuda_source(include_str!("narrow.cu")).into();
    for name in ["narrow_f32_bf16", "widen_bf16_f32"] {
        registry.register_cuda_source(name, source.clone());
    }
    // Each is grouped by the dtype it ends in, its output's.
    registry.register_format("narrow_f32_bf16", "bf16");
    registry.register_format("widen_bf16_f32", "f32");
}

/// Blocks of the elementwise kernels (grid-stride beyond).
const MOST_BLOCKS: usize = 4096;

/// Threads of a dequantizing block (DEQUANTIZE_THREADS, products.cuh).
const DEQUANTIZE_THREADS: usize = 128;

/// Values one block of `dequantize_<format>_bf16` writes: a warp writes 32
/// units, two groups of them where a unit holds 64 values (Q6_K), so 1,024
/// or 4,096 values a warp (products.cuh, quantized_dequantize_bf16).
fn dequantized_per_block(format: QuantFormat) -> usize {
    let unit_values = if format == QuantFormat::Q6_K { 64 } else { 32 };
    let groups_in_flight = if unit_values >= 64 { 2 } else { 1 };
    (DEQUANTIZE_THREADS / 32) * 32 * unit_values * groups_in_flight
}

/// Dispatches `dequantize_<format>_bf16` (`kernel`): `weight`'s `n` rows of
/// `k` values in `format`'s blocks (planes) into `out` bf16 `[n, k]`,
/// rounded to nearest even; the bytes declared are the blocks'.
pub(crate) fn dispatch_dequantize(
    encoder: &mut CommandEncoder,
    kernel: &Kernel,
    format: QuantFormat,
    weight: &Buffer,
    out: &Buffer,
    [n, k]: [usize; 2],
) -> Result<()> {
    encoder.dispatch(
        Arguments::new(dequantize::ARGUMENTS)
            .buffer(dequantize::WEIGHT, weight)
            .buffer(dequantize::OUT, out)
            .scalar(dequantize::N, n as u32)
            .scalar(dequantize::K, k as u32)
            .dispatch(kernel)?
            .grid(LaunchGrid {
                blocks: [(n * k).div_ceil(dequantized_per_block(format)) as u32, 1, 1],
                threads_per_block: [DEQUANTIZE_THREADS as u32, 1, 1],
                shared_memory_bytes: 0,
            })
            .cost(
                (n * k / format.block_elements() * format.block_bytes()) as u64,
                bytes_of(n * k, DType::BF16),
                0,
            )
            .op_kind(OpKind::Copy),
    )
}

#[derive(Debug, Default)]
struct Scratch {
    weight: Option<Buffer>,
    x: Option<Buffer>,
    widened: Option<Buffer>,
}

/// A view of `len` elements of `dtype`, `shape`, of `slot`, grown if too
/// short.
pub(crate) fn scratch_view(
    device: &Device,
    slot: &mut Option<Buffer>,
    dtype: DType,
    shape: &[usize],
) -> Result<Buffer> {
    let len: usize = shape.iter().product();
    if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
        // Dispatches already encoded hold their own handle on the old one.
        *slot = Some(device.alloc(dtype, &[len])?);
    }
    slot.as_ref()
        .expect("allocated above")
        .slice(0, len)?
        .reshape(shape)
}

/// The three dispatches of one format's prefill GEMM, and their scratch.
#[derive(Clone, Debug)]
pub(super) struct DequantizedGemm {
    dequantize: Kernel,
    narrow: Kernel,
    widen: Kernel,
    gemm: MatMul,
    format: QuantFormat,
    scratch: Arc<Mutex<Scratch>>,
}

impl DequantizedGemm {
    pub(super) fn new(registry: &KernelRegistry, device: &Device, format: QuantFormat) -> Result<Self> {
        let what = format!("{format} weights are multiplied on tensor cores");
        Ok(DequantizedGemm {
            dequantize: quantized_kernel(
                registry,
                device,
                format!("dequantize_{}_bf16", format.name()),
                &what,
            )?,
            narrow: quantized_kernel(registry, device, "narrow_f32_bf16".into(), &what)?,
            widen: quantized_kernel(registry, device, "widen_bf16_f32".into(), &what)?,
            gemm: MatMul::new(registry, device, DType::BF16)?,
            format,
            scratch: Arc::default(),
        })
    }

    /// `out[rows, n] = x[rows, k] · W[n, k]ᵀ` for a checked weight of
    /// `[n, blocks, k]` in planes; `x` f32 (narrowed here) or bf16.
    pub(super) fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        [n, _, k]: [usize; 3],
        x: &Buffer,
        rows: usize,
        out: &Buffer,
    ) -> Result<()> {
        let device = encoder.device().clone();
        let weight16 = {
            let mut scratch = self.scratch.lock().expect("not poisoned");
            scratch_view(&device, &mut scratch.weight, DType::BF16, &[n, k])?
        };
        dispatch_dequantize(encoder, &self.dequantize, self.format, weight, &weight16, [n, k])?;
        if x.dtype() == DType::BF16 {
            return self.gemm.encode(encoder, &weight16, &x.reshape(&[rows, k])?, out);
        }
        let x16 = {
            let mut scratch = self.scratch.lock().expect("not poisoned");
            scratch_view(&device, &mut scratch.x, DType::BF16, &[rows, k])?
        };
        self.convert(encoder, &self.narrow, x, &x16, rows * k)?;
        self.gemm.encode(encoder, &weight16, &x16, out)
    }

    /// `x` bf16 `[rows, k]` widened to f32 scratch, for the mat-vecs.
    pub(super) fn widen(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        rows: usize,
        k: usize,
    ) -> Result<Buffer> {
        let device = encoder.device().clone();
        let wide = {
            let mut scratch = self.scratch.lock().expect("not poisoned");
            scratch_view(&device, &mut scratch.widened, DType::F32, &[rows, k])?
        };
        self.convert(encoder, &self.widen, x, &wide, rows * k)?;
        Ok(wide)
    }

    /// One of narrow.cu's conversions of `count` values, eight a thread.
    fn convert(
        &self,
        encoder: &mut CommandEncoder,
        kernel: &Kernel,
        x: &Buffer,
        out: &Buffer,
        count: usize,
    ) -> Result<()> {
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(OUT, out)
                .scalar(COUNT, count as u32)
                .dispatch(kernel)?
                .grid(LaunchGrid {
                    blocks: [count.div_ceil(8 * 256).clamp(1, MOST_BLOCKS) as u32, 1, 1],
                    threads_per_block: [256, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(bytes_of(count, x.dtype()), bytes_of(count, out.dtype()), 0)
                .op_kind(OpKind::Copy),
        )
    }
}
