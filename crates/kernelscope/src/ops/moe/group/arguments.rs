//! The argument lists of the MoE grouping's kernels (gather, combine), below both
//! their launches and the CPU reference, which take them from here.

/// The arguments of `gather.rs`'s kernels.
pub(crate) mod gather {
    crate::ops::kernel_arguments! {
        X: "x" Read,
        ORDER: "order" Read,
        OUT: "out" Write,
        POSITIONS: "positions" U32,
        WIDTH: "width" U32,
    }
}

/// The arguments of `combine.rs`'s kernels.
pub(crate) mod combine {
    crate::ops::kernel_arguments! {
        EXPERT_OUT: "expert_out" Read,
        POSITION: "position" Read,
        WEIGHTS: "weights" Read,
        HIDDEN: "hidden" ReadWrite,
        ROWS: "rows" U32,
        WIDTH: "width" U32,
        K: "k" U32,
    }
}
