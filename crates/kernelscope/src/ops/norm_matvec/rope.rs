//! RMSNorm, q/k/v's mat-vecs, RoPE and the KV-cache append in one dispatch
//! for one decode position (`norm_matvec_rope_<dtype>`, rope.cu): the query
//! rotated into its buffer, the key rotated and the value stored into caches
//! of the weights' dtype, so neither q, k and v nor `rope_append`'s kernel
//! are needed. The reference is the composition the engine runs otherwise,
//! `norm_matvec` into q, k and v then `rope_append`, which the CUDA kernel
//! matches bit for bit (the same products, the same rotation).

pub(crate) use super::arguments::rope::{
    ARGUMENTS, ATTENTION_SCALING, EPS, FIRST, HEAD_DIM, INVERSE_FREQUENCIES, K, KEY_CACHE, KV_HEADS,
    MAX_POSITIONS, NORM_WEIGHT, POSITIONS, QUERY, QUERY_HEADS, VALUE_CACHE, WEIGHT_K, WEIGHT_Q, WEIGHT_V, X,
};
use super::cpu::norm_matvec_rope;
use super::{MOST_BLOCKS, check_normed_input};
use crate::error::Result;
use crate::ops::matvec::{cost, grid, with_core};
use crate::ops::rope_append::{Checked, RopeAppendStores};
use crate::ops::{Arguments, bytes_of, dimensions, expect, kernel_for, register_weight_kernels};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

/// The name errors give the op.
const OP: &str = "norm_matvec_rope";

/// Registers `norm_matvec_rope_<dtype>`.
pub fn register(registry: &mut KernelRegistry) {
    register_weight_kernels!(
        registry,
        "norm_matvec_rope",
        norm_matvec_rope,
        &with_core(include_str!("rope.cu"))
    );
}

/// The fused RMSNorm, q/k/v mat-vec, RoPE and KV-append op for one weight
/// dtype, which is also its caches'.
#[derive(Clone, Debug)]
pub struct NormMatVecRope {
    kernel: Kernel,
    dtype: DType,
}

impl NormMatVecRope {
    /// The op for weights and caches of `dtype` on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device, dtype: DType) -> Result<Self> {
        Ok(NormMatVecRope {
            kernel: kernel_for(registry, device, OP, dtype)?,
            dtype,
        })
    }

    /// `h = rmsnorm(x, eps) * norm_weight`, then `q = weights[0] · h`, `k =
    /// weights[1] · h`, `v = weights[2] · h` (each `[rows, k]`, rows the
    /// heads' size), q rotated into `stores.query`, k rotated and v stored
    /// at the position in the caches (of the weights' dtype): what
    /// `NormMatVec::encode` into q, k and v then `RopeAppend::encode` do.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        [weight_q, weight_k, weight_v]: [&Buffer; 3],
        stores: &RopeAppendStores<'_>,
        eps: f32,
    ) -> Result<()> {
        let heads = stores.heads;
        let Checked {
            half,
            kv_dim,
            max_positions,
        } = stores.check(OP, self.dtype)?;
        let [_, k] = dimensions(OP, "weight", weight_q)?;
        let query_rows = heads.query * heads.dim;
        for (name, weight, rows) in [
            ("q weight", weight_q, query_rows),
            ("k weight", weight_k, kv_dim),
            ("v weight", weight_v, kv_dim),
        ] {
            expect(OP, name, weight, self.dtype, &[rows, k])?;
        }
        check_normed_input(OP, x, norm_weight, self.dtype, k)?;
        let n = query_rows + 2 * kv_dim;
        let (read, _, flops) = cost(n, k, self.dtype);
        let frequencies = stores.frequencies;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(X, x)
                .buffer(NORM_WEIGHT, norm_weight)
                .buffer(WEIGHT_Q, weight_q)
                .buffer(WEIGHT_K, weight_k)
                .buffer(WEIGHT_V, weight_v)
                .buffer(QUERY, stores.query)
                .buffer(KEY_CACHE, stores.key_cache)
                .buffer(VALUE_CACHE, stores.value_cache)
                .buffer(INVERSE_FREQUENCIES, &frequencies.inverse_frequencies)
                .buffer(POSITIONS, stores.positions)
                .scalar(FIRST, stores.first as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(QUERY_HEADS, heads.query as u32)
                .scalar(KV_HEADS, heads.key_value as u32)
                .scalar(HEAD_DIM, heads.dim as u32)
                .scalar(K, k as u32)
                .scalar(EPS, eps)
                .scalar(ATTENTION_SCALING, frequencies.attention_scaling)
                .dispatch(&self.kernel)?
                .grid(grid(n, MOST_BLOCKS, (4 * k) as u32))
                .cost(
                    read + bytes_of(k, self.dtype) + bytes_of(half, DType::F32) + 4,
                    bytes_of(query_rows, DType::F32) + bytes_of(2 * kv_dim, self.dtype),
                    flops + 4 * k as u64 + 6 * n as u64,
                )
                .op_kind(OpKind::fused(&[
                    Primitive::RmsNorm,
                    Primitive::MatVec,
                    Primitive::Rope,
                    Primitive::Copy,
                ])),
        )
    }
}
