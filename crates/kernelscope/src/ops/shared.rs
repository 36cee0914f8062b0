//! What every op shares, below them all: the weight dtypes, the CUDA source
//! every kernel file is compiled with (the prelude put before it), kernel
//! lookup that names what is missing, and the checks of arguments' dtypes
//! and shapes with their one-line errors. An op's folder imports these
//! (through `ops`' re-exports); nothing here imports an op.

use crate::error::{Error, Remedy, Result};
use crate::runtime::{Buffer, DType, Device, Kernel, KernelRegistry};

/// The weight dtypes every op supports.
pub const WEIGHT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The shared CUDA prelude (weight types, reductions) followed by an op's
/// kernel source: what NVRTC compiles for every kernel of that op.
pub(crate) fn cuda_source(op_source: &str) -> String {
    format!("{}\n{op_source}", include_str!("prelude.cuh"))
}

/// Registers `function::<f32>`, `::<f16>` and `::<bf16>` as `<op>_<dtype>`
/// on the CPU, and the op's `.cu` source for the same names on CUDA, each
/// declared to read its dtype.
macro_rules! register_weight_kernels {
    ($registry:expr, $op:literal, $function:ident, $cuda_source:expr) => {
        let source: std::sync::Arc<str> = $crate::ops::cuda_source($cuda_source).into();
        $registry.register_cpu(concat!($op, "_f32"), $function::<f32>);
        $registry.register_cpu(concat!($op, "_f16"), $function::<half::f16>);
        $registry.register_cpu(concat!($op, "_bf16"), $function::<half::bf16>);
        for dtype in ["f32", "f16", "bf16"] {
            $registry.register_cuda_source(&format!("{}_{dtype}", $op), source.clone());
            $registry.register_format(&format!("{}_{dtype}", $op), dtype);
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
            workaround: format!("{op} has no {dtype} kernel on {backend}"),
            // The CPU runs every op for every weight dtype.
            remedies: if backend == "cpu" {
                &[Remedy::OtherDtype]
            } else {
                &[Remedy::OtherDevice { device: "cpu" }, Remedy::OtherDtype]
            },
        },
        other => other,
    })
}

/// Checks a buffer's dtype, rank and element count for an op: it must have
/// `shape`'s rank or be flat (one dimension), and `shape`'s element count.
/// Flat views are accepted because the decode engine keeps its activations
/// as flat vectors (a query is `[heads · head_dim]`, a KV-cache view a slice).
pub(crate) fn expect(op: &str, role: &str, buffer: &Buffer, dtype: DType, shape: &[usize]) -> Result<()> {
    if buffer.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            context: format!("{op} {role}"),
            expected: dtype,
            found: buffer.dtype(),
        });
    }
    let rank = buffer.shape().len();
    if (rank != shape.len() && rank != 1) || buffer.len() != shape.iter().product::<usize>() {
        return Err(Error::ShapeMismatch {
            context: format!("{op} {role}"),
            expected: shape.to_vec(),
            found: buffer.shape().to_vec(),
        });
    }
    Ok(())
}

/// The dimensions of an operand whose shape the op reads (a weight matrix,
/// an embedding table): it must have exactly `RANK` of them. The error
/// suggests the same elements in `RANK` dimensions, keeping the last one
/// (a row's length), which is how a row-major buffer would be reshaped.
pub(crate) fn dimensions<const RANK: usize>(op: &str, role: &str, buffer: &Buffer) -> Result<[usize; RANK]> {
    let shape = buffer.shape();
    <[usize; RANK]>::try_from(shape).map_err(|_| {
        let mut suggested = vec![1; RANK];
        if RANK > 0 && !shape.is_empty() {
            let kept = shape.len().min(RANK);
            let folded = shape.len() - kept;
            suggested[0] = shape[..=folded].iter().product();
            suggested[1..kept].copy_from_slice(&shape[folded + 1..]);
        }
        Error::ShapeMismatch {
            context: format!("{op} {role} must have {RANK} dimensions"),
            expected: suggested,
            found: shape.to_vec(),
        }
    })
}

/// How many rows of `row_length` elements `buffer` holds: a whole, non-zero
/// number of them, or [`Error::ShapeMismatch`] (an empty grid cannot be
/// launched, and a partial row is a caller's mistake).
pub(crate) fn rows_of(op: &str, role: &str, buffer: &Buffer, row_length: usize) -> Result<usize> {
    let length = buffer.len();
    if row_length == 0 || length == 0 || !length.is_multiple_of(row_length) {
        return Err(Error::ShapeMismatch {
            context: format!("{op} {role} must hold whole rows of {row_length} elements"),
            expected: vec![length.div_ceil(row_length.max(1)).max(1), row_length],
            found: buffer.shape().to_vec(),
        });
    }
    Ok(length / row_length)
}

/// Checks an operand of `rows` rows, each of shape `row`: it must have
/// `dtype` and be `[rows, row...]`, `[rows, row length]` or flat, or, for a
/// single row, `row` itself (the decode engine's `[heads, head_dim]`).
/// Unlike [`expect`] the dimensions themselves are compared, since the same
/// elements as `[row length, rows]` would be read across the wrong axis.
pub(crate) fn expect_rows(
    op: &str,
    role: &str,
    buffer: &Buffer,
    dtype: DType,
    rows: usize,
    row: &[usize],
) -> Result<()> {
    if buffer.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            context: format!("{op} {role}"),
            expected: dtype,
            found: buffer.dtype(),
        });
    }
    let row_length: usize = row.iter().product();
    let shape = buffer.shape();
    let full: Vec<usize> = std::iter::once(rows).chain(row.iter().copied()).collect();
    let accepted = buffer.len() == rows * row_length
        && (shape.len() == 1 || shape == full || shape == [rows, row_length] || (rows == 1 && shape == row));
    if !accepted {
        return Err(Error::ShapeMismatch {
            context: format!("{op} {role}"),
            expected: full,
            found: shape.to_vec(),
        });
    }
    Ok(())
}

/// Checks a layer's key and value caches for an op: both `[max_positions,
/// kv_dim]` in `dtype` (2-D, since the positions are read from the shape).
/// Returns `max_positions`.
pub(crate) fn expect_kv_caches(
    op: &str,
    key_cache: &Buffer,
    value_cache: &Buffer,
    dtype: DType,
    kv_dim: usize,
) -> Result<usize> {
    let [max_positions, _] = dimensions(op, "key cache", key_cache)?;
    expect_rows(op, "key cache", key_cache, dtype, max_positions, &[kv_dim])?;
    expect_rows(op, "value cache", value_cache, dtype, max_positions, &[kv_dim])?;
    Ok(max_positions)
}

/// Whether both caches start on a 16-byte boundary, as kernels that read
/// them 16 bytes at a time need (a cache can be a view into a larger buffer).
pub(crate) fn kv_caches_aligned(key_cache: &Buffer, value_cache: &Buffer) -> bool {
    key_cache.byte_offset().is_multiple_of(16) && value_cache.byte_offset().is_multiple_of(16)
}

/// Checks an elementwise operand against the operand that sets the op's
/// shape (`like`): the same dtype `dtype`, the same element count, and the
/// same shape unless either is flat.
pub(crate) fn expect_like(op: &str, role: &str, buffer: &Buffer, dtype: DType, like: &Buffer) -> Result<()> {
    if buffer.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            context: format!("{op} {role}"),
            expected: dtype,
            found: buffer.dtype(),
        });
    }
    let flat = buffer.shape().len() == 1 || like.shape().len() == 1;
    if buffer.len() != like.len() || !(flat || buffer.shape() == like.shape()) {
        return Err(Error::ShapeMismatch {
            context: format!("{op} {role}"),
            expected: like.shape().to_vec(),
            found: buffer.shape().to_vec(),
        });
    }
    Ok(())
}

/// Checks that `slot` is a flat u32 buffer with an element at `index`.
pub(crate) fn expect_slot(op: &str, slot: &Buffer, index: usize) -> Result<()> {
    expect_indices(op, "position slot", slot, index, 1)
}

/// Checks that `values` (its `role` in the op: token ids, positions) is a
/// flat u32 buffer holding elements `first..first + count`.
pub(crate) fn expect_indices(
    op: &str,
    role: &str,
    values: &Buffer,
    first: usize,
    count: usize,
) -> Result<()> {
    if values.dtype() != DType::U32 {
        return Err(Error::DTypeMismatch {
            context: format!("{op} {role}"),
            expected: DType::U32,
            found: values.dtype(),
        });
    }
    if values.shape().len() != 1 {
        return Err(Error::ShapeMismatch {
            context: format!("{op} {role} must have 1 dimension"),
            expected: vec![values.len()],
            found: values.shape().to_vec(),
        });
    }
    if first + count > values.len() {
        return Err(Error::OutOfBounds {
            context: format!("{op} {role} index"),
            start: first,
            end: first + count,
            available: values.len(),
        });
    }
    Ok(())
}

/// Bytes of `elements` values of `dtype`, as u64 for the roofline.
pub(crate) fn bytes_of(elements: usize, dtype: DType) -> u64 {
    (elements * dtype.size_in_bytes()) as u64
}
