//! The cost of the dispatch hot path on the CPU backend at each profiling
//! tier, so the price of profiling is a number: a kernel that does nothing
//! is encoded and committed in batches of 64, with profiling off (counters
//! only), per-submission timing, and per-dispatch timing. A direct call of
//! the same closure is the floor.
//!
//! `cargo bench -p kernelscope --bench dispatch_hot_path`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kernelscope::profile::ProfileLevel;
use kernelscope::{DType, Device, DeviceOptions, Dispatch, KernelRegistry};

const BATCH: usize = 64;

fn bench_tiers(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("dispatch_hot_path");
    group.throughput(Throughput::Elements(BATCH as u64));

    let floor = |args: &kernelscope::KernelArgs<'_>| -> kernelscope::Result<()> {
        black_box(args.len());
        Ok(())
    };
    // The floor: calling a boxed closure, as the queue finally does.
    group.bench_function("boxed_closure_call", |bencher| {
        let boxed: Box<dyn Fn(usize) -> usize> = Box::new(|x| black_box(x) + 1);
        bencher.iter(|| {
            for i in 0..BATCH {
                black_box(boxed(black_box(i)));
            }
        })
    });

    for (name, level) in [
        ("off_counters_only", ProfileLevel::Off),
        ("submission_timing", ProfileLevel::Submission),
        ("dispatch_timing", ProfileLevel::Dispatch),
    ] {
        group.bench_function(name, |bencher| {
            let device = Device::cpu_with(DeviceOptions::new().profile(level));
            let mut registry = KernelRegistry::new();
            registry.register_cpu("noop", floor);
            let kernel = registry.kernel(&device, "noop").unwrap();
            let input = device.alloc(DType::F32, &[16]).unwrap();
            let outputs: Vec<_> = (0..BATCH)
                .map(|_| device.alloc(DType::F32, &[16]).unwrap())
                .collect();
            let mut encoder = device.command_encoder();
            encoder.set_scope("layer.0.mlp");
            bencher.iter_batched(
                || device.profiler().reset(),
                |()| {
                    for output in &outputs {
                        encoder
                            .dispatch(Dispatch::new(&kernel).read(&input).write(output).cost(64, 64, 16))
                            .unwrap();
                    }
                    encoder.commit_and_wait_labeled("bench").unwrap();
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_tiers);
criterion_main!(benches);
