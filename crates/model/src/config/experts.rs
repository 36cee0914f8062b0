//! A mixture-of-experts feed-forward (Qwen3-MoE, Mixtral): how many experts
//! a layer has, how many each token is routed to, their size, and which
//! layers are sparse. Read from `config.json` as transformers reads it;
//! the fields of other MoE families, which change the math in ways not
//! implemented here, are refused by name.

use serde_json::Value;

use super::architecture::Architecture;
use super::fields::{Fields, short};
use super::limits::MAX_DIMENSION;
use crate::error::Result;

/// The most experts a layer may have: far above any released model (256),
/// low enough that per-expert tables stay small for a hostile config.
pub const MAX_EXPERTS: usize = 4096;

/// The mixture-of-experts part of a config.
#[derive(Clone, Debug, PartialEq)]
pub struct Experts {
    /// Experts in each sparse layer.
    pub count: usize,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub per_token: usize,
    /// Rows of each expert's gate and up projections (Qwen3-MoE's
    /// `moe_intermediate_size`, Mixtral's `intermediate_size`).
    pub intermediate_size: usize,
    /// Whether the chosen experts' weights are renormalised to sum to 1
    /// (Qwen3-MoE's `norm_topk_prob`; always for Mixtral, whose softmax over
    /// the chosen logits is the same thing).
    pub normalize_weights: bool,
    /// For each layer, whether it is sparse (routes to experts) or has the
    /// dense MLP of the config's `intermediate_size` (Qwen3-MoE's
    /// `mlp_only_layers` and `decoder_sparse_step`).
    pub sparse_layers: Vec<bool>,
}

impl Experts {
    /// Whether layer `layer` routes to experts.
    pub fn is_sparse(&self, layer: usize) -> bool {
        self.sparse_layers.get(layer).copied().unwrap_or(false)
    }

    /// Sparse layers.
    pub fn sparse_layer_count(&self) -> usize {
        self.sparse_layers.iter().filter(|&&sparse| sparse).count()
    }

    /// The fields that describe these experts in `config.json`, as
    /// transformers writes them for `architecture`.
    pub(super) fn json_fields(&self, architecture: Architecture) -> Vec<(&'static str, Value)> {
        match architecture {
            Architecture::Mixtral => vec![
                ("num_local_experts", self.count.into()),
                ("num_experts_per_tok", self.per_token.into()),
                ("router_jitter_noise", 0.0.into()),
                ("output_router_logits", false.into()),
            ],
            _ => {
                let dense: Vec<Value> = (0..self.sparse_layers.len())
                    .filter(|&layer| !self.is_sparse(layer))
                    .map(Value::from)
                    .collect();
                vec![
                    ("num_experts", self.count.into()),
                    ("num_experts_per_tok", self.per_token.into()),
                    ("moe_intermediate_size", self.intermediate_size.into()),
                    ("norm_topk_prob", self.normalize_weights.into()),
                    ("decoder_sparse_step", 1.into()),
                    ("mlp_only_layers", Value::Array(dense)),
                    ("output_router_logits", false.into()),
                ]
            }
        }
    }
}

/// Fields of MoE families other than the two run here (shared experts,
/// grouped or biased routing, scaled routing weights, dense leading layers
/// by another name). Each changes the math, so a config that sets one is
/// refused by name rather than run without it.
const FOREIGN_EXPERT_FIELDS: [&str; 12] = [
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "num_shared_experts",
    "moe_layer_freq",
    "first_k_dense_replace",
    "topk_method",
    "routed_scaling_factor",
    "scoring_func",
    "n_group",
    "topk_group",
    "moe_shared_expert_intermediate_size",
    "num_experts_group",
];

/// The experts `fields` describes for `architecture`: `None` for a dense
/// family (which must not name experts), else the validated experts of
/// `num_layers` layers; `intermediate_size` is the config's own.
pub(super) fn read(
    fields: &Fields<'_>,
    architecture: Architecture,
    class: &str,
    num_layers: usize,
    intermediate_size: usize,
) -> Result<Option<Experts>> {
    for field in FOREIGN_EXPERT_FIELDS {
        if let Some(value) = fields.get(field)
            && !matches!(value, Value::Bool(false))
            && value.as_u64() != Some(0)
        {
            return Err(fields.invalid(format!(
                "`{field}` = {} is not part of {class} and changes the math: refusing to run without it",
                short(value)
            )));
        }
    }
    let count_field = match architecture {
        Architecture::Qwen3Moe => "num_experts",
        Architecture::Mixtral => "num_local_experts",
        _ => {
            for field in ["num_experts", "num_local_experts", "n_routed_experts"] {
                if let Some(value) = fields.get(field)
                    && !matches!(value, Value::Bool(false))
                    && value.as_u64() != Some(0)
                {
                    return Err(fields.invalid(format!(
                        "`{field}` = {} is not part of {class} and changes the math: refusing to run without it",
                        short(value)
                    )));
                }
            }
            return Ok(None);
        }
    };
    // transformers' defaults where a field is absent (its config classes').
    let (default_count, default_per_token) = match architecture {
        Architecture::Mixtral => (8, 2),
        _ => (128, 8),
    };
    // transformers maps each family's name onto the other's (5.x writes
    // Qwen3-MoE's count as `num_local_experts`): either is read, and where
    // a file gives both they must agree.
    let other_field = if count_field == "num_experts" {
        "num_local_experts"
    } else {
        "num_experts"
    };
    let count = match (fields.dimension(count_field)?, fields.dimension(other_field)?) {
        (Some(count), Some(other)) if count != other => {
            return Err(fields.invalid(format!(
                "`{count_field}` ({count}) and `{other_field}` ({other}) disagree"
            )));
        }
        (Some(count), _) | (None, Some(count)) => count,
        (None, None) => default_count,
    };
    if count > MAX_EXPERTS {
        return Err(fields.invalid(format!(
            "`{count_field}` = {count} is more experts than this engine accepts ({MAX_EXPERTS})"
        )));
    }
    let per_token = fields
        .dimension("num_experts_per_tok")?
        .unwrap_or(default_per_token);
    let most_chosen = kernelscope::ops::moe::route::MOST_CHOSEN;
    if per_token > count || per_token > most_chosen {
        return Err(fields.invalid(format!(
            "`num_experts_per_tok` = {per_token} must be at most `{count_field}` ({count}) and at most {most_chosen}"
        )));
    }
    let (expert_intermediate, normalize_weights, sparse_layers) = match architecture {
        Architecture::Mixtral => (intermediate_size, true, vec![true; num_layers]),
        _ => {
            let expert_intermediate = fields.dimension("moe_intermediate_size")?.unwrap_or(768);
            let normalize = fields.boolean("norm_topk_prob")?.unwrap_or(false);
            let step = fields.dimension("decoder_sparse_step")?.unwrap_or(1);
            let dense = dense_layers(fields, num_layers)?;
            let sparse = (0..num_layers)
                .map(|layer| !dense.contains(&layer) && (layer + 1).is_multiple_of(step))
                .collect();
            (expert_intermediate, normalize, sparse)
        }
    };
    if (count as u64) * (expert_intermediate as u64) > MAX_DIMENSION {
        return Err(fields.invalid(format!(
            "{count} experts of {expert_intermediate} rows are more rows than one tensor may hold ({MAX_DIMENSION})"
        )));
    }
    Ok(Some(Experts {
        count,
        per_token,
        intermediate_size: expert_intermediate,
        normalize_weights,
        sparse_layers,
    }))
}

/// `mlp_only_layers`: the layers with a dense MLP, each below `num_layers`.
fn dense_layers(fields: &Fields<'_>, num_layers: usize) -> Result<Vec<usize>> {
    match fields.get("mlp_only_layers") {
        None => Ok(Vec::new()),
        Some(Value::Array(list)) => list
            .iter()
            .map(|value| match value.as_u64() {
                Some(layer) if layer < num_layers as u64 => Ok(layer as usize),
                _ => Err(fields.invalid(format!(
                    "`mlp_only_layers` holds {}, not a layer below num_hidden_layers ({num_layers})",
                    short(value)
                ))),
            })
            .collect(),
        Some(other) => Err(fields.invalid(format!(
            "`mlp_only_layers` must be a list of layers, found {}",
            short(other)
        ))),
    }
}
