//! The CPU's chunk product with 8-bit activations (`matmul_<format>_q8`),
//! which CPUs without AVX-512 BF16 run: this binary forces the AVX2 path
//! (or stays on the portable one) before any product, so that the op
//! takes the integer product even on a CPU that would run bf16 tiles
//! (`quantized_kernels.rs` tests those).

use kernelscope::cpu_simd::dot::{DotPath, force_dot_path};
use kernelscope::ops;
use kernelscope::ops::quantized::linear::{Activations, QuantizedLinear};
use kernelscope::profile::ProfileLevel;
use kernelscope::quant::QuantFormat;
use kernelscope::{Device, DeviceOptions};

mod common;
use common::quantized::{poisoned, random, random_matrix, read};

/// The CPU's chunk product with 8-bit activations (`matmul_<format>_q8`)
/// gives each row exactly what the mat-vec gives it alone: every input row
/// quantized once the same way, the same integer products per weight row.
/// Odd row counts, more rows than a task holds.
#[test]
fn cpu_int8_chunk_products_equal_the_mat_vec_row_by_row() {
    if DotPath::Avx2Fma.supported() {
        force_dot_path(DotPath::Avx2Fma).unwrap();
    }
    let cpu = Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
    let registry = ops::registry();
    for format in QuantFormat::ALL
        .into_iter()
        .filter(|format| format.int8_block().is_some())
    {
        let op = QuantizedLinear::new(&registry, &cpu, format, Activations::Int8).unwrap();
        for (n, blocks, rows) in [(37usize, 3usize, 5usize), (70, 8, 3)] {
            let m = random_matrix(format, n, blocks, 900 + n as u64);
            let weight = m.upload(&cpu);
            let x = random(n as u64 + 5, rows * m.k, 2.0);
            let out = poisoned(&cpu, rows * n);
            cpu.profiler().reset();
            let mut encoder = cpu.command_encoder();
            op.encode(
                &mut encoder,
                &weight,
                &cpu.buffer_from_slice(&x, &[rows, m.k]).unwrap(),
                &out,
            )
            .unwrap();
            encoder.commit_and_wait().unwrap();
            let kernel = format!("matmul_{}_q8", format.name());
            assert_eq!(&*cpu.profiler().dispatches()[0].kernel, kernel.as_str());
            let chunk = read(&out);
            for (r, row) in x.chunks(m.k).enumerate() {
                let single = poisoned(&cpu, n);
                let mut encoder = cpu.command_encoder();
                op.encode(
                    &mut encoder,
                    &weight,
                    &cpu.buffer_from_slice(row, &[m.k]).unwrap(),
                    &single,
                )
                .unwrap();
                encoder.commit_and_wait().unwrap();
                assert_eq!(&chunk[r * n..(r + 1) * n], &read(&single)[..], "{format} row {r}");
            }
        }
    }
}
