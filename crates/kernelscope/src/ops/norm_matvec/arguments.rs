//! The argument list of norm_matvec's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    X: "x" Read,
    NORM_WEIGHT: "norm_weight" Read,
    WEIGHT_A: "weight_a" Read,
    WEIGHT_B: "weight_b" Read,
    WEIGHT_C: "weight_c" Read,
    OUT: "out" Write,
    ROWS_A: "rows_a" U32,
    ROWS_B: "rows_b" U32,
    ROWS_C: "rows_c" U32,
    K: "k" U32,
    EPS: "eps" F32,
}

/// Shared memory a block may take without opting in to more (48 KiB on
/// every CUDA GPU): the normalised x is staged there.
pub const MOST_SHARED_BYTES: usize = 48 << 10;

/// The most blocks a fused mat-vec launches. Each block normalises x once
/// (k floats read from L2), so past one wave of blocks (4 per SM on a
/// 132-SM GPU) warps loop over rows instead of more blocks repeating it.
pub(super) const MOST_BLOCKS: usize = 528;

/// Static shared memory the fused kernels take beside the staged x (the
/// warps' partial sums and the block reduction's scratch: 144 bytes as
/// ptxas reports them for sm_90), rounded up. The staged x and these must
/// fit in [`MOST_SHARED_BYTES`] together: rows of 12,288 elements filled it
/// exactly and their launch failed ("invalid argument") on an H100.
pub const STATIC_SHARED_BYTES: usize = 256;

/// The arguments of the fused RMSNorm, gate/up and SiLU·mul kernel (`silu.rs`).
pub(crate) mod silu {
    crate::ops::kernel_arguments! {
        X: "x" Read,
        NORM_WEIGHT: "norm_weight" Read,
        GATE: "gate" Read,
        UP: "up" Read,
        OUT: "out" Write,
        N: "n" U32,
        K: "k" U32,
        EPS: "eps" F32,
    }
}

/// The arguments of RMSNorm, q/k/v's mat-vecs, RoPE and the KV append in
/// one kernel (`rope.rs`).
pub(crate) mod rope {
    crate::ops::kernel_arguments! {
        X: "x" Read,
        NORM_WEIGHT: "norm_weight" Read,
        WEIGHT_Q: "weight_q" Read,
        WEIGHT_K: "weight_k" Read,
        WEIGHT_V: "weight_v" Read,
        QUERY: "query" Write,
        KEY_CACHE: "key_cache" ReadWrite,
        VALUE_CACHE: "value_cache" ReadWrite,
        INVERSE_FREQUENCIES: "inverse_frequencies" Read,
        POSITIONS: "positions" Read,
        FIRST: "first" U32,
        MAX_POSITIONS: "max_positions" U32,
        QUERY_HEADS: "query_heads" U32,
        KV_HEADS: "kv_heads" U32,
        HEAD_DIM: "head_dim" U32,
        K: "k" U32,
        EPS: "eps" F32,
        ATTENTION_SCALING: "attention_scaling" F32,
    }
}
