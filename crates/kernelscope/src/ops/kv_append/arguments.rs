//! The argument list of kv_append's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    KEY: "key" Read,
    VALUE: "value" Read,
    KEY_CACHE: "key_cache" ReadWrite,
    VALUE_CACHE: "value_cache" ReadWrite,
    POSITIONS: "positions" Read,
    FIRST: "first" U32,
    ROWS: "rows" U32,
    MAX_POSITIONS: "max_positions" U32,
    KV_DIM: "kv_dim" U32,
}
