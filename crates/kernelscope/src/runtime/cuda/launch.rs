//! One dispatch as one kernel launch on the device's stream, its arguments
//! passed in order: device pointers at the view's byte offset, then scalars.
//! Used by eager submissions and by graph capture alike.

use std::ffi::c_void;

use cudarc::driver::result;

use super::memory::CudaMemory;
use super::modules::CudaKernel;
use super::state::DeviceState;
use crate::error::{Error, Result};
use crate::runtime::command::RecordedDispatch;
use crate::runtime::memory::DeviceMemory;
use crate::runtime::{Arg, Param};

/// Launches one recorded dispatch on the stream (context bound by the caller).
pub(crate) fn launch(state: &DeviceState, recorded: &RecordedDispatch) -> Result<()> {
    let dispatch = &recorded.dispatch;
    let kernel = dispatch.kernel();
    let function = kernel
        .loaded::<CudaKernel>()
        .ok_or_else(|| Error::KernelMissing {
            name: kernel.name().to_string(),
            backend: "cuda",
            workaround:
                "this kernel handle was made for another backend; get it from the registry for this device"
                    .into(),
        })?;
    // One 8-byte cell per argument; the driver copies them at launch.
    let mut cells: Vec<[u8; 8]> = Vec::with_capacity(dispatch.args().len());
    for (index, arg) in dispatch.args().iter().enumerate() {
        let mut cell = [0u8; 8];
        match arg {
            Arg::Buffer { buffer, .. } => match buffer.memory().as_any().downcast_ref::<CudaMemory>() {
                Some(memory) => {
                    let address = memory.base_address() as u64 + buffer.byte_offset() as u64;
                    cell.copy_from_slice(&address.to_le_bytes());
                }
                None => {
                    return Err(Error::KernelArgument {
                        kernel: kernel.name().to_string(),
                        index,
                        problem: "a CPU buffer cannot be passed to a CUDA kernel".into(),
                    });
                }
            },
            Arg::Scalar(Param::U32(value)) => cell[..4].copy_from_slice(&value.to_le_bytes()),
            Arg::Scalar(Param::I32(value)) => cell[..4].copy_from_slice(&value.to_le_bytes()),
            Arg::Scalar(Param::F32(value)) => cell[..4].copy_from_slice(&value.to_le_bytes()),
            Arg::Scalar(Param::U64(value)) => cell.copy_from_slice(&value.to_le_bytes()),
        }
        cells.push(cell);
    }
    let mut pointers: Vec<*mut c_void> = cells
        .iter_mut()
        .map(|cell| cell.as_mut_ptr() as *mut c_void)
        .collect();
    let grid = dispatch.grid;
    // SAFETY: the kernel's parameters are, in order, the dispatch's
    // arguments: each buffer a device pointer (8 bytes) into memory of this
    // context that outlives the launch (the encoder holds the buffers until
    // the submission is committed and the driver orders frees after it), each
    // scalar its 4- or 8-byte value; the op that built the dispatch declares
    // the same order as its `.cu` signature (and tests check each against
    // its CPU reference).
    unsafe {
        result::launch_kernel(
            function.cu_function(),
            (grid.blocks[0], grid.blocks[1], grid.blocks[2]),
            (
                grid.threads_per_block[0],
                grid.threads_per_block[1],
                grid.threads_per_block[2],
            ),
            grid.shared_memory_bytes,
            state.stream().cu_stream(),
            &mut pointers,
        )
    }
    .map_err(|source| Error::Cuda {
        operation: format!("launching `{}`", kernel.name()),
        source,
    })
}
