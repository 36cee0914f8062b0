//! Making a group's communicators: NCCL found and its version read, one
//! communicator per GPU of this process made together (`ncclCommInitAll`)
//! or one per process from rank 0's unique id (`ncclCommInitRank`), and
//! every rank connected by one warm-up before any graph captures a
//! collective.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use cudarc::nccl::{result as nccl, sys as nccl_sys};

use super::super::driver::{allocation_error, driver_error};
use super::super::state::DeviceState;
use super::{Comm, NcclGroup, nccl_error, problem};
use crate::error::{Error, Result};
use crate::runtime::collective::group::{Collective, GroupBackend};

impl NcclGroup {
    /// Opens NCCL communicators for the devices of `states`, rank `i` on `states[i]`'s.
    pub(crate) fn open(states: Vec<Arc<DeviceState>>) -> Result<Arc<dyn GroupBackend>> {
        let version = Self::loaded_version()?;
        let ordinals: Vec<i32> = states
            .iter()
            .map(|state| state.stream().context().ordinal() as i32)
            .collect();
        let comms = Self::make_comms(&states, &ordinals)?;
        Ok(Arc::new(Arc::new(NcclGroup {
            comms: comms
                .into_iter()
                .map(|comm| Mutex::new(Some(Comm(comm))))
                .collect(),
            link: link_between(&states),
            first_rank: 0,
            ranks: states.len(),
            states,
            ordinals,
            version,
            aborted: Mutex::new(None),
            generation: AtomicU64::new(0),
        })))
    }

    /// The NCCL library's version, or where it could not be loaded from.
    pub(crate) fn loaded_version() -> Result<String> {
        // SAFETY: only tries to load the library by its known names.
        if !unsafe { nccl_sys::is_culib_present() } {
            return Err(Error::NcclNotFound {
                tried: cudarc::get_lib_name_candidates("nccl"),
            });
        }
        nccl::get_nccl_version()
            .map(|code| format!("NCCL {}.{}.{}", code / 10000, code % 10000 / 100, code % 100))
            .map_err(nccl_error("group", 0, "ncclGetVersion"))
    }

    /// A new NCCL unique id (rank 0 of a group of processes makes it; the
    /// rendezvous carries its bytes to every other rank).
    pub(crate) fn unique_id() -> Result<Vec<u8>> {
        Self::loaded_version()?;
        let id = nccl::get_uniqueid().map_err(nccl_error("group", 0, "ncclGetUniqueId"))?;
        Ok(id.internal.iter().map(|&byte| byte as u8).collect())
    }

    /// This process's communicator as rank `rank` of `ranks` processes, on
    /// `state`'s GPU, from rank 0's unique id `id` (`ncclCommInitRank`, which
    /// waits until every rank has called it), connected by one warm-up.
    pub(crate) fn open_rank(
        state: Arc<DeviceState>,
        id: &[u8],
        rank: usize,
        ranks: usize,
    ) -> Result<Arc<dyn GroupBackend>> {
        let version = Self::loaded_version()?;
        let mut unique = nccl_sys::ncclUniqueId { internal: [0; 128] };
        if id.len() != unique.internal.len() {
            return Err(problem(
                "group",
                rank,
                format!(
                    "rank 0 sent {} bytes where NCCL's unique id has {}",
                    id.len(),
                    unique.internal.len()
                ),
            ));
        }
        for (slot, &byte) in unique.internal.iter_mut().zip(id) {
            *slot = byte as _;
        }
        state.bind()?;
        let ordinal = state.stream().context().ordinal();
        let mut comm: nccl_sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is written by NCCL; the id's bytes are rank 0's
        // ncclGetUniqueId; the current context is this rank's device's primary
        // context, which its stream belongs to.
        unsafe { nccl::comm_init_rank(&mut comm, ranks as i32, unique, rank as i32) }.map_err(nccl_error(
            "group",
            rank,
            format!("ncclCommInitRank as rank {rank} of {ranks} processes on GPU cuda:{ordinal} (each rank needs a GPU of its own; the launcher's LOCAL_RANK picks it)"),
        ))?;
        let states = vec![state];
        if let Err(error) =
            warm_up(std::slice::from_ref(&comm), &states, rank, ranks).and_then(|()| states[0].bind())
        {
            // SAFETY: made above, used by nothing else (aborted: see make_comms).
            let _ = unsafe { nccl::comm_abort(comm) };
            return Err(error);
        }
        let ordinals = vec![ordinal as i32];
        Ok(Arc::new(Arc::new(NcclGroup {
            comms: vec![Mutex::new(Some(Comm(comm)))],
            link: "between processes (NCCL's choice of transport)".into(),
            first_rank: rank,
            ranks,
            states,
            ordinals,
            version,
            aborted: Mutex::new(None),
            generation: AtomicU64::new(0),
        })))
    }

    /// Makes one communicator per GPU of `ordinals` and connects them (see
    /// [`warm_up`]); on failure, none is left behind.
    pub(super) fn make_comms(
        states: &[Arc<DeviceState>],
        ordinals: &[i32],
    ) -> Result<Vec<nccl_sys::ncclComm_t>> {
        let mut comms: Vec<nccl_sys::ncclComm_t> = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has room for one communicator per ordinal; NCCL makes
        // them on the devices' primary contexts, which are the contexts our
        // streams belong to.
        unsafe { nccl::comm_init_all(comms.as_mut_ptr(), ordinals.len() as i32, ordinals.as_ptr()) }
            .map_err(nccl_error(
                "group",
                0,
                format!("ncclCommInitAll over GPUs {ordinals:?}"),
            ))?;
        // ncclCommInitAll and the warm-up switch this thread's current device.
        let ready = warm_up(&comms, states, 0, ordinals.len()).and_then(|()| states[0].bind());
        if let Err(error) = ready {
            for comm in &comms {
                // SAFETY: made above and used by nothing else. Aborted, not
                // destroyed: a failed warm-up may have left collectives pending,
                // which ncclCommDestroy would wait for.
                let _ = unsafe { nccl::comm_abort(*comm) };
            }
            return Err(error);
        }
        Ok(comms)
    }
}

/// Runs one all-reduce and one all-gather on every rank, from this thread as
/// one NCCL group, and waits for them: NCCL connects the ranks lazily, at a
/// communicator's first collective, with allocations that a CUDA graph
/// capture cannot contain (the capture is invalidated). After this, a
/// collective's first appearance may be inside a capture.
fn warm_up(
    comms: &[nccl_sys::ncclComm_t],
    states: &[Arc<DeviceState>],
    first_rank: usize,
    group_size: usize,
) -> Result<()> {
    use cudarc::driver::result as driver;
    const ELEMENTS: usize = 1 << 18;
    let ranks = comms.len();
    // The gather receives every rank's part, those of other processes too.
    let bytes = (1 + group_size) * ELEMENTS * 4;
    let mut buffers = Vec::with_capacity(ranks);
    let failed = |what: &str| format!("warming up NCCL ({what})");
    // Side streams: CUPTI's records of the device's own stream must be our
    // dispatches' only.
    let mut streams = Vec::with_capacity(ranks);
    let result = (|| {
        for state in states {
            state.bind()?;
            streams.push(
                state
                    .stream()
                    .context()
                    .new_stream()
                    .map_err(driver_error(&failed("a side stream")))?,
            );
            // SAFETY: a plain allocation on the bound context, freed below.
            let buffer = unsafe { driver::malloc_sync(bytes) }
                .map_err(allocation_error(&failed("allocating"), bytes))?;
            buffers.push(buffer);
        }
        for collective in [Collective::AllReduceSum, Collective::AllGather] {
            nccl::group_start().map_err(nccl_error("group", 0, failed("ncclGroupStart")))?;
            for (rank, comm) in comms.iter().enumerate() {
                let stream = streams[rank].cu_stream() as nccl_sys::cudaStream_t;
                let buffer = buffers[rank];
                // SAFETY: each buffer holds (1 + group_size) × ELEMENTS f32 on its
                // rank's device: the reduction works in place on the first
                // ELEMENTS, the gather sends those and receives after them.
                let launched = unsafe {
                    match collective {
                        Collective::AllReduceSum => nccl::all_reduce(
                            buffer as *const _,
                            buffer as *mut _,
                            ELEMENTS,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            nccl_sys::ncclRedOp_t::ncclSum,
                            *comm,
                            stream,
                        ),
                        Collective::AllGather => nccl::all_gather(
                            buffer as *const _,
                            (buffer + (ELEMENTS * 4) as u64) as *mut _,
                            ELEMENTS,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            *comm,
                            stream,
                        ),
                    }
                };
                launched.map_err(nccl_error("group", first_rank + rank, failed(collective.name())))?;
            }
            nccl::group_end().map_err(nccl_error("group", 0, failed("ncclGroupEnd")))?;
        }
        for (state, stream) in states.iter().zip(&streams) {
            state.bind()?;
            stream.synchronize().map_err(driver_error(&failed("waiting")))?;
        }
        Ok(())
    })();
    for (state, buffer) in states.iter().zip(buffers) {
        let _ = state.bind();
        // SAFETY: allocated above; the streams that used it were synchronised
        // (or failed, and the buffer is abandoned to the driver's teardown).
        let _ = unsafe { driver::free_sync(buffer) };
    }
    result
}

/// How the GPUs reach each other: peer to peer (NVLink where native atomics
/// work across the pair, as they do over NVLink and not over PCIe) or
/// through the host.
fn link_between(states: &[Arc<DeviceState>]) -> String {
    use cudarc::driver::sys;
    if states.len() < 2 {
        return "none (one rank)".into();
    }
    let (first, second) = (
        states[0].stream().context().cu_device(),
        states[1].stream().context().cu_device(),
    );
    let attribute = |kind: sys::CUdevice_P2PAttribute| {
        let mut value = 0i32;
        // SAFETY: both are valid device handles; `value` outlives the call.
        let result = unsafe { sys::cuDeviceGetP2PAttribute(&mut value, kind, first, second) };
        (result == sys::CUresult::CUDA_SUCCESS).then_some(value)
    };
    match (
        attribute(sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED),
        attribute(sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED),
    ) {
        (Some(1), Some(1)) => "peer to peer, native atomics (NVLink)".into(),
        (Some(1), _) => "peer to peer (PCIe)".into(),
        (Some(_), _) => "through host memory (no peer access)".into(),
        (None, _) => "unknown".into(),
    }
}
