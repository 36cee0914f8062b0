//! MemRanges: a table of conflict and no-conflict cases (including partial
//! overlaps and slice views of one allocation), a property test against a
//! byte-by-byte oracle, and the encoder placing barriers from it.

use kernelscope::runtime::{MemRange, MemRanges};
use kernelscope::{Access, DType, Device, DeviceOptions, Dispatch, KernelRegistry};
use proptest::prelude::*;

fn range(start: usize, end: usize) -> MemRange {
    MemRange::new(start, end)
}

/// (case, group reads, group writes, new reads, new writes, conflicts?)
type Case = (
    &'static str,
    Vec<MemRange>,
    Vec<MemRange>,
    Vec<MemRange>,
    Vec<MemRange>,
    bool,
);

#[test]
fn conflict_table() {
    let cases: Vec<Case> = vec![
        (
            "read after write, same range",
            vec![],
            vec![range(0, 64)],
            vec![range(0, 64)],
            vec![],
            true,
        ),
        (
            "read after write, partial overlap",
            vec![],
            vec![range(0, 64)],
            vec![range(60, 100)],
            vec![],
            true,
        ),
        (
            "read after write, one byte inside",
            vec![],
            vec![range(10, 20)],
            vec![range(19, 20)],
            vec![],
            true,
        ),
        (
            "read after write, touching ends",
            vec![],
            vec![range(0, 64)],
            vec![range(64, 128)],
            vec![],
            false,
        ),
        (
            "write after read",
            vec![range(0, 64)],
            vec![],
            vec![],
            vec![range(32, 48)],
            true,
        ),
        (
            "write after write",
            vec![],
            vec![range(0, 64)],
            vec![],
            vec![range(63, 65)],
            true,
        ),
        (
            "read after read",
            vec![range(0, 64)],
            vec![],
            vec![range(0, 64)],
            vec![],
            false,
        ),
        (
            "write to a range only read elsewhere",
            vec![range(0, 64)],
            vec![],
            vec![],
            vec![range(64, 80)],
            false,
        ),
        (
            "disjoint writes",
            vec![],
            vec![range(0, 64)],
            vec![],
            vec![range(128, 192)],
            false,
        ),
        (
            "empty new range",
            vec![],
            vec![range(0, 64)],
            vec![range(10, 10)],
            vec![range(20, 20)],
            false,
        ),
        (
            "empty group",
            vec![],
            vec![],
            vec![range(0, 64)],
            vec![range(0, 64)],
            false,
        ),
        (
            "second of several reads conflicts",
            vec![],
            vec![range(100, 200)],
            vec![range(0, 10), range(150, 160)],
            vec![],
            true,
        ),
    ];
    for (name, group_reads, group_writes, reads, writes, expected) in cases {
        let mut tracker = MemRanges::new();
        tracker.add(&group_reads, &group_writes);
        assert_eq!(tracker.conflicts(&reads, &writes), expected, "case: {name}");
    }
    let mut tracker = MemRanges::new();
    tracker.add(&[], &[range(0, 8)]);
    tracker.clear();
    assert!(tracker.is_empty());
    assert!(
        !tracker.conflicts(&[range(0, 8)], &[range(0, 8)]),
        "a barrier clears the group"
    );
}

fn byte_set(ranges: &[MemRange]) -> std::collections::HashSet<usize> {
    ranges.iter().flat_map(|r| r.start..r.end).collect()
}

fn arbitrary_ranges() -> impl Strategy<Value = Vec<MemRange>> {
    prop::collection::vec(
        (0usize..64, 0usize..16).prop_map(|(start, len)| range(start, start + len)),
        0..4,
    )
}

proptest! {
    /// Conflict iff a new read shares a byte with a group write, or a new
    /// write shares a byte with any group access: checked byte by byte.
    #[test]
    fn conflicts_match_a_byte_level_oracle(
        group_reads in arbitrary_ranges(),
        group_writes in arbitrary_ranges(),
        reads in arbitrary_ranges(),
        writes in arbitrary_ranges(),
    ) {
        let mut tracker = MemRanges::new();
        tracker.add(&group_reads, &group_writes);
        let written = byte_set(&group_writes);
        let touched: std::collections::HashSet<usize> = written.union(&byte_set(&group_reads)).copied().collect();
        let oracle = !byte_set(&reads).is_disjoint(&written) || !byte_set(&writes).is_disjoint(&touched);
        prop_assert_eq!(tracker.conflicts(&reads, &writes), oracle);
    }
}

fn noop_registry() -> KernelRegistry {
    let mut registry = KernelRegistry::new();
    registry.register_cpu("touch", |_| Ok(()));
    registry
}

/// Slice views of one allocation conflict only where their bytes overlap.
#[test]
fn slice_views_conflict_by_their_bytes() {
    let device = Device::cpu_with(DeviceOptions::new());
    let kernel = noop_registry().kernel(&device, "touch").unwrap();
    let whole = device.alloc(DType::F32, &[100]).unwrap();
    let first = whole.slice(0, 50).unwrap();
    let second = whole.slice(50, 50).unwrap();
    let straddling = whole.slice(40, 20).unwrap();
    assert_eq!(second.byte_offset(), 200);
    assert_eq!(second.address_range().start - whole.address_range().start, 200);

    // (first dispatch writes, second dispatch accesses, expect a barrier?)
    let cases = [
        (&first, &second, Access::Read, false),
        (&first, &second, Access::Write, false),
        (&first, &straddling, Access::Read, true),
        (&second, &straddling, Access::Write, true),
        (&first, &whole, Access::Read, true),
        (&first, &first, Access::Read, true),
    ];
    for (index, (written, accessed, access, expect_barrier)) in cases.into_iter().enumerate() {
        let before = device.profiler().counters().snapshot().auto_barriers;
        let mut encoder = device.command_encoder();
        encoder.dispatch(Dispatch::new(&kernel).write(written)).unwrap();
        encoder
            .dispatch(Dispatch::new(&kernel).buffer(accessed, access))
            .unwrap();
        encoder.commit().unwrap();
        let placed = device.profiler().counters().snapshot().auto_barriers - before;
        assert_eq!(placed == 1, expect_barrier, "case {index}");
    }
}

#[test]
fn auto_barriers_can_be_turned_off() {
    let device = Device::cpu();
    let kernel = noop_registry().kernel(&device, "touch").unwrap();
    let buffer = device.alloc(DType::F32, &[4]).unwrap();
    let mut encoder = device.command_encoder();
    encoder.set_auto_barriers(false);
    encoder.dispatch(Dispatch::new(&kernel).write(&buffer)).unwrap();
    encoder.dispatch(Dispatch::new(&kernel).read(&buffer)).unwrap();
    encoder.commit().unwrap();
    let counters = device.profiler().counters().snapshot();
    assert_eq!(
        (counters.barriers, counters.auto_barriers, counters.concurrent),
        (0, 0, 1)
    );
}
