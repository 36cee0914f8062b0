//! The element-wise ops: SiluMul in every output dtype, Add of a residual or a bias row.

use kernelscope::ops;
use kernelscope::testing::Backend;
use kernelscope::{DType, Error};

use crate::helpers::{
    REL_TOL, ROWS, WEIGHT_DTYPES, assert_close, assert_close_in, assert_kernel, poisoned_as, profiled_device,
    random, read_f32, weights,
};

fn silu_mul_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for out_dtype in WEIGHT_DTYPES {
        let op = ops::silu_mul::SiluMul::new(&registry, &device, out_dtype).unwrap();
        for n in [1, 7, 33, 300, 1025] {
            for rows in ROWS {
                let seed = (n * 100 + rows) as u64;
                let gate = random(41 + seed, rows * n, -10.0, 10.0);
                let up = random(42 + seed, rows * n, -1.0, 1.0);
                let out = poisoned_as(&device, out_dtype, &[rows, n]);
                let mut encoder = device.command_encoder();
                op.encode(
                    &mut encoder,
                    &device.buffer_from_slice(&gate, &[rows, n]).unwrap(),
                    &device.buffer_from_slice(&up, &[rows * n]).unwrap(),
                    &out,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();
                let expected: Vec<f64> = (0..rows * n)
                    .map(|i| {
                        let g = f64::from(gate[i]);
                        g / (1.0 + (-g).exp()) * f64::from(up[i])
                    })
                    .collect();
                let what = format!("silu_mul -> {out_dtype} n {n} rows {rows}");
                assert_close_in(out_dtype, &read_f32(&out), &expected, REL_TOL, 1e-7, &what);
            }
        }
        assert_kernel(&device, &format!("silu_mul_{out_dtype}"));
    }
}

fn add_matches_reference(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let registry = ops::registry();
    for dtype in WEIGHT_DTYPES {
        let op = ops::add::Add::new(&registry, &device, dtype).unwrap();
        for n in [1, 7, 33, 300] {
            for rows in ROWS {
                // A residual as long as x, and a bias row added to every row.
                for broadcast in [false, true] {
                    let seed = (n * 100 + rows * 2 + usize::from(broadcast)) as u64;
                    let x = random(51 + seed, rows * n, -1.0, 1.0);
                    let y_shape = if broadcast { vec![n] } else { vec![rows, n] };
                    let (addend, y) = weights(
                        &device,
                        dtype,
                        &random(52 + seed, y_shape.iter().product(), -1.0, 1.0),
                        &y_shape,
                    );
                    // In place: the accumulator is the output, so it cannot be poisoned.
                    let accumulator = device.buffer_from_slice(&x, &[rows, n]).unwrap();
                    let mut encoder = device.command_encoder();
                    op.encode(&mut encoder, &accumulator, &addend).unwrap();
                    encoder.commit_and_wait().unwrap();
                    let expected: Vec<f64> =
                        (0..rows * n).map(|i| f64::from(x[i]) + y[i % y.len()]).collect();
                    let what = format!("add {dtype} n {n} rows {rows} addend {y_shape:?}");
                    assert_close(
                        &accumulator.to_vec::<f32>().unwrap(),
                        &expected,
                        REL_TOL,
                        1e-7,
                        &what,
                    );
                }
            }
        }
        assert_kernel(&device, &format!("add_{dtype}"));
    }
}

fn add_refuses_an_addend_whose_length_does_not_divide(backend: Backend) {
    let Some(device) = profiled_device(backend) else {
        return;
    };
    let op = ops::add::Add::new(&ops::registry(), &device, DType::F32).unwrap();
    let accumulator = device
        .buffer_from_slice(&random(53, 21, -1.0, 1.0), &[3, 7])
        .unwrap();
    for length in [5, 8, 42] {
        let addend = device
            .buffer_from_slice(&random(54, length, -1.0, 1.0), &[length])
            .unwrap();
        let mut encoder = device.command_encoder();
        let result = op.encode(&mut encoder, &accumulator, &addend);
        assert!(
            matches!(result, Err(Error::ShapeMismatch { .. })),
            "an addend of {length} onto 21: {result:?}"
        );
    }
}

kernelscope::device_tests!(
    silu_mul_matches_reference,
    add_matches_reference,
    add_refuses_an_addend_whose_length_does_not_divide,
);
