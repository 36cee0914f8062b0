//! config.json: numbers that would break the math, unimplemented fields, disagreeing layouts, bad files.

use serde_json::{Value, json};

use crate::common::kscope;
use crate::helpers::{Scratch, make_fifo};

#[test]
fn numbers_that_would_break_the_math_are_refused() {
    let scratch = Scratch::new("numbers");
    let original = scratch.config();
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("rope_theta", json!(0), vec!["rope_theta", "positive"]),
        ("rope_theta", json!(-500000.0), vec!["rope_theta", "positive"]),
        ("rope_theta", json!(1e300), vec!["rope_theta", "f32 range"]),
        ("rms_norm_eps", json!(-1e-5), vec!["rms_norm_eps", "positive"]),
        ("rms_norm_eps", json!(0.0), vec!["rms_norm_eps", "positive"]),
        ("rms_norm_eps", json!(1e-60), vec!["rms_norm_eps", "f32 range"]),
        (
            "eos_token_id",
            json!(4_294_967_298u64),
            vec!["eos_token_id", "vocab_size"],
        ),
        ("eos_token_id", json!([2, -1]), vec!["eos_token_id", "-1"]),
        ("eos_token_id", json!("two"), vec!["eos_token_id", "\"two\""]),
        (
            "eos_token_id",
            json!(2048),
            vec!["eos_token_id", "vocab_size (2048)"],
        ),
        (
            "num_hidden_layers",
            json!(1_000_000_000u64),
            vec!["num_hidden_layers", "4096"],
        ),
        ("num_hidden_layers", json!(0), vec!["num_hidden_layers", "1..="]),
        ("vocab_size", json!(2048.5), vec!["vocab_size", "whole number"]),
        ("hidden_size", json!(1u64 << 40), vec!["hidden_size", "1..="]),
        (
            "num_key_value_heads",
            json!(3),
            vec!["num_key_value_heads", "multiple"],
        ),
        ("head_dim", json!(31), vec!["head_dim", "even"]),
        (
            "tie_word_embeddings",
            json!("yes"),
            vec!["tie_word_embeddings", "true or false"],
        ),
    ];
    for (field, value, needles) in cases {
        scratch.set_config(&original);
        scratch.with_field(field, value.clone());
        eprintln!("{field} = {value}");
        scratch.run_refuses(&[&["config.json"], needles.as_slice()].concat());
    }
    scratch.set_config(&original);
    scratch.without_field("hidden_size");
    scratch.run_refuses(&["config.json", "`hidden_size` is missing"]);
}

#[test]
fn unimplemented_math_is_refused_by_name() {
    let scratch = Scratch::new("unimplemented");
    let original = scratch.config();
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "rope_scaling",
            json!({"factor": 2.0}),
            vec!["rope_scaling", "rope_type"],
        ),
        (
            "rope_scaling",
            json!({"type": "dynamic", "factor": 2.0}),
            vec!["dynamic", "not implemented"],
        ),
        (
            "rope_scaling",
            json!({"rope_type": "su"}),
            vec!["unknown rope type `su`"],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "longrope", "rope_theta": 10000.0}),
            vec!["longrope", "rope_parameters.rope_type"],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 4.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
            vec!["rope_parameters.high_freq_factor", "greater than"],
        ),
        (
            "rope_parameters",
            json!({"rope_type": "linear", "rope_theta": 10000.0}),
            vec!["rope_parameters.factor", "missing"],
        ),
        // A frequency the settings make infinite: the settings in words.
        (
            "rope_parameters",
            json!({"rope_type": "linear", "rope_theta": 10000.0, "factor": 1e-40}),
            vec!["RoPE frequency", "linear scaling (factor"],
        ),
        ("hidden_act", json!("gelu"), vec!["hidden_act", "gelu"]),
        ("mlp_bias", json!(true), vec!["mlp_bias"]),
        ("partial_rotary_factor", json!(0.5), vec!["partial_rotary_factor"]),
        (
            "quantization_config",
            json!({"quant_method": "gptq"}),
            vec!["quantization_config"],
        ),
        (
            "attn_logit_softcapping",
            json!(50.0),
            vec!["attn_logit_softcapping"],
        ),
        (
            "model_type",
            json!("qwen2"),
            vec!["model_type", "LlamaForCausalLM"],
        ),
        (
            "layer_types",
            json!([
                "full_attention",
                "chunked_attention",
                "full_attention",
                "full_attention"
            ]),
            vec!["layer_types", "chunked_attention"],
        ),
        ("architectures", json!("LlamaForCausalLM"), vec!["architectures"]),
        (
            "architectures",
            json!(["GPT2LMHeadModel"]),
            vec!["GPT2LMHeadModel", "not supported"],
        ),
    ];
    for (field, value, needles) in cases {
        scratch.set_config(&original);
        scratch.with_field(field, value.clone());
        eprintln!("{field} = {value}");
        scratch.run_refuses(&[&["config.json"], needles.as_slice()].concat());
    }
}

#[test]
fn layouts_that_disagree_are_refused() {
    let scratch = Scratch::new("layouts");
    let original = scratch.config();
    // rope_parameters (transformers 5) against rope_theta (older).
    scratch.with_field(
        "rope_parameters",
        json!({"rope_type": "default", "rope_theta": 500000.0}),
    );
    scratch.run_refuses(&[
        "config.json",
        "`rope_theta` (10000)",
        "rope_parameters.rope_theta` (500000)",
        "disagree",
    ]);
    scratch.set_config(&original);
    scratch.with_field(
        "rope_parameters",
        json!({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
    );
    scratch.with_field("rope_scaling", json!({"type": "linear", "factor": 4.0}));
    scratch.run_refuses(&["config.json", "`rope_scaling`", "`rope_parameters`", "disagree"]);
    scratch.set_config(&original);
    scratch.with_field("dtype", json!("float16"));
    scratch.run_refuses(&["config.json", "`dtype` (`float16`)", "`torch_dtype` (`bfloat16`)"]);
    // Agreeing restatements are fine: both layouts, same values.
    scratch.set_config(&original);
    scratch.with_field(
        "rope_parameters",
        json!({"rope_type": "default", "rope_theta": 10000.0}),
    );
    scratch.with_field("dtype", json!("bfloat16"));
    let model = scratch.model_arg();
    let (code, _, stderr) = kscope(&["run", "--model", &model, "--max-tokens", "2", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_sliding_window_limits_the_context() {
    let scratch = Scratch::new("sliding");
    let mut config = scratch.config();
    config["architectures"] = json!(["MistralForCausalLM"]);
    config["model_type"] = json!("mistral");
    config["sliding_window"] = json!(8);
    scratch.set_config(&config);
    let model = scratch.model_arg();
    // Within the window it runs, and says where the context stops.
    let (code, stdout, stderr) = kscope(&["run", "--model", &model, "--max-tokens", "4", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("sliding-window attention (window 8) is not implemented"),
        "{stdout}"
    );
    scratch.refuses(
        &["run", "--model", &model, "--max-tokens", "6", "--quiet"],
        &["context length of 8 positions", "sliding_window = 8"],
    );
}

#[test]
fn config_files_that_are_not_config_files_are_refused() {
    let scratch = Scratch::new("config-files");
    let config = scratch.model().join("config.json");
    std::fs::write(&config, "[1, 2, 3]").unwrap();
    scratch.run_refuses(&["config.json", "JSON object"]);
    std::fs::write(&config, "{\"architectures\": [\"LlamaForCausalLM\"], ").unwrap();
    scratch.run_refuses(&["config.json", "malformed"]);
    std::fs::remove_file(&config).unwrap();
    std::fs::create_dir(&config).unwrap();
    scratch.run_refuses(&["config.json", "a directory, not a regular file"]);
    std::fs::remove_dir(&config).unwrap();
    make_fifo(&config);
    // Would block forever if opened: it must be refused by its kind.
    scratch.run_refuses(&["config.json", "a FIFO, not a regular file"]);
}

#[test]
fn absurd_context_is_refused_before_allocating() {
    let scratch = Scratch::new("context");
    // Positions are u32 on the device: a context past 2^31 is refused by name.
    scratch.with_field("max_position_embeddings", json!(1_000_000_000_000_000u64));
    scratch.run_refuses(&["config.json", "max_position_embeddings"]);
    scratch.with_field("max_position_embeddings", json!(2_000_000_000u64));
    let model = scratch.model_arg();
    // Within the declared context, far beyond any memory (4 TB of KV cache).
    scratch.refuses(
        &["run", "--model", &model, "--max-tokens", "1999999000", "--quiet"],
        &["KV cache", "MiB", "free", "--max-tokens"],
    );
}

#[test]
fn a_config_the_weights_do_not_match_names_the_first_tensor_that_differs() {
    let scratch = Scratch::new("first-differing");
    let original = scratch.config();
    // More bytes than the files hold: the first tensor of another shape.
    scratch.with_field("hidden_size", json!(256));
    scratch.run_refuses(&[
        "model.embed_tokens.weight",
        "[2048, 128]",
        "[2048, 256]",
        "config.json",
    ]);
    // More tensors than the files hold: the first one missing.
    scratch.set_config(&original);
    scratch.with_field("num_hidden_layers", json!(6));
    scratch.run_refuses(&["model.layers.4.input_layernorm.weight", "missing"]);
}

#[test]
fn a_key_given_twice_is_named() {
    let scratch = Scratch::new("repeated-key");
    let path = scratch.model().join("config.json");
    let text = std::fs::read_to_string(&path).unwrap();
    // JSON keeps the last of two: the second vocab_size would run, silently.
    let repeated = text.replacen('{', "{\n  \"vocab_size\": 4096,", 1);
    std::fs::write(&path, repeated).unwrap();
    scratch.run_refuses(&["config.json", "`vocab_size` is given twice"]);
}
