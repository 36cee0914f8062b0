//! Reading schema-2 profiles, written when the roofline's only memory
//! ceiling was the copy probe's (bytes read plus written): their
//! `peak_bandwidth_gbps` becomes the copy ceiling and `peak_compute_gflops`
//! the compute ceiling, each labelled with how it was measured then, so a
//! report of an old profile says "copy" beside its figure rather than
//! passing it off as a read ceiling. Their dispatches declare bytes moved
//! without the written share, which a copy ceiling does not need.

use serde_json::{Map, Value, json};

/// How schema 2's copy bandwidth was measured (`ops::copy`, host time).
const COPY_METHOD: &str = "copy probe (bytes read + written), as recorded by a schema-2 profile";

/// How schema 2's compute rate was measured.
const COMPUTE_METHOD: &str = "bf16 GEMM probe, as recorded by a schema-2 profile";

/// Rewrites a parsed schema-2 profile into schema 3 in place (whose
/// upgrade, `schema_3.rs`, follows); the problem, naming the field, when a
/// peak is not a positive number.
pub(crate) fn upgrade(profile: &mut Value) -> Result<(), String> {
    if let Some(conditions) = profile.get_mut("conditions").and_then(Value::as_object_mut) {
        upgrade_conditions(conditions)?;
    }
    let object = profile
        .as_object_mut()
        .ok_or("not a kernelscope profile: the top-level JSON value is not an object")?;
    object.insert("schema".into(), json!(3));
    Ok(())
}

fn upgrade_conditions(conditions: &mut Map<String, Value>) -> Result<(), String> {
    let mut ceilings = Map::new();
    for (field, name, method, what) in [
        ("peak_bandwidth_gbps", "copy", COPY_METHOD, "bandwidth"),
        ("peak_compute_gflops", "compute", COMPUTE_METHOD, "compute rate"),
    ] {
        match conditions.remove(field) {
            None | Some(Value::Null) => {}
            Some(value) => {
                let peak = value
                    .as_f64()
                    .filter(|peak| peak.is_finite() && *peak > 0.0)
                    .ok_or_else(|| format!("conditions.{field}: {value} is not a positive, finite {what}"))?;
                ceilings.insert(name.into(), json!({ "value": peak, "method": method }));
            }
        }
    }
    conditions.insert("ceilings".into(), Value::Object(ceilings));
    Ok(())
}
