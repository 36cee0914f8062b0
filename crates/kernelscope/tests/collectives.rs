//! Collectives between the ranks of a group: all-reduce and all-gather give
//! every rank the reference result (the same bits on every rank), eagerly and
//! replayed from a graph; ranks that disagree get an error, an aborted group
//! wakes its waiting ranks with one (never a hang); each rank counts and
//! profiles its collectives as dispatches of their op kind with their bus
//! bytes; ranks that join a group as a launcher's processes do get the same
//! results. CPU groups run everywhere; GPU groups need two GPUs (a joined
//! group of one, one).

use kernelscope::ops::collective::{self, AllGather, AllReduce};
use kernelscope::profile::ProfileLevel;
use kernelscope::runtime::{LaunchedRank, Launcher};
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{Communicator, DType, Device, DeviceOptions, Error, OpKind};
use std::time::Duration;

/// Runs `body(rank, communicator)` on a thread per rank and returns the
/// results in rank order.
fn on_every_rank<T: Send>(
    communicators: &[Communicator],
    body: impl Fn(usize, &Communicator) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = communicators
            .iter()
            .enumerate()
            .map(|(rank, communicator)| {
                let body = &body;
                scope.spawn(move || body(rank, communicator))
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap()).collect()
    })
}

/// All-reduces `reduce_input` and all-gathers `gather_input` on
/// `communicator`'s device, eagerly or replayed from a graph; both results.
fn run_collectives(
    communicator: &Communicator,
    reduce_input: &[f32],
    gather_input: &[f32],
    graph: bool,
) -> (Vec<f32>, Vec<f32>) {
    let device = communicator.device();
    let reduce = AllReduce::new(communicator).unwrap();
    let gather = AllGather::new(communicator).unwrap();
    let reduced = device
        .buffer_from_slice(reduce_input, &[reduce_input.len()])
        .unwrap();
    let input = device
        .buffer_from_slice(gather_input, &[gather_input.len()])
        .unwrap();
    let gathered = device
        .alloc(DType::F32, &[communicator.ranks() * gather_input.len()])
        .unwrap();
    let mut encoder = device.command_encoder();
    if graph {
        encoder.begin_capture().unwrap();
        reduce.encode(&mut encoder, &reduced).unwrap();
        gather.encode(&mut encoder, &input, &gathered).unwrap();
        let captured = encoder.end_capture().unwrap();
        encoder.replay(&captured).unwrap();
    } else {
        reduce.encode(&mut encoder, &reduced).unwrap();
        gather.encode(&mut encoder, &input, &gathered).unwrap();
    }
    encoder.commit_and_wait_labeled("collectives").unwrap();
    (
        reduced.to_vec::<f32>().unwrap(),
        gathered.to_vec::<f32>().unwrap(),
    )
}

/// Every rank's results against the reference sum and gather, and the
/// same bits of the sum on every rank (ranks that choose from them agree).
fn assert_reference_results(
    results: &[(Vec<f32>, Vec<f32>)],
    reduce_inputs: &[Vec<f32>],
    gather_inputs: &[Vec<f32>],
) {
    let expected_sum = collective::all_reduce_sum(reduce_inputs);
    let expected_gather = collective::all_gather(gather_inputs);
    for (rank, (sum, gathered)) in results.iter().enumerate() {
        assert_eq!(gathered, &expected_gather, "rank {rank}: all-gather");
        for (index, (got, want)) in sum.iter().zip(&expected_sum).enumerate() {
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "rank {rank} element {index}: {got} vs {want}"
            );
        }
        assert_eq!(sum, &results[0].0, "rank {rank} differs from rank 0");
    }
}

/// Each rank all-reduces `reduce_len` and all-gathers `gather_len` random
/// values, eagerly or from a graph, and gets the reference on every rank.
fn collectives_match_the_reference(backend: Backend, ranks: usize, graph: bool) {
    let options = DeviceOptions::new().profile(ProfileLevel::Dispatch);
    let Some(devices) = backend.devices(ranks, options) else {
        return;
    };
    let communicators = Communicator::group(&devices).unwrap();
    let (reduce_len, gather_len) = (1000 + ranks, 333);
    let reduce_inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|rank| random_f32(10 + rank as u64, reduce_len))
        .collect();
    let gather_inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|rank| random_f32(90 + rank as u64, gather_len))
        .collect();
    let results = on_every_rank(&communicators, |rank, communicator| {
        run_collectives(communicator, &reduce_inputs[rank], &gather_inputs[rank], graph)
    });
    assert_reference_results(&results, &reduce_inputs, &gather_inputs);
    for (rank, device) in devices.iter().enumerate() {
        let counters = device.profiler().counters().snapshot();
        assert_eq!(counters.dispatches, 2, "rank {rank}");
        let dispatches: Vec<_> = device
            .profiler()
            .dispatches_by_label()
            .into_iter()
            .flat_map(|(_, entries)| entries)
            .collect();
        let kinds: Vec<OpKind> = dispatches.iter().map(|entry| entry.op_kind).collect();
        assert_eq!(kinds, [OpKind::AllReduce, OpKind::AllGather], "rank {rank}");
        assert_eq!(
            dispatches[0].bytes,
            collective::all_reduce_bus_bytes(4 * reduce_len as u64, ranks)
        );
        assert_eq!(
            dispatches[1].bytes,
            collective::all_gather_bus_bytes(4 * (ranks * gather_len) as u64, ranks)
        );
        assert!(
            dispatches.iter().all(|entry| entry.duration_ns() > 0),
            "rank {rank}: timed"
        );
    }
}

#[test]
fn cpu_collectives_match_the_reference() {
    for ranks in [1, 2, 3, 4] {
        collectives_match_the_reference(Backend::Cpu, ranks, false);
    }
}

#[test]
fn gpu_collectives_match_the_reference() {
    collectives_match_the_reference(Backend::Cuda, 2, false);
}

#[test]
fn gpu_collectives_in_graphs_match_the_reference() {
    collectives_match_the_reference(Backend::Cuda, 2, true);
}

#[test]
fn ranks_that_disagree_get_an_error() {
    let devices = vec![Device::cpu(), Device::cpu()];
    let communicators = Communicator::group(&devices).unwrap();
    let errors = on_every_rank(&communicators, |rank, communicator| {
        let device = communicator.device();
        let buffer = device
            .buffer_from_slice(&random_f32(rank as u64, 8 + rank), &[8 + rank])
            .unwrap();
        let mut encoder = device.command_encoder();
        AllReduce::new(communicator)
            .unwrap()
            .encode(&mut encoder, &buffer)
            .unwrap();
        encoder.commit_and_wait().unwrap_err()
    });
    for error in errors {
        assert!(
            matches!(&error, Error::Collective { problem, .. } if problem.contains("disagree")),
            "{error}"
        );
    }
}

#[test]
fn an_aborted_group_wakes_its_waiting_ranks() {
    let devices = vec![Device::cpu(), Device::cpu()];
    let communicators = Communicator::group(&devices).unwrap();
    let error = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let device = communicators[0].device();
            let buffer = device.buffer_from_slice(&random_f32(3, 16), &[16]).unwrap();
            let mut encoder = device.command_encoder();
            AllReduce::new(&communicators[0])
                .unwrap()
                .encode(&mut encoder, &buffer)
                .unwrap();
            encoder.commit_and_wait().unwrap_err()
        });
        // Rank 1 never joins; it fails and aborts the group instead.
        std::thread::sleep(std::time::Duration::from_millis(50));
        communicators[1].abort("rank 1 failed");
        waiting.join().unwrap()
    });
    assert!(
        matches!(&error, Error::CollectiveAborted { rank: 0, reason } if reason == "rank 1 failed"),
        "{error}"
    );
    // Later collectives fail at once too.
    let device = communicators[0].device();
    let buffer = device.buffer_from_slice(&random_f32(4, 4), &[4]).unwrap();
    let mut encoder = device.command_encoder();
    AllReduce::new(&communicators[0])
        .unwrap()
        .encode(&mut encoder, &buffer)
        .unwrap();
    assert!(matches!(
        encoder.commit_and_wait(),
        Err(Error::CollectiveAborted { .. })
    ));
}

#[test]
fn groups_refuse_repeated_devices_and_foreign_encoders() {
    let device = Device::cpu();
    let error = Communicator::group(&[device.clone(), device.clone()]).unwrap_err();
    assert!(error.to_string().contains("same device"), "{error}");
    assert!(Communicator::group(&[]).is_err());
    let communicators = Communicator::group(&[Device::cpu(), Device::cpu()]).unwrap();
    let mut foreign = device.command_encoder();
    let buffer = device.buffer_from_slice(&random_f32(5, 4), &[4]).unwrap();
    let error = AllReduce::new(&communicators[0])
        .unwrap()
        .encode(&mut foreign, &buffer)
        .unwrap_err();
    assert!(matches!(error, Error::DeviceMismatch { .. }), "{error}");
    let gather = AllGather::new(&communicators[0]).unwrap();
    let mut encoder = communicators[0].device().command_encoder();
    let input = communicators[0].device().alloc(DType::F32, &[4]).unwrap();
    let short = communicators[0].device().alloc(DType::F32, &[7]).unwrap();
    assert!(matches!(
        gather.encode(&mut encoder, &input, &short),
        Err(Error::ShapeMismatch { .. })
    ));
    assert_eq!(communicators[1].library(), "in-process");
}

/// A group aborted while no rank is inside a collective: every rank's
/// replay fails with `CollectiveAborted`; rebuilt, it works again; a graph
/// captured before the rebuild is refused on GPUs (its NCCL kernels hold
/// the old communicators) and replays on CPUs (the exchange is the same);
/// graphs captured after it give the reference sum.
fn an_aborted_group_is_rebuilt(backend: Backend) {
    let Some(devices) = backend.devices(2, DeviceOptions::new()) else {
        return;
    };
    let communicators = Communicator::group(&devices).unwrap();
    let length = 257;
    let inputs: Vec<Vec<f32>> = (0..2).map(|rank| random_f32(60 + rank, length)).collect();
    let expected: Vec<f32> = collective::all_reduce_sum(&inputs);
    // Each rank: a buffer reset to its input, then an all-reduce of it,
    // captured into a graph.
    let capture = |rank: usize, communicator: &Communicator| {
        let device = communicator.device();
        let buffer = device.buffer_from_slice(&inputs[rank], &[length]).unwrap();
        let reduce = AllReduce::new(communicator).unwrap();
        let mut encoder = device.command_encoder();
        encoder.begin_capture().unwrap();
        reduce.encode(&mut encoder, &buffer).unwrap();
        (buffer, encoder.end_capture().unwrap())
    };
    let replay = |rank: usize,
                  communicator: &Communicator,
                  buffer: &kernelscope::Buffer,
                  graph: &kernelscope::Graph| {
        let device = communicator.device();
        buffer.write_from(&inputs[rank]).unwrap();
        let mut encoder = device.command_encoder();
        encoder.replay(graph).unwrap();
        encoder
            .commit_and_wait()
            .map(|()| buffer.to_vec::<f32>().unwrap())
    };
    let captured: Vec<_> = on_every_rank(&communicators, |rank, communicator| capture(rank, communicator));
    let sums = on_every_rank(&communicators, |rank, communicator| {
        replay(rank, communicator, &captured[rank].0, &captured[rank].1)
    });
    for sum in sums {
        assert_eq!(sum.unwrap(), expected);
    }

    communicators[1].abort("rank 1 failed");
    assert_eq!(communicators[0].aborted().as_deref(), Some("rank 1 failed"));
    let refused = on_every_rank(&communicators, |rank, communicator| {
        replay(rank, communicator, &captured[rank].0, &captured[rank].1)
    });
    for outcome in refused {
        assert!(
            matches!(outcome, Err(Error::CollectiveAborted { .. })),
            "{outcome:?}"
        );
    }

    communicators[0].rebuild().unwrap();
    assert_eq!(communicators[1].aborted(), None);
    let old = on_every_rank(&communicators, |rank, communicator| {
        replay(rank, communicator, &captured[rank].0, &captured[rank].1)
    });
    for outcome in old {
        match backend {
            Backend::Cuda => assert!(
                matches!(&outcome, Err(Error::CollectiveAborted { reason, .. }) if reason.contains("capture it again")),
                "{outcome:?}"
            ),
            Backend::Cpu => assert_eq!(outcome.unwrap(), expected),
        }
    }
    let recaptured: Vec<_> = on_every_rank(&communicators, |rank, communicator| capture(rank, communicator));
    let sums = on_every_rank(&communicators, |rank, communicator| {
        replay(rank, communicator, &recaptured[rank].0, &recaptured[rank].1)
    });
    for sum in sums {
        assert_eq!(sum.unwrap(), expected);
    }
}

#[test]
fn cpu_aborted_groups_are_rebuilt() {
    an_aborted_group_is_rebuilt(Backend::Cpu);
}

#[test]
fn gpu_aborted_groups_are_rebuilt() {
    an_aborted_group_is_rebuilt(Backend::Cuda);
}

/// Two handles opened on one GPU are one GPU to NCCL: refused.
#[test]
fn gpu_groups_refuse_one_gpu_twice() {
    let Some(devices) = Backend::Cuda.devices(1, DeviceOptions::new()) else {
        return;
    };
    let again = Device::cuda_with(0, DeviceOptions::new()).unwrap();
    let error = Communicator::group(&[devices[0].clone(), again]).unwrap_err();
    assert!(error.to_string().contains("same device"), "{error}");
}

/// Ranks that join one group as a launcher's processes do
/// (`Communicator::join`: a meeting at a fresh port, then the CPU's
/// exchange over its connections or NCCL from rank 0's unique id), each a
/// thread standing in for its process, get the reference results too.
fn joined_collectives_match_the_reference(backend: Backend, ranks: usize, graph: bool) {
    let Some(devices) = backend.devices(ranks, DeviceOptions::new()) else {
        return;
    };
    let port = kernelscope::testing::free_local_port();
    let seed = 7 + ranks as u64 + graph as u64 * 100;
    let reduce_inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|rank| random_f32(seed + rank as u64, 1001 + ranks))
        .collect();
    let gather_inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|rank| random_f32(seed + 50 + rank as u64, 333))
        .collect();
    let results: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let (reduce_inputs, gather_inputs) = (&reduce_inputs, &gather_inputs);
                scope.spawn(move || {
                    let place = LaunchedRank {
                        launcher: Launcher::Torchrun,
                        rank,
                        world_size: ranks,
                        local_rank: rank,
                        rendezvous: format!("127.0.0.1:{port}"),
                    };
                    let communicator =
                        Communicator::join(device, &place, "one model", Duration::from_secs(60)).unwrap();
                    assert_eq!((communicator.rank(), communicator.ranks()), (rank, ranks));
                    run_collectives(&communicator, &reduce_inputs[rank], &gather_inputs[rank], graph)
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap()).collect()
    });
    assert_reference_results(&results, &reduce_inputs, &gather_inputs);
}

#[test]
fn cpu_ranks_joined_as_processes_match_the_reference() {
    for ranks in [2, 3] {
        joined_collectives_match_the_reference(Backend::Cpu, ranks, false);
    }
}

#[test]
fn a_gpu_group_of_one_process_runs_its_collectives() {
    joined_collectives_match_the_reference(Backend::Cuda, 1, false);
    joined_collectives_match_the_reference(Backend::Cuda, 1, true);
}

#[test]
fn gpu_ranks_joined_as_processes_match_the_reference() {
    joined_collectives_match_the_reference(Backend::Cuda, 2, false);
    joined_collectives_match_the_reference(Backend::Cuda, 2, true);
}
