//! How a backend takes its times, as data: a mechanism, a revision and an
//! optional note. Two profiles are comparable when their methods agree in
//! mechanism and revision; the note (why CUPTI was unavailable, say) is for
//! people and never decides anything. A revision is bumped whenever what a
//! mechanism's times mean changes, so profiles from before and after the
//! change are refused by `compare` instead of being set side by side.

use serde::{Deserialize, Serialize};

/// What CUPTI revision 2 is called in reports, and was called in schema-1
/// profiles (which named methods by this prose).
const CUPTI_REVISION_2_TEXT: &str = "cupti activity records (eager launches and graph replays; replays timed from the end of the host's enqueue)";

/// What takes the times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingMechanism {
    /// The host's monotonic clock around the work (backends that run work
    /// as it is committed).
    HostClock,
    /// Pairs of CUDA events recorded on the stream around the work.
    CudaEvents,
    /// CUPTI's kernel activity records.
    Cupti,
    /// CUPTI's records taken inside another program by kscope's injection
    /// library (`kscope profile -- CMD`): kernels as the program launched
    /// them, steps found from its NVTX ranges, graph launches or syncs.
    CuptiInjected,
}

impl TimingMechanism {
    /// The revision this build's times have for the mechanism.
    ///
    /// CUPTI revision 2: a graph replay's submission time starts when the
    /// host has finished enqueueing it (the stream is held until then), no
    /// longer while the host is still launching.
    pub fn current_revision(self) -> u32 {
        match self {
            TimingMechanism::HostClock | TimingMechanism::CudaEvents | TimingMechanism::CuptiInjected => 1,
            TimingMechanism::Cupti => 2,
        }
    }
}

/// A way of taking times: the mechanism, the revision of what its times
/// mean, and an optional note for people.
#[derive(Clone, Debug, Eq, Serialize, Deserialize)]
pub struct TimingMethod {
    /// What takes the times.
    pub mechanism: TimingMechanism,
    /// The revision of what the times mean (see [`TimingMechanism::current_revision`]).
    pub revision: u32,
    /// A remark for reports, ignored when methods are compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Methods are equal when mechanism and revision are; the note is prose.
impl PartialEq for TimingMethod {
    fn eq(&self, other: &Self) -> bool {
        self.mechanism == other.mechanism && self.revision == other.revision
    }
}

impl TimingMethod {
    /// `mechanism` at this build's revision, without a note.
    pub fn current(mechanism: TimingMechanism) -> Self {
        TimingMethod {
            mechanism,
            revision: mechanism.current_revision(),
            note: None,
        }
    }

    /// The same method with `note` attached.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        let base = match (self.mechanism, self.revision) {
            (TimingMechanism::HostClock, _) => "host clock".to_string(),
            (TimingMechanism::CudaEvents, _) => "cuda event pairs".to_string(),
            (TimingMechanism::Cupti, 1) => {
                "cupti activity records (eager launches and graph replays)".to_string()
            }
            (TimingMechanism::Cupti, 2) => CUPTI_REVISION_2_TEXT.to_string(),
            (TimingMechanism::Cupti, revision) => format!("cupti activity records (revision {revision})"),
            (TimingMechanism::CuptiInjected, _) => {
                "cupti activity records, injected into the program (kscope profile)".to_string()
            }
        };
        match &self.note {
            Some(note) => format!("{base} ({note})"),
            None => base,
        }
    }

    /// The method a schema-1 profile named in prose, where it is one this
    /// project wrote; `None` for any other text.
    pub(crate) fn from_schema_1_text(text: &str) -> Option<TimingMethod> {
        let method = |mechanism, revision, note: Option<&str>| TimingMethod {
            mechanism,
            revision,
            note: note.map(str::to_string),
        };
        if text == "host clock" {
            Some(method(TimingMechanism::HostClock, 1, None))
        } else if text == CUPTI_REVISION_2_TEXT {
            Some(method(TimingMechanism::Cupti, 2, None))
        } else if text.starts_with("cupti") {
            Some(method(TimingMechanism::Cupti, 1, None))
        } else if let Some(rest) = text.strip_prefix("cuda event pairs") {
            let note = rest.trim();
            Some(method(
                TimingMechanism::CudaEvents,
                1,
                Some(note).filter(|note| !note.is_empty()),
            ))
        } else {
            None
        }
    }
}

impl std::fmt::Display for TimingMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Whether and how a backend times individual dispatches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "support", rename_all = "lowercase")]
pub enum DispatchTiming {
    /// Dispatches are timed by `method`.
    Supported {
        /// How the times are taken.
        method: TimingMethod,
    },
    /// Dispatches cannot be timed here; the report says so instead of
    /// printing zeros.
    Unsupported {
        /// Why not.
        reason: String,
    },
}

impl DispatchTiming {
    /// Timed by `mechanism` at this build's revision.
    pub fn supported(mechanism: TimingMechanism) -> Self {
        DispatchTiming::Supported {
            method: TimingMethod::current(mechanism),
        }
    }

    /// Whether dispatch times are available.
    pub fn is_supported(&self) -> bool {
        matches!(self, DispatchTiming::Supported { .. })
    }

    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self {
            DispatchTiming::Supported { method } => method.describe(),
            DispatchTiming::Unsupported { reason } => format!("unsupported ({reason})"),
        }
    }

    /// Whether profiles timed like `self` and like `other` can be compared:
    /// the same method (mechanism and revision), or both unsupported
    /// whatever the reason.
    pub fn comparable_with(&self, other: &DispatchTiming) -> bool {
        match (self, other) {
            (DispatchTiming::Supported { method: a }, DispatchTiming::Supported { method: b }) => a == b,
            (DispatchTiming::Unsupported { .. }, DispatchTiming::Unsupported { .. }) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_never_decide_equality_but_revisions_do() {
        let plain = TimingMethod::current(TimingMechanism::CudaEvents);
        let noted = plain.clone().with_note("CUPTI unavailable: no libcupti");
        assert_eq!(plain, noted);
        assert!(noted.describe().contains("no libcupti"));
        let old_cupti = TimingMethod {
            mechanism: TimingMechanism::Cupti,
            revision: 1,
            note: None,
        };
        assert_ne!(old_cupti, TimingMethod::current(TimingMechanism::Cupti));
        assert!(
            !DispatchTiming::Supported { method: old_cupti }
                .comparable_with(&DispatchTiming::supported(TimingMechanism::Cupti))
        );
        assert!(
            DispatchTiming::Unsupported { reason: "a".into() }
                .comparable_with(&DispatchTiming::Unsupported { reason: "b".into() })
        );
    }

    #[test]
    fn schema_1_prose_maps_to_the_methods_it_named() {
        let cases = [
            ("host clock", TimingMechanism::HostClock, 1),
            ("cuda event pairs", TimingMechanism::CudaEvents, 1),
            (
                "cuda event pairs around eager launches (CUPTI unavailable: no libcupti)",
                TimingMechanism::CudaEvents,
                1,
            ),
            (
                "cupti activity records (eager launches and graph replays)",
                TimingMechanism::Cupti,
                1,
            ),
            (
                "cupti activity records (eager launches and graph replays; replays timed from the end of the host's enqueue)",
                TimingMechanism::Cupti,
                2,
            ),
        ];
        for (text, mechanism, revision) in cases {
            let method = TimingMethod::from_schema_1_text(text).expect(text);
            assert_eq!(
                (method.mechanism, method.revision),
                (mechanism, revision),
                "{text}"
            );
        }
        assert_eq!(
            TimingMethod::from_schema_1_text("cuda event pairs around eager launches (CUPTI unavailable: x)")
                .unwrap()
                .note
                .as_deref(),
            Some("around eager launches (CUPTI unavailable: x)")
        );
        assert!(TimingMethod::from_schema_1_text("sundial").is_none());
    }
}
