//! The versioned JSON profile: everything a run recorded plus the conditions
//! it ran under, so that two runs can be compared later (and refused when
//! they are not comparable).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{CounterSnapshot, DispatchRecord, DispatchTiming, ProfileLevel, SubmissionRecord, TokenRecord};
use crate::error::{Error, Result};

/// The schema version written into every profile; readers refuse others.
pub const PROFILE_SCHEMA_VERSION: u32 = 1;

/// The conditions a run was taken under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// The device's name (`cpu: AMD EPYC 7B13 (2 threads)`, `cuda:0 NVIDIA H200`).
    pub device: String,
    /// The backend (`cpu`, `cuda`).
    pub backend: String,
    /// Driver version, where there is one.
    pub driver: Option<String>,
    /// `eager` (dispatch by dispatch) or `graph` (captured and replayed).
    pub mode: String,
    /// The profiling level.
    pub profiling: ProfileLevel,
    /// How submissions were timed.
    pub submission_timing: String,
    /// Whether and how dispatches were timed.
    pub dispatch_timing: DispatchTiming,
    /// The model or workload, where there is one.
    pub model: Option<String>,
    /// The device's peak memory bandwidth in GB/s, where known, for the roofline.
    pub peak_bandwidth_gbps: Option<f64>,
}

impl Conditions {
    /// The conditions that must match for two runs to be compared, as
    /// `name: a vs b` for each one that differs.
    pub fn differences(&self, other: &Conditions) -> Vec<String> {
        let mut differences = Vec::new();
        let mut check = |name: &str, a: &str, b: &str| {
            if a != b {
                differences.push(format!("{name}: {a} vs {b}"));
            }
        };
        check("device", &self.device, &other.device);
        check("backend", &self.backend, &other.backend);
        check("mode", &self.mode, &other.mode);
        check("profiling", self.profiling.name(), other.profiling.name());
        check(
            "dispatch timing",
            &self.dispatch_timing.describe(),
            &other.dispatch_timing.describe(),
        );
        check(
            "driver",
            self.driver.as_deref().unwrap_or("none"),
            other.driver.as_deref().unwrap_or("none"),
        );
        check(
            "model",
            self.model.as_deref().unwrap_or("none"),
            other.model.as_deref().unwrap_or("none"),
        );
        differences
    }
}

/// A whole run's profile, as written to and read from JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`PROFILE_SCHEMA_VERSION`].
    pub schema: u32,
    /// The tool and version that wrote it.
    pub tool: String,
    /// What the run ran on and how.
    pub conditions: Conditions,
    /// Counter totals over the run.
    pub counters: CounterSnapshot,
    /// Tokens, in order.
    pub tokens: Vec<TokenRecord>,
    /// Timed submissions, in order.
    pub submissions: Vec<SubmissionRecord>,
    /// Timed dispatches, in order.
    pub dispatches: Vec<DispatchRecord>,
    /// Warnings raised during the run (e.g. dispatch timing unsupported).
    pub warnings: Vec<String>,
}

impl Profile {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile is always serialisable")
    }

    /// Writes the profile as JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_json()).map_err(|source| Error::Io {
            context: format!("writing profile {}", path.display()),
            source,
        })
    }

    /// Reads a profile, refusing files that are not kernelscope profiles or
    /// are of another schema version, with a one-line message naming the file.
    pub fn load(path: &Path) -> Result<Profile> {
        let problem = |problem: String| Error::ProfileFile {
            path: path.to_path_buf(),
            problem,
        };
        let text = std::fs::read_to_string(path).map_err(|error| problem(format!("cannot read: {error}")))?;
        Self::from_json(&text).map_err(problem)
    }

    /// Parses a profile from JSON text; the error says what is wrong.
    pub fn from_json(text: &str) -> std::result::Result<Profile, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
        let schema = value
            .get("schema")
            .ok_or("not a kernelscope profile: no \"schema\" field")?;
        match schema.as_u64() {
            Some(version) if version == u64::from(PROFILE_SCHEMA_VERSION) => {}
            _ => {
                return Err(format!(
                    "profile schema {schema} is not supported (this kscope reads schema {PROFILE_SCHEMA_VERSION})"
                ));
            }
        }
        let profile: Profile =
            serde_json::from_value(value).map_err(|error| format!("malformed profile: {error}"))?;
        profile.validate()?;
        Ok(profile)
    }

    /// Checks what the readers rely on: every record ends at or after its
    /// start, and no total the reports and comparisons take (durations,
    /// bytes, flops, counters) passes 2^64. A profile written by kscope
    /// always passes; a hand-edited or corrupted one is refused, never
    /// clamped into a plausible answer.
    pub fn validate(&self) -> std::result::Result<(), String> {
        fn span(what: String, start: u64, end: u64) -> std::result::Result<u64, String> {
            end.checked_sub(start)
                .ok_or_else(|| format!("{what}: end_ns {end} is before start_ns {start}"))
        }
        fn total(what: &str, mut values: impl Iterator<Item = u64>) -> std::result::Result<(), String> {
            values
                .try_fold(0u64, u64::checked_add)
                .map(|_| ())
                .ok_or_else(|| format!("the {what} of the records sum past 2^64"))
        }
        let mut token_time = Vec::with_capacity(self.tokens.len());
        let mut counters = CounterSnapshot::default();
        for token in &self.tokens {
            token_time.push(span(
                format!("token {}", token.index),
                token.start_ns,
                token.end_ns,
            )?);
            counters = counters.checked_add(token.counters).ok_or_else(|| {
                format!(
                    "the counters of the tokens sum past 2^64 (at token {})",
                    token.index
                )
            })?;
        }
        total("token durations", token_time.into_iter())?;
        let mut submission_time = Vec::with_capacity(self.submissions.len());
        for submission in &self.submissions {
            submission_time.push(span(
                format!("submission {}", submission.submission),
                submission.start_ns,
                submission.end_ns,
            )?);
        }
        total("submission durations", submission_time.into_iter())?;
        total(
            "host enqueue times",
            self.submissions
                .iter()
                .map(|submission| submission.host_enqueue_ns),
        )?;
        let mut dispatch_time = Vec::with_capacity(self.dispatches.len());
        for dispatch in &self.dispatches {
            dispatch_time.push(span(
                format!(
                    "dispatch {} of submission {}",
                    dispatch.index, dispatch.submission
                ),
                dispatch.start_ns,
                dispatch.end_ns,
            )?);
        }
        total("dispatch durations", dispatch_time.into_iter())?;
        total(
            "dispatch bytes",
            self.dispatches.iter().map(|dispatch| dispatch.bytes),
        )?;
        total(
            "dispatch flops",
            self.dispatches.iter().map(|dispatch| dispatch.flops),
        )?;
        if let Some(bandwidth) = self.conditions.peak_bandwidth_gbps
            && !(bandwidth.is_finite() && bandwidth > 0.0)
        {
            return Err(format!(
                "peak_bandwidth_gbps must be a positive number, found {bandwidth}"
            ));
        }
        Ok(())
    }

    /// How many tokens of `phase` there are and the sum of their counters;
    /// `None` without such tokens.
    pub fn phase_counters(&self, phase: super::Phase) -> Option<(usize, CounterSnapshot)> {
        let tokens = self.tokens.iter().filter(|token| token.phase == phase);
        let (count, sum) = tokens.fold((0, CounterSnapshot::default()), |(count, sum), token| {
            (count + 1, sum + token.counters)
        });
        (count > 0).then_some((count, sum))
    }

    /// The decode tokens (or, when none were marked as decode, every token).
    pub fn repetition_tokens(&self) -> Vec<u32> {
        let decode: Vec<u32> = self
            .tokens
            .iter()
            .filter(|token| token.phase == super::Phase::Decode)
            .map(|token| token.index)
            .collect();
        if decode.is_empty() {
            self.tokens.iter().map(|token| token.index).collect()
        } else {
            decode
        }
    }
}
