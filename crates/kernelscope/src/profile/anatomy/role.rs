//! The one vocabulary of what a decoder's dispatch does for the model
//! (embedding, attention norm, q/k/v projection, ...), shared by kscope's
//! engine, which knows each dispatch's role as it encodes it, and by the
//! profiles of other programs, whose roles are found from their kernels'
//! names and order. Two engines line up role by role in the gap account.
//!
//! kscope's engine sets the roles as it encodes (`Step::role` in the model's
//! `engine/layer.rs`): the encoder gives a dispatch those of the steps it
//! covered that its op kind can do (`Roles::for_kind`), and an op may
//! declare one of its own (`Dispatch::role`: the kernels that quantize
//! activations, the MoE router's and experts' kernels). A dispatch keeps its
//! roles (`DispatchRecord::roles`, absent in older profiles); for a program
//! profiled from outside `annotate` finds them. The model's
//! `tests/engine_roles.rs` checks a dense and a mixture-of-experts token.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a dispatch does for the model, whatever engine ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Role {
    /// The token's row of the embedding table.
    Embedding,
    /// The RMSNorm before attention.
    AttentionNorm,
    /// The query, key and value projections.
    QkvProjection,
    /// RoPE on q and k (and per-head q/k norms), and the append to the KV cache.
    RopeKvWrite,
    /// Attention over the cache.
    Attention,
    /// The attention output projection, with its residual add.
    OutputProjection,
    /// The RMSNorm before the MLP.
    MlpNorm,
    /// The gate and up projections, with their activation (SiLU · up).
    GateUp,
    /// The down projection, with its residual add.
    Down,
    /// A mixture of experts' router: its logits, top-k and weights.
    Router,
    /// The chosen experts' projections and their weighted sum.
    Experts,
    /// The RMSNorm after the last layer.
    FinalNorm,
    /// The projection onto the vocabulary.
    LmHead,
    /// Picking the next token from the logits.
    Sampling,
    /// Activations quantized to 8-bit blocks for an integer mat-vec (llama.cpp's `quantize_q8_1`).
    ActivationQuantization,
    /// Anything else (copies of inputs and outputs, fills, casts).
    Other,
}

impl Role {
    /// Every role, in a decoder's order.
    pub const ALL: [Role; 16] = [
        Role::Embedding,
        Role::AttentionNorm,
        Role::QkvProjection,
        Role::RopeKvWrite,
        Role::Attention,
        Role::OutputProjection,
        Role::MlpNorm,
        Role::GateUp,
        Role::Down,
        Role::Router,
        Role::Experts,
        Role::FinalNorm,
        Role::LmHead,
        Role::Sampling,
        Role::ActivationQuantization,
        Role::Other,
    ];

    /// The stable name profiles store (`qkv_projection`).
    pub const fn key(self) -> &'static str {
        match self {
            Role::Embedding => "embedding",
            Role::AttentionNorm => "attention_norm",
            Role::QkvProjection => "qkv_projection",
            Role::RopeKvWrite => "rope_kv_write",
            Role::Attention => "attention",
            Role::OutputProjection => "output_projection",
            Role::MlpNorm => "mlp_norm",
            Role::GateUp => "gate_up",
            Role::Down => "down",
            Role::Router => "router",
            Role::Experts => "experts",
            Role::FinalNorm => "final_norm",
            Role::LmHead => "lm_head",
            Role::Sampling => "sampling",
            Role::ActivationQuantization => "activation_quantization",
            Role::Other => "other",
        }
    }

    /// The name reports show (`q/k/v projection`).
    pub const fn name(self) -> &'static str {
        match self {
            Role::Embedding => "embedding",
            Role::AttentionNorm => "attention norm",
            Role::QkvProjection => "q/k/v projection",
            Role::RopeKvWrite => "rope + KV write",
            Role::Attention => "attention",
            Role::OutputProjection => "output projection (+ residual)",
            Role::MlpNorm => "MLP norm",
            Role::GateUp => "gate/up (+ activation)",
            Role::Down => "down (+ residual)",
            Role::Router => "router",
            Role::Experts => "experts",
            Role::FinalNorm => "final norm",
            Role::LmHead => "LM head",
            Role::Sampling => "sampling",
            Role::ActivationQuantization => "activation quantization",
            Role::Other => "other",
        }
    }

    /// The role stored as `key`, if this build knows it.
    pub fn from_key(key: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.key() == key)
    }

    /// Whether the role belongs to a decoder layer (rather than before or
    /// after the layers).
    pub const fn in_layer(self) -> bool {
        !matches!(
            self,
            Role::Embedding | Role::FinalNorm | Role::LmHead | Role::Sampling | Role::Other
        )
    }

    /// Whether the role's main work is a weight matrix times the activations.
    pub const fn is_projection(self) -> bool {
        matches!(
            self,
            Role::QkvProjection
                | Role::OutputProjection
                | Role::GateUp
                | Role::Down
                | Role::Router
                | Role::Experts
                | Role::LmHead
        )
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The roles one dispatch covers: one for most, several for a fused kernel
/// (kscope's RMSNorm + q/k/v mat-vec), none where nothing said. A set of
/// bits in [`Role::ALL`]'s order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Roles(u16);

impl Roles {
    /// No role.
    pub const NONE: Roles = Roles(0);

    /// Just `role`.
    pub const fn one(role: Role) -> Roles {
        Roles(1 << role as u16)
    }

    /// Every role of `roles`.
    pub fn of(roles: &[Role]) -> Roles {
        roles.iter().fold(Roles::NONE, |set, &role| set.with(role))
    }

    /// These roles and `role`.
    #[must_use]
    pub const fn with(self, role: Role) -> Roles {
        Roles(self.0 | 1 << role as u16)
    }

    /// These roles and `other`'s.
    #[must_use]
    pub const fn union(self, other: Roles) -> Roles {
        Roles(self.0 | other.0)
    }

    /// Whether there is none.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether there is none, for serde's `skip_serializing_if` (which
    /// passes a reference).
    pub fn is_none(roles: &Roles) -> bool {
        roles.is_empty()
    }

    /// Whether `role` is among them.
    pub const fn contains(self, role: Role) -> bool {
        self.0 & (1 << role as u16) != 0
    }

    /// How many there are.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The roles, in [`Role::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Role> {
        Role::ALL.into_iter().filter(move |&role| self.contains(role))
    }

    /// The first role, in [`Role::ALL`]'s order.
    pub fn first(self) -> Option<Role> {
        self.iter().next()
    }

    /// `attention norm + q/k/v projection`, or `(none)`.
    pub fn describe(self) -> String {
        if self.is_empty() {
            return "(none)".into();
        }
        self.iter().map(Role::name).collect::<Vec<_>>().join(" + ")
    }
}

impl Roles {
    /// The roles a dispatch of `kind` takes from the steps it was encoded
    /// for (`self`), with `declared` (what its op says it does, such as
    /// quantizing activations) added: of the steps' roles, those work of
    /// that kind can do (a norm kernel in a fused norm + mat-vec group is
    /// the norm, not the projection), all of them where the kind says
    /// nothing (an unknown or `Other` kind) or none of them fits. A
    /// projection the op declares is the only projection it does (an
    /// experts' kernel in a group with the router is the experts'); the
    /// experts are only ever declared, since a plain mat-vec beside them is
    /// the router's.
    pub fn for_kind(self, kind: super::super::OpKind, declared: Roles) -> Roles {
        let doable = kind
            .covers()
            .iter()
            .map(|&primitive| roles_of_primitive(primitive))
            .try_fold(Roles::NONE, |all, roles| Some(all.union(roles?)));
        let kept = match doable {
            Some(doable) if !kind.covers().is_empty() => Roles(self.0 & doable.0),
            _ => self,
        };
        let kept = if kept.is_empty() && declared.is_empty() {
            self
        } else {
            kept
        };
        let kept = if declared.iter().any(Role::is_projection) {
            kept.iter()
                .filter(|role| !role.is_projection())
                .fold(Roles::NONE, Roles::with)
        } else {
            kept
        };
        kept.union(declared)
    }
}

/// The roles work of `primitive` can do; `None` for any.
fn roles_of_primitive(primitive: super::super::Primitive) -> Option<Roles> {
    use super::super::Primitive::*;
    let projections = Roles::of(&[
        Role::QkvProjection,
        Role::OutputProjection,
        Role::GateUp,
        Role::Down,
        Role::Router,
        Role::LmHead,
    ]);
    Some(match primitive {
        Embedding => Roles::one(Role::Embedding),
        RmsNorm => Roles::of(&[Role::AttentionNorm, Role::MlpNorm, Role::FinalNorm]),
        MatVec | MatMul | AllReduce | AllGather | ReduceScatter => projections,
        Rope | Copy => Roles::one(Role::RopeKvWrite),
        Attention | Softmax => Roles::one(Role::Attention),
        SiluMul => Roles::one(Role::GateUp),
        ElemAdd => Roles::of(&[Role::OutputProjection, Role::Down]),
        Argmax | Sample => Roles::one(Role::Sampling),
        // A broadcast, point-to-point traffic or a kind no name says can
        // serve any step.
        ElemMul | Broadcast | SendRecv | Collective | Other => return None,
    })
}

impl From<Role> for Roles {
    fn from(role: Role) -> Roles {
        Roles::one(role)
    }
}

impl Serialize for Roles {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(Role::key))
    }
}

impl<'de> Deserialize<'de> for Roles {
    /// A role this build does not know (written by a newer kscope) reads as
    /// `other`, so the profile still loads and accounts for its time.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let keys = Vec::<std::borrow::Cow<str>>::deserialize(deserializer)?;
        Ok(keys
            .iter()
            .map(|key| Role::from_key(key).unwrap_or(Role::Other))
            .fold(Roles::NONE, Roles::with))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_keeps_its_key_and_bit() {
        for (position, role) in Role::ALL.into_iter().enumerate() {
            assert_eq!(role as usize, position);
            assert_eq!(Role::from_key(role.key()), Some(role));
            assert_eq!(Roles::one(role).iter().collect::<Vec<_>>(), vec![role]);
        }
        let keys: std::collections::HashSet<_> = Role::ALL.iter().map(|role| role.key()).collect();
        assert_eq!(keys.len(), Role::ALL.len());
    }

    #[test]
    fn roles_round_trip_through_json_and_unknown_ones_read_as_other() {
        let fused = Roles::of(&[Role::QkvProjection, Role::AttentionNorm]);
        let json = serde_json::to_string(&fused).unwrap();
        assert_eq!(json, r#"["attention_norm","qkv_projection"]"#);
        assert_eq!(serde_json::from_str::<Roles>(&json).unwrap(), fused);
        let newer: Roles = serde_json::from_str(r#"["lm_head","vision_tower"]"#).unwrap();
        assert_eq!(newer, Roles::of(&[Role::LmHead, Role::Other]));
        assert_eq!(fused.describe(), "attention norm + q/k/v projection");
        assert_eq!(fused.len(), 2);
        assert!(Roles::NONE.is_empty());
    }

    #[test]
    fn a_fused_group_gives_each_kernel_the_roles_its_kind_can_do() {
        use crate::profile::{OpKind, Primitive};
        let group = Roles::of(&[Role::AttentionNorm, Role::QkvProjection]);
        let quantize = Roles::one(Role::ActivationQuantization);
        // kscope's quantized group: a norm that quantizes, then the mat-vecs.
        assert_eq!(
            group.for_kind(OpKind::RmsNorm, quantize),
            Roles::of(&[Role::AttentionNorm, Role::ActivationQuantization])
        );
        assert_eq!(
            group.for_kind(OpKind::MatVec, Roles::NONE),
            Roles::one(Role::QkvProjection)
        );
        // bf16's one kernel does both.
        let fused = OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec]);
        assert_eq!(group.for_kind(fused, Roles::NONE), group);
        // A quantize before the output projection only quantizes.
        assert_eq!(
            Roles::one(Role::OutputProjection).for_kind(OpKind::Copy, quantize),
            quantize
        );
        // A kind that fits none of the roles, or says nothing, keeps them all.
        assert_eq!(
            Roles::one(Role::Router).for_kind(OpKind::Softmax, Roles::NONE),
            Roles::one(Role::Router)
        );
        assert_eq!(group.for_kind(OpKind::Other, Roles::NONE), group);
    }

    #[test]
    fn a_mixture_of_experts_group_tells_the_router_from_the_experts() {
        use crate::profile::{OpKind, Primitive};
        // kscope's fused MoE block: norm + router mat-vec, route, the experts.
        let group = Roles::of(&[Role::MlpNorm, Role::Router, Role::Experts]);
        let norm_matvec = OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec]);
        assert_eq!(
            group.for_kind(norm_matvec, Roles::NONE),
            Roles::of(&[Role::MlpNorm, Role::Router])
        );
        let route = group.for_kind(OpKind::Softmax, Roles::one(Role::Router));
        assert_eq!(route, Roles::one(Role::Router));
        let gate_up = OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]);
        assert_eq!(
            group.for_kind(gate_up, Roles::one(Role::Experts)),
            Roles::one(Role::Experts)
        );
        let norm_gate_up = OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec, Primitive::SiluMul]);
        assert_eq!(
            group.for_kind(norm_gate_up, Roles::one(Role::Experts)),
            Roles::of(&[Role::MlpNorm, Role::Experts])
        );
        // Prefill's experts run through plain GEMMs, encoded one step at a time.
        assert_eq!(
            Roles::one(Role::Experts).for_kind(OpKind::MatMul, Roles::NONE),
            Roles::one(Role::Experts)
        );
    }
}
