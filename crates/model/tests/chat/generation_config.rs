//! generation_config.json: EOS and BOS ids read, and every malformed value named.

use kernelscope::rng::SplitMix64;
use kernelscope_model::{GenerationConfig, ModelError};
use serde_json::json;

use crate::helpers::model_directory;

#[test]
fn generation_config_reads_eos_ids() {
    let directory = model_directory("generation");
    assert_eq!(
        GenerationConfig::from_directory(&directory).unwrap(),
        GenerationConfig::default()
    );
    let path = directory.join("generation_config.json");
    let mut random = SplitMix64::new(7);
    let ids: Vec<u32> = (0..3).map(|_| random.below(1 << 32) as u32).collect();

    std::fs::write(
        &path,
        json!({"bos_token_id": ids[0], "eos_token_id": ids[1], "do_sample": true}).to_string(),
    )
    .unwrap();
    let config = GenerationConfig::from_directory(&directory).unwrap();
    assert_eq!(
        config,
        GenerationConfig {
            eos_token_ids: vec![ids[1]],
            bos_token_id: Some(ids[0])
        }
    );

    std::fs::write(
        &path,
        json!({"eos_token_id": [ids[1], ids[2], u32::MAX, 0]}).to_string(),
    )
    .unwrap();
    let config = GenerationConfig::from_directory(&directory).unwrap();
    assert_eq!(config.eos_token_ids, vec![ids[1], ids[2], u32::MAX, 0]);
    assert_eq!(config.bos_token_id, None);

    std::fs::write(
        &path,
        json!({"eos_token_id": null, "bos_token_id": null}).to_string(),
    )
    .unwrap();
    assert_eq!(
        GenerationConfig::from_directory(&directory).unwrap(),
        GenerationConfig::default()
    );

    for (contents, field) in [
        (
            json!({"eos_token_id": -1}),
            "eos_token_id: the number -1 is not a token id",
        ),
        (
            json!({"eos_token_id": 4_294_967_296u64}),
            "eos_token_id: the number 4294967296 is not a token id",
        ),
        (
            json!({"eos_token_id": "2"}),
            "eos_token_id: the string \"2\" is not a token id",
        ),
        (json!({"eos_token_id": 2.5}), "eos_token_id: the number 2.5"),
        (
            json!({"eos_token_id": [1, "x"]}),
            "eos_token_id: the string \"x\"",
        ),
        (json!({"eos_token_id": [1, [2]]}), "eos_token_id: a list"),
        (json!({"eos_token_id": {"id": 2}}), "eos_token_id: an object"),
        (
            json!({"eos_token_id": 2, "bos_token_id": -5}),
            "bos_token_id: the number -5",
        ),
        (json!([2]), "expected a JSON object"),
    ] {
        std::fs::write(&path, contents.to_string()).unwrap();
        let error = GenerationConfig::from_directory(&directory).unwrap_err();
        assert!(matches!(error, ModelError::GenerationConfig { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("generation_config.json: "), "{message}");
        assert!(message.contains(field), "{contents}: {message}");
    }
    std::fs::write(&path, "{\"eos_token_id\": [1,").unwrap();
    let message = GenerationConfig::from_directory(&directory)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("generation_config.json: not valid JSON"),
        "{message}"
    );
    assert!(message.contains("line 1"), "{message}");
    std::fs::remove_dir_all(directory).unwrap();
}
