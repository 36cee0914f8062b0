//! Collectives between GPUs through NCCL, loaded at run time like the other
//! CUDA libraries: one communicator per device, made together by
//! `ncclCommInitAll` (one process, one thread per rank afterwards), or one
//! per process by `ncclCommInitRank` (ranks as processes), each
//! collective launched on its rank's stream so it is captured into that
//! rank's CUDA graph like our kernels. NVLink multicast (NVLS) is left to
//! NCCL's environment (`NCCL_NVLS_ENABLE`): we never ask for it. Opened from
//! the devices' states, and handing each rank's collectives to launches and
//! graphs as [`RankCollective`]s, so nothing below the device depends on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::nccl::{result as nccl, sys as nccl_sys};

use super::modules::{CommunicatorHold, CudaKernel, RankCollective};
use super::state::DeviceState;
use crate::error::{Error, NcclFailure, Result};
use crate::runtime::collective::group::{Collective, GroupBackend, all_gather, all_reduce};
use crate::runtime::command::RecordedDispatch;
use crate::runtime::kernel::LoadedKernel;
use crate::runtime::memory::DeviceMemory;
use crate::runtime::{Arg, DType};

mod connect;

/// A communicator pointer; NCCL allows a communicator to be used from the
/// thread of its rank and aborted from any.
struct Comm(nccl_sys::ncclComm_t);

// SAFETY: the pointer is only used under `NcclGroup::comms`' lock.
unsafe impl Send for Comm {}

/// The communicators of one group, one per rank (`None` once aborted or
/// destroyed).
pub(crate) struct NcclGroup {
    comms: Vec<Mutex<Option<Comm>>>,
    states: Vec<Arc<DeviceState>>,
    /// The GPUs' ordinals, rank by rank, to make the communicators again.
    ordinals: Vec<i32>,
    /// The group's rank of `comms[0]`: 0 where this process holds every
    /// rank; its own rank where each rank is a process (`comms` then holds
    /// one communicator, made with `ncclCommInitRank`, which cannot be made
    /// again without rank 0's new unique id).
    first_rank: usize,
    /// Ranks of the group in all, those of other processes included.
    ranks: usize,
    version: String,
    link: String,
    aborted: Mutex<Option<String>>,
    /// How many times the communicators were made again after an abort: a
    /// graph captured with older ones must not replay.
    generation: AtomicU64,
}

fn problem(collective: &str, rank: usize, problem: String) -> Error {
    Error::Collective {
        collective: collective.into(),
        rank,
        problem,
    }
}

/// Turns NCCL's status into our error: `operation` of `collective` failed on `rank`.
fn nccl_error(
    collective: &str,
    rank: usize,
    operation: impl Into<String>,
) -> impl FnOnce(nccl::NcclError) -> Error {
    let (collective, operation) = (collective.to_string(), operation.into());
    move |source| Error::Nccl {
        collective,
        rank,
        operation,
        source: NcclFailure(source),
    }
}

fn nccl_type(collective: Collective, dtype: DType, rank: usize) -> Result<nccl_sys::ncclDataType_t> {
    use nccl_sys::ncclDataType_t as T;
    match dtype {
        DType::F32 => Ok(T::ncclFloat32),
        DType::F16 => Ok(T::ncclFloat16),
        DType::BF16 => Ok(T::ncclBfloat16),
        other => Err(problem(
            collective.name(),
            rank,
            format!("NCCL collectives here take f32, f16 or bf16, not {other}"),
        )),
    }
}

/// A buffer argument's device address and element count.
fn operand(recorded: &RecordedDispatch, index: usize) -> Result<(u64, usize)> {
    let kernel = recorded.dispatch.kernel();
    match recorded.dispatch.args().get(index) {
        Some(Arg::Buffer { buffer, .. }) => match buffer
            .memory()
            .as_any()
            .downcast_ref::<super::memory::CudaMemory>()
        {
            Some(memory) => Ok((
                memory.base_address() as u64 + buffer.byte_offset() as u64,
                buffer.len(),
            )),
            None => Err(Error::KernelArgument {
                kernel: kernel.name().to_string(),
                index,
                problem: "a CPU buffer cannot be passed to NCCL".into(),
            }),
        },
        _ => Err(Error::KernelArgument {
            kernel: kernel.name().to_string(),
            index,
            problem: "expected a buffer here".into(),
        }),
    }
}

/// Aborts `comm` on a thread of its own. ncclCommAbort first tells the
/// communicator's kernels and proxy to quit (which is what wakes the peers
/// of a failed rank), then waits until every CUDA graph that captured one of
/// its collectives is destroyed; those graphs belong to the ranks' executors,
/// which drop them only after every rank has returned, so waiting here, on
/// the failing rank's thread, would never end. The thread ends once they are
/// gone (or with the process).
fn abort_in_background(comm: Comm) {
    let spawned = std::thread::Builder::new()
        .name("kscope-nccl-abort".into())
        .spawn(move || abort_now(comm));
    // Without a thread the communicator is leaked rather than aborted on
    // this one (which could wait forever); its peers then fail by the
    // group's aborted flag at their next launch.
    drop(spawned);
}

/// Aborts `comm` on this thread (see [`abort_in_background`]).
fn abort_now(comm: Comm) {
    // SAFETY: taken out of its slot under the lock, so no launch (eager, or
    // a graph replay holding it: `hold_for_replay`) uses it again;
    // ncclCommAbort ends its pending operations.
    let _ = unsafe { nccl::comm_abort(comm.0) };
}

/// A rank's communicator held alive (not aborted, not remade) while a graph
/// that captured it is launched.
pub(crate) struct CommHold<'a> {
    _comm: std::sync::MutexGuard<'a, Option<Comm>>,
}

impl CommunicatorHold for CommHold<'_> {}

/// One rank's collective of one kind on one element type: the kernel a
/// dispatch of it carries.
struct NcclRank {
    group: Arc<NcclGroup>,
    rank: usize,
    collective: Collective,
    dtype: DType,
}

impl RankCollective for NcclRank {
    fn launch(&self, recorded: &RecordedDispatch) -> Result<()> {
        self.group
            .launch(self.rank, self.collective, self.dtype, recorded)
    }

    fn communicator(&self) -> (usize, usize) {
        (Arc::as_ptr(&self.group) as usize, self.rank)
    }

    fn generation(&self) -> u64 {
        self.group.generation()
    }

    fn hold_for_replay(&self, captured: u64) -> Result<Box<dyn CommunicatorHold + '_>> {
        Ok(Box::new(self.group.hold_for_replay(self.rank, captured)?))
    }
}

impl NcclGroup {
    /// Where the group's rank `rank` sits in this process's communicators.
    fn slot(&self, rank: usize) -> Result<usize> {
        rank.checked_sub(self.first_rank)
            .filter(|&slot| slot < self.comms.len())
            .ok_or_else(|| {
                problem(
                    "group",
                    rank,
                    format!(
                        "this process holds ranks {} to {} of {}, not rank {rank}",
                        self.first_rank,
                        self.first_rank + self.comms.len() - 1,
                        self.ranks
                    ),
                )
            })
    }

    /// How many times the communicators were made again; a graph records it
    /// when it captures a collective.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Holds `rank`'s communicator for a graph launch: an error instead when
    /// the group was aborted, or remade since the graph captured it
    /// (`captured`, the generation then), since the graph's NCCL kernels
    /// would run on communicators that no longer exist.
    pub(crate) fn hold_for_replay(&self, rank: usize, captured: u64) -> Result<CommHold<'_>> {
        let comm = crate::sync::lock(&self.comms[self.slot(rank)?]);
        if comm.is_none() {
            let reason = crate::sync::lock(&self.aborted).clone().unwrap_or_default();
            return Err(Error::CollectiveAborted { rank, reason });
        }
        if self.generation() != captured {
            return Err(Error::CollectiveAborted {
                rank,
                reason:
                    "the graph was captured before the group was rebuilt after an abort; capture it again"
                        .into(),
            });
        }
        Ok(CommHold { _comm: comm })
    }

    /// Launches `collective` of `rank` with the dispatch's buffers on the
    /// rank's stream (context bound by the caller).
    pub(crate) fn launch(
        &self,
        rank: usize,
        collective: Collective,
        dtype: DType,
        recorded: &RecordedDispatch,
    ) -> Result<()> {
        let slot = self.slot(rank)?;
        let comm = crate::sync::lock(&self.comms[slot]);
        let Some(Comm(comm)) = comm.as_ref() else {
            let reason = crate::sync::lock(&self.aborted).clone().unwrap_or_default();
            return Err(Error::CollectiveAborted { rank, reason });
        };
        let data_type = nccl_type(collective, dtype, rank)?;
        let stream = self.states[slot].stream().cu_stream() as nccl_sys::cudaStream_t;
        // SAFETY: the addresses are of live allocations on this rank's
        // device (the encoder holds the buffers until the submission is
        // enqueued), the counts are the buffers' lengths in `dtype` elements
        // (the op checked the gather's output holds ranks x input), and the
        // communicator is alive under its lock.
        let launched = match collective {
            Collective::AllReduceSum => {
                let (address, count) = operand(recorded, all_reduce::BUFFER)?;
                // SAFETY: see above; the one buffer is reduced in place.
                unsafe {
                    nccl::all_reduce(
                        address as *const _,
                        address as *mut _,
                        count,
                        data_type,
                        nccl_sys::ncclRedOp_t::ncclSum,
                        *comm,
                        stream,
                    )
                }
            }
            Collective::AllGather => {
                let (input, count) = operand(recorded, all_gather::INPUT)?;
                let (output, _) = operand(recorded, all_gather::OUTPUT)?;
                // SAFETY: see above.
                unsafe {
                    nccl::all_gather(
                        input as *const _,
                        output as *mut _,
                        count,
                        data_type,
                        *comm,
                        stream,
                    )
                }
            }
        };
        launched.map(|_| ()).map_err(|error| {
            let call = match collective {
                Collective::AllReduceSum => "ncclAllReduce",
                Collective::AllGather => "ncclAllGather",
            };
            nccl_error(collective.name(), rank, call)(error)
        })
    }
}

impl GroupBackend for Arc<NcclGroup> {
    fn library(&self) -> String {
        self.version.clone()
    }

    fn link(&self) -> String {
        self.link.clone()
    }

    fn abort(&self, reason: &str) {
        {
            let mut aborted = crate::sync::lock(&self.aborted);
            if aborted.is_none() {
                *aborted = Some(reason.to_string());
            }
        }
        for comm in &self.comms {
            if let Some(comm) = crate::sync::lock(comm).take() {
                abort_in_background(comm);
            }
        }
    }

    fn aborted(&self) -> Option<String> {
        crate::sync::lock(&self.aborted).clone()
    }

    fn rebuild(&self) -> Result<()> {
        let mut aborted = crate::sync::lock(&self.aborted);
        if aborted.is_none() {
            return Ok(());
        }
        if self.comms.len() < self.ranks {
            // ncclCommInitRank needs a new unique id from rank 0's process,
            // which no channel carries once the ranks have met.
            return Err(problem(
                "group",
                self.first_rank,
                format!(
                    "a group of processes cannot be rebuilt once aborted ({}); start the ranks again",
                    aborted.as_deref().unwrap_or_default()
                ),
            ));
        }
        let fresh = NcclGroup::make_comms(&self.states, &self.ordinals)?;
        for (slot, comm) in self.comms.iter().zip(fresh) {
            let mut slot = crate::sync::lock(slot);
            if let Some(stale) = slot.take() {
                // None should be left (abort takes every one).
                abort_in_background(stale);
            }
            *slot = Some(Comm(comm));
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        *aborted = None;
        Ok(())
    }

    fn kernel(&self, rank: usize, collective: Collective, dtype: DType) -> Result<LoadedKernel> {
        nccl_type(collective, dtype, rank)?;
        self.slot(rank)?;
        Ok(Arc::new(CudaKernel::Collective(Arc::new(NcclRank {
            group: self.clone(),
            rank,
            collective,
            dtype,
        }))))
    }
}

impl Drop for NcclGroup {
    fn drop(&mut self) {
        for comm in &self.comms {
            if let Some(Comm(comm)) = crate::sync::lock(comm).take() {
                // SAFETY: the last handle is gone, so nothing launches on it.
                let _ = unsafe { nccl::comm_destroy(comm) };
            }
        }
    }
}
