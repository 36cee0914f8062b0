//! Where the CPU queue runs its kernels: a lone device on a thread of rayon's
//! pool (so the kernels' parallel loops find the pool awake between kernels),
//! a rank of a collective group on the thread that committed (its collectives
//! block, which a pool thread must not); groups with more ranks than the
//! pool has threads, and several threads committing parallel kernels to one
//! device, still finish.

use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::ThreadId;
use std::time::Duration;

use kernelscope::ops::collective::{self, AllReduce};
use kernelscope::testing::random_f32;
use kernelscope::{Communicator, DType, Device, Dispatch, KernelRegistry};

/// Where each run of `negate_and_report` ran: its thread and its index in
/// rayon's pool, if any.
type Sightings = Mutex<Vec<(ThreadId, Option<usize>)>>;

/// A registry whose `negate_and_report` negates its input into its output and
/// says where it ran.
fn reporting_registry(sightings: &'static Sightings) -> KernelRegistry {
    let mut registry = KernelRegistry::new();
    registry.register_cpu("negate_and_report", move |args| {
        let input = args.input::<f32>(0)?;
        let output = args.output::<f32>(1)?;
        output
            .iter_mut()
            .zip(input)
            .for_each(|(out, value)| *out = -value);
        let place = (std::thread::current().id(), rayon::current_thread_index());
        sightings.lock().unwrap().push(place);
        Ok(())
    });
    registry
}

/// Negates `seed`'s random values on `device` twice in one submission and
/// returns the result, which must be the input.
fn negate_twice(device: &Device, registry: &KernelRegistry, seed: u64) {
    let kernel = registry.kernel(device, "negate_and_report").unwrap();
    let data = random_f32(seed, 97);
    let source = device.buffer_from_slice(&data, &[97]).unwrap();
    let middle = device.alloc(DType::F32, &[97]).unwrap();
    let result = device.alloc(DType::F32, &[97]).unwrap();
    let mut encoder = device.command_encoder();
    encoder
        .dispatch(Dispatch::new(&kernel).read(&source).write(&middle))
        .unwrap();
    encoder
        .dispatch(Dispatch::new(&kernel).read(&middle).write(&result))
        .unwrap();
    encoder.commit_and_wait().unwrap();
    assert_eq!(
        middle.to_vec::<f32>().unwrap(),
        data.iter().map(|v| -v).collect::<Vec<_>>()
    );
    assert_eq!(result.to_vec::<f32>().unwrap(), data);
}

#[test]
fn a_lone_device_runs_its_kernels_on_the_pool() {
    static SIGHTINGS: Sightings = Mutex::new(Vec::new());
    let registry = reporting_registry(&SIGHTINGS);
    let device = Device::cpu();
    negate_twice(&device, &registry, 7);
    let sightings = SIGHTINGS.lock().unwrap().clone();
    assert_eq!(sightings.len(), 2, "both kernels ran");
    let caller = std::thread::current().id();
    for (thread, pool_index) in &sightings {
        assert!(pool_index.is_some(), "a kernel ran outside rayon's pool");
        assert_ne!(*thread, caller, "a kernel ran on the committing thread");
    }
    assert_eq!(sightings[0], sightings[1], "one submission, one thread");
}

#[test]
fn a_rank_of_a_group_runs_its_kernels_where_it_committed() {
    static SIGHTINGS: Sightings = Mutex::new(Vec::new());
    let registry = reporting_registry(&SIGHTINGS);
    let devices = [Device::cpu(), Device::cpu()];
    let _communicators = Communicator::group(&devices).unwrap();
    negate_twice(&devices[1], &registry, 8);
    let sightings = SIGHTINGS.lock().unwrap().clone();
    assert_eq!(sightings.len(), 2, "both kernels ran");
    let caller = std::thread::current().id();
    for (thread, pool_index) in &sightings {
        assert_eq!(
            *thread, caller,
            "a grouped device's kernel left the committing thread"
        );
        assert_eq!(*pool_index, None);
    }
}

/// Each rank waits inside its all-reduce until every rank arrives; were the
/// ranks' queues run on the pool, the ranks beyond its threads would never
/// start. A hang fails here after a minute instead of stalling the suite.
#[test]
fn groups_larger_than_the_pool_finish() {
    let ranks = rayon::current_num_threads() + 2;
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let devices: Vec<Device> = (0..ranks).map(|_| Device::cpu()).collect();
        let communicators = Communicator::group(&devices).unwrap();
        let inputs: Vec<Vec<f32>> = (0..ranks).map(|rank| random_f32(40 + rank as u64, 513)).collect();
        let sums: Vec<Vec<f32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = communicators
                .iter()
                .zip(&inputs)
                .map(|(communicator, input)| {
                    scope.spawn(move || {
                        let device = communicator.device();
                        let values = device.buffer_from_slice(input, &[input.len()]).unwrap();
                        let mut encoder = device.command_encoder();
                        AllReduce::new(communicator)
                            .unwrap()
                            .encode(&mut encoder, &values)
                            .unwrap();
                        encoder.commit_and_wait().unwrap();
                        values.to_vec::<f32>().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|handle| handle.join().unwrap()).collect()
        });
        done.send((inputs, sums)).unwrap();
    });
    let (inputs, sums) = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("a group with more ranks than rayon has threads hung in its all-reduce");
    let expected = collective::all_reduce_sum(&inputs);
    for (rank, sum) in sums.iter().enumerate() {
        for (index, (got, want)) in sum.iter().zip(&expected).enumerate() {
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "rank {rank} element {index}: {got} vs {want}"
            );
        }
    }
}

/// Threads committing to one device at once, with kernels whose parallel
/// loops wait for each other's halves: a pool thread waiting so may pick up
/// another submission's whole job, and must not then wait for the device it
/// already holds. A hang fails here after a minute.
#[test]
fn concurrent_submissions_with_parallel_kernels_finish() {
    use rayon::prelude::*;
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let mut registry = KernelRegistry::new();
        registry.register_cpu("negate_in_parallel", |args| {
            let input = args.input::<f32>(0)?;
            let output = args.output::<f32>(1)?;
            output
                .par_chunks_mut(7)
                .zip(input.par_chunks(7))
                .for_each(|(out, values)| out.iter_mut().zip(values).for_each(|(out, value)| *out = -value));
            Ok(())
        });
        let device = Device::cpu();
        let kernel = registry.kernel(&device, "negate_in_parallel").unwrap();
        std::thread::scope(|scope| {
            for thread in 0..(rayon::current_num_threads() + 2) {
                let (device, kernel) = (&device, &kernel);
                scope.spawn(move || {
                    let data = random_f32(60 + thread as u64, 1 << 16);
                    let source = device.buffer_from_slice(&data, &[1 << 16]).unwrap();
                    let result = device.alloc(DType::F32, &[1 << 16]).unwrap();
                    for _ in 0..200 {
                        let mut encoder = device.command_encoder();
                        encoder
                            .dispatch(Dispatch::new(kernel).read(&source).write(&result))
                            .unwrap();
                        encoder.commit_and_wait().unwrap();
                    }
                    let negated: Vec<f32> = data.iter().map(|value| -value).collect();
                    assert_eq!(result.to_vec::<f32>().unwrap(), negated, "thread {thread}");
                });
            }
        });
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("concurrent submissions to one CPU device hung");
}
