//! In-place addition `x += y`: the residual connections (y f32, as long as
//! x) and the projection biases of Qwen2 (y in the checkpoint's dtype, one
//! row added to every row of x).

mod arguments;
mod cpu;
pub(crate) use arguments::{ARGUMENTS, COLUMNS, N, X, Y};

use super::{Arguments, bytes_of, expect_like, kernel_for, register_weight_kernels};
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::add;

/// Registers `add_<dtype>` (the dtype of the addend).
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(registry, "add", add, include_str!("add.cu"));
}

/// The add op for one addend dtype.
#[derive(Clone, Debug)]
pub struct Add {
    kernel: Kernel,
    dtype: DType,
}

impl Add {
    /// The op for addends of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(Add {
            kernel: kernel_for(registry, device, "add", dtype)?,
            dtype,
        })
    }

    /// `x[i] += y[i % y.len()]` (x f32, updated in place). Either `y` is as
    /// long as `x` (with x's shape, or one of them flat), or `y` is a flat
    /// row whose length divides x's, added to every row of x; then a shaped
    /// x must end in dimensions whose product is that length (`[rows, n]`
    /// plus a bias `[n]`). Any other length is [`Error::ShapeMismatch`].
    pub fn encode(&self, encoder: &mut CommandEncoder, x: &Buffer, y: &Buffer) -> Result<()> {
        let (n, columns) = (x.len(), y.len());
        if x.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                context: "add accumulator".into(),
                expected: DType::F32,
                found: x.dtype(),
            });
        }
        if columns == n {
            expect_like("add", "addend", y, self.dtype, x)?;
        } else {
            if y.dtype() != self.dtype {
                return Err(Error::DTypeMismatch {
                    context: "add addend".into(),
                    expected: self.dtype,
                    found: y.dtype(),
                });
            }
            if y.shape().len() != 1 || columns == 0 || !n.is_multiple_of(columns) {
                return Err(Error::ShapeMismatch {
                    context: format!(
                        "add addend must be as long as the accumulator ({n}) or a flat row whose length divides it"
                    ),
                    expected: vec![columns.max(1)],
                    found: y.shape().to_vec(),
                });
            }
            // A shaped accumulator's rows are its trailing dimensions.
            let shape = x.shape();
            let rows_end_in_columns = shape.len() == 1
                || (0..shape.len()).any(|split| shape[split..].iter().product::<usize>() == columns);
            if !rows_end_in_columns {
                return Err(Error::ShapeMismatch {
                    context: format!(
                        "add accumulator must end in dimensions of {columns} elements, the addend's"
                    ),
                    expected: vec![n / columns, columns],
                    found: shape.to_vec(),
                });
            }
        }
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(Y, y)
                .scalar(N, n as u32)
                .scalar(COLUMNS, columns.max(1) as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(n, 256))
                // The accumulator is read and written, the addend read.
                .cost(
                    bytes_of(n, DType::F32) + bytes_of(columns, self.dtype),
                    bytes_of(n, DType::F32),
                    n as u64,
                )
                .op_kind(OpKind::ElemAdd),
        )
    }
}
