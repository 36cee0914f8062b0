//! One dispatch as the encoder receives it: a kernel, its ordered arguments
//! (buffers with their access, and scalars), the launch grid for GPUs, and the
//! bytes and flops it moves for the roofline.

use std::sync::Arc;

use super::{Buffer, Kernel, MemRange, OpKind};
use crate::profile::{PhasePlan, PositionCost, Role, Roles};

/// How a kernel uses a buffer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only read.
    Read,
    /// Only written (its old content is not read).
    Write,
    /// Read and written in place.
    ReadWrite,
}

impl Access {
    /// Whether the kernel reads it.
    pub fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    /// Whether the kernel writes it.
    pub fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// A scalar kernel argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Param {
    /// `unsigned int`.
    U32(u32),
    /// `int`.
    I32(i32),
    /// `float`.
    F32(f32),
    /// `unsigned long long`.
    U64(u64),
}

impl From<u32> for Param {
    fn from(value: u32) -> Self {
        Param::U32(value)
    }
}
impl From<i32> for Param {
    fn from(value: i32) -> Self {
        Param::I32(value)
    }
}
impl From<f32> for Param {
    fn from(value: f32) -> Self {
        Param::F32(value)
    }
}
impl From<u64> for Param {
    fn from(value: u64) -> Self {
        Param::U64(value)
    }
}

/// One kernel argument, in the order the kernel declares them.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A buffer (or slice view) and how the kernel uses it.
    Buffer {
        /// The buffer.
        buffer: Buffer,
        /// Read, write or both.
        access: Access,
    },
    /// A scalar.
    Scalar(Param),
}

/// Grid geometry for GPU backends; the CPU backend ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchGrid {
    /// Blocks in x, y, z.
    pub blocks: [u32; 3],
    /// Threads per block in x, y, z.
    pub threads_per_block: [u32; 3],
    /// Dynamic shared memory per block in bytes.
    pub shared_memory_bytes: u32,
}

impl LaunchGrid {
    /// One thread per element, `threads` per block, for `elements` elements.
    pub fn linear(elements: usize, threads: u32) -> Self {
        let blocks = elements.div_ceil(threads as usize).max(1) as u32;
        LaunchGrid {
            blocks: [blocks, 1, 1],
            threads_per_block: [threads, 1, 1],
            shared_memory_bytes: 0,
        }
    }
}

impl Default for LaunchGrid {
    fn default() -> Self {
        LaunchGrid {
            blocks: [1, 1, 1],
            threads_per_block: [1, 1, 1],
            shared_memory_bytes: 0,
        }
    }
}

/// A dispatch under construction. Arguments are passed to the kernel in the
/// order they are added.
///
/// ```
/// # use kernelscope::{Device, DType, Dispatch, KernelRegistry, OpKind};
/// # let device = Device::cpu();
/// # let mut registry = KernelRegistry::new();
/// # registry.register_cpu("scale", |_| Ok(()));
/// # let kernel = registry.kernel(&device, "scale")?;
/// # let (x, y) = (device.alloc(DType::F32, &[8])?, device.alloc(DType::F32, &[8])?);
/// let dispatch = Dispatch::new(&kernel)
///     .read(&x)
///     .write(&y)
///     .param(2.0f32)
///     .cost(32, 32, 8)
///     .op_kind(OpKind::ElemMul);
/// # Ok::<(), kernelscope::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub(crate) kernel: Kernel,
    pub(crate) args: Vec<Arg>,
    pub(crate) grid: LaunchGrid,
    pub(crate) bytes: u64,
    pub(crate) bytes_written: u64,
    pub(crate) flops: u64,
    pub(crate) per_position: Option<PositionCost>,
    pub(crate) op_kind: Option<OpKind>,
    /// Roles the kernel plays whatever step it was encoded for.
    pub(crate) roles: Roles,
    /// The steps a persistent kernel runs inside the launch and where it
    /// stamps their boundaries, for the profile to split it by.
    pub(crate) phases: Option<Arc<PhasePlan>>,
}

impl Dispatch {
    /// A dispatch of `kernel` with no arguments yet.
    pub fn new(kernel: &Kernel) -> Self {
        Dispatch {
            kernel: kernel.clone(),
            args: Vec::with_capacity(4),
            grid: LaunchGrid::default(),
            bytes: 0,
            bytes_written: 0,
            flops: 0,
            per_position: None,
            op_kind: None,
            roles: Roles::NONE,
            phases: None,
        }
    }

    /// Adds a buffer the kernel only reads.
    pub fn read(self, buffer: &Buffer) -> Self {
        self.buffer(buffer, Access::Read)
    }

    /// Adds a buffer the kernel only writes.
    pub fn write(self, buffer: &Buffer) -> Self {
        self.buffer(buffer, Access::Write)
    }

    /// Adds a buffer the kernel updates in place.
    pub fn read_write(self, buffer: &Buffer) -> Self {
        self.buffer(buffer, Access::ReadWrite)
    }

    /// Adds a buffer with an explicit access.
    pub fn buffer(mut self, buffer: &Buffer, access: Access) -> Self {
        self.args.push(Arg::Buffer {
            buffer: buffer.clone(),
            access,
        });
        self
    }

    /// Adds a scalar argument.
    pub fn param(mut self, value: impl Into<Param>) -> Self {
        self.args.push(Arg::Scalar(value.into()));
        self
    }

    /// Sets the GPU launch grid.
    pub fn grid(mut self, grid: LaunchGrid) -> Self {
        self.grid = grid;
        self
    }

    /// Declares the bytes read, the bytes written and the flops done, for
    /// the roofline: the kernel's floor time is its reads at the device's
    /// read ceiling plus its writes at the write ceiling.
    pub fn cost(mut self, bytes_read: u64, bytes_written: u64, flops: u64) -> Self {
        self.bytes = bytes_read.saturating_add(bytes_written);
        self.bytes_written = bytes_written;
        self.flops = flops;
        self
    }

    /// Declares that the cost given to [`cost`](Self::cost) is that of
    /// `context` positions and grows by `bytes` read and `flops` per position:
    /// a kernel that reads its position from device memory (attention over
    /// the KV cache) does work that depends on it, and a graph captured at
    /// one position is replayed at others. A replay told its context
    /// ([`CommandEncoder::replay_at`](super::CommandEncoder::replay_at))
    /// records the cost at that context.
    pub fn cost_per_position(mut self, context: u64, bytes: u64, flops: u64) -> Self {
        self.per_position = Some(PositionCost {
            context,
            bytes,
            flops,
        });
        self
    }

    /// Declares a role the kernel plays whatever step it was encoded for
    /// (a kernel that quantizes activations: `Role::ActivationQuantization`),
    /// added to those the encoder gives it.
    pub fn role(mut self, role: Role) -> Self {
        self.roles = self.roles.with(role);
        self
    }

    /// Declares the steps the kernel runs inside the launch, each with its
    /// own roles and cost, and the ring it stamps their boundaries into:
    /// the profile records one dispatch per step, timed inside the kernel
    /// (a persistent kernel's launch would otherwise be one opaque row).
    pub fn phases(mut self, plan: Arc<PhasePlan>) -> Self {
        self.phases = Some(plan);
        self
    }

    /// Tags the dispatch with its op kind (overrides the encoder's pending one).
    pub fn op_kind(mut self, kind: OpKind) -> Self {
        self.op_kind = Some(kind);
        self
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The arguments, in order.
    pub fn args(&self) -> &[Arg] {
        &self.args
    }

    /// The byte ranges read and written, for [`MemRanges`](super::MemRanges).
    pub(crate) fn ranges(&self) -> (Vec<MemRange>, Vec<MemRange>) {
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        for arg in &self.args {
            if let Arg::Buffer { buffer, access } = arg {
                let range = buffer.address_range();
                if access.reads() {
                    reads.push(range);
                }
                if access.writes() {
                    writes.push(range);
                }
            }
        }
        (reads, writes)
    }
}
