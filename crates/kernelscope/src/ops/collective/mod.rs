//! Collectives as ops: all-reduce (sum, in place) and all-gather between the
//! ranks of a tensor-parallel group, each one dispatch tagged `AllReduce` or
//! `AllGather`. Their kernels come from the rank's
//! [`Communicator`](crate::runtime::Communicator) (NCCL on CUDA, an
//! in-process exchange on the CPU) rather than from the registry. The bytes
//! they declare are the bus bytes NCCL's own benchmarks count (what each
//! rank sends and receives over its links), so a collective's GB/s column
//! is its bus bandwidth, comparable across group sizes.

mod reference;

pub use reference::{all_gather, all_reduce_sum};

use super::Arguments;
use crate::error::{Error, Result};
use crate::runtime::collective::group::{all_gather, all_reduce};
use crate::runtime::{Buffer, Collective, CommandEncoder, Communicator, DType, Dispatch, Kernel, OpKind};

/// Bus bytes of an all-reduce of `bytes` over `ranks`: 2(n-1)/n of the data
/// (NCCL's `busBw` convention).
pub fn all_reduce_bus_bytes(bytes: u64, ranks: usize) -> u64 {
    let ranks = ranks.max(1) as u64;
    2 * bytes * (ranks - 1) / ranks
}

/// Bus bytes of an all-gather whose output is `bytes` over `ranks`: (n-1)/n
/// of the output.
pub fn all_gather_bus_bytes(bytes: u64, ranks: usize) -> u64 {
    let ranks = ranks.max(1) as u64;
    bytes * (ranks - 1) / ranks
}

/// Checks that the op's communicator belongs to the encoder's device.
fn check_device(op: &str, communicator: &Communicator, encoder: &CommandEncoder) -> Result<()> {
    if !communicator.device().same_device(encoder.device()) {
        return Err(Error::DeviceMismatch {
            context: format!("{op} of rank {}", communicator.rank()),
            buffer_device: communicator.device().name().to_string(),
            device: encoder.device().name().to_string(),
        });
    }
    Ok(())
}

/// All-reduce (sum) of f32 buffers, in place.
#[derive(Clone, Debug)]
pub struct AllReduce {
    communicator: Communicator,
    kernel: Kernel,
}

impl AllReduce {
    /// The op for `communicator`'s rank.
    pub fn new(communicator: &Communicator) -> Result<Self> {
        Ok(AllReduce {
            communicator: communicator.clone(),
            kernel: communicator.kernel(Collective::AllReduceSum, DType::F32)?,
        })
    }

    /// Encodes `buffer = Σ over ranks of each rank's buffer`. Every rank
    /// must encode the same collectives of the same sizes in the same order.
    pub fn encode(&self, encoder: &mut CommandEncoder, buffer: &Buffer) -> Result<()> {
        check_device("all-reduce", &self.communicator, encoder)?;
        encoder.dispatch(self.dispatch(buffer)?)
    }

    /// The dispatch [`encode`](Self::encode) encodes.
    pub(crate) fn dispatch(&self, buffer: &Buffer) -> Result<Dispatch> {
        super::expect("all-reduce", "buffer", buffer, DType::F32, &[buffer.len()])?;
        let bytes = buffer.byte_len() as u64;
        Ok(Arguments::new(all_reduce::ARGUMENTS)
            .buffer(all_reduce::BUFFER, buffer)
            .dispatch(&self.kernel)?
            // Bus bytes, a link's rate rather than memory's: declared as read.
            .cost(all_reduce_bus_bytes(bytes, self.communicator.ranks()), 0, 0)
            .op_kind(OpKind::AllReduce))
    }
}

/// All-gather of f32 buffers: the ranks' inputs, one after another.
#[derive(Clone, Debug)]
pub struct AllGather {
    communicator: Communicator,
    kernel: Kernel,
}

impl AllGather {
    /// The op for `communicator`'s rank.
    pub fn new(communicator: &Communicator) -> Result<Self> {
        Ok(AllGather {
            communicator: communicator.clone(),
            kernel: communicator.kernel(Collective::AllGather, DType::F32)?,
        })
    }

    /// Encodes `output = input of rank 0, input of rank 1, …`; `output`
    /// holds ranks × `input.len()` values.
    pub fn encode(&self, encoder: &mut CommandEncoder, input: &Buffer, output: &Buffer) -> Result<()> {
        check_device("all-gather", &self.communicator, encoder)?;
        encoder.dispatch(self.dispatch(input, output)?)
    }

    /// The dispatch [`encode`](Self::encode) encodes.
    pub(crate) fn dispatch(&self, input: &Buffer, output: &Buffer) -> Result<Dispatch> {
        let ranks = self.communicator.ranks();
        super::expect("all-gather", "input", input, DType::F32, &[input.len()])?;
        super::expect("all-gather", "output", output, DType::F32, &[ranks * input.len()])?;
        let bytes = output.byte_len() as u64;
        Ok(Arguments::new(all_gather::ARGUMENTS)
            .buffer(all_gather::INPUT, input)
            .buffer(all_gather::OUTPUT, output)
            .dispatch(&self.kernel)?
            .cost(all_gather_bus_bytes(bytes, ranks), 0, 0)
            .op_kind(OpKind::AllGather))
    }
}
