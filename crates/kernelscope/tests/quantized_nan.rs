//! A NaN in the activations of a quantized product stays a NaN, on every
//! format and backend: quantizing x to 8 bits once dropped it (the block's
//! largest magnitude ignored it, and a NaN times the inverse scale cast to
//! an integer is 0), so a NaN in a model's weights vanished at the next
//! quantized projection and its logits came out as numbers. The rows a
//! NaN does not reach (another token's) stay finite.

use kernelscope::DeviceOptions;
use kernelscope::ops;
use kernelscope::ops::quantized::linear::{Activations, QuantizedLinear};
use kernelscope::quant::QuantFormat;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;

mod common;
use common::quantized::{poisoned, random, random_matrix, read};

fn nan_in_x_reaches_every_output_of_its_row(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let registry = ops::registry();
    let mut picks = SplitMix64::new(0x006e_616e);
    for format in [
        QuantFormat::Q8_0,
        QuantFormat::Q4_K,
        QuantFormat::Q6_K,
        QuantFormat::Q4_0,
    ] {
        let Ok(op) = QuantizedLinear::new(&registry, &device, format, Activations::Int8) else {
            continue;
        };
        let (n, blocks) = (37, 3);
        let m = random_matrix(format, n, blocks, 5 + format.ggml_type() as u64);
        let weight = m.upload(&device);
        // One token (the mat-vec) and three (the chunk product).
        for rows in [1usize, 3] {
            for poison in [f32::NAN, f32::INFINITY] {
                let mut x = random(17 + rows as u64, rows * m.k, 2.5);
                let at = picks.below(m.k as u64) as usize;
                x[at] = poison;
                let out = poisoned(&device, rows * n);
                let mut encoder = device.command_encoder();
                let input = device.buffer_from_slice(&x, &[rows, m.k]).unwrap();
                op.encode(&mut encoder, &weight, &input, &out).unwrap();
                encoder.commit_and_wait().unwrap();
                let actual = read(&out);
                let what = format!("{format} on {backend:?}, {rows} rows, {poison} at {at}");
                // Row 0 holds the poison: every product over it is NaN
                // for a NaN, and not finite for an infinity (NaN where x
                // went to 8 bits: the zeros its scale leaves times it).
                let kept = |value: &f32| {
                    if poison.is_nan() {
                        value.is_nan()
                    } else {
                        !value.is_finite()
                    }
                };
                assert!(actual[..n].iter().all(kept), "{what}: {:?}", &actual[..n]);
                assert!(
                    actual[n..].iter().all(|value| value.is_finite()),
                    "{what}: {:?}",
                    &actual[n..]
                );
            }
        }
    }
}

kernelscope::device_tests!(nan_in_x_reaches_every_output_of_its_row);
