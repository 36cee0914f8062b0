//! CPU reference of a prefill chunk's causal attention: rows in parallel,
//! softmax in f32 over the positions up to the row's own. Each KV head's
//! keys and values are widened to f32 once per call (keys transposed), so
//! that a query's scores and weighted sum are multiply-adds across
//! positions and dimensions with no horizontal sums: per-(row, head) dot
//! products, each ending in a sum of its lanes, made attention a third of
//! a 512-token prefill.

use rayon::prelude::*;

use crate::cpu_simd::exp::exp;
use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{
    DIM, FIRST, KEY_CACHE, KV_HEADS, MAX_POSITIONS, OUT, POSITIONS, QUERY, QUERY_HEADS, ROWS, VALUE_CACHE,
};

/// `out` `[rows, query_heads, dim]` (rounded to `O`): row r, head h attends
/// to cache positions `0..=positions[first + r]` of KV head `h / group`.
pub(super) fn prefill_attention<C: WeightElement, O: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let query = args.input::<f32>(QUERY)?;
    let (key_cache, value_cache) = (args.input::<C>(KEY_CACHE)?, args.input::<C>(VALUE_CACHE)?);
    let positions = args.input::<u32>(POSITIONS)?;
    let out = args.output::<O>(OUT)?;
    let (first, rows) = (args.u32(FIRST)? as usize, args.u32(ROWS)? as usize);
    let (query_heads, kv_heads, dim) = (
        args.u32(QUERY_HEADS)? as usize,
        args.u32(KV_HEADS)? as usize,
        args.u32(DIM)? as usize,
    );
    let max_positions = args.u32(MAX_POSITIONS)? as usize;
    if let Some(&position) = positions[first..first + rows]
        .iter()
        .find(|&&position| position as usize >= max_positions)
    {
        return Err(Error::KernelFailed {
            kernel: "prefill_attention".into(),
            message: format!("position {position} is beyond the cache's {max_positions} positions"),
        });
    }
    let group = query_heads / kv_heads;
    let scale = 1.0 / (dim as f32).sqrt();
    let rows_positions = &positions[first..first + rows];
    let seen = rows_positions
        .iter()
        .map(|&position| position as usize + 1)
        .max()
        .unwrap_or(0);
    let build = Build::of_this_cpu();
    // Each KV head's keys (transposed) and values in f32, widened once for
    // every row and query head that reads them.
    let heads: Vec<WidenedHead> = (0..kv_heads)
        .into_par_iter()
        .map(|head| WidenedHead::new(key_cache, value_cache, head, kv_heads, dim, seen))
        .collect();
    out.par_chunks_mut(query_heads * dim)
        .zip(query.par_chunks(query_heads * dim))
        .zip(rows_positions.par_iter())
        .for_each_init(
            || (Vec::new(), vec![0f32; dim]),
            |(scores, sum), ((out_row, query_row), &position)| {
                let length = position as usize + 1;
                for (head, (out_head, q)) in out_row
                    .chunks_exact_mut(dim)
                    .zip(query_row.chunks_exact(dim))
                    .enumerate()
                {
                    attend(build, &heads[head / group], q, length, scale, scores, sum);
                    for (o, s) in out_head.iter_mut().zip(sum.iter()) {
                        *o = O::from_f32(*s);
                    }
                }
            },
        );
    Ok(())
}

/// One KV head's cached keys and values, widened to f32 up to the last
/// position a row of the chunk reads: keys transposed (`[dim][positions]`),
/// so that a query's scores over 16 positions are one vector multiply-add
/// per dimension, values as stored (`[positions][dim]`).
struct WidenedHead {
    keys: Vec<f32>,
    values: Vec<f32>,
    positions: usize,
}

impl WidenedHead {
    fn new<C: WeightElement>(
        key_cache: &[C],
        value_cache: &[C],
        head: usize,
        kv_heads: usize,
        dim: usize,
        positions: usize,
    ) -> WidenedHead {
        let kv_dim = kv_heads * dim;
        let mut keys = vec![0f32; dim * positions];
        let mut values = Vec::with_capacity(positions * dim);
        for position in 0..positions {
            let at = position * kv_dim + head * dim;
            for (d, key) in key_cache[at..at + dim].iter().enumerate() {
                keys[d * positions + position] = key.to_f32();
            }
            values.extend(value_cache[at..at + dim].iter().map(|value| value.to_f32()));
        }
        WidenedHead {
            keys,
            values,
            positions,
        }
    }
}

/// The widest build of [`attend`] this CPU runs, found once per dispatch
/// rather than once per row and head.
#[derive(Clone, Copy)]
enum Build {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Plain,
}

impl Build {
    fn of_this_cpu() -> Build {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Build::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Build::Avx2;
            }
        }
        Build::Plain
    }
}

/// `sum` = softmax(scale · q · keysᵀ) · values over the first `length`
/// positions of `head`, with `scores` as scratch: compiled for AVX-512 or
/// AVX2 where the CPU has them (`build`; no fused multiply-add, so every
/// build rounds alike), which turn its loops into vector instructions.
fn attend(
    build: Build,
    head: &WidenedHead,
    q: &[f32],
    length: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    sum: &mut [f32],
) {
    match build {
        // SAFETY: `Build::of_this_cpu` chose it where the CPU has AVX-512 F.
        #[cfg(target_arch = "x86_64")]
        Build::Avx512 => unsafe { attend_avx512(head, q, length, scale, scores, sum) },
        // SAFETY: `Build::of_this_cpu` chose it where the CPU has AVX2.
        #[cfg(target_arch = "x86_64")]
        Build::Avx2 => unsafe { attend_avx2(head, q, length, scale, scores, sum) },
        Build::Plain => attend_body(head, q, length, scale, scores, sum),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn attend_avx512(
    head: &WidenedHead,
    q: &[f32],
    length: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    sum: &mut [f32],
) {
    attend_body(head, q, length, scale, scores, sum);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn attend_avx2(
    head: &WidenedHead,
    q: &[f32],
    length: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    sum: &mut [f32],
) {
    attend_body(head, q, length, scale, scores, sum);
}

/// Positions (scores) or dimensions (the weighted sum) a register block
/// holds: 64 f32, four AVX-512 vectors, which stay in registers across the
/// loop over the other axis instead of being loaded and stored each step.
const BLOCK: usize = 64;

#[inline(always)]
fn attend_body(
    head: &WidenedHead,
    q: &[f32],
    length: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    sum: &mut [f32],
) {
    let dim = sum.len();
    scores.clear();
    scores.resize(length, 0.0);
    // Scores a block of positions at a time: each dimension adds q[d] times
    // a row of the transposed keys, independent across positions.
    let (whole, rest) = scores.as_chunks_mut::<BLOCK>();
    for (block, scores) in whole.iter_mut().enumerate() {
        let start = block * BLOCK;
        let mut accumulators = [0f32; BLOCK];
        for (d, &value) in q.iter().enumerate() {
            let row = d * head.positions + start;
            let keys: &[f32; BLOCK] = head.keys[row..row + BLOCK].try_into().expect("a whole block");
            for (accumulator, key) in accumulators.iter_mut().zip(keys) {
                *accumulator += value * key;
            }
        }
        *scores = accumulators;
    }
    let (start, left) = (whole.len() * BLOCK, rest.len());
    for (d, &value) in q.iter().enumerate() {
        let row = d * head.positions + start;
        for (score, key) in rest.iter_mut().zip(&head.keys[row..row + left]) {
            *score += value * key;
        }
    }
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s * scale));
    let mut total = 0.0;
    for score in scores.iter_mut() {
        *score = exp(*score * scale - max);
        total += *score;
    }
    let inverse_total = 1.0 / total;
    // The weighted sum a block of dimensions at a time, over every position.
    let (whole, rest) = sum.as_chunks_mut::<BLOCK>();
    for (block, sum) in whole.iter_mut().enumerate() {
        let start = block * BLOCK;
        let mut accumulators = [0f32; BLOCK];
        for (weight, values) in scores.iter().zip(head.values.chunks_exact(dim)) {
            let values: &[f32; BLOCK] = values[start..start + BLOCK].try_into().expect("a whole block");
            for (accumulator, value) in accumulators.iter_mut().zip(values) {
                *accumulator += weight * value;
            }
        }
        for (s, accumulator) in sum.iter_mut().zip(accumulators) {
            *s = accumulator * inverse_total;
        }
    }
    let start = whole.len() * BLOCK;
    rest.fill(0.0);
    for (weight, values) in scores.iter().zip(head.values.chunks_exact(dim)) {
        for (s, value) in rest.iter_mut().zip(&values[start..]) {
            *s += weight * value;
        }
    }
    for s in rest.iter_mut() {
        *s *= inverse_total;
    }
}
