//! Inputs the fuzzers (fuzz/, tools/fuzz/run.sh) once crashed on, replayed
//! through the same checks in the normal test suite: each must now be read
//! or refused with a one-line error, without a panic.

use std::path::Path;

use kernelscope_model::{Config, parse_safetensors_index, read_safetensors_header};

fn one_line(result: Result<impl std::fmt::Debug, kernelscope_model::ModelError>, what: &str) {
    if let Err(error) = result {
        let message = error.to_string();
        assert!(
            !message.contains('\n') && !message.contains('\r'),
            "{what}: {message}"
        );
    }
}

#[test]
fn every_saved_crash_is_read_or_refused_on_one_line() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut count = 0;
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let what = path.display().to_string();
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let config = Config::from_json(text, Path::new("config.json"));
            if let Ok(config) = &config {
                // What reaches the math is finite and positive.
                for (name, value) in [
                    ("rms_norm_eps", config.rms_norm_eps),
                    ("rope_theta", config.rope_theta),
                ] {
                    assert!(value.is_finite() && value > 0.0, "{what}: {name} = {value}");
                }
            }
            one_line(config, &what);
        }
        one_line(
            read_safetensors_header(&bytes, Path::new("model.safetensors")),
            &what,
        );
        one_line(parse_safetensors_index(&bytes, Path::new("index.json")), &what);
        count += 1;
    }
    assert!(count > 0, "no saved inputs in {}", folder.display());
}
