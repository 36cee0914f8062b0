//! How close the CPU's read probe (the read ceiling every CPU roofline
//! divides by) comes to a plain read loop, and to a copy: the three read
//! the same 256 MiB of random words, side by side, in bytes per second.
//! The probe should read within a few per cent of the loop, and at least
//! half a copy's rate (a copy's bytes are half reads); a speed claim is a
//! benchmark's to check, on a quiet machine, not a test's.
//!
//! `cargo bench -p kernelscope --bench read_ceiling`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kernelscope::ops::copy::Copy;
use kernelscope::probes::stream_read::StreamRead;
use kernelscope::rng::SplitMix64;
use kernelscope::{DType, Device};
use rayon::prelude::*;

/// Large enough to stream from memory rather than cache.
const BYTES: usize = 256 << 20;

fn bench_reads(criterion: &mut Criterion) {
    let device = Device::cpu();
    let registry = kernelscope::probes::registry();
    let mut random = SplitMix64::new(0x7265_6164);
    let words: Vec<u32> = (0..BYTES / 4).map(|_| random.next_u64() as u32).collect();
    let input = device.buffer_from_slice(&words, &[words.len()]).unwrap();
    let out = device.alloc(DType::U32, &[1]).unwrap();
    let copied = device.alloc(DType::U32, &[words.len()]).unwrap();
    let read = StreamRead::new(&registry, &device).unwrap();
    let copy = Copy::new(&registry, &device).unwrap();
    let mut group = criterion.benchmark_group("read_ceiling");
    group.sample_size(20).throughput(Throughput::Bytes(BYTES as u64));
    group.bench_function("read_probe", |bench| {
        bench.iter(|| {
            let mut encoder = device.command_encoder();
            read.encode(&mut encoder, &input, &out).unwrap();
            encoder.commit_and_wait().unwrap();
        })
    });
    // The loop anyone would write: each of rayon's threads sums its share.
    let share = words.len().div_ceil(rayon::current_num_threads().max(1));
    group.bench_function("plain_read_loop", |bench| {
        bench.iter(|| {
            let sum = words
                .par_chunks(share)
                .map(|chunk| chunk.iter().fold(0u32, |sum, &word| sum.wrapping_add(word)))
                .reduce(|| 0, u32::wrapping_add);
            std::hint::black_box(sum)
        })
    });
    // Counted as the bytes read: half of what a copy moves.
    group.bench_function("copy_reads", |bench| {
        bench.iter(|| {
            let mut encoder = device.command_encoder();
            copy.encode(&mut encoder, &input, &copied).unwrap();
            encoder.commit_and_wait().unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, bench_reads);
criterion_main!(benches);
