//! The GGUF container: files written by llama.cpp's gguf-py read as gguf-py
//! wrote them (tools/reference/gguf_container_fixtures.py made the fixtures
//! in tests/fixtures/gguf), the writer reproduces them byte for byte and
//! round-trips random content, split models open from their first part,
//! files past 4 GiB place tensors by 64-bit offsets, and every hostile file
//! is refused with one line naming the file and what is wrong, without a
//! panic and without touching the file.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use half::f16;
use kernelscope::DType;
use kernelscope::quant::QuantFormat;
use kernelscope::rng::SplitMix64;
use kernelscope_model::ModelError;
use kernelscope_model::gguf::{
    Array, GgufFile, GgufWriter, KEY_ALIGNMENT, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT,
    TensorType, Value, ValueType, WeightFormat, read_gguf_header, split_part_path,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf")
        .join(name)
}

/// An empty folder of this test's own.
fn scratch(name: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("kscope-gguf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

/// `(i * 7 + salt) mod 256`, the fixture script's `pattern_bytes`.
fn pattern_bytes(count: usize, salt: usize) -> Vec<u8> {
    (0..count).map(|index| ((index * 7 + salt) % 256) as u8).collect()
}

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

fn assert_one_line(message: &str) {
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "not one line: {message}"
    );
}

// ---------------------------------------------------------------------------
// Files gguf-py wrote.

#[test]
fn reads_every_value_type_gguf_py_writes() {
    let file = GgufFile::open(&fixture("all_types.gguf")).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.parts().len(), 1);
    assert_eq!(file.parts()[0].alignment(), 32);
    let metadata = file.metadata();
    let keys: Vec<&str> = metadata.keys().collect();
    assert_eq!(keys.len(), 27);
    assert_eq!(&keys[..3], ["general.architecture", "test.u8", "test.i8"]);
    assert_eq!(keys[26], "llama.block_count");

    let expected = [
        ("general.architecture", Value::String("llama".into())),
        ("test.u8", Value::U8(200)),
        ("test.i8", Value::I8(-100)),
        ("test.u16", Value::U16(60000)),
        ("test.i16", Value::I16(-30000)),
        ("test.u32", Value::U32(4_000_000_000)),
        ("test.i32", Value::I32(-2_000_000_000)),
        ("test.u64", Value::U64(18_000_000_000_000_000_000)),
        ("test.i64", Value::I64(-9_000_000_000_000_000_000)),
        ("test.f32", Value::F32(0.25)),
        ("test.f64", Value::F64(-1.0e300)),
        ("test.bool", Value::Bool(true)),
        ("test.string", Value::String("héllo, GGUF ✓".into())),
        ("test.array.u8", Value::Array(Array::U8(vec![0, 1, 255]))),
        ("test.array.i8", Value::Array(Array::I8(vec![-128, 0, 127]))),
        ("test.array.u16", Value::Array(Array::U16(vec![0, 65535]))),
        ("test.array.i16", Value::Array(Array::I16(vec![-32768, 32767]))),
        ("test.array.u32", Value::Array(Array::U32(vec![0, u32::MAX]))),
        (
            "test.array.i32",
            Value::Array(Array::I32(vec![i32::MIN, 0, i32::MAX])),
        ),
        ("test.array.u64", Value::Array(Array::U64(vec![0, u64::MAX]))),
        (
            "test.array.i64",
            Value::Array(Array::I64(vec![i64::MIN, i64::MAX])),
        ),
        (
            "test.array.f32",
            Value::Array(Array::F32(vec![0.5, -2.0, 1.0e30])),
        ),
        ("test.array.f64", Value::Array(Array::F64(vec![0.1, -1.0e-300]))),
        (
            "test.array.bool",
            Value::Array(Array::Bool(vec![true, false, true])),
        ),
        (
            "test.array.string",
            Value::Array(Array::String(vec![
                "a".into(),
                "".into(),
                "ünïcode".into(),
                "<|end|>".into(),
            ])),
        ),
        ("llama.context_length", Value::U64(4096)),
        ("llama.block_count", Value::I32(2)),
    ];
    for (key, value) in &expected {
        assert_eq!(metadata.get(key), Some(value), "{key}");
    }
    assert_eq!(
        metadata
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect::<Vec<_>>(),
        expected
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        metadata.get("test.array.string").unwrap().describe_type(),
        "array of str"
    );
}

#[test]
fn typed_getters_take_what_converters_write_and_name_the_key_otherwise() {
    let file = GgufFile::open(&fixture("all_types.gguf")).unwrap();
    let metadata = file.metadata();
    // Integers of any width that fits.
    assert_eq!(metadata.get_u32("llama.context_length").unwrap(), 4096);
    assert_eq!(metadata.get_u32("llama.block_count").unwrap(), 2);
    assert_eq!(metadata.get_u32("test.u8").unwrap(), 200);
    assert_eq!(metadata.get_i32("test.i16").unwrap(), -30000);
    assert_eq!(metadata.get_u64("test.u64").unwrap(), 18_000_000_000_000_000_000);
    assert_eq!(metadata.get_i64("test.i64").unwrap(), -9_000_000_000_000_000_000);
    assert_eq!(metadata.get_f32("test.f32").unwrap(), 0.25);
    assert_eq!(metadata.get_f64("test.f32").unwrap(), 0.25);
    assert_eq!(metadata.get_f64("test.f64").unwrap(), -1.0e300);
    assert_eq!(metadata.get_str("test.string").unwrap(), "héllo, GGUF ✓");
    assert!(metadata.get_bool("test.bool").unwrap());
    assert_eq!(
        metadata.get_string_array("test.array.string").unwrap()[2],
        "ünïcode"
    );
    assert_eq!(
        metadata.get_f32_array("test.array.f32").unwrap(),
        vec![0.5, -2.0, 1.0e30]
    );
    assert_eq!(
        metadata.get_f32_array("test.array.f64").unwrap(),
        vec![0.1f32, -0.0]
    );
    assert_eq!(metadata.get_i32_array("test.array.u8").unwrap(), vec![0, 1, 255]);
    assert_eq!(
        metadata.get_i32_array("test.array.i32").unwrap(),
        vec![i32::MIN, 0, i32::MAX]
    );
    // Absent keys: None from the optional getters, an error from the others.
    assert_eq!(metadata.get_u32_opt("llama.nope").unwrap(), None);
    assert_eq!(metadata.get_str_opt("llama.nope").unwrap(), None);
    assert_eq!(metadata.get_string_array_opt("llama.nope").unwrap(), None);

    let path = fixture("all_types.gguf").display().to_string();
    let refusals: [(ModelError, &[&str]); 9] = [
        (
            metadata.get_u32("llama.nope").unwrap_err(),
            &["`llama.nope`", "is missing"],
        ),
        (
            metadata.get_u32("test.u64").unwrap_err(),
            &["`test.u64`", "out of range for u32"],
        ),
        (
            metadata.get_u32("test.i8").unwrap_err(),
            &["`test.i8`", "-100", "out of range for u32"],
        ),
        (
            metadata.get_i32("test.u32").unwrap_err(),
            &["`test.u32`", "out of range for i32"],
        ),
        (
            metadata.get_f32("test.f64").unwrap_err(),
            &["`test.f64`", "out of range for f32"],
        ),
        (
            metadata.get_str("test.u8").unwrap_err(),
            &["`test.u8`", "is u8, expected str"],
        ),
        (
            metadata.get_u32("test.string").unwrap_err(),
            &["`test.string`", "is str, expected an integer"],
        ),
        (
            metadata.get_i32_array("test.array.u32").unwrap_err(),
            &["`test.array.u32`", "element 1 is 4294967295"],
        ),
        (
            metadata.get_string_array("test.array.u8").unwrap_err(),
            &["`test.array.u8`", "is array of u8, expected array of str"],
        ),
    ];
    for (error, needles) in refusals {
        let message = error.to_string();
        assert_one_line(&message);
        assert!(message.starts_with(&path), "{message}");
        for needle in needles {
            assert!(message.contains(needle), "`{needle}` not in: {message}");
        }
        assert!(matches!(error, ModelError::GgufKey { .. }), "{error:?}");
    }
}

#[test]
fn reads_tensors_gguf_py_writes_in_place() {
    let file = GgufFile::open(&fixture("all_types.gguf")).unwrap();
    let names: Vec<&str> = file.tensors().iter().map(|tensor| tensor.name()).collect();
    assert_eq!(
        names,
        [
            "f32_matrix",
            "f32_4d",
            "f32_scalar",
            "f16_vector",
            "bf16_matrix",
            "i32_vector",
            "q4_0_matrix",
            "q8_0_matrix"
        ]
    );
    let data_offset = file.parts()[0].data_offset();
    assert_eq!(data_offset % 32, 0);
    // Name, type, dims, offset in the data section, bytes.
    type Expected<'a> = (&'a str, TensorType, &'a [u64], u64, Vec<u8>);
    let expected: [Expected; 8] = [
        (
            "f32_matrix",
            TensorType::F32,
            &[8, 3],
            0,
            f32_bytes((0..24).map(|i| i as f32 * 0.5)),
        ),
        (
            "f32_4d",
            TensorType::F32,
            &[4, 3, 1, 2],
            96,
            f32_bytes((0..24).map(|i| i as f32 - 7.0)),
        ),
        ("f32_scalar", TensorType::F32, &[], 192, f32_bytes([3.5])),
        (
            "f16_vector",
            TensorType::F16,
            &[5],
            224,
            (0..5)
                .flat_map(|i| f16::from_f32((i as f32 - 2.0) / 4.0).to_le_bytes())
                .collect(),
        ),
        (
            "bf16_matrix",
            TensorType::BF16,
            &[3, 2],
            256,
            (0..6u16).flat_map(|i| (0x3F80 + i).to_le_bytes()).collect(),
        ),
        (
            "i32_vector",
            TensorType::I32,
            &[4],
            288,
            [-1i32, 0, 1, i32::MAX]
                .iter()
                .flat_map(|value| value.to_le_bytes())
                .collect(),
        ),
        (
            "q4_0_matrix",
            TensorType::Q4_0,
            &[64, 2],
            320,
            pattern_bytes(72, 3),
        ),
        (
            "q8_0_matrix",
            TensorType::Q8_0,
            &[32, 3],
            416,
            pattern_bytes(102, 11),
        ),
    ];
    for (name, tensor_type, dims, relative_offset, bytes) in expected {
        let tensor = file.tensor(name).unwrap();
        assert_eq!(tensor.tensor_type(), tensor_type, "{name}");
        assert_eq!(tensor.dims(), dims, "{name}");
        assert_eq!(tensor.relative_offset(), relative_offset, "{name}");
        assert_eq!(
            tensor.file_offset() as u64,
            data_offset + relative_offset,
            "{name}"
        );
        assert_eq!(tensor.part(), 0);
        assert_eq!(file.tensor_bytes(tensor), &bytes[..], "{name}");
        let mapped = file.mapped_tensor(tensor);
        assert_eq!(
            (mapped.offset, mapped.byte_len),
            (tensor.file_offset(), bytes.len())
        );
        assert_eq!(
            &mapped.map[mapped.offset..mapped.offset + mapped.byte_len],
            &bytes[..]
        );
        assert_eq!(mapped.bytes(), &bytes[..]);
    }
    let four_d = file.tensor("f32_4d").unwrap();
    assert_eq!(four_d.shape(), vec![2, 1, 3, 4]);
    assert_eq!(four_d.element_count(), 24);
    assert_eq!(file.tensor("f32_scalar").unwrap().element_count(), 1);
    assert!(file.tensor("nope").is_none());
}

#[test]
fn supported_types_map_to_the_runtime_formats_and_others_are_refused_by_name() {
    let file = GgufFile::open(&fixture("all_types.gguf")).unwrap();
    let format = |name: &str| file.tensor_format(file.tensor(name).unwrap());
    assert_eq!(format("f32_matrix").unwrap(), WeightFormat::Dense(DType::F32));
    assert_eq!(format("f16_vector").unwrap(), WeightFormat::Dense(DType::F16));
    assert_eq!(format("bf16_matrix").unwrap(), WeightFormat::Dense(DType::BF16));
    assert_eq!(
        format("q4_0_matrix").unwrap(),
        WeightFormat::Quantized(QuantFormat::Q4_0)
    );
    assert_eq!(
        format("q8_0_matrix").unwrap(),
        WeightFormat::Quantized(QuantFormat::Q8_0)
    );
    let error = format("i32_vector").unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, ModelError::GgufUnsupportedType { .. }));
    assert!(
        message.contains("`i32_vector`") && message.contains("is I32") && message.contains("Q6_K"),
        "{message}"
    );
    // Every type ggml knows has its block sizes; the supported ones a format.
    assert_eq!(TensorType::ALL.len(), 35);
    assert_eq!(
        TensorType::ALL
            .iter()
            .filter(|tensor_type| tensor_type.format().is_some())
            .count(),
        11
    );
    assert_eq!(TensorType::from_ggml_type(39), Some(TensorType::MXFP4));
    assert_eq!(
        (
            TensorType::IQ4_XS.block_elements(),
            TensorType::IQ4_XS.block_bytes()
        ),
        (256, 136)
    );
}

#[test]
fn reads_a_custom_alignment_and_version_2() {
    let aligned = GgufFile::open(&fixture("alignment_64.gguf")).unwrap();
    let part = &aligned.parts()[0];
    assert_eq!(part.alignment(), 64);
    assert_eq!(part.data_offset() % 64, 0);
    assert_eq!(aligned.metadata().get(KEY_ALIGNMENT), Some(&Value::U32(64)));
    for tensor in aligned.tensors() {
        assert_eq!(tensor.relative_offset() % 64, 0, "{}", tensor.name());
    }
    assert_eq!(
        aligned.tensor_bytes(aligned.tensor("first").unwrap()),
        &f32_bytes([0.0, 1.0, 2.0])[..]
    );
    assert_eq!(aligned.tensor("third").unwrap().relative_offset(), 128);
    assert_eq!(
        aligned.tensor_bytes(aligned.tensor("third").unwrap()),
        &pattern_bytes(34, 5)[..]
    );

    let version2 = GgufFile::open(&fixture("version2.gguf")).unwrap();
    assert_eq!(version2.version(), 2);
    assert_eq!(version2.metadata().get_u32("llama.context_length").unwrap(), 128);
    let weight = version2.tensor("weight").unwrap();
    assert_eq!(weight.shape(), vec![2, 4]);
    assert_eq!(
        version2.tensor_bytes(weight),
        &f32_bytes((0..8).map(|i| i as f32))[..]
    );
}

// ---------------------------------------------------------------------------
// Writing.

/// Writes `source`'s metadata and tensors again with GgufWriter into `out`.
fn rewrite(source: &GgufFile, out: &Path) {
    let mut writer = GgufWriter::new(out);
    for (key, value) in source.metadata().iter() {
        if key == KEY_ALIGNMENT {
            writer
                .set_alignment(source.metadata().get_u32(key).unwrap())
                .unwrap();
        } else {
            writer.add_metadata(key, value.clone()).unwrap();
        }
    }
    for tensor in source.tensors() {
        let length = writer
            .add_tensor_info(tensor.name(), tensor.dims(), tensor.tensor_type())
            .unwrap();
        assert_eq!(length, tensor.byte_len() as u64);
    }
    let mut data = writer.write_header().unwrap();
    for tensor in source.tensors() {
        assert_eq!(
            data.next_tensor(),
            Some((tensor.name(), tensor.byte_len() as u64))
        );
        data.write_tensor(source.tensor_bytes(tensor)).unwrap();
    }
    assert_eq!(data.next_tensor(), None);
    data.finish().unwrap();
}

#[test]
fn the_writer_reproduces_gguf_py_byte_for_byte() {
    let folder = scratch("identical");
    for name in ["all_types.gguf", "alignment_64.gguf", "version2.gguf"] {
        let original = std::fs::read(fixture(name)).unwrap();
        let out = folder.join(name);
        rewrite(&GgufFile::open(&fixture(name)).unwrap(), &out);
        let mut written = std::fs::read(&out).unwrap();
        if name == "version2.gguf" {
            // The writer writes version 3; the layout is version 2's.
            assert_eq!(written[4], 3);
            written[4] = 2;
        }
        assert_eq!(written.len(), original.len(), "{name}");
        let first_difference = written.iter().zip(&original).position(|(a, b)| a != b);
        assert_eq!(first_difference, None, "{name}: differs from gguf-py's bytes");
    }
    // Nothing but the files themselves is left in the folder.
    let mut left: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["alignment_64.gguf", "all_types.gguf", "version2.gguf"]);
    std::fs::remove_dir_all(&folder).unwrap();
}

/// A random value of every kind the format has, arrays of 0 to 6 elements.
fn random_value(rng: &mut SplitMix64) -> Value {
    fn text(rng: &mut SplitMix64) -> String {
        let alphabet = ['a', 'z', '0', ' ', '.', 'é', 'ß', '✓', '🦀', '\n', '"'];
        (0..rng.below(12))
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect()
    }
    let finite = |rng: &mut SplitMix64| rng.uniform(-1.0e6, 1.0e6);
    let count = |rng: &mut SplitMix64| rng.below(7) as usize;
    match rng.below(25) {
        0 => Value::U8(rng.next_u64() as u8),
        1 => Value::I8(rng.next_u64() as i8),
        2 => Value::U16(rng.next_u64() as u16),
        3 => Value::I16(rng.next_u64() as i16),
        4 => Value::U32(rng.next_u64() as u32),
        5 => Value::I32(rng.next_u64() as i32),
        6 => Value::U64(rng.next_u64()),
        7 => Value::I64(rng.next_u64() as i64),
        8 => Value::F32(finite(rng)),
        9 => Value::F64(f64::from(finite(rng)) * 1.0e200),
        10 => Value::Bool(rng.below(2) == 1),
        11 | 12 => Value::String(text(rng)),
        13 => Value::Array(Array::U8((0..count(rng)).map(|_| rng.next_u64() as u8).collect())),
        14 => Value::Array(Array::I8((0..count(rng)).map(|_| rng.next_u64() as i8).collect())),
        15 => Value::Array(Array::U16(
            (0..count(rng)).map(|_| rng.next_u64() as u16).collect(),
        )),
        16 => Value::Array(Array::I16(
            (0..count(rng)).map(|_| rng.next_u64() as i16).collect(),
        )),
        17 => Value::Array(Array::U32(
            (0..count(rng)).map(|_| rng.next_u64() as u32).collect(),
        )),
        18 => Value::Array(Array::I32(
            (0..count(rng)).map(|_| rng.next_u64() as i32).collect(),
        )),
        19 => Value::Array(Array::U64((0..count(rng)).map(|_| rng.next_u64()).collect())),
        20 => Value::Array(Array::I64(
            (0..count(rng)).map(|_| rng.next_u64() as i64).collect(),
        )),
        21 => Value::Array(Array::F32((0..count(rng)).map(|_| finite(rng)).collect())),
        22 => Value::Array(Array::F64(
            (0..count(rng)).map(|_| f64::from(finite(rng))).collect(),
        )),
        23 => Value::Array(Array::Bool((0..count(rng)).map(|_| rng.below(2) == 1).collect())),
        _ => Value::Array(Array::String((0..count(rng)).map(|_| text(rng)).collect())),
    }
}

/// Where the round-trip test leaves its files for the gguf-py cross-check
/// (tools/reference/gguf_container_fixtures.py check), when set.
fn cross_check_folder() -> Option<PathBuf> {
    std::env::var_os("KSCOPE_GGUF_WRITE_DIR").map(PathBuf::from)
}

#[test]
fn random_metadata_and_tensors_round_trip() {
    let folder = scratch("round-trip");
    for seed in 0..24u64 {
        let mut rng = SplitMix64::new(seed);
        let path = folder.join(format!("random-{seed}.gguf"));
        let mut writer = GgufWriter::new(&path);
        let alignment = [1u32, 8, 32, 64, 256, 4096][rng.below(6) as usize];
        let mut expected_metadata = Vec::new();
        let keys = rng.below(20);
        for index in 0..keys {
            if index == keys / 2 {
                writer.set_alignment(alignment).unwrap();
                if alignment != 32 {
                    expected_metadata.push((KEY_ALIGNMENT.to_string(), Value::U32(alignment)));
                }
            }
            let key = format!("test.key.{index}");
            let value = random_value(&mut rng);
            writer.add_metadata(&key, value.clone()).unwrap();
            expected_metadata.push((key, value));
        }
        if keys == 0 {
            writer.set_alignment(alignment).unwrap();
            if alignment != 32 {
                expected_metadata.push((KEY_ALIGNMENT.to_string(), Value::U32(alignment)));
            }
        }
        let mut expected_tensors = Vec::new();
        for index in 0..rng.below(8) {
            let tensor_type = TensorType::ALL[rng.below(TensorType::ALL.len() as u64) as usize];
            let n_dims = rng.below(5) as usize;
            let mut dims: Vec<u64> = (0..n_dims).map(|_| 1 + rng.below(3)).collect();
            match dims.first_mut() {
                Some(row) => *row *= tensor_type.block_elements() as u64,
                None if tensor_type.block_elements() > 1 => dims.push(tensor_type.block_elements() as u64),
                None => {}
            }
            let name = format!("blk.{index}.weight");
            let length = writer.add_tensor_info(&name, &dims, tensor_type).unwrap();
            let bytes: Vec<u8> = (0..length).map(|_| rng.next_u64() as u8).collect();
            expected_tensors.push((name, dims, tensor_type, bytes));
        }
        let mut data = writer.write_header().unwrap();
        for (position, (_, _, _, bytes)) in expected_tensors.iter().enumerate() {
            if position % 2 == 0 {
                data.write_tensor(bytes).unwrap();
            } else {
                // Streamed in uneven pieces.
                data.write_tensor_with(|out| {
                    for piece in bytes.chunks(7) {
                        out.write_all(piece)?;
                    }
                    Ok(())
                })
                .unwrap();
            }
        }
        data.finish().unwrap();

        let file = GgufFile::open(&path).unwrap();
        assert_eq!(file.version(), 3);
        assert_eq!(file.parts()[0].alignment(), alignment, "seed {seed}");
        assert_eq!(file.parts()[0].data_offset() % u64::from(alignment), 0);
        let metadata: Vec<(String, Value)> = file
            .metadata()
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect();
        assert_eq!(metadata, expected_metadata, "seed {seed}");
        assert_eq!(file.tensors().len(), expected_tensors.len());
        for (tensor, (name, dims, tensor_type, bytes)) in file.tensors().iter().zip(&expected_tensors) {
            assert_eq!(tensor.name(), name);
            assert_eq!(tensor.dims(), &dims[..]);
            assert_eq!(tensor.tensor_type(), *tensor_type);
            assert_eq!(tensor.relative_offset() % u64::from(alignment), 0);
            assert_eq!(file.tensor_bytes(tensor), &bytes[..], "seed {seed} {name}");
        }
        // Written, the file ends on the alignment, as gguf-py's do.
        let length = std::fs::metadata(&path).unwrap().len();
        assert_eq!(length % u64::from(alignment), 0, "seed {seed}");
        if let Some(out) = cross_check_folder() {
            std::fs::create_dir_all(&out).unwrap();
            std::fs::copy(&path, out.join(format!("random-{seed}.gguf"))).unwrap();
        }
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn the_writer_checks_what_it_is_given_and_leaves_no_half_written_file() {
    let folder = scratch("writer-refusals");
    let path = folder.join("model.gguf");
    std::fs::write(&path, b"the file already there").unwrap();
    let leftovers = || {
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    let mut writer = GgufWriter::new(&path);
    writer.add_metadata("general.architecture", "llama").unwrap();
    let refusals = [
        (
            writer.add_metadata("general.architecture", 1u32).unwrap_err(),
            "added twice",
        ),
        (writer.add_metadata("", 1u32).unwrap_err(), "may not be empty"),
        (
            writer.add_metadata(KEY_ALIGNMENT, 64u32).unwrap_err(),
            "set_alignment",
        ),
        (writer.set_alignment(48).unwrap_err(), "not a power of two"),
        (writer.set_alignment(0).unwrap_err(), "not a power of two"),
        (
            writer
                .add_tensor_info("q", &[33, 2], TensorType::Q8_0)
                .unwrap_err(),
            "blocks of 32",
        ),
        (
            writer
                .add_tensor_info("five", &[1, 1, 1, 1, 1], TensorType::F32)
                .unwrap_err(),
            "at most 4",
        ),
        (
            writer
                .add_tensor_info(&"n".repeat(64), &[1], TensorType::F32)
                .unwrap_err(),
            "at most 63",
        ),
        (
            writer
                .add_tensor_info("huge", &[1 << 62, 4], TensorType::F32)
                .unwrap_err(),
            "overflow",
        ),
        (
            writer.add_tensor_info("", &[1], TensorType::F32).unwrap_err(),
            "may not be empty",
        ),
    ];
    for (error, needle) in refusals {
        let message = error.to_string();
        assert_one_line(&message);
        assert!(
            message.contains(needle) && message.contains("model.gguf"),
            "{message}"
        );
    }
    assert_eq!(writer.add_tensor_info("a", &[4], TensorType::F32).unwrap(), 16);
    assert!(
        writer
            .add_tensor_info("a", &[4], TensorType::F32)
            .unwrap_err()
            .to_string()
            .contains("declared twice")
    );
    assert_eq!(
        writer.add_tensor_info("b", &[32, 2], TensorType::Q8_0).unwrap(),
        68
    );
    writer.set_alignment(64).unwrap();
    assert!(writer.set_alignment(64).is_err());

    // A tensor of the wrong length stops the writer; the target is untouched.
    let mut data = writer.write_header().unwrap();
    let error = data.write_tensor(&[0; 15]).unwrap_err().to_string();
    assert!(
        error.contains("`a`") && error.contains("takes 16 bytes, given 15"),
        "{error}"
    );
    assert!(
        data.write_tensor(&[0; 16])
            .unwrap_err()
            .to_string()
            .contains("earlier write failed")
    );
    assert!(
        data.finish()
            .unwrap_err()
            .to_string()
            .contains("earlier write failed")
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"the file already there");
    assert_eq!(leftovers(), ["model.gguf"]);

    let plan = || {
        let mut writer = GgufWriter::new(&path);
        writer.add_tensor_info("a", &[4], TensorType::F32).unwrap();
        writer.add_tensor_info("b", &[32, 2], TensorType::Q8_0).unwrap();
        writer.write_header().unwrap()
    };
    // A streamed tensor that writes too much, or too little.
    let mut data = plan();
    let error = data
        .write_tensor_with(|out| out.write_all(&[0; 17]))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`a` takes 16 bytes, but its writer gave more"),
        "{error}"
    );
    drop(data);
    let mut data = plan();
    let error = data
        .write_tensor_with(|out| out.write_all(&[0; 3]))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`a` takes 16 bytes, but its writer gave 3"),
        "{error}"
    );
    drop(data);
    // A callback's own error is passed on.
    let mut data = plan();
    let error = data
        .write_tensor_with(|_| Err(std::io::Error::other("source went away")))
        .unwrap_err();
    assert!(error.to_string().contains("source went away"), "{error}");
    drop(data);
    // Finishing before every tensor is written.
    let mut data = plan();
    data.write_tensor(&[0; 16]).unwrap();
    let error = data.finish().unwrap_err().to_string();
    assert!(
        error.contains("tensor `b` and 0 after it were declared but never written"),
        "{error}"
    );
    // Abandoned mid-way.
    let mut data = plan();
    data.write_tensor(&[1; 16]).unwrap();
    drop(data);
    assert_eq!(std::fs::read(&path).unwrap(), b"the file already there");
    assert_eq!(leftovers(), ["model.gguf"]);

    // Completed, it replaces the target.
    let mut data = plan();
    data.write_tensor(&[1; 16]).unwrap();
    data.write_tensor(&[2; 68]).unwrap();
    assert!(
        data.write_tensor(&[0; 1])
            .unwrap_err()
            .to_string()
            .contains("already written")
    );
    // A second writer of the same target may run at once: each has its own
    // temporary file.
    let second = plan();
    drop(data);
    drop(second);
    let mut data = plan();
    data.write_tensor(&[1; 16]).unwrap();
    data.write_tensor(&[2; 68]).unwrap();
    data.finish().unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensor_bytes(file.tensor("b").unwrap()), &[2; 68][..]);
    assert_eq!(leftovers(), ["model.gguf"]);
    std::fs::remove_dir_all(&folder).unwrap();
}

// ---------------------------------------------------------------------------
// Split models.

/// Writes a model of `tensors` (name, F32 element count) split over
/// `assignment.len()` parts, part `i` holding the tensors `assignment[i]`
/// names, with the split keys llama.cpp's gguf-split writes. Returns the
/// paths of the parts.
fn write_split(folder: &Path, tensors: &[(&str, u64)], assignment: &[&[usize]]) -> Vec<PathBuf> {
    let count = assignment.len() as u16;
    let prefix = folder.join("model");
    let mut paths = Vec::new();
    for (no, indices) in assignment.iter().enumerate() {
        let path = split_part_path(&prefix, no as u16, count);
        let mut writer = GgufWriter::new(&path);
        if no == 0 {
            writer.add_metadata("general.architecture", "llama").unwrap();
            writer.add_metadata("llama.block_count", 2u32).unwrap();
        }
        writer.add_metadata(KEY_SPLIT_NO, no as u16).unwrap();
        writer.add_metadata(KEY_SPLIT_COUNT, count).unwrap();
        writer
            .add_metadata(KEY_SPLIT_TENSORS_COUNT, tensors.len() as i32)
            .unwrap();
        for &index in *indices {
            let (name, elements) = tensors[index];
            writer
                .add_tensor_info(name, &[elements], TensorType::F32)
                .unwrap();
        }
        let mut data = writer.write_header().unwrap();
        for &index in *indices {
            let (_, elements) = tensors[index];
            data.write_tensor(&f32_bytes((0..elements).map(|i| (index * 100) as f32 + i as f32)))
                .unwrap();
        }
        data.finish().unwrap();
        paths.push(path);
    }
    paths
}

#[test]
fn split_models_open_from_the_first_part() {
    let folder = scratch("split");
    let tensors = [
        ("token_embd.weight", 8),
        ("blk.0.attn_q.weight", 3),
        ("blk.1.attn_q.weight", 5),
        ("output.weight", 1),
    ];
    let paths = write_split(&folder, &tensors, &[&[0], &[1, 2], &[3]]);
    assert!(paths[0].ends_with("model-00001-of-00003.gguf"));
    assert!(paths[2].ends_with("model-00003-of-00003.gguf"));

    let model = GgufFile::open(&paths[0]).unwrap();
    assert_eq!(model.path(), paths[0]);
    assert_eq!(model.parts().len(), 3);
    for (part, path) in model.parts().iter().zip(&paths) {
        assert_eq!(part.path(), path.as_path());
    }
    assert_eq!(model.metadata().get_str("general.architecture").unwrap(), "llama");
    assert_eq!(model.parts()[1].metadata().get_u32(KEY_SPLIT_NO).unwrap(), 1);
    let names: Vec<&str> = model.tensors().iter().map(|tensor| tensor.name()).collect();
    assert_eq!(names, tensors.map(|(name, _)| name));
    for (index, (name, elements)) in tensors.iter().enumerate() {
        let tensor = model.tensor(name).unwrap();
        assert_eq!(tensor.part(), [0, 1, 1, 2][index]);
        assert_eq!(
            model.tensor_bytes(tensor),
            &f32_bytes((0..*elements).map(|i| (index * 100) as f32 + i as f32))[..]
        );
        assert_eq!(model.part_of(tensor).path(), paths[tensor.part()]);
        assert!(std::sync::Arc::ptr_eq(
            &model.mapped_tensor(tensor).map,
            model.parts()[tensor.part()].map()
        ));
    }

    // A later part names the first.
    let error = GgufFile::open(&paths[1]).unwrap_err().to_string();
    assert_one_line(&error);
    assert!(
        error.contains("part 2 of 3") && error.contains("model-00001-of-00003.gguf"),
        "{error}"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

/// The error opening the first part of a split model after `spoil` changed
/// its files; the files are checked to be unchanged by the attempt.
fn split_refusal(name: &str, spoil: impl FnOnce(&[PathBuf])) -> String {
    let folder = scratch(name);
    let tensors = [("a", 4), ("b", 4), ("c", 4)];
    let paths = write_split(&folder, &tensors, &[&[0], &[1], &[2]]);
    spoil(&paths);
    let before: Vec<Option<Vec<u8>>> = paths.iter().map(|path| std::fs::read(path).ok()).collect();
    let error = GgufFile::open(&paths[0]).unwrap_err().to_string();
    let after: Vec<Option<Vec<u8>>> = paths.iter().map(|path| std::fs::read(path).ok()).collect();
    assert_eq!(before, after);
    assert_one_line(&error);
    std::fs::remove_dir_all(&folder).unwrap();
    error
}

#[test]
fn split_models_with_a_part_missing_or_wrong_are_refused_naming_it() {
    let missing = split_refusal("split-missing", |paths| std::fs::remove_file(&paths[1]).unwrap());
    assert!(
        missing.contains("part 2 of 3")
            && missing.contains("is missing")
            && missing.contains("model-00002-of-00003.gguf"),
        "{missing}"
    );

    let wrong_number = split_refusal("split-wrong-no", |paths| {
        // Another model's part 3 where part 2 should be: its split.no is 2.
        let other_folder = scratch("split-wrong-no-other");
        let other = write_split(
            &other_folder,
            &[("x", 4), ("b", 4), ("y", 4)],
            &[&[0], &[1], &[2]],
        );
        std::fs::copy(&other[2], &paths[1]).unwrap();
        std::fs::remove_dir_all(&other_folder).unwrap();
    });
    assert!(
        wrong_number.contains("model-00002-of-00003.gguf")
            && wrong_number.contains("`split.no` is 2, expected 1"),
        "{wrong_number}"
    );

    let duplicate = split_refusal("split-duplicate", |paths| {
        let mut writer = GgufWriter::new(&paths[2]);
        writer.add_metadata(KEY_SPLIT_NO, 2u16).unwrap();
        writer.add_metadata(KEY_SPLIT_COUNT, 3u16).unwrap();
        writer.add_tensor_info("a", &[4], TensorType::F32).unwrap();
        let mut data = writer.write_header().unwrap();
        data.write_tensor(&[0; 16]).unwrap();
        data.finish().unwrap();
    });
    assert!(
        duplicate.contains("tensor `a` is also in") && duplicate.contains("model-00001-of-00003.gguf"),
        "{duplicate}"
    );

    let count = split_refusal("split-count", |paths| {
        let mut writer = GgufWriter::new(&paths[2]);
        writer.add_metadata(KEY_SPLIT_NO, 2u16).unwrap();
        writer.add_metadata(KEY_SPLIT_COUNT, 3u16).unwrap();
        writer.write_header().unwrap().finish().unwrap();
    });
    assert!(
        count.contains("`split.tensors.count` is 3 but the 3 parts hold 2 tensors"),
        "{count}"
    );

    // split.count without the name that finds the other parts.
    let folder = scratch("split-renamed");
    let paths = write_split(&folder, &[("a", 4), ("b", 4)], &[&[0], &[1]]);
    let renamed = folder.join("model.gguf");
    std::fs::rename(&paths[0], &renamed).unwrap();
    let error = GgufFile::open(&renamed).unwrap_err().to_string();
    assert!(
        error.contains("-00001-of-00002.gguf") && error.contains("cannot be found"),
        "{error}"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

// ---------------------------------------------------------------------------
// Hostile files, built by editing a good one.

/// A GGUF file as its parts, so a test can spoil any one of them.
#[derive(Clone)]
struct RawFile {
    magic: Vec<u8>,
    version: u32,
    tensor_count: Option<u64>,
    entry_count: Option<u64>,
    entries: Vec<RawEntry>,
    tensors: Vec<RawTensor>,
    alignment: u64,
    data: Vec<u8>,
}

#[derive(Clone)]
struct RawEntry {
    key: Vec<u8>,
    type_id: u32,
    payload: Vec<u8>,
}

#[derive(Clone)]
struct RawTensor {
    name: Vec<u8>,
    n_dims: Option<u32>,
    dims: Vec<u64>,
    type_id: u32,
    offset: u64,
}

fn raw_string(text: &[u8]) -> Vec<u8> {
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text);
    bytes
}

impl RawEntry {
    fn new(key: &str, value_type: ValueType, payload: Vec<u8>) -> RawEntry {
        RawEntry {
            key: key.as_bytes().to_vec(),
            type_id: value_type.id(),
            payload,
        }
    }
}

impl RawFile {
    /// A valid file: two keys, an F32 `[8, 2]` and a Q8_0 `[32, 1]` tensor.
    fn good() -> RawFile {
        RawFile {
            magic: b"GGUF".to_vec(),
            version: 3,
            tensor_count: None,
            entry_count: None,
            entries: vec![
                RawEntry::new("general.architecture", ValueType::String, raw_string(b"llama")),
                RawEntry::new("llama.block_count", ValueType::U32, 2u32.to_le_bytes().to_vec()),
            ],
            tensors: vec![
                RawTensor {
                    name: b"token_embd.weight".to_vec(),
                    n_dims: None,
                    dims: vec![8, 2],
                    type_id: 0,
                    offset: 0,
                },
                RawTensor {
                    name: b"output.weight".to_vec(),
                    n_dims: None,
                    dims: vec![32, 1],
                    type_id: 8,
                    offset: 64,
                },
            ],
            alignment: 32,
            data: pattern_bytes(64 + 34, 1),
        }
    }

    fn header(&self) -> Vec<u8> {
        let mut bytes = self.magic.clone();
        bytes.extend(self.version.to_le_bytes());
        bytes.extend(
            self.tensor_count
                .unwrap_or(self.tensors.len() as u64)
                .to_le_bytes(),
        );
        bytes.extend(
            self.entry_count
                .unwrap_or(self.entries.len() as u64)
                .to_le_bytes(),
        );
        for entry in &self.entries {
            bytes.extend(raw_string(&entry.key));
            bytes.extend(entry.type_id.to_le_bytes());
            bytes.extend(&entry.payload);
        }
        for tensor in &self.tensors {
            bytes.extend(raw_string(&tensor.name));
            bytes.extend(tensor.n_dims.unwrap_or(tensor.dims.len() as u32).to_le_bytes());
            for dim in &tensor.dims {
                bytes.extend(dim.to_le_bytes());
            }
            bytes.extend(tensor.type_id.to_le_bytes());
            bytes.extend(tensor.offset.to_le_bytes());
        }
        bytes.resize((bytes.len() as u64).next_multiple_of(self.alignment) as usize, 0);
        bytes
    }

    fn bytes(&self) -> Vec<u8> {
        let mut bytes = self.header();
        bytes.extend(&self.data);
        bytes
    }

    fn with(mut self, edit: impl FnOnce(&mut RawFile)) -> RawFile {
        edit(&mut self);
        self
    }
}

/// Opens `bytes` as a file and checks it is refused with one line naming
/// the file and containing every needle, the same as the in-memory reader
/// says, and that the file is unchanged. Returns the message.
fn refused(name: &str, bytes: &[u8], needles: &[&str]) -> String {
    let folder = scratch(&format!("hostile-{name}"));
    let path = folder.join(format!("{name}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    let error = GgufFile::open(&path).expect_err(name);
    let message = error.to_string();
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name}: the file changed");
    assert_one_line(&message);
    assert!(
        message.starts_with(&path.display().to_string()),
        "{name}: {message}"
    );
    for needle in needles {
        assert!(message.contains(needle), "{name}: `{needle}` not in: {message}");
    }
    let in_memory = read_gguf_header(bytes, &path).expect_err(name).to_string();
    assert_eq!(in_memory, message, "{name}");
    std::fs::remove_dir_all(&folder).unwrap();
    message
}

#[test]
fn the_good_raw_file_is_read() {
    let bytes = RawFile::good().bytes();
    let header = read_gguf_header(&bytes, Path::new("good.gguf")).unwrap();
    assert_eq!(header.tensors().len(), 2);
    assert_eq!(header.metadata().get_u32("llama.block_count").unwrap(), 2);
    let output = &header.tensors()[1];
    assert_eq!(
        &bytes[output.file_offset()..output.file_offset() + output.byte_len()],
        &pattern_bytes(98, 1)[64..]
    );
}

#[test]
fn wrong_magic_and_versions_are_refused_by_name() {
    let good = RawFile::good();
    refused(
        "magic",
        &good.clone().with(|file| file.magic = b"GGML".to_vec()).bytes(),
        &["not a GGUF file", "`GGML`"],
    );
    refused(
        "magic-binary",
        &good
            .clone()
            .with(|file| file.magic = vec![0, 0xFF, b'\n', 1])
            .bytes(),
        &["not a GGUF file"],
    );
    refused(
        "version-1",
        &good.clone().with(|file| file.version = 1).bytes(),
        &["GGUF version 1 is not supported"],
    );
    refused(
        "version-4",
        &good.clone().with(|file| file.version = 4).bytes(),
        &["GGUF version 4 is not supported"],
    );
    refused(
        "version-0",
        &good.clone().with(|file| file.version = 0).bytes(),
        &["GGUF version 0 is not supported"],
    );
    let big_endian = std::fs::read(fixture("big_endian.gguf")).unwrap();
    refused("big-endian", &big_endian, &["big-endian", "0x03000000"]);
    refused("empty", &[], &["truncated: 0 bytes"]);
}

#[test]
fn every_prefix_of_a_valid_file_is_refused_or_read_without_panicking() {
    for source in ["all_types.gguf", "alignment_64.gguf"] {
        let bytes = std::fs::read(fixture(source)).unwrap();
        let full = read_gguf_header(&bytes, Path::new(source)).unwrap();
        let data_end = full
            .tensors()
            .iter()
            .map(|tensor| tensor.file_offset() + tensor.byte_len())
            .max()
            .unwrap();
        for length in 0..bytes.len() {
            match read_gguf_header(&bytes[..length], Path::new(source)) {
                Ok(header) => {
                    // Only the padding after the last tensor may be cut.
                    assert!(
                        length >= data_end,
                        "{source}: a prefix of {length} bytes was read"
                    );
                    assert_eq!(header.tensors(), full.tensors());
                }
                Err(error) => {
                    let message = error.to_string();
                    assert_one_line(&message);
                    assert!(message.contains(source), "{message}");
                    assert!(
                        message.contains("truncated")
                            || message.contains("runs past the end")
                            || message.contains("cannot fit"),
                        "{length}: {message}"
                    );
                }
            }
        }
    }
    // Through files too, for a few cuts: the header, the metadata, a tensor.
    let bytes = std::fs::read(fixture("all_types.gguf")).unwrap();
    for (index, length) in [3usize, 20, 100, 1000, 1500].into_iter().enumerate() {
        let message = refused(&format!("prefix-{index}"), &bytes[..length], &[]);
        assert!(
            ["truncated", "runs past the end", "cannot fit"]
                .iter()
                .any(|cause| message.contains(cause)),
            "{message}"
        );
    }
}

#[test]
fn lengths_and_counts_past_the_end_are_refused_before_allocating() {
    let good = RawFile::good();
    let huge_key = good.clone().with(|file| file.entries[0].key = vec![b'k'; 4]);
    let mut bytes = huge_key.bytes();
    // The first key's length field sits after magic, version and two counts.
    bytes[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    refused(
        "key-length",
        &bytes,
        &["the key of metadata entry 0", "runs past the end"],
    );

    let string_value = good
        .clone()
        .with(|file| file.entries[0].payload = (1u64 << 40).to_le_bytes().to_vec());
    refused(
        "string-length",
        &string_value.bytes(),
        &[
            "metadata key `general.architecture`",
            "1099511627776 bytes",
            "runs past the end",
        ],
    );

    let array = |element: ValueType, count: u64| {
        let mut payload = element.id().to_le_bytes().to_vec();
        payload.extend(count.to_le_bytes());
        good.clone()
            .with(|file| file.entries[1] = RawEntry::new("tokenizer.ggml.tokens", ValueType::Array, payload))
    };
    refused(
        "array-count",
        &array(ValueType::String, u64::MAX).bytes(),
        &["`tokenizer.ggml.tokens`", "str elements cannot fit"],
    );
    refused(
        "array-count-u8",
        &array(ValueType::U8, 1 << 30).bytes(),
        &["`tokenizer.ggml.tokens`", "1073741824 u8 elements cannot fit"],
    );
    refused(
        "array-count-f64",
        &array(ValueType::F64, 1000).bytes(),
        &["1000 f64 elements cannot fit"],
    );
    let strings = good.clone().with(|file| {
        let mut payload = ValueType::String.id().to_le_bytes().to_vec();
        payload.extend(2u64.to_le_bytes());
        payload.extend(raw_string(b"ok"));
        payload.extend((1u64 << 33).to_le_bytes());
        file.entries[1] = RawEntry::new("tokenizer.ggml.tokens", ValueType::Array, payload);
    });
    refused(
        "array-string-length",
        &strings.bytes(),
        &[
            "element 1 of metadata key `tokenizer.ggml.tokens`",
            "runs past the end",
        ],
    );

    refused(
        "tensor-count",
        &good
            .clone()
            .with(|file| file.tensor_count = Some(u64::MAX))
            .bytes(),
        &["the tensor count", "cannot fit"],
    );
    refused(
        "tensor-count-small",
        &good.clone().with(|file| file.tensor_count = Some(100)).bytes(),
        &["100 tensor infos cannot fit"],
    );
    refused(
        "entry-count",
        &good.clone().with(|file| file.entry_count = Some(1 << 50)).bytes(),
        &["the metadata entry count", "cannot fit"],
    );
    refused(
        "entry-count-off-by-one",
        &good.clone().with(|file| file.entry_count = Some(3)).bytes(),
        &[],
    );
    let name_length = good.clone().with(|file| file.tensors[1].name = vec![b'x'; 3]);
    let mut bytes = name_length.bytes();
    let position = bytes.windows(3).position(|window| window == b"xxx").unwrap() - 8;
    bytes[position..position + 8].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    refused(
        "tensor-name-length",
        &bytes,
        &["the name of tensor 1", "runs past the end"],
    );
}

#[test]
fn malformed_strings_and_values_are_refused_naming_the_key() {
    let good = RawFile::good();
    refused(
        "utf8-key",
        &good
            .clone()
            .with(|file| file.entries[1].key = b"llama.\xFFcount".to_vec())
            .bytes(),
        &["the key of metadata entry 1 is not UTF-8"],
    );
    refused(
        "utf8-value",
        &good
            .clone()
            .with(|file| file.entries[0].payload = raw_string(b"ll\xC3ama"))
            .bytes(),
        &["metadata key `general.architecture` is not UTF-8"],
    );
    refused(
        "utf8-tensor",
        &good
            .clone()
            .with(|file| file.tensors[0].name = b"tok\xE2\x82".to_vec())
            .bytes(),
        &["the name of tensor 0 is not UTF-8"],
    );
    refused(
        "empty-key",
        &good.clone().with(|file| file.entries[1].key.clear()).bytes(),
        &["metadata entry 1 has an empty key"],
    );

    let nested = good.clone().with(|file| {
        let mut payload = ValueType::Array.id().to_le_bytes().to_vec();
        payload.extend(1u64.to_le_bytes());
        file.entries[1] = RawEntry::new("bad\nkey", ValueType::Array, payload);
    });
    let message = refused("nested-array", &nested.bytes(), &["`bad\\nkey`", "nested array"]);
    assert!(!message.contains("bad\nkey"));

    refused(
        "unknown-type",
        &good.clone().with(|file| file.entries[1].type_id = 13).bytes(),
        &["`llama.block_count` has unknown value type 13"],
    );
    let unknown_element = good.clone().with(|file| {
        let mut payload = 99u32.to_le_bytes().to_vec();
        payload.extend(0u64.to_le_bytes());
        file.entries[1] = RawEntry::new("llama.list", ValueType::Array, payload);
    });
    refused(
        "unknown-element",
        &unknown_element.bytes(),
        &["`llama.list` is an array of unknown value type 99"],
    );

    let duplicate = good
        .clone()
        .with(|file| file.entries.push(file.entries[1].clone()));
    refused(
        "duplicate-key",
        &duplicate.bytes(),
        &["metadata key `llama.block_count` appears twice"],
    );
}

#[test]
fn bad_alignments_are_refused() {
    let with_alignment = |type_id: ValueType, payload: Vec<u8>| {
        RawFile::good().with(|file| {
            file.entries
                .push(RawEntry::new("general.alignment", type_id, payload))
        })
    };
    refused(
        "alignment-0",
        &with_alignment(ValueType::U32, 0u32.to_le_bytes().to_vec()).bytes(),
        &["`general.alignment` is 0, which is not a power of two"],
    );
    refused(
        "alignment-48",
        &with_alignment(ValueType::U32, 48u32.to_le_bytes().to_vec()).bytes(),
        &["is 48, which is not a power of two"],
    );
    refused(
        "alignment-i32",
        &with_alignment(ValueType::I32, 32i32.to_le_bytes().to_vec()).bytes(),
        &["`general.alignment` is i32, expected u32"],
    );
    refused(
        "alignment-u64",
        &with_alignment(ValueType::U64, 32u64.to_le_bytes().to_vec()).bytes(),
        &["is u64, expected u32"],
    );
    // A good alignment moves the data: the good file's offsets (0, 64) are
    // not multiples of 128.
    let mut moved = with_alignment(ValueType::U32, 128u32.to_le_bytes().to_vec());
    moved.alignment = 128;
    refused(
        "alignment-128-offsets",
        &moved.bytes(),
        &["tensor `output.weight`: data offset 64 is not a multiple of the alignment 128"],
    );
    moved.tensors[1].offset = 128;
    moved.data.resize(128 + 34, 7);
    assert_eq!(
        read_gguf_header(&moved.bytes(), Path::new("m.gguf"))
            .unwrap()
            .alignment(),
        128
    );
}

#[test]
fn bad_tensor_infos_are_refused_naming_the_tensor() {
    let good = RawFile::good();
    let edit = |edit: fn(&mut RawFile)| good.clone().with(edit).bytes();
    refused(
        "n-dims",
        &edit(|file| file.tensors[0].dims = vec![1, 1, 1, 1, 8]),
        &["tensor `token_embd.weight` has 5 dimensions; ggml allows at most 4"],
    );
    refused(
        "n-dims-huge",
        &edit(|file| file.tensors[0].n_dims = Some(u32::MAX)),
        &["`token_embd.weight` has 4294967295 dimensions"],
    );
    refused(
        "negative-dim",
        &edit(|file| file.tensors[0].dims[1] = 1 << 63),
        &["tensor `token_embd.weight`: dimension 1 is 9223372036854775808"],
    );
    refused(
        "element-overflow",
        &edit(|file| file.tensors[0].dims = vec![1 << 32, 1 << 32]),
        &["`token_embd.weight`", "more elements than ggml's int64"],
    );
    refused(
        "byte-overflow",
        &edit(|file| file.tensors[0].dims = vec![1 << 31, 1 << 31]),
        &["`token_embd.weight`", "overflow a 64-bit byte count"],
    );
    refused(
        "row-blocks",
        &edit(|file| file.tensors[1].dims = vec![16, 2]),
        &[
            "tensor `output.weight` is Q8_0, stored in blocks of 32 elements, but its rows (dimension 0) have 16",
        ],
    );
    refused(
        "unknown-type",
        &edit(|file| file.tensors[1].type_id = 43),
        &["tensor `output.weight` has unknown ggml type 43"],
    );
    refused(
        "removed-type",
        &edit(|file| file.tensors[1].type_id = 31),
        &["tensor `output.weight` has type 31 (Q4_0_4_4)", "removed"],
    );
    refused(
        "type-negative",
        &edit(|file| file.tensors[1].type_id = u32::MAX),
        &["unknown ggml type 4294967295"],
    );
    refused(
        "unaligned",
        &edit(|file| file.tensors[1].offset = 40),
        &["tensor `output.weight`: data offset 40 is not a multiple of the alignment 32"],
    );
    refused(
        "overlap",
        &edit(|file| file.tensors[1].offset = 32),
        &[
            "tensors `token_embd.weight` (file bytes",
            "and `output.weight`",
            "overlap",
        ],
    );
    let reversed = |file: &mut RawFile| {
        file.tensors[0].offset = 32;
        file.tensors[1].offset = 0;
    };
    refused(
        "overlap-reversed",
        &edit(reversed),
        &["tensors `output.weight`", "and `token_embd.weight`", "overlap"],
    );
    refused(
        "past-end",
        &edit(|file| file.tensors[1].offset = 96),
        &["tensor `output.weight`", "ends past the end of the file"],
    );
    refused(
        "offset-overflow",
        &edit(|file| file.tensors[1].offset = u64::MAX - 31),
        &["tensor `output.weight`", "overflows a 64-bit file offset"],
    );
    refused(
        "duplicate-tensor",
        &edit(|file| file.tensors[1].name = b"token_embd.weight".to_vec()),
        &["tensor `token_embd.weight` appears twice (tensors 0 and 1)"],
    );
    refused(
        "empty-name",
        &edit(|file| file.tensors[1].name.clear()),
        &["tensor 1 has an empty name"],
    );
    refused(
        "long-name",
        &edit(|file| file.tensors[1].name = vec![b'n'; 64]),
        &["has a name of 64 bytes; ggml allows at most 63"],
    );
    refused(
        "data-missing",
        &edit(|file| file.data.truncate(70)),
        &["tensor `output.weight`", "ends past the end of the file"],
    );
}

#[test]
fn what_gguf_cpp_allows_is_read() {
    let good = RawFile::good();
    // No dimensions: one element. A dimension of 0: no bytes, overlapping nothing.
    let edge = good.clone().with(|file| {
        file.tensors[0].dims = vec![];
        file.tensors.push(RawTensor {
            name: b"empty".to_vec(),
            n_dims: None,
            dims: vec![32, 0],
            type_id: 8,
            offset: 64,
        });
    });
    let bytes = edge.bytes();
    let header = read_gguf_header(&bytes, Path::new("edge.gguf")).unwrap();
    assert_eq!(header.tensors()[0].byte_len(), 4);
    assert_eq!(header.tensors()[0].element_count(), 1);
    assert_eq!(header.tensors()[2].byte_len(), 0);
    // Any non-zero byte is a true bool; no tensors and no padding after the header.
    let bools = RawFile {
        tensors: vec![],
        data: vec![],
        ..good.clone()
    }
    .with(|file| {
        file.entries.push(RawEntry::new("flag", ValueType::Bool, vec![2]));
        file.alignment = 1;
    });
    let header = read_gguf_header(&bools.bytes(), Path::new("bools.gguf")).unwrap();
    assert!(header.metadata().get_bool("flag").unwrap());
    assert!(header.tensors().is_empty());
}

// ---------------------------------------------------------------------------
// Past 4 GiB.

#[test]
fn tensors_past_4_gib_are_placed_by_64_bit_offsets() {
    let folder = scratch("past-4-gib");
    let path = folder.join("large.gguf");
    // A 4.5 GiB I8 tensor, then a small F32 one past 4 GiB. The file is
    // sparse: only the header and the last tensor take disk space.
    let big_len: u64 = (9 << 29) + 32;
    let raw = RawFile {
        tensors: vec![
            RawTensor {
                name: b"big".to_vec(),
                n_dims: None,
                dims: vec![big_len],
                type_id: 24,
                offset: 0,
            },
            RawTensor {
                name: b"tail".to_vec(),
                n_dims: None,
                dims: vec![8],
                type_id: 0,
                offset: big_len,
            },
        ],
        data: vec![],
        ..RawFile::good()
    };
    let header = raw.header();
    let tail_offset = header.len() as u64 + big_len;
    let tail = f32_bytes((0..8).map(|i| i as f32 + 0.5));
    let made = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&path)?;
        file.write_all(&header)?;
        file.set_len(tail_offset + tail.len() as u64)?;
        file.seek(SeekFrom::Start(tail_offset))?;
        file.write_all(&tail)?;
        file.sync_all()
    })();
    if let Err(error) = made {
        eprintln!(
            "SKIPPED tensors_past_4_gib_are_placed_by_64_bit_offsets: this filesystem will not hold a sparse 4.5 GiB file ({error})"
        );
        let _ = std::fs::remove_dir_all(&folder);
        return;
    }
    let file = GgufFile::open(&path).unwrap();
    let big = file.tensor("big").unwrap();
    assert_eq!(big.byte_len() as u64, big_len);
    let tail_info = file.tensor("tail").unwrap();
    assert!(tail_info.file_offset() as u64 > u64::from(u32::MAX));
    assert_eq!(tail_info.file_offset() as u64, tail_offset);
    assert_eq!(file.tensor_bytes(tail_info), &tail[..]);
    assert_eq!(file.mapped_tensor(tail_info).offset as u64, tail_offset);
    drop(file);
    // One byte short, the last tensor is past the end.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(tail_offset + 31)
        .unwrap();
    let error = GgufFile::open(&path).unwrap_err().to_string();
    assert!(
        error.contains("tensor `tail`") && error.contains("ends past the end"),
        "{error}"
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

#[test]
fn split_part_paths_follow_llama_cpp() {
    assert_eq!(
        split_part_path(Path::new("/models/llama"), 0, 3),
        PathBuf::from("/models/llama-00001-of-00003.gguf")
    );
    assert_eq!(
        split_part_path(Path::new("m"), 65534, 65535),
        PathBuf::from("m-65535-of-65535.gguf")
    );
}
