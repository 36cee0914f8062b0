//! The versioned JSON profile: everything a run recorded plus the conditions
//! it ran under, so that two runs can be compared later (and refused when
//! they are not comparable).

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::conditions::Conditions;
use super::{CounterSnapshot, DispatchRecord, SubmissionRecord, TokenRecord};
use crate::error::{Error, Result};

/// The schema version written into every profile. Readers also accept
/// schema 3 (no format on dispatch records), schema 2 (also one copy
/// bandwidth, no split of bytes into reads and writes) and schema 1 (also
/// timing methods as prose, enqueue fields on every submission),
/// converting them on load; they refuse any other.
pub const PROFILE_SCHEMA_VERSION: u32 = 4;

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
    /// Every rank but rank 0 of a split run (rank 0's records are the ones
    /// above), on rank 0's clock; empty for one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<super::RankRecords>,
    /// A mixture-of-experts run's routing (absent for a dense model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<super::ExpertRouting>,
}

impl Profile {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile is always serialisable")
    }

    /// Writes [`to_json`](Self::to_json)'s text to `writer` as it goes: a
    /// profile of millions of dispatches never stands whole in memory.
    pub fn write_json(&self, writer: impl std::io::Write) -> std::io::Result<()> {
        let mut writer = std::io::BufWriter::new(writer);
        serde_json::to_writer_pretty(&mut writer, self).map_err(std::io::Error::other)?;
        writer.flush()
    }

    /// Writes the profile as JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let written = std::fs::File::create(path).and_then(|file| self.write_json(file));
        written.map_err(|source| Error::Io {
            context: format!("writing profile {}", path.display()),
            source,
        })
    }

    /// How many tokens of `phase` there are and the sum of their counters;
    /// `None` without such tokens.
    pub fn phase_counters(&self, phase: super::Phase) -> Option<(usize, CounterSnapshot)> {
        let tokens = self.tokens.iter().filter(|token| token.phase == phase);
        // Saturating: a loaded profile's token counters were checked to add
        // up within u64, and live ones cannot come near it.
        let (count, sum) = tokens.fold((0, CounterSnapshot::default()), |(count, sum), token| {
            (count + 1, sum.saturating_add(token.counters))
        });
        (count > 0).then_some((count, sum))
    }

    /// The timed decode tokens (or, when none were marked as decode, every
    /// timed token): what per-token means are taken over. Tokens a token
    /// selection left untimed have no records and would count as zeros.
    pub fn repetition_tokens(&self) -> Vec<u32> {
        let timed = || self.tokens.iter().filter(|token| token.timed);
        let decode: Vec<u32> = timed()
            .filter(|token| token.phase == super::Phase::Decode)
            .map(|token| token.index)
            .collect();
        if decode.is_empty() {
            timed().map(|token| token.index).collect()
        } else {
            decode
        }
    }

    /// How many tokens were timed and how many there were in all.
    pub fn timed_tokens(&self) -> (usize, usize) {
        let timed = self.tokens.iter().filter(|token| token.timed).count();
        (timed, self.tokens.len())
    }
}

/// `text` for a one-line message: quoted, escaped, and cut after 60 characters.
pub(super) fn quoted(text: &str) -> String {
    const SHOWN: usize = 60;
    let shown: String = text.chars().take(SHOWN).collect();
    let ellipsis = if text.chars().nth(SHOWN).is_some() {
        "…"
    } else {
        ""
    };
    format!("\"{}{ellipsis}\"", shown.escape_debug())
}
