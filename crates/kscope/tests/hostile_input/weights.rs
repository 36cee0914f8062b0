//! Weight files: symlinks out of the model directory, FIFOs, escaping or ambiguous shard indexes.

use serde_json::{Value, json};

use crate::helpers::{Scratch, make_fifo};

#[test]
fn weights_must_be_regular_files_inside_the_model_directory() {
    let scratch = Scratch::new("shards");
    let model = scratch.model();
    let weights = model.join("model.safetensors");
    let moved = scratch.0.join("elsewhere.safetensors");
    std::fs::rename(&weights, &moved).unwrap();

    // A symlink out of the model directory.
    std::os::unix::fs::symlink(&moved, &weights).unwrap();
    scratch.run_refuses(&["model.safetensors", "outside"]);
    std::fs::remove_file(&weights).unwrap();

    // A FIFO or a directory where the weights should be.
    make_fifo(&weights);
    scratch.run_refuses(&["model.safetensors", "a FIFO"]);
    std::fs::remove_file(&weights).unwrap();
    std::fs::create_dir(&weights).unwrap();
    scratch.run_refuses(&["model.safetensors", "a directory"]);
    std::fs::remove_dir(&weights).unwrap();

    // An index whose shards escape, are not named by strings, or are FIFOs.
    std::fs::copy(&moved, model.join("model-00001-of-00001.safetensors")).unwrap();
    let index = model.join("model.safetensors.index.json");
    let write_index = |file: Value| {
        let text = json!({"metadata": {}, "weight_map": {"model.embed_tokens.weight": file}});
        std::fs::write(&index, text.to_string()).unwrap();
    };
    write_index(json!("../elsewhere.safetensors"));
    scratch.run_refuses(&["model.safetensors.index.json", "`..`"]);
    write_index(json!("/etc/passwd"));
    scratch.run_refuses(&["model.safetensors.index.json", "/etc/passwd", "absolute"]);
    write_index(json!(7));
    scratch.run_refuses(&[
        "model.safetensors.index.json",
        "model.embed_tokens.weight",
        "string",
    ]);
    make_fifo(&model.join("shard.safetensors"));
    write_index(json!("shard.safetensors"));
    scratch.run_refuses(&["shard.safetensors", "a FIFO"]);
    std::fs::remove_file(model.join("shard.safetensors")).unwrap();

    // Two shards that both hold every tensor: refused, not resolved by order.
    std::fs::copy(&moved, model.join("model-00002-of-00002.safetensors")).unwrap();
    let text = json!({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00001.safetensors",
        "model.norm.weight": "model-00002-of-00002.safetensors"}});
    std::fs::write(&index, text.to_string()).unwrap();
    scratch.run_refuses(&["tensor `", "is also in", "refusing to pick"]);
}
