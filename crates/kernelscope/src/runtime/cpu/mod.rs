//! The CPU backend: the reference every GPU kernel is checked against, and
//! the default where no GPU is present. Its queue runs the committed
//! dispatches in order, one at a time under the device's execution lock, on
//! a thread of rayon's pool (the committing thread waits), so the kernels'
//! parallel loops find the pool's other threads awake.
//! Barriers order nothing on an in-order queue, but are still counted where
//! the encoder issues them, so counters read the same on every backend.
//!
//! Kernels reach memory only through `KernelArgs`: shared slices for what
//! they read, exclusive ones for what they write, each output handed out once
//! per run. The encoder refuses a dispatch whose written range overlaps
//! another of its arguments, and host copies take the execution lock too;
//! together that makes the exclusive slices sound.

pub(super) mod kernel_args;
mod memory;
mod shared;

use std::sync::Arc;

use half::{bf16, f16};

pub use kernel_args::{CpuKernelFn, KernelArgs};
use memory::CpuMemory;
pub(crate) use memory::host_memory_info;
use shared::CpuShared;

use super::DType;
use super::backend::{Backend, Capabilities, KernelSources};
use super::command::Command;
use super::kernel::LoadedKernel;
use super::memory::DeviceMemory;
use super::memory::MemoryInfo;
use crate::error::{Error, Remedy, Result};
use crate::profile::{
    DispatchTiming, ProfileLevel, Profiler, SubmissionRecord, TimingMechanism, TimingMethod, TokenSelection,
};

/// A CPU device handle (cheap to clone).
#[derive(Clone, Debug)]
pub struct CpuDevice {
    shared: Arc<CpuShared>,
}

impl CpuDevice {
    pub(crate) fn new(
        level: ProfileLevel,
        selection: TokenSelection,
        dispatch_timing_unsupported: Option<String>,
        check_finite: bool,
    ) -> Self {
        let dispatch_timing = match dispatch_timing_unsupported {
            None => DispatchTiming::supported(TimingMechanism::HostClock),
            Some(reason) => DispatchTiming::Unsupported { reason },
        };
        CpuDevice {
            shared: Arc::new(CpuShared::new(
                Profiler::new(level, selection, dispatch_timing),
                check_finite,
            )),
        }
    }

    /// Marks the device as a rank of a collective group: from now on its
    /// queue runs on the committing thread (see `execute`).
    pub(crate) fn join_group(&self) {
        self.shared.mark_grouped();
    }

    /// Runs `commands` in order, timing them as the profiler asks; the
    /// caller holds the device's execution lock.
    fn run(&self, commands: &[Command], label: &Arc<str>) -> Result<()> {
        let profiler = self.shared.profiler();
        let time_submission = profiler.times_submissions();
        let time_dispatches = profiler.times_dispatches();
        let submission = if time_submission {
            profiler.next_submission_id()
        } else {
            0
        };
        let start_ns = if time_submission { profiler.now_ns() } else { 0 };
        let mut records = Vec::new();
        let mut index = 0u32;
        // Barriers order nothing on this in-order queue; replays run their
        // recorded dispatches in order.
        let dispatches = commands.iter().flat_map(
            |command| -> Box<dyn Iterator<Item = (&Arc<super::command::RecordedDispatch>, Option<u64>)>> {
                match command {
                    Command::Dispatch(recorded) => Box::new(std::iter::once((recorded, None))),
                    Command::Barrier => Box::new(std::iter::empty()),
                    Command::Replay { recording, context } => {
                        Box::new(recording.dispatches().map(move |recorded| (recorded, *context)))
                    }
                }
            },
        );
        for (recorded, context) in dispatches {
            let dispatch_start = if time_dispatches { profiler.now_ns() } else { 0 };
            let kernel = recorded.dispatch.kernel();
            let function = kernel.loaded::<CpuKernelFn>().ok_or_else(|| Error::KernelMissing {
                name: kernel.name().to_string(),
                backend: "cpu",
                workaround: "this kernel handle was made for another backend; get it from the registry for this device".into(),
                remedies: &[],
            })?;
            function(&KernelArgs::new(kernel.name(), recorded.dispatch.args()))?;
            if self.shared.checks_finite() {
                let views = KernelArgs::new(kernel.name(), recorded.dispatch.args());
                crate::runtime::finite::check_outputs(
                    kernel.name(),
                    &recorded.meta.scope,
                    recorded.dispatch.args(),
                    |argument, buffer| {
                        Ok(match buffer.dtype() {
                            DType::BF16 => views
                                .output::<bf16>(argument)?
                                .iter()
                                .map(|value| value.to_f32())
                                .collect(),
                            DType::F16 => views
                                .output::<f16>(argument)?
                                .iter()
                                .map(|value| value.to_f32())
                                .collect(),
                            _ => views.output::<f32>(argument)?.to_vec(),
                        })
                    },
                )?;
            }
            if time_dispatches {
                let end = profiler.now_ns();
                records.push(recorded.meta.at_context(context).record(
                    label,
                    submission,
                    index,
                    None,
                    dispatch_start,
                    end,
                ));
            }
            index += 1;
        }
        if time_submission {
            let record = SubmissionRecord {
                label: label.clone(),
                submission,
                stream: 0,
                token: None,
                start_ns,
                end_ns: profiler.now_ns(),
                dispatches: index,
                enqueue: None,
                idle: None,
            };
            profiler.record_submission(record, records);
        }
        Ok(())
    }
}

impl Backend for CpuDevice {
    fn kind(&self) -> &'static str {
        "cpu"
    }

    fn name(&self) -> &str {
        self.shared.name()
    }

    fn identity(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    fn profiler(&self) -> &Profiler {
        self.shared.profiler()
    }

    fn capabilities(&self) -> Capabilities {
        let dispatch_timing = self.shared.profiler().dispatch_timing().clone();
        Capabilities {
            submission_timing: TimingMethod::current(TimingMechanism::HostClock),
            dispatch_timing_in_graphs: dispatch_timing.is_supported(),
            dispatch_timing,
            nvtx: None,
            graph_launch: false,
            maps_files_in_place: true,
            early_launch_in_graphs: false,
            bulk_copies: false,
            persistent_kernels: false,
            multiprocessors: None,
            shared_memory_per_block: None,
        }
    }

    fn driver_version(&self) -> Option<String> {
        None
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        host_memory_info()
    }

    fn alloc(&self, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceMemory>> {
        let byte_len = shape.iter().product::<usize>() * dtype.size_in_bytes();
        let memory =
            CpuMemory::zeroed(self.shared.clone(), byte_len).ok_or_else(|| Error::AllocationTooLarge {
                dtype,
                shape: shape.to_vec(),
            })?;
        Ok(Arc::new(memory))
    }

    /// Reads the mapped bytes in place: no copy, read-only.
    fn map_file(
        &self,
        map: Arc<memmap2::Mmap>,
        byte_offset: usize,
        byte_len: usize,
    ) -> Result<Arc<dyn DeviceMemory>> {
        Ok(Arc::new(CpuMemory::mapped(
            self.shared.clone(),
            map,
            byte_offset,
            byte_len,
        )))
    }

    fn load_kernel(&self, name: &str, sources: &KernelSources) -> Result<LoadedKernel> {
        let function = sources.cpu.clone().ok_or_else(|| Error::KernelMissing {
            name: name.to_string(),
            backend: "cpu",
            workaround: "none was registered with KernelRegistry::register_cpu".into(),
            remedies: &[Remedy::OtherDevice { device: "cuda" }],
        })?;
        Ok(Arc::new(function))
    }

    /// Runs the commands on a thread of rayon's pool, so that the kernels'
    /// parallel loops start from inside the pool: between two kernels the
    /// other threads are still spinning for work rather than asleep, and no
    /// kernel pays to wake them (a Q8_0 decode of llama-3.2-1b on two cores
    /// switched contexts 61,000 times before, 7,000 after). A rank of a
    /// collective group stays on the caller's thread: see
    /// [`CpuShared`]'s `grouped`.
    ///
    /// The committing thread takes the execution lock and holds it while
    /// the pool runs the commands: a pool thread waiting inside one
    /// kernel's parallel loop may pick up another thread's whole
    /// submission and run it there, which must then not wait for a lock
    /// that thread already holds (`tests/cpu_queue_threads.rs` hung so).
    fn execute(&self, commands: &[Command], label: &Arc<str>) -> Result<()> {
        let _exclusive = self.shared.lock_execution();
        if self.shared.is_grouped() || rayon::current_thread_index().is_some() {
            self.run(commands, label)
        } else {
            rayon::scope(|_| self.run(commands, label))
        }
    }

    /// The queue runs at commit; nothing is left to wait for.
    fn wait(&self) -> Result<()> {
        Ok(())
    }
}
