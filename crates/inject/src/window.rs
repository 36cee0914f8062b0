//! A window of steps (`kscope profile --step NAME --steps A..B`): CUPTI
//! collects nothing until the program opens its NVTX range named NAME
//! numbered A (counting from 0), collects until it closes the one numbered
//! B-1, and stops again,
//! so a long run pays the profiler's price only for the steps it looks at.
//! NVTX ranges that end before the window opens or begin after it closes
//! are not written either.
//!
//! Tracks the window only: it takes it from `settings` and tells its
//! callers (`nvtx`, whose ranges move it) when it opened or closed, and
//! those have `collection` follow it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use kernelscope_trace::injection_settings::StepWindow;

/// Before the window, in it, after it.
const BEFORE: u8 = 0;
const OPEN: u8 = 1;
const CLOSED: u8 = 2;

/// A window and where the program is in it; shared by every thread.
pub(crate) struct Tracker {
    window: StepWindow,
    state: AtomicU8,
    /// Step ranges begun, and ended, so far.
    begun: AtomicU64,
    ended: AtomicU64,
    /// When the window closed (ns on our clock; 0: not yet).
    closed_ns: AtomicU64,
}

impl Tracker {
    fn new(window: StepWindow) -> Tracker {
        Tracker {
            window,
            state: AtomicU8::new(BEFORE),
            begun: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            closed_ns: AtomicU64::new(0),
        }
    }

    fn open(&self) -> bool {
        self.state.load(Ordering::Acquire) == OPEN
    }

    /// A range named `message` began: whether that opened the window (its first step).
    fn began(&self, message: &str) -> bool {
        if message != self.window.step {
            return false;
        }
        let index = self.begun.fetch_add(1, Ordering::AcqRel);
        index == self.window.first
            && self
                .state
                .compare_exchange(BEFORE, OPEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// A range named `message` ended at `end_ns`: whether that closed the window (its last step).
    fn ended(&self, message: &str, end_ns: u64) -> bool {
        if message != self.window.step {
            return false;
        }
        let ended = self.ended.fetch_add(1, Ordering::AcqRel) + 1;
        if ended < self.window.end || !self.open() {
            return false;
        }
        // The time first: a thread that sees the window closed must see when.
        let _ = self
            .closed_ns
            .compare_exchange(0, end_ns, Ordering::AcqRel, Ordering::Acquire);
        self.state
            .compare_exchange(OPEN, CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether a range begun at `start_ns` and ending now touches the window.
    fn keeps(&self, start_ns: u64) -> bool {
        match self.state.load(Ordering::Acquire) {
            BEFORE => false,
            OPEN => true,
            _ => start_ns <= self.closed_ns.load(Ordering::Acquire),
        }
    }
}

/// The window `kscope profile` asked for and where the program is in it;
/// `None`: every step. Process-wide: every thread's NVTX ranges move it.
fn tracker() -> Option<&'static Tracker> {
    static TRACKER: OnceLock<Option<Tracker>> = OnceLock::new();
    TRACKER
        .get_or_init(|| {
            let window = crate::settings::settings().injection.step_window.clone();
            window.map(Tracker::new)
        })
        .as_ref()
}

/// Whether CUPTI should be collecting now: always without a window.
pub(crate) fn collecting() -> bool {
    tracker().is_none_or(Tracker::open)
}

/// A range named `message` began: whether that opened the window (at its
/// first step), which CUPTI is then to follow.
pub(crate) fn range_began(message: &str) -> bool {
    tracker().is_some_and(|tracker| tracker.began(message))
}

/// A range named `message` ended at `end_ns`: whether that closed the
/// window (with its last step), which CUPTI is then to follow.
pub(crate) fn range_ended(message: &str, end_ns: u64) -> bool {
    tracker().is_some_and(|tracker| tracker.ended(message, end_ns))
}

/// Whether a range begun at `start_ns` and ending now touches the window,
/// so is written: every range, without a window.
pub(crate) fn keeps_range(start_ns: u64) -> bool {
    tracker().is_none_or(|tracker| tracker.keeps(start_ns))
}

#[cfg(test)]
mod tracking {
    use super::*;
    use std::collections::BTreeMap;

    /// Kept ranges (name, step), the step the window opened at, the step it closed at.
    type Outcome = (Vec<(String, Option<u64>)>, Option<u64>, Option<u64>);

    /// One program's NVTX ranges on one thread, in time: an outer
    /// `generate` range over every step, each step a `forward` range
    /// holding `layers.N` ranges, and a `sample` range between steps.
    /// Every range is pushed and popped through a tracker of `first..end`,
    /// as nvtx.rs does (began at begin; at close: ended, then kept or not).
    fn run(steps: u64, layers: u64, first: u64, end: u64) -> Outcome {
        let tracker = Tracker::new(StepWindow::parse("forward".into(), &format!("{first}..{end}")).unwrap());
        let mut now = 1u64;
        let mut tick = || {
            now += 10;
            now
        };
        let (mut kept, mut opened, mut closed) = (Vec::new(), None, None);
        let mut close = |name: &str, start: u64, step: Option<u64>, end_ns: u64, tracker: &Tracker| {
            if tracker.ended(name, end_ns) {
                assert!(closed.replace(step.unwrap()).is_none(), "closed twice");
            }
            if tracker.keeps(start) {
                kept.push((name.to_string(), step));
            }
        };
        tracker.began("generate");
        let generate_start = tick();
        for step in 0..steps {
            if tracker.began("forward") {
                assert!(opened.replace(step).is_none(), "opened twice");
            }
            assert_eq!(tracker.open(), (first..end).contains(&step), "step {step} begun");
            let forward_start = tick();
            for layer in 0..layers {
                let name = format!("layers.{layer}");
                tracker.began(&name);
                let start = tick();
                close(&name, start, Some(step), tick(), &tracker);
            }
            close("forward", forward_start, Some(step), tick(), &tracker);
            tracker.began("sample");
            let start = tick();
            close("sample", start, None, tick(), &tracker);
        }
        close("generate", generate_start, None, tick(), &tracker);
        (kept, opened, closed)
    }

    #[test]
    fn a_window_keeps_its_steps_their_ranges_and_what_holds_them() {
        for (steps, layers, first, end) in [
            (10, 3, 2, 5),
            (6, 2, 0, 1),
            (8, 1, 7, 8),
            (5, 4, 0, 5),
            (4, 2, 3, 9),
        ] {
            let (kept, opened, closed) = run(steps, layers, first, end);
            assert_eq!(
                opened,
                (first < steps).then_some(first),
                "{first}..{end} of {steps}"
            );
            let last = end.min(steps);
            assert_eq!(
                closed,
                (end <= steps).then(|| end - 1),
                "{first}..{end} of {steps}"
            );
            let mut per_step: BTreeMap<u64, usize> = BTreeMap::new();
            for (name, step) in &kept {
                if let Some(step) = step {
                    assert!((first..last).contains(step), "{name} of step {step} kept");
                    *per_step.entry(*step).or_default() += 1;
                }
            }
            // Each step of the window: its forward and every layer.
            let expected: BTreeMap<u64, usize> =
                (first..last).map(|step| (step, layers as usize + 1)).collect();
            assert_eq!(per_step, expected, "{first}..{end} of {steps}");
            // The outer range overlaps the window: kept, when the window opened.
            let outer = kept.iter().filter(|(name, _)| name == "generate").count();
            assert_eq!(outer, usize::from(first < steps));
            // The sample ranges between the window's steps, and none outside.
            let samples = kept.iter().filter(|(name, _)| name == "sample").count() as u64;
            let inside = last.saturating_sub(first);
            let expected_samples = if end <= steps { inside - 1 } else { inside };
            assert_eq!(samples, expected_samples, "{first}..{end} of {steps}");
        }
    }
}
