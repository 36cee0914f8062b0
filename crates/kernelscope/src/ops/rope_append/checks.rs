//! The shape checks every RoPE-and-append op makes (the plain one in
//! `mod.rs`, `normed`, and attention with RoPE fused in), below them so
//! that none imports another.

use crate::error::{Error, Result};
use crate::ops::attention::Heads;
use crate::ops::rope::RopeFrequencies;
use crate::ops::{expect, expect_indices, expect_kv_caches};
use crate::runtime::{Buffer, DType};

/// What [`check`] found of a dispatch's shapes.
pub(crate) struct Checked {
    /// Pairs rotated per head (half the head).
    pub half: usize,
    /// Key and value elements of one position.
    pub kv_dim: usize,
    /// Positions the caches hold.
    pub max_positions: usize,
}

/// The shape checks every RoPE-and-append op makes (this one and
/// `normed`): the heads against the frequencies, q, k and v against the
/// heads, the caches, and the position slot.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    op: &str,
    [query, key, value]: [&Buffer; 3],
    [key_cache, value_cache]: [&Buffer; 2],
    cache_dtype: DType,
    frequencies: &RopeFrequencies,
    positions: &Buffer,
    first: usize,
    heads: Heads,
) -> Result<Checked> {
    let checked = check_stores(
        op,
        query,
        [key_cache, value_cache],
        cache_dtype,
        frequencies,
        positions,
        first,
        heads,
    )?;
    let head_dim = heads.dim;
    expect(op, "key", key, DType::F32, &[heads.key_value, head_dim])?;
    expect(op, "value", value, DType::F32, &[heads.key_value, head_dim])?;
    Ok(checked)
}

/// [`check`] of everything but the new key and value: for the ops that
/// compute those themselves (q/k/v's mat-vecs with RoPE and the append in
/// their stores, `quantized::linear::fused`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_stores(
    op: &str,
    query: &Buffer,
    [key_cache, value_cache]: [&Buffer; 2],
    cache_dtype: DType,
    frequencies: &RopeFrequencies,
    positions: &Buffer,
    first: usize,
    heads: Heads,
) -> Result<Checked> {
    let inverse_frequencies = &frequencies.inverse_frequencies;
    let half = inverse_frequencies.len();
    let head_dim = 2 * half;
    heads.check(op)?;
    if heads.dim != head_dim {
        return Err(Error::ShapeMismatch {
            context: format!("{op} head dimension against twice the inverse frequencies"),
            expected: vec![head_dim],
            found: vec![heads.dim],
        });
    }
    let kv_dim = heads.key_value * head_dim;
    expect(
        op,
        "inverse frequencies",
        inverse_frequencies,
        DType::F32,
        &[half],
    )?;
    expect(op, "query", query, DType::F32, &[heads.query, head_dim])?;
    let max_positions = expect_kv_caches(op, key_cache, value_cache, cache_dtype, kv_dim)?;
    expect_indices(op, "positions", positions, first, 1)?;
    Ok(Checked {
        half,
        kv_dim,
        max_positions,
    })
}
