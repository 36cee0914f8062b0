//! The argument lists of the quantized experts' kernels, how a kernel takes its
//! input, and the launch constants, below the launch and the CPU reference.

use crate::ops::quantized::linear::CUDA_THREADS;

/// Warps of a CUDA block (each computes one row at a time).
pub(super) const WARPS: usize = CUDA_THREADS as usize / 32;

/// Blocks along an expert's (or the hidden) rows at most; warps walk the rest.
pub(super) const MOST_BLOCKS: usize = 4096;

/// The arguments of `moe_gate_up_<format>_q8`: the dense gate/up kernels'
/// names, x the staged input.
pub(crate) use crate::ops::moe::experts::gate_up;

/// The arguments of `moe_down_add_<format>_q8`.
pub(crate) mod down {
    crate::ops::kernel_arguments! {
        ACTIVATED: "activated" Read,
        IDS: "ids" Read,
        WEIGHTS: "weights" Read,
        DOWN: "down" Read,
        HIDDEN: "hidden" ReadWrite,
        ROWS: "rows" U32,
        HIDDEN_SIZE: "hidden_size" U32,
        EXPERT_ROWS: "expert_rows" U32,
        EXPERTS: "experts" U32,
        K: "k" U32,
    }
}

/// How a kernel takes its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// Quantized by `quantize_q8` (`_q8`).
    Staged,
    /// In f32 (`_f32`, CPU only).
    F32,
}

impl Input {
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Input::Staged => "q8",
            Input::F32 => "f32",
        }
    }
}
