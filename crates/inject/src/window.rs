//! A window of steps (`kscope profile --step NAME --steps A..B`): CUPTI
//! collects nothing until the program opens its NVTX range named NAME
//! numbered A (counting from 0), collects until it closes the one numbered
//! B-1, and stops again,
//! so a long run pays the profiler's price only for the steps it looks at.
//! NVTX ranges that end before the window opens or begin after it closes
//! are not written either.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// The environment variable naming the steps' NVTX range.
pub const STEP_ENV_VAR: &str = "KSCOPE_STEP";
/// The environment variable holding the window, `A..B`.
pub const WINDOW_ENV_VAR: &str = "KSCOPE_STEP_WINDOW";

/// Which steps are recorded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// The steps' NVTX range name.
    step: String,
    /// The first step recorded.
    first: u64,
    /// The step after the last recorded.
    end: u64,
}

/// Before the window, in it, after it.
const BEFORE: u8 = 0;
const OPEN: u8 = 1;
const CLOSED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(BEFORE);
/// Step ranges begun, and ended, so far.
static BEGUN: AtomicU64 = AtomicU64::new(0);
static ENDED: AtomicU64 = AtomicU64::new(0);
/// When the window closed (ns on our clock; 0: not yet).
static CLOSED_NS: AtomicU64 = AtomicU64::new(0);

/// The window `kscope profile` asked for, read once; `None`: every step.
pub(crate) fn window() -> Option<&'static Window> {
    static WINDOW: OnceLock<Option<Window>> = OnceLock::new();
    WINDOW
        .get_or_init(|| {
            let step = std::env::var(STEP_ENV_VAR).ok()?;
            let text = std::env::var(WINDOW_ENV_VAR).ok()?;
            let parsed = parse(step, &text);
            if parsed.is_none() {
                eprintln!(
                    "kscope profile: {WINDOW_ENV_VAR}={text} is not A..B with A < B; recording every step"
                );
            }
            parsed
        })
        .as_ref()
}

fn parse(step: String, text: &str) -> Option<Window> {
    let (first, end) = text.split_once("..")?;
    let (first, end) = (first.trim().parse().ok()?, end.trim().parse().ok()?);
    (first < end && !step.is_empty()).then_some(Window { step, first, end })
}

/// Whether CUPTI should be collecting now: always without a window.
pub(crate) fn collecting() -> bool {
    window().is_none() || STATE.load(Ordering::Acquire) == OPEN
}

/// A range named `message` began: the window opens at its first step.
pub(crate) fn range_began(message: &str) {
    let Some(window) = window() else { return };
    if message != window.step {
        return;
    }
    let index = BEGUN.fetch_add(1, Ordering::AcqRel);
    if index == window.first
        && STATE
            .compare_exchange(BEFORE, OPEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        crate::collection::follow_window();
    }
}

/// A range named `message` ended at `end_ns`: the window closes with its last step.
pub(crate) fn range_ended(message: &str, end_ns: u64) {
    let Some(window) = window() else { return };
    if message != window.step {
        return;
    }
    let ended = ENDED.fetch_add(1, Ordering::AcqRel) + 1;
    if ended >= window.end && STATE.load(Ordering::Acquire) == OPEN {
        // The time first: a thread that sees the window closed must see when.
        let _ = CLOSED_NS.compare_exchange(0, end_ns, Ordering::AcqRel, Ordering::Acquire);
        if STATE
            .compare_exchange(OPEN, CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            crate::collection::follow_window();
        }
    }
}

/// Whether a range begun at `start_ns` and ending now touches the window,
/// so is written: every range, without a window.
pub(crate) fn keeps_range(start_ns: u64) -> bool {
    if window().is_none() {
        return true;
    }
    match STATE.load(Ordering::Acquire) {
        BEFORE => false,
        OPEN => true,
        _ => start_ns <= CLOSED_NS.load(Ordering::Acquire),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_as_a_before_b() {
        let window = parse("forward".into(), " 3..9").unwrap();
        assert_eq!(
            (window.first, window.end, window.step.as_str()),
            (3, 9, "forward")
        );
        for bad in ["9..3", "4..4", "3", "a..b", "..5", ""] {
            assert!(parse("forward".into(), bad).is_none(), "{bad}");
        }
        assert!(parse(String::new(), "1..2").is_none());
    }
}
