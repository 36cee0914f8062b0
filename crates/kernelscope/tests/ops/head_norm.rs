//! The per-head RMSNorm (Qwen3's q_norm and k_norm) in every weight dtype:
//! each head normalised in place, at head sizes below, at and above a
//! warp's width and odd, over one to many heads; the input is refused when
//! it is not whole heads of f32.

use kernelscope::ops;
use kernelscope::testing::Backend;
use kernelscope::{DType, OpKind};

use crate::helpers::{
    REL_TOL, WEIGHT_DTYPES, assert_close, assert_dispatched, profiled_device, random, weights,
};

fn head_norm_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for weight_dtype in WEIGHT_DTYPES {
        let op = ops::head_norm::HeadNorm::new(&registry, &device, weight_dtype).unwrap();
        device.profiler().reset();
        // (head_dim, heads, eps): one head; a head under a warp; Qwen3's 128
        // over 32 rows of 8 heads (more heads than one launch's warps);
        // odd sizes; a large eps.
        for (head_dim, heads, eps) in [
            (128, 1, 1e-6),
            (7, 5, 1e-6),
            (128, 32 * 8, 1e-6),
            (48, 3 * 17, 1e-5),
            (130, 9, 0.25),
        ] {
            let seed = (head_dim * 1000 + heads) as u64;
            let x = random(31 + seed, heads * head_dim, -3.0, 3.0);
            let (weight, w) = weights(
                &device,
                weight_dtype,
                &random(32 + seed, head_dim, 0.5, 1.5),
                &[head_dim],
            );
            let buffer = device.buffer_from_slice(&x, &[heads, head_dim]).unwrap();
            let mut encoder = device.command_encoder();
            op.encode(&mut encoder, &buffer, &weight, eps).unwrap();
            encoder.commit_and_wait().unwrap();
            let mut expected = Vec::with_capacity(x.len());
            for head in x.chunks_exact(head_dim) {
                let mean_square =
                    head.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / head_dim as f64;
                let scale = 1.0 / (mean_square + f64::from(eps)).sqrt();
                expected.extend(head.iter().zip(&w).map(|(&v, w)| f64::from(v) * scale * w));
            }
            let what = format!("head_norm {weight_dtype} head_dim {head_dim} heads {heads}");
            assert_close(&buffer.to_vec::<f32>().unwrap(), &expected, REL_TOL, 1e-6, &what);
        }
        assert_dispatched(&device, OpKind::RmsNorm, &format!("head_norm_{weight_dtype}"));
        // Not whole heads, or not f32: refused before any launch.
        let (weight, _) = weights(&device, weight_dtype, &[1.0; 8], &[8]);
        let ragged = device.buffer_from_slice(&[0.5f32; 12], &[12]).unwrap();
        assert!(
            op.encode(&mut device.command_encoder(), &ragged, &weight, 1e-6)
                .is_err()
        );
        let halves = device.alloc(DType::BF16, &[16]).unwrap();
        assert!(
            op.encode(&mut device.command_encoder(), &halves, &weight, 1e-6)
                .is_err()
        );
    }
}

kernelscope::device_tests!(head_norm_matches_reference);
