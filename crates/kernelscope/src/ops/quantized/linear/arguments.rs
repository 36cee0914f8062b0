//! The argument lists of the quantized linear kernels, written once for
//! their launches and their CPU references: the products', and those of
//! the fused decode kernels (`fused`) and the activation stage (`stage`).

use crate::ops::kernel_arguments;

kernel_arguments! { WEIGHT: "weight" Read, X: "x" Read, OUT: "out" Write, N: "n" U32, K: "k" U32, ROWS: "rows" U32 }

pub(crate) mod quantize {
    crate::ops::kernel_arguments! { X: "x" Read, OUT: "out" Write, K: "k" U32 }
}
/// The arguments of `norm_quantize_q8` (stage.cu).
pub(crate) mod norm_quantize {
    crate::ops::kernel_arguments! {
        X: "x" Read, NORM_WEIGHT: "norm_weight" Read, OUT: "out" Write, K: "k" U32, EPS: "eps" F32
    }
}
/// The arguments of `matvecs_<format>_q8` (kernels.cu).
pub(crate) mod matvecs {
    crate::ops::kernel_arguments! {
        X: "x" Read, WEIGHT_A: "weight_a" Read, WEIGHT_B: "weight_b" Read, WEIGHT_C: "weight_c" Read,
        OUT: "out" Write, ROWS_A: "rows_a" U32, ROWS_B: "rows_b" U32, ROWS_C: "rows_c" U32, K: "k" U32
    }
}
/// The arguments of `matvecs_rope_<format>_q8_bf16` (kernels.cu): the
/// products' input and weights, the row of [q; k; v] its first matrix
/// begins at, then rope_append's stores, name for name.
pub(crate) mod matvecs_rope {
    crate::ops::kernel_arguments! {
        X: "x" Read, WEIGHT_A: "weight_a" Read, WEIGHT_B: "weight_b" Read, WEIGHT_C: "weight_c" Read,
        ROWS_A: "rows_a" U32, ROWS_B: "rows_b" U32, ROWS_C: "rows_c" U32, K: "k" U32,
        FIRST_ROW: "first_row" U32, QUERY: "query" ReadWrite, KEY_CACHE: "key_cache" ReadWrite,
        VALUE_CACHE: "value_cache" ReadWrite, INVERSE_FREQUENCIES: "inverse_frequencies" Read,
        POSITIONS: "positions" Read, FIRST: "first" U32, MAX_POSITIONS: "max_positions" U32,
        QUERY_HEADS: "query_heads" U32, KV_HEADS: "kv_heads" U32, HEAD_DIM: "head_dim" U32,
        ATTENTION_SCALING: "attention_scaling" F32
    }
}
/// The arguments of `matvec_silu_<format>_q8` (kernels.cu).
pub(crate) mod silu {
    crate::ops::kernel_arguments! {
        X: "x" Read, GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32, K: "k" U32
    }
}
// `matvec_add_<format>_q8` takes the dense residual mat-vec's arguments,
// name for name (x the quantized input).
/// The arguments of `matvec_silu_<format>_q8_stage` (kernels.cu): gate/up's,
/// then where its output is staged.
// gate/up's positions fill the first arguments (a test checks they are
// the same), so those of this list go unused.
#[allow(dead_code)]
pub(crate) mod silu_stage {
    crate::ops::kernel_arguments! {
        X: "x" Read, GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32, K: "k" U32,
        STAGED: "staged" Write
    }
}
/// The arguments of `matvec_silu_<format>_q8_norm_stage` (kernels.cu): the
/// staging gate/up's, then x's chunks' sums of squares and the norm's
/// epsilon (x staged before its RMSNorm).
#[allow(dead_code)]
pub(crate) mod silu_norm_stage {
    crate::ops::kernel_arguments! {
        X: "x" Read, GATE: "gate" Read, UP: "up" Read, OUT: "out" Write, N: "n" U32, K: "k" U32,
        STAGED: "staged" Write, SQUARES: "squares" Read, EPS: "eps" F32
    }
}
/// The arguments of `matvec_add_<format>_q8_norm_stage` (kernels.cu): the
/// residual mat-vec's, then the next norm's weight and where the new
/// residual is staged for its readers, with its chunks' sums of squares.
#[allow(dead_code)]
pub(crate) mod matvec_add_norm_stage {
    crate::ops::kernel_arguments! {
        WEIGHT: "weight" Read, X: "x" Read, OUT: "out" ReadWrite, N: "n" U32, K: "k" U32,
        NORM_WEIGHT: "norm_weight" Read, STAGED: "staged" Write, SQUARES: "squares" Write
    }
}
