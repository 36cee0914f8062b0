//! x staged for the fused products: the kernels that quantize it, or
//! normalise and quantize it, into 8-bit blocks in scratch (stage.cu), and
//! when they let the product reading it launch (`Reader`);
//! `QuantizedFused::encode_stage` dispatches them.

use std::sync::{Arc, Mutex};

/// The arguments of `quantize_q8` and `norm_quantize_q8` (stage.cu).
pub(crate) use super::super::arguments::{norm_quantize, quantize};
use super::super::cuda::staged_bytes;
use super::super::gemm::scratch_view;
use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect};
use crate::profile::Role;
use crate::runtime::{Buffer, CommandEncoder, DType, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `quantize_q8` and `norm_quantize_q8` on CUDA (each also for
/// a streamed reader, `_streamed_reader`), and
/// `quantize_q8`'s reference on the CPU (the products are registered with
/// each format's other kernels).
pub(crate) fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("quantize_q8", super::super::stage::quantize_q8);
    let source: Arc<str> = crate::ops::cuda_source(&format!(
        "{}\n{}",
        include_str!("../quantized.cuh"),
        include_str!("../stage.cu")
    ))
    .into();
    for name in [
        "quantize_q8",
        "quantize_q8_streamed_reader",
        "norm_quantize_q8",
        "norm_quantize_q8_streamed_reader",
    ] {
        registry.register_cuda_source(name, source.clone());
    }
}

/// How the product reading a staged x runs, which decides when the stage
/// kernel lets it launch (stage.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// A product of register loops (or any grid smaller than the GPU):
    /// launched once the stage kernel has waited for the kernel before it.
    /// Let launch before, the LM head after the final norm took 37 µs a
    /// token more on llama-3-8b (H100, docs/PERF.md run AZ).
    Registers,
    /// A streamed product, whose grid fills every multiprocessor at once
    /// (see [`QuantizedFused::matvecs_rope_streams`]): launched before the
    /// stage kernel waits, so its blocks take each multiprocessor as the
    /// kernel before the stage leaves it and its copies run meanwhile.
    Streamed,
}

impl Reader {
    /// The reader of a product that streams where `streams` says so.
    pub(super) fn streamed_where(streams: bool) -> Reader {
        if streams {
            Reader::Streamed
        } else {
            Reader::Registers
        }
    }
}

/// Threads of a block of the quantize kernels (stage.cu), and the elements
/// one block quantizes (four a thread).
const QUANTIZE_THREADS: u32 = 256;
const QUANTIZED_PER_BLOCK: usize = 4 * QUANTIZE_THREADS as usize;

/// Dispatches `x` (f32, rows of `length` values, all of them at once)
/// quantized to 8-bit blocks of 32 by `kernel` into `slot`'s scratch, grown
/// to fit: `quantize_q8`, or, where `norm` gives the norm weight and eps,
/// `norm_quantize_q8` over its one row. Returns the scratch
/// (`staged_bytes(x.len())` bytes) the products read.
pub(crate) fn stage_input(
    encoder: &mut CommandEncoder,
    op: &str,
    x: &Buffer,
    length: usize,
    kernel: &Kernel,
    norm: Option<(&Buffer, f32)>,
    slot: &Mutex<Option<Buffer>>,
) -> Result<Buffer> {
    check_quantizable(op, length)?;
    let total = x.len();
    if norm.is_some() && total != length {
        return Err(Error::ShapeMismatch {
            context: format!("{op} normalises one row"),
            expected: vec![length],
            found: vec![total],
        });
    }
    let device = encoder.device().clone();
    let staged = {
        let mut slot = slot.lock().expect("not poisoned");
        scratch_view(&device, &mut slot, DType::U8, &[staged_bytes(total)])?
    };
    let dispatch = match norm {
        Some((norm_weight, eps)) => {
            expect(op, "norm weight", norm_weight, DType::F32, &[length])?;
            Arguments::new(norm_quantize::ARGUMENTS)
                .buffer(norm_quantize::X, x)
                .buffer(norm_quantize::NORM_WEIGHT, norm_weight)
                .buffer(norm_quantize::OUT, &staged)
                .scalar(norm_quantize::K, total as u32)
                .scalar(norm_quantize::EPS, eps)
                .dispatch(kernel)?
                .cost(
                    bytes_of(2 * total, DType::F32),
                    staged_bytes(total) as u64,
                    6 * total as u64,
                )
                .op_kind(OpKind::RmsNorm)
        }
        None => Arguments::new(quantize::ARGUMENTS)
            .buffer(quantize::X, x)
            .buffer(quantize::OUT, &staged)
            .scalar(quantize::K, total as u32)
            .dispatch(kernel)?
            .cost(
                bytes_of(total, DType::F32),
                staged_bytes(total) as u64,
                2 * total as u64,
            )
            .op_kind(OpKind::Copy),
    };
    let dispatch = dispatch.role(Role::ActivationQuantization);
    encoder.dispatch(dispatch.grid(LaunchGrid {
        blocks: [total.div_ceil(QUANTIZED_PER_BLOCK) as u32, 1, 1],
        threads_per_block: [QUANTIZE_THREADS, 1, 1],
        shared_memory_bytes: 0,
    }))?;
    Ok(staged)
}

/// Whether x of `k` elements can be quantized in blocks of 32 (every
/// format's rows are whole blocks of 32, so only a malformed weight fails).
pub(super) fn check_quantizable(op: &str, k: usize) -> Result<()> {
    if k.is_multiple_of(32) && k > 0 {
        return Ok(());
    }
    Err(Error::ShapeMismatch {
        context: format!("{op} quantizes its input in blocks of 32 elements"),
        expected: vec![k.div_ceil(32) * 32],
        found: vec![k],
    })
}
