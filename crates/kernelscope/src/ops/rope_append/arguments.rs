//! The argument list of rope_append's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    QUERY: "query" ReadWrite,
    KEY: "key" Read,
    VALUE: "value" Read,
    KEY_CACHE: "key_cache" ReadWrite,
    VALUE_CACHE: "value_cache" ReadWrite,
    INVERSE_FREQUENCIES: "inverse_frequencies" Read,
    POSITIONS: "positions" Read,
    FIRST: "first" U32,
    MAX_POSITIONS: "max_positions" U32,
    QUERY_HEADS: "query_heads" U32,
    KV_HEADS: "kv_heads" U32,
    HEAD_DIM: "head_dim" U32,
    ATTENTION_SCALING: "attention_scaling" F32,
}
