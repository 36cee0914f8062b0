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
        serde_json::from_value(value).map_err(|error| format!("malformed profile: {error}"))
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
