//! `config.json` parsing and validation: any bytes must give a config or a
//! one-line error, never a panic, and a config's derived sizes must not
//! overflow.
#![no_main]

use std::path::Path;

use kernelscope_model::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_json(text, Path::new("config.json")) {
        Ok(config) => {
            assert!(config.context_length() <= config.max_position_embeddings);
            assert!(config.checked_parameter_bytes(4).is_some());
            let _ = config.tensor_count();
            let _ = config.weight_elements_per_token();
            // What gen-model would write must read back.
            let written = config.to_json("bfloat16");
            if config.eos_token_ids == [2] && config.vocab_size > 2 && config.sliding_window.is_none() {
                let reread = Config::from_json(&written, Path::new("written.json")).expect("own output reads back");
                assert_eq!(reread.rope_scaling, config.rope_scaling);
                assert_eq!(reread.rope_theta, config.rope_theta);
            }
        }
        Err(error) => assert!(!error.to_string().contains('\n'), "one line: {error}"),
    }
});
