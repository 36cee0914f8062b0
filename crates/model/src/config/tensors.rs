//! The checkpoint's tensor list: every tensor's name, shape and role, from
//! one table. Loading and generating weights, writing synthetic
//! checkpoints, counting tensors and counting bytes all read it, so a
//! tensor added here is added everywhere.

use std::iter::once;

use super::model_config::Config;

/// A size a tensor dimension takes from the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dimension {
    /// `vocab_size`.
    Vocabulary,
    /// `hidden_size`.
    Hidden,
    /// `intermediate_size`.
    Intermediate,
    /// `num_heads * head_dim`.
    Query,
    /// `num_kv_heads * head_dim`.
    KeyValue,
    /// `head_dim`: a per-head norm's weight, the same for every head.
    HeadDim,
    /// Experts of a sparse layer.
    Experts,
    /// Rows of one expert's gate and up projections.
    ExpertIntermediate,
}

/// One tensor of a decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LayerTensor {
    InputNorm,
    QueryProjection,
    KeyProjection,
    ValueProjection,
    QueryBias,
    KeyBias,
    ValueBias,
    QueryNorm,
    KeyNorm,
    OutputProjection,
    OutputBias,
    PostAttentionNorm,
    GateProjection,
    UpProjection,
    DownProjection,
    /// `[experts, hidden]` the router of a sparse layer.
    Router,
    /// `[experts, expert_intermediate, hidden]` every expert's gate projection, stacked.
    ExpertGate,
    /// `[experts, expert_intermediate, hidden]` every expert's up projection.
    ExpertUp,
    /// `[experts, hidden, expert_intermediate]` every expert's down projection.
    ExpertDown,
}

impl LayerTensor {
    /// Every layer tensor, in checkpoint order.
    pub const ALL: [LayerTensor; 19] = [
        LayerTensor::InputNorm,
        LayerTensor::QueryProjection,
        LayerTensor::KeyProjection,
        LayerTensor::ValueProjection,
        LayerTensor::QueryBias,
        LayerTensor::KeyBias,
        LayerTensor::ValueBias,
        LayerTensor::QueryNorm,
        LayerTensor::KeyNorm,
        LayerTensor::OutputProjection,
        LayerTensor::OutputBias,
        LayerTensor::PostAttentionNorm,
        LayerTensor::GateProjection,
        LayerTensor::UpProjection,
        LayerTensor::DownProjection,
        LayerTensor::Router,
        LayerTensor::ExpertGate,
        LayerTensor::ExpertUp,
        LayerTensor::ExpertDown,
    ];

    /// Whether this is one of a sparse layer's stacked expert tensors,
    /// which checkpoints keep per expert or stacked in other layouts
    /// (`experts_layout` resolves them).
    pub(crate) fn is_stacked_experts(self) -> bool {
        matches!(
            self,
            LayerTensor::ExpertGate | LayerTensor::ExpertUp | LayerTensor::ExpertDown
        )
    }

    /// The name after `model.layers.N.`, and the shape.
    fn layout(self) -> (&'static str, &'static [Dimension]) {
        use Dimension::{ExpertIntermediate, Experts, HeadDim, Hidden, Intermediate, KeyValue, Query};
        match self {
            LayerTensor::InputNorm => ("input_layernorm.weight", &[Hidden]),
            LayerTensor::QueryProjection => ("self_attn.q_proj.weight", &[Query, Hidden]),
            LayerTensor::KeyProjection => ("self_attn.k_proj.weight", &[KeyValue, Hidden]),
            LayerTensor::ValueProjection => ("self_attn.v_proj.weight", &[KeyValue, Hidden]),
            LayerTensor::QueryBias => ("self_attn.q_proj.bias", &[Query]),
            LayerTensor::KeyBias => ("self_attn.k_proj.bias", &[KeyValue]),
            LayerTensor::ValueBias => ("self_attn.v_proj.bias", &[KeyValue]),
            LayerTensor::QueryNorm => ("self_attn.q_norm.weight", &[HeadDim]),
            LayerTensor::KeyNorm => ("self_attn.k_norm.weight", &[HeadDim]),
            LayerTensor::OutputProjection => ("self_attn.o_proj.weight", &[Hidden, Query]),
            LayerTensor::OutputBias => ("self_attn.o_proj.bias", &[Hidden]),
            LayerTensor::PostAttentionNorm => ("post_attention_layernorm.weight", &[Hidden]),
            LayerTensor::GateProjection => ("mlp.gate_proj.weight", &[Intermediate, Hidden]),
            LayerTensor::UpProjection => ("mlp.up_proj.weight", &[Intermediate, Hidden]),
            LayerTensor::DownProjection => ("mlp.down_proj.weight", &[Hidden, Intermediate]),
            // Qwen3-MoE's router name; the stacked experts as transformers 5
            // holds them in memory, gate and up apart (see `experts_layout`).
            LayerTensor::Router => ("mlp.gate.weight", &[Experts, Hidden]),
            LayerTensor::ExpertGate => ("mlp.experts.gate_proj", &[Experts, ExpertIntermediate, Hidden]),
            LayerTensor::ExpertUp => ("mlp.experts.up_proj", &[Experts, ExpertIntermediate, Hidden]),
            LayerTensor::ExpertDown => ("mlp.experts.down_proj", &[Experts, Hidden, ExpertIntermediate]),
        }
    }

    /// Whether layer `layer` of `config` has this tensor (biases and the
    /// per-head norms are optional; a sparse layer has a router and
    /// experts where a dense one has its MLP).
    fn present(self, config: &Config, layer: usize) -> bool {
        let sparse = config
            .experts
            .as_ref()
            .is_some_and(|experts| experts.is_sparse(layer));
        match self {
            LayerTensor::QueryBias | LayerTensor::KeyBias | LayerTensor::ValueBias => config.qkv_bias,
            LayerTensor::OutputBias => config.o_bias,
            LayerTensor::QueryNorm | LayerTensor::KeyNorm => config.qk_norm,
            LayerTensor::GateProjection | LayerTensor::UpProjection | LayerTensor::DownProjection => !sparse,
            LayerTensor::Router
            | LayerTensor::ExpertGate
            | LayerTensor::ExpertUp
            | LayerTensor::ExpertDown => sparse,
            _ => true,
        }
    }
}

/// What a tensor is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TensorRole {
    /// `[vocab, hidden]` the embedding table.
    Embedding,
    /// A tensor of decoder layer `index`.
    Layer {
        /// The layer.
        index: usize,
        /// Which of its tensors.
        tensor: LayerTensor,
    },
    /// `[hidden]` the final RMSNorm.
    FinalNorm,
    /// `[vocab, hidden]` the LM head, absent when tied to the embedding.
    LmHead,
}

impl TensorRole {
    pub(crate) fn name(self) -> String {
        match self {
            TensorRole::Embedding => "model.embed_tokens.weight".to_string(),
            TensorRole::Layer { index, tensor } => format!("model.layers.{index}.{}", tensor.layout().0),
            TensorRole::FinalNorm => "model.norm.weight".to_string(),
            TensorRole::LmHead => "lm_head.weight".to_string(),
        }
    }

    pub(crate) fn dimensions(self) -> &'static [Dimension] {
        match self {
            TensorRole::Embedding | TensorRole::LmHead => &[Dimension::Vocabulary, Dimension::Hidden],
            TensorRole::Layer { tensor, .. } => tensor.layout().1,
            TensorRole::FinalNorm => &[Dimension::Hidden],
        }
    }
}

/// One tensor the checkpoint must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TensorSpec {
    /// Its name in the safetensors files.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// What it is for.
    pub role: TensorRole,
}

impl Config {
    /// The size of `dimension` (`None` where it overflows).
    fn checked_dimension(&self, dimension: Dimension) -> Option<u64> {
        let size = match dimension {
            Dimension::Vocabulary => self.vocab_size,
            Dimension::Hidden => self.hidden_size,
            Dimension::Intermediate => self.intermediate_size,
            Dimension::Query => self.num_heads.checked_mul(self.head_dim)?,
            Dimension::KeyValue => self.num_kv_heads.checked_mul(self.head_dim)?,
            Dimension::HeadDim => self.head_dim,
            Dimension::Experts => self.experts.as_ref().map_or(0, |experts| experts.count),
            Dimension::ExpertIntermediate => self
                .experts
                .as_ref()
                .map_or(0, |experts| experts.intermediate_size),
        };
        Some(size as u64)
    }

    /// The tensors decoder layer `layer` of this config has, in checkpoint order.
    fn layer_tensors(&self, layer: usize) -> impl Iterator<Item = LayerTensor> + '_ {
        LayerTensor::ALL
            .into_iter()
            .filter(move |tensor| tensor.present(self, layer))
    }

    /// The role of every tensor, in checkpoint order.
    fn tensor_roles(&self) -> impl Iterator<Item = TensorRole> + '_ {
        let layers = (0..self.num_layers).flat_map(|index| {
            self.layer_tensors(index)
                .map(move |tensor| TensorRole::Layer { index, tensor })
        });
        once(TensorRole::Embedding)
            .chain(layers)
            .chain(once(TensorRole::FinalNorm))
            .chain((!self.tie_word_embeddings).then_some(TensorRole::LmHead))
    }

    /// Every tensor the checkpoint must hold, with shape and role, in a
    /// fixed order (a validated config's sizes cannot overflow here).
    pub(crate) fn tensors(&self) -> impl Iterator<Item = TensorSpec> + '_ {
        self.tensor_roles().map(|role| TensorSpec {
            name: role.name(),
            shape: role
                .dimensions()
                .iter()
                .map(|&dimension| {
                    self.checked_dimension(dimension)
                        .expect("checked when the config was validated") as usize
                })
                .collect(),
            role,
        })
    }

    /// Every tensor the checkpoint must hold, with its shape, in a fixed order.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.tensors().map(|tensor| (tensor.name, tensor.shape)).collect()
    }

    /// The fewest tensors a checkpoint of this config holds (without
    /// listing their names): a sparse layer's gate and up may be one
    /// stacked tensor, and a layout that keeps each expert apart holds more.
    pub fn tensor_count(&self) -> usize {
        let global = 2 + usize::from(!self.tie_word_embeddings);
        let stacked_gate_up = self
            .experts
            .as_ref()
            .map_or(0, |experts| experts.sparse_layer_count());
        global
            + (0..self.num_layers)
                .map(|layer| self.layer_tensors(layer).count())
                .sum::<usize>()
            - stacked_gate_up
    }

    /// Bytes of all weights at `bytes_per_element`, in checked arithmetic
    /// (`None` on overflow), without listing the tensors.
    pub fn checked_parameter_bytes(&self, bytes_per_element: u64) -> Option<u64> {
        let elements = |role: TensorRole| {
            role.dimensions().iter().try_fold(1u64, |product, &dimension| {
                product.checked_mul(self.checked_dimension(dimension)?)
            })
        };
        let sum = |roles: &mut dyn Iterator<Item = TensorRole>| {
            let mut total = 0u64;
            for role in roles {
                total = total.checked_add(elements(role)?)?;
            }
            Some(total)
        };
        // Layers differ only in being dense or sparse: count one of each.
        let layer_elements = |layer: usize| {
            sum(&mut self
                .layer_tensors(layer)
                .map(|tensor| TensorRole::Layer { index: layer, tensor }))
        };
        let sparse_layers = self
            .experts
            .as_ref()
            .map_or(0, |experts| experts.sparse_layer_count());
        let dense_layers = self.num_layers - sparse_layers;
        let mut layers = 0u64;
        if let Some(sparse) = (0..self.num_layers).find(|&layer| {
            self.experts
                .as_ref()
                .is_some_and(|experts| experts.is_sparse(layer))
        }) {
            layers = layer_elements(sparse)?.checked_mul(sparse_layers as u64)?;
        }
        if let Some(dense) = (0..self.num_layers).find(|&layer| {
            !self
                .experts
                .as_ref()
                .is_some_and(|experts| experts.is_sparse(layer))
        }) {
            layers = layers.checked_add(layer_elements(dense)?.checked_mul(dense_layers as u64)?)?;
        }
        let global = sum(&mut self
            .tensor_roles()
            .filter(|role| !matches!(role, TensorRole::Layer { .. })))?;
        layers.checked_add(global)?.checked_mul(bytes_per_element)
    }
}
