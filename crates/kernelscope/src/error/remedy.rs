//! The ways out of an error that an error carries (`Remedy`), in the
//! library's terms, and how a message words them: `a, or b` after a `; `.
//! A front end that names its own flags finds this wording in the message
//! and replaces it (kscope: `crates/kscope/src/errors.rs`).

use std::fmt;

/// A way out of an error by asking for something else, in the library's
/// terms; a front end names its own flag or setting for each (kscope:
/// `crates/kscope/src/errors.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// Open another device (`cpu`, `cuda`) instead.
    OtherDevice {
        /// The device to open, as [`Device::open`](crate::Device::open) takes it.
        device: &'static str,
    },
    /// Use weights of another dtype.
    OtherDtype,
    /// Build the crate with its `cuda` feature.
    RebuildWithCuda,
    /// Compare anyway: `force` set in [`compare`](crate::profile::compare).
    Force,
    /// Run the model unsplit, on one device, which needs no collective.
    OneDevice,
}

impl fmt::Display for Remedy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remedy::OtherDevice { device } => write!(f, "open device `{device}` instead"),
            Remedy::OtherDtype => write!(f, "use weights of another dtype"),
            Remedy::RebuildWithCuda => write!(f, "build with the `cuda` feature"),
            Remedy::Force => write!(f, "set `force` to compare anyway"),
            Remedy::OneDevice => write!(f, "run on one device"),
        }
    }
}

/// Remedies as an error message gives them: `a, or b`. A front end that
/// words them its own way finds this text in the message and replaces it.
#[derive(Clone, Copy, Debug)]
pub struct Remedies<'a>(pub &'a [Remedy]);

impl fmt::Display for Remedies<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, remedy) in self.0.iter().enumerate() {
            if index > 0 {
                write!(f, ", or ")?;
            }
            write!(f, "{remedy}")?;
        }
        Ok(())
    }
}

/// `; ` and the remedies, or nothing when there are none.
pub(super) struct Suffix<'a>(pub(super) &'a [Remedy]);

impl fmt::Display for Suffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, "; {}", Remedies(self.0))
    }
}
