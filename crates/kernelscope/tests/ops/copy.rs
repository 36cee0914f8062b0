//! Copy: f32 and two-byte elements bit for bit; odd two-byte counts refused.

use half::bf16;
use kernelscope::ops;
use kernelscope::testing::Backend;
use kernelscope::{DType, OpKind};

use crate::helpers::{assert_close, assert_dispatched, poisoned, profiled_device, random, widen};

fn copy_copies_every_byte(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::copy::Copy::new(&ops::registry(), &device).unwrap();
    for n in [1, 7, 1000, 300_001] {
        let source = random(91 + n as u64, n, -1.0, 1.0);
        let destination = poisoned(&device, &[n]);
        let mut encoder = device.command_encoder();
        op.encode(
            &mut encoder,
            &device.buffer_from_slice(&source, &[n]).unwrap(),
            &destination,
        )
        .unwrap();
        encoder.commit_and_wait().unwrap();
        assert_close(
            &destination.to_vec::<f32>().unwrap(),
            &widen(&source),
            0.0,
            0.0,
            &format!("copy of {n} f32"),
        );
    }
    // Two-byte elements go as 32-bit words: an even count copies, an odd one is refused.
    let halves: Vec<bf16> = random(92, 6, -1.0, 1.0)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let destination = device.buffer_from_slice(&[bf16::NAN; 6], &[6]).unwrap();
    let mut encoder = device.command_encoder();
    op.encode(
        &mut encoder,
        &device.buffer_from_slice(&halves, &[6]).unwrap(),
        &destination,
    )
    .unwrap();
    encoder.commit_and_wait().unwrap();
    let bits = |values: &[bf16]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&destination.to_vec::<bf16>().unwrap()),
        bits(&halves),
        "copy of 6 bf16"
    );
    let odd = device.alloc(DType::BF16, &[3]).unwrap();
    assert!(
        op.encode(&mut encoder, &odd, &device.alloc(DType::BF16, &[3]).unwrap())
            .is_err()
    );
    assert!(
        op.encode(&mut encoder, &odd, &device.alloc(DType::F16, &[3]).unwrap())
            .is_err()
    );
    assert_dispatched(&device, OpKind::Copy, "copy_");
}

kernelscope::device_tests!(copy_copies_every_byte);
