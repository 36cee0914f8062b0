//! Running a submission on the CUDA stream: each dispatch is one kernel
//! launch with its arguments passed in order (device pointers at the view's
//! byte offset, then scalars), barriers cost nothing on an in-order stream,
//! and a graph replay is one `cuGraphLaunch` of the graph captured from its
//! recorded launches on first use. Event pairs time the submission and,
//! in eager mode, each dispatch.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::device::{CudaShared, Event, GraphExec, PendingDispatch, PendingSubmission, driver_error};
use crate::error::{Error, Result};
use crate::runtime::buffer::Memory;
use crate::runtime::encoder::{Command, GraphNode, RecordedDispatch};
use crate::runtime::{Arg, Graph, Param};

/// Launches one recorded dispatch on the stream.
fn launch(shared: &CudaShared, recorded: &RecordedDispatch) -> Result<()> {
    let dispatch = &recorded.dispatch;
    let kernel = dispatch.kernel();
    let function =
        kernel.cuda_function().ok_or_else(|| Error::KernelMissing {
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
            Arg::Buffer { buffer, .. } => match &buffer.memory {
                Memory::Cuda(memory) => {
                    let address = memory.base_address() as u64 + buffer.byte_offset() as u64;
                    cell.copy_from_slice(&address.to_le_bytes());
                }
                Memory::Cpu(_) => {
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
            function.function.cu_function(),
            (grid.blocks[0], grid.blocks[1], grid.blocks[2]),
            (
                grid.threads_per_block[0],
                grid.threads_per_block[1],
                grid.threads_per_block[2],
            ),
            grid.shared_memory_bytes,
            shared.cu_stream(),
            &mut pointers,
        )
    }
    .map_err(|source| Error::Cuda {
        operation: format!("launching `{}`", kernel.name()),
        source,
    })
}

/// The graph's dispatches captured from the stream into a CUDA graph.
fn capture(shared: &Arc<CudaShared>, graph: &Graph) -> Result<GraphExec> {
    let stream = shared.cu_stream();
    // SAFETY: our own (non-default) stream; capture ends below on every path.
    unsafe {
        result::stream::begin_capture(
            stream,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    }
    .map_err(driver_error("beginning a stream capture"))?;
    let launched = graph.nodes().iter().try_for_each(|node| match node {
        GraphNode::Dispatch { recorded, .. } => launch(shared, recorded),
        GraphNode::Barrier { .. } => Ok(()),
    });
    // SAFETY: the capture begun above.
    let cu_graph =
        unsafe { result::stream::end_capture(stream) }.map_err(driver_error("ending a stream capture"))?;
    if let Err(error) = launched {
        if !cu_graph.is_null() {
            // SAFETY: the graph just captured is ours and not instantiated.
            unsafe {
                let _ = result::graph::destroy(cu_graph);
            }
        }
        return Err(error);
    }
    // SAFETY: a graph just captured.
    let exec = unsafe { result::graph::instantiate(cu_graph, sys::CUgraphInstantiate_flags(0)) }
        .map_err(driver_error("instantiating a graph"));
    match exec {
        Ok(exec) => Ok(GraphExec {
            graph: cu_graph,
            exec,
            shared: shared.clone(),
        }),
        Err(error) => {
            // SAFETY: the graph is ours and not instantiated.
            unsafe {
                let _ = result::graph::destroy(cu_graph);
            }
            Err(error)
        }
    }
}

/// Whether `commands` replay graphs and launch nothing directly.
fn replays_only(commands: &[Command]) -> bool {
    commands
        .iter()
        .any(|command| matches!(command, Command::Replay(_)))
        && !commands
            .iter()
            .any(|command| matches!(command, Command::Dispatch(_)))
}

/// Enqueues `commands` on the stream; their timings are resolved at the next host wait.
pub(crate) fn execute(shared: &Arc<CudaShared>, commands: &[Command], label: &Arc<str>) -> Result<()> {
    shared.bind()?;
    let _exclusive = crate::sync::lock(&shared.submitting);
    let token = shared.profiler.current_token();
    let _label_range = super::nvtx::Range::push(label);
    let mut scope_range: Option<(Arc<str>, super::nvtx::Range)> = None;
    let profiler = &shared.profiler;
    let time_submission = profiler.times_submissions();
    let time_dispatches = profiler.times_dispatches();
    let cupti = shared.cupti.is_some() && time_dispatches;
    // Only graph replays are held: measured, a replay's first kernel started
    // about a launch's host time after the start event anyway, while holding
    // eager launches would stop the device from running them as they come.
    // Released when this function returns, on every path (see `gate.rs`).
    // Decided only when the gate could apply: profiling off pays nothing here.
    let hold = match &shared.gate {
        Some(gate) if cupti && time_submission && replays_only(commands) => {
            Some(gate.hold(shared.cu_stream())?)
        }
        _ => None,
    };
    let enqueue_began = if time_submission { profiler.now_ns() } else { 0 };
    let start = if time_submission {
        Some(shared.record_event()?)
    } else {
        None
    };
    let mut timed = Vec::new();
    let mut index = 0u32;
    let expect = |recorded: &RecordedDispatch, index: u32, events: Option<(Event, Event)>| PendingDispatch {
        index,
        meta: recorded.meta.clone(),
        events,
    };
    for command in commands {
        match command {
            Command::Dispatch(recorded) => {
                if super::nvtx::active()
                    && scope_range
                        .as_ref()
                        .is_none_or(|(scope, _)| *scope != recorded.meta.scope)
                {
                    // Close the previous scope's range before opening the next.
                    drop(scope_range.take());
                    scope_range = Some((
                        recorded.meta.scope.clone(),
                        super::nvtx::Range::push(&recorded.meta.scope),
                    ));
                }
                let before = if time_dispatches && !cupti {
                    Some(shared.record_event()?)
                } else {
                    None
                };
                launch(shared, recorded)?;
                if let Some(before) = before {
                    timed.push(expect(recorded, index, Some((before, shared.record_event()?))));
                } else if cupti {
                    timed.push(expect(recorded, index, None));
                }
                index += 1;
            }
            // An in-order stream already orders every launch after the last.
            Command::Barrier => {}
            Command::Replay(graph) => {
                if time_dispatches && !cupti {
                    profiler.warn_once(
                        "graph-dispatch-timing",
                        "kernelscope: dispatches inside CUDA graph replays are not timed without CUPTI; submission times include them",
                    );
                }
                let exec = match graph.cuda.exec.get() {
                    Some(exec) => exec,
                    None => {
                        let built = capture(shared, graph)?;
                        let _ = graph.cuda.exec.set(built);
                        graph.cuda.exec.get().expect("just set")
                    }
                };
                // SAFETY: an instantiated graph of this context, on our stream.
                unsafe { result::graph::launch(exec.exec, shared.cu_stream()) }
                    .map_err(driver_error("launching a graph"))?;
                for node in graph.nodes() {
                    if let GraphNode::Dispatch { recorded, .. } = node {
                        if cupti {
                            timed.push(expect(recorded, index, None));
                        }
                        index += 1;
                    }
                }
            }
        }
    }
    if let Some(start) = start {
        let end = shared.record_event()?;
        shared.push_pending(PendingSubmission {
            label: label.clone(),
            token,
            submission: profiler.next_submission_id(),
            dispatches: index,
            host_enqueue_ns: profiler.now_ns().saturating_sub(enqueue_began),
            gated: hold.is_some(),
            start,
            end,
            timed_dispatches: timed,
        });
    }
    drop(hold);
    Ok(())
}
