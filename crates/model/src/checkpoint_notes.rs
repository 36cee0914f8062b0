//! What a Hugging Face checkpoint holds that its config.json does not
//! describe, said rather than refused (transformers loads such files):
//! tensors the model never reads, and weights of another dtype than the
//! config names.

use std::collections::HashSet;
use std::path::Path;

use crate::config::Config;
use crate::error::Result;
use crate::loader::Checkpoint;

/// One line per thing `directory`'s checkpoint holds that `config` does
/// not describe: the tensors it never reads (the first named), and a
/// weight dtype other than config.json's `torch_dtype` (or `dtype`).
pub fn checkpoint_notes(directory: &Path, config: &Config) -> Result<Vec<String>> {
    let checkpoint = Checkpoint::open(directory)?;
    let mut notes = Vec::new();
    let read: HashSet<String> = config
        .tensors()
        .map(|spec| checkpoint.resolve_name(config, &spec))
        .collect();
    // Experts are read under per-expert or stacked names alike; a tied
    // head's copy and rotary tables are what transformers ignores too.
    let mut unread: Vec<&str> = checkpoint
        .tensor_names()
        .filter(|name| !read.contains(*name) && !name.contains(".experts."))
        .collect();
    unread.sort_unstable();
    if let Some(first) = unread.first() {
        notes.push(format!(
            "{}: {} tensors the config does not describe are not read (the first `{first}`)",
            directory.display(),
            unread.len()
        ));
    }
    let config_text = std::fs::read_to_string(directory.join("config.json")).unwrap_or_default();
    let named = serde_json::from_str::<serde_json::Value>(&config_text)
        .ok()
        .and_then(|value| {
            value
                .get("torch_dtype")
                .or_else(|| value.get("dtype"))
                .and_then(|dtype| dtype.as_str().map(str::to_string))
        });
    if let (Some(named), Ok(held)) = (named, checkpoint.dtype()) {
        let same = matches!(
            (named.as_str(), held.to_string().as_str()),
            ("bfloat16", "bf16") | ("float16", "f16") | ("float32", "f32")
        );
        if !same {
            notes.push(format!(
                "{}: config.json names the dtype {named}, but the weights are {held}; they run as {held}",
                directory.display()
            ));
        }
    }
    Ok(notes)
}
