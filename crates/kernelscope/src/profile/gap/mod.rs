//! The gap account: where one engine's decode token loses time to
//! another's, role by role (q/k/v projection, attention, ...) and layer by
//! layer, from two profiles of any programs (kscope, llama.cpp, PyTorch)
//! whose dispatches carry roles ([`annotate`](super::annotate) finds them
//! for a program profiled from outside).
//!
//! Each side's figures are means over its decode tokens (its repetition
//! tokens). A token is measured on the device, from its first dispatch's
//! start to its last's end (host time between tokens is not in it), and
//! splits into its dispatches' exclusive times by role (where kernels
//! overlap, launched early and waiting on the one before, each is charged
//! from the end of the work before it), the device idle between them, and
//! the dispatches without a role (`unattributed`), so the rows add up to
//! the measured token exactly on each side, and their differences to the
//! measured difference. A fused kernel that does several roles on one
//! side (kscope's RMSNorm + q/k/v mat-vec) merges those roles into one row
//! on both sides: the finest split both programs share. A kernel timed
//! inside by its phases (`profile/in_kernel.rs`) does one role set per
//! phase, so it merges nothing its phases keep apart.

use std::collections::HashSet;

use serde::Serialize;

mod tally;

use super::{Profile, Role, Roles};
use tally::{Tally, tally};

/// One side of the account.
#[derive(Clone, Debug, Serialize)]
pub struct GapSide {
    /// What ran: the program's name, or `kscope` for kscope's engine.
    pub program: String,
    /// The device.
    pub device: String,
    /// The weights' format, where recorded.
    pub weight_format: Option<String>,
    /// How many decode tokens the means are over.
    pub tokens: usize,
    /// Layers in a decode token.
    pub layers: usize,
    /// The mean measured token, µs.
    pub us_per_token: f64,
    /// The device's read ceiling, GB/s, where measured.
    pub read_ceiling_gbps: Option<f64>,
}

/// One row of the account: a role, or roles merged because one side ran
/// them in one kernel.
#[derive(Clone, Debug, Serialize)]
pub struct GapRow {
    /// The row's name: a role's, or the merged roles' joined by ` + `.
    pub role: String,
    /// µs per decode token on the base side.
    pub base_us_per_token: f64,
    /// µs per decode token on the new side.
    pub new_us_per_token: f64,
    /// The roles merged into this row (empty for one role).
    pub merged_from: Vec<String>,
    /// Why they were merged: the kernels that do several of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merged_because: Vec<String>,
    /// Bytes a base token's dispatches of the row move, where known.
    pub base_bytes_per_token: Option<f64>,
    /// Bytes a new token's dispatches of the row move, where known.
    pub new_bytes_per_token: Option<f64>,
    /// Base dispatches per token (a launch timed inside the kernel once,
    /// however many of its phases the row holds).
    pub base_calls_per_token: f64,
    /// New dispatches per token, counted alike.
    pub new_calls_per_token: f64,
    /// The roles, for lookups (not written).
    #[serde(skip)]
    pub roles: Roles,
}

impl GapRow {
    /// New minus base, µs per token.
    pub fn difference(&self) -> f64 {
        self.new_us_per_token - self.base_us_per_token
    }
}

/// One layer (or the work outside the layers) on both sides.
#[derive(Clone, Debug, Serialize)]
pub struct GapLayer {
    /// `layer.3`, or a scope outside the layers (`embed`, `lm_head`, `(unscoped)`).
    pub layer: String,
    /// µs per decode token on the base side.
    pub base_us_per_token: f64,
    /// µs per decode token on the new side.
    pub new_us_per_token: f64,
}

/// A kernel's share of a row on one side.
#[derive(Clone, Debug, Serialize)]
pub struct GapKernel {
    /// Its name.
    pub kernel: String,
    /// µs per decode token.
    pub us_per_token: f64,
    /// Calls per decode token.
    pub calls_per_token: f64,
    /// Whether it is a phase of a kernel, timed inside it by the kernel's
    /// stamps (`kernel` is then `kernel · phase`); not written when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_kernel: bool,
}

/// The kernels of a row that differs much, on both sides.
#[derive(Clone, Debug, Serialize)]
pub struct GapKernels {
    /// The row.
    pub role: String,
    /// The base side's slowest kernels of the row.
    pub base: Vec<GapKernel>,
    /// The new side's.
    pub new: Vec<GapKernel>,
}

/// Both sides' totals per decode token.
#[derive(Clone, Debug, Serialize)]
pub struct GapTotal {
    /// Base, µs per token.
    pub base_us_per_token: f64,
    /// New, µs per token.
    pub new_us_per_token: f64,
}

/// Layers found on each side.
#[derive(Clone, Debug, Serialize)]
pub struct GapLayerCounts {
    /// Base.
    pub base: usize,
    /// New.
    pub new: usize,
}

/// The account (see the module's documentation).
#[derive(Clone, Debug, Serialize)]
pub struct GapAccount {
    /// The base side.
    pub base: GapSide,
    /// The new side.
    pub new: GapSide,
    /// Layers found on each side.
    pub layers: GapLayerCounts,
    /// Role rows, largest difference (by size) first.
    pub roles: Vec<GapRow>,
    /// Device idle inside a token (before, between and after its dispatches).
    pub idle: GapTotal,
    /// Dispatches without a role, less time two dispatches overlapped.
    pub unattributed: GapTotal,
    /// The measured tokens.
    pub total: GapTotal,
    /// Per layer, in order, then the work outside the layers.
    pub per_layer: Vec<GapLayer>,
    /// The slowest kernels of the rows that differ most.
    pub top_kernels: Vec<GapKernels>,
    /// What the reader should know (a side with no roles, no decode tokens).
    pub notes: Vec<String>,
}

/// Joins roles that one kernel does together, on either side: each set
/// of roles a dispatch carries links its members.
fn merged_groups(sets: impl Iterator<Item = Roles>) -> Vec<Roles> {
    let mut groups: Vec<Roles> = Vec::new();
    for set in sets {
        let mut joined = set;
        groups.retain(|group| {
            if group.iter().any(|role| set.contains(role)) {
                joined = joined.union(*group);
                false
            } else {
                true
            }
        });
        groups.push(joined);
    }
    groups
}

fn side(profile: &Profile, tally: &Tally) -> GapSide {
    GapSide {
        program: profile
            .conditions
            .program
            .as_ref()
            .map_or_else(|| "kscope".to_string(), super::Program::name),
        device: profile.conditions.device.clone(),
        weight_format: profile.conditions.weight_format.clone(),
        tokens: tally.tokens,
        layers: tally.layers,
        us_per_token: per_token(tally.span_ns, tally.tokens),
        read_ceiling_gbps: profile
            .conditions
            .ceilings
            .read
            .as_ref()
            .map(|ceiling| ceiling.value),
    }
}

fn per_token(ns: f64, tokens: usize) -> f64 {
    if tokens == 0 {
        0.0
    } else {
        ns / 1e3 / tokens as f64
    }
}

/// The account of `new` against `base` (see the module's documentation).
pub fn gap_account(base: &Profile, new: &Profile) -> GapAccount {
    let (base_tally, new_tally) = (tally(base), tally(new));
    let mut notes = Vec::new();
    for (name, profile, tally) in [("base", base, &base_tally), ("new", new, &new_tally)] {
        if tally.tokens == 0 {
            notes.push(format!("{name}: no timed token, so nothing to account for"));
        } else if tally.by_roles.is_empty() {
            notes.push(format!(
                "{name}: no dispatch has a role ({}), so its time is all unattributed",
                profile
                    .conditions
                    .anatomy
                    .as_deref()
                    .unwrap_or("no layers or roles found")
            ));
        }
    }
    let sets = base_tally
        .by_roles
        .keys()
        .chain(new_tally.by_roles.keys())
        .copied();
    let groups = merged_groups(sets);
    let mut roles: Vec<GapRow> = groups
        .iter()
        .map(|&group| {
            let sum = |tally: &Tally| {
                let mut total = (0.0, 0.0, Some(0.0));
                for (set, (ns, calls, bytes)) in &tally.by_roles {
                    if set.iter().any(|role| group.contains(role)) {
                        total.0 += ns;
                        total.1 += calls;
                        total.2 = match (total.2, bytes) {
                            (Some(a), Some(b)) => Some(a + b),
                            _ => None,
                        };
                    }
                }
                let mut phased: HashSet<&(u32, u64, u32)> = HashSet::new();
                for (set, launches) in &tally.phased_launches {
                    if set.iter().any(|role| group.contains(role)) {
                        phased.extend(launches);
                    }
                }
                total.1 += phased.len() as f64;
                let tokens = tally.tokens.max(1) as f64;
                let bytes = total
                    .2
                    .filter(|&bytes| bytes > 0.0 && total.1 > 0.0)
                    .map(|bytes| bytes / tokens);
                (per_token(total.0, tally.tokens), total.1 / tokens, bytes)
            };
            let (base_us, base_calls, base_bytes) = sum(&base_tally);
            let (new_us, new_calls, new_bytes) = sum(&new_tally);
            let members: Vec<Role> = group.iter().collect();
            let mut merged_because = Vec::new();
            if members.len() > 1 {
                for (name, tally) in [("base", &base_tally), ("new", &new_tally)] {
                    let mut kernels: Vec<String> = tally
                        .by_kernel
                        .keys()
                        .filter(|(set, _)| set.len() > 1 && set.iter().any(|role| group.contains(role)))
                        .map(|(set, kernel)| format!("{name}: {kernel} ({})", set.describe()))
                        .collect();
                    kernels.sort();
                    merged_because.extend(kernels);
                }
            }
            GapRow {
                role: group.describe(),
                base_us_per_token: base_us,
                new_us_per_token: new_us,
                merged_from: if members.len() > 1 {
                    members.iter().map(|role| role.name().to_string()).collect()
                } else {
                    Vec::new()
                },
                merged_because,
                base_bytes_per_token: base_bytes,
                new_bytes_per_token: new_bytes,
                base_calls_per_token: base_calls,
                new_calls_per_token: new_calls,
                roles: group,
            }
        })
        .collect();
    roles.sort_by(|a, b| b.difference().abs().total_cmp(&a.difference().abs()));
    let total = GapTotal {
        base_us_per_token: per_token(base_tally.span_ns, base_tally.tokens),
        new_us_per_token: per_token(new_tally.span_ns, new_tally.tokens),
    };
    let idle = GapTotal {
        base_us_per_token: per_token(base_tally.idle_ns, base_tally.tokens),
        new_us_per_token: per_token(new_tally.idle_ns, new_tally.tokens),
    };
    let unattributed = GapTotal {
        base_us_per_token: per_token(base_tally.unroled_ns, base_tally.tokens),
        new_us_per_token: per_token(new_tally.unroled_ns, new_tally.tokens),
    };
    let per_layer = layers_side_by_side(&base_tally, &new_tally);
    let top_kernels = roles
        .iter()
        .take(3)
        .map(|row| {
            let kernels = |tally: &Tally| {
                let mut kernels: Vec<GapKernel> = tally
                    .by_kernel
                    .iter()
                    .filter(|((set, _), _)| set.iter().any(|role| row.roles.contains(role)))
                    .map(|((_, kernel), (ns, calls, in_kernel))| GapKernel {
                        kernel: kernel.clone(),
                        us_per_token: per_token(*ns, tally.tokens),
                        calls_per_token: calls / tally.tokens.max(1) as f64,
                        in_kernel: *in_kernel,
                    })
                    .collect();
                // One kernel may carry several role sets (a norm that also quantizes).
                kernels.sort_by(|a, b| a.kernel.cmp(&b.kernel));
                kernels.dedup_by(|later, kept| {
                    if later.kernel == kept.kernel {
                        kept.us_per_token += later.us_per_token;
                        kept.calls_per_token += later.calls_per_token;
                        true
                    } else {
                        false
                    }
                });
                kernels.sort_by(|a, b| b.us_per_token.total_cmp(&a.us_per_token));
                kernels.truncate(3);
                kernels
            };
            GapKernels {
                role: row.role.clone(),
                base: kernels(&base_tally),
                new: kernels(&new_tally),
            }
        })
        .collect();
    GapAccount {
        base: side(base, &base_tally),
        new: side(new, &new_tally),
        layers: GapLayerCounts {
            base: base_tally.layers,
            new: new_tally.layers,
        },
        roles,
        idle,
        unattributed,
        total,
        per_layer,
        top_kernels,
        notes,
    }
}

/// Both sides' layers in order (`layer.0`, `layer.1`, ... by number), then
/// the scopes outside the layers in the order they first appear.
fn layers_side_by_side(base: &Tally, new: &Tally) -> Vec<GapLayer> {
    let mut names: Vec<String> = Vec::new();
    for (name, _) in base.by_layer.iter().chain(&new.by_layer) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let number = |name: &str| name.strip_prefix("layer.").and_then(|n| n.parse::<usize>().ok());
    names.sort_by_key(|name| (number(name).is_none(), number(name).unwrap_or(0)));
    let value = |tally: &Tally, name: &str| {
        tally
            .by_layer
            .iter()
            .find(|(layer, _)| layer == name)
            .map_or(0.0, |(_, ns)| per_token(*ns, tally.tokens))
    };
    names
        .into_iter()
        .map(|name| GapLayer {
            base_us_per_token: value(base, &name),
            new_us_per_token: value(new, &name),
            layer: name,
        })
        .collect()
}

impl GapAccount {
    /// The rows' sums (roles, idle, unattributed) on each side: equal to
    /// the measured tokens (`total`) up to rounding.
    pub fn sums(&self) -> (f64, f64) {
        let base = self.roles.iter().map(|row| row.base_us_per_token).sum::<f64>()
            + self.idle.base_us_per_token
            + self.unattributed.base_us_per_token;
        let new = self.roles.iter().map(|row| row.new_us_per_token).sum::<f64>()
            + self.idle.new_us_per_token
            + self.unattributed.new_us_per_token;
        (base, new)
    }

    /// The row that differs most, if any.
    pub fn biggest(&self) -> Option<&GapRow> {
        self.roles.first()
    }

    /// The account as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("an account is always serialisable")
    }
}
