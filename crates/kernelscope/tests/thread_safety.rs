//! Profiling from several threads at once loses no entries and no counts:
//! each thread has its own encoder on one shared device.

mod common;

use kernelscope::profile::ProfileLevel;
use kernelscope::testing::random_f32;
use kernelscope::{DType, Device, DeviceOptions, Dispatch};

#[test]
fn concurrent_encoders_lose_nothing() {
    const THREADS: usize = 4;
    const SUBMISSIONS: usize = 50;
    const DISPATCHES: usize = 3;
    let device = Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
    let kernel = common::inc_one_registry().kernel(&device, "inc_one").unwrap();

    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (device, kernel) = (device.clone(), kernel.clone());
            scope.spawn(move || {
                let n = 64;
                let data = random_f32(50 + thread as u64, n);
                let buffers: Vec<_> = (0..=DISPATCHES)
                    .map(|_| device.alloc(DType::F32, &[n]).unwrap())
                    .collect();
                buffers[0].write_from(&data).unwrap();
                let mut encoder = device.command_encoder();
                for _ in 0..SUBMISSIONS {
                    for step in 0..DISPATCHES {
                        let dispatch = Dispatch::new(&kernel)
                            .read(&buffers[step])
                            .write(&buffers[step + 1]);
                        encoder.dispatch(dispatch).unwrap();
                    }
                    encoder
                        .commit_and_wait_labeled(&format!("thread.{thread}"))
                        .unwrap();
                }
                let result = buffers[DISPATCHES].to_vec::<f32>().unwrap();
                let expected: Vec<f32> = data.iter().map(|x| x + DISPATCHES as f32).collect();
                assert_eq!(result, expected);
            });
        }
    });

    let groups = device.profiler().dispatches_by_label();
    assert_eq!(groups.len(), THREADS);
    for (label, entries) in &groups {
        assert_eq!(entries.len(), SUBMISSIONS * DISPATCHES, "{label}");
        for (position, entry) in entries.iter().enumerate() {
            assert_eq!(
                entry.index as usize,
                position % DISPATCHES,
                "{label}: order within a submission"
            );
        }
    }
    let table = device.profiler().submission_table();
    assert!(
        table.iter().all(|row| row.count == SUBMISSIONS as u64),
        "{table:?}"
    );
    let counters = device.profiler().counters().snapshot();
    assert_eq!(counters.dispatches, (THREADS * SUBMISSIONS * DISPATCHES) as u64);
    assert_eq!(counters.submissions, (THREADS * SUBMISSIONS) as u64);
    // One wait per submission, and one per thread for reading its result.
    assert_eq!(counters.syncs, (THREADS * SUBMISSIONS + THREADS) as u64);
    assert_eq!(counters.host_device_copies, (2 * THREADS) as u64);
    let mut ids: Vec<u64> = device
        .profiler()
        .submissions()
        .iter()
        .map(|s| s.submission)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), THREADS * SUBMISSIONS, "submission ids are unique");
}
