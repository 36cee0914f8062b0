//! RoPE settings from either layout of `config.json` (transformers 5's
//! `rope_parameters`, older versions' `rope_theta` and `rope_scaling`),
//! refused when the two disagree or name a scaling not implemented here.

use std::path::Path;

use kernelscope::ops::rope::{Llama3Scaling, RopeScaling, YarnScaling};
use serde_json::Value;

use super::fields::{Fields, short};
use super::model_config::Config;
use crate::error::{Result, shown};

/// The rope types this engine implements, for error messages.
const ROPE_TYPES: &str = "default, linear, llama3, yarn";

/// One spelling of the RoPE settings, before the two layouts are compared.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RopeSettings {
    pub theta: Option<f32>,
    pub scaling: Option<RopeScaling>,
    pub attention_scaling: f32,
}

/// YaRN's `get_mscale` in transformers.
fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// Reads the scaling fields of one rope object (`rope_parameters` in the
/// transformers 5 layout, `rope_scaling` in the older one).
fn rope_settings(
    fields: &Fields<'_>,
    theta: Option<f32>,
    max_position_embeddings: usize,
) -> Result<RopeSettings> {
    let (kind, kind_field) = rope_kind(fields)?;
    if let Some(factor) = fields.number("partial_rotary_factor")?
        && factor != 1.0
    {
        return Err(fields.invalid(format!(
            "`{}` = {factor}: partial rotary embeddings are not implemented",
            fields.name("partial_rotary_factor")
        )));
    }
    let mut settings = RopeSettings {
        theta,
        scaling: None,
        attention_scaling: 1.0,
    };
    match kind {
        "default" => {}
        "linear" => {
            settings.scaling = Some(RopeScaling::Linear {
                factor: fields.required_positive("factor")?,
            });
        }
        "llama3" => settings.scaling = Some(llama3_scaling(fields)?),
        "yarn" => {
            let (scaling, attention_scaling) = yarn_scaling(fields, max_position_embeddings)?;
            settings.scaling = Some(scaling);
            settings.attention_scaling = attention_scaling;
        }
        "dynamic" | "longrope" | "ntk" => {
            return Err(fields.invalid(format!(
                "rope type `{kind}` (`{}`) is not implemented (implemented: {ROPE_TYPES})",
                fields.name(kind_field)
            )));
        }
        other => {
            return Err(fields.invalid(format!(
                "unknown rope type `{}` in `{}` (implemented: {ROPE_TYPES})",
                shown(other),
                fields.name(kind_field)
            )));
        }
    }
    Ok(settings)
}

/// Which scaling a rope object names, and the field that named it:
/// `rope_type` (transformers 5) or `type` (older), which must agree when
/// both are given. A `rope_parameters` object that names none is the default.
fn rope_kind<'f>(fields: &'f Fields<'_>) -> Result<(&'f str, &'static str)> {
    let modern = fields.string("rope_type")?;
    let legacy = fields.string("type")?;
    match (modern, legacy) {
        (Some(modern), Some(legacy)) if modern != legacy => Err(fields.invalid(format!(
            "`{}` (`{}`) and `{}` (`{}`) disagree",
            fields.name("rope_type"),
            shown(modern),
            fields.name("type"),
            shown(legacy)
        ))),
        (Some(kind), _) => Ok((kind, "rope_type")),
        (None, Some(kind)) => Ok((kind, "type")),
        (None, None) if fields.prefix == "rope_parameters." => Ok(("default", "rope_type")),
        (None, None) => Err(fields.invalid(format!(
            "`{}` has no `rope_type` (or `type`): say which scaling it is ({ROPE_TYPES})",
            fields.prefix.trim_end_matches('.')
        ))),
    }
}

/// Llama 3's scaling: its frequency band and the context it was trained on.
fn llama3_scaling(fields: &Fields<'_>) -> Result<RopeScaling> {
    let low_freq_factor = fields.required_positive("low_freq_factor")?;
    let high_freq_factor = fields.required_positive("high_freq_factor")?;
    if high_freq_factor <= low_freq_factor {
        return Err(fields.invalid(format!(
            "`{}` ({high_freq_factor}) must be greater than `{}` ({low_freq_factor})",
            fields.name("high_freq_factor"),
            fields.name("low_freq_factor")
        )));
    }
    let original = fields
        .dimension("original_max_position_embeddings")?
        .ok_or_else(|| {
            fields.invalid(format!(
                "`{}` is missing",
                fields.name("original_max_position_embeddings")
            ))
        })?;
    Ok(RopeScaling::Llama3(Llama3Scaling {
        factor: fields.required_positive("factor")?,
        low_freq_factor,
        high_freq_factor,
        original_max_position_embeddings: original as f32,
    }))
}

/// YaRN's scaling and the attention factor that multiplies cos and sin
/// (given, or derived from `mscale` as transformers derives it).
fn yarn_scaling(fields: &Fields<'_>, max_position_embeddings: usize) -> Result<(RopeScaling, f32)> {
    let factor = fields.required_positive("factor")?;
    let original = fields
        .dimension("original_max_position_embeddings")?
        .unwrap_or(max_position_embeddings);
    let beta_fast = fields.positive("beta_fast")?.unwrap_or(32.0);
    let beta_slow = fields.positive("beta_slow")?.unwrap_or(1.0);
    if beta_fast <= beta_slow {
        return Err(fields.invalid(format!(
            "`{}` ({beta_fast}) must be greater than `{}` ({beta_slow})",
            fields.name("beta_fast"),
            fields.name("beta_slow")
        )));
    }
    let scale = f64::from(factor);
    let attention_scaling = match fields.positive("attention_factor")? {
        Some(attention_factor) => attention_factor,
        None => match (fields.positive("mscale")?, fields.positive("mscale_all_dim")?) {
            (Some(mscale), Some(all_dim)) => {
                (yarn_mscale(scale, f64::from(mscale)) / yarn_mscale(scale, f64::from(all_dim))) as f32
            }
            _ => yarn_mscale(scale, 1.0) as f32,
        },
    };
    let scaling = RopeScaling::Yarn(YarnScaling {
        factor,
        original_max_position_embeddings: original as f32,
        beta_fast,
        beta_slow,
        truncate: fields.boolean("truncate")?.unwrap_or(true),
    });
    Ok((scaling, attention_scaling))
}

impl Config {
    /// RoPE from either layout; refused when the layouts disagree.
    pub(super) fn rope(
        fields: &Fields<'_>,
        max_position_embeddings: usize,
        path: &Path,
    ) -> Result<RopeSettings> {
        let legacy = legacy_rope(fields, max_position_embeddings, path)?;
        let Some(modern) = modern_rope(fields, max_position_embeddings, path)? else {
            return Ok(legacy);
        };
        reconcile(fields, legacy, modern)
    }
}

/// RoPE in the older layout: top-level `rope_theta` and `rope_scaling`.
fn legacy_rope(fields: &Fields<'_>, max_position_embeddings: usize, path: &Path) -> Result<RopeSettings> {
    let theta = fields.positive("rope_theta")?;
    match fields.get("rope_scaling") {
        None => Ok(RopeSettings {
            theta,
            scaling: None,
            attention_scaling: 1.0,
        }),
        Some(Value::Object(map)) => rope_settings(
            &Fields {
                map,
                prefix: "rope_scaling.",
                path,
            },
            theta,
            max_position_embeddings,
        ),
        Some(other) => Err(fields.invalid(format!(
            "`rope_scaling` must be an object or null, found {}",
            short(other)
        ))),
    }
}

/// RoPE in the transformers 5 layout (`rope_parameters`), if the file has it.
fn modern_rope(
    fields: &Fields<'_>,
    max_position_embeddings: usize,
    path: &Path,
) -> Result<Option<RopeSettings>> {
    let map = match fields.get("rope_parameters") {
        None => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(fields.invalid(format!(
                "`rope_parameters` must be an object, found {}",
                short(other)
            )));
        }
    };
    // Hybrid models key rope_parameters by layer type; the architectures run
    // here have one kind of layer.
    let map = if !map.contains_key("rope_type") && !map.contains_key("rope_theta") {
        match map.get("full_attention") {
            Some(Value::Object(inner)) if map.len() == 1 => inner,
            _ => {
                return Err(fields.invalid(
                    "`rope_parameters` has neither `rope_type` nor `rope_theta` (per-layer-type rope parameters are not supported)".into(),
                ));
            }
        }
    } else {
        map
    };
    let inner = Fields {
        map,
        prefix: "rope_parameters.",
        path,
    };
    let theta = inner.positive("rope_theta")?;
    Ok(Some(rope_settings(&inner, theta, max_position_embeddings)?))
}

/// Both layouts in one file: the old fields may restate the new ones, never
/// contradict them; the new ones are the source.
fn reconcile(fields: &Fields<'_>, legacy: RopeSettings, mut modern: RopeSettings) -> Result<RopeSettings> {
    if let Some(theta) = legacy.theta {
        match modern.theta {
            Some(modern_theta) if modern_theta != theta => {
                return Err(fields.invalid(format!(
                    "`rope_theta` ({theta}) and `rope_parameters.rope_theta` ({modern_theta}) disagree"
                )));
            }
            Some(_) => {}
            None => modern.theta = Some(theta),
        }
    }
    if fields.get("rope_scaling").is_some()
        && (legacy.scaling, legacy.attention_scaling) != (modern.scaling, modern.attention_scaling)
    {
        return Err(fields.invalid(format!(
            "`rope_scaling` ({}) and `rope_parameters` ({}) disagree",
            kernelscope::ops::rope::describe_scaling(legacy.scaling),
            kernelscope::ops::rope::describe_scaling(modern.scaling)
        )));
    }
    Ok(modern)
}
