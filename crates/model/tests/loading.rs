//! Loading paths beyond the single-file checkpoint: sharded safetensors with
//! an index, a tokenizer.json, and seeded sampling that is reproducible.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kernelscope::ops::sample::Sampling;
use kernelscope::{DType, Device};
use kernelscope_model::{
    GenerationRequest, LoadOptions, Model, SyntheticOptions, Tokenizer, preset, synthetic,
};

fn checkpoint(name: &str, preset_name: &str, seed: u64) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("kscope-loading-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    synthetic::write_checkpoint(
        &preset(preset_name).unwrap(),
        &directory,
        SyntheticOptions {
            dtype: DType::BF16,
            seed,
            quiet: true,
        },
    )
    .unwrap();
    directory
}

/// Splits `model.safetensors` into two shards plus `model.safetensors.index.json`.
fn shard(directory: &Path) {
    let single = directory.join("model.safetensors");
    let bytes = std::fs::read(&single).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = tensors.names().into_iter().map(str::to_string).collect();
    names.sort();
    let (first, second) = names.split_at(names.len() / 2);
    let mut weight_map = HashMap::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", first),
        ("model-00002-of-00002.safetensors", second),
    ] {
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = part
            .iter()
            .map(|name| (name.clone(), tensors.tensor(name).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, None, &directory.join(file)).unwrap();
        for name in part {
            weight_map.insert(name.clone(), file.to_string());
        }
    }
    std::fs::remove_file(&single).unwrap();
    let index = serde_json::json!({ "metadata": { "total_size": bytes.len() }, "weight_map": weight_map });
    std::fs::write(directory.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn sharded_checkpoint_gives_the_same_logits() {
    let device = Device::cpu();
    let whole = checkpoint("whole", "tiny-qwen2", 4);
    let sharded = checkpoint("sharded", "tiny-qwen2", 4);
    shard(&sharded);
    assert!(!sharded.join("model.safetensors").exists());
    let prompt = [3, 1000, 42];
    let run = |directory: &PathBuf| {
        let mut model = Model::load(directory, &device, LoadOptions { quiet: true }).unwrap();
        model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                keep_logits: true,
                ..GenerationRequest::new(&prompt, 5)
            })
            .unwrap()
    };
    let (a, b) = (run(&whole), run(&sharded));
    assert_eq!(a.generated, b.generated);
    assert_eq!(a.logits, b.logits);
    for directory in [whole, sharded] {
        std::fs::remove_dir_all(directory).unwrap();
    }
}

#[test]
fn tokenizer_json_is_used_when_present() {
    let directory = checkpoint("tokenizer", "tiny", 6);
    // A word-level tokenizer over a few words, built with the tokenizers crate.
    let vocab: HashMap<String, u32> = [("[UNK]", 0), ("hello", 7), ("kernel", 8), ("scope", 9)]
        .into_iter()
        .map(|(w, i)| (w.to_string(), i))
        .collect();
    let model = tokenizers::models::wordlevel::WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("[UNK]".into())
        .build()
        .unwrap();
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(tokenizers::pre_tokenizers::whitespace::Whitespace {}));
    tokenizer.with_decoder(Some(tokenizers::decoders::wordpiece::WordPiece::default()));
    tokenizer.save(directory.join("tokenizer.json"), false).unwrap();

    let loaded = Tokenizer::from_directory(&directory)
        .unwrap()
        .expect("tokenizer.json found");
    assert_eq!(loaded.encode("hello kernel scope").unwrap(), vec![7, 8, 9]);
    assert_eq!(loaded.decode(&[9, 7]).unwrap(), "scope hello");
    std::fs::remove_file(directory.join("tokenizer.json")).unwrap();
    assert!(Tokenizer::from_directory(&directory).unwrap().is_none());
    std::fs::remove_dir_all(directory).unwrap();
}

#[test]
fn seeded_sampling_is_reproducible() {
    let device = Device::cpu();
    let mut model = Model::from_preset(
        "tiny-qwen2",
        &device,
        SyntheticOptions {
            dtype: DType::BF16,
            seed: 3,
            quiet: true,
        },
    )
    .unwrap();
    let sampling = Sampling {
        temperature: 1.0,
        top_p: 0.9,
    };
    let first = model
        .generate(&GenerationRequest {
            sampling,
            seed: 77,
            stop_at_eos: false,
            ..GenerationRequest::new(&[1, 2], 12)
        })
        .unwrap()
        .generated;
    let again = model
        .generate(&GenerationRequest {
            sampling,
            seed: 77,
            stop_at_eos: false,
            ..GenerationRequest::new(&[1, 2], 12)
        })
        .unwrap()
        .generated;
    let other = model
        .generate(&GenerationRequest {
            sampling,
            seed: 78,
            stop_at_eos: false,
            ..GenerationRequest::new(&[1, 2], 12)
        })
        .unwrap()
        .generated;
    assert_eq!(first, again, "same seed, same tokens");
    assert_ne!(first, other, "another seed draws other tokens");
    let greedy = model
        .generate(&GenerationRequest {
            seed: 77,
            stop_at_eos: false,
            ..GenerationRequest::new(&[1, 2], 12)
        })
        .unwrap()
        .generated;
    assert_ne!(first, greedy, "temperature 1 is not greedy");
}
