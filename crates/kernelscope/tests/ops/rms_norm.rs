//! RmsNorm in every weight and output dtype it supports, and the pairs it refuses.

use kernelscope::ops;
use kernelscope::testing::Backend;
use kernelscope::{DType, Error};

use crate::helpers::{
    REL_TOL, ROWS, WEIGHT_DTYPES, assert_close_in, assert_kernel, output_dtypes, poisoned_as,
    profiled_device, random, read_f32, weights,
};

fn rms_norm_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for weight_dtype in WEIGHT_DTYPES {
        // f32 weights also write bf16 (the GEMM input of quantized models).
        let mut out_dtypes = output_dtypes(weight_dtype);
        if weight_dtype == DType::F32 {
            out_dtypes.push(DType::BF16);
        }
        for out_dtype in out_dtypes {
            let op = ops::rms_norm::RmsNorm::new(&registry, &device, weight_dtype, out_dtype).unwrap();
            // 300 and 4096 take the kernel's 4-wide path, 1, 7 and 33 its
            // scalar one; the offset input is misaligned for 4-wide loads.
            for (n, eps, offset) in [
                (1, 1e-6, 0),
                (7, 1e-5, 0),
                (33, 1e-6, 0),
                (300, 1e-5, 0),
                (300, 1e-5, 1),
                (4096, 1e-6, 0),
                (33, 0.25, 0),
            ] {
                for rows in ROWS {
                    let seed = (n * 100 + rows + offset) as u64;
                    let x = random(21 + seed, offset + rows * n, -2.0, 2.0);
                    let (weight, w) = weights(&device, weight_dtype, &random(22 + seed, n, -1.5, 1.5), &[n]);
                    let input = device
                        .buffer_from_slice(&x, &[x.len()])
                        .unwrap()
                        .slice(offset, rows * n)
                        .unwrap();
                    let input = if offset == 0 {
                        input.reshape(&[rows, n]).unwrap()
                    } else {
                        input
                    };
                    let out = poisoned_as(&device, out_dtype, &[rows, n]);
                    let mut encoder = device.command_encoder();
                    op.encode(&mut encoder, &input, &weight, &out, eps).unwrap();
                    encoder.commit_and_wait().unwrap();

                    let mut expected = Vec::with_capacity(rows * n);
                    for row in x[offset..].chunks_exact(n) {
                        let mut mean_square = 0.0;
                        for &v in row {
                            mean_square += f64::from(v) * f64::from(v);
                        }
                        mean_square /= n as f64;
                        let scale = 1.0 / (mean_square + f64::from(eps)).sqrt();
                        expected.extend((0..n).map(|i| f64::from(row[i]) * scale * w[i]));
                    }
                    let what =
                        format!("rms_norm {weight_dtype}->{out_dtype} n {n} rows {rows} offset {offset}");
                    assert_close_in(out_dtype, &read_f32(&out), &expected, REL_TOL, 1e-6, &what);
                }
            }
            let kernel = if out_dtype == DType::F32 {
                format!("rms_norm_{weight_dtype}")
            } else {
                format!("rms_norm_{weight_dtype}_{out_dtype}")
            };
            assert_kernel(&device, &kernel);
        }
    }
}

fn rms_norm_refuses_other_output_dtypes(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for (weight_dtype, out_dtype) in [
        (DType::F32, DType::F16),
        (DType::BF16, DType::F16),
        (DType::F16, DType::BF16),
        (DType::BF16, DType::U32),
    ] {
        match ops::rms_norm::RmsNorm::new(&registry, &device, weight_dtype, out_dtype) {
            Err(Error::KernelMissing { name, .. }) => {
                assert_eq!(name, format!("rms_norm_{weight_dtype}_{out_dtype}"));
            }
            other => panic!("rms_norm {weight_dtype}->{out_dtype}: {other:?}"),
        }
    }
}

kernelscope::device_tests!(rms_norm_matches_reference, rms_norm_refuses_other_output_dtypes);
