//! Profiling a chosen subset of tokens (`DeviceOptions::profile_tokens`):
//! only the selected tokens' submissions and dispatches are timed, every
//! token's counters stay exact, work outside tokens is not timed, and on
//! CUDA the switching of CUPTI's records on and off between tokens loses no
//! timed kernel's record, with tokens committed back to back as decode does
//! (waited for only now and then) and in graph replays.

mod common;

use kernelscope::profile::{Phase, ProfileLevel, TokenSelection};
use kernelscope::runtime::LaunchGrid;
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{DType, Device, DeviceOptions, Dispatch, Kernel};

const TOKENS: u32 = 12;

fn increment(kernel: &Kernel, buffer: &kernelscope::Buffer, scratch: &kernelscope::Buffer) -> [Dispatch; 2] {
    let n = buffer.len();
    let one = |from: &kernelscope::Buffer, to: &kernelscope::Buffer| {
        Dispatch::new(kernel)
            .read(from)
            .write(to)
            .param(n as u32)
            .grid(LaunchGrid::linear(n, 64))
            .cost(4 * n as u64, 4 * n as u64, n as u64)
    };
    [one(buffer, scratch), one(scratch, buffer)]
}

/// Runs `TOKENS` decode tokens of two +1 dispatches each (eager, or as one
/// graph replay when `graph`), committing without waiting except every
/// fourth token, plus a submission outside any token; checks the result.
fn run_tokens(device: &Device, graph: bool) -> Vec<f32> {
    let kernel = common::inc_one_registry().kernel(device, "inc_one").unwrap();
    let n = 1024;
    // Whole numbers, so that adding one at a time is exact.
    let data: Vec<f32> = random_f32(7, n).iter().map(|x| (x * 1000.0).round()).collect();
    let buffer = device.buffer_from_slice(&data, &[n]).unwrap();
    let scratch = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    let captured = graph.then(|| {
        encoder.begin_capture().unwrap();
        for dispatch in increment(&kernel, &buffer, &scratch) {
            encoder.dispatch(dispatch).unwrap();
        }
        encoder.end_capture().unwrap()
    });
    // Outside any token: timed only when every token is.
    for dispatch in increment(&kernel, &buffer, &scratch) {
        encoder.dispatch(dispatch).unwrap();
    }
    encoder.commit_labeled("setup").unwrap();
    for token in 0..TOKENS {
        device.profiler().begin_token(Phase::Decode);
        match &captured {
            Some(graph) => encoder.replay(graph).unwrap(),
            None => {
                for dispatch in increment(&kernel, &buffer, &scratch) {
                    encoder.dispatch(dispatch).unwrap();
                }
            }
        }
        if token % 4 == 3 {
            encoder.commit_and_wait_labeled("token").unwrap();
        } else {
            encoder.commit_labeled("token").unwrap();
        }
        device.profiler().end_token();
    }
    encoder.commit_and_wait().unwrap();
    let out = buffer.to_vec::<f32>().unwrap();
    let expected: Vec<f32> = data.iter().map(|x| x + 2.0 * (TOKENS + 1) as f32).collect();
    assert_eq!(out, expected, "every token ran, timed or not");
    out
}

fn only_selected_tokens_are_timed(backend: Backend) {
    for graph in [false, true] {
        for text in ["3..7", "1..:4"] {
            let selection: TokenSelection = text.parse().unwrap();
            let options = DeviceOptions::new()
                .profile(ProfileLevel::Dispatch)
                .profile_tokens(selection);
            let Some(device) = backend.device(options) else {
                return;
            };
            run_tokens(&device, graph);
            let selected: Vec<u32> = (0..TOKENS).filter(|&token| selection.contains(token)).collect();
            let profile = device.profile(device.conditions("test", None));
            let context = format!("{} {text} graph={graph}", device.backend());
            assert_eq!(profile.conditions.profiled_tokens, Some(selection), "{context}");
            assert_eq!(profile.tokens.len(), TOKENS as usize, "{context}");
            for token in &profile.tokens {
                assert_eq!(token.timed, selection.contains(token.index), "{context}");
                // Counters are exact on every token, timed or not.
                assert_eq!(token.counters.dispatches, 2, "{context} token {}", token.index);
                assert_eq!(token.counters.submissions, 1, "{context} token {}", token.index);
            }
            let timed_submissions: Vec<u32> = profile
                .submissions
                .iter()
                .map(|submission| submission.token.expect("only tokens' work is timed"))
                .collect();
            assert_eq!(timed_submissions, selected, "{context}");
            let mut dispatched: Vec<u32> = profile
                .dispatches
                .iter()
                .map(|dispatch| dispatch.token.unwrap())
                .collect();
            dispatched.dedup();
            assert_eq!(
                dispatched, selected,
                "{context}: every selected token's dispatches, no other"
            );
            assert_eq!(profile.dispatches.len(), 2 * selected.len(), "{context}");
            assert_eq!(profile.repetition_tokens(), selected, "{context}");
            assert_eq!(profile.timed_tokens(), (selected.len(), TOKENS as usize));
            assert!(
                profile.warnings.is_empty(),
                "{context}: no record went missing: {:?}",
                profile.warnings
            );
            for check in kernelscope::profile::cross_check(&profile) {
                assert!(!check.flagged, "{context}: {check:?}");
            }
        }
    }
}

fn every_token_is_timed_by_default(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    run_tokens(&device, false);
    let profile = device.profile(device.conditions("test", None));
    assert_eq!(profile.conditions.profiled_tokens, None);
    assert!(profile.tokens.iter().all(|token| token.timed));
    // The set-up submission outside tokens is timed too, as always.
    assert_eq!(profile.submissions.len(), TOKENS as usize + 1);
    assert_eq!(profile.dispatches.len(), 2 * (TOKENS as usize + 1));
}

kernelscope::device_tests!(only_selected_tokens_are_timed, every_token_is_timed_by_default);
