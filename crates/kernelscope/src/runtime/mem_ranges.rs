//! Dataflow conflict tracking. Each dispatch declares the byte ranges it
//! reads and writes; a new dispatch conflicts with the current group when it
//! reads what the group writes (read-after-write), or writes what the group
//! reads or writes (write-after-read, write-after-write). Only then is a
//! barrier needed; otherwise the dispatch may run concurrently with the
//! group. Ranges are absolute addresses, so different allocations can never
//! overlap and slice views compare by the bytes they really cover.

/// A half-open range of addresses `start..end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRange {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
}

impl MemRange {
    /// The range `start..end`.
    pub fn new(start: usize, end: usize) -> Self {
        MemRange { start, end }
    }

    /// Whether the two ranges share at least one byte (empty ranges share none).
    pub fn overlaps(&self, other: &MemRange) -> bool {
        self.start < other.end && other.start < self.end && self.start < self.end && other.start < other.end
    }
}

/// The reads and writes of the dispatches since the last barrier.
#[derive(Clone, Debug, Default)]
pub struct MemRanges {
    reads: Vec<MemRange>,
    writes: Vec<MemRange>,
}

impl MemRanges {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a dispatch with these reads and writes must wait for the group.
    pub fn conflicts(&self, reads: &[MemRange], writes: &[MemRange]) -> bool {
        let read_after_write = reads
            .iter()
            .any(|read| self.writes.iter().any(|w| read.overlaps(w)));
        let write_after_any = writes.iter().any(|write| {
            self.reads
                .iter()
                .chain(&self.writes)
                .any(|other| write.overlaps(other))
        });
        read_after_write || write_after_any
    }

    /// Adds a dispatch's ranges to the group.
    pub fn add(&mut self, reads: &[MemRange], writes: &[MemRange]) {
        self.reads.extend_from_slice(reads);
        self.writes.extend_from_slice(writes);
    }

    /// Starts a new group (after a barrier).
    pub fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }

    /// Whether the group is empty.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty()
    }
}
