//! Reading schema-1 profiles, written before timing methods were data: it
//! turns their prose timing methods into [`TimingMethod`]s and their
//! per-submission `host_enqueue_ns`/`gated` fields into an optional
//! [`Enqueue`](super::Enqueue), so everything after loading sees schema 2.

use serde_json::{Map, Value, json};

use super::TimingMethod;

/// Rewrites a parsed schema-1 profile into schema 2 in place; the problem,
/// naming the field, when a timing method is prose this project never wrote.
pub(crate) fn upgrade(profile: &mut Value) -> Result<(), String> {
    if let Some(conditions) = profile.get_mut("conditions").and_then(Value::as_object_mut) {
        upgrade_conditions(conditions)?;
    }
    if let Some(submissions) = profile.get_mut("submissions").and_then(Value::as_array_mut) {
        for submission in submissions.iter_mut().filter_map(Value::as_object_mut) {
            upgrade_submission(submission);
        }
    }
    let object = profile
        .as_object_mut()
        .ok_or("not a kernelscope profile: the top-level JSON value is not an object")?;
    object.insert("schema".into(), json!(2));
    Ok(())
}

fn method_from_prose(field: &str, text: &Value) -> Result<Value, String> {
    // Anything but a string is left for the schema-2 reader to refuse.
    let Some(prose) = text.as_str() else {
        return Ok(text.clone());
    };
    let method = TimingMethod::from_schema_1_text(prose)
        .ok_or_else(|| format!("{field}: {prose:?} is not a timing method kernelscope wrote (schema 1)"))?;
    Ok(serde_json::to_value(method).expect("a timing method is always serialisable"))
}

fn upgrade_conditions(conditions: &mut Map<String, Value>) -> Result<(), String> {
    if let Some(text) = conditions.get("submission_timing") {
        let method = method_from_prose("conditions.submission_timing", text)?;
        conditions.insert("submission_timing".into(), method);
    }
    if let Some(dispatch_timing) = conditions
        .get_mut("dispatch_timing")
        .and_then(Value::as_object_mut)
        && let Some(text) = dispatch_timing.get("method")
    {
        let method = method_from_prose("conditions.dispatch_timing.method", text)?;
        dispatch_timing.insert("method".into(), method);
    }
    Ok(())
}

fn upgrade_submission(submission: &mut Map<String, Value>) {
    let host_ns = submission.remove("host_enqueue_ns");
    let held = submission.remove("gated");
    let measured = host_ns.as_ref().and_then(Value::as_u64).is_some_and(|ns| ns > 0)
        || held.as_ref().and_then(Value::as_bool).unwrap_or(false);
    // Schema 1 wrote 0 and false where nothing was enqueued (the CPU).
    if measured {
        submission.insert(
            "enqueue".into(),
            json!({
                "host_ns": host_ns.unwrap_or(json!(0)),
                "device_held": held.unwrap_or(json!(false)),
            }),
        );
    }
}
