//! Communicators of ranks that join a group as a launcher's processes do
//! (`Communicator::join`: a meeting at an address, then the CPU's exchange
//! over its connections or NCCL from rank 0's unique id), here each rank a
//! thread standing in for its process: all-reduce and all-gather give every
//! rank the reference result, eagerly and replayed from a graph. CPU groups
//! run everywhere; a GPU group of one runs on any GPU, of two on two.

use std::time::Duration;

use kernelscope::ops::collective::{self, AllGather, AllReduce};
use kernelscope::runtime::{LaunchedRank, Launcher};
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{Communicator, DType, DeviceOptions};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Ranks of `backend` join one group at a fresh port, a thread each, and
/// all-reduce and all-gather random values of odd lengths.
fn joined_collectives_match_the_reference(backend: Backend, ranks: usize, graph: bool) {
    let Some(devices) = backend.devices(ranks, DeviceOptions::new()) else {
        return;
    };
    let port = free_port();
    let (reduce_len, gather_len) = (1001 + ranks, 333);
    let seed = 7 + ranks as u64 + graph as u64 * 100;
    let reduce_inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|rank| random_f32(seed + rank as u64, reduce_len))
        .collect();
    let gather_inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|rank| random_f32(seed + 50 + rank as u64, gather_len))
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
                    let reduce = AllReduce::new(&communicator).unwrap();
                    let gather = AllGather::new(&communicator).unwrap();
                    let reduced = device
                        .buffer_from_slice(&reduce_inputs[rank], &[reduce_len])
                        .unwrap();
                    let input = device
                        .buffer_from_slice(&gather_inputs[rank], &[gather_len])
                        .unwrap();
                    let gathered = device.alloc(DType::F32, &[ranks * gather_len]).unwrap();
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
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap()).collect()
    });
    let expected_sum = collective::all_reduce_sum(&reduce_inputs);
    let expected_gather = collective::all_gather(&gather_inputs);
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
