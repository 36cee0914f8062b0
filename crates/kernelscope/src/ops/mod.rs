//! Ops: one folder per op, each with its CPU reference, its CUDA kernel
//! (where the backend has one) and its launch. Each op validates its
//! operands, declares its op kind, the buffers it reads and writes, and the
//! bytes and flops it moves, and picks its kernel by weight dtype
//! (`<op>_<dtype>`); a missing combination is an error naming the workaround.
//!
//! Weights may be f32, f16 or bf16 and are widened to f32 as they are read,
//! so every op accumulates in f32. The residual stream and decode's
//! activations are f32; an op whose output feeds a GEMM over a batch of
//! rows (RMSNorm, SiLU·mul) can instead store it in the weights' dtype,
//! rounded to nearest even, since a tensor-core GEMM takes both operands in
//! one dtype. Such kernels are named by their output dtype too.
//!
//! The elementwise and normalisation ops take `rows` rows at once
//! (`[rows, n]`, rows counted from the operand that sets the op's shape),
//! so a batched prefill and decode (one row) share them.
//!
//! A kernel's argument order is written once per op, with
//! `kernel_arguments!` (from `runtime::arguments`): the launch places each
//! argument by that list ([`Arguments`]), the CPU reference reads them by
//! its positions, and a test checks every `.cu` signature against it (names,
//! order, constness). Work the runtime reads itself declares its list
//! there: matmul takes the GEMM's (`runtime::library::gemm`), the
//! collectives theirs (`runtime::collective::group`).
//!
//! Shapes are checked before they are read: an operand whose dimensions an
//! op uses must have exactly that many (`shared::dimensions`); any other
//! operand must hold the elements the op needs, either in the op's shape
//! or flat (`shared::expect`). Either way a wrong buffer is
//! [`Error::ShapeMismatch`](crate::error::Error::ShapeMismatch), never a
//! panic.
//!
//! Every `.cu` is prefixed at registration with `prelude.cuh`: bf16 and f16
//! as 16-bit storage widened by hand (so NVRTC needs no CUDA header), warp
//! and block reductions, and `wait_for_previous_kernel()`, which a kernel
//! calls first to be launched early (`runtime::early_launch`). Kernels keep
//! loop bounds and branches that guard shuffles or `mma`s provably
//! warp-uniform (a bound broadcast with `__shfl_sync(…, 0)`, no early return
//! before them): otherwise the compiler wraps each one in a collective loop
//! (`WARPSYNC … ENDCOLLECTIVE` in the SASS), which once doubled the decode
//! attention kernel's instructions and made it spill.

pub mod add;
pub mod argmax;
pub mod attention;
pub mod collective;
pub mod copy;
pub mod embedding;
pub mod head_norm;
pub mod kv_append;
pub mod matmul;
pub mod matvec;
pub mod moe;
pub mod norm_matvec;
pub mod prefill_attention;
pub mod quantized;
pub mod rms_norm;
pub mod rope;
pub mod rope_append;
pub mod sample;
mod shared;
pub mod silu_mul;
pub mod synthetic;
mod weight_format;

pub use shared::WEIGHT_DTYPES;
pub(crate) use shared::{
    bytes_of, cuda_source, dimensions, expect, expect_indices, expect_kv_caches, expect_like, expect_rows,
    expect_slot, kernel_for, kv_caches_aligned, register_weight_kernels, rows_of,
};
pub use weight_format::WeightFormat;

pub use crate::cpu_simd::WeightElement;
pub(crate) use crate::cpu_simd::dot;

use crate::runtime::KernelRegistry;

pub(crate) use crate::runtime::arguments::{Argument, Arguments, kernel_arguments};

/// A registry holding every op's kernels.
pub fn registry() -> KernelRegistry {
    let mut registry = KernelRegistry::new();
    add::register(&mut registry);
    argmax::register(&mut registry);
    attention::register(&mut registry);
    copy::register(&mut registry);
    embedding::register(&mut registry);
    kv_append::register(&mut registry);
    matmul::register(&mut registry);
    matvec::register(&mut registry);
    matvec::residual::register(&mut registry);
    norm_matvec::register(&mut registry);
    norm_matvec::silu::register(&mut registry);
    norm_matvec::rope::register(&mut registry);
    prefill_attention::register(&mut registry);
    quantized::register(&mut registry);
    head_norm::register(&mut registry);
    moe::register(&mut registry);
    rms_norm::register(&mut registry);
    rope::register(&mut registry);
    rope_append::register(&mut registry);
    sample::register(&mut registry);
    silu_mul::register(&mut registry);
    synthetic::register(&mut registry);
    registry
}

/// What the CPU mat-vecs run on, for a profile's conditions, with the
/// quantized mat-vecs' 8-bit integer products where they differ from it.
pub fn describe_cpu_kernels() -> String {
    let integer = quantized::linear::integer_path();
    match crate::cpu_simd::dot::dot_path() {
        path if path.x_parts() > 0 => format!(
            "AVX-512 BF16 for bf16 weights (x rounded to {} bf16 parts, a named choice: logits within 0.24, mean 0.026, of the exact path on the 1B; AVX-512 F where x is longer than {}; prefill GEMM on vdpbf16ps, quantized prefill on dequantized bf16 tiles), AVX2+FMA for the others; 8-bit integer products (quantized decode): {}",
            path.x_parts(),
            crate::cpu_simd::dot::PARTS_IN_L1,
            integer.name()
        ),
        path if path.takes_bf16_products() => format!(
            "AVX2+FMA mat-vecs in exact f32 products (bf16 weights widened pairwise), AVX-512 BF16 for the prefill GEMM (vdpbf16ps) and quantized prefill (dequantized bf16 tiles); 8-bit integer products (quantized decode): {}",
            integer.name()
        ),
        crate::cpu_simd::dot::DotPath::Portable => crate::cpu_simd::dot::DotPath::Portable.name().to_string(),
        path => format!("{} (8-bit integer products: {})", path.name(), integer.name()),
    }
}
