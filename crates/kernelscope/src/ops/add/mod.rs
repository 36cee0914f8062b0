//! In-place addition `x += y`: the residual connections (y f32) and the
//! projection biases of Qwen2 (y in the checkpoint's dtype).

mod cpu;

use super::{Arguments, bytes_of, expect, kernel_arguments, kernel_for, register_weight_kernels};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

use cpu::add;

kernel_arguments! { X: "x" ReadWrite, Y: "y" Read, N: "n" U32 }

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

    /// `x[n] += y[n]` (x f32, updated in place).
    pub fn encode(&self, encoder: &mut CommandEncoder, x: &Buffer, y: &Buffer) -> Result<()> {
        let n = x.len();
        expect("add", "accumulator", x, DType::F32, &[n])?;
        expect("add", "addend", y, self.dtype, &[n])?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(Y, y)
                .scalar(N, n as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(n, 256))
                .cost(bytes_of(2 * n, DType::F32) + bytes_of(n, self.dtype), n as u64)
                .op_kind(OpKind::ElemAdd),
        )
    }
}
