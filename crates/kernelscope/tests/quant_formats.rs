//! The block-quantized formats against llama.cpp itself: dequantization
//! bit-exact with gguf-py (and llama.cpp's C, which the fixture script
//! checks agrees), quantization byte-identical with llama.cpp's reference C
//! quantizers, the dot product against the dequantized row, round-trip
//! error bounds and length errors. Fixtures are made by
//! tools/reference/quant_fixtures.py (see tests/fixtures/quant/README.md).

use std::path::{Path, PathBuf};

use kernelscope::hash::Fnv1a64;
use kernelscope::quant::{QuantError, QuantFormat};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::quant_sweep::compare_with_llama_cpp;
use kernelscope::testing::random_f32;

/// Elements per row of `quantize_input.f32` and of the sweep.
const INPUT_ROW: usize = 256;

/// The sweep's kinds of row; `quantize_input.f32` holds one of each.
const ROW_KINDS: u64 = 13;

/// Row `row` of the fixture script's sweep (`sweep_row` in
/// tools/reference/quant_fixtures.py, which this must follow operation for
/// operation): SplitMix64 draws turned into values by integer arithmetic and
/// single IEEE operations only, so Python and Rust make the same bits.
fn sweep_row(row: u64) -> Vec<f32> {
    const SWEEP_SEED: u64 = 0x5157_4545_5053_0001;
    const AUX: u64 = 4096;
    let seed = SWEEP_SEED.wrapping_add(row);
    let bits = |index: u64| SplitMix64::u64_at(seed, index);
    let top24 = |bits: u64| bits >> 40;
    let unit = |bits: u64| top24(bits) as f64 / 16_777_216.0;
    let aux = |k: u64| bits(AUX + k);
    let normal = |i: u64| {
        // Irwin-Hall: twelve uniforms less six, exact in f64.
        let sum: u64 = (0..12).map(|j| top24(bits(12 * i + j))).sum();
        (sum as i64 - 6 * (1 << 24)) as f64 / 16_777_216.0
    };
    let uniform = |i: u64| unit(aux(64 + i));
    let n = INPUT_ROW as u64;
    let values: Vec<f64> = match row % ROW_KINDS {
        0 => (0..n).map(normal).collect(),
        1 => (0..n).map(|i| normal(i) * 0.02).collect(),
        2 => (0..n).map(|i| normal(i) * 300.0).collect(),
        3 => {
            let mut values: Vec<f64> = (0..n).map(normal).collect();
            let sign = if aux(2) & 1 == 0 { 1.0 } else { -1.0 };
            values[(aux(0) % n) as usize] = sign * (20.0 + 40.0 * unit(aux(1)));
            values
        }
        4 => (0..n).map(|i| 7.0 + uniform(i) * 1e-3).collect(),
        5 => (0..n).map(|i| -2.5 - uniform(i) * 1e-2).collect(),
        6 => (0..n)
            .map(|i| ((top24(aux(64 + i)) % 33) as f64 - 16.0) * 0.25)
            .collect(),
        7 => {
            let start32 = 32 * (aux(0) % 8);
            let start16 = 16 * (aux(1) % 16);
            (0..n)
                .map(|i| {
                    let zeroed = uniform(i) < 0.7
                        || (start32..start32 + 32).contains(&i)
                        || (start16..start16 + 16).contains(&i);
                    if zeroed {
                        0.0f64.copysign(normal(i))
                    } else {
                        normal(i)
                    }
                })
                .collect()
        }
        8 => (0..n).map(|i| normal(i) * 1e-6).collect(),
        9 => (0..n).map(|i| normal(i) / (0.05 + uniform(i))).collect(),
        10 => (0..n)
            .map(|i| {
                let sub = i / 32;
                let exponent = (aux(8 + sub) % 14) as i32 - 10;
                normal(i) * ((1.0 + unit(aux(sub))) * 2f64.powi(exponent))
            })
            .collect(),
        11 => (0..n).map(|i| normal(i).abs()).collect(),
        _ => (0..n)
            .map(|i| (unit(aux(i / 32)) - 0.5) * 10.0 + normal(i) * 0.1)
            .collect(),
    };
    values.into_iter().map(|value| value as f32).collect()
}

/// manifest.json, which records the sweep's hashes.
fn manifest() -> serde_json::Value {
    serde_json::from_slice(&read(&fixture_dir(), "manifest.json")).expect("manifest.json")
}

/// A hash as the fixture script writes it (`0x` and 16 hex digits).
fn manifest_hash(value: &serde_json::Value) -> u64 {
    let text = value.as_str().expect("a hash string");
    u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("a hex hash")
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant")
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    let path = dir.join(name);
    std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Standard normal values (Box-Muller), so that the quantizers see the bell
/// shape of real weights, tails included, rather than a uniform spread.
fn random_normal(seed: u64, count: usize, sigma: f32) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    // 53 random bits: the logarithm below must never see 0.
    let mut unit = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (0..count)
        .map(|_| {
            let radius = (-2.0 * (1.0 - unit()).ln()).sqrt();
            let angle = std::f64::consts::TAU * unit();
            (radius * angle.cos()) as f32 * sigma
        })
        .collect()
}

fn quantize(format: QuantFormat, values: &[f32]) -> Vec<u8> {
    let mut blocks = vec![0u8; format.row_bytes(values.len()).unwrap()];
    format.quantize_row(values, &mut blocks).unwrap();
    blocks
}

fn dequantize(format: QuantFormat, blocks: &[u8]) -> Vec<f32> {
    let elements = blocks.len() / format.block_bytes() * format.block_elements();
    let mut values = vec![f32::NAN; elements];
    format.dequantize_row(blocks, &mut values).unwrap();
    values
}

/// Compares `format`'s quantizer with the bytes in `dir`, naming the first
/// block that differs with its input.
fn check_quantize_against(dir: &Path, format: QuantFormat) -> usize {
    compare_with_llama_cpp(dir, format, INPUT_ROW).unwrap_or_else(|difference| panic!("{difference}"))
}

#[test]
fn dequantize_is_bit_exact_with_gguf_py() {
    let dir = fixture_dir();
    for format in QuantFormat::ALL {
        let blocks = read(&dir, &format!("{}.blocks.bin", format.name()));
        let expected = floats(&read(&dir, &format!("{}.dequantized.f32", format.name())));
        assert!(
            blocks.len() >= 3 * format.block_bytes(),
            "{format}: fixture too small"
        );
        assert!(expected.iter().all(|x| x.is_finite()) && expected.iter().any(|&x| x != 0.0));
        let actual = dequantize(format, &blocks);
        assert_eq!(actual.len(), expected.len(), "{format}");
        for (index, (a, e)) in actual.iter().zip(&expected).enumerate() {
            assert_eq!(
                a.to_bits(),
                e.to_bits(),
                "{format}: element {index} (block {}) is {a:e}, gguf-py gives {e:e}",
                index / format.block_elements()
            );
        }
    }
}

#[test]
fn quantize_is_byte_identical_with_llama_cpp() {
    for format in QuantFormat::ALL {
        let rows = check_quantize_against(&fixture_dir(), format);
        assert_eq!(rows as u64, ROW_KINDS, "{format}: one fixture row of each kind");
    }
}

#[test]
fn the_sweep_generator_makes_the_scripts_rows() {
    // Row for row with the stored rows, then the whole sweep by its hash: a
    // mismatch here is the generator drifting, not a quantizer.
    let stored = floats(&read(&fixture_dir(), "quantize_input.f32"));
    for (row, stored) in stored.chunks(INPUT_ROW).enumerate() {
        let made = sweep_row(row as u64);
        let same = made.iter().zip(stored).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "sweep row {row} differs from quantize_input.f32");
    }
    let sweep = &manifest()["sweep"];
    let rows = sweep["rows"].as_u64().expect("sweep rows");
    assert!(rows >= 1000, "a sweep of only {rows} rows");
    let mut hash = Fnv1a64::new();
    for row in 0..rows {
        for value in sweep_row(row) {
            hash.update(&value.to_le_bytes());
        }
    }
    assert_eq!(
        hash.finish(),
        manifest_hash(&sweep["input_fnv1a64"]),
        "sweep input"
    );
}

/// Thousands of rows against llama.cpp's C, checked by hash; the fixture
/// rows above give a readable diff, this catches the rarer differences (a
/// trial scale off by a hair changes a block in one row of a hundred).
#[test]
fn quantize_matches_llama_cpp_over_the_hashed_sweep() {
    let sweep = &manifest()["sweep"];
    let rows: Vec<Vec<f32>> = (0..sweep["rows"].as_u64().expect("sweep rows"))
        .map(sweep_row)
        .collect();
    for format in QuantFormat::ALL {
        let mut hash = Fnv1a64::new();
        for row in &rows {
            hash.update(&quantize(format, row));
        }
        let expected = manifest_hash(&sweep["quantized_fnv1a64"][format.name()]);
        assert_eq!(
            hash.finish(),
            expected,
            "{format}: the sweep's bytes differ from llama.cpp's; to find the block, write the sweep \
             out with tools/reference/quant_fixtures.py --rows {} and run the example \
             quant_sweep_diff on it",
            rows.len()
        );
    }
}

#[test]
fn quantized_bytes_dequantize_near_their_input() {
    // The fixture rows through our own round trip: a cheap guard that the
    // fixtures and the quantizers mean the same values, whichever breaks.
    let input = floats(&read(&fixture_dir(), "quantize_input.f32"));
    let row = &input[..INPUT_ROW]; // near-normal, unit variance
    for format in QuantFormat::ALL {
        let restored = dequantize(format, &quantize(format, row));
        let worst = row
            .iter()
            .zip(&restored)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < 0.5,
            "{format}: worst error {worst} on a unit-variance row"
        );
    }
}

/// Relative RMS error of quantize-then-dequantize on normal data, per
/// format, with the bound each must stay under. The bounds sit about 15%
/// above what llama.cpp's quantizers reach (measured here on 64 blocks of
/// 256): enough margin for other random data, small enough that a level
/// off by one in a fraction of the blocks fails.
#[test]
fn round_trip_error_stays_within_each_formats_bound() {
    let bounds = [
        (QuantFormat::Q4_0, 0.100),  // measured 0.0859 .. 0.0865
        (QuantFormat::Q4_1, 0.091),  // 0.0781 .. 0.0788
        (QuantFormat::Q5_0, 0.050),  // 0.0426 .. 0.0429
        (QuantFormat::Q5_1, 0.044),  // 0.0379 .. 0.0383
        (QuantFormat::Q8_0, 0.0062), // 0.0054
        (QuantFormat::Q4_K, 0.083),  // 0.0712 .. 0.0720
        (QuantFormat::Q5_K, 0.042),  // 0.0360 .. 0.0368
        (QuantFormat::Q6_K, 0.0205), // 0.0178 .. 0.0179
    ];
    for (seed, sigma) in [(1u64, 1.0f32), (2, 0.02), (3, 300.0)] {
        let values = random_normal(seed, 64 * 256, sigma);
        for (format, bound) in bounds {
            let restored = dequantize(format, &quantize(format, &values));
            let error: f64 = values
                .iter()
                .zip(&restored)
                .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
                .sum();
            let energy: f64 = values.iter().map(|&x| f64::from(x).powi(2)).sum();
            let relative = (error / energy).sqrt();
            assert!(
                relative < bound,
                "{format} (sigma {sigma}): relative RMS error {relative:.5} over bound {bound}"
            );
            // More bits, less error: a format that silently used fewer
            // levels would still pass a loose bound, but not this.
            assert!(
                relative > bound / 3.0,
                "{format}: {relative:.5} is implausibly small"
            );
        }
    }
}

#[test]
fn dot_row_matches_the_dot_of_the_dequantized_row() {
    let fixture_dir = fixture_dir();
    for format in QuantFormat::ALL {
        let random_blocks = read(&fixture_dir, &format!("{}.blocks.bin", format.name()));
        let mut cases: Vec<Vec<u8>> = vec![random_blocks];
        for (seed, elements) in [(11u64, format.block_elements()), (12, 4096), (13, 11 * 256)] {
            cases.push(quantize(format, &random_normal(seed, elements, 0.5)));
        }
        for (case, blocks) in cases.iter().enumerate() {
            let weights = dequantize(format, blocks);
            let x = random_f32(100 + case as u64, weights.len());
            let dot = format.dot_row(blocks, &x).unwrap();
            // Each f32 product is exact in f64, so this sum is the dot
            // product of the dequantized row up to f64 rounding.
            let exact: f64 = weights
                .iter()
                .zip(&x)
                .map(|(&w, &x)| f64::from(w) * f64::from(x))
                .sum();
            let magnitude: f64 = weights
                .iter()
                .zip(&x)
                .map(|(&w, &x)| (f64::from(w) * f64::from(x)).abs())
                .sum();
            // Eight lanes of n/8 sequential f32 additions, then three pairwise
            // levels: the classic bound on that summation's rounding.
            let bound = (weights.len() / 8 + 4) as f64 * f64::from(f32::EPSILON) * magnitude;
            assert!(
                (f64::from(dot) - exact).abs() <= bound,
                "{format} case {case}: dot_row {dot} vs {exact} (bound {bound:e})"
            );
            // And, in practice, far closer than that bound to the plain
            // sequential f32 dot of the dequantized row (both are typically
            // within 1e-6 of the exact value here).
            let sequential: f32 = weights.iter().zip(&x).map(|(w, x)| w * x).sum();
            assert!(
                (f64::from(dot) - f64::from(sequential)).abs() <= 1e-5 * magnitude,
                "{format} case {case}: dot_row {dot} vs sequential f32 {sequential}"
            );
        }
    }
}

#[test]
fn wrong_lengths_are_errors_and_nothing_is_written() {
    for format in QuantFormat::ALL {
        let (elements, bytes) = (format.block_elements(), format.block_bytes());
        let values = random_f32(7, 2 * elements);
        let blocks = quantize(format, &values);

        // One byte short and one byte over.
        for actual in [2 * bytes - 1, 2 * bytes + 1] {
            let expected_error = QuantError::ByteLength {
                format,
                elements: 2 * elements,
                expected: 2 * bytes,
                actual,
            };
            let mut out = vec![1.5f32; 2 * elements];
            let mut padded = blocks.clone();
            padded.resize(actual, 0);
            assert_eq!(format.dequantize_row(&padded, &mut out), Err(expected_error));
            assert!(
                out.iter().all(|&v| v == 1.5),
                "{format}: dequantize wrote before failing"
            );
            assert_eq!(format.dot_row(&padded, &values), Err(expected_error));
            let mut quantized = vec![0xA5u8; actual];
            assert_eq!(format.quantize_row(&values, &mut quantized), Err(expected_error));
            assert!(
                quantized.iter().all(|&b| b == 0xA5),
                "{format}: quantize wrote before failing"
            );
        }

        // Not a whole number of blocks, whatever the byte count.
        let partial = QuantError::PartialBlock {
            format,
            elements: elements + 1,
        };
        let mut out = vec![0.0f32; elements + 1];
        assert_eq!(format.dequantize_row(&blocks, &mut out), Err(partial));
        assert_eq!(
            format.dot_row(&blocks, &random_f32(8, elements + 1)),
            Err(partial)
        );
        let mut quantized = vec![0u8; 2 * bytes];
        assert_eq!(
            format.quantize_row(&random_f32(9, elements + 1), &mut quantized),
            Err(partial)
        );
        let message = partial.to_string();
        assert!(
            message.contains(&format!("{elements}-element blocks")),
            "{message}"
        );

        // An empty row is a whole number of blocks: nothing to do.
        assert_eq!(format.dequantize_row(&[], &mut []), Ok(()));
        assert_eq!(format.dot_row(&[], &[]), Ok(0.0));
    }
}

#[test]
fn every_block_of_a_row_is_quantized_on_its_own() {
    // A row is its blocks side by side: quantizing blocks one at a time
    // gives the same bytes, and the last block is not dropped or shifted.
    for format in QuantFormat::ALL {
        let values = random_normal(21, 5 * format.block_elements(), 2.0);
        let whole = quantize(format, &values);
        let pieces: Vec<u8> = values
            .chunks(format.block_elements())
            .flat_map(|block| quantize(format, block))
            .collect();
        assert_eq!(whole, pieces, "{format}");
        let restored = dequantize(format, &whole);
        let last = 4 * format.block_elements();
        assert!(
            restored[last..].iter().any(|&v| v != 0.0),
            "{format}: last block empty"
        );
    }
}

/// The integer products over 8-bit activations equal, to f32 rounding, the
/// f32 dot of the dequantized weights with the dequantized activations:
/// the integer sums are exact, so only the scaling may round.
#[test]
fn integer_products_equal_the_dot_of_what_they_multiply() {
    use kernelscope::quant::{Int8Activations, QuantFormat, quantize_activations};
    let mut rng = kernelscope::rng::SplitMix64::new(0x1a78);
    for format in QuantFormat::ALL {
        let Some(block) = format.int8_block() else {
            continue;
        };
        for (row, columns) in [(0, 256usize), (1, 512), (2, 2048)] {
            let weights: Vec<f32> = (0..columns).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let mut x: Vec<f32> = (0..columns)
                .map(|_| (rng.next_f32() * 2.0 - 1.0) * (1 + row) as f32)
                .collect();
            x[7] = 9.0; // an outlier sets one block's scale
            let mut blocks = vec![0u8; format.row_bytes(columns).unwrap()];
            format.quantize_row(&weights, &mut blocks).unwrap();
            let mut dequantized = vec![0.0f32; columns];
            format.dequantize_row(&blocks, &mut dequantized).unwrap();
            let mut activations = Int8Activations::default();
            quantize_activations(&x, block, &mut activations);
            let x_hat: Vec<f64> = activations
                .quants
                .iter()
                .enumerate()
                .map(|(i, &q)| f64::from(q) * f64::from(activations.scales[i / block]))
                .collect();
            let exact: f64 = dequantized
                .iter()
                .zip(&x_hat)
                .map(|(w, x)| f64::from(*w) * x)
                .sum();
            let magnitude: f64 = dequantized
                .iter()
                .zip(&x_hat)
                .map(|(w, x)| (f64::from(*w) * x).abs())
                .sum();
            let found = f64::from(format.dot_row_int8(&blocks, &activations).unwrap());
            assert!(
                (found - exact).abs() <= 1e-5 * magnitude,
                "{format} row {row}: integer product {found}, dot of the dequantized {exact}"
            );
            // The activations are x to 8 bits: within half a step of each,
            // plus what rounding a 32-block's scale to f16 (as llama.cpp's
            // block_q8_0 stores it) moves the largest quant.
            for (i, (value, quantized)) in x.iter().zip(&x_hat).enumerate() {
                let step = f64::from(activations.scales[i / block]).abs();
                let f16_rounding = 127.0 * step * 2f64.powi(-11);
                assert!(
                    (f64::from(*value) - quantized).abs() <= 0.5 * step + f16_rounding + 1e-6,
                    "{format}: element {i}"
                );
            }
        }
    }
}
