//! `DeviceOptions::check_finite` on every backend: the first kernel whose
//! float output holds NaN or +infinity stops the submission, named with
//! its scope, argument and the first bad element; minus infinity (which
//! kernels write on purpose) and clean outputs pass; without the option a
//! NaN goes through unseen. On CUDA each output is read back after its
//! kernel, eagerly and after a graph replay.

use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{DeviceOptions, Error};

mod common;
use common::{inc, inc_one_registry, scale};

fn the_first_non_finite_output_is_named(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().check_finite(true)) else {
        return;
    };
    let registry = inc_one_registry();
    let inc_one = registry.kernel(&device, "inc_one").unwrap();
    let scale_in_place = registry.kernel(&device, "scale_in_place").unwrap();
    let mut random = SplitMix64::new(0xf1_417e ^ u64::from(std::process::id()));
    let len = 1000 + random.below(500) as usize;
    // Positive values, so that scaling by minus infinity gives minus infinity.
    let clean: Vec<f32> = random.vec_f32(len, 0.5, 1.5);
    let input = device.buffer_from_slice(&clean, &[len]).unwrap();
    let output = device.buffer_from_slice(&vec![0.0f32; len], &[len]).unwrap();
    let what = format!("{backend:?}");

    // Clean work, and minus infinity, pass.
    let mut encoder = device.command_encoder();
    encoder.set_scope("layer.0.mlp");
    encoder.dispatch(inc(&inc_one, &input, &output)).unwrap();
    encoder
        .dispatch(scale(&scale_in_place, &output, f32::NEG_INFINITY))
        .unwrap();
    encoder.commit_and_wait().unwrap();
    assert!(
        output
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|value| *value == f32::NEG_INFINITY),
        "{what}"
    );

    // A NaN in the input reaches inc_one's output (argument 1) first.
    let at = random.below(len as u64) as usize;
    let mut poisoned = clean.clone();
    poisoned[at] = f32::NAN;
    input.write_from(&poisoned).unwrap();
    let mut encoder = device.command_encoder();
    encoder.set_scope("layer.3.attn");
    encoder.dispatch(inc(&inc_one, &input, &output)).unwrap();
    encoder.set_scope("layer.4.attn");
    encoder.dispatch(scale(&scale_in_place, &output, 2.0)).unwrap();
    match encoder.commit_and_wait() {
        Err(Error::NonFiniteOutput {
            kernel,
            scope,
            argument,
            count,
            len: values,
            index,
            value,
        }) => {
            assert_eq!(
                (kernel.as_str(), scope.as_str(), argument, count, values, index),
                ("inc_one", "layer.3.attn", 1, 1, len, at),
                "{what}"
            );
            assert!(value.is_nan(), "{what}: {value}");
        }
        other => panic!("{what}: expected the NaN named, got {other:?}"),
    }

    // +infinity from a kernel whose input is clean, counted whole.
    input.write_from(&clean).unwrap();
    let mut encoder = device.command_encoder();
    encoder.dispatch(inc(&inc_one, &input, &output)).unwrap();
    encoder
        .dispatch(scale(&scale_in_place, &output, f32::INFINITY))
        .unwrap();
    match encoder.commit_and_wait() {
        Err(Error::NonFiniteOutput {
            kernel,
            scope,
            argument,
            count,
            index,
            ..
        }) => assert_eq!(
            (kernel.as_str(), scope.as_str(), argument, count, index),
            ("scale_in_place", "(unscoped)", 0, len, 0),
            "{what}"
        ),
        other => panic!("{what}: expected +infinity named, got {other:?}"),
    }

    // Without the option the same NaN goes through.
    let Some(unchecked) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let inc_one = registry.kernel(&unchecked, "inc_one").unwrap();
    let input = unchecked.buffer_from_slice(&poisoned, &[len]).unwrap();
    let output = unchecked.buffer_from_slice(&vec![0.0f32; len], &[len]).unwrap();
    let mut encoder = unchecked.command_encoder();
    encoder.dispatch(inc(&inc_one, &input, &output)).unwrap();
    encoder.commit_and_wait().unwrap();
    assert!(output.to_vec::<f32>().unwrap()[at].is_nan(), "{what}");
}

fn a_graph_replay_is_checked_after_it_runs(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().check_finite(true)) else {
        return;
    };
    let registry = inc_one_registry();
    let inc_one = registry.kernel(&device, "inc_one").unwrap();
    let mut random = SplitMix64::new(0x9a_f1 ^ u64::from(std::process::id()));
    let len = 700 + random.below(300) as usize;
    let clean = random.vec_f32(len, -1.0, 1.0);
    let input = device.buffer_from_slice(&clean, &[len]).unwrap();
    let output = device.buffer_from_slice(&vec![0.0f32; len], &[len]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    encoder.set_scope("layer.1.mlp");
    encoder.dispatch(inc(&inc_one, &input, &output)).unwrap();
    let graph = encoder.end_capture().unwrap();
    encoder.replay(&graph).unwrap();
    encoder.commit_and_wait().unwrap();
    let at = random.below(len as u64) as usize;
    let mut poisoned = clean;
    poisoned[at] = f32::INFINITY;
    input.write_from(&poisoned).unwrap();
    let mut encoder = device.command_encoder();
    encoder.replay(&graph).unwrap();
    match encoder.commit_and_wait() {
        Err(Error::NonFiniteOutput {
            kernel, scope, index, ..
        }) => assert_eq!(
            (kernel.as_str(), scope.as_str(), index),
            ("inc_one", "layer.1.mlp", at),
            "{backend:?}"
        ),
        other => panic!("{backend:?}: expected +infinity named, got {other:?}"),
    }
}

#[test]
fn cpu_names_the_first_non_finite_output() {
    the_first_non_finite_output_is_named(Backend::Cpu);
    a_graph_replay_is_checked_after_it_runs(Backend::Cpu);
}

#[test]
fn cuda_names_the_first_non_finite_output() {
    the_first_non_finite_output_is_named(Backend::Cuda);
    a_graph_replay_is_checked_after_it_runs(Backend::Cuda);
}
