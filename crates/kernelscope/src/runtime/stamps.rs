//! The ring a persistent kernel stamps its steps' boundaries into
//! (`ops/persistent.cuh`'s `PhaseStamps`), and its reading for the profiler:
//! each launch takes the next of [`STAMP_RING`] slots, numbered by a
//! counter the kernel advances, and every block writes one 16-byte row
//! there as it ends (its start's low 32 bits, then its steps' ends but the
//! last as 32-bit offsets from its start), block 0 its whole start and the
//! launch's number beside them; the profiler reads a launch's slot once the
//! token it ran in is done. The launch's number marks a slot overwritten by
//! a later launch, which is dropped rather than misread. On a GPU the ring
//! is pinned host memory mapped for the device, so reading it costs the
//! host no copy (a copy of each launch's slot on the host's path between
//! tokens had cost a third of profiled decode).

use std::fmt;
use std::sync::Arc;

use super::{Buffer, DType, Device};
use crate::error::{Error, Result};
use crate::profile::{LaunchStamps, StampSource};

/// Slots of a ring (`STAMP_RING` in persistent.cuh): a persistent kernel's
/// ring belongs to one dispatch, which runs once a token, and the profiler
/// reads its slot with at most a token or two more in flight.
pub const STAMP_RING: u64 = 8;

/// The most steps a row holds (`PHASE_STAMPS_MOST` in persistent.cuh): a
/// start and three ends of 32 bits.
pub const MOST_STAMPED_STEPS: u32 = 4;

/// A ring of stamps for one dispatch of `blocks` blocks running `phases`
/// steps.
#[derive(Clone)]
pub struct StampRing {
    /// The slots (host memory mapped for the device, where there is one).
    buffer: Buffer,
    /// The count of launches (one u64 in device memory), which every block
    /// reads and block 0 advances.
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
    /// u64 words of one slot: the launch's number, block 0's whole start,
    /// then a row of two words (four u32) a block.
    fn slot_words(blocks: u32) -> usize {
        2 + 2 * blocks as usize
    }

    /// The slots the kernel stamps (u64 words, allocated as twice as many u32).
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// The counter of launches the kernel reads and advances (one u64).
    pub fn launches(&self) -> &Buffer {
        &self.launches
    }

    /// The profiler's view of it.
    pub fn source(&self) -> Arc<dyn StampSource> {
        Arc::new(self.clone())
    }

    /// A slot's words as the blocks' stamps, `phases` a block (start, then
    /// each step's end but the last); `None` for another launch's slot.
    fn rows(&self, slot: &[u64], launch: u64) -> Option<Vec<u64>> {
        let [number, base, rows @ ..] = slot else {
            return None;
        };
        if *number != launch {
            return None;
        }
        let phases = self.phases as usize;
        let mut stamps = Vec::with_capacity(self.blocks as usize * phases);
        for pair in rows.chunks_exact(2) {
            // A row's two words: its start's low 32 bits and three offsets.
            let row = [
                pair[0] as u32,
                (pair[0] >> 32) as u32,
                pair[1] as u32,
                (pair[1] >> 32) as u32,
            ];
            // Blocks start within a second of block 0: the low 32 bits and
            // its whole start give each block's.
            let from_base = row[0].wrapping_sub(*base as u32) as i32;
            let start = base.checked_add_signed(i64::from(from_base))?;
            stamps.push(start);
            stamps.extend(row[1..phases].iter().map(|&offset| start + u64::from(offset)));
        }
        Some(stamps)
    }
}

impl StampSource for StampRing {
    fn read(&self, launch: u64) -> Option<LaunchStamps> {
        let words = Self::slot_words(self.blocks);
        let first = (launch % STAMP_RING) as usize * words;
        let mut bytes = vec![0u8; words * 8];
        self.buffer.memory().read_settled(first * 8, &mut bytes).ok()?;
        let slot: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        LaunchStamps::of_rows(&self.rows(&slot, launch)?, self.phases as usize)
    }
}

impl Device {
    /// A zeroed ring for a dispatch of `blocks` blocks running `phases`
    /// steps a launch (1 to [`MOST_STAMPED_STEPS`]).
    pub fn stamp_ring(&self, blocks: u32, phases: u32) -> Result<StampRing> {
        if !(1..=MOST_STAMPED_STEPS).contains(&phases) {
            return Err(Error::ShapeMismatch {
                context: format!("a persistent kernel's stamp ring (1 to {MOST_STAMPED_STEPS} steps)"),
                expected: vec![MOST_STAMPED_STEPS as usize],
                found: vec![phases as usize],
            });
        }
        let words = STAMP_RING as usize * StampRing::slot_words(blocks);
        Ok(StampRing {
            buffer: self.alloc_host_mapped(DType::U32, &[2 * words])?,
            launches: self.alloc(DType::U32, &[2])?,
            blocks,
            phases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Writes a launch's slot as the kernel's blocks would: `starts` and
    /// `ends` (per block, `phases - 1` ends) in ns on the GPU's timer.
    fn write_slot(ring: &StampRing, launch: u64, starts: &[u64], ends: &[Vec<u64>]) {
        let words = StampRing::slot_words(ring.blocks);
        let mut all: Vec<u32> = ring.buffer.to_vec::<u32>().expect("read");
        let first = 2 * (launch % STAMP_RING) as usize * words;
        let slot = &mut all[first..first + 2 * words];
        slot[..4].copy_from_slice(&[
            launch as u32,
            (launch >> 32) as u32,
            starts[0] as u32,
            (starts[0] >> 32) as u32,
        ]);
        for (block, (start, ends)) in starts.iter().zip(ends).enumerate() {
            let row = &mut slot[4 + 4 * block..8 + 4 * block];
            row[0] = *start as u32;
            for (offset, end) in row[1..].iter_mut().zip(ends) {
                *offset = (end - start) as u32;
            }
        }
        ring.buffer.write_from(&all).expect("write");
    }

    /// Random starts and ends of `blocks` blocks over `phases` steps, on
    /// a timer whose low 32 bits wrap just after block 0's start: block 1
    /// starts past the wrap, block 2 before block 0.
    fn random_launch(
        rng: &mut SplitMix64,
        blocks: u32,
        phases: usize,
    ) -> (Vec<u64>, Vec<Vec<u64>>, Vec<u64>) {
        let epoch = (1 << 60 | rng.below(1 << 40) << 32) + u64::from(u32::MAX) - 1_500;
        let (mut starts, mut ends, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        for block in 0..blocks {
            let mut time = epoch
                + match block {
                    0 => 1_000,
                    1 => 2_900,
                    2 => 10,
                    _ => rng.below(3_000),
                };
            starts.push(time);
            rows.push(time);
            let mut block_ends = Vec::new();
            for _ in 1..phases {
                time += rng.below(10_000);
                block_ends.push(time);
                rows.push(time);
            }
            ends.push(block_ends);
        }
        (starts, ends, rows)
    }

    #[test]
    fn the_kernels_ring_has_as_many_slots_and_steps_as_this_one() {
        let source = include_str!("../ops/persistent.cuh");
        assert!(source.contains(&format!("#define STAMP_RING {STAMP_RING}\n")));
        assert!(source.contains(&format!("#define PHASE_STAMPS_MOST {MOST_STAMPED_STEPS}\n")));
    }

    #[test]
    fn a_launch_reads_back_its_blocks_stamps_and_an_overwritten_one_reads_nothing() {
        let device = Device::cpu();
        let ring = device.stamp_ring(5, 4).expect("ring");
        assert!(device.stamp_ring(5, 5).is_err(), "more steps than a row holds");
        let mut rng = SplitMix64::new(53);
        let (starts, ends, rows) = random_launch(&mut rng, 5, 4);
        assert!(
            (starts[1] as u32) < (starts[0] as u32),
            "block 1's low bits wrapped"
        );
        write_slot(&ring, 11, &starts, &ends);
        let expected = LaunchStamps::of_rows(&rows, 4);
        assert!(expected.is_some());
        assert_eq!(ring.read(11), expected);
        // Launch 3 shares slot 3 with 11, which overwrote it.
        assert_eq!(ring.read(3), None);
        let (starts, ends, rows) = random_launch(&mut rng, 5, 4);
        write_slot(&ring, 11 + STAMP_RING, &starts, &ends);
        assert_eq!(ring.read(11), None);
        assert_eq!(ring.read(11 + STAMP_RING), LaunchStamps::of_rows(&rows, 4));
    }

    #[test]
    fn a_ring_of_fewer_steps_reads_only_its_own_offsets() {
        let device = Device::cpu();
        let ring = device.stamp_ring(3, 2).expect("ring");
        let mut rng = SplitMix64::new(7);
        let (starts, ends, rows) = random_launch(&mut rng, 3, 2);
        write_slot(&ring, 0, &starts, &ends);
        let read = ring.read(0).expect("a launch");
        assert_eq!(Some(read.clone()), LaunchStamps::of_rows(&rows, 2));
        assert_eq!((read.blocks, read.latest_ends.len()), (3, 1));
    }
}
