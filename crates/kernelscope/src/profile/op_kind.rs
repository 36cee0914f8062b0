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
    /// Memory copy (also the KV-cache append).
    Copy,
    /// RMSNorm fused into the mat-vec that reads it.
    RmsNormMatVec,
    /// RMSNorm, the gate and up mat-vecs and SiLU·mul in one kernel.
    RmsNormMatVecSiluMul,
    /// A mat-vec adding its result into the residual stream.
    MatVecElemAdd,
    /// RoPE and the KV-cache append in one kernel.
    RopeCopy,
    /// Sum over the ranks of a tensor-parallel group (a collective).
    AllReduce,
    /// Every rank's part, gathered on every rank (a collective).
    AllGather,
    /// Anything not labeled.
    #[default]
    Other,
}

impl OpKind {
    /// Every kind, in declaration order.
    pub const ALL: [OpKind; 20] = [
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
        OpKind::RmsNormMatVec,
        OpKind::RmsNormMatVecSiluMul,
        OpKind::MatVecElemAdd,
        OpKind::RopeCopy,
        OpKind::AllReduce,
        OpKind::AllGather,
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
            OpKind::RmsNormMatVec => "RmsNorm+MatVec",
            OpKind::RmsNormMatVecSiluMul => "RmsNorm+MatVec+SiluMul",
            OpKind::MatVecElemAdd => "MatVec+ElemAdd",
            OpKind::RopeCopy => "Rope+Copy",
            OpKind::AllReduce => "AllReduce",
            OpKind::AllGather => "AllGather",
            OpKind::Other => "Other",
        }
    }
}

impl OpKind {
    /// The op kinds a dispatch of this kind covers: itself, or for a fused
    /// kernel each kind it does the work of, in order.
    pub const fn covers(self) -> &'static [OpKind] {
        match self {
            OpKind::RmsNormMatVec => &[OpKind::RmsNorm, OpKind::MatVec],
            OpKind::RmsNormMatVecSiluMul => &[OpKind::RmsNorm, OpKind::MatVec, OpKind::SiluMul],
            OpKind::MatVecElemAdd => &[OpKind::MatVec, OpKind::ElemAdd],
            OpKind::RopeCopy => &[OpKind::Rope, OpKind::Copy],
            OpKind::Embedding => &[OpKind::Embedding],
            OpKind::RmsNorm => &[OpKind::RmsNorm],
            OpKind::MatVec => &[OpKind::MatVec],
            OpKind::MatMul => &[OpKind::MatMul],
            OpKind::Rope => &[OpKind::Rope],
            OpKind::Attention => &[OpKind::Attention],
            OpKind::Softmax => &[OpKind::Softmax],
            OpKind::SiluMul => &[OpKind::SiluMul],
            OpKind::ElemAdd => &[OpKind::ElemAdd],
            OpKind::ElemMul => &[OpKind::ElemMul],
            OpKind::Argmax => &[OpKind::Argmax],
            OpKind::Sample => &[OpKind::Sample],
            OpKind::Copy => &[OpKind::Copy],
            OpKind::AllReduce => &[OpKind::AllReduce],
            OpKind::AllGather => &[OpKind::AllGather],
            OpKind::Other => &[OpKind::Other],
        }
    }

    /// Whether this kind is a collective between ranks (its time includes
    /// waiting for the slowest rank).
    pub const fn is_collective(self) -> bool {
        matches!(self, OpKind::AllReduce | OpKind::AllGather)
    }

    /// Whether this kind is one kernel doing the work of several.
    pub const fn is_fused(self) -> bool {
        self.covers().len() > 1
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

    #[test]
    fn fused_kinds_cover_plain_kinds_and_are_named_by_them() {
        for kind in OpKind::ALL {
            let covered = kind.covers();
            assert!(!covered.is_empty());
            if kind.is_fused() {
                assert!(
                    covered.iter().all(|part| !part.is_fused()),
                    "{kind} covers a fused kind"
                );
                let joined: Vec<&str> = covered.iter().map(|part| part.name()).collect();
                assert_eq!(
                    kind.name(),
                    joined.join("+"),
                    "a fused kind is named by what it covers"
                );
            } else {
                assert_eq!(covered, &[kind]);
            }
        }
    }
}
