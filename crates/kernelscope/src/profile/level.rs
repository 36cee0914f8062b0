//! How much the profiler records. Chosen once, when a device is created, from
//! the API or from `KSCOPE_PROFILE`; the hot path only reads a cached field.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The environment variable read (once, at device creation) by [`ProfileLevel::from_env`].
pub const PROFILE_ENV_VAR: &str = "KSCOPE_PROFILE";

/// How much the profiler records beyond the always-on counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileLevel {
    /// Counters only: a dispatch pays a few relaxed atomic increments.
    #[default]
    Off,
    /// Counters plus one timing per committed submission.
    Submission,
    /// Counters, submission timing and one timing per dispatch.
    Dispatch,
}

impl ProfileLevel {
    /// Reads `KSCOPE_PROFILE` (`off`, `submission`, `dispatch`; unset means off).
    /// Call it once, where a device is configured, never on a hot path.
    pub fn from_env() -> Result<Self> {
        match std::env::var(PROFILE_ENV_VAR) {
            Ok(value) => value.parse(),
            Err(_) => Ok(ProfileLevel::Off),
        }
    }

    /// Whether per-submission timing is recorded.
    pub fn times_submissions(self) -> bool {
        self >= ProfileLevel::Submission
    }

    /// Whether per-dispatch timing is recorded.
    pub fn times_dispatches(self) -> bool {
        self == ProfileLevel::Dispatch
    }

    /// The lowercase name, as accepted by `KSCOPE_PROFILE`.
    pub fn name(self) -> &'static str {
        match self {
            ProfileLevel::Off => "off",
            ProfileLevel::Submission => "submission",
            ProfileLevel::Dispatch => "dispatch",
        }
    }
}

impl FromStr for ProfileLevel {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "0" => Ok(ProfileLevel::Off),
            "submission" => Ok(ProfileLevel::Submission),
            "dispatch" | "1" => Ok(ProfileLevel::Dispatch),
            _ => Err(Error::InvalidProfileLevel(text.to_string())),
        }
    }
}

impl fmt::Display for ProfileLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_others() {
        assert_eq!("off".parse::<ProfileLevel>().unwrap(), ProfileLevel::Off);
        assert_eq!(
            "Submission".parse::<ProfileLevel>().unwrap(),
            ProfileLevel::Submission
        );
        assert_eq!(
            "dispatch".parse::<ProfileLevel>().unwrap(),
            ProfileLevel::Dispatch
        );
        let error = "verbose".parse::<ProfileLevel>().unwrap_err();
        assert!(error.to_string().contains("verbose"));
        assert!(ProfileLevel::Dispatch.times_submissions());
        assert!(!ProfileLevel::Submission.times_dispatches());
    }
}
