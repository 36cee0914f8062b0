//! The GGUF header reader: any bytes must give tensors that lie inside the
//! data, aligned and apart, with metadata every typed getter can be asked
//! for, or a one-line error.
#![no_main]

use std::path::Path;

use kernelscope_model::gguf::read_gguf_header;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("model.gguf");
    match read_gguf_header(data, path) {
        Ok(header) => {
            assert!(matches!(header.version(), 2 | 3));
            assert!(header.alignment().is_power_of_two());
            let alignment = u64::from(header.alignment());
            let mut placed: Vec<(usize, usize)> = Vec::new();
            for tensor in header.tensors() {
                let end = tensor.file_offset().checked_add(tensor.byte_len()).expect("no overflow");
                assert!(end <= data.len(), "tensor {} ends past the file", tensor.name());
                assert!(tensor.file_offset() as u64 >= header.data_offset());
                assert_eq!(tensor.relative_offset() % alignment, 0);
                assert_eq!(
                    tensor.tensor_type().byte_len(tensor.element_count()),
                    Some(tensor.byte_len() as u64)
                );
                if let Err(error) = tensor.supported_format(path) {
                    assert!(!error.to_string().contains('\n'), "one line: {error}");
                }
                if tensor.byte_len() > 0 {
                    placed.push((tensor.file_offset(), end));
                }
            }
            placed.sort();
            for pair in placed.windows(2) {
                assert!(pair[0].1 <= pair[1].0, "tensors overlap");
            }
            let metadata = header.metadata();
            for key in metadata.keys() {
                let results = [
                    metadata.get_u32(key).err(),
                    metadata.get_i64(key).err(),
                    metadata.get_f32(key).err(),
                    metadata.get_str(key).err(),
                    metadata.get_bool(key).err(),
                    metadata.get_string_array(key).err(),
                    metadata.get_f32_array(key).err(),
                    metadata.get_i32_array(key).err(),
                ];
                for error in results.into_iter().flatten() {
                    assert!(!error.to_string().contains('\n'), "one line: {error}");
                }
            }
        }
        Err(error) => assert!(!error.to_string().contains('\n'), "one line: {error}"),
    }
});
