//! How graph launches' event times are placed on the process's clock.

use super::anchors::{ANCHOR_PERIOD_NS, Anchor, anchor_before, moment_ns, prune};

/// The next draw of a 64-bit linear congruential generator (Knuth's MMIX constants).
fn next(random: u64) -> u64 {
    random
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
}

fn anchor(host_ns: u64) -> Anchor {
    Anchor {
        event: std::ptr::null_mut(),
        host_ns,
    }
}

#[test]
fn a_launch_is_read_against_the_newest_anchor_before_it() {
    let mut random = 0x5eed_u64;
    for _ in 0..200 {
        random = next(random);
        let first = random >> 40;
        let anchors: Vec<Anchor> = (0..5)
            .map(|index| anchor(first + index * ANCHOR_PERIOD_NS))
            .collect();
        let offset = (random >> 20) % (6 * ANCHOR_PERIOD_NS);
        let launched = first + offset;
        let chosen = anchor_before(&anchors, launched).unwrap();
        let expected = (offset / ANCHOR_PERIOD_NS).min(4);
        assert_eq!(chosen.host_ns, first + expected * ANCHOR_PERIOD_NS);
        // Before every anchor: the first (its elapsed time is then negative).
        assert_eq!(
            anchor_before(&anchors, first.saturating_sub(1 + offset))
                .unwrap()
                .host_ns,
            first
        );
    }
    assert!(anchor_before(&[], 5).is_none());
}

#[test]
fn moments_are_the_anchor_plus_the_elapsed_time() {
    assert_eq!(moment_ns(1_000_000_000, 2.5), 1_002_500_000);
    assert_eq!(moment_ns(1_000_000_000, -0.25), 999_750_000);
    // f32 milliseconds 200 ms after an anchor keep 30 ns steps.
    let elapsed = 199.999_97f32;
    assert!(moment_ns(0, elapsed).abs_diff(199_999_970) <= 16);
}

#[test]
fn only_the_anchors_unread_launches_need_are_kept() {
    let mut random = 0x7072_756e_u64;
    for _ in 0..200 {
        random = next(random);
        let count = 1 + (random >> 60) as usize;
        let first = (random >> 30) % 1_000_000;
        let mut anchors: Vec<Anchor> = (0..count as u64)
            .map(|index| anchor(first + index * ANCHOR_PERIOD_NS))
            .collect();
        let pending = (random >> 10)
            .is_multiple_of(3)
            .then(|| first + (random >> 5) % (count as u64 * ANCHOR_PERIOD_NS + 1));
        let before = anchors.clone();
        let dropped = prune(&mut anchors, pending);
        assert_eq!(dropped.len() + anchors.len(), count);
        assert!(!anchors.is_empty());
        match pending {
            // Every launch still to be read keeps the anchor it is read against.
            Some(launched) => assert_eq!(
                anchor_before(&anchors, launched).unwrap().host_ns,
                anchor_before(&before, launched).unwrap().host_ns
            ),
            None => assert_eq!(anchors.len(), 1),
        }
    }
}
