//! A GEMM run by a library (cuBLASLt on CUDA; our own reference on the
//! CPU) is profiled like our kernels: its kernels appear as dispatch
//! records under the op's label, scope and op kind, timed in eager
//! submissions and inside graph replays, with the op's declared flops
//! counted once, and the kernel dispatched after it still lines up.

use kernelscope::ops::add::Add;
use kernelscope::ops::matmul::MatMul;
use kernelscope::profile::{DispatchRecord, DispatchTiming, ProfileLevel, TimingMechanism};
use kernelscope::testing::{Backend, random_f32};
use kernelscope::{Buffer, CommandEncoder, DType, Device, DeviceOptions, OpKind};

const M: usize = 48;
const N: usize = 96;
const K: usize = 160;

struct Operands {
    weight: Buffer,
    x: Buffer,
    out: Buffer,
    residual: Buffer,
}

fn operands(device: &Device) -> Operands {
    Operands {
        weight: device.buffer_from_slice(&random_f32(11, N * K), &[N, K]).unwrap(),
        x: device.buffer_from_slice(&random_f32(12, M * K), &[M, K]).unwrap(),
        out: device.alloc(DType::F32, &[M * N]).unwrap(),
        residual: device
            .buffer_from_slice(&random_f32(13, M * N), &[M * N])
            .unwrap(),
    }
}

/// The GEMM, then one kernel of ours reading its output.
fn encode(encoder: &mut CommandEncoder, device: &Device, operands: &Operands) {
    let registry = kernelscope::ops::registry();
    let matmul = MatMul::new(&registry, device, DType::F32).unwrap();
    let add = Add::new(&registry, device, DType::F32).unwrap();
    encoder.set_scope("layer.0.attn");
    matmul
        .encode(encoder, &operands.weight, &operands.x, &operands.out)
        .unwrap();
    add.encode(encoder, &operands.residual, &operands.out).unwrap();
}

fn uses_cupti(device: &Device) -> bool {
    matches!(
        device.profiler().dispatch_timing(),
        DispatchTiming::Supported { method } if method.mechanism == TimingMechanism::Cupti
    )
}

/// One submission's records: the GEMM's come first, each under the op's
/// kind and scope, with the flops declared once; the add follows.
fn check_submission(device: &Device, records: &[DispatchRecord]) {
    let (gemm, rest): (Vec<_>, Vec<_>) = records
        .iter()
        .partition(|record| record.op_kind == OpKind::MatMul);
    assert!(!gemm.is_empty(), "the GEMM is in the profile: {records:?}");
    assert_eq!(rest.len(), 1, "the add follows it: {records:?}");
    assert_eq!(rest[0].kernel.as_ref(), "add_f32");
    assert!(
        gemm.iter().all(|record| record.index < rest[0].index),
        "the GEMM's kernels run before the add"
    );
    let indices: Vec<u32> = records.iter().map(|record| record.index).collect();
    assert_eq!(indices, (0..records.len() as u32).collect::<Vec<_>>());
    for record in &gemm {
        assert_eq!(record.scope.as_ref(), "layer.0.attn");
        assert!(record.end_ns >= record.start_ns);
    }
    let flops: u64 = gemm.iter().map(|record| record.flops).sum();
    assert_eq!(flops, 2 * (M * N * K) as u64, "the op's flops, counted once");
    if uses_cupti(device) {
        // The library's own kernels, named as CUPTI names them.
        assert!(
            gemm.iter().all(|record| record.kernel.as_ref() != "matmul_f32"),
            "library kernels keep their names: {gemm:?}"
        );
        assert!(gemm.iter().all(|record| record.end_ns > record.start_ns));
    } else {
        assert_eq!(gemm.len(), 1);
        assert_eq!(gemm[0].kernel.as_ref(), "matmul_f32");
    }
}

fn library_gemm_is_profiled_in_eager_submissions(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let operands = operands(&device);
    for _ in 0..3 {
        let mut encoder = device.command_encoder();
        encode(&mut encoder, &device, &operands);
        encoder.commit_and_wait_labeled("gemm.eager").unwrap();
    }
    let groups = device.profiler().dispatches_by_label();
    assert_eq!(groups.len(), 1);
    let records = &groups[0].1;
    let submissions: Vec<u64> = device
        .profiler()
        .submissions()
        .iter()
        .map(|s| s.submission)
        .collect();
    assert_eq!(submissions.len(), 3);
    for submission in &submissions {
        let mine: Vec<DispatchRecord> = records
            .iter()
            .filter(|record| record.submission == *submission)
            .cloned()
            .collect();
        check_submission(&device, &mine);
    }
    let checks = kernelscope::profile::cross_check(&device.profile(device.conditions("gemm", None)));
    assert_eq!(checks.len(), 1);
    assert!(!checks[0].flagged, "the clocks agree: {:?}", checks[0]);
    assert_eq!(
        checks[0].submissions, 3,
        "every record of every submission arrived"
    );
}

fn library_gemm_is_profiled_inside_graph_replays(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
        return;
    };
    let operands = operands(&device);
    let mut encoder = device.command_encoder();
    encoder.begin_capture().unwrap();
    encode(&mut encoder, &device, &operands);
    let graph = encoder.end_capture().unwrap();
    for _ in 0..4 {
        encoder.replay(&graph).unwrap();
        encoder.commit_and_wait_labeled("gemm.graph").unwrap();
    }
    let submissions = device.profiler().submissions();
    assert_eq!(submissions.len(), 4);
    let groups = device.profiler().dispatches_by_label();
    if !device.capabilities().dispatch_timing_in_graphs {
        // Where nothing times kernels inside a graph (CUDA without CUPTI, as
        // under compute-sanitizer), replays are timed whole.
        assert!(groups.is_empty(), "no dispatch records from replays: {groups:?}");
        return;
    }
    let records = &groups[0].1;
    let per_submission = |submission: u64| -> Vec<DispatchRecord> {
        records
            .iter()
            .filter(|record| record.submission == submission)
            .cloned()
            .collect()
    };
    let first = per_submission(submissions[0].submission);
    for submission in &submissions {
        let mine = per_submission(submission.submission);
        assert_eq!(
            mine.len() as u32,
            submission.dispatches,
            "all records of the replay"
        );
        let names = |records: &[DispatchRecord]| records.iter().map(|r| r.kernel.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&mine),
            names(&first),
            "every replay launches the same kernels"
        );
        check_submission(&device, &mine);
    }
    let checks = kernelscope::profile::cross_check(&device.profile(device.conditions("gemm", None)));
    assert_eq!(checks[0].submissions, 4);
    assert!(!checks[0].flagged, "the clocks agree: {:?}", checks[0]);
}

kernelscope::device_tests!(
    library_gemm_is_profiled_in_eager_submissions,
    library_gemm_is_profiled_inside_graph_replays,
);
