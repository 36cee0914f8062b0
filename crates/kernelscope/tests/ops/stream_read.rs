//! The read probe: every word of random inputs folded (XOR) into the output
//! word on top of what it held, at sizes that do and do not fill whole
//! 16-byte vectors, from a view that is not 16-byte aligned too.

use kernelscope::probes;
use kernelscope::rng::SplitMix64;
use kernelscope::testing::Backend;
use kernelscope::{DType, OpKind};

use crate::helpers::{assert_dispatched, profiled_device};

fn stream_read_folds_every_word(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = probes::stream_read::StreamRead::new(&probes::registry(), &device).unwrap();
    for (case, words) in [1usize, 5, 64, 1000, 300_001, 4_194_307].into_iter().enumerate() {
        let mut rng = SplitMix64::new(700 + case as u64);
        // One word more than read, so the view at word 1 is not 16-byte aligned.
        let values: Vec<u32> = (0..=words).map(|_| rng.next_u64() as u32).collect();
        let initial = rng.next_u64() as u32;
        let all = device.buffer_from_slice(&values, &[words + 1]).unwrap();
        for first in [0, 1] {
            let input = all.slice(first, words).unwrap();
            let out = device.buffer_from_slice(&[initial], &[1]).unwrap();
            let mut encoder = device.command_encoder();
            op.encode(&mut encoder, &input, &out).unwrap();
            encoder.commit_and_wait().unwrap();
            let expected = values[first..first + words].iter().fold(initial, |a, b| a ^ b);
            assert_eq!(
                out.to_vec::<u32>().unwrap(),
                [expected],
                "{words} words from word {first}"
            );
        }
    }
    assert_dispatched(&device, OpKind::Copy, "stream_read");
    // A byte length that is not whole words, or no output word, is refused.
    let mut encoder = device.command_encoder();
    let halves = device.alloc(DType::BF16, &[3]).unwrap();
    let out = device.alloc(DType::U32, &[1]).unwrap();
    assert!(op.encode(&mut encoder, &halves, &out).is_err());
    let input = device.alloc(DType::U32, &[4]).unwrap();
    let float_out = device.alloc(DType::F32, &[1]).unwrap();
    assert!(op.encode(&mut encoder, &input, &float_out).is_err());
}

fn read_bandwidth_is_measured(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let gbps = probes::stream_read::measure_read_bandwidth(&device, 8 << 20, 2).unwrap();
    assert!(gbps.is_finite() && gbps > 0.0, "{gbps} GB/s");
}

kernelscope::device_tests!(stream_read_folds_every_word, read_bandwidth_is_measured);
