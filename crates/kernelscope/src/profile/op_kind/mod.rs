//! What kind of operation a dispatch performs. Reports aggregate by it, so
//! the names are stable strings; `Other` is kept verbatim so that work no one
//! has labeled yet shows up as its own bucket instead of vanishing.
//!
//! The set is open, so that a new fused kernel, or a profile written by a
//! newer build, needs no edit here:
//!
//! - a [`Primitive`] is one of the kinds this build knows (`MatVec`);
//! - a fused kind *is* the list of primitives its kernel does the work of,
//!   and is named by joining their names with `+` (`RmsNorm+MatVec`), so
//!   any such name parses without an entry of its own;
//! - any other name (`GroupedGemm`, `Foo+Bar`) is an unknown kind that keeps
//!   its name, so every reader of a newer profile still shows it.
//!
//! Representation: an [`OpKind`] is stored in every dispatch record, on the
//! hot path, so it is `Copy` and allocation-free: up to
//! [`MAX_FUSED_PARTS`] primitives inline (one byte each), or, for an unknown
//! kind, a `&'static str` taken from a process-wide table of interned names.
//! Interning happens only when a name is parsed (a profile loaded), never
//! while recording; reading a name takes no lock. The table only grows, so
//! untrusted profiles are bounded by it: a name of at most
//! [`MAX_UNKNOWN_NAME_BYTES`] bytes without control characters, and at most
//! [`MAX_UNKNOWN_KINDS`] distinct unknown names per process (64 KiB at most);
//! past that a name is refused, and so is the profile holding it.

mod interned;
mod primitive;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use interned::{MAX_UNKNOWN_KINDS, MAX_UNKNOWN_NAME_BYTES};
pub use primitive::Primitive;

use interned::intern;

/// The most primitives a fused kind can cover; a longer name loads as an
/// unknown kind (and keeps its name).
pub const MAX_FUSED_PARTS: usize = 6;

/// The operation a dispatch performs, for per-op aggregation: a primitive,
/// a fused kind (the primitives one kernel does the work of) or a kind this
/// build does not know, kept by name. See the module's documentation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpKind(Repr);

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Repr {
    /// The first `len` of `parts`; the rest are always `Primitive::Other`,
    /// so that equal kinds compare and hash equal.
    Known {
        len: u8,
        parts: [Primitive; MAX_FUSED_PARTS],
    },
    /// Interned: see `intern`.
    Unknown(&'static str),
}

impl Default for OpKind {
    fn default() -> Self {
        OpKind::Other
    }
}

// The primitives as op kinds, spelled like the enum variants they replaced,
// so `OpKind::MatVec` reads as before and still works in patterns.
#[allow(non_upper_case_globals)]
impl OpKind {
    /// Token embedding lookup.
    pub const Embedding: OpKind = OpKind::primitive(Primitive::Embedding);
    /// RMS normalisation.
    pub const RmsNorm: OpKind = OpKind::primitive(Primitive::RmsNorm);
    /// Matrix times vector (decode-time projections).
    pub const MatVec: OpKind = OpKind::primitive(Primitive::MatVec);
    /// Matrix times matrix (prefill-time projections).
    pub const MatMul: OpKind = OpKind::primitive(Primitive::MatMul);
    /// Rotary position embedding.
    pub const Rope: OpKind = OpKind::primitive(Primitive::Rope);
    /// Scaled dot-product attention.
    pub const Attention: OpKind = OpKind::primitive(Primitive::Attention);
    /// Softmax.
    pub const Softmax: OpKind = OpKind::primitive(Primitive::Softmax);
    /// SiLU(gate) * up.
    pub const SiluMul: OpKind = OpKind::primitive(Primitive::SiluMul);
    /// Elementwise addition (residuals).
    pub const ElemAdd: OpKind = OpKind::primitive(Primitive::ElemAdd);
    /// Elementwise multiplication.
    pub const ElemMul: OpKind = OpKind::primitive(Primitive::ElemMul);
    /// Index of the largest element.
    pub const Argmax: OpKind = OpKind::primitive(Primitive::Argmax);
    /// Token sampling.
    pub const Sample: OpKind = OpKind::primitive(Primitive::Sample);
    /// Memory copy (also the KV-cache append).
    pub const Copy: OpKind = OpKind::primitive(Primitive::Copy);
    /// Sum over the ranks of a tensor-parallel group (a collective).
    pub const AllReduce: OpKind = OpKind::primitive(Primitive::AllReduce);
    /// Every rank's part, gathered on every rank (a collective).
    pub const AllGather: OpKind = OpKind::primitive(Primitive::AllGather);
    /// Anything not labeled.
    pub const Other: OpKind = OpKind::primitive(Primitive::Other);
}

impl OpKind {
    /// The kind of one primitive operation.
    pub const fn primitive(primitive: Primitive) -> OpKind {
        OpKind::fused(&[primitive])
    }

    /// The kind of one kernel doing the work of `parts`, in order
    /// (`OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec])` is
    /// `RmsNorm+MatVec`); one part is that primitive's kind.
    ///
    /// # Panics
    ///
    /// With no parts or more than [`MAX_FUSED_PARTS`] (in a `const`, at
    /// compile time).
    pub const fn fused(parts: &[Primitive]) -> OpKind {
        assert!(
            !parts.is_empty() && parts.len() <= MAX_FUSED_PARTS,
            "a fused op kind covers 1 to MAX_FUSED_PARTS primitives"
        );
        let mut inline = [Primitive::Other; MAX_FUSED_PARTS];
        let mut index = 0;
        while index < parts.len() {
            inline[index] = parts[index];
            index += 1;
        }
        OpKind(Repr::Known {
            len: parts.len() as u8,
            parts: inline,
        })
    }

    /// The stable name used in reports and JSON profiles: the primitive's
    /// name, a fused kind's parts joined by `+`, an unknown kind's own name.
    pub fn name(&self) -> Cow<'static, str> {
        match (self.0, self.covers()) {
            (Repr::Unknown(name), _) => Cow::Borrowed(name),
            (_, [one]) => Cow::Borrowed(one.name()),
            _ => Cow::Owned(self.to_string()),
        }
    }

    /// The primitives a dispatch of this kind covers, in order: its own
    /// primitive, or for a fused kernel each one it does the work of. An
    /// unknown kind covers none this build knows.
    pub fn covers(&self) -> &[Primitive] {
        match &self.0 {
            Repr::Known { len, parts } => &parts[..usize::from(*len)],
            Repr::Unknown(_) => &[],
        }
    }

    /// The primitive this kind is, unless it is fused or unknown.
    pub fn as_primitive(&self) -> Option<Primitive> {
        match self.covers() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Whether this build knows the kind (a primitive, or a fused kind of
    /// primitives), as opposed to a name kept from a newer profile.
    pub fn is_known(&self) -> bool {
        matches!(self.0, Repr::Known { .. })
    }

    /// Whether this kind is a collective between ranks (its time includes
    /// waiting for the slowest rank): a collective, or a fused kernel that
    /// does one. An unknown kind is not, since nothing says it waits.
    pub fn is_collective(&self) -> bool {
        self.covers().iter().any(|part| part.is_collective())
    }

    /// Whether this kind is one kernel doing the work of several: more than
    /// one primitive, or an unknown name joined with `+`.
    pub fn is_fused(&self) -> bool {
        match self.0 {
            Repr::Known { len, .. } => len > 1,
            Repr::Unknown(name) => name.contains('+'),
        }
    }

    /// The known kind `name` spells: a primitive or primitives joined by `+`.
    fn known(name: &str) -> Option<OpKind> {
        let mut parts = [Primitive::Other; MAX_FUSED_PARTS];
        let mut len = 0;
        for part in name.split('+') {
            *parts.get_mut(len)? = Primitive::named(part)?;
            len += 1;
        }
        Some(OpKind(Repr::Known {
            len: len as u8,
            parts,
        }))
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Repr::Unknown(name) = self.0 {
            return f.write_str(name);
        }
        for (position, part) in self.covers().iter().enumerate() {
            if position > 0 {
                f.write_str("+")?;
            }
            f.write_str(part.name())?;
        }
        Ok(())
    }
}

impl fmt::Debug for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpKind({self})")
    }
}

impl FromStr for OpKind {
    type Err = String;

    /// A primitive's name, primitives joined by `+` (a fused kind), or any
    /// other name within the bounds of the module's documentation (an
    /// unknown kind, which keeps it).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match OpKind::known(name) {
            Some(kind) => Ok(kind),
            None => intern(name).map(|name| OpKind(Repr::Unknown(name))),
        }
    }
}

impl Serialize for OpKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OpKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = Cow::<str>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names kernelscope has written into profiles: they must parse
    /// back to the same kinds, forever.
    const WRITTEN_NAMES: [&str; 24] = [
        "Embedding",
        "RmsNorm",
        "MatVec",
        "MatMul",
        "Rope",
        "Attention",
        "Softmax",
        "SiluMul",
        "ElemAdd",
        "ElemMul",
        "Argmax",
        "Sample",
        "Copy",
        "RmsNorm+MatVec",
        "RmsNorm+MatVec+SiluMul",
        "MatVec+ElemAdd",
        "Rope+Copy",
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "Broadcast",
        "SendRecv",
        "Collective",
        "Other",
    ];

    #[test]
    fn names_written_before_round_trip_as_known_kinds() {
        for name in WRITTEN_NAMES {
            let kind: OpKind = name.parse().unwrap();
            assert!(kind.is_known(), "{name}");
            assert_eq!(kind.name(), name);
            assert_eq!(kind.to_string(), name);
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<OpKind>(&json).unwrap(), kind);
        }
        for primitive in Primitive::ALL {
            assert_eq!(OpKind::primitive(primitive).name(), primitive.name());
            assert_eq!(OpKind::primitive(primitive).as_primitive(), Some(primitive));
        }
        assert_eq!(OpKind::default(), OpKind::Other);
        assert_eq!(OpKind::default().name(), "Other");
    }

    #[test]
    fn fused_kinds_are_their_parts_and_named_by_them() {
        let kind = OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec, Primitive::SiluMul]);
        assert_eq!(kind.name(), "RmsNorm+MatVec+SiluMul");
        assert_eq!(kind, "RmsNorm+MatVec+SiluMul".parse().unwrap());
        assert_eq!(
            kind.covers(),
            [Primitive::RmsNorm, Primitive::MatVec, Primitive::SiluMul]
        );
        assert!(kind.is_fused() && !kind.is_collective() && kind.as_primitive().is_none());
        // A combination no op declares yet needs no edit either.
        let new: OpKind = "Softmax+Argmax".parse().unwrap();
        assert!(new.is_known() && new.is_fused());
        assert_eq!(new, OpKind::fused(&[Primitive::Softmax, Primitive::Argmax]));
        // One part is the primitive itself.
        assert_eq!(OpKind::fused(&[Primitive::Rope]), OpKind::Rope);
        assert!(!OpKind::Rope.is_fused() && OpKind::Rope.covers() == [Primitive::Rope]);
        assert!(OpKind::AllReduce.is_collective());
        assert!(OpKind::fused(&[Primitive::MatVec, Primitive::AllReduce]).is_collective());
        // Too many parts for the inline list: kept by name instead.
        let long = ["MatVec"; MAX_FUSED_PARTS + 1].join("+");
        let kind: OpKind = long.parse().unwrap();
        assert!(!kind.is_known() && kind.is_fused());
        assert_eq!(kind.name(), long);
    }

    #[test]
    fn unknown_kinds_keep_their_names() {
        for name in ["GroupedGemm", "Foo+Bar", "MatVec+Foo", "matvec", "MatVec+"] {
            let kind: OpKind = name.parse().unwrap();
            assert!(!kind.is_known(), "{name}");
            assert_eq!(kind.name(), name);
            assert_eq!(kind.to_string(), name);
            assert!(kind.covers().is_empty() && !kind.is_collective());
            assert_eq!(kind.is_fused(), name.contains('+'), "{name}");
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<OpKind>(&json).unwrap(), kind);
            // Interned once: parsed again, the same name.
            assert_eq!(name.parse::<OpKind>().unwrap(), kind);
        }
        assert_ne!(
            "GroupedGemm".parse::<OpKind>().unwrap(),
            "Foo+Bar".parse::<OpKind>().unwrap()
        );
    }

    #[test]
    fn untrusted_names_are_bounded() {
        assert!("".parse::<OpKind>().is_err());
        let long = "G".repeat(MAX_UNKNOWN_NAME_BYTES + 1);
        let error = long.parse::<OpKind>().unwrap_err();
        assert!(error.contains("longer than") && error.len() < 200, "{error}");
        assert!("Mat\nVec".parse::<OpKind>().is_err());
        let widest = "é".repeat(MAX_UNKNOWN_NAME_BYTES / 2);
        assert_eq!(widest.parse::<OpKind>().unwrap().name(), widest);
        assert!(format!("{widest}x").parse::<OpKind>().is_err());
    }

    #[test]
    fn op_kinds_stay_small_and_copy() {
        fn is_copy<T: Copy>() {}
        is_copy::<OpKind>();
        assert!(std::mem::size_of::<OpKind>() <= 16);
    }
}
