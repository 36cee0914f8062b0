//! Running a submission on the CUDA stream: each dispatch is one kernel
//! launch (`launch.rs`), barriers cost nothing on an in-order stream, and a
//! graph replay is one graph launch (`graphs.rs`). Event pairs time the
//! submission and, in eager mode, each dispatch; CUPTI times dispatches in
//! both when it is on. The times are resolved at the next host wait.

use std::sync::Arc;

use super::driver::Event;
use super::gate::HOLD_LIMIT;
use super::graphs::{ensure_captured, launch_recording, mark_outran_gate};
use super::launch::{Launched, Order, launch};
use super::state::DeviceState;
use super::timing::{PendingDispatch, PendingSubmission};
use crate::error::Result;
use crate::runtime::command::{Command, RecordedDispatch};

/// Whether `commands` replay graphs and launch nothing directly.
fn replays_only(commands: &[Command]) -> bool {
    commands
        .iter()
        .any(|command| matches!(command, Command::Replay { .. }))
        && !commands
            .iter()
            .any(|command| matches!(command, Command::Dispatch(_)))
}

/// Queues the CUPTI records a dispatch's launch will produce: one for our
/// kernel; one per library kernel, the declared cost on the first (the
/// op's bytes and flops are counted once, whatever the library splits).
/// A replay's records take their cost at the replay's context.
fn expect_records(
    timed: &mut Vec<PendingDispatch>,
    index: &mut u32,
    recorded: &RecordedDispatch,
    launched: Launched,
    context: Option<u64>,
) {
    for kernel in 0..launched.records() {
        let mut meta = recorded.meta.at_context(context);
        if kernel > 0 {
            meta.bytes = 0;
            meta.flops = 0;
        }
        timed.push(PendingDispatch {
            index: *index,
            meta,
            events: None,
            library: matches!(launched, Launched::Library { .. }),
        });
        *index += 1;
    }
}

/// Enqueues `commands` on the stream; their timings are resolved at the next host wait.
pub(crate) fn execute(state: &Arc<DeviceState>, commands: &[Command], label: &Arc<str>) -> Result<()> {
    state.bind()?;
    let _exclusive = state.lock_submissions();
    let profiler = state.profiler();
    let stream = state.stream();
    let token = profiler.current_token();
    let _label_range = super::nvtx::Range::push(label);
    let mut scope_range: Option<(Arc<str>, super::nvtx::Range)> = None;
    let time_submission = profiler.times_submissions();
    let time_dispatches = profiler.times_dispatches();
    let cupti = state.uses_cupti() && time_dispatches;
    // Graphs are captured (and library plans made) before the stream is
    // held: making a plan may load the library's kernels, which waits for
    // the device, and a held stream would never get there.
    let mut holdable = true;
    for command in commands {
        if let Command::Replay { recording, .. } = command {
            holdable &= ensure_captured(state, recording)?;
        }
    }
    // Only graph replays are held: measured, a replay's first kernel started
    // about a launch's host time after the start event anyway, while holding
    // eager launches would stop the device from running them as they come.
    // Released when this function returns, on every path (see `gate.rs`).
    // Decided only when the gate could apply: profiling off pays nothing here.
    let hold = match state.gate() {
        Some(gate) if cupti && time_submission && holdable && replays_only(commands) => {
            Some(gate.hold(stream.cu_stream())?)
        }
        _ => None,
    };
    let enqueue_began = if time_submission { profiler.now_ns() } else { 0 };
    let start = if time_submission {
        Some(stream.record_event()?)
    } else {
        None
    };
    let mut timed = Vec::new();
    // Numbers the dispatch records: a library call timed by CUPTI makes one
    // per kernel it launched.
    let mut index = 0u32;
    let expect = |recorded: &RecordedDispatch, index: u32, events: Option<(Event, Event)>| PendingDispatch {
        index,
        meta: recorded.meta.clone(),
        events,
        library: false,
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
                    Some(stream.record_event()?)
                } else {
                    None
                };
                let launched = launch(state, recorded, Order::Serial)?;
                if let Some(before) = before {
                    timed.push(expect(recorded, index, Some((before, stream.record_event()?))));
                    index += 1;
                } else if cupti {
                    expect_records(&mut timed, &mut index, recorded, launched, None);
                } else {
                    index += 1;
                }
            }
            // An in-order stream already orders every launch after the last.
            Command::Barrier => {}
            Command::Replay {
                recording: graph,
                context,
            } => {
                if time_dispatches && !cupti {
                    profiler.warn_once(
                        "graph-dispatch-timing",
                        "kernelscope: dispatches inside CUDA graph replays are not timed without CUPTI; submission times include them",
                    );
                }
                let launched = launch_recording(state, graph)?;
                for (recorded, &launched) in graph.dispatches().zip(launched) {
                    if cupti {
                        expect_records(&mut timed, &mut index, recorded, launched, *context);
                    } else {
                        index += 1;
                    }
                }
            }
        }
    }
    let end = match start {
        Some(_) => Some(stream.record_event()?),
        None => None,
    };
    // Everything is enqueued: let the device go. A hold the watchdog had to
    // release outran the gate; its graphs are not held again.
    let held_throughout = match hold {
        Some(hold) => {
            let held_throughout = hold.release();
            if !held_throughout {
                for command in commands {
                    if let Command::Replay { recording, .. } = command {
                        mark_outran_gate(state, recording)?;
                    }
                }
                profiler.warn_once(
                    "gate-outran",
                    &format!(
                        "kernelscope: a graph launch needed more of the device's command queue than a stream held until the launch is enqueued leaves; it was let go after {} ms and that graph is no longer held (its submission time includes the host's enqueue)",
                        HOLD_LIMIT.as_millis()
                    ),
                );
            }
            held_throughout
        }
        None => false,
    };
    if let (Some(start), Some(end)) = (start, end) {
        state.push_pending(PendingSubmission {
            label: label.clone(),
            token,
            submission: profiler.next_submission_id(),
            dispatches: index,
            host_enqueue_ns: profiler.now_ns().saturating_sub(enqueue_began),
            gated: held_throughout,
            start,
            end,
            timed_dispatches: timed,
        });
    }
    Ok(())
}
