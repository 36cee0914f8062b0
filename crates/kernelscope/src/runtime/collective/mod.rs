//! Collectives between the devices of a tensor-parallel group: all-reduce
//! (sum) and all-gather, each a dispatch like any kernel, so it is encoded,
//! captured into graphs, counted and timed like one. A [`Communicator`] is
//! one rank's handle on its group: CPU devices exchange through memory
//! in-process (so tests check the sharding logic exactly, with no GPU), CUDA
//! devices through NCCL (loaded at run time like the other CUDA libraries),
//! launched on each device's stream.
//!
//! Every rank runs its own thread and issues the same collectives in the
//! same order (the engine's ranks run the same program). A rank that fails
//! must [`abort`](Communicator::abort) the group, or its peers would wait for
//! it forever; an aborted group fails every pending and later collective.

pub(crate) mod group;
mod in_process;
pub(crate) mod launcher;
mod processes;
pub(crate) mod rendezvous;

use std::sync::Arc;

use super::{DType, Device, Kernel};
use crate::error::{Error, Result};

pub use group::Collective;
pub(crate) use group::GroupBackend;
use in_process::InProcessGroup;
use launcher::LaunchedRank;
use processes::ProcessGroup;
use rendezvous::Rendezvous;

/// One rank's handle on a group of devices that run collectives together.
#[derive(Clone)]
pub struct Communicator {
    rank: usize,
    ranks: usize,
    device: Device,
    group: Arc<dyn GroupBackend>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Communicator(rank {} of {} on {})",
            self.rank,
            self.ranks,
            self.device.name()
        )
    }
}

impl Communicator {
    /// One communicator per device, rank `i` on `devices[i]`: all CPU
    /// devices (an in-process exchange) or all CUDA devices, each a
    /// different GPU (NCCL). Mixed backends and repeated GPUs are refused.
    pub fn group(devices: &[Device]) -> Result<Vec<Communicator>> {
        let refuse = |problem: String| Error::Collective {
            collective: "group".into(),
            rank: 0,
            problem,
        };
        if devices.is_empty() {
            return Err(refuse("a group needs at least one device".into()));
        }
        for (index, device) in devices.iter().enumerate() {
            if device.backend() != devices[0].backend() {
                return Err(refuse(format!(
                    "rank {index} is on {} but rank 0 on {}: every rank of a group must be on the same backend",
                    device.name(),
                    devices[0].name()
                )));
            }
            // Two handles opened on one GPU are different devices to us
            // but one GPU to NCCL (which may hang on it): compare ordinals.
            let same = |other: &Device| match (other, device) {
                (Device::Cuda(a), Device::Cuda(b)) => a.ordinal() == b.ordinal(),
                _ => other.same_device(device),
            };
            if let Some(earlier) = devices[..index].iter().position(same) {
                return Err(refuse(format!(
                    "ranks {earlier} and {index} are the same device ({}); give each rank its own",
                    device.name()
                )));
            }
        }
        let group: Arc<dyn GroupBackend> = match &devices[0] {
            Device::Cpu(_) => {
                for device in devices {
                    if let Device::Cpu(cpu) = device {
                        cpu.join_group();
                    }
                }
                Arc::new(Arc::new(InProcessGroup::new(devices.len())))
            }
            Device::Cuda(_) => {
                let cuda: Vec<&super::CudaDevice> = devices
                    .iter()
                    .filter_map(|device| match device {
                        Device::Cuda(cuda) => Some(cuda),
                        Device::Cpu(_) => None,
                    })
                    .collect();
                super::cuda::open_collectives(&cuda)?
            }
        };
        Ok(devices
            .iter()
            .enumerate()
            .map(|(rank, device)| Communicator {
                rank,
                ranks: devices.len(),
                device: device.clone(),
                group: group.clone(),
            })
            .collect())
    }

    /// This process's communicator in a group of processes a launcher
    /// started (`place`, read from its variables), on `device`: the ranks
    /// meet at `place.rendezvous`, every rank saying what it runs
    /// (`description`, a model's hash: ranks that differ are refused,
    /// naming the rank), and wait at most `timeout` for each other. CPU
    /// ranks then exchange over the meeting's connections (sums in rank
    /// order: the bits of the same ranks as threads of one process); CUDA
    /// ranks through NCCL, from the unique id rank 0 sends in the meeting.
    pub fn join(
        device: &Device,
        place: &LaunchedRank,
        description: &str,
        timeout: std::time::Duration,
    ) -> Result<Communicator> {
        let rendezvous = Rendezvous {
            address: place.rendezvous.clone(),
            rank: place.rank,
            world_size: place.world_size,
            timeout,
        };
        let group: Arc<dyn GroupBackend> = match device {
            Device::Cpu(cpu) => {
                cpu.join_group();
                Arc::new(Arc::new(ProcessGroup::connect(&rendezvous, description)?))
            }
            Device::Cuda(cuda) => {
                // Rank 0's unique id reaches every rank through the meeting;
                // NCCL connects them and carries every collective after.
                // Every rank loads NCCL before meeting: a rank that cannot
                // would leave the others inside ncclCommInitRank.
                super::cuda::nccl_library()?;
                let id = if place.rank == 0 {
                    Some(super::cuda::nccl_unique_id()?)
                } else {
                    None
                };
                let id = rendezvous.meet(description, id.as_deref())?;
                super::cuda::join_collectives(cuda, &id, place.rank, place.world_size)?
            }
        };
        Ok(Communicator {
            rank: place.rank,
            ranks: place.world_size,
            device: device.clone(),
            group,
        })
    }

    /// This rank's number, `0..ranks()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the group has.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The library the group uses and its version (`NCCL 2.27.5`, or
    /// `in-process` for CPU devices).
    pub fn library(&self) -> String {
        self.group.library()
    }

    /// How the ranks are linked (`NVLink`, `PCIe`, `shared memory`), as far
    /// as this process can tell.
    pub fn link(&self) -> String {
        self.group.link()
    }

    /// Fails every pending and later collective of every rank of the group
    /// with [`Error::CollectiveAborted`] carrying `reason`: a rank that fails
    /// calls this so its peers stop waiting for it.
    pub fn abort(&self, reason: &str) {
        self.group.abort(reason);
    }

    /// Why the group was aborted, if it was and has not been rebuilt since:
    /// a rank that read a result after an abort checks this before trusting
    /// it (an aborted collective ends early, its buffer unreduced).
    pub fn aborted(&self) -> Option<String> {
        self.group.aborted()
    }

    /// Makes an aborted group usable again, for every rank: new NCCL
    /// communicators (a graph captured before then refuses to replay; capture
    /// again), or a cleared exchange between CPU devices. Nothing when the
    /// group is not aborted. Call only when no rank is inside a collective.
    pub fn rebuild(&self) -> Result<()> {
        self.group.rebuild()
    }

    /// The kernel of `collective` on `dtype` elements for this rank, to put
    /// in a [`Dispatch`](super::Dispatch) on this rank's device.
    pub fn kernel(&self, collective: Collective, dtype: DType) -> Result<Kernel> {
        let loaded = self.group.kernel(self.rank, collective, dtype)?;
        // A collective reads the dtype it exchanges, as an op's kernel
        // declares at registration.
        Ok(Kernel::new(
            &collective.kernel_name(dtype),
            Some(Arc::from(dtype.name())),
            loaded,
        ))
    }
}
