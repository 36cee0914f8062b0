//! Copy: device memory to device memory. Also the probe `kscope info` uses
//! to measure a device's memory bandwidth (bytes read plus bytes written).

mod arguments;
mod cpu;
pub use arguments::KERNEL_NAME;
pub(crate) use arguments::{ARGUMENTS, DESTINATION, SOURCE, WORDS};

use super::Arguments;
use crate::error::{Error, Result};
use crate::runtime::{Buffer, CommandEncoder, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers the copy kernels.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu(KERNEL_NAME, cpu::copy_bytes);
    registry.register_cuda_source(KERNEL_NAME, super::cuda_source(include_str!("copy.cu")));
}

/// The copy op, bound to a device's kernel.
#[derive(Clone, Debug)]
pub struct Copy {
    kernel: Kernel,
}

impl Copy {
    /// The op for `device`, from `registry`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Copy {
            kernel: registry.kernel(device, KERNEL_NAME)?,
        })
    }

    /// Encodes `destination = source`; both must have the same dtype and length.
    pub fn encode(&self, encoder: &mut CommandEncoder, source: &Buffer, destination: &Buffer) -> Result<()> {
        if source.dtype() != destination.dtype() {
            return Err(Error::DTypeMismatch {
                context: "copy destination".into(),
                expected: source.dtype(),
                found: destination.dtype(),
            });
        }
        if source.len() != destination.len() {
            return Err(Error::ShapeMismatch {
                context: "copy destination".into(),
                expected: source.shape().to_vec(),
                found: destination.shape().to_vec(),
            });
        }
        let bytes = source.byte_len() as u64;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(SOURCE, &raw_view(source)?)
                .buffer(DESTINATION, &raw_view(destination)?)
                .scalar(WORDS, (source.byte_len() / 4) as u64)
                .dispatch(&self.kernel)?
                // Enough blocks to fill any GPU; each thread loops over the rest.
                .grid(LaunchGrid::linear(
                    source.byte_len().div_ceil(16).min(1 << 22),
                    256,
                ))
                .cost(bytes, bytes, 0)
                .op_kind(OpKind::Copy),
        )
    }
}

/// The buffer as raw 32-bit words (copies are dtype-blind); lengths that
/// are not a whole number of words are refused.
fn raw_view(buffer: &Buffer) -> Result<Buffer> {
    if !buffer.byte_len().is_multiple_of(4) {
        return Err(Error::ShapeMismatch {
            context: "copy: byte length must be a multiple of 4".into(),
            expected: vec![buffer.byte_len().next_multiple_of(4)],
            found: vec![buffer.byte_len()],
        });
    }
    buffer.reinterpret(crate::DType::U32)
}
