//! q, k and v's mat-vecs with RoPE and the KV-cache append in their stores
//! (`matvecs_rope_<format>_q8_bf16`, products.cuh): one decode position's
//! query rotated into its buffer, its key rotated and its value stored
//! into bf16 caches, so `rope_append` needs no kernel of its own. Each
//! format's product takes the matrices of [q; k; v] it holds (a Q4_K_M
//! layer's q and k in Q4_K, its v in Q6_K: two products over one staged
//! x). The reference is the composition the engine runs otherwise:
//! `matvecs_<format>_q8`, then `rope_append`.

use super::super::layout::{BlockLayout, weight_blocks};
use super::{QuantizedFused, Reader, StagedInput, matvecs_rope, product_grid};
use crate::Buffer;
use crate::error::{Error, Result};
use crate::ops::rope_append::{Checked, RopeAppendStores};
use crate::ops::{Arguments, bytes_of};
use crate::runtime::{CommandEncoder, DType, OpKind, Primitive};

use super::super::cuda::{CUDA_MOST_BLOCKS, ROWS_PER_WARP, staged_bytes};
use super::super::streamed_rope::rope_arguments;

/// The name errors give the op.
const OP: &str = "quantized matvecs_rope";

/// The parts of [q; k; v] a product's first matrix may begin with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryKeyValue {
    /// q's rows, `heads.query * heads.dim`.
    Query = 0,
    /// k's rows, `heads.key_value * heads.dim`.
    Key = 1,
    /// v's rows, as many as k's.
    Value = 2,
}

impl QuantizedFused {
    /// The dtype of the caches [`encode_matvecs_rope_staged`](Self::encode_matvecs_rope_staged)
    /// stores into.
    pub const ROPE_CACHE_DTYPE: DType = DType::BF16;

    /// The reader of the norm stage before
    /// [`encode_matvecs_rope_staged`](Self::encode_matvecs_rope_staged) of
    /// `weights` (this format's matrices of q, k and v, in order):
    /// [`Reader::Streamed`] where that runs the streamed kernel.
    pub fn matvecs_rope_reader(&self, weights: &[&Buffer]) -> Reader {
        Reader::streamed_where(self.matvecs_rope_streams(weights))
    }

    /// Whether the streamed q/k/v kernel has a plan for `weights`.
    fn matvecs_rope_streams(&self, weights: &[&Buffer]) -> bool {
        let Some(streamed) = self.streamed_query_key_value.as_ref() else {
            return false;
        };
        let mut rows = 0;
        let mut length = None;
        for weight in weights {
            let Ok((n, _, k)) = weight_blocks(OP, self.format, BlockLayout::Planes, weight) else {
                return false;
            };
            if length.is_some_and(|length| length != k) {
                return false;
            }
            rows += n;
            length = Some(k);
        }
        match (length, weights.first()) {
            (Some(k), Some(first)) => streamed.plan(rows, k, first.shape()[1]).is_some(),
            _ => false,
        }
    }

    /// `[weights...] · x` for the consecutive matrices of [q; k; v] from
    /// `first_part` on (one to three, whole matrices of this format), x as
    /// `staged` holds it, with RoPE and the append in the stores: q's rows
    /// rotated into `stores.query`, k's rotated and v's stored at the
    /// position in the caches. What [`encode_matvecs_staged`](Self::encode_matvecs_staged)
    /// into q, k and v then `RopeAppend::encode` do, bit for bit.
    pub fn encode_matvecs_rope_staged(
        &self,
        encoder: &mut CommandEncoder,
        staged: &StagedInput,
        weights: &[&Buffer],
        first_part: QueryKeyValue,
        stores: &RopeAppendStores<'_>,
    ) -> Result<()> {
        let heads = stores.heads;
        let Checked {
            half,
            kv_dim,
            max_positions,
        } = stores.check(OP, Self::ROPE_CACHE_DTYPE)?;
        let part_rows = [heads.query * heads.dim, kv_dim, kv_dim];
        let first = first_part as usize;
        if weights.is_empty() || first + weights.len() > part_rows.len() {
            return Err(Error::ShapeMismatch {
                context: format!("{OP} takes the matrices of q, k and v from {first_part:?} on"),
                expected: vec![part_rows.len() - first],
                found: vec![weights.len()],
            });
        }
        staged.expect_normalised(OP, matvecs_rope::X)?;
        let k = staged.length;
        let mut rows = [0usize; 3];
        let mut read = 0usize;
        for (slot, weight) in weights.iter().enumerate() {
            let (n, blocks, elements) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
            let part = first + slot;
            if (n, elements) != (part_rows[part], k) {
                return Err(Error::ShapeMismatch {
                    context: format!(
                        "{OP}: matrix {slot} is {:?}'s, rows of the heads' size as long as x",
                        [QueryKeyValue::Query, QueryKeyValue::Key, QueryKeyValue::Value][part]
                    ),
                    expected: vec![part_rows[part], k],
                    found: vec![n, elements],
                });
            }
            rows[slot] = n;
            read += n * blocks * self.format.block_bytes();
        }
        let n: usize = rows.iter().sum();
        let first_row: usize = part_rows[..first].iter().sum();
        let query_rows = part_rows[0].saturating_sub(first_row).min(n);
        let cached = n - query_rows;
        let weight = |slot: usize| weights.get(slot).copied().unwrap_or(weights[0]);
        let frequencies = stores.frequencies;
        let streamed = self
            .streamed_query_key_value
            .as_ref()
            .and_then(|streamed| streamed.plan(n, k, weights[0].shape()[1]));
        let list = match streamed {
            Some(_) => rope_arguments::ARGUMENTS,
            None => matvecs_rope::ARGUMENTS,
        };
        // The streamed kernel takes matvecs_rope's arguments first (a test
        // checks), then its slots.
        let arguments = Arguments::new(list)
            .buffer(matvecs_rope::X, &staged.buffer)
            .buffer(matvecs_rope::WEIGHT_A, weight(0))
            .buffer(matvecs_rope::WEIGHT_B, weight(1))
            .buffer(matvecs_rope::WEIGHT_C, weight(2))
            .scalar(matvecs_rope::ROWS_A, rows[0] as u32)
            .scalar(matvecs_rope::ROWS_B, rows[1] as u32)
            .scalar(matvecs_rope::ROWS_C, rows[2] as u32)
            .scalar(matvecs_rope::K, k as u32)
            .scalar(matvecs_rope::FIRST_ROW, first_row as u32)
            .buffer(matvecs_rope::QUERY, stores.query)
            .buffer(matvecs_rope::KEY_CACHE, stores.key_cache)
            .buffer(matvecs_rope::VALUE_CACHE, stores.value_cache)
            .buffer(
                matvecs_rope::INVERSE_FREQUENCIES,
                &frequencies.inverse_frequencies,
            )
            .buffer(matvecs_rope::POSITIONS, stores.positions)
            .scalar(matvecs_rope::FIRST, stores.first as u32)
            .scalar(matvecs_rope::MAX_POSITIONS, max_positions as u32)
            .scalar(matvecs_rope::QUERY_HEADS, heads.query as u32)
            .scalar(matvecs_rope::KV_HEADS, heads.key_value as u32)
            .scalar(matvecs_rope::HEAD_DIM, heads.dim as u32)
            .scalar(matvecs_rope::ATTENTION_SCALING, frequencies.attention_scaling);
        let dispatch = match streamed {
            Some((kernel, plan)) => arguments
                .scalar(rope_arguments::STAGES, plan.stages)
                .dispatch(kernel)?
                .grid(plan.grid),
            None => {
                arguments
                    .dispatch(&self.matvecs_rope)?
                    .grid(product_grid(n, ROWS_PER_WARP, CUDA_MOST_BLOCKS))
            }
        };
        encoder.dispatch(
            dispatch
                .cost(
                    (read + staged_bytes(k)) as u64 + bytes_of(half, DType::F32) + 4,
                    bytes_of(query_rows, DType::F32) + bytes_of(cached, Self::ROPE_CACHE_DTYPE),
                    2 * (n * k) as u64 + 6 * n as u64,
                )
                .op_kind(OpKind::fused(&[
                    Primitive::MatVec,
                    Primitive::Rope,
                    Primitive::Copy,
                ])),
        )
    }
}
