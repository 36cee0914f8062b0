//! A decoder's anatomy in a profile: which layer each dispatch ran in and
//! what it did for the model (its [`Role`]). kscope's engine says both as
//! it encodes; for another program (llama.cpp, PyTorch) they are found
//! from the records: layers from the program's own NVTX marks
//! (`layers.3`) where it made them, else from the period of each token's
//! kernel sequence (a decoder runs the same kernels once per layer, the
//! attention kernel once in each); roles from each kernel's class (its
//! name) and where it stands between the layer's landmarks
//! ([`structure`]). Found layers are written as kscope names them
//! (`layer.N`), so the report, the per-layer chart and `compare` line
//! two engines up layer by layer.

mod classes;
mod costs;
mod role;
mod structure;

use std::collections::HashMap;

use classes::{Class, Unit, classify, symbol_name};
pub use costs::{GivenCosts, ModelCosts, TensorCost, apply_model_costs};
pub use role::{Role, Roles};
use structure::{Template, head_roles, layer_roles, tail_roles};

use super::{DispatchRecord, Profile, TokenRecord};

/// How a profile's layers were found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayersFrom {
    /// kscope's engine named them as it ran.
    Engine,
    /// The scopes the run recorded named them: a program's NVTX ranges
    /// (`layers.3`), or kscope's own in a profile without roles.
    Nvtx,
    /// The period of the kernel sequence: `period` kernels a layer.
    Period {
        /// Kernels in one layer.
        period: usize,
    },
    /// Nothing found: no NVTX layer marks, and no token whose kernels
    /// repeat around an attention kernel.
    NotFound,
}

/// What [`annotate`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anatomy {
    /// How the layers were found.
    pub layers_from: LayersFrom,
    /// Layers in a decode token (the most common count over the tokens).
    pub layers: usize,
}

impl Anatomy {
    /// One line for a report header (`16 layers, by the period of each
    /// token's kernels (19 a layer); roles from kernel names and order`).
    pub fn describe(&self) -> String {
        let layers = self.layers;
        match &self.layers_from {
            LayersFrom::Engine => format!("{layers} layers and every role as kscope's engine named them"),
            LayersFrom::Nvtx => {
                format!("{layers} layers from the scopes the run recorded (NVTX ranges, or kscope's own); roles from kernel names and order")
            }
            LayersFrom::Period { period } => format!(
                "{layers} layers found by the period of each token's kernels ({period} a layer); roles from kernel names and order"
            ),
            LayersFrom::NotFound => {
                "no layers found (no NVTX layer ranges, no kernel sequence repeating around an attention kernel); roles not assigned".into()
            }
        }
    }
}

/// Finds the layers and roles of a profile's dispatches, where its
/// dispatches carry no roles (a program profiled from outside, or a
/// profile written before roles were recorded), and writes them in:
/// each dispatch's roles, and the scope of one in a found layer
/// (`layer.N`, before its own NVTX scope) or before or after the layers
/// (`embed`, `lm_head`, `sample`, where it had none). The description
/// goes into `conditions.anatomy`. A profile whose dispatches have roles
/// is left as it is.
pub fn annotate(profile: &mut Profile) -> Anatomy {
    if profile
        .dispatches
        .iter()
        .any(|dispatch| !dispatch.roles.is_empty())
    {
        let anatomy = Anatomy {
            layers_from: LayersFrom::Engine,
            layers: engine_layers(&profile.dispatches),
        };
        profile
            .conditions
            .anatomy
            .get_or_insert_with(|| anatomy.describe());
        return anatomy;
    }
    let anatomy = annotate_records(&mut profile.dispatches, &profile.tokens);
    for rank in &mut profile.ranks {
        annotate_records(&mut rank.dispatches, &rank.tokens);
    }
    profile.conditions.anatomy = Some(anatomy.describe());
    anatomy
}

/// Layers in kscope's own records: distinct `layer.N` scopes.
fn engine_layers(dispatches: &[DispatchRecord]) -> usize {
    let mut layers: Vec<&str> = dispatches
        .iter()
        .filter_map(|dispatch| {
            let mut parts = dispatch.scope.splitn(3, '.');
            (parts.next() == Some("layer")).then(|| parts.next()).flatten()
        })
        .collect();
    layers.sort_unstable();
    layers.dedup();
    layers.len()
}

/// The layer number an NVTX scope names (`layers.3`, `model/layers.3/mlp`,
/// `h.3`, `blocks.3`), if any.
fn nvtx_layer(scope: &str) -> Option<(usize, String)> {
    const WORDS: [&str; 5] = ["layers", "layer", "h", "blocks", "block"];
    let parts: Vec<&str> = scope.split(['/', '.', ':', ' ']).collect();
    parts.windows(2).find_map(|pair| {
        let number = pair[1].parse::<usize>().ok()?;
        WORDS
            .contains(&pair[0])
            .then(|| (number, format!("{}.{}", pair[0], pair[1])))
    })
}

/// [`annotate`] over one rank's records.
fn annotate_records(dispatches: &mut [DispatchRecord], tokens: &[TokenRecord]) -> Anatomy {
    let mut symbols: HashMap<String, u32> = HashMap::new();
    let units: Vec<Unit> = dispatches
        .iter()
        .map(|dispatch| {
            let name = symbol_name(&dispatch.kernel);
            let next = symbols.len() as u32;
            let symbol = *symbols.entry(name).or_insert(next);
            Unit {
                symbol,
                ..classify(&dispatch.kernel, &dispatch.op_kind.name())
            }
        })
        .collect();
    // Each token's dispatches, in the order they ran.
    let mut by_token: HashMap<u32, Vec<usize>> = HashMap::new();
    for (position, dispatch) in dispatches.iter().enumerate() {
        if let Some(token) = dispatch.token {
            by_token.entry(token).or_default().push(position);
        }
    }
    for positions in by_token.values_mut() {
        positions.sort_by_key(|&position| (dispatches[position].start_ns, position));
    }
    let decode: Vec<u32> = {
        let timed = tokens.iter().filter(|token| by_token.contains_key(&token.index));
        let decode: Vec<u32> = timed
            .clone()
            .filter(|token| token.phase == super::Phase::Decode)
            .map(|token| token.index)
            .collect();
        if decode.is_empty() {
            timed.map(|token| token.index).collect()
        } else {
            decode
        }
    };
    let nvtx = decode.iter().any(|token| {
        by_token[token]
            .iter()
            .any(|&position| nvtx_layer(&dispatches[position].scope).is_some())
    });
    let template = if nvtx {
        None
    } else {
        representative(&decode, &by_token, &units).and_then(|token| {
            let token_units: Vec<Unit> = by_token[&token].iter().map(|&p| units[p].clone()).collect();
            structure::template(&token_units)
        })
    };
    if !nvtx && template.is_none() {
        return Anatomy {
            layers_from: LayersFrom::NotFound,
            layers: 0,
        };
    }
    let mut layer_counts: HashMap<usize, usize> = HashMap::new();
    let mut cache: HashMap<Vec<u32>, Vec<Option<usize>>> = HashMap::new();
    let mut tokens_in_order: Vec<&u32> = by_token.keys().collect();
    tokens_in_order.sort_unstable();
    for token in tokens_in_order {
        let positions = &by_token[token];
        let token_units: Vec<Unit> = positions.iter().map(|&p| units[p].clone()).collect();
        let layer_of: Vec<Option<usize>> = match &template {
            Some(template) => {
                let key: Vec<u32> = token_units.iter().map(|unit| unit.symbol).collect();
                cache
                    .entry(key)
                    .or_insert_with(|| structure::layers(&token_units, template))
                    .clone()
            }
            None => positions
                .iter()
                .map(|&p| nvtx_layer(&dispatches[p].scope).map(|(layer, _)| layer))
                .collect(),
        };
        let roles = token_roles(&token_units, &layer_of);
        let layers = layer_of.iter().flatten().max().map_or(0, |last| last + 1);
        if decode.contains(token) {
            *layer_counts.entry(layers).or_default() += 1;
        }
        let mut after_layers = false;
        for (&position, (&layer, &roles)) in positions.iter().zip(layer_of.iter().zip(&roles)) {
            let dispatch = &mut dispatches[position];
            dispatch.roles = roles;
            after_layers |= layer.is_some();
            dispatch.scope = match layer {
                Some(layer) => layer_scope(layer, &dispatch.scope),
                None if dispatch.scope.is_empty() => outside_scope(roles, after_layers).into(),
                None => dispatch.scope.clone(),
            };
        }
    }
    let layers = layer_counts
        .into_iter()
        .max_by_key(|&(layers, count)| (count, layers))
        .map_or(0, |(layers, _)| layers);
    Anatomy {
        layers_from: match template {
            Some(Template { symbols, .. }) => LayersFrom::Period {
                period: symbols.len(),
            },
            None => LayersFrom::Nvtx,
        },
        layers,
    }
}

/// The decode token whose kernel sequence the most tokens share.
fn representative(decode: &[u32], by_token: &HashMap<u32, Vec<usize>>, units: &[Unit]) -> Option<u32> {
    let mut counts: HashMap<Vec<u32>, (usize, u32)> = HashMap::new();
    for &token in decode {
        let key: Vec<u32> = by_token[&token].iter().map(|&p| units[p].symbol).collect();
        let entry = counts.entry(key).or_insert((0, token));
        entry.0 += 1;
    }
    counts
        .into_values()
        .max_by_key(|&(count, token)| (count, std::cmp::Reverse(token)))
        .map(|(_, token)| token)
}

/// The roles of one token's units, given the layer of each.
fn token_roles(units: &[Unit], layer_of: &[Option<usize>]) -> Vec<Roles> {
    let mut roles = vec![Roles::NONE; units.len()];
    let first = layer_of.iter().position(Option::is_some);
    let last = layer_of.iter().rposition(Option::is_some);
    let (Some(first), Some(last)) = (first, last) else {
        return roles;
    };
    roles[..first].copy_from_slice(&head_roles(&units[..first]));
    roles[last + 1..].copy_from_slice(&tail_roles(&units[last + 1..]));
    let mut start = first;
    while start <= last {
        let layer = layer_of[start];
        let end = (start..=last)
            .find(|&position| layer_of[position] != layer)
            .unwrap_or(last + 1);
        if layer.is_some() {
            roles[start..end].copy_from_slice(&layer_roles(&units[start..end]));
        } else {
            // Between two layers' marks (an NVTX gap): nothing to go by.
            for (slot, unit) in roles[start..end].iter_mut().zip(&units[start..end]) {
                *slot = Roles::one(match unit.class {
                    Class::Quantize => Role::ActivationQuantization,
                    _ => Role::Other,
                });
            }
        }
        start = end;
    }
    roles
}

/// A found layer's scope, kscope's way (`layer.3`), keeping the program's
/// own scope after it (`layer.3.forward/aten::mm`); a scope that was only
/// the program's layer mark (`layers.3`) becomes `layer.3`.
fn layer_scope(layer: usize, scope: &str) -> std::sync::Arc<str> {
    let own = match nvtx_layer(scope) {
        Some((_, mark)) if mark == scope => "",
        _ => scope,
    };
    if own.is_empty() {
        format!("layer.{layer}").into()
    } else {
        format!("layer.{layer}.{own}").into()
    }
}

/// The scope of unscoped work outside the layers, as kscope's engine
/// names its own: `embed` before them, `lm_head` and `sample` after; an
/// activation quantization joins the scope of the projection it feeds.
fn outside_scope(roles: Roles, after_layers: bool) -> &'static str {
    match roles.first() {
        Some(Role::Embedding) => "embed",
        Some(Role::FinalNorm | Role::LmHead) => "lm_head",
        Some(Role::ActivationQuantization) if after_layers => "lm_head",
        Some(Role::Sampling) => "sample",
        _ => "",
    }
}
