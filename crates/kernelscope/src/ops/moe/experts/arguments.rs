//! The argument lists of the dense experts' kernels (gate/up, norm gate/up, down),
//! below both their launches and the CPU reference, which take them from here.

/// The arguments of `down.rs`'s kernels.
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
        SLICES: "slices" U32,
    }
}

/// The arguments of `gate_up.rs`'s kernels.
pub(crate) mod gate_up {
    crate::ops::kernel_arguments! {
        X: "x" Read,
        IDS: "ids" Read,
        GATE: "gate" Read,
        UP: "up" Read,
        OUT: "out" Write,
        ROWS: "rows" U32,
        HIDDEN_SIZE: "hidden_size" U32,
        EXPERT_ROWS: "expert_rows" U32,
        EXPERTS: "experts" U32,
        K: "k" U32,
    }
}

/// The arguments of `norm_gate_up.rs`'s kernels.
pub(crate) mod norm_gate_up {
    crate::ops::kernel_arguments! {
        X: "x" Read,
        NORM_WEIGHT: "norm_weight" Read,
        IDS: "ids" Read,
        GATE: "gate" Read,
        UP: "up" Read,
        OUT: "out" Write,
        ROWS: "rows" U32,
        HIDDEN_SIZE: "hidden_size" U32,
        EXPERT_ROWS: "expert_rows" U32,
        EXPERTS: "experts" U32,
        K: "k" U32,
        EPS: "eps" F32,
    }
}
