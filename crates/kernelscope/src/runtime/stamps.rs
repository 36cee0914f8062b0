//! The ring a persistent kernel stamps its steps' boundaries into
//! (`ops/persistent.cuh`'s `PhaseStamps`), and its reading for the profiler:
//! each launch takes the next of [`STAMP_RING`] slots, numbered by a
//! counter at the ring's start that the kernel advances, and the profiler
//! reads a launch's slot once the token it ran in is done. A slot holds the
//! launch's number, so a slot overwritten by a later launch is known and
//! dropped rather than misread. On a GPU the ring is pinned host memory
//! mapped for the device: the kernel's stamps cross the bus as it runs, and
//! reading them costs the host no copy (a copy of each launch's slot, on
//! the host's path between tokens, had cost a third of profiled decode).

use std::fmt;
use std::sync::Arc;

use super::{Buffer, DType, Device};
use crate::error::Result;
use crate::profile::StampSource;

/// Slots of a ring (`STAMP_RING` in persistent.cuh): a persistent kernel's
/// ring belongs to one dispatch, which runs once a token, and the profiler
/// reads its slot with at most a token or two more in flight.
pub const STAMP_RING: u64 = 8;

/// A ring of stamps in device memory for one dispatch of `blocks` blocks,
/// each writing `per_block` stamps a launch.
#[derive(Clone)]
pub struct StampRing {
    /// The slots (host memory mapped for the device, where there is one).
    buffer: Buffer,
    /// The launches so far (u64 in device memory), which the kernel
    /// advances.
    launches: Buffer,
    blocks: u32,
    per_block: u32,
}

impl fmt::Debug for StampRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "StampRing({} blocks, {} stamps a block)",
            self.blocks, self.per_block
        )
    }
}

impl StampRing {
    /// u64 words of one slot: the launch's number, then every block's stamps.
    fn slot_words(&self) -> usize {
        1 + self.blocks as usize * self.per_block as usize
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
}

impl StampSource for StampRing {
    fn read(&self, launch: u64) -> Option<Vec<u64>> {
        let words = self.slot_words();
        let first = (launch % STAMP_RING) as usize * words;
        let mut bytes = vec![0u8; words * 8];
        self.buffer.memory().read_settled(first * 8, &mut bytes).ok()?;
        let slot: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        (slot[0] == launch).then(|| slot[1..].to_vec())
    }
}

impl Device {
    /// A zeroed ring for a dispatch of `blocks` blocks writing `per_block`
    /// stamps each a launch.
    pub fn stamp_ring(&self, blocks: u32, per_block: u32) -> Result<StampRing> {
        let words = STAMP_RING as usize * (1 + blocks as usize * per_block as usize);
        Ok(StampRing {
            buffer: self.alloc_host_mapped(DType::U32, &[2 * words])?,
            launches: self.alloc(DType::U32, &[2])?,
            blocks,
            per_block,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Writes a launch's slot as the kernel would.
    fn write_slot(ring: &StampRing, launch: u64, stamps: &[u64]) {
        let words = ring.slot_words();
        let mut all: Vec<u64> = ring
            .buffer
            .to_vec::<u32>()
            .expect("read")
            .chunks_exact(2)
            .map(|pair| u64::from(pair[0]) | (u64::from(pair[1]) << 32))
            .collect();
        let first = (launch % STAMP_RING) as usize * words;
        all[first] = launch;
        all[first + 1..first + words].copy_from_slice(stamps);
        let halves: Vec<u32> = all
            .iter()
            .flat_map(|word| [*word as u32, (word >> 32) as u32])
            .collect();
        ring.buffer.write_from(&halves).expect("write");
    }

    #[test]
    fn the_kernels_ring_has_as_many_slots_as_this_one() {
        let source = include_str!("../ops/persistent.cuh");
        assert!(source.contains(&format!("#define STAMP_RING {STAMP_RING}\n")));
    }

    #[test]
    fn a_launch_reads_back_its_own_slot_and_an_overwritten_one_reads_nothing() {
        let device = Device::cpu();
        let ring = device.stamp_ring(3, 5).expect("ring");
        let mut rng = SplitMix64::new(53);
        let stamps: Vec<u64> = (0..15).map(|_| rng.next_u64() >> 8).collect();
        write_slot(&ring, 11, &stamps);
        assert_eq!(ring.read(11), Some(stamps.clone()));
        // Launch 3 shares slot 3 with 11, which overwrote it.
        assert_eq!(ring.read(3), None);
        write_slot(
            &ring,
            11 + STAMP_RING,
            &stamps[..].iter().rev().copied().collect::<Vec<_>>(),
        );
        assert_eq!(ring.read(11), None);
        assert!(
            ring.read(11 + STAMP_RING)
                .is_some_and(|read| read[0] == stamps[14])
        );
    }
}
