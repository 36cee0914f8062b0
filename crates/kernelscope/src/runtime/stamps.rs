//! The ring a persistent kernel stamps its steps' boundaries into
//! (`ops/persistent.cuh`'s `PhaseStamps`), and its reading for the profiler:
//! each block stores its stamps in device memory, and block 0, after the
//! grid's last barrier, reduces them (earliest start; per step but the
//! last, whose end is the launch's, the latest end and the sum of ends)
//! into the next of [`STAMP_RING`] slots, numbered by a counter it
//! advances; the profiler reads a launch's slot once the token it ran in
//! is done. A slot holds the launch's number, so a slot overwritten by a
//! later launch is known and dropped rather than misread. On a GPU the ring
//! is pinned host memory mapped for the device, so reading it costs the
//! host no copy (a copy of each launch's slot on the host's path between
//! tokens had cost a third of profiled decode, every block's own stamps
//! crossing the bus 7 %, and every block's atomics on a few shared words
//! 12 %).

use std::fmt;
use std::sync::Arc;

use super::{Buffer, DType, Device};
use crate::error::{Error, Result};
use crate::profile::{LaunchStamps, StampSource};

/// Slots of a ring (`STAMP_RING` in persistent.cuh): a persistent kernel's
/// ring belongs to one dispatch, which runs once a token, and the profiler
/// reads its slot with at most a token or two more in flight.
pub const STAMP_RING: u64 = 8;

/// A ring of stamps for one dispatch of `blocks` blocks running `phases`
/// steps.
#[derive(Clone)]
pub struct StampRing {
    /// The slots (host memory mapped for the device, where there is one).
    buffer: Buffer,
    /// The kernel's scratch (u64 words in device memory): the launches so
    /// far, which it advances, then each block's stamps of its current
    /// launch (`phases` a block).
    launches: Buffer,
    blocks: u32,
    phases: u32,
}

impl fmt::Debug for StampRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StampRing({} blocks, {} steps)", self.blocks, self.phases)
    }
}

impl StampRing {
    /// u64 words of one slot: the launch's number, its blocks, the
    /// earliest start, then per step but the last the latest end, then
    /// the sums of ends.
    fn slot_words(phases: u32) -> usize {
        1 + 2 * phases as usize
    }

    /// The slots the kernel stamps (u64 words, allocated as twice as many u32).
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// The kernel's scratch: the counter of launches it reads and
    /// advances, then every block's stamps.
    pub fn launches(&self) -> &Buffer {
        &self.launches
    }

    /// The profiler's view of it.
    pub fn source(&self) -> Arc<dyn StampSource> {
        Arc::new(self.clone())
    }
}

impl StampSource for StampRing {
    fn read(&self, launch: u64) -> Option<LaunchStamps> {
        let words = Self::slot_words(self.phases);
        let first = (launch % STAMP_RING) as usize * words;
        let mut bytes = vec![0u8; words * 8];
        self.buffer.memory().read_settled(first * 8, &mut bytes).ok()?;
        let slot: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        if slot[0] != launch {
            return None;
        }
        LaunchStamps::from_words(&slot[1..], self.phases as usize)
            .filter(|stamps| stamps.blocks == self.blocks)
    }
}

impl Device {
    /// A zeroed ring for a dispatch of `blocks` blocks running `phases`
    /// steps a launch (1 to `PHASE_STAMPS_MOST` in persistent.cuh, 8).
    pub fn stamp_ring(&self, blocks: u32, phases: u32) -> Result<StampRing> {
        if !(1..=8).contains(&phases) {
            return Err(Error::ShapeMismatch {
                context: "a persistent kernel's stamp ring (1 to 8 steps)".into(),
                expected: vec![8],
                found: vec![phases as usize],
            });
        }
        let words = StampRing::slot_words(phases);
        let scratch_words = 1 + blocks as usize * phases as usize;
        Ok(StampRing {
            buffer: self.alloc_host_mapped(DType::U32, &[2 * STAMP_RING as usize * words])?,
            launches: self.alloc(DType::U32, &[2 * scratch_words])?,
            blocks,
            phases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Writes a launch's slot as the kernel's last block would.
    fn write_slot(ring: &StampRing, launch: u64, stamps: &LaunchStamps) {
        let words = StampRing::slot_words(ring.phases);
        let mut all: Vec<u64> = ring
            .buffer
            .to_vec::<u32>()
            .expect("read")
            .chunks_exact(2)
            .map(|pair| u64::from(pair[0]) | (u64::from(pair[1]) << 32))
            .collect();
        let first = (launch % STAMP_RING) as usize * words;
        let slot = [launch, u64::from(stamps.blocks), stamps.earliest_start]
            .into_iter()
            .chain(stamps.latest_ends.iter().copied())
            .chain(stamps.end_sums.iter().copied());
        for (word, value) in all[first..first + words].iter_mut().zip(slot) {
            *word = value;
        }
        let halves: Vec<u32> = all
            .iter()
            .flat_map(|word| [*word as u32, (word >> 32) as u32])
            .collect();
        ring.buffer.write_from(&halves).expect("write");
    }

    /// Random stamps of `blocks` blocks over `phases` steps, reduced.
    fn random_launch(rng: &mut SplitMix64, blocks: u32, phases: usize) -> LaunchStamps {
        let epoch = 1 << 60 | rng.below(1 << 50);
        let mut per_block = Vec::new();
        for _ in 0..blocks {
            let mut time = epoch + rng.below(3_000);
            per_block.push(time);
            for _ in 0..phases {
                time += rng.below(10_000);
                per_block.push(time);
            }
        }
        LaunchStamps::of_blocks(&per_block, phases).expect("a launch's")
    }

    #[test]
    fn the_kernels_ring_has_as_many_slots_and_steps_as_this_one() {
        let source = include_str!("../ops/persistent.cuh");
        assert!(source.contains(&format!("#define STAMP_RING {STAMP_RING}\n")));
        assert!(source.contains("#define PHASE_STAMPS_MOST 8\n"));
    }

    #[test]
    fn a_launch_reads_back_its_own_slot_and_an_overwritten_one_reads_nothing() {
        let device = Device::cpu();
        let ring = device.stamp_ring(3, 4).expect("ring");
        assert_eq!(ring.launches().len(), 2 * (1 + 3 * 4));
        assert_eq!(StampRing::slot_words(4), 9);
        assert!(
            device.stamp_ring(3, 9).is_err(),
            "more steps than the kernel reduces"
        );
        let mut rng = SplitMix64::new(53);
        let stamps = random_launch(&mut rng, 3, 4);
        write_slot(&ring, 11, &stamps);
        assert_eq!(ring.read(11), Some(stamps.clone()));
        // Launch 3 shares slot 3 with 11, which overwrote it.
        assert_eq!(ring.read(3), None);
        let later = random_launch(&mut rng, 3, 4);
        write_slot(&ring, 11 + STAMP_RING, &later);
        assert_eq!(ring.read(11), None);
        assert_eq!(ring.read(11 + STAMP_RING), Some(later));
        let other_grid = random_launch(&mut rng, 5, 4);
        write_slot(&ring, 12, &other_grid);
        assert_eq!(ring.read(12), None, "a slot of another grid's blocks");
    }
}
