//! Which tokens the profiler times (`--profile-tokens`). Timing every token
//! costs something on every kernel (CUPTI's records); timing a window or
//! every n-th token keeps the table of each timed token whole while the
//! others run as if profiling were off, their counters still exact.
//!
//! The profiler sets one flag as each token begins and ends, and its
//! `times_*` checks read it, so untimed tokens (and work outside tokens) run
//! as at `off`; `TokenRecord::timed` marks the timed ones, over which
//! per-token means are taken. On CUDA, CUPTI's kernel records are
//! process-wide: each device says when it wants them, and collection is
//! switched off when none does, after the stream is drained and every record
//! taken (`runtime/cuda/state.rs`, `cupti.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The tokens timed: `start..end` (end open when `None`), every `step`-th
/// from `start`. Token numbers are the profiler's (from 0, prefill first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSelection {
    /// The first token timed.
    pub start: u32,
    /// One past the last token that may be timed; `None` for no end.
    pub end: Option<u32>,
    /// Every `step`-th token from `start` is timed (1: every token).
    pub step: u32,
}

impl Default for TokenSelection {
    fn default() -> Self {
        TokenSelection::ALL
    }
}

impl TokenSelection {
    /// Every token, and work outside tokens: what profiling always did.
    pub const ALL: TokenSelection = TokenSelection {
        start: 0,
        end: None,
        step: 1,
    };

    /// Whether every token is timed.
    pub fn is_all(&self) -> bool {
        *self == TokenSelection::ALL
    }

    /// Whether token `index` is timed.
    pub fn contains(&self, index: u32) -> bool {
        index >= self.start
            && self.end.is_none_or(|end| index < end)
            && (index - self.start).is_multiple_of(self.step)
    }

    /// Whether work outside any token (model set-up, a bare submission) is
    /// timed: only when every token is, so a window holds only its tokens.
    pub fn times_outside_tokens(&self) -> bool {
        self.is_all()
    }
}

impl FromStr for TokenSelection {
    type Err = Error;

    /// `all`, `A..B`, `A..` or `..B`, each optionally with `:STEP`
    /// (`0..:8`: every 8th token).
    fn from_str(text: &str) -> Result<Self> {
        let invalid = |problem: &str| Error::InvalidTokenSelection {
            text: text.to_string(),
            problem: problem.to_string(),
        };
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("all") {
            return Ok(TokenSelection::ALL);
        }
        let (range, step) = match trimmed.split_once(':') {
            Some((range, step)) => (range, Some(step)),
            None => (trimmed, None),
        };
        let (start, end) = range
            .split_once("..")
            .ok_or_else(|| invalid("expected all, A..B, A.. or ..B, optionally with :STEP"))?;
        let number = |part: &str, what: &str| -> Result<Option<u32>> {
            let part = part.trim();
            if part.is_empty() {
                return Ok(None);
            }
            part.parse::<u32>()
                .map(Some)
                .map_err(|_| invalid(&format!("{what} `{part}` is not a token number")))
        };
        let start = number(start, "start")?.unwrap_or(0);
        let end = number(end, "end")?;
        let step = match step {
            Some(step) => number(step, "step")?.ok_or_else(|| invalid("the step after `:` is missing"))?,
            None => 1,
        };
        if step == 0 {
            return Err(invalid("the step must be at least 1"));
        }
        if let Some(end) = end
            && end <= start
        {
            return Err(invalid("the range holds no token (end <= start)"));
        }
        Ok(TokenSelection { start, end, step })
    }
}

impl fmt::Display for TokenSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_all() {
            return f.write_str("all");
        }
        write!(f, "{}..", self.start)?;
        if let Some(end) = self.end {
            write!(f, "{end}")?;
        }
        if self.step != 1 {
            write!(f, ":{}", self.step)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_windows_and_steps() {
        let window: TokenSelection = "16..48".parse().unwrap();
        assert_eq!(
            window,
            TokenSelection {
                start: 16,
                end: Some(48),
                step: 1
            }
        );
        assert!(!window.contains(15) && window.contains(16) && window.contains(47) && !window.contains(48));
        let every: TokenSelection = "3..:4".parse().unwrap();
        assert!(every.contains(3) && every.contains(7) && !every.contains(4) && !every.contains(2));
        let head: TokenSelection = "..2".parse().unwrap();
        assert!(head.contains(0) && head.contains(1) && !head.contains(2));
        assert!("all".parse::<TokenSelection>().unwrap().is_all());
        assert!("0..".parse::<TokenSelection>().unwrap().is_all());
        for text in ["16..48", "3..:4", "..2", "5..", "all"] {
            let parsed: TokenSelection = text.parse().unwrap();
            assert_eq!(parsed.to_string().parse::<TokenSelection>().unwrap(), parsed);
        }
    }

    #[test]
    fn rejects_what_selects_nothing_or_is_not_a_range() {
        for (text, problem) in [
            ("8..8", "end <= start"),
            ("9..3", "end <= start"),
            ("0..:0", "at least 1"),
            ("0..:", "missing"),
            ("x..4", "start `x`"),
            ("12", "expected all"),
            ("1..-3", "end `-3`"),
        ] {
            let error = text.parse::<TokenSelection>().unwrap_err().to_string();
            assert!(error.contains(text) && error.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn only_every_token_times_work_outside_tokens() {
        assert!(TokenSelection::ALL.times_outside_tokens());
        assert!(!"0..4".parse::<TokenSelection>().unwrap().times_outside_tokens());
    }
}
