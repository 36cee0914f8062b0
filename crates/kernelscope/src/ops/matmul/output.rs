//! The output of the CPU GEMMs (`cpu.rs`, `cpu_bf16.rs`), written by many
//! tasks at once: below both, so neither imports the other for it.

use std::marker::PhantomData;

/// The output `[m, n]` as the parallel tasks write it at once. Each task
/// writes only its own columns, so no element is touched by two tasks, but
/// each task's elements are strided across every row, which disjoint slices
/// cannot express.
pub(super) struct Output<'a> {
    start: *mut f32,
    len: usize,
    columns: usize,
    borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: the pointer is only written through `store`, whose callers (one
// task per group of columns) write disjoint elements, and it stays valid
// while the `Output` lives (it holds the slice's exclusive borrow).
unsafe impl Sync for Output<'_> {}

impl<'a> Output<'a> {
    /// `out` `[len / columns, columns]`, exclusively borrowed while the
    /// `Output` lives.
    pub(super) fn new(out: &'a mut [f32], columns: usize) -> Self {
        Output {
            start: out.as_mut_ptr(),
            len: out.len(),
            columns,
            borrow: PhantomData,
        }
    }

    /// Where `out[token, first_column..first_column + length]` starts, or
    /// `None` for a span past its row or the output (the callers stay in
    /// range, so nothing is written there).
    #[inline(always)]
    fn span(&self, token: usize, first_column: usize, length: usize) -> Option<*mut f32> {
        let index = token * self.columns + first_column;
        if first_column + length > self.columns || index + length > self.len {
            return None;
        }
        // SAFETY: `index + length <= len` (checked above), so the offset
        // stays inside the borrowed slice.
        Some(unsafe { self.start.add(index) })
    }

    /// `out[token, first_column..first_column + values.len()] = values`.
    #[inline(always)]
    pub(super) fn store(&self, token: usize, first_column: usize, values: &[f32]) {
        let Some(start) = self.span(token, first_column, values.len()) else {
            return;
        };
        for (offset, &value) in values.iter().enumerate() {
            // SAFETY: the span is inside the borrowed slice (`span`), and
            // only the task owning these columns writes them, so no other
            // reference to these elements exists during the write.
            unsafe { start.add(offset).write(value) };
        }
    }

    /// `out[token, first_column..first_column + values.len()] += values`.
    #[inline(always)]
    pub(super) fn accumulate(&self, token: usize, first_column: usize, values: &[f32]) {
        let Some(start) = self.span(token, first_column, values.len()) else {
            return;
        };
        for (offset, &value) in values.iter().enumerate() {
            // SAFETY: as in `store`: in the borrowed slice, and written only
            // by the task owning these columns.
            unsafe { *start.add(offset) += value };
        }
    }
}
