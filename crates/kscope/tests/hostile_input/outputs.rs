//! Output files: --logits-out, --profile-json, --trace and gen-model --out never overwrite unasked.

use crate::common::kscope;
use crate::helpers::Scratch;

#[test]
fn output_flags_never_overwrite_without_force() {
    let scratch = Scratch::new("outputs");
    let model = scratch.model_arg();
    let existing = scratch.0.join("existing.out");
    std::fs::write(&existing, "keep me").unwrap();
    let target = existing.to_str().unwrap();
    for flag in ["--logits-out", "--profile-json", "--trace"] {
        scratch.refuses(
            &[
                "run",
                "--model",
                &model,
                "--max-tokens",
                "2",
                "--quiet",
                flag,
                target,
            ],
            &[flag, "existing.out", "exists", "--force"],
        );
    }
    // The model's own files, even with --force.
    let weights = scratch.model().join("model.safetensors");
    for flag in ["--logits-out", "--profile-json", "--trace"] {
        scratch.refuses(
            &[
                "run",
                "--model",
                &model,
                "--max-tokens",
                "2",
                "--quiet",
                "--force",
                flag,
                weights.to_str().unwrap(),
            ],
            &[flag, "model directory"],
        );
    }
    // A folder that is not there, a directory, and one file named twice.
    let missing = scratch.0.join("no-such-folder/logits.npy");
    scratch.refuses(
        &[
            "run",
            "--model",
            &model,
            "--quiet",
            "--logits-out",
            missing.to_str().unwrap(),
        ],
        &["--logits-out", "no-such-folder", "not there"],
    );
    scratch.refuses(
        &[
            "run",
            "--model",
            &model,
            "--quiet",
            "--force",
            "--trace",
            scratch.0.to_str().unwrap(),
        ],
        &["--trace", "not a regular file"],
    );
    let fresh = scratch.0.join("fresh.json");
    scratch.refuses(
        &[
            "run",
            "--model",
            &model,
            "--quiet",
            "--trace",
            fresh.to_str().unwrap(),
            "--profile-json",
            fresh.to_str().unwrap(),
        ],
        &["different files"],
    );

    // --force replaces a plain file, whole.
    let (code, _, stderr) = kscope(&[
        "run",
        "--model",
        &model,
        "--max-tokens",
        "2",
        "--quiet",
        "--force",
        "--logits-out",
        target,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(&existing).unwrap();
    assert!(bytes.starts_with(b"\x93NUMPY"), "not replaced by the logits");
    let leftovers: Vec<_> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn gen_model_checks_the_whole_target_first() {
    let scratch = Scratch::new("gen-model");
    let folder = scratch.0.join("hand-written");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("config.json"), "{\"my\": \"own config\"}").unwrap();
    let out = folder.to_str().unwrap();
    scratch.refuses(
        &["gen-model", "--preset", "tiny", "--quiet", "--out", out],
        &["config.json already there", "--force"],
    );
    // A sharded checkpoint is never overwritten, even with --force.
    let sharded = scratch.0.join("sharded");
    std::fs::create_dir(&sharded).unwrap();
    std::fs::write(sharded.join("config.json"), "{}").unwrap();
    std::fs::write(
        sharded.join("model.safetensors.index.json"),
        "{\"weight_map\": {}}",
    )
    .unwrap();
    scratch.refuses(
        &[
            "gen-model",
            "--preset",
            "tiny",
            "--quiet",
            "--force",
            "--out",
            sharded.to_str().unwrap(),
        ],
        &["sharded checkpoint", "model.safetensors.index.json"],
    );
    // Not a directory at all.
    let file = scratch.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    scratch.refuses(
        &[
            "gen-model",
            "--preset",
            "tiny",
            "--quiet",
            "--out",
            file.to_str().unwrap(),
        ],
        &["--out", "not a directory"],
    );
    // The generated checkpoint itself, without --force.
    let model = scratch.model_arg();
    scratch.refuses(
        &["gen-model", "--preset", "tiny", "--quiet", "--out", &model],
        &["config.json and model.safetensors already there"],
    );
    // With --force the two files are replaced and nothing else is left.
    let (code, _, stderr) = kscope(&[
        "gen-model",
        "--preset",
        "tiny-qwen2",
        "--quiet",
        "--force",
        "--out",
        &model,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut names: Vec<String> = std::fs::read_dir(scratch.model())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["config.json", "model.safetensors"]);
    assert!(
        std::fs::read_to_string(scratch.model().join("config.json"))
            .unwrap()
            .contains("Qwen2ForCausalLM")
    );
}
