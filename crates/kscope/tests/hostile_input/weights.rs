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

#[test]
fn what_the_config_does_not_describe_is_said_in_one_line_each() {
    let scratch = Scratch::new("undescribed");
    let model = scratch.model();
    let run = || {
        crate::common::kscope(&[
            "run",
            "--model",
            model.to_str().unwrap(),
            "--max-tokens",
            "2",
            "--quiet",
        ])
    };
    let warnings = |stderr: &str| -> Vec<String> {
        stderr
            .lines()
            .filter(|line| line.starts_with("warning:"))
            .map(str::to_string)
            .collect()
    };
    let (code, _, stderr) = run();
    assert_eq!(code, 0, "{stderr}");
    assert!(warnings(&stderr).is_empty(), "a clean checkpoint: {stderr}");
    // A tensor no layer reads, in a second file the index names.
    let header = br#"{"model.layers.0.self_attn.rotary_emb.inv_freq":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut extra = (header.len() as u64).to_le_bytes().to_vec();
    extra.extend_from_slice(header);
    extra.extend_from_slice(&[0; 8]);
    std::fs::write(model.join("extra.safetensors"), extra).unwrap();
    let index = json!({"weight_map": {
        "model.embed_tokens.weight": "model.safetensors",
        "model.layers.0.self_attn.rotary_emb.inv_freq": "extra.safetensors"}});
    std::fs::write(model.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let (code, _, stderr) = run();
    assert_eq!(code, 0, "{stderr}");
    let found = warnings(&stderr);
    assert_eq!(found.len(), 1, "{stderr}");
    assert!(
        found[0].contains("1 tensors the config does not describe")
            && found[0].contains("rotary_emb.inv_freq"),
        "{stderr}"
    );
    // bf16 weights under a config that names float32.
    scratch.with_field("torch_dtype", json!("float32"));
    let (code, _, stderr) = run();
    assert_eq!(code, 0, "{stderr}");
    let found = warnings(&stderr);
    assert_eq!(found.len(), 2, "{stderr}");
    assert!(
        found[1].contains("names the dtype float32, but the weights are bf16"),
        "{stderr}"
    );
}
