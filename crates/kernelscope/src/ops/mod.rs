//! Ops: one folder per op, each with its CPU reference, its CUDA kernel
//! (where the backend has one) and its launch. Each op validates its
//! operands, declares its op kind, the buffers it reads and writes, and the
//! bytes and flops it moves, and picks its kernel by weight dtype
//! (`<op>_<dtype>`); a missing combination is an error naming the workaround.
//!
//! Activations are f32 everywhere; weights may be f32, f16 or bf16 and are
//! widened to f32 as they are read, so every op accumulates in f32.

pub mod add;
pub mod argmax;
pub mod attention;
pub mod copy;
pub mod embedding;
pub mod kv_append;
pub mod matmul;
pub mod matvec;
pub mod rms_norm;
pub mod rope;
pub mod sample;
pub mod silu_mul;

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::runtime::{Buffer, DType, Device, Element, Kernel, KernelRegistry};

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
    rms_norm::register(&mut registry);
    rope::register(&mut registry);
    sample::register(&mut registry);
    silu_mul::register(&mut registry);
    registry
}

/// Weight element types the ops read: widened to f32 on load.
pub trait WeightElement: Element + Copy {
    /// The value as f32 (exact for every weight dtype).
    fn to_f32(self) -> f32;
}

impl WeightElement for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl WeightElement for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        // bf16 is the top half of an f32: widening is a shift (and vectorises).
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
}

impl WeightElement for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// The weight dtypes every op supports.
pub const WEIGHT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The shared CUDA prelude (weight types, reductions) followed by an op's
/// kernel source: what NVRTC compiles for every kernel of that op.
pub(crate) fn cuda_source(op_source: &str) -> String {
    format!("{}\n{op_source}", include_str!("prelude.cuh"))
}

/// Registers `function::<f32>`, `::<f16>` and `::<bf16>` as `<op>_<dtype>`
/// on the CPU, and the op's `.cu` source for the same names on CUDA.
macro_rules! register_weight_kernels {
    ($registry:expr, $op:literal, $function:ident, $cuda_source:expr) => {
        let source: std::sync::Arc<str> = $crate::ops::cuda_source($cuda_source).into();
        $registry.register_cpu(concat!($op, "_f32"), $function::<f32>);
        $registry.register_cpu(concat!($op, "_f16"), $function::<half::f16>);
        $registry.register_cpu(concat!($op, "_bf16"), $function::<half::bf16>);
        for dtype in ["f32", "f16", "bf16"] {
            $registry.register_cuda_source(&format!("{}_{dtype}", $op), source.clone());
        }
    };
}
pub(crate) use register_weight_kernels;

/// The kernel `<op>_<dtype>` for `device`, with an error naming the op, the
/// dtype and the workaround when the backend lacks it.
pub(crate) fn kernel_for(
    registry: &KernelRegistry,
    device: &Device,
    op: &str,
    dtype: DType,
) -> Result<Kernel> {
    let name = format!("{op}_{dtype}");
    registry.kernel(device, &name).map_err(|error| match error {
        Error::KernelMissing { backend, .. } => Error::KernelMissing {
            name,
            backend,
            workaround: format!(
                "{op} has no {dtype} kernel on {backend}; use --device cpu, or a checkpoint of another dtype (gen-model --dtype)"
            ),
        },
        other => other,
    })
}

/// Checks a buffer's dtype and element count for an op.
pub(crate) fn expect(op: &str, role: &str, buffer: &Buffer, dtype: DType, shape: &[usize]) -> Result<()> {
    if buffer.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            context: format!("{op} {role}"),
            expected: dtype,
            found: buffer.dtype(),
        });
    }
    if buffer.len() != shape.iter().product::<usize>() {
        return Err(Error::ShapeMismatch {
            context: format!("{op} {role}"),
            expected: shape.to_vec(),
            found: buffer.shape().to_vec(),
        });
    }
    Ok(())
}

/// Checks that `slot` is a u32 buffer with an element at `index`.
pub(crate) fn expect_slot(op: &str, slot: &Buffer, index: usize) -> Result<()> {
    if slot.dtype() != DType::U32 {
        return Err(Error::DTypeMismatch {
            context: format!("{op} position slot"),
            expected: DType::U32,
            found: slot.dtype(),
        });
    }
    if index >= slot.len() {
        return Err(Error::OutOfBounds {
            context: format!("{op} position slot index"),
            start: index,
            end: index + 1,
            available: slot.len(),
        });
    }
    Ok(())
}

/// Dot product of a weight row and an f32 vector, accumulated in f32 over
/// eight lanes so the compiler can vectorise it. On x86-64 CPUs with AVX2
/// and FMA (checked at run time; the build targets baseline x86-64) the same
/// loop is compiled for those instructions, which roughly doubles the CPU
/// mat-vec's throughput.
#[inline]
pub(crate) fn dot<W: WeightElement>(row: &[W], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above.
            return unsafe { dot_avx2_fma(row, x) };
        }
    }
    dot_lanes::<W, false>(row, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2_fma<W: WeightElement>(row: &[W], x: &[f32]) -> f32 {
    dot_lanes::<W, true>(row, x)
}

/// The eight-lane loop; `FUSED` uses fused multiply-add, which is only fast
/// where the target has FMA.
#[inline(always)]
fn dot_lanes<W: WeightElement, const FUSED: bool>(row: &[W], x: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let row_chunks = row.chunks_exact(8);
    let x_chunks = x.chunks_exact(8);
    let (row_tail, x_tail) = (row_chunks.remainder(), x_chunks.remainder());
    for (w, v) in row_chunks.zip(x_chunks) {
        for lane in 0..8 {
            lanes[lane] = if FUSED {
                w[lane].to_f32().mul_add(v[lane], lanes[lane])
            } else {
                lanes[lane] + w[lane].to_f32() * v[lane]
            };
        }
    }
    let mut sum =
        ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (w, v) in row_tail.iter().zip(x_tail) {
        sum += w.to_f32() * v;
    }
    sum
}

/// Bytes of `elements` values of `dtype`, as u64 for the roofline.
pub(crate) fn bytes_of(elements: usize, dtype: DType) -> u64 {
    (elements * dtype.size_in_bytes()) as u64
}
