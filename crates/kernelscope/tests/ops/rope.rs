//! RoPE: inverse frequencies unscaled and llama3-, linear- and YaRN-scaled, and the rotation.

use kernelscope::ops;
use kernelscope::ops::rope::{
    Llama3Scaling, Rope, RopeFrequencies, RopeScaling, YarnScaling, inverse_frequencies,
};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;

use crate::helpers::{REL_TOL, ROWS, assert_close, assert_kernel, profiled_device, random};

/// `theta^(-2i/head_dim)` for `i < head_dim / 2`.
fn reference_inverse_frequencies(head_dim: usize, theta: f64) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
        .collect()
}

/// transformers' `_compute_llama3_parameters`, transcribed in f64.
fn reference_llama3(base: &[f64], scaling: Llama3Scaling) -> Vec<f64> {
    let factor = f64::from(scaling.factor);
    let low_freq_factor = f64::from(scaling.low_freq_factor);
    let high_freq_factor = f64::from(scaling.high_freq_factor);
    let old_context_len = f64::from(scaling.original_max_position_embeddings);
    let low_freq_wavelen = old_context_len / low_freq_factor;
    let high_freq_wavelen = old_context_len / high_freq_factor;
    base.iter()
        .map(|&inv_freq| {
            let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
            // inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
            let inv_freq_llama = if wavelen > low_freq_wavelen {
                inv_freq / factor
            } else {
                inv_freq
            };
            let smooth_factor =
                (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            let smoothed = (1.0 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
            // is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
            let is_medium_freq = wavelen >= high_freq_wavelen && wavelen <= low_freq_wavelen;
            if is_medium_freq { smoothed } else { inv_freq_llama }
        })
        .collect()
}

fn rope_inverse_frequencies_unscaled(_backend: Backend) {
    for (head_dim, theta) in [(2, 10_000.0), (64, 10_000.0), (128, 500_000.0), (96, 1_000_000.0)] {
        let expected = reference_inverse_frequencies(head_dim, theta);
        let actual = inverse_frequencies(head_dim, theta as f32, None);
        let what = format!("inverse frequencies head_dim {head_dim} theta {theta}");
        assert_close(&actual, &expected, REL_TOL, 0.0, &what);
    }
}

fn rope_inverse_frequencies_llama3_scaling(_backend: Backend) {
    let configs = [
        // Llama 3.1.
        (
            128,
            500_000.0,
            Llama3Scaling {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        ),
        // Llama 3.2 1B.
        (
            64,
            500_000.0,
            Llama3Scaling {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        ),
        // Made up, with low_freq_factor != 1.
        (
            96,
            10_000.0,
            Llama3Scaling {
                factor: 4.0,
                low_freq_factor: 2.0,
                high_freq_factor: 8.0,
                original_max_position_embeddings: 4096.0,
            },
        ),
    ];
    for (head_dim, theta, scaling) in configs {
        let base = reference_inverse_frequencies(head_dim, theta);
        let expected = reference_llama3(&base, scaling);
        let actual = inverse_frequencies(head_dim, theta as f32, Some(RopeScaling::Llama3(scaling)));
        let what = format!("llama3 inverse frequencies head_dim {head_dim} {scaling:?}");
        assert_close(&actual, &expected, REL_TOL, 0.0, &what);

        // The three bands: high frequencies unchanged, low ones divided by
        // factor, the middle strictly in between. Each is non-empty here.
        let factor = f64::from(scaling.factor);
        let high_freq_wavelen =
            f64::from(scaling.original_max_position_embeddings / scaling.high_freq_factor);
        let low_freq_wavelen = f64::from(scaling.original_max_position_embeddings / scaling.low_freq_factor);
        let mut bands = [0; 3];
        for (i, (&actual, &freq)) in actual.iter().zip(&base).enumerate() {
            let (actual, wavelen) = (f64::from(actual), 2.0 * std::f64::consts::PI / freq);
            let close = |want: f64| (actual - want).abs() <= REL_TOL * want;
            if wavelen < high_freq_wavelen {
                bands[0] += 1;
                assert!(
                    close(freq),
                    "{what}: high frequency {i} must be unchanged: {actual} vs {freq}"
                );
            } else if wavelen > low_freq_wavelen {
                bands[2] += 1;
                assert!(
                    close(freq / factor),
                    "{what}: low frequency {i} must be divided by factor: {actual}"
                );
            } else {
                bands[1] += 1;
                assert!(
                    freq / factor < actual && actual < freq,
                    "{what}: middle frequency {i}: {actual}"
                );
            }
        }
        assert!(bands.iter().all(|&count| count > 0), "{what}: bands {bands:?}");
        // Smooth: monotonically decreasing across the bands.
        assert!(
            actual.windows(2).all(|pair| pair[1] < pair[0]),
            "{what}: not decreasing: {actual:?}"
        );
    }
}

fn rope_inverse_frequencies_linear_scaling(_backend: Backend) {
    for (head_dim, theta, factor) in [(64, 10_000.0, 4.0f32), (128, 250_000.0, 2.5)] {
        let expected: Vec<f64> = reference_inverse_frequencies(head_dim, theta)
            .iter()
            .map(|freq| freq / f64::from(factor))
            .collect();
        let actual = inverse_frequencies(head_dim, theta as f32, Some(RopeScaling::Linear { factor }));
        let what = format!("linear inverse frequencies head_dim {head_dim} factor {factor}");
        assert_close(&actual, &expected, REL_TOL, 0.0, &what);
    }
}

/// transformers' `_compute_yarn_parameters`, transcribed in f64.
fn reference_yarn(head_dim: usize, theta: f64, scaling: YarnScaling) -> Vec<f64> {
    let dim = head_dim as f64;
    let context = f64::from(scaling.original_max_position_embeddings);
    let correction_dim =
        |rotations: f64| dim * (context / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
    let mut low = correction_dim(f64::from(scaling.beta_fast));
    let mut high = correction_dim(f64::from(scaling.beta_slow));
    if scaling.truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
    if low == high {
        high += 0.001;
    }
    reference_inverse_frequencies(head_dim, theta)
        .iter()
        .enumerate()
        .map(|(i, &extrapolated)| {
            let interpolated = extrapolated / f64::from(scaling.factor);
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            interpolated * ramp + extrapolated * (1.0 - ramp)
        })
        .collect()
}

fn rope_inverse_frequencies_yarn_scaling(_backend: Backend) {
    let mut rng = SplitMix64::new(77);
    for (head_dim, theta) in [(16, 10_000.0), (64, 1_000_000.0), (128, 500_000.0)] {
        for truncate in [true, false] {
            let scaling = YarnScaling {
                factor: 2.0 + rng.below(30) as f32,
                original_max_position_embeddings: 4096.0,
                beta_fast: 32.0,
                beta_slow: 1.0,
                truncate,
            };
            let expected = reference_yarn(head_dim, theta, scaling);
            let actual = inverse_frequencies(head_dim, theta as f32, Some(RopeScaling::Yarn(scaling)));
            let what = format!("yarn inverse frequencies head_dim {head_dim} {scaling:?}");
            assert_close(&actual, &expected, REL_TOL, 0.0, &what);
            // The fastest dimension is extrapolated (kept), the slowest interpolated.
            let base = reference_inverse_frequencies(head_dim, theta);
            assert!(
                (f64::from(actual[0]) - base[0]).abs() <= REL_TOL * base[0],
                "{what}"
            );
            let last = base.len() - 1;
            let interpolated = base[last] / f64::from(scaling.factor);
            assert!(
                (f64::from(actual[last]) - interpolated).abs() <= REL_TOL * interpolated,
                "{what}"
            );
        }
    }
}

fn rope_rotates_half_by_position(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = Rope::new(&ops::registry(), &device).unwrap();
    let llama3 = Llama3Scaling {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };
    for (heads, head_dim) in [(1, 2), (3, 16), (4, 128)] {
        let unscaled = reference_inverse_frequencies(head_dim, 10_000.0);
        let scaled = reference_llama3(&reference_inverse_frequencies(head_dim, 500_000.0), llama3);
        // 1 for most checkpoints; YaRN's attention factor scales cos and sin.
        for (frequencies, attention_scaling) in [(unscaled, 1.0f32), (scaled, 1.138_629_4)] {
            let frequencies: Vec<f32> = frequencies.iter().map(|&f| f as f32).collect();
            let frequency_buffer = device.buffer_from_slice(&frequencies, &[head_dim / 2]).unwrap();
            let rope_frequencies = RopeFrequencies {
                inverse_frequencies: frequency_buffer.clone(),
                attention_scaling,
            };
            for rows in ROWS {
                // Positions per row, neither contiguous nor sorted, some past
                // 65,536 (where an f16 or a 16-bit index would break).
                let mut rng = SplitMix64::new((heads * 1000 + head_dim * 10 + rows) as u64);
                let picks = [0u32, 65_537, 37, 4000, 1, 131_071, 1_000_003];
                let positions: Vec<u32> = (0..rows)
                    .map(|row| {
                        if row < picks.len() {
                            picks[(row * 3 + rows) % picks.len()]
                        } else {
                            rng.below(300_000) as u32
                        }
                    })
                    .collect();
                // Decode passes its [token, position] slots with first 1;
                // the batch's positions sit between junk.
                let first = if rows == 1 { 1 } else { 3 };
                let mut slots = vec![99u32; first];
                slots.extend(&positions);
                slots.push(123);
                let slot_buffer = device.buffer_from_slice(&slots, &[slots.len()]).unwrap();
                let x = random(
                    u64::from(positions[0]) + (head_dim * rows) as u64,
                    rows * heads * head_dim,
                    -1.0,
                    1.0,
                );
                // Decode's layout for one row, the batch's otherwise.
                let shape: &[usize] = if rows == 1 {
                    &[heads, head_dim]
                } else {
                    &[rows, heads, head_dim]
                };
                let buffer = device.buffer_from_slice(&x, shape).unwrap();
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &buffer,
                    &rope_frequencies,
                    &slot_buffer,
                    first,
                    heads,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();

                let half = head_dim / 2;
                let mut expected = vec![0.0; rows * heads * head_dim];
                for (row, &position) in positions.iter().enumerate() {
                    for head in 0..heads {
                        let base = (row * heads + head) * head_dim;
                        for i in 0..half {
                            // The angle is an f32 product, as in transformers
                            // (`inv_freq @ position_ids` in float32).
                            let angle = f64::from(position as f32 * frequencies[i]);
                            let (cos, sin) = (
                                angle.cos() * f64::from(attention_scaling),
                                angle.sin() * f64::from(attention_scaling),
                            );
                            let (x0, x1) = (f64::from(x[base + i]), f64::from(x[base + i + half]));
                            expected[base + i] = x0 * cos - x1 * sin;
                            expected[base + i + half] = x1 * cos + x0 * sin;
                        }
                    }
                }
                let what = format!("rope heads {heads} head_dim {head_dim} positions {positions:?}");
                assert_close(&buffer.to_vec::<f32>().unwrap(), &expected, REL_TOL, 1e-6, &what);
            }
        }
    }
    assert_kernel(&device, "rope_f32");
}

kernelscope::device_tests!(
    rope_inverse_frequencies_unscaled,
    rope_inverse_frequencies_llama3_scaling,
    rope_inverse_frequencies_linear_scaling,
    rope_inverse_frequencies_yarn_scaling,
    rope_rotates_half_by_position,
);
