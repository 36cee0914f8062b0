//! Tests of splitting a launch into its phases by stamps: random stamps of
//! random kernels, reduced over their blocks, tile the launch, each
//! boundary is the statistic its phase calls for, the reduction's wrapping
//! sums give exact means, malformed stamps split nothing, and a dispatch's
//! records read its launch's stamps through the plan. The kernel's own slot
//! layout is runtime::stamps' to test.

use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::profile::{DispatchMeta, InKernelPhase, Role};
use crate::rng::SplitMix64;

/// A launch's record: a feed-forward kernel of layer 3, from `start_ns` to `end_ns`.
fn launch(start_ns: u64, end_ns: u64) -> DispatchRecord {
    DispatchRecord {
        label: Arc::from("decode"),
        submission: 7,
        index: 5,
        kernel: Arc::from("feed_forward_q4_k_q6_k"),
        format: Some(Arc::from("q4_k")),
        op_kind: OpKind::MatVec,
        scope: Arc::from("layer.3.mlp"),
        stream: 2,
        token: Some(9),
        start_ns,
        end_ns,
        bytes: 100,
        bytes_written: 10,
        flops: 50,
        roles: Roles::of(&[Role::MlpNorm, Role::GateUp, Role::Down]),
        measured_bytes: 123,
        in_kernel: None,
    }
}

/// `count` phases, each ending at a barrier or not at random, of random costs.
fn random_phases(rng: &mut SplitMix64, count: usize) -> Vec<PhaseMeta> {
    (0..count)
        .map(|position| PhaseMeta {
            name: Arc::from(format!("phase {position}")),
            op_kind: [OpKind::RmsNorm, OpKind::MatVec, OpKind::Other][position % 3],
            roles: Roles::one(Role::ALL[position % Role::ALL.len()]),
            bytes: 1 + rng.below(1 << 20),
            bytes_written: rng.below(64),
            flops: rng.below(1 << 20),
            ends_at_grid_barrier: rng.below(2) == 1,
        })
        .collect()
}

/// Random stamps of `blocks` blocks over `count` phases on a timer far from
/// the profiler's: each block's own start and non-decreasing phase ends.
fn random_stamps(rng: &mut SplitMix64, blocks: u32, count: usize) -> Vec<u64> {
    let epoch = 1 + rng.below(1 << 50);
    let mut stamps = Vec::new();
    for _ in 0..blocks {
        let mut time = epoch + rng.below(5_000);
        stamps.push(time);
        for _ in 0..count {
            // Some phases take no time at all on some blocks.
            time += rng.below(4) * rng.below(20_000);
            stamps.push(time);
        }
    }
    stamps
}

/// The mean as the module defines it (rounded down), in wide arithmetic.
fn reference_mean(values: &[u64]) -> u64 {
    let sum: u128 = values.iter().map(|&value| u128::from(value)).sum();
    (sum / values.len() as u128) as u64
}

/// Per-block stamps reduced, which must be a launch's.
fn reduced(stamps: &[u64], phases: usize) -> LaunchStamps {
    LaunchStamps::of_blocks(stamps, phases).expect("well-formed stamps")
}

#[test]
fn random_stamps_split_a_launch_into_phases_that_tile_it_at_the_boundaries_their_phases_call_for() {
    let mut rng = SplitMix64::new(0x5eed);
    for case in 0..500 {
        let count = 1 + rng.below(6) as usize;
        let blocks = 1 + rng.below(40) as u32;
        let phases = random_phases(&mut rng, count);
        let stamps = random_stamps(&mut rng, blocks, count);
        let start = rng.below(1 << 40);
        // Sometimes the dispatch clock measured less than the stamps span:
        // boundaries are then clamped, and still tile the launch.
        let end = start + rng.below(150_000);
        let record = launch(start, end);
        let split = split_into_phases(&record, &phases, &reduced(&stamps, count), blocks)
            .expect("well-formed stamps");
        assert_eq!(split.len(), count, "case {case}");
        assert_eq!(split[0].start_ns, start);
        assert_eq!(split[count - 1].end_ns, end);
        let total: u64 = split.iter().map(DispatchRecord::duration_ns).sum();
        assert_eq!(
            total,
            record.duration_ns(),
            "case {case}: the phases add up to the launch"
        );
        let rows: Vec<&[u64]> = stamps.chunks(count + 1).collect();
        let t0 = rows.iter().map(|row| row[0]).min().expect("a block");
        for (position, (phase, meta)) in split.iter().zip(&phases).enumerate() {
            assert!(phase.start_ns <= phase.end_ns, "case {case}: ordered");
            if position > 0 {
                assert_eq!(phase.start_ns, split[position - 1].end_ns, "case {case}: no gap");
            }
            let ends: Vec<u64> = rows.iter().map(|row| row[position + 1]).collect();
            let latest = *ends.iter().max().expect("a block");
            if position + 1 < count {
                let statistic = if meta.ends_at_grid_barrier {
                    latest
                } else {
                    reference_mean(&ends)
                };
                let expected = (start + (statistic - t0)).clamp(phase.start_ns, end);
                assert_eq!(phase.end_ns, expected, "case {case}, phase {position}");
            }
            let waited = latest - reference_mean(&ends);
            let in_kernel = phase.in_kernel.as_ref().expect("a phase");
            // The last phase's end is the launch's: no stamps, no waiting.
            let last = position + 1 == count;
            let expected_waiting = if meta.ends_at_grid_barrier && !last {
                waited
            } else {
                0
            };
            assert_eq!(
                in_kernel.waiting_ns, expected_waiting,
                "case {case}, phase {position}"
            );
            assert_eq!(
                (in_kernel.index, in_kernel.phases, &*in_kernel.phase),
                (position as u32, count as u32, &*meta.name)
            );
            assert_eq!(
                (
                    phase.op_kind,
                    phase.roles,
                    phase.bytes,
                    phase.bytes_written,
                    phase.flops
                ),
                (
                    meta.op_kind,
                    meta.roles,
                    meta.bytes,
                    meta.bytes_written,
                    meta.flops
                )
            );
            assert_eq!(phase.measured_bytes, 0);
            assert_eq!(phase.is_launch(), position == 0);
            let launch_fields = (
                &phase.label,
                phase.submission,
                phase.index,
                &phase.kernel,
                &phase.format,
                &phase.scope,
                phase.stream,
                phase.token,
            );
            assert_eq!(
                launch_fields,
                (
                    &record.label,
                    record.submission,
                    record.index,
                    &record.kernel,
                    &record.format,
                    &record.scope,
                    record.stream,
                    record.token,
                ),
                "copied from the launch, its index shared"
            );
        }
    }
}

#[test]
fn a_worked_launch_of_two_blocks_splits_where_the_last_arrival_releases_each_barrier() {
    let phases: Vec<PhaseMeta> = [("norm", true), ("gate/up", false), ("down", true)]
        .into_iter()
        .map(|(name, barrier)| PhaseMeta {
            name: Arc::from(name),
            op_kind: OpKind::MatVec,
            roles: Roles::NONE,
            bytes: 8,
            bytes_written: 0,
            flops: 0,
            ends_at_grid_barrier: barrier,
        })
        .collect();
    // Block 1 starts 100 ns after block 0; norm's barrier opens 1_500 ns
    // after the first start, at block 1's arrival (block 0 waited 500 ns of
    // it: 250 the mean), gate/up ends at the mean of 3_000 and 4_000,
    // down at the record's end (no stamps: its barrier's wait is unknown).
    let stamps = [1_000, 2_000, 3_000, 9_000, 1_100, 2_500, 4_000, 9_400];
    let split =
        split_into_phases(&launch(10_000, 20_000), &phases, &reduced(&stamps, 3), 2).expect("a launch");
    let spans: Vec<(u64, u64, u64)> = split
        .iter()
        .map(|phase| {
            let waiting = phase
                .in_kernel
                .as_ref()
                .map_or(u64::MAX, |phase| phase.waiting_ns);
            (phase.start_ns, phase.end_ns, waiting)
        })
        .collect();
    assert_eq!(
        spans,
        [(10_000, 11_500, 250), (11_500, 12_500, 0), (12_500, 20_000, 0)]
    );
}

#[test]
fn sums_that_wrap_past_two_to_the_64_still_give_the_exact_mean() {
    let mut rng = SplitMix64::new(0x77);
    for _ in 0..100 {
        let blocks = 2 + rng.below(500) as u32;
        // A timer this far from zero wraps u64 after 16 or so blocks' sums.
        let epoch = u64::MAX / 16 + rng.below(1 << 40);
        let mut stamps = Vec::new();
        for _ in 0..blocks {
            let start = epoch + rng.below(5_000);
            let end = start + rng.below(30_000);
            stamps.extend([start, end, end + rng.below(1_000)]);
        }
        let launch = reduced(&stamps, 2);
        let ends: Vec<u64> = stamps.chunks(3).map(|row| row[1]).collect();
        assert_eq!(launch.mean_end(0), reference_mean(&ends));
        assert_eq!(launch.latest_ends, vec![*ends.iter().max().expect("a block")]);
        assert_eq!(
            launch.earliest_start,
            stamps.chunks(3).map(|row| row[0]).min().expect("a block")
        );
        assert_eq!(launch.blocks, blocks);
    }
}

#[test]
fn stamps_that_cannot_be_a_launchs_split_nothing() {
    let mut rng = SplitMix64::new(11);
    let phases = random_phases(&mut rng, 3);
    let good = random_stamps(&mut rng, 4, 3);
    let record = launch(100, 100_000);
    let launch_stamps = reduced(&good, 3);
    assert!(split_into_phases(&record, &phases, &launch_stamps, 4).is_some());
    // Per-block stamps a kernel could not have written reduce to nothing.
    assert_eq!(LaunchStamps::of_blocks(&good[1..], 3), None, "one short");
    assert_eq!(LaunchStamps::of_blocks(&[], 3), None, "no blocks");
    assert_eq!(LaunchStamps::of_blocks(&good[..4], 0), None, "no phases");
    for position in 0..good.len() {
        let mut zero = good.clone();
        zero[position] = 0;
        assert_eq!(LaunchStamps::of_blocks(&zero, 3), None, "a zero at {position}");
    }
    let mut backwards = good.clone();
    backwards.swap(5, 6);
    backwards[6] = backwards[5].saturating_sub(1);
    assert_eq!(
        LaunchStamps::of_blocks(&backwards, 3),
        None,
        "a block's stamps go back"
    );
    // Reduced stamps that no launch of this kernel could leave.
    assert_eq!(
        split_into_phases(&record, &phases, &launch_stamps, 3),
        None,
        "another block count"
    );
    assert_eq!(
        split_into_phases(&record, &phases[..2], &launch_stamps, 4),
        None,
        "another phase count"
    );
    let broken = |change: &dyn Fn(&mut LaunchStamps)| {
        let mut stamps = launch_stamps.clone();
        change(&mut stamps);
        split_into_phases(&record, &phases, &stamps, 4)
    };
    assert_eq!(broken(&|stamps| stamps.earliest_start = 0), None, "no start");
    assert_eq!(
        broken(&|stamps| stamps.latest_ends[1] = stamps.latest_ends[0] - 1),
        None,
        "the latest end goes back"
    );
    assert_eq!(
        broken(&|stamps| stamps.latest_ends[0] = stamps.earliest_start - 1),
        None,
        "an end before the start"
    );
    assert_eq!(
        broken(&|stamps| stamps.end_sums[1] = stamps.end_sums[1].wrapping_add(1 << 40)),
        None,
        "a sum more than every block's latest end"
    );
    assert_eq!(
        broken(&|stamps| stamps.end_sums[1] = stamps.end_sums[0].wrapping_sub(4)),
        None,
        "the mean end goes back"
    );
}

/// Stamps kept by launch number, as a ring the kernel writes would hold them.
#[derive(Debug, Default)]
struct KeptStamps(HashMap<u64, LaunchStamps>);

impl StampSource for KeptStamps {
    fn read(&self, launch: u64) -> Option<LaunchStamps> {
        self.0.get(&launch).cloned()
    }
}

#[test]
fn a_dispatch_reads_its_launchs_stamps_and_keeps_one_record_where_they_are_gone() {
    let mut rng = SplitMix64::new(29);
    let phases = random_phases(&mut rng, 4);
    let stamps = reduced(&random_stamps(&mut rng, 8, 4), 4);
    let source = KeptStamps(HashMap::from([(1, stamps.clone())]));
    let plan = Arc::new(PhasePlan::new(phases.clone(), 8, Arc::new(source)));
    assert_eq!(
        (plan.next_launch(), plan.next_launch(), plan.next_launch()),
        (0, 1, 2)
    );
    let whole = launch(1_000, 90_000);
    let mut meta = DispatchMeta {
        kernel: whole.kernel.clone(),
        format: whole.format.clone(),
        op_kind: whole.op_kind,
        scope: whole.scope.clone(),
        bytes: whole.bytes,
        bytes_written: whole.bytes_written,
        flops: whole.flops,
        roles: whole.roles,
        per_position: None,
        in_kernel: None,
    };
    let records = |meta: &DispatchMeta| meta.records(&whole.label, 7, 5, Some(9), 1_000, 90_000);
    let one = records(&meta);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].in_kernel, None);
    assert_eq!(one[0], meta.record(&whole.label, 7, 5, Some(9), 1_000, 90_000));
    meta.in_kernel = Some(InKernelLaunch {
        plan: plan.clone(),
        launch: 1,
    });
    let expected = meta.record(&whole.label, 7, 5, Some(9), 1_000, 90_000);
    assert_eq!(
        records(&meta),
        split_into_phases(&expected, &phases, &stamps, 8).expect("a launch")
    );
    meta.in_kernel = Some(InKernelLaunch { plan, launch: 2 });
    assert_eq!(
        records(&meta),
        one,
        "launch 2's stamps are gone: the launch stays whole"
    );
}

#[test]
fn a_phase_record_reads_back_from_json_and_a_record_without_one_still_loads() {
    let mut record = launch(5, 50);
    let plain = serde_json::to_string(&record).expect("serialisable");
    assert!(
        !plain.contains("in_kernel"),
        "a whole launch writes nothing new: {plain}"
    );
    let read: DispatchRecord = serde_json::from_str(&plain).expect("reads");
    assert_eq!(read, record);
    record.in_kernel = Some(InKernelPhase {
        phase: Arc::from("gate/up"),
        index: 1,
        phases: 4,
        waiting_ns: 321,
    });
    let text = serde_json::to_string(&record).expect("serialisable");
    assert!(text.contains(r#""in_kernel":{"phase":"gate/up","index":1,"phases":4,"waiting_ns":321}"#));
    assert_eq!(
        serde_json::from_str::<DispatchRecord>(&text).expect("reads"),
        record
    );
    assert_eq!(record.kernel_and_phase(), "feed_forward_q4_k_q6_k · gate/up");
    assert!(!record.is_launch());
}
