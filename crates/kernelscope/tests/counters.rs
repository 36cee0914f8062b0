//! Counters: exact values for known sequences, including capture and replay
//! (capture counts nothing, each replay counts its dispatches once) and
//! barriers (counted only when really issued).

mod common;

use kernelscope::profile::{CounterSnapshot, Phase};
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{DType, DeviceOptions};

fn known_sequence_gives_exact_counts(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 32;
    let a = device.buffer_from_slice(&random_f32(10, n), &[n]).unwrap(); // copy 1
    let b = device.alloc(DType::F32, &[n]).unwrap();
    let c = device.alloc(DType::F32, &[n]).unwrap();
    let d = device.alloc(DType::F32, &[n]).unwrap();
    let inc = |from: &kernelscope::Buffer, to: &kernelscope::Buffer| common::inc(&kernel, from, to);

    let mut encoder = device.command_encoder();
    encoder.memory_barrier(); // nothing encoded yet: not issued
    encoder.dispatch(inc(&a, &b)).unwrap(); // first of its group
    encoder.dispatch(inc(&a, &c)).unwrap(); // reads a, writes c: independent → concurrent
    encoder.dispatch(inc(&b, &d)).unwrap(); // reads b written above → auto barrier
    encoder.memory_barrier(); // explicit, after a dispatch: issued
    encoder.memory_barrier(); // twice in a row: nothing to order, not issued
    encoder.dispatch(inc(&d, &b)).unwrap(); // after a barrier: first of its group
    encoder.commit_labeled("one").unwrap(); // submission 1, no wait
    encoder.commit_and_wait().unwrap(); // empty: no submission, but one host wait
    encoder.dispatch(inc(&c, &d)).unwrap();
    encoder.commit_and_wait_labeled("two").unwrap(); // submission 2, sync 2
    let result = b.to_vec::<f32>().unwrap(); // copy 2, and a host wait: sync 3

    let counters = device.profiler().counters().snapshot();
    assert_eq!(
        counters,
        CounterSnapshot {
            dispatches: 5,
            submissions: 2,
            syncs: 3,
            barriers: 2,
            auto_barriers: 1,
            concurrent: 1,
            graph_launches: 0,
            host_device_copies: 2,
        }
    );
    assert_eq!(result.len(), n);
    device.profiler().reset();
    assert_eq!(
        device.profiler().counters().snapshot(),
        CounterSnapshot::default()
    );
}

fn capture_and_replay_do_not_double_count(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 32;
    let a = device.buffer_from_slice(&random_f32(11, n), &[n]).unwrap();
    let b = device.alloc(DType::F32, &[n]).unwrap();
    let c = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    let before = device.profiler().counters().snapshot();

    encoder.begin_capture().unwrap();
    encoder.dispatch(common::inc(&kernel, &a, &b)).unwrap();
    encoder.dispatch(common::inc(&kernel, &a, &c)).unwrap(); // concurrent
    encoder.dispatch(common::inc(&kernel, &b, &c)).unwrap(); // WAW on c + RAW on b → barrier
    let graph = encoder.end_capture().unwrap();
    assert_eq!(
        (
            graph.dispatch_count(),
            graph.barrier_count(),
            graph.concurrent_count()
        ),
        (3, 1, 1)
    );
    assert_eq!(
        device.profiler().counters().snapshot() - before,
        CounterSnapshot::default(),
        "capture counts nothing"
    );

    for _ in 0..3 {
        encoder.replay(&graph).unwrap();
    }
    encoder.commit_and_wait_labeled("replays").unwrap();
    let counted = device.profiler().counters().snapshot() - before;
    assert_eq!(
        counted,
        CounterSnapshot {
            dispatches: 9,
            submissions: 1,
            syncs: 1,
            barriers: 3,
            auto_barriers: 3,
            concurrent: 3,
            graph_launches: 3,
            host_device_copies: 0,
        }
    );
}

fn tokens_carry_their_counter_deltas(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 16;
    let a = device.buffer_from_slice(&random_f32(12, n), &[n]).unwrap();
    let b = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    for (phase, dispatches) in [(Phase::Prefill, 3), (Phase::Decode, 1), (Phase::Decode, 2)] {
        device.profiler().begin_token(phase);
        for _ in 0..dispatches {
            encoder.dispatch(common::inc(&kernel, &a, &b)).unwrap();
        }
        encoder.commit_and_wait_labeled("token").unwrap();
        device.profiler().end_token();
    }
    let tokens = device.profiler().tokens();
    let seen: Vec<(Phase, u64, u64, u64)> = tokens
        .iter()
        .map(|t| {
            (
                t.phase,
                t.counters.dispatches,
                t.counters.syncs,
                t.counters.auto_barriers,
            )
        })
        .collect();
    // Writing b repeatedly is a write-after-write: one auto barrier between each pair.
    assert_eq!(
        seen,
        [
            (Phase::Prefill, 3, 1, 2),
            (Phase::Decode, 1, 1, 0),
            (Phase::Decode, 2, 1, 1)
        ]
    );
    assert_eq!(tokens.iter().map(|t| t.index).collect::<Vec<_>>(), [0, 1, 2]);
}

kernelscope::device_tests!(
    known_sequence_gives_exact_counts,
    capture_and_replay_do_not_double_count,
    tokens_carry_their_counter_deltas,
);
