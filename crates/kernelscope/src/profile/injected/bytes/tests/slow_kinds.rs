//! The fit that finds slow kinds and the split that weights them down, on
//! a made-up replayed decode whose mat-vecs ramp up and drain.

use super::*;

/// A kernel's name and its true (read, written) bytes.
type Truth = (u32, f64, f64);

/// Per name: measured (read, written) and true (read, written) bytes.
type ByName = std::collections::BTreeMap<u32, ((f64, f64), (f64, f64))>;

/// One kernel of a made-up decode layer: its name, length (ns) and steady
/// read and write rates (bytes a ns).
struct Node {
    name: u32,
    length: u64,
    rates: (f64, f64),
}

/// A 1B decode's layer as an H100 runs it: mat-vecs of 6-25 µs streaming
/// at about 3 bytes a ns (names 0, 4, 5; `matvec_add`, name 4, runs twice)
/// between norm, rope and attention kernels of 1.5-3 µs that move little.
fn decode_layer() -> [Node; 7] {
    let node = |name, length, read, write| Node {
        name,
        length,
        rates: (read, write),
    };
    [
        node(0, 8_000, 3.0, 0.01),
        node(1, 1_500, 0.02, 0.05),
        node(2, 3_000, 0.03, 0.01),
        node(3, 2_000, 0.02, 0.02),
        node(4, 5_700, 2.9, 0.02),
        node(5, 25_000, 3.1, 0.01),
        node(4, 15_500, 3.0, 0.01),
    ]
}

/// Bytes a unit of `length` ns streaming at `rate` moves from `from` ns
/// after its start to `to`: the rate is
/// halved in its first and last microsecond (or quarter, if shorter), as a
/// mat-vec's blocks ramp up and drain.
fn ramped_bytes(length: u64, rate: f64, from: u64, to: u64) -> f64 {
    let ramp = (length / 4).min(1_000);
    let full = to.saturating_sub(from) as f64;
    let in_ramps = to.min(ramp).saturating_sub(from) + to.saturating_sub(from.max(length - ramp));
    rate * (full - 0.5 * in_ramps as f64)
}

/// Kernels of a repeated graph (`tokens` replays of `layers` decode layers,
/// each kernel's length and rates jittered by up to 10 % and 5 %, gaps of
/// 0.3-1.5 µs between kernels and 20-60 µs between replays), their
/// samples (`interval` ±2 %, from a random phase), and each kernel's name
/// and (read, write) bytes.
fn replayed_graph(
    seed: u64,
    tokens: usize,
    layers: usize,
    interval: u64,
) -> (Vec<Span>, Vec<PmSample>, Vec<Truth>) {
    let mut random = SplitMix64::new(seed);
    let graph: Vec<Node> = (0..layers).flat_map(|_| decode_layer()).collect();
    let (mut kernels, mut truth, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    let mut now = between(&mut random, 0, interval);
    for _ in 0..tokens {
        for node in &graph {
            let jitter =
                |random: &mut SplitMix64, spread: f64| 1.0 + spread * (2.0 * random.next_f32() as f64 - 1.0);
            let length = (node.length as f64 * jitter(&mut random, 0.10)) as u64;
            let (read, write) = (
                node.rates.0 * jitter(&mut random, 0.05),
                node.rates.1 * jitter(&mut random, 0.05),
            );
            kernels.push(Span {
                kind: node.name,
                ..span(now, now + length, 7)
            });
            rates.push((read, write));
            truth.push((
                node.name,
                ramped_bytes(length, read, 0, length),
                ramped_bytes(length, write, 0, length),
            ));
            now += length + between(&mut random, 300, 1_500);
        }
        now += between(&mut random, 20_000, 60_000);
    }
    let mut samples = Vec::new();
    let mut start = between(&mut random, 0, interval);
    while start < now {
        let span_ns = between(&mut random, interval * 98 / 100, interval * 102 / 100);
        let (mut read, mut write) = (0.0, 0.0);
        for (kernel, &(read_rate, write_rate)) in kernels.iter().zip(&rates) {
            if overlap(kernel, start, start + span_ns) == 0 {
                continue;
            }
            let from = start.saturating_sub(kernel.start_ns);
            let to = (start + span_ns).min(kernel.end_ns) - kernel.start_ns;
            read += ramped_bytes(length(kernel), read_rate, from, to);
            write += ramped_bytes(length(kernel), write_rate, from, to);
        }
        samples.push(sample(start, start + span_ns, read as u64, write as u64));
        start += span_ns;
    }
    (kernels, samples, truth)
}

/// Measured against true bytes (read, write) per name.
fn by_name(truth: &[Truth], attribution: &Attribution) -> ByName {
    let mut totals = ByName::new();
    for (&(name, read, write), measured) in truth.iter().zip(&attribution.units) {
        let entry = totals.entry(name).or_default();
        entry.0.0 += measured.read as f64;
        entry.0.1 += measured.write as f64;
        entry.1.0 += read;
        entry.1.1 += write;
    }
    totals
}

/// A replayed graph of a small model's decode, sampled every 10-20 µs, its
/// mat-vecs ramping up and draining: the mat-vecs' read bytes come back
/// within 3 % by name, and the slow kinds beside them take under 1 % of the
/// run's bytes. Split by time alone, the slow kinds take a mat-vec's share.
#[test]
fn slow_kernels_beside_mat_vecs_take_little_of_their_samples() {
    let mut worst_by_time = 0f64;
    for (seed, interval) in [(3, 20_000), (14, 10_000), (27, 20_000)] {
        let (kernels, samples, truth) = replayed_graph(seed, 48, 4, interval);
        let all_read: f64 = truth.iter().map(|&(_, read, _)| read).sum();
        let attribution = attribute(&kernels, &samples);
        let one_kind: Vec<Span> = kernels.iter().map(|kernel| Span { kind: 0, ..*kernel }).collect();
        let by_time = by_name(&truth, &attribute(&one_kind, &samples));
        for (name, ((read, _), (true_read, _))) in by_name(&truth, &attribution) {
            if [0, 4, 5].contains(&name) {
                assert!(
                    (read / true_read - 1.0).abs() < 0.03,
                    "seed {seed} name {name}: read {read:.0} of {true_read:.0}"
                );
                worst_by_time = worst_by_time.max((by_time[&name].0.0 / true_read - 1.0).abs());
            } else {
                assert!(
                    read < 0.01 * all_read,
                    "seed {seed} name {name}: read {read:.0} of {true_read:.0} (all: {all_read:.0})"
                );
            }
        }
    }
    assert!(
        worst_by_time > 0.03,
        "by time alone every mat-vec came within {worst_by_time:.3}"
    );
}

/// Samples made exactly from known rates (one of them 0, one kind in no
/// sample) give those rates back, none negative.
#[test]
fn least_squares_gives_back_exact_rates() {
    for seed in [2, 17, 40] {
        let mut random = SplitMix64::new(seed);
        let kinds = 6;
        let truth: Vec<f64> = (0..kinds)
            .map(|kind| {
                if kind == 2 {
                    0.0
                } else {
                    0.5 + 4.0 * random.next_f32() as f64
                }
            })
            .collect();
        let mut samples = Vec::new();
        let mut bytes = Vec::new();
        for _ in 0..400 {
            let inside: Vec<(usize, f64)> = (0..1 + random.below(4))
                .map(|_| {
                    (
                        random.below(kinds as u64 - 1) as usize,
                        between(&mut random, 100, 20_000) as f64,
                    )
                })
                .collect();
            bytes.push(inside.iter().map(|&(kind, time)| truth[kind] * time).sum::<f64>());
            samples.push(inside);
        }
        let design = rates::Design::new(samples.into_iter(), kinds);
        let found = design.rates(&bytes);
        assert_eq!(found[kinds - 1], 0.0, "kind {} ran in no sample", kinds - 1);
        for kind in 0..kinds - 1 {
            assert!(found[kind] >= 0.0);
            assert!(
                (found[kind] - truth[kind]).abs() < 1e-3,
                "seed {seed} kind {kind}: {} for {}",
                found[kind],
                truth[kind]
            );
        }
    }
}
