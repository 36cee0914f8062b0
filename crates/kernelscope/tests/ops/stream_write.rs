//! The write probe: every word of the output is the pattern's, over words
//! that held random values before, at sizes that do and do not fill whole
//! 16-byte vectors, into a view that is not 16-byte aligned too, and
//! nothing outside the view is touched.

use kernelscope::probes;
use kernelscope::probes::stream_write::pattern_word;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{DType, OpKind};

use crate::helpers::{assert_dispatched, profiled_device};

fn stream_write_writes_the_pattern(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = probes::stream_write::StreamWrite::new(&probes::registry(), &device).unwrap();
    for (case, words) in [1usize, 5, 64, 1000, 300_001, 4_194_307].into_iter().enumerate() {
        let mut rng = SplitMix64::new(900 + case as u64);
        for first in [0, 1] {
            // A word before and after the view, to see nothing else is written.
            let before: Vec<u32> = (0..words + 2).map(|_| rng.next_u64() as u32).collect();
            let seed = rng.next_u64() as u32;
            let all = device.buffer_from_slice(&before, &[words + 2]).unwrap();
            let mut encoder = device.command_encoder();
            op.encode(&mut encoder, &all.slice(first, words).unwrap(), seed)
                .unwrap();
            encoder.commit_and_wait().unwrap();
            let mut expected = before.clone();
            for index in 0..words {
                expected[first + index] = pattern_word(index, seed);
            }
            assert!(
                all.to_vec::<u32>().unwrap() == expected,
                "{words} words from word {first}"
            );
        }
    }
    assert_dispatched(&device, OpKind::Copy, "stream_write");
    let halves = device.alloc(DType::BF16, &[3]).unwrap();
    assert!(op.encode(&mut device.command_encoder(), &halves, 1).is_err());
}

fn write_bandwidth_is_measured(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let gbps = probes::stream_write::measure_write_bandwidth(&device, 8 << 20, 2).unwrap();
    assert!(gbps.is_finite() && gbps > 0.0, "{gbps} GB/s");
}

kernelscope::device_tests!(stream_write_writes_the_pattern, write_bandwidth_is_measured);
