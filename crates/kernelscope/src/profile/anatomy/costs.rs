//! Bytes and flops a decode token's roles cost, from the model's tensors
//! (`--model FILE`): what a program profiled from outside does not
//! declare. Each weight is read once a token; a projection does two flops
//! a weight; a token reads one row of the embedding and `k / E` of every
//! expert tensor. Given to the dispatches of each (token, layer, role),
//! shared by their time, so the roofline, GB/s and the gap account's
//! bandwidth work for llama.cpp and PyTorch as for kscope.

use std::collections::HashMap;

use super::Role;
use crate::profile::Profile;
use crate::profile::aggregate::layer_of;

/// What one tensor costs a decode token.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorCost {
    /// The tensor's name in the file.
    pub name: String,
    /// Its layer, `None` outside the layers.
    pub layer: Option<usize>,
    /// The role that reads it.
    pub role: Role,
    /// Bytes a token reads of it.
    pub bytes: u64,
    /// Flops a token does with it.
    pub flops: u64,
}

/// A model's per-token costs, tensor by tensor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelCosts {
    /// The model, as profiles name it (its file or directory).
    pub model: String,
    /// Every tensor a token reads.
    pub tensors: Vec<TensorCost>,
}

impl ModelCosts {
    /// Bytes and flops per (layer, role).
    fn by_role(&self) -> HashMap<(Option<usize>, Role), (u64, u64)> {
        let mut sums: HashMap<(Option<usize>, Role), (u64, u64)> = HashMap::new();
        for tensor in &self.tensors {
            let entry = sums.entry((tensor.layer, tensor.role)).or_default();
            entry.0 = entry.0.saturating_add(tensor.bytes);
            entry.1 = entry.1.saturating_add(tensor.flops);
        }
        sums
    }

    /// The layers the model has.
    pub fn layers(&self) -> usize {
        self.tensors
            .iter()
            .filter_map(|tensor| tensor.layer)
            .max()
            .map_or(0, |last| last + 1)
    }

    /// Bytes a token reads, all tensors together.
    pub fn bytes_per_token(&self) -> u64 {
        self.tensors.iter().map(|tensor| tensor.bytes).sum()
    }
}

/// What [`apply_model_costs`] gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GivenCosts {
    /// Dispatches that got the model's bytes.
    pub dispatches: usize,
    /// The model's bytes they got, all tokens together.
    pub bytes: u64,
    /// The DRAM bytes measured for those dispatches before (kept in
    /// their `measured_bytes`); 0 where none were measured.
    pub measured_bytes: u64,
}

/// Gives each projection-role dispatch of `profile` its share of its
/// (token, layer, role)'s bytes and flops from `costs`, by time, where it
/// declares none: where its bytes were measured (PM sampling), the
/// model's replace them and the measured ones are kept beside
/// (`measured_bytes`), so the roofline places the kernel by the weights
/// it must read. Only roles whose work is reading weights are given
/// costs (projections, the embedding row); a fused kernel's roles are
/// summed.
pub fn apply_model_costs(profile: &mut Profile, costs: &ModelCosts) -> GivenCosts {
    let measured = profile.conditions.bytes_measured.is_some();
    let by_role = costs.by_role();
    let layer_number = |scope: &str| {
        layer_of(scope)
            .strip_prefix("layer.")
            .and_then(|number| number.parse::<usize>().ok())
    };
    // (token, layer, roles) → total ns of its dispatches.
    let mut totals: HashMap<(u32, Option<usize>, super::Roles), u64> = HashMap::new();
    let eligible = |dispatch: &crate::profile::DispatchRecord| {
        (dispatch.bytes == 0 || measured)
            && dispatch.flops == 0
            && dispatch.token.is_some()
            && dispatch
                .roles
                .iter()
                .any(|role| role.is_projection() || role == Role::Embedding)
    };
    for dispatch in profile.dispatches.iter().filter(|dispatch| eligible(dispatch)) {
        let key = (
            dispatch.token.unwrap_or(0),
            layer_number(&dispatch.scope),
            dispatch.roles,
        );
        *totals.entry(key).or_default() += dispatch.duration_ns().max(1);
    }
    let mut given = GivenCosts::default();
    for dispatch in profile.dispatches.iter_mut() {
        if !eligible(dispatch) {
            continue;
        }
        let layer = layer_number(&dispatch.scope);
        let key = (dispatch.token.unwrap_or(0), layer, dispatch.roles);
        let Some(&total) = totals.get(&key) else { continue };
        let (bytes, flops) = dispatch
            .roles
            .iter()
            .filter_map(|role| by_role.get(&(if role.in_layer() { layer } else { None }, role)))
            .fold((0u64, 0u64), |(bytes, flops), &(b, f)| (bytes + b, flops + f));
        if bytes == 0 {
            continue;
        }
        let share = dispatch.duration_ns().max(1) as f64 / total as f64;
        dispatch.measured_bytes = dispatch.bytes;
        dispatch.bytes = (bytes as f64 * share).round() as u64;
        dispatch.bytes_written = 0;
        dispatch.flops = (flops as f64 * share).round() as u64;
        given.dispatches += 1;
        given.bytes += dispatch.bytes;
        given.measured_bytes += dispatch.measured_bytes;
    }
    given
}
