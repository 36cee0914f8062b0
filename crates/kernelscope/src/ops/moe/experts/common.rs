//! What the gate/up launches (plain and with the norm fused) share: the
//! kernel source they are compiled with, the checks of the two expert
//! matrices and the launch grid. Below both, so neither imports `mod.rs`.

use crate::error::{Error, Result};
use crate::ops::matvec::{THREADS, with_core};
use crate::ops::{dimensions, expect};
use crate::runtime::{Buffer, DType, LaunchGrid};

/// The most elements of x a gate/up block stages in shared memory: 48 KiB,
/// the most a kernel gets without opting in, less the 256 bytes of its own
/// static shared memory (`norm_matvec::STATIC_SHARED_BYTES`; x of 12,288
/// f32 filled the 48 KiB alone, and the fused norm mat-vec's launch at that
/// size failed on an H100): hidden sizes up to 12,224.
pub const MOST_HIDDEN: usize =
    (crate::ops::norm_matvec::MOST_SHARED_BYTES - crate::ops::norm_matvec::STATIC_SHARED_BYTES) / 4;

/// Blocks along an expert's rows at most (the kernels walk the rest).
pub(super) const MOST_BLOCKS: usize = 4096;

/// The CUDA source of a gate/up kernel file: the mat-vec core, what the
/// gate/up kernels share (`experts.cuh`), then the file.
pub(super) fn gate_up_source(kernel_file: &str) -> String {
    with_core(&format!("{}\n{kernel_file}", include_str!("experts.cuh")))
}

/// Checks a gate/up op's stacked gate and up (`[experts, expert_rows,
/// hidden]` of `dtype`, hidden within what shared memory stages) and gives
/// their `[experts, expert_rows, hidden]`.
pub(super) fn check_gate_up(op: &str, gate: &Buffer, up: &Buffer, dtype: DType) -> Result<[usize; 3]> {
    let [experts, expert_rows, hidden] = dimensions(op, "gate", gate)?;
    expect(op, "gate", gate, dtype, &[experts, expert_rows, hidden])?;
    expect(op, "up", up, dtype, &[experts, expert_rows, hidden])?;
    if hidden > MOST_HIDDEN {
        return Err(Error::ShapeMismatch {
            context: format!("{op} stages x in shared memory: hidden sizes up to {MOST_HIDDEN}"),
            expected: vec![MOST_HIDDEN],
            found: vec![hidden],
        });
    }
    Ok([experts, expert_rows, hidden])
}

/// A gate/up op's grid: row groups of an expert across, each row's k
/// choices, the rows; x staged in `4 · hidden` bytes of shared memory.
pub(super) fn gate_up_grid(expert_rows: usize, k: usize, rows: usize, hidden: usize) -> LaunchGrid {
    let row_groups = expert_rows.div_ceil(THREADS as usize / 32).clamp(1, MOST_BLOCKS);
    LaunchGrid {
        blocks: [row_groups as u32, k as u32, rows as u32],
        threads_per_block: [THREADS, 1, 1],
        shared_memory_bytes: (4 * hidden) as u32,
    }
}
