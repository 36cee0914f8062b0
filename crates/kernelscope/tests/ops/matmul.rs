//! MatVec (one row, decode) and MatMul (a batch of rows, prefill) against f64 dot products.

use kernelscope::OpKind;
use kernelscope::ops;
use kernelscope::testing::Backend;

use crate::helpers::{
    REL_TOL, WEIGHT_DTYPES, assert_close, assert_dispatched, assert_kernel, poisoned, profiled_device,
    random, weights,
};

fn matvec_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::matvec::MatVec::new(&registry, &device, dtype).unwrap();
        for n in [1, 7, 33, 300] {
            for k in [1, 5, 64, 257] {
                let seed = (n * 1000 + k) as u64;
                let (weight, w) = weights(&device, dtype, &random(seed, n * k, -1.0, 1.0), &[n, k]);
                let x = random(seed + 1, k, -1.0, 1.0);
                let out = poisoned(&device, &[n]);
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &weight,
                    &device.buffer_from_slice(&x, &[k]).unwrap(),
                    &out,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();

                let mut expected = vec![0.0; n];
                for row in 0..n {
                    for col in 0..k {
                        expected[row] += w[row * k + col] * f64::from(x[col]);
                    }
                }
                let what = format!("matvec {dtype} n {n} k {k}");
                let abs_tol = REL_TOL * (k as f64).sqrt();
                assert_close(&out.to_vec::<f32>().unwrap(), &expected, REL_TOL, abs_tol, &what);
            }
        }
    }
    assert_dispatched(&device, OpKind::MatVec, "matvec_");
}

fn matmul_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::matmul::MatMul::new(&registry, &device, dtype).unwrap();
        // m: one token, a part of the CPU version's 16-token block, whole
        // blocks, and blocks plus a part; n: parts of its 6-row panel; k: no
        // multiple of 8, and one past its 512-deep chunk (sums carried over).
        for m in [1, 5, 64, 130] {
            for n in [1, 7, 33] {
                for k in [1, 5, 67, 257, 601] {
                    let seed = (m * 100_000 + n * 1000 + k) as u64;
                    let (weight, w) = weights(&device, dtype, &random(seed, n * k, -1.0, 1.0), &[n, k]);
                    let (input, x) = weights(&device, dtype, &random(seed + 1, m * k, -1.0, 1.0), &[m, k]);
                    let out = poisoned(&device, &[m, n]);
                    let mut encoder = device.command_encoder();
                    op.encode(&mut encoder, &weight, &input, &out).unwrap();
                    encoder.commit_and_wait().unwrap();

                    let mut expected = vec![0.0; m * n];
                    for token in 0..m {
                        for row in 0..n {
                            for col in 0..k {
                                expected[token * n + row] += x[token * k + col] * w[row * k + col];
                            }
                        }
                    }
                    let what = format!("matmul {dtype} m {m} n {n} k {k}");
                    let abs_tol = REL_TOL * (k as f64).sqrt();
                    assert_close(&out.to_vec::<f32>().unwrap(), &expected, REL_TOL, abs_tol, &what);
                }
            }
        }
        if backend == Backend::Cpu {
            assert_kernel(&device, &format!("matmul_{dtype}"));
        } else {
            // cuBLASLt's own kernels (gemv, gemm, split-K reductions), timed
            // and named as CUPTI reports them, under the op's kind.
            let dispatches = device.profiler().dispatches();
            assert!(!dispatches.is_empty(), "no dispatch recorded for matmul_{dtype}");
            assert!(
                dispatches
                    .iter()
                    .all(|dispatch| dispatch.op_kind == OpKind::MatMul)
            );
            device.profiler().reset();
        }
    }
}

kernelscope::device_tests!(matvec_matches_reference, matmul_matches_reference);
