//! Grouping a chunk's rows by expert, for prefill: `gather` copies each
//! row that chose an expert to that expert's run of rows (so each expert's
//! rows are one GEMM's input), `combine` adds each row's k expert outputs,
//! weighted, back into the residual stream. The order is the host's (it
//! reads the router's choice once per sparse layer of a chunk): positions
//! are grouped by expert, `order[p]` is the row position p copies and
//! `position[row * k + j]` where the j-th choice of a row went.

mod arguments;
pub mod combine;
mod cpu;
pub mod gather;

pub use combine::MoeCombine;
pub use gather::MoeGather;

use crate::runtime::KernelRegistry;

/// Registers `moe_gather_<dtype>` and `moe_combine_f32`.
pub fn register(registry: &mut KernelRegistry) {
    gather::register(registry);
    combine::register(registry);
}

/// The grouping of `ids` (`[rows, k]`, each below `experts`) by expert:
/// `(order, position, offsets)` with `order[p]` the row position `p`
/// copies, `position[row * k + j]` the position of that choice, and expert
/// e's positions `offsets[e]..offsets[e + 1]` (rows in order within each
/// expert). `None` when an id is not an expert.
pub fn group_by_expert(ids: &[u32], k: usize, experts: usize) -> Option<(Vec<u32>, Vec<u32>, Vec<usize>)> {
    let mut counts = vec![0usize; experts + 1];
    for &id in ids {
        let id = id as usize;
        if id >= experts {
            return None;
        }
        counts[id + 1] += 1;
    }
    for e in 0..experts {
        counts[e + 1] += counts[e];
    }
    let offsets = counts.clone();
    let mut next = counts;
    let mut order = vec![0u32; ids.len()];
    let mut position = vec![0u32; ids.len()];
    for (slot, &id) in ids.iter().enumerate() {
        let p = next[id as usize];
        next[id as usize] += 1;
        order[p] = (slot / k.max(1)) as u32;
        position[slot] = p as u32;
    }
    Some((order, position, offsets))
}
