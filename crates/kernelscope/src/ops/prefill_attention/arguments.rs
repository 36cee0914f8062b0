//! The argument list of prefill_attention's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    QUERY: "query" Read,
    KEY_CACHE: "key_cache" Read,
    VALUE_CACHE: "value_cache" Read,
    POSITIONS: "positions" Read,
    OUT: "out" Write,
    FIRST: "first" U32,
    ROWS: "rows" U32,
    QUERY_HEADS: "query_heads" U32,
    KV_HEADS: "kv_heads" U32,
    DIM: "dim" U32,
    MAX_POSITIONS: "max_positions" U32,
    TILE_ROWS: "tile_rows" U32,
    TILE_KEYS: "tile_keys" U32,
}

/// Threads per block: four warps, each owning a quarter of the block's rows.
pub(super) const THREADS: u32 = 128;

/// Head dimensions the tensor-core kernels are built for (bf16 caches).
pub(super) const TENSOR_CORE_DIMS: [usize; 2] = [64, 128];

/// Query rows and cached positions per tile of the tensor-core kernels.
pub(super) const TENSOR_CORE_TILE: usize = 64;
