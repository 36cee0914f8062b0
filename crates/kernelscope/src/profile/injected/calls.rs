//! A process's API calls made ready to place its kernels: the driver calls
//! a runtime call made inside itself dropped (CUPTI's activity records
//! show both; the kernel carries the runtime call's correlation id), and
//! calls recorded without their NVTX range ([`RANGE_BY_TIME`]) given the
//! innermost push/pop range open on their thread when they started.

use std::collections::HashMap;

use kernelscope_trace::{ApiCall, NvtxRange, RANGE_BY_TIME};

/// `ApiCall::domain` of a driver call.
const DRIVER_DOMAIN: u32 = 1;

/// `calls` by correlation id (the first of an id wins), each with its range
/// known; `ranges` are the process's closed NVTX ranges by id.
pub(super) fn settle(
    mut calls: Vec<ApiCall>,
    ranges: &HashMap<u64, (NvtxRange, String)>,
) -> HashMap<u32, ApiCall> {
    drop_nested_driver_calls(&mut calls);
    let stacks = ThreadStacks::new(ranges.values().map(|(range, _)| range));
    let mut settled = HashMap::with_capacity(calls.len());
    for mut call in calls {
        if call.range == RANGE_BY_TIME {
            call.range = stacks.innermost(call.thread, call.start_ns);
        }
        settled.entry(call.correlation).or_insert(call);
    }
    settled
}

/// Removes each driver call made inside a runtime call of its thread.
fn drop_nested_driver_calls(calls: &mut Vec<ApiCall>) {
    let mut runtime: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for call in calls.iter().filter(|call| call.domain != DRIVER_DOMAIN) {
        runtime
            .entry(call.thread)
            .or_default()
            .push((call.start_ns, call.end_ns));
    }
    if runtime.is_empty() {
        return;
    }
    for spans in runtime.values_mut() {
        spans.sort_unstable();
    }
    calls.retain(|call| {
        if call.domain != DRIVER_DOMAIN {
            return true;
        }
        let Some(spans) = runtime.get(&call.thread) else {
            return true;
        };
        // Runtime calls of one thread do not overlap: only the last to
        // start before this one can hold it.
        let before = spans.partition_point(|&(start, _)| start <= call.start_ns);
        !(before > 0 && spans[before - 1].1 >= call.end_ns)
    });
}

/// Each thread's push/pop ranges, by start, with the range each was pushed inside.
struct ThreadStacks {
    /// (start, id) of each thread's ranges, by start.
    starts: HashMap<u64, Vec<(u64, u64)>>,
    /// Each range's end and parent.
    ends: HashMap<u64, (u64, u64)>,
}

impl ThreadStacks {
    fn new<'a>(ranges: impl Iterator<Item = &'a NvtxRange>) -> ThreadStacks {
        let mut stacks = ThreadStacks {
            starts: HashMap::new(),
            ends: HashMap::new(),
        };
        for range in ranges.filter(|range| range.stacked != 0) {
            stacks
                .starts
                .entry(range.thread)
                .or_default()
                .push((range.start_ns, range.id));
            stacks.ends.insert(range.id, (range.end_ns, range.parent));
        }
        for starts in stacks.starts.values_mut() {
            starts.sort_unstable();
        }
        stacks
    }

    /// The innermost range open on `thread` at `at_ns` (0: none). Ranges of
    /// one thread nest, so a range open then is the last to start before
    /// it or one that range was pushed inside.
    fn innermost(&self, thread: u64, at_ns: u64) -> u64 {
        let Some(starts) = self.starts.get(&thread) else {
            return 0;
        };
        let before = starts.partition_point(|&(start, _)| start <= at_ns);
        let mut candidate = if before == 0 { 0 } else { starts[before - 1].1 };
        while let Some(&(end_ns, parent)) = self.ends.get(&candidate) {
            if end_ns > at_ns {
                return candidate;
            }
            candidate = parent;
        }
        // A range never closed is never written: what was inside it is in none.
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn range(
        id: u64,
        parent: u64,
        thread: u64,
        start_ns: u64,
        end_ns: u64,
        stacked: u32,
    ) -> (u64, (NvtxRange, String)) {
        let range = NvtxRange {
            start_ns,
            end_ns,
            thread,
            id,
            parent,
            stacked,
            ..NvtxRange::default()
        };
        (id, (range, String::new()))
    }

    fn call(correlation: u32, thread: u64, start_ns: u64, end_ns: u64, domain: u32) -> ApiCall {
        ApiCall {
            start_ns,
            end_ns,
            thread,
            range: RANGE_BY_TIME,
            correlation,
            domain,
            ..ApiCall::default()
        }
    }

    /// Random nested ranges on two threads, calls at random times: each call
    /// gets the range a stack walked through time would have on top.
    #[test]
    fn calls_get_the_innermost_range_open_on_their_thread() {
        let mut random = SplitMix64::new(0x5eed_ca11);
        let mut ranges = HashMap::new();
        let mut expected_tops: Vec<(u64, u64, u64, u64)> = Vec::new(); // thread, from, to, top
        let mut next_id = 1u64;
        for thread in [11u64, 12] {
            // A stack walked forward in time, pushing and popping at random.
            let mut now = 1_000u64;
            let mut stack: Vec<(u64, u64)> = Vec::new(); // (id, start)
            for _ in 0..400 {
                let top = stack.last().map_or(0, |&(id, _)| id);
                let step = 10 + random.next_u64() % 90;
                expected_tops.push((thread, now, now + step, top));
                now += step;
                if stack.len() < 4 && (stack.is_empty() || random.next_u64().is_multiple_of(2)) {
                    stack.push((next_id, now));
                    next_id += 1;
                } else if let Some((id, start)) = stack.pop() {
                    let parent = stack.last().map_or(0, |&(id, _)| id);
                    ranges.extend([range(id, parent, thread, start, now, 1)]);
                }
            }
            while let Some((id, start)) = stack.pop() {
                let parent = stack.last().map_or(0, |&(id, _)| id);
                ranges.extend([range(id, parent, thread, start, now, 1)]);
            }
        }
        // A start/end range over everything is nobody's stack.
        ranges.extend([range(next_id, 0, 11, 0, u64::MAX / 2, 0)]);
        let mut calls = Vec::new();
        let mut wanted = HashMap::new();
        for (index, &(thread, from, to, top)) in expected_tops.iter().enumerate() {
            // Strictly inside the span, where no push or pop happens.
            let at = from + 1 + random.next_u64() % (to - from - 2);
            calls.push(call(index as u32, thread, at, at, 0));
            wanted.insert(index as u32, top);
        }
        let settled = settle(calls, &ranges);
        assert_eq!(settled.len(), wanted.len());
        assert!(
            wanted.values().filter(|&&top| top != 0).count() > 300,
            "the walk opened ranges"
        );
        for (correlation, top) in wanted {
            assert_eq!(settled[&correlation].range, top, "call {correlation}");
        }
    }

    #[test]
    fn a_driver_call_inside_a_runtime_call_of_its_thread_is_dropped() {
        let calls = vec![
            call(1, 7, 100, 200, 0),
            call(2, 7, 120, 180, DRIVER_DOMAIN), // inside 1
            call(3, 8, 120, 180, DRIVER_DOMAIN), // same time, other thread
            call(4, 7, 300, 400, DRIVER_DOMAIN), // a driver call of its own
            call(5, 7, 190, 250, DRIVER_DOMAIN), // overlaps 1's end: not inside
        ];
        let settled = settle(calls, &HashMap::new());
        let mut kept: Vec<u32> = settled.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, [1, 3, 4, 5]);
    }

    #[test]
    fn a_known_range_is_kept_and_a_range_never_closed_gives_none() {
        let ranges: HashMap<_, _> = [range(2, 1, 7, 100, 500, 1)].into_iter().collect();
        let known = ApiCall {
            range: 9,
            ..call(1, 7, 200, 210, 0)
        };
        // Range 1 (the parent) was never closed, so never written.
        let settled = settle(
            vec![known, call(2, 7, 600, 610, 0), call(3, 7, 300, 310, 0)],
            &ranges,
        );
        assert_eq!(settled[&1].range, 9);
        assert_eq!(settled[&2].range, 0);
        assert_eq!(settled[&3].range, 2);
    }
}
