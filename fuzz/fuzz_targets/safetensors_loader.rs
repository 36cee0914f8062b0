//! The safetensors header reader and the shard index parser: any bytes must
//! give tensors that lie inside the file, or a one-line error.
#![no_main]

use std::path::Path;

use kernelscope_model::{parse_safetensors_index, read_safetensors_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match read_safetensors_header(data, Path::new("model.safetensors")) {
        Ok(tensors) => {
            for tensor in tensors {
                let end = tensor.offset.checked_add(tensor.byte_len).expect("no overflow");
                assert!(end <= data.len(), "tensor {} ends past the file", tensor.name);
            }
        }
        Err(error) => assert!(!error.to_string().contains('\n'), "one line: {error}"),
    }
    match parse_safetensors_index(data, Path::new("model.safetensors.index.json")) {
        Ok(files) => assert!(!files.is_empty()),
        Err(error) => assert!(!error.to_string().contains('\n'), "one line: {error}"),
    }
});
