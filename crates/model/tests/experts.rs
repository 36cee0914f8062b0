//! Mixture-of-experts models end to end: the sparse presets written as
//! checkpoints in both expert layouts load to the very model the preset
//! makes in memory; their configs round-trip through `config.json`; what
//! the engine does not implement is refused by name; the profile's expert
//! tallies are the routing the model made (CPU, and CUDA against the CPU).

use std::path::Path;

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::{Phase, ProfileLevel};
use kernelscope::testing::Backend;
use kernelscope::{DType, Device, DeviceOptions};
use kernelscope_model::{
    Config, ExpertLayout, GenerationRequest, LoadOptions, Model, SyntheticOptions, preset, synthetic,
};

fn options(seed: u64) -> SyntheticOptions {
    SyntheticOptions {
        dtype: DType::BF16,
        seed,
        quiet: true,
    }
}

fn generate(model: &mut Model) -> (Vec<u32>, Vec<Vec<f32>>) {
    let generation = model
        .generate(&GenerationRequest {
            stop_at_eos: false,
            keep_logits: true,
            ..GenerationRequest::new(&[3, 77, 1500, 9], 6)
        })
        .unwrap();
    (generation.generated, generation.logits)
}

#[test]
fn written_sparse_checkpoints_in_either_layout_are_the_in_memory_preset() {
    let device = Device::cpu();
    for (name, seed) in [("tiny-qwen3-moe", 21), ("tiny-mixtral", 22)] {
        let mut in_memory = Model::from_preset(name, &device, options(seed)).unwrap();
        let expected = generate(&mut in_memory);
        for layout in [ExpertLayout::PerExpert, ExpertLayout::Stacked] {
            let directory =
                std::env::temp_dir().join(format!("kscope-experts-{name}-{layout:?}-{}", std::process::id()));
            let config = preset(name).unwrap();
            synthetic::write_checkpoint_in(&config, &directory, options(seed), layout).unwrap();
            let mut loaded = Model::load(&directory, &device, LoadOptions { quiet: true })
                .unwrap_or_else(|error| panic!("{name} {layout:?}: {error}"));
            assert_eq!(
                loaded.config(),
                &config,
                "{name} {layout:?}: config.json round trip"
            );
            let got = generate(&mut loaded);
            assert_eq!(got.0, expected.0, "{name} {layout:?}: tokens");
            assert_eq!(got.1, expected.1, "{name} {layout:?}: identical logits");
            std::fs::remove_dir_all(&directory).unwrap();
        }
    }
}

#[test]
fn sparse_presets_read_only_their_chosen_experts_per_token() {
    for name in ["tiny-qwen3-moe", "qwen3-30b-a3b", "mixtral-8x7b"] {
        let config = preset(name).unwrap();
        let experts = config.experts.as_ref().unwrap();
        let per_expert = 3 * experts.intermediate_size * config.hidden_size;
        let idle = experts.sparse_layer_count() * (experts.count - experts.per_token) * per_expert;
        let embedding = config.vocab_size * config.hidden_size;
        assert_eq!(
            config.weight_elements_per_token(),
            config.parameter_count() - embedding + config.hidden_size - idle
                + if config.tie_word_embeddings { embedding } else { 0 },
            "{name}"
        );
    }
    // Qwen3-30B-A3B: about 30.5 billion parameters, 3.3 billion active.
    let config = preset("qwen3-30b-a3b").unwrap();
    assert!((30.0e9..31.0e9).contains(&(config.parameter_count() as f64)));
    assert!((3.0e9..3.6e9).contains(&(config.weight_elements_per_token() as f64)));
}

fn parse(text: &str) -> Result<Config, String> {
    Config::from_json(text, Path::new("config.json")).map_err(|error| error.to_string())
}

/// A small Qwen3-MoE config with `extra` fields set over it.
fn qwen3_moe(extra: &str) -> String {
    format!(
        r#"{{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 64,
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256,
        "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 24 {extra}}}"#
    )
}

#[test]
fn moe_configs_read_as_transformers_reads_them_and_refuse_what_is_not_implemented() {
    let config = parse(&qwen3_moe(r#", "mlp_only_layers": [1], "norm_topk_prob": true"#)).unwrap();
    let experts = config.experts.as_ref().unwrap();
    assert_eq!(
        (experts.count, experts.per_token, experts.intermediate_size),
        (16, 4, 24)
    );
    assert!(experts.normalize_weights);
    assert_eq!(experts.sparse_layers, vec![true, false, true]);
    assert!(config.qk_norm, "Qwen3-MoE normalises q and k per head");
    // decoder_sparse_step 2: layers 1, 3, ... are sparse.
    let stepped = parse(&qwen3_moe(r#", "decoder_sparse_step": 2"#)).unwrap();
    assert_eq!(stepped.experts.unwrap().sparse_layers, vec![false, true, false]);
    // transformers 5 writes Qwen3-MoE's count as num_local_experts.
    let modern = parse(&qwen3_moe("").replace("\"num_experts\"", "\"num_local_experts\"")).unwrap();
    assert_eq!(modern.experts.unwrap().count, 16);

    for (extra, named) in [
        (r#", "num_local_experts": 8"#, "disagree"),
        (r#", "num_experts_per_tok": 17"#, "num_experts_per_tok"),
        (r#", "mlp_only_layers": [3]"#, "mlp_only_layers"),
        (
            r#", "shared_expert_intermediate_size": 64"#,
            "shared_expert_intermediate_size",
        ),
        (r#", "n_group": 4"#, "n_group"),
        (r#", "routed_scaling_factor": 2.5"#, "routed_scaling_factor"),
    ] {
        let error = parse(&qwen3_moe(extra)).expect_err(extra);
        assert!(error.contains(named), "{extra}: {error}");
        assert!(!error.contains('\n'), "one line: {error}");
    }
    // A dense family that names experts is not what it claims to be.
    let dense = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
        "max_position_embeddings": 256, "num_local_experts": 8}"#;
    assert!(parse(dense).unwrap_err().contains("num_local_experts"));
    // Mixtral: every layer sparse, weights renormalised, no attention biases.
    let mixtral = r#"{"architectures": ["MixtralForCausalLM"], "vocab_size": 64, "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
        "max_position_embeddings": 256, "num_local_experts": 8, "num_experts_per_tok": 2}"#;
    let config = parse(mixtral).unwrap();
    let experts = config.experts.unwrap();
    assert_eq!(
        (experts.count, experts.per_token, experts.intermediate_size),
        (8, 2, 48)
    );
    assert!(experts.normalize_weights && experts.sparse_layers == vec![true, true]);
    let biased = mixtral.replace(
        "\"num_local_experts\"",
        "\"attention_bias\": true, \"num_local_experts\"",
    );
    assert!(parse(&biased).unwrap_err().contains("attention_bias"));
}

#[test]
fn a_split_sparse_model_routes_as_the_unsplit_one() {
    // Every rank holds a share of every expert's rows and routes every row
    // itself: each rank's tallies are the unsplit model's.
    for name in ["tiny-qwen3-moe", "tiny-mixtral"] {
        let mut unsplit = Model::from_preset(name, &Device::cpu(), options(3)).unwrap();
        let mut split = Model::from_preset_split(name, &[Device::cpu(), Device::cpu()], options(3)).unwrap();
        let (tokens, _) = generate(&mut unsplit);
        let (split_tokens, _) = generate(&mut split);
        assert_eq!(split_tokens, tokens, "{name}: tokens");
        let counts = unsplit.expert_counts().unwrap().unwrap();
        assert!(
            counts.iter().flatten().any(|&count| count > 0),
            "{name}: nothing routed"
        );
        assert_eq!(split.expert_counts().unwrap().unwrap(), counts, "{name}: tallies");
        // A checkpoint in either layout, each rank cutting its rows of every
        // expert out of the gathered tensors.
        for layout in [ExpertLayout::PerExpert, ExpertLayout::Stacked] {
            let directory = std::env::temp_dir().join(format!(
                "kscope-experts-split-{name}-{layout:?}-{}",
                std::process::id()
            ));
            synthetic::write_checkpoint_in(&preset(name).unwrap(), &directory, options(3), layout).unwrap();
            let mut loaded = Model::load_split(
                &directory,
                &[Device::cpu(), Device::cpu()],
                LoadOptions { quiet: true },
            )
            .unwrap();
            assert_eq!(generate(&mut loaded).0, tokens, "{name} {layout:?}: tokens");
            std::fs::remove_dir_all(&directory).unwrap();
        }
    }
}

/// The tallies in the profile are the routing the model made: stepping
/// position by position and reading each step's choice back sums to the
/// profile's per-layer, per-expert rows; a batched prefill routes every
/// row k times per sparse layer; clearing the tallies starts them again.
/// On the GPU the tallies of the reference path equal the CPU's.
fn tallies_are_the_routing(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let mut tallies = Vec::new();
    for name in ["tiny-qwen3-moe", "tiny-mixtral"] {
        let mut model = Model::from_preset(name, &device, options(31)).unwrap();
        model.set_kv_dtype(DType::F32).unwrap();
        let config = model.config().clone();
        let experts = config.experts.clone().unwrap();
        let mut expected = vec![vec![0u64; experts.count]; config.num_layers];
        let tokens = [3u32, 77, 1500, 9, 42, 1000, 7, 300, 11, 5];
        for (position, &token) in tokens.iter().enumerate() {
            model
                .step(token, position, Phase::Decode, Sampling::GREEDY, 0.0)
                .unwrap();
            for (layer, chosen) in model.routing().unwrap().unwrap().iter().enumerate() {
                for &expert in chosen {
                    expected[layer][expert as usize] += 1;
                }
            }
        }
        let profile = model.profile(device.conditions("eager", None));
        let routing = profile.experts.expect("a sparse model's profile has its routing");
        assert_eq!(
            (routing.experts, routing.per_token),
            (experts.count, experts.per_token)
        );
        let sparse: Vec<usize> = (0..config.num_layers).filter(|&l| experts.is_sparse(l)).collect();
        assert_eq!(routing.layers.iter().map(|l| l.layer).collect::<Vec<_>>(), sparse);
        for layer in &routing.layers {
            assert_eq!(
                layer.tokens, expected[layer.layer],
                "{name} layer {}",
                layer.layer
            );
            assert_eq!(layer.routed(), (tokens.len() * experts.per_token) as u64);
        }
        assert!(routing.check().is_ok());
        tallies.push(routing.layers.clone());

        // A batched prefill of 23 rows: every row routed k times per layer.
        model.clear_expert_counts().unwrap();
        let prompt: Vec<u32> = (0..23).map(|i| (i * 89 + 13) % 2000).collect();
        model.set_prefill_chunk(16).unwrap();
        model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                ..GenerationRequest::new(&prompt, 1)
            })
            .unwrap();
        let counts = model.expert_counts().unwrap().unwrap();
        for &layer in &sparse {
            assert_eq!(
                counts[layer].iter().sum::<u64>(),
                (23 * experts.per_token) as u64,
                "{name} layer {layer}"
            );
        }
    }
    if backend == Backend::Cuda {
        // The same steps on the CPU route the same (the reference path's
        // logits agree to 1e-6 across backends).
        let cpu = Device::cpu();
        for (name, on_device) in ["tiny-qwen3-moe", "tiny-mixtral"].iter().zip(&tallies) {
            let mut model = Model::from_preset(name, &cpu, options(31)).unwrap();
            model.set_kv_dtype(DType::F32).unwrap();
            for (position, &token) in [3u32, 77, 1500, 9, 42, 1000, 7, 300, 11, 5].iter().enumerate() {
                model
                    .step(token, position, Phase::Decode, Sampling::GREEDY, 0.0)
                    .unwrap();
            }
            let counts = model.expert_counts().unwrap().unwrap();
            for layer in on_device {
                assert_eq!(
                    layer.tokens, counts[layer.layer],
                    "{name} layer {}: CUDA against CPU",
                    layer.layer
                );
            }
        }
    }
}

kernelscope::device_tests!(tallies_are_the_routing);
