//! One dispatch on the device's stream: our kernel as one launch, its
//! arguments passed in order (device pointers at the view's byte offset,
//! then scalars), or a library call (cuBLASLt), which may launch several
//! kernels of its own. Used by eager submissions and by graph capture alike.

use std::ffi::c_void;

use cudarc::driver::{CudaFunction, DriverError, result, sys};

use super::blas::{GemmPointers, GemmShape};
use super::memory::CudaMemory;
use super::modules::CudaKernel;
use super::state::DeviceState;
use crate::error::{Error, Result};
use crate::runtime::command::RecordedDispatch;
use crate::runtime::library::gemm;
use crate::runtime::memory::DeviceMemory;
use crate::runtime::{Arg, LaunchGrid, LibraryCall, Param};

/// The backend's form of a dispatch's kernel.
pub(super) fn cuda_kernel(recorded: &RecordedDispatch) -> Result<&CudaKernel> {
    let kernel = recorded.dispatch.kernel();
    kernel.loaded::<CudaKernel>().ok_or_else(|| Error::KernelMissing {
        name: kernel.name().to_string(),
        backend: "cuda",
        workaround: "this kernel handle was made for another backend; get it from the registry for this device"
            .into(),
        remedies: &[],
    })
}

/// What one dispatch's launch starts, as CUPTI will report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Launched {
    /// Our kernel: one record, under the dispatch's kernel name.
    Ours,
    /// A library call: this many records, under names the library chose.
    Library {
        /// Kernels the call launches.
        kernels: u32,
    },
}

impl Launched {
    /// Records CUPTI will deliver for it.
    pub(crate) fn records(self) -> u32 {
        match self {
            Launched::Ours => 1,
            Launched::Library { kernels } => kernels,
        }
    }
}

/// Makes what a dispatch's launch needs that must not be made during a
/// stream capture (a library call's plan), and says what its launch will
/// start.
pub(crate) fn prepare(state: &DeviceState, recorded: &RecordedDispatch) -> Result<Launched> {
    match cuda_kernel(recorded)? {
        CudaKernel::Compiled { .. } => Ok(Launched::Ours),
        CudaKernel::Library(call) => {
            let (shape, pointers) = gemm_operands(recorded, *call)?;
            let kernels = state.blas()?.plan(shape, pointers)?.kernels();
            Ok(Launched::Library { kernels })
        }
        CudaKernel::Collective(_) => Ok(Launched::Library { kernels: 1 }),
    }
}

/// How a kernel of ours may be launched relative to the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// After the previous kernel has finished (eager submissions: their
    /// event pairs must bracket each kernel alone).
    Serial,
    /// Early where the kernel allows it (graph capture): it may start while
    /// the previous kernel runs and waits for it inside
    /// (programmatic dependent launch).
    EarlyWhereAllowed,
}

/// Launches one recorded dispatch on the stream (context bound by the
/// caller; a library call's plan made by [`prepare`] beforehand when
/// capturing).
pub(crate) fn launch(state: &DeviceState, recorded: &RecordedDispatch, order: Order) -> Result<Launched> {
    match cuda_kernel(recorded)? {
        CudaKernel::Compiled {
            function,
            early_launch,
        } => {
            let early = *early_launch && order == Order::EarlyWhereAllowed;
            launch_compiled(state, recorded, function, early)?;
            Ok(Launched::Ours)
        }
        CudaKernel::Library(call) => {
            let (shape, pointers) = gemm_operands(recorded, *call)?;
            let blas = state.blas()?;
            let plan = blas.plan(shape, pointers)?;
            blas.launch(&plan, pointers, state.stream().cu_stream())?;
            Ok(Launched::Library {
                kernels: plan.kernels(),
            })
        }
        CudaKernel::Collective(collective) => {
            collective.launch(recorded)?;
            // NCCL launches one kernel per collective on the stream.
            Ok(Launched::Library { kernels: 1 })
        }
    }
}

/// A buffer argument's device address.
fn address(recorded: &RecordedDispatch, index: usize) -> Result<u64> {
    let kernel = recorded.dispatch.kernel();
    let problem = |problem: &str| Error::KernelArgument {
        kernel: kernel.name().to_string(),
        index,
        problem: problem.to_string(),
    };
    match recorded.dispatch.args().get(index) {
        Some(Arg::Buffer { buffer, .. }) => match buffer.memory().as_any().downcast_ref::<CudaMemory>() {
            Some(memory) => Ok(memory.base_address() as u64 + buffer.byte_offset() as u64),
            None => Err(problem("a CPU buffer cannot be passed to a CUDA kernel")),
        },
        _ => Err(problem("expected a buffer here")),
    }
}

/// A u32 scalar argument.
fn scalar(recorded: &RecordedDispatch, index: usize) -> Result<u32> {
    match recorded.dispatch.args().get(index) {
        Some(Arg::Scalar(Param::U32(value))) => Ok(*value),
        _ => Err(Error::KernelArgument {
            kernel: recorded.dispatch.kernel().name().to_string(),
            index,
            problem: "expected a u32 scalar here".into(),
        }),
    }
}

/// A GEMM dispatch's shape and pointers, where its declaration (`gemm`) puts them.
fn gemm_operands(recorded: &RecordedDispatch, call: LibraryCall) -> Result<(GemmShape, GemmPointers)> {
    let LibraryCall::Gemm { dtype } = call;
    let shape = GemmShape {
        dtype,
        m: scalar(recorded, gemm::M)?,
        n: scalar(recorded, gemm::N)?,
        k: scalar(recorded, gemm::K)?,
    };
    let pointers = GemmPointers {
        weight: address(recorded, gemm::WEIGHT)?,
        x: address(recorded, gemm::X)?,
        out: address(recorded, gemm::OUT)?,
    };
    Ok((shape, pointers))
}

/// One 8-byte cell per argument of `recorded`, in order: a buffer's device
/// pointer at the view's byte offset, a scalar's 4 or 8 bytes. The driver
/// copies them at launch.
fn argument_cells(recorded: &RecordedDispatch) -> Result<Vec<[u8; 8]>> {
    let dispatch = &recorded.dispatch;
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
                        kernel: dispatch.kernel().name().to_string(),
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
    Ok(cells)
}

/// Launches our kernel `function` with the dispatch's arguments, `early`
/// (programmatic dependent launch) or after the previous kernel.
fn launch_compiled(
    state: &DeviceState,
    recorded: &RecordedDispatch,
    function: &CudaFunction,
    early: bool,
) -> Result<()> {
    let dispatch = &recorded.dispatch;
    let mut cells = argument_cells(recorded)?;
    let mut pointers: Vec<*mut c_void> = cells
        .iter_mut()
        .map(|cell| cell.as_mut_ptr() as *mut c_void)
        .collect();
    let grid = dispatch.grid;
    let stream = state.stream().cu_stream();
    // SAFETY (both launches): the kernel's parameters are, in order, the
    // dispatch's arguments: each buffer a device pointer (8 bytes) into
    // memory of this context that outlives the launch (the encoder holds the
    // buffers until the submission is committed and the driver orders frees
    // after it), each scalar its 4- or 8-byte value; the op that built the
    // dispatch declares the same order as its `.cu` signature (and tests
    // check each against its CPU reference). `pointers` point into `cells`,
    // alive and unmoved until the launch returns. An early launch is asked
    // for only for kernels whose first statement waits for the previous kernel.
    let launched = if early {
        // SAFETY: see above.
        unsafe { launch_early(function, grid, stream, &mut pointers) }
    } else {
        // SAFETY: see above.
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
                stream,
                &mut pointers,
            )
        }
    };
    launched.map_err(|source| Error::Cuda {
        operation: if early {
            format!("launching `{}` early", dispatch.kernel().name())
        } else {
            format!("launching `{}`", dispatch.kernel().name())
        },
        source,
    })
}

/// `cuLaunchKernelEx` with programmatic stream serialization allowed: the
/// kernel may start while the previous one on `stream` finishes.
///
/// # Safety
/// `pointers` are `function`'s parameters in order, each pointing at its
/// value, as `cuLaunchKernel` takes them; `stream` is a stream of the
/// current context, which `function` belongs to.
unsafe fn launch_early(
    function: &CudaFunction,
    grid: LaunchGrid,
    stream: sys::CUstream,
    pointers: &mut [*mut c_void],
) -> std::result::Result<(), DriverError> {
    let mut attribute = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue {
            programmaticStreamSerializationAllowed: 1,
        },
    };
    let config = sys::CUlaunchConfig {
        gridDimX: grid.blocks[0],
        gridDimY: grid.blocks[1],
        gridDimZ: grid.blocks[2],
        blockDimX: grid.threads_per_block[0],
        blockDimY: grid.threads_per_block[1],
        blockDimZ: grid.threads_per_block[2],
        sharedMemBytes: grid.shared_memory_bytes,
        hStream: stream,
        attrs: &mut attribute,
        numAttrs: 1,
    };
    // SAFETY: per the contract; `config` and `attribute` outlive the call,
    // which copies them.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            function.cu_function(),
            pointers.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
}
