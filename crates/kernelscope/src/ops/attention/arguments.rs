//! The argument list of attention's kernels and its shared constants, below both the
//! launch and the CPU reference, which take them from here.

use crate::ops::kernel_arguments;

kernel_arguments! {
    QUERY: "query" Read,
    KEY_CACHE: "key_cache" Read,
    VALUE_CACHE: "value_cache" Read,
    POSITION_SLOT: "position_slot" Read,
    PARTIALS: "partials" Write,
    INDEX: "index" U32,
    QUERY_HEADS: "query_heads" U32,
    KV_HEADS: "kv_heads" U32,
    DIM: "dim" U32,
    MAX_POSITIONS: "max_positions" U32,
    SPLITS: "splits" U32,
}

/// The most query heads per KV head, and the longest head, the CUDA kernel
/// keeps in registers (every Llama/Qwen2/Mistral geometry fits).
pub(super) const MAX_GROUP: usize = 8;

pub(super) const MAX_HEAD_DIM: usize = 256;

/// Threads of a generic split block (four warps, each walking its share of
/// the split's positions).
pub(super) const SPLIT_THREADS: u32 = 128;

/// Threads of a vector split block: eight warps, so a block has 64 rows of
/// K and V in flight.
pub(super) const VECTOR_THREADS: u32 = 256;

/// Threads of a combine block (`COMBINE_WARPS` in combine.cu): eight warps
/// share a head's splits for 32 of its dims.
pub(super) const COMBINE_THREADS: u32 = 256;

/// The padded head dims and groups the vector kernels are built for,
/// smallest first: a head or group takes the smallest that holds it.
pub(super) const VECTOR_DIMS: [usize; 2] = [64, 128];

pub(super) const VECTOR_GROUPS: [usize; 4] = [1, 2, 4, 8];

/// Blocks the split step aims for at long context, over all KV heads: one
/// wave of two vector blocks per SM on today's largest GPUs (132 SMs).
pub(super) const TARGET_BLOCKS: usize = 264;

/// The fewest positions worth a split of their own.
pub(super) const MIN_POSITIONS_PER_SPLIT: usize = 64;

/// The arguments of the second step, `attention_combine_f32`.
pub(crate) mod combine {
    crate::ops::kernel_arguments! {
        PARTIALS: "partials" Read,
        OUT: "out" Write,
        QUERY_HEADS: "query_heads" U32,
        DIM: "dim" U32,
        SPLITS: "splits" U32,
    }
}

/// The arguments of `attention_combine_q8`: the combine's, and where its
/// output goes quantized for o_proj (the `Staged` layout).
pub(crate) mod combine_quantized {
    crate::ops::kernel_arguments! {
        PARTIALS: "partials" Read,
        OUT: "out" Write,
        QUANTIZED: "quantized" Write,
        QUERY_HEADS: "query_heads" U32,
        DIM: "dim" U32,
        SPLITS: "splits" U32,
    }
}

/// The arguments of the RoPE-fused split kernels (`attention_rope_split_*`):
/// the split's, with this position's key and value before RoPE and the
/// caches they are stored in, RoPE's frequencies and scaling.
pub(crate) mod rope {
    use crate::runtime::DType;

    /// The RoPE-fused vector kernel for a head dim, padded group and cache
    /// dtype (here, below the registration and the launch, which both name it).
    pub(crate) fn kernel_name(dim: usize, group: usize, dtype: DType) -> String {
        format!("attention_rope_split_d{dim}_g{group}_{dtype}")
    }

    crate::ops::kernel_arguments! {
        QUERY: "query" Read,
        KEY: "key" Read,
        VALUE: "value" Read,
        KEY_CACHE: "key_cache" ReadWrite,
        VALUE_CACHE: "value_cache" ReadWrite,
        INVERSE_FREQUENCIES: "inverse_frequencies" Read,
        POSITION_SLOT: "position_slot" Read,
        PARTIALS: "partials" Write,
        INDEX: "index" U32,
        QUERY_HEADS: "query_heads" U32,
        KV_HEADS: "kv_heads" U32,
        DIM: "dim" U32,
        MAX_POSITIONS: "max_positions" U32,
        SPLITS: "splits" U32,
        ATTENTION_SCALING: "attention_scaling" F32,
    }
}
