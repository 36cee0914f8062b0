//! Picking the token: Argmax, and Sample greedy, at nucleus frequencies, with a small top_p.

use kernelscope::ops;
use kernelscope::ops::sample::{Sample, Sampling};
use kernelscope::testing::Backend;
use kernelscope::{Device, OpKind};

use crate::helpers::{assert_close, assert_dispatched, poisoned_u32, profiled_device, random};

/// The first index of the largest value; NaN never wins.
fn reference_argmax(values: &[f32]) -> u32 {
    let mut best: Option<usize> = None;
    for (i, &v) in values.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|b| v > values[b]) {
            best = Some(i);
        }
    }
    best.unwrap_or(0) as u32
}

/// Logit vectors for argmax and greedy sampling: random sizes, ties, all
/// negative, and NaNs.
fn argmax_cases() -> Vec<Vec<f32>> {
    let mut cases: Vec<Vec<f32>> = [1, 7, 33, 300, 32_000]
        .iter()
        .map(|&n| random(61 + n, n as usize, -1.0, 1.0))
        .collect();
    cases.push(vec![1.0, 3.0, 0.0, 3.0, 3.0]);
    cases.push(vec![0.5; 9]);
    cases.push(random(62, 100, -9.0, -1.0));
    let mut late_tie = random(63, 500, -1.0, 1.0);
    (late_tie[250], late_tie[499]) = (2.0, 2.0);
    cases.push(late_tie);
    cases.push(vec![f32::NAN, 1.0, 3.0, f32::NAN, 2.0]);
    // A vocabulary that spreads over many blocks: the largest value in the
    // last block's share, then tied across blocks (the earlier one wins),
    // then NaN in every block but one, then no number at all.
    let mut vocabulary = random(64, 128_256, -1.0, 1.0);
    vocabulary[128_255] = 5.0;
    cases.push(vocabulary.clone());
    (vocabulary[3_000], vocabulary[100_000]) = (7.0, 7.0);
    cases.push(vocabulary.clone());
    let mut mostly_nan = vec![f32::NAN; 70_000];
    mostly_nan[65_537] = -3.0;
    cases.push(mostly_nan);
    cases.push(vec![f32::NAN; 9_000]);
    cases.push(vec![f32::NEG_INFINITY; 9_000]);
    cases
}

fn argmax_picks_the_first_largest(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::argmax::Argmax::new(&ops::registry(), &device).unwrap();
    for logits in argmax_cases() {
        let out = poisoned_u32(&device);
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &device.buffer_from_slice(&logits, &[logits.len()]).unwrap(),
            &out,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        let expected = reference_argmax(&logits);
        let shown = &logits[..logits.len().min(8)];
        assert_eq!(
            out.to_vec::<u32>().unwrap(),
            [expected],
            "argmax of {} logits {shown:?}...",
            logits.len()
        );
    }
    assert_dispatched(&device, OpKind::Argmax, "argmax_");
}

fn sample_at_temperature_zero_is_argmax(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = Sample::new(&ops::registry(), &device).unwrap();
    for logits in argmax_cases() {
        let buffer = device.buffer_from_slice(&logits, &[logits.len()]).unwrap();
        for (top_p, uniform) in [(1.0, 0.0), (1.0, 0.5), (0.3, 0.9999)] {
            let out = poisoned_u32(&device);
            let mut encoder = device.command_encoder();
            op.encode(
                &mut encoder,
                &buffer,
                &out,
                Sampling {
                    temperature: 0.0,
                    top_p,
                },
                uniform,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();
            let expected = reference_argmax(&logits);
            let shown = &logits[..logits.len().min(8)];
            assert_eq!(
                out.to_vec::<u32>().unwrap(),
                [expected],
                "greedy sample, uniform {uniform}, {shown:?}..."
            );
        }
    }
    assert_dispatched(&device, OpKind::Sample, "sample_");
}

/// How often each token is drawn over the uniform grid `j / 10_000`.
fn sample_frequencies(device: &Device, logits: &[f32], sampling: Sampling) -> Vec<f64> {
    const DRAWS: usize = 10_000;
    let op = Sample::new(&ops::registry(), device).unwrap();
    let buffer = device.buffer_from_slice(logits, &[logits.len()]).unwrap();
    let out = device
        .buffer_from_slice(&vec![u32::MAX; DRAWS], &[DRAWS])
        .unwrap();
    let mut encoder = device.command_encoder();
    for draw in 0..DRAWS {
        let uniform = draw as f32 / DRAWS as f32;
        op.encode(
            &mut encoder,
            &buffer,
            &out.slice(draw, 1).unwrap(),
            sampling,
            uniform,
        )
        .unwrap();
        // Committed in batches: an open batch checks each dispatch against
        // the ranges of all the others.
        if draw % 100 == 99 {
            encoder.commit_and_wait().unwrap();
        }
    }
    encoder.commit_and_wait().unwrap();
    let mut counts = vec![0usize; logits.len()];
    for token in out.to_vec::<u32>().unwrap() {
        assert!(
            (token as usize) < logits.len(),
            "sampled token {token} of {} ({sampling:?})",
            logits.len()
        );
        counts[token as usize] += 1;
    }
    counts.iter().map(|&count| count as f64 / DRAWS as f64).collect()
}

fn sample_frequencies_match_the_nucleus_softmax(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    for (seed, n) in [(71, 2), (72, 10), (73, 37)] {
        let logits = random(seed, n, -2.0, 2.0);
        for temperature in [0.5f32, 1.0, 1.7] {
            for top_p in [1.0f32, 0.8] {
                let sampling = Sampling { temperature, top_p };
                let actual = sample_frequencies(&device, &logits, sampling);

                let max = logits
                    .iter()
                    .map(|&l| f64::from(l))
                    .fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = logits
                    .iter()
                    .map(|&l| ((f64::from(l) - max) / f64::from(temperature)).exp())
                    .collect();
                let total: f64 = weights.iter().sum();
                // The nucleus: the most likely tokens until their mass reaches top_p.
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]));
                let (mut kept, mut mass) = (0, 0.0);
                while mass < f64::from(top_p) && kept < n {
                    mass += weights[order[kept]] / total;
                    kept += 1;
                }
                let nucleus = &order[..kept];
                let nucleus_total: f64 = nucleus.iter().map(|&i| weights[i]).sum();
                let mut expected = vec![0.0; n];
                for &i in nucleus {
                    expected[i] = weights[i] / nucleus_total;
                }
                let what = format!("sample frequencies of {n} logits, {sampling:?}");
                let actual: Vec<f32> = actual.iter().map(|&f| f as f32).collect();
                assert_close(&actual, &expected, 0.0, 0.01, &what);
            }
        }
    }
    assert_dispatched(&device, OpKind::Sample, "sample_");
}

fn sample_with_small_top_p_picks_the_top_token(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    for (seed, n) in [(81, 2), (82, 10), (83, 300)] {
        let logits = random(seed, n, -2.0, 2.0);
        let top = reference_argmax(&logits) as usize;
        for temperature in [0.5, 1.0, 3.0] {
            // Below 1/n, the top token alone reaches top_p.
            let sampling = Sampling {
                temperature,
                top_p: 0.001,
            };
            let frequencies = sample_frequencies(&device, &logits, sampling);
            assert_eq!(
                frequencies[top], 1.0,
                "{n} logits, {sampling:?}: top token {top}, frequencies {frequencies:?}"
            );
        }
    }
    assert_dispatched(&device, OpKind::Sample, "sample_");
}

kernelscope::device_tests!(
    argmax_picks_the_first_largest,
    sample_at_temperature_zero_is_argmax,
    sample_frequencies_match_the_nucleus_softmax,
    sample_with_small_top_p_picks_the_top_token,
);
