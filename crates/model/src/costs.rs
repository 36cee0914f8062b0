//! What a decode token reads of a model, tensor by tensor, with the role
//! that reads it: the bytes and flops `kscope profile --model` and
//! `kscope compare --model` give a program profiled from outside (which
//! declares none). Tensors are named by llama.cpp's GGUF convention
//! (`blk.3.attn_q.weight`) or Hugging Face's (`model.layers.3.self_attn.
//! q_proj.weight`); the shapes and formats are the file's own.

use std::path::Path;

use kernelscope::profile::{ModelCosts, Role, TensorCost};

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::gguf_model::GgufModel;

/// The costs of the model at `path`: a GGUF file or a Hugging Face
/// directory (its `*.safetensors` headers; the weights are not read),
/// with the weights' format and the model's shape for the profile.
pub fn model_costs(path: &Path) -> Result<(ModelCosts, Config, String)> {
    if path.is_dir() {
        return directory_costs(path);
    }
    let model = GgufModel::open(path)?;
    let per_token = model
        .config
        .experts
        .as_ref()
        .map(|experts| experts.per_token as u64);
    let mut tensors = Vec::new();
    let mut has_output = false;
    let mut embedding = None;
    for tensor in model.file.tensors() {
        let name = tensor.name();
        let dims = tensor.dims();
        let elements = tensor.element_count();
        let bytes = tensor.byte_len() as u64;
        has_output |= name == "output.weight";
        if name == "token_embd.weight" {
            embedding = Some((bytes, elements, dims.get(1).copied().unwrap_or(1)));
        }
        if let Some(cost) = cost_of(
            name,
            &gguf_role(name),
            bytes,
            elements,
            dims.get(2).copied(),
            per_token,
        ) {
            tensors.push(cost);
        }
    }
    if let (false, Some((bytes, elements, _))) = (has_output, embedding) {
        // Tied: the LM head reads the whole embedding table.
        tensors.push(TensorCost {
            name: "token_embd.weight (tied LM head)".into(),
            layer: None,
            role: Role::LmHead,
            bytes,
            flops: 2 * elements,
        });
    }
    let costs = ModelCosts {
        model: path.display().to_string(),
        tensors,
    };
    Ok((costs, model.config.clone(), model.file_type_name()))
}

/// `name` as `PREFIX<layer>.<rest>`: the layer and the rest, or, for a
/// name outside the layers, the role `outside` gives it (none for a name
/// it does not list, or a layer that is not a number).
fn split_layer<'a>(
    name: &'a str,
    prefix: &str,
    outside: &[(&str, Role)],
) -> Result<(usize, &'a str), Option<Role>> {
    let Some(rest) = name.strip_prefix(prefix) else {
        return Err(outside
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, role)| role));
    };
    let (layer, tensor) = rest.split_once('.').ok_or(None)?;
    Ok((layer.parse::<usize>().map_err(|_| None)?, tensor))
}

/// Where a GGUF tensor sits: its layer and its name within the layer.
fn gguf_role(name: &str) -> (Option<usize>, Option<Role>) {
    const OUTSIDE: [(&str, Role); 3] = [
        ("token_embd.weight", Role::Embedding),
        ("output_norm.weight", Role::FinalNorm),
        ("output.weight", Role::LmHead),
    ];
    let (layer, tensor) = match split_layer(name, "blk.", &OUTSIDE) {
        Ok(split) => split,
        Err(role) => return (None, role),
    };
    let part = tensor.trim_end_matches(".weight").trim_end_matches(".bias");
    let role = match part {
        "attn_norm" => Role::AttentionNorm,
        "attn_q" | "attn_k" | "attn_v" | "attn_qkv" => Role::QkvProjection,
        "attn_q_norm" | "attn_k_norm" => Role::RopeKvWrite,
        "attn_output" => Role::OutputProjection,
        "ffn_norm" => Role::MlpNorm,
        "ffn_gate" | "ffn_up" => Role::GateUp,
        "ffn_down" => Role::Down,
        "ffn_gate_inp" => Role::Router,
        "ffn_gate_exps" | "ffn_up_exps" | "ffn_down_exps" => Role::Experts,
        _ => return (Some(layer), None),
    };
    (Some(layer), Some(role))
}

/// Where a Hugging Face tensor sits.
fn hub_role(name: &str) -> (Option<usize>, Option<Role>) {
    const OUTSIDE: [(&str, Role); 3] = [
        ("embed_tokens.weight", Role::Embedding),
        ("norm.weight", Role::FinalNorm),
        ("lm_head.weight", Role::LmHead),
    ];
    let name = name.strip_prefix("model.").unwrap_or(name);
    let (layer, tensor) = match split_layer(name, "layers.", &OUTSIDE) {
        Ok(split) => split,
        Err(role) => return (None, role),
    };
    let has = |part: &str| tensor.contains(part);
    let role = if tensor.starts_with("input_layernorm") {
        Role::AttentionNorm
    } else if tensor.starts_with("post_attention_layernorm") {
        Role::MlpNorm
    } else if has("q_norm") || has("k_norm") {
        Role::RopeKvWrite
    } else if has("q_proj") || has("k_proj") || has("v_proj") || has("qkv_proj") {
        Role::QkvProjection
    } else if has("o_proj") {
        Role::OutputProjection
    } else if has("experts") {
        Role::Experts
    } else if has("mlp.gate.") || has("block_sparse_moe.gate.") {
        Role::Router
    } else if has("gate_proj") || has("up_proj") || has("gate_up_proj") {
        Role::GateUp
    } else if has("down_proj") {
        Role::Down
    } else {
        return (Some(layer), None);
    };
    (Some(layer), Some(role))
}

/// One tensor's cost: norms and matrices are read whole (a matrix with
/// two flops a weight), the embedding one row of `rows`, experts `k / E`
/// of a stacked tensor (`experts` its count) or of each expert's own.
fn cost_of(
    name: &str,
    (layer, role): &(Option<usize>, Option<Role>),
    bytes: u64,
    elements: u64,
    experts: Option<u64>,
    per_token: Option<u64>,
) -> Option<TensorCost> {
    let role = (*role)?;
    let (bytes, flops) = match role {
        Role::Embedding => return None,
        Role::AttentionNorm | Role::MlpNorm | Role::FinalNorm | Role::RopeKvWrite => (bytes, 0),
        Role::Experts => {
            let (chosen, of) = (
                per_token.unwrap_or(1),
                experts.filter(|&count| count > 1).unwrap_or(1),
            );
            let share = |value: u64| if of > 1 { value / of * chosen } else { value };
            (share(bytes), share(2 * elements))
        }
        _ => (bytes, 2 * elements),
    };
    Some(TensorCost {
        name: name.to_string(),
        layer: *layer,
        role,
        bytes,
        flops,
    })
}

/// A Hugging Face directory's costs, from its safetensors headers.
fn directory_costs(path: &Path) -> Result<(ModelCosts, Config, String)> {
    let config = Config::from_directory(path)?;
    let per_token = config.experts.as_ref().map(|experts| experts.per_token as u64);
    let per_expert = config.experts.as_ref().map(|experts| experts.count as u64);
    let mut files: Vec<_> = std::fs::read_dir(path)
        .map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|file| {
            file.extension()
                .is_some_and(|extension| extension == "safetensors")
        })
        .collect();
    files.sort();
    let mut tensors = Vec::new();
    let (mut has_head, mut embedding) = (false, None);
    let mut dtype = String::new();
    for file in &files {
        let io = |source| ModelError::Io {
            path: file.clone(),
            source,
        };
        let opened = std::fs::File::open(file).map_err(io)?;
        // SAFETY: the file is mapped read-only and only its header is
        // parsed; a file changed underneath gives wrong costs, not
        // undefined behaviour in safe code that reads the header's bytes.
        let bytes = unsafe { memmap2::Mmap::map(&opened) }.map_err(io)?;
        for tensor in crate::loader::read_safetensors_header(&bytes, file)? {
            let elements: u64 = tensor.shape.iter().map(|&dim| dim as u64).product();
            has_head |= tensor.name.ends_with("lm_head.weight");
            if tensor.name.ends_with("embed_tokens.weight") {
                embedding = Some((tensor.byte_len as u64, elements));
                dtype = tensor.dtype_name.clone();
            }
            let (layer, role) = hub_role(&tensor.name);
            // One tensor per expert: each is one of `count`.
            let experts = if tensor.name.contains("experts.") && tensor.shape.len() == 2 {
                per_expert
            } else {
                tensor
                    .shape
                    .first()
                    .map(|&count| count as u64)
                    .filter(|_| tensor.shape.len() == 3)
            };
            if let Some(cost) = cost_of(
                &tensor.name,
                &(layer, role),
                tensor.byte_len as u64,
                elements,
                experts,
                per_token,
            ) {
                tensors.push(cost);
            }
        }
    }
    if let (false, Some((bytes, elements))) = (has_head, embedding) {
        tensors.push(TensorCost {
            name: "model.embed_tokens.weight (tied LM head)".into(),
            layer: None,
            role: Role::LmHead,
            bytes,
            flops: 2 * elements,
        });
    }
    if tensors.is_empty() {
        return Err(ModelError::Safetensors {
            path: path.to_path_buf(),
            problem: "no tensor named as a decoder's (model.layers.N...) in its *.safetensors files".into(),
        });
    }
    let costs = ModelCosts {
        model: path.display().to_string(),
        tensors,
    };
    Ok((costs, config, dtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_names_of_both_conventions_map_to_roles() {
        assert_eq!(
            gguf_role("blk.3.attn_q.weight"),
            (Some(3), Some(Role::QkvProjection))
        );
        assert_eq!(
            gguf_role("blk.0.ffn_down_exps.weight"),
            (Some(0), Some(Role::Experts))
        );
        assert_eq!(
            gguf_role("blk.12.ffn_gate_inp.weight"),
            (Some(12), Some(Role::Router))
        );
        assert_eq!(gguf_role("output.weight"), (None, Some(Role::LmHead)));
        assert_eq!(gguf_role("rope_freqs.weight"), (None, None));
        assert_eq!(
            hub_role("model.layers.7.self_attn.o_proj.weight"),
            (Some(7), Some(Role::OutputProjection))
        );
        assert_eq!(
            hub_role("model.layers.1.mlp.experts.5.down_proj.weight"),
            (Some(1), Some(Role::Experts))
        );
        assert_eq!(
            hub_role("model.layers.1.mlp.gate.weight"),
            (Some(1), Some(Role::Router))
        );
        assert_eq!(
            hub_role("model.layers.2.mlp.up_proj.weight"),
            (Some(2), Some(Role::GateUp))
        );
        assert_eq!(hub_role("lm_head.weight"), (None, Some(Role::LmHead)));
    }

    #[test]
    fn experts_cost_the_chosen_share() {
        let cost = cost_of(
            "x",
            &(Some(0), Some(Role::Experts)),
            1 << 20,
            1 << 21,
            Some(128),
            Some(8),
        )
        .unwrap();
        assert_eq!(cost.bytes, (1 << 20) / 128 * 8);
        assert_eq!(cost.flops, (2 << 21) / 128 * 8);
        let dense = cost_of("y", &(Some(0), Some(Role::Down)), 1000, 500, None, None).unwrap();
        assert_eq!((dense.bytes, dense.flops), (1000, 1000));
    }
}
