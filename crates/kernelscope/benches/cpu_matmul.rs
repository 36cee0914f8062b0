//! The CPU mat-mul's speed at the shapes a batched prefill gives it: 128
//! tokens through each projection of the `tiny` preset (hidden 128,
//! intermediate 352, 4 query and 2 key-value heads of 32, vocabulary 2048;
//! bf16 as `gen-model` writes it by default, and f32), and 128 tokens through
//! a 2048 × 2048 bf16 projection. Each run goes through the op, the encoder
//! and the CPU queue, as the engine would call it. Throughput is in flops
//! (2·m·n·k per product), so criterion's "elem/s" reads as flop/s.
//!
//! `cargo bench -p kernelscope --bench cpu_matmul`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use half::{bf16, f16};
use kernelscope::ops::matmul::MatMul;
use kernelscope::testing::random_f32;
use kernelscope::{Buffer, DType, Device};

/// Tokens per product: a prefill chunk.
const TOKENS: usize = 128;

/// `values` as a buffer of `dtype` with `shape`.
fn upload(device: &Device, dtype: DType, values: &[f32], shape: &[usize]) -> Buffer {
    match dtype {
        DType::F32 => device.buffer_from_slice(values, shape),
        DType::F16 => {
            let narrowed: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            device.buffer_from_slice(&narrowed, shape)
        }
        DType::BF16 => {
            let narrowed: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            device.buffer_from_slice(&narrowed, shape)
        }
        other => panic!("{other} is not a weight dtype"),
    }
    .unwrap()
}

fn bench_shapes(criterion: &mut Criterion) {
    let device = Device::cpu();
    let registry = kernelscope::ops::registry();
    let tiny = [
        ("q_proj", 128, 128),
        ("k_proj", 64, 128),
        ("o_proj", 128, 128),
        ("gate_proj", 352, 128),
        ("down_proj", 128, 352),
        ("lm_head", 2048, 128),
    ];
    let mut cases: Vec<(String, DType, usize, usize)> = Vec::new();
    for dtype in [DType::BF16, DType::F32] {
        for (name, n, k) in tiny {
            cases.push((format!("tiny_{name}_{dtype}"), dtype, n, k));
        }
    }
    cases.push(("square_2048_bf16".into(), DType::BF16, 2048, 2048));

    let mut group = criterion.benchmark_group("cpu_matmul_m128");
    for (name, dtype, n, k) in cases {
        let op = MatMul::new(&registry, &device, dtype).unwrap();
        let weight = upload(&device, dtype, &random_f32(1, n * k), &[n, k]);
        let x = upload(&device, dtype, &random_f32(2, TOKENS * k), &[TOKENS, k]);
        let out = device.alloc(DType::F32, &[TOKENS, n]).unwrap();
        group.throughput(Throughput::Elements(2 * (TOKENS * n * k) as u64));
        group.bench_function(name, |bencher| {
            bencher.iter(|| {
                let mut encoder = device.command_encoder();
                op.encode(&mut encoder, &weight, &x, &out).unwrap();
                encoder.commit_and_wait().unwrap();
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench_shapes
}
criterion_main!(benches);
