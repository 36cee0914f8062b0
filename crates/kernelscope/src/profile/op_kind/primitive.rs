//! The operations this build knows by name: what every op kind is made of
//! (a fused kind is a list of them), and the names profiles store.

use std::fmt;

/// An operation this build knows: what fused kinds are made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Primitive {
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
    /// Sum over the ranks of a tensor-parallel group (a collective).
    AllReduce,
    /// Every rank's part, gathered on every rank (a collective).
    AllGather,
    /// The sum over the ranks, each rank keeping its share (a collective).
    ReduceScatter,
    /// One rank's tensor copied to every rank (a collective).
    Broadcast,
    /// Point-to-point sends and receives between ranks (NCCL's `SendRecv`).
    SendRecv,
    /// A collective whose kind its kernel does not name (NCCL's generic
    /// kernels, which run several kinds in one launch).
    Collective,
    /// Anything not labeled.
    #[default]
    Other,
}

impl Primitive {
    /// Every primitive, in declaration order.
    pub const ALL: [Primitive; 20] = [
        Primitive::Embedding,
        Primitive::RmsNorm,
        Primitive::MatVec,
        Primitive::MatMul,
        Primitive::Rope,
        Primitive::Attention,
        Primitive::Softmax,
        Primitive::SiluMul,
        Primitive::ElemAdd,
        Primitive::ElemMul,
        Primitive::Argmax,
        Primitive::Sample,
        Primitive::Copy,
        Primitive::AllReduce,
        Primitive::AllGather,
        Primitive::ReduceScatter,
        Primitive::Broadcast,
        Primitive::SendRecv,
        Primitive::Collective,
        Primitive::Other,
    ];

    /// The stable name used in reports and JSON profiles.
    pub const fn name(self) -> &'static str {
        match self {
            Primitive::Embedding => "Embedding",
            Primitive::RmsNorm => "RmsNorm",
            Primitive::MatVec => "MatVec",
            Primitive::MatMul => "MatMul",
            Primitive::Rope => "Rope",
            Primitive::Attention => "Attention",
            Primitive::Softmax => "Softmax",
            Primitive::SiluMul => "SiluMul",
            Primitive::ElemAdd => "ElemAdd",
            Primitive::ElemMul => "ElemMul",
            Primitive::Argmax => "Argmax",
            Primitive::Sample => "Sample",
            Primitive::Copy => "Copy",
            Primitive::AllReduce => "AllReduce",
            Primitive::AllGather => "AllGather",
            Primitive::ReduceScatter => "ReduceScatter",
            Primitive::Broadcast => "Broadcast",
            Primitive::SendRecv => "SendRecv",
            Primitive::Collective => "Collective",
            Primitive::Other => "Other",
        }
    }

    /// Whether it is a collective between ranks (its time includes waiting
    /// for the slowest rank).
    pub const fn is_collective(self) -> bool {
        matches!(
            self,
            Primitive::AllReduce
                | Primitive::AllGather
                | Primitive::ReduceScatter
                | Primitive::Broadcast
                | Primitive::SendRecv
                | Primitive::Collective
        )
    }

    /// The primitive named `name` exactly.
    pub(super) fn named(name: &str) -> Option<Primitive> {
        Primitive::ALL
            .into_iter()
            .find(|primitive| primitive.name() == name)
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
