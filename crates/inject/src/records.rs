//! CUPTI's activity buffers: lent to CUPTI from a pool, and, when CUPTI
//! hands one back full of records (kernels, copies, sets, API calls), turned into kernelscope-trace frames
//! and written to the process's file in one go.
//!
//! Uses `sink`, `api_calls` and `locking`; `collection` hands its two
//! callbacks to CUPTI, and `exit` reads how many records CUPTI dropped.

use std::ffi::CStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::cupti::{result as cupti, sys};
use cudarc::driver::sys as driver;
use kernelscope_trace::{Kernel, Memcpy, Memset};

use crate::locking::lock;

/// Bytes of one buffer: small enough that the periodic flush hands over
/// records soon, large enough to hold a decode step's kernels.
const BUFFER_BYTES: usize = 1 << 20;

/// The buffers, process-wide: CUPTI's callbacks carry no pointer of ours.
struct Buffers {
    /// Buffers CUPTI gave back, lent again (allocating inside a launch
    /// would add to what is measured).
    spare: Mutex<Vec<usize>>,
    /// Records CUPTI said it dropped.
    dropped: AtomicU32,
}

static BUFFERS: Buffers = Buffers {
    spare: Mutex::new(Vec::new()),
    dropped: AtomicU32::new(0),
};

/// Records CUPTI reported dropped so far.
pub(crate) fn dropped() -> u32 {
    BUFFERS.dropped.load(Ordering::Relaxed)
}

pub(crate) unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let reused = lock(&BUFFERS.spare).pop();
    // 8-byte aligned, as CUPTI requires; returned to the pool in `buffer_completed`.
    let pointer = reused.unwrap_or_else(|| {
        let words: Box<[u64]> = vec![0u64; BUFFER_BYTES / 8].into_boxed_slice();
        Box::into_raw(words) as *mut u8 as usize
    });
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = pointer as *mut u8;
        *size = BUFFER_BYTES;
        *max_records = 0;
    }
}

pub(crate) unsafe extern "C" fn buffer_completed(
    context: driver::CUcontext,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid_size: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let mut sink = crate::sink::sink();
        let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
        // SAFETY: `buffer` is one of ours holding `valid_size` bytes of
        // records CUPTI wrote; each record is read per its declared kind.
        unsafe {
            while cupti::activity::get_next_record(buffer, valid_size, &mut record).is_ok() {
                let Some(writer) = sink.as_mut() else { break };
                let written = match (*record).kind {
                    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL => {
                        let kernel = &*(record as *const sys::CUpti_ActivityKernel10);
                        if !complete(kernel.start, kernel.end) {
                            continue;
                        }
                        let name = if kernel.name.is_null() {
                            String::new()
                        } else {
                            CStr::from_ptr(kernel.name).to_string_lossy().into_owned()
                        };
                        writer
                            .text(&name)
                            .and_then(|name| writer.record(&kernel_record(kernel, name)))
                    }
                    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_GRAPH_TRACE => {
                        let graph = &*(record as *const sys::CUpti_ActivityGraphTrace2);
                        if !complete(graph.start, graph.end) {
                            continue;
                        }
                        writer
                            .text(&kernelscope_trace::whole_graph_name(graph.graphId))
                            .and_then(|name| writer.record(&whole_graph_record(graph, name)))
                    }
                    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY => {
                        let copy = &*(record as *const sys::CUpti_ActivityMemcpy6);
                        if !complete(copy.start, copy.end) {
                            continue;
                        }
                        writer.record(&Memcpy {
                            start_ns: copy.start,
                            end_ns: copy.end,
                            bytes: copy.bytes,
                            correlation: copy.correlationId,
                            copy_kind: u32::from(copy.copyKind),
                            device: copy.deviceId,
                            context: copy.contextId,
                            stream: copy.streamId,
                            graph: copy.graphId,
                        })
                    }
                    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET => {
                        let set = &*(record as *const sys::CUpti_ActivityMemset4);
                        if !complete(set.start, set.end) {
                            continue;
                        }
                        writer.record(&Memset {
                            start_ns: set.start,
                            end_ns: set.end,
                            bytes: set.bytes,
                            correlation: set.correlationId,
                            value: set.value,
                            device: set.deviceId,
                            context: set.contextId,
                            stream: set.streamId,
                            graph: set.graphId,
                        })
                    }
                    kind @ (sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME
                    | sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER) => {
                        let driver = kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER;
                        let call = &*(record as *const sys::CUpti_ActivityAPI);
                        crate::api_calls::api_call_of(call, driver)
                            .map_or(Ok(()), |call| writer.record(&call))
                    }
                    _ => Ok(()),
                };
                if let Err(error) = written {
                    eprintln!("kscope profile: writing records failed, recording stops: {error}");
                    *sink = None;
                }
            }
            // Not while holding the file: CUPTI may hold its own locks here.
            drop(sink);
            let mut dropped = 0usize;
            if sys::cuptiActivityGetNumDroppedRecords(context, stream, &mut dropped)
                .result()
                .is_ok()
            {
                BUFFERS.dropped.fetch_add(dropped as u32, Ordering::Relaxed);
            }
        }
    });
    // Every buffer is BUFFER_BYTES long (ours); keep it for the next request.
    lock(&BUFFERS.spare).push(buffer as usize);
}

/// Whether a record's work ended before it was handed over: a forced
/// flush hands over records of work still running, without its times.
fn complete(start_ns: u64, end_ns: u64) -> bool {
    start_ns != 0 && end_ns >= start_ns
}

/// A kernel record of CUPTI's as a trace frame, its name sent as `name`.
fn kernel_record(kernel: &sys::CUpti_ActivityKernel10, name: u32) -> Kernel {
    let positive = |value: i32| value.max(0) as u32;
    Kernel {
        start_ns: kernel.start,
        end_ns: kernel.end,
        graph_node: kernel.graphNodeId,
        correlation: kernel.correlationId,
        name,
        device: kernel.deviceId,
        context: kernel.contextId,
        stream: kernel.streamId,
        graph: kernel.graphId,
        grid: [kernel.gridX, kernel.gridY, kernel.gridZ].map(positive),
        block: [kernel.blockX, kernel.blockY, kernel.blockZ].map(positive),
        registers: u32::from(kernel.registersPerThread),
        shared_bytes: positive(kernel.staticSharedMemory) + positive(kernel.dynamicSharedMemory),
    }
}

/// A whole graph launch's execution as a kernel record named by
/// `whole_graph_name`: no node, grid or block. CUPTI gives the device and
/// context of its first node, or `i32::MAX` where the graph began on the
/// host; then those of its last node stand in.
fn whole_graph_record(graph: &sys::CUpti_ActivityGraphTrace2, name: u32) -> Kernel {
    const ON_THE_HOST: u32 = i32::MAX as u32;
    let first_or_last = |first: u32, last: u32| if first == ON_THE_HOST { last } else { first };
    Kernel {
        start_ns: graph.start,
        end_ns: graph.end,
        correlation: graph.correlationId,
        name,
        device: first_or_last(graph.deviceId, graph.endDeviceId),
        context: first_or_last(graph.contextId, graph.endContextId),
        stream: graph.streamId,
        graph: graph.graphId,
        ..Kernel::default()
    }
}
