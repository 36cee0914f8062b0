//! Running a submission on the CUDA stream: each dispatch is one kernel
//! launch (`launch.rs`), barriers cost nothing on an in-order stream, and a
//! graph replay is one graph launch (`graphs.rs`). Event pairs time the
//! submission and, in eager mode, each dispatch; CUPTI times dispatches in
//! both when it is on. The times are resolved at the next host wait.

use std::sync::Arc;

use super::driver::Event;
use super::gate::{HOLD_LIMIT, Hold};
use super::graphs::{ensure_captured, launch_recording, mark_outran_gate};
use super::launch::{Launched, Order, launch};
use super::state::DeviceState;
use super::timing::{PendingDispatch, PendingSubmission};
use crate::error::Result;
use crate::runtime::command::{Command, RecordedDispatch, Recording};

/// Whether `commands` replay graphs and launch nothing directly.
fn replays_only(commands: &[Command]) -> bool {
    commands
        .iter()
        .any(|command| matches!(command, Command::Replay { .. }))
        && !commands
            .iter()
            .any(|command| matches!(command, Command::Dispatch(_)))
}

/// What this submission times, read once from the profiler.
#[derive(Clone, Copy)]
struct Timing {
    /// An event pair around the whole submission.
    submission: bool,
    /// Each dispatch: by CUPTI when `cupti`, else by an event pair around
    /// each eager launch (graph replays' dispatches then go untimed).
    dispatches: bool,
    cupti: bool,
}

/// The records a submission's dispatches will have, numbered in stream
/// order: a library call timed by CUPTI makes one per kernel it launched.
#[derive(Default)]
struct Expected {
    timed: Vec<PendingDispatch>,
    /// The next record's number; at the end, how many there are.
    index: u32,
}

impl Expected {
    /// A dispatch timed by the event pair around its eager launch.
    fn timed_by_events(&mut self, recorded: &RecordedDispatch, events: (Event, Event)) {
        let mut meta = recorded.meta.clone();
        number_launch(&mut meta);
        self.timed.push(PendingDispatch {
            index: self.index,
            meta,
            events: Some(events),
            library: false,
        });
        self.index += 1;
    }

    /// The CUPTI records a dispatch's launch will produce: one for our
    /// kernel; one per library kernel, the declared cost on the first (the
    /// op's bytes and flops are counted once, whatever the library splits).
    /// A replay's records take their cost at the replay's context.
    fn timed_by_cupti(&mut self, recorded: &RecordedDispatch, launched: Launched, context: Option<u64>) {
        for kernel in 0..launched.records() {
            let mut meta = recorded.meta.at_context(context);
            if kernel == 0 {
                number_launch(&mut meta);
            }
            if kernel > 0 {
                meta.bytes = 0;
                meta.bytes_written = 0;
                meta.flops = 0;
            }
            self.timed.push(PendingDispatch {
                index: self.index,
                meta,
                events: None,
                library: matches!(launched, Launched::Library { .. }),
            });
            self.index += 1;
        }
    }

    /// A dispatch that is counted but not timed (its launch still takes
    /// the next number of its stamps' ring, which the kernel advances).
    fn untimed(&mut self, recorded: &RecordedDispatch) {
        if let Some(in_kernel) = &recorded.meta.in_kernel {
            in_kernel.plan.next_launch();
        }
        self.index += 1;
    }
}

/// Gives a launch of a kernel that stamps its steps the next launch number
/// of its ring: the kernel counts its launches in the ring, in stream
/// order, and so does this, called once for every launch enqueued.
fn number_launch(meta: &mut crate::profile::DispatchMeta) {
    if let Some(in_kernel) = &mut meta.in_kernel {
        in_kernel.launch = in_kernel.plan.next_launch();
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
    let timing = Timing {
        submission: profiler.times_submissions(),
        dispatches: profiler.times_dispatches(),
        cupti: state.uses_cupti() && profiler.times_dispatches(),
    };
    // Under a token selection CUPTI collects during timed tokens only.
    if state.uses_cupti() && !profiler.token_selection().is_all() {
        state.want_records(timing.cupti)?;
    }
    // Released when this function returns, on every path (see `gate.rs`).
    let hold = capture_then_hold(state, commands, timing)?;
    let enqueue_began = if timing.submission { profiler.now_ns() } else { 0 };
    let start = if timing.submission {
        Some(stream.record_event()?)
    } else {
        None
    };
    let mut expected = Expected::default();
    for command in commands {
        match command {
            Command::Dispatch(recorded) => {
                enter_scope(&mut scope_range, recorded);
                enqueue_dispatch(state, recorded, timing, &mut expected)?;
            }
            // An in-order stream already orders every launch after the last.
            Command::Barrier => {}
            Command::Replay { recording, context } => {
                enqueue_replay(state, recording, *context, timing, &mut expected)?;
            }
        }
    }
    let end = match start {
        Some(_) => Some(stream.record_event()?),
        None => None,
    };
    let held_throughout = release(state, commands, hold)?;
    if let (Some(start), Some(end)) = (start, end) {
        state.push_pending(PendingSubmission {
            label: label.clone(),
            token,
            submission: profiler.next_submission_id(),
            dispatches: expected.index,
            host_enqueue_ns: profiler.now_ns().saturating_sub(enqueue_began),
            gated: held_throughout,
            start,
            end,
            timed_dispatches: expected.timed,
        });
    }
    Ok(())
}

/// Captures the graphs `commands` replay, then holds the stream at the gate
/// when the submission is one whose start the gate applies to. Graphs are
/// captured (and library plans made) first: making a plan may load the
/// library's kernels, which waits for the device, and a held stream would
/// never get there.
fn capture_then_hold<'a>(
    state: &'a Arc<DeviceState>,
    commands: &[Command],
    timing: Timing,
) -> Result<Option<Hold<'a>>> {
    let mut holdable = true;
    for command in commands {
        if let Command::Replay { recording, .. } = command {
            holdable &= ensure_captured(state, recording)?;
        }
    }
    // Only graph replays are held: measured, a replay's first kernel started
    // about a launch's host time after the start event anyway, while holding
    // eager launches would stop the device from running them as they come.
    // Decided only when the gate could apply: profiling off pays nothing here.
    match state.gate() {
        Some(gate) if timing.cupti && timing.submission && holdable && replays_only(commands) => {
            Ok(Some(gate.hold(state.stream().cu_stream())?))
        }
        _ => Ok(None),
    }
}

/// Moves the NVTX scope range to `recorded`'s scope when it changes.
fn enter_scope(scope_range: &mut Option<(Arc<str>, super::nvtx::Range)>, recorded: &RecordedDispatch) {
    if super::nvtx::active()
        && scope_range
            .as_ref()
            .is_none_or(|(scope, _)| *scope != recorded.meta.scope)
    {
        // Close the previous scope's range before opening the next.
        drop(scope_range.take());
        *scope_range = Some((
            recorded.meta.scope.clone(),
            super::nvtx::Range::push(&recorded.meta.scope),
        ));
    }
}

/// Launches one eager dispatch, between an event pair when events time
/// dispatches, and expects its records.
fn enqueue_dispatch(
    state: &DeviceState,
    recorded: &RecordedDispatch,
    timing: Timing,
    expected: &mut Expected,
) -> Result<()> {
    let stream = state.stream();
    let before = if timing.dispatches && !timing.cupti {
        Some(stream.record_event()?)
    } else {
        None
    };
    let launched = launch(state, recorded, Order::Serial)?;
    if state.checks_finite() {
        check_finite(recorded)?;
    }
    if let Some(before) = before {
        expected.timed_by_events(recorded, (before, stream.record_event()?));
    } else if timing.cupti {
        expected.timed_by_cupti(recorded, launched, None);
    } else {
        expected.untimed(recorded);
    }
    Ok(())
}

/// Reads back the float outputs of `recorded`, which has been launched,
/// and refuses NaN or +infinity in them (`DeviceOptions::check_finite`).
fn check_finite(recorded: &RecordedDispatch) -> Result<()> {
    crate::runtime::finite::check_outputs(
        recorded.dispatch.kernel().name(),
        &recorded.meta.scope,
        recorded.dispatch.args(),
        |_, buffer| crate::runtime::finite::read_to_host(buffer),
    )
}

/// Launches a captured graph and expects its dispatches' records, costed at
/// the replay's `context`.
fn enqueue_replay(
    state: &Arc<DeviceState>,
    recording: &Recording,
    context: Option<u64>,
    timing: Timing,
    expected: &mut Expected,
) -> Result<()> {
    if timing.dispatches && !timing.cupti {
        state.profiler().warn_once(
            "graph-dispatch-timing",
            "kernelscope: dispatches inside CUDA graph replays are not timed without CUPTI; submission times include them",
        );
    }
    let launched = launch_recording(state, recording)?;
    if state.checks_finite() {
        // A graph runs whole: its outputs are checked after it, in launch
        // order, so a buffer a later node overwrote shows only its last
        // value. `kscope run --check-finite` runs eagerly for that reason.
        for recorded in recording.dispatches() {
            check_finite(recorded)?;
        }
    }
    for (recorded, &launched) in recording.dispatches().zip(launched) {
        if timing.cupti {
            expected.timed_by_cupti(recorded, launched, context);
        } else {
            expected.untimed(recorded);
        }
    }
    Ok(())
}

/// Everything is enqueued: lets the device go, and says whether it was held
/// throughout. A hold the watchdog had to release outran the gate; its
/// graphs are not held again.
fn release(state: &Arc<DeviceState>, commands: &[Command], hold: Option<Hold<'_>>) -> Result<bool> {
    let Some(hold) = hold else {
        return Ok(false);
    };
    let held_throughout = hold.release();
    if !held_throughout {
        for command in commands {
            if let Command::Replay { recording, .. } = command {
                mark_outran_gate(state, recording)?;
            }
        }
        state.profiler().warn_once(
            "gate-outran",
            &format!(
                "kernelscope: a graph launch needed more of the device's command queue than a stream held until the launch is enqueued leaves; it was let go after {} ms and that graph is no longer held (its submission time includes the host's enqueue)",
                HOLD_LIMIT.as_millis()
            ),
        );
    }
    Ok(held_throughout)
}
