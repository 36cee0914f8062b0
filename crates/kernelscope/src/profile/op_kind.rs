//! What kind of operation a dispatch performs. Reports aggregate by it, so
//! the names are stable strings; `Other` is kept verbatim so that work no one
//! has labeled yet shows up as its own bucket instead of vanishing.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The operation a dispatch performs, for per-op aggregation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Token embedding lookup.
    Embedding,
    /// RMS normalisation.
    RmsNorm,
    /// Matrix times vector (decode-time projections).
    MatVec,
    /// Matrix times matrix (prefill-time projections).
    MatMul,
    /// Rotary position embedding.
    Rope,
    /// Scaled dot-product attention.
    Attention,
    /// Softmax.
    Softmax,
    /// SiLU(gate) * up.
    SiluMul,
    /// Elementwise addition (residuals).
    ElemAdd,
    /// Elementwise multiplication.
    ElemMul,
    /// Index of the largest element.
    Argmax,
    /// Token sampling.
    Sample,
    /// Memory copy.
    Copy,
    /// Anything not labeled.
    #[default]
    Other,
}

impl OpKind {
    /// Every kind, in declaration order.
    pub const ALL: [OpKind; 14] = [
        OpKind::Embedding,
        OpKind::RmsNorm,
        OpKind::MatVec,
        OpKind::MatMul,
        OpKind::Rope,
        OpKind::Attention,
        OpKind::Softmax,
        OpKind::SiluMul,
        OpKind::ElemAdd,
        OpKind::ElemMul,
        OpKind::Argmax,
        OpKind::Sample,
        OpKind::Copy,
        OpKind::Other,
    ];

    /// The stable name used in reports and JSON profiles.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Embedding => "Embedding",
            OpKind::RmsNorm => "RmsNorm",
            OpKind::MatVec => "MatVec",
            OpKind::MatMul => "MatMul",
            OpKind::Rope => "Rope",
            OpKind::Attention => "Attention",
            OpKind::Softmax => "Softmax",
            OpKind::SiluMul => "SiluMul",
            OpKind::ElemAdd => "ElemAdd",
            OpKind::ElemMul => "ElemMul",
            OpKind::Argmax => "Argmax",
            OpKind::Sample => "Sample",
            OpKind::Copy => "Copy",
            OpKind::Other => "Other",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OpKind {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        OpKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| format!("unknown op kind `{name}`"))
    }
}

impl Serialize for OpKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for OpKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for kind in OpKind::ALL {
            assert!(seen.insert(kind.name()), "duplicate name {}", kind.name());
            assert_eq!(kind.name().parse::<OpKind>().unwrap(), kind);
        }
        assert_eq!(OpKind::default().name(), "Other");
        assert!("Sdpa".parse::<OpKind>().is_err());
    }
}
