//! CPU mat-mul `out[m, n] = x[m, k] · weight[n, k]ᵀ`, blocked so that it is
//! bound by arithmetic rather than memory.
//!
//! - The tokens are widened to f32 and packed once per call, sixteen to a
//!   block and interleaved along k, so one load gives sixteen tokens' values
//!   at one depth.
//! - Weight rows are taken six at a time (a panel) and widened to f32 once
//!   per chunk of depth; the chunk then stays in L1 while every token block
//!   passes over it.
//! - The register tile is 6 rows × 16 tokens: twelve 8-lane accumulators,
//!   each weight value broadcast once for two fused multiply-adds.
//! - A parallel task owns a group of panels and keeps their sums in its own
//!   buffer across the chunks, so `out` is written once, in spans of whole
//!   cache lines, rather than read and written back per chunk (which, for
//!   outputs larger than L2, cost as much as the arithmetic).
//!
//! As in `ops::dot`, the same loops are compiled for AVX2 and FMA where the
//! CPU has them (checked at run time), and there the two layout changes
//! (tokens into blocks, tiles into output rows) are 8 × 8 transposes in
//! registers.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::output::Output;
use super::{K, M, N, OUT, WEIGHT, X};

/// Tokens per packed block: two 8-lane vectors.
const BLOCK_TOKENS: usize = 16;
/// Weight rows per panel: with two token vectors, twelve accumulators,
/// which leaves AVX2's other four registers for the tokens and a weight.
const PANEL_ROWS: usize = 6;
/// Depth per chunk: a panel chunk (12 KiB in f32) stays in L1, and the
/// packed tokens' chunk (32 KiB per block) in L2, while they are reused.
const DEPTH: usize = 512;
/// Panels per parallel task at most: 48 columns, so each token's part of
/// `out` is three whole cache lines, and the task's sums (24 KiB for 128
/// tokens) stay in L1.
const TASK_PANELS: usize = 8;

/// One register tile's sums: `[row][token]` of a panel and a token block.
type Tile = [[f32; BLOCK_TOKENS]; PANEL_ROWS];

/// `out` f32 `[m, n]` = `x` `[m, k]` · `weight` `[n, k]`ᵀ, x and weight of
/// the same dtype, accumulated in f32.
pub(super) fn matmul<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let weight = args.input::<W>(WEIGHT)?;
    let x = args.input::<W>(X)?;
    let out = args.output::<f32>(OUT)?;
    let (m, n, k) = (
        args.u32(M)? as usize,
        args.u32(N)? as usize,
        args.u32(K)? as usize,
    );
    if weight.len() < n * k || x.len() < m * k || out.len() < m * n {
        return Err(Error::KernelFailed {
            kernel: "matmul".into(),
            message: format!(
                "[{m}, {n}, {k}] needs {} weights, {} inputs and {} outputs; given {}, {} and {}",
                n * k,
                m * k,
                m * n,
                weight.len(),
                x.len(),
                out.len()
            ),
        });
    }
    let (weight, x, out) = (&weight[..n * k], &x[..m * k], &mut out[..m * n]);
    #[cfg(target_arch = "x86_64")]
    if super::cpu_bf16::uses_bf16_products(W::DTYPE) && m > 0 && n > 0 && k > 0 {
        let (weight, x) = (bytemuck::cast_slice(weight), bytemuck::cast_slice(x));
        rayon::scope(|_| super::cpu_bf16::product(weight, x, out, [m, n, k]));
        return Ok(());
    }
    let fused = fma_available();
    // On a pool thread, so that the packing and the products that follow
    // start their parallel work without another hand-over from the
    // queue's thread (a wake-up is about 10 µs, a tiny projection 30).
    rayon::scope(|_| product(weight, x, out, [m, n, k], fused));
    Ok(())
}

/// `out[m, n] = x[m, k] · weight[n, k]ᵀ` (slices of exactly those sizes),
/// with the AVX2 and FMA loops when `fused`, which the caller sets only
/// where the CPU has them.
fn product<W: WeightElement>(weight: &[W], x: &[W], out: &mut [f32], [m, n, k]: [usize; 3], fused: bool) {
    if k == 0 {
        out.fill(0.0);
        return;
    }
    if m == 0 || n == 0 {
        return;
    }
    let tokens = pack_tokens(x, m, k, fused);
    let output = Output::new(out, n);
    let panels = n.div_ceil(PANEL_ROWS);
    // Several tasks per thread, so a thread slowed by others on the machine
    // does not hold up the rest.
    let task_panels = (panels / (4 * rayon::current_num_threads())).clamp(1, TASK_PANELS);
    (0..panels.div_ceil(task_panels))
        .into_par_iter()
        .for_each(|task| {
            let first_row = task * task_panels * PANEL_ROWS;
            let rows = first_row..n.min(first_row + task_panels * PANEL_ROWS);
            let weights = &weight[rows.start * k..rows.end * k];
            rows_product(weights, &tokens, m, k, first_row, &output, fused);
        });
}

/// Whether the CPU has AVX2 and FMA (always false off x86-64).
fn fma_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x` `[m, k]` widened to f32 and packed as `[blocks, k, BLOCK_TOKENS]`:
/// block b at depth d holds tokens `16b..16b + 16` side by side, zeros past
/// the last token. With AVX2 (`fused`), full blocks are transposed eight by
/// eight in registers.
fn pack_tokens<W: WeightElement>(x: &[W], m: usize, k: usize, fused: bool) -> Vec<[f32; BLOCK_TOKENS]> {
    let blocks = m.div_ceil(BLOCK_TOKENS);
    let mut packed = vec![[0f32; BLOCK_TOKENS]; blocks * k];
    packed
        .par_chunks_mut(k)
        .zip(x.par_chunks(BLOCK_TOKENS * k))
        .for_each(|(block, rows)| {
            #[cfg(target_arch = "x86_64")]
            if fused && rows.len() == BLOCK_TOKENS * k {
                let rows: [&[W]; BLOCK_TOKENS] = std::array::from_fn(|lane| &rows[lane * k..(lane + 1) * k]);
                // SAFETY: `fused` is only set where the CPU has AVX2 and FMA
                // (`fma_available`).
                unsafe { avx2::pack_block(&rows, block) };
                return;
            }
            let _ = fused;
            for (lane, row) in rows.chunks_exact(k).enumerate() {
                for (line, value) in block.iter_mut().zip(row) {
                    line[lane] = value.to_f32();
                }
            }
        });
    packed
}

/// One task's outputs, `out[:, first_column..first_column + rows]` where
/// rows = `weights.len() / k`, for every token.
fn rows_product<W: WeightElement>(
    weights: &[W],
    tokens: &[[f32; BLOCK_TOKENS]],
    m: usize,
    k: usize,
    first_column: usize,
    output: &Output<'_>,
    fused: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if fused {
            // SAFETY: the CPU supports AVX2 and FMA (`fma_available`).
            unsafe { rows_product_avx2_fma(weights, tokens, m, k, first_column, output) };
            return;
        }
    }
    let _ = fused;
    rows_product_lanes::<W, false>(weights, tokens, m, k, first_column, output);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_product_avx2_fma<W: WeightElement>(
    weights: &[W],
    tokens: &[[f32; BLOCK_TOKENS]],
    m: usize,
    k: usize,
    first_column: usize,
    output: &Output<'_>,
) {
    rows_product_lanes::<W, true>(weights, tokens, m, k, first_column, output);
}

/// The task's loops. `FUSED`, set only on the AVX2 and FMA path, uses fused
/// multiply-add (only fast where the target has FMA) and the AVX2
/// transposes.
#[inline(always)]
fn rows_product_lanes<W: WeightElement, const FUSED: bool>(
    weights: &[W],
    tokens: &[[f32; BLOCK_TOKENS]],
    m: usize,
    k: usize,
    first_column: usize,
    output: &Output<'_>,
) {
    let rows = weights.len() / k;
    let blocks = tokens.len() / k;
    // Sums by panel, then token block, carried across the chunks of depth.
    let mut sums = vec![[[0f32; BLOCK_TOKENS]; PANEL_ROWS]; rows.div_ceil(PANEL_ROWS) * blocks];
    let mut panel = vec![0f32; PANEL_ROWS * DEPTH];
    for start in (0..k).step_by(DEPTH) {
        let depth = DEPTH.min(k - start);
        for (panel_weights, panel_sums) in weights.chunks(PANEL_ROWS * k).zip(sums.chunks_exact_mut(blocks)) {
            for (row, widened) in panel.chunks_exact_mut(DEPTH).enumerate() {
                let widened = &mut widened[..depth];
                match panel_weights.get(row * k + start..row * k + start + depth) {
                    Some(weights) => {
                        for (value, weight) in widened.iter_mut().zip(weights) {
                            *value = weight.to_f32();
                        }
                    }
                    // Past a last panel's rows: zeros, whose sums are not stored.
                    None => widened.fill(0.0),
                }
            }
            let panel_rows: [&[f32]; PANEL_ROWS] =
                std::array::from_fn(|row| &panel[row * DEPTH..row * DEPTH + depth]);
            for (block_tokens, tile_sums) in tokens.chunks_exact(k).zip(panel_sums.iter_mut()) {
                tile::<FUSED>(&panel_rows, &block_tokens[start..start + depth], tile_sums);
            }
        }
    }
    // Each tile transposed into its tokens' columns: six consecutive
    // elements of each token's output row, a task's panels side by side.
    for (panel, panel_sums) in sums.chunks_exact(blocks).enumerate() {
        let count = PANEL_ROWS.min(rows - panel * PANEL_ROWS);
        for (block, tile) in panel_sums.iter().enumerate() {
            let first_token = block * BLOCK_TOKENS;
            let columns = transposed::<FUSED>(tile);
            for (lane, column) in columns.iter().enumerate().take(m - first_token) {
                output.store(
                    first_token + lane,
                    first_column + panel * PANEL_ROWS,
                    &column[..count],
                );
            }
        }
    }
}

/// A tile by token: `[token][row]`, rows past the panel's six zero. With
/// `FUSED` (so AVX2) in registers, else element by element.
#[inline(always)]
fn transposed<const FUSED: bool>(tile: &Tile) -> [[f32; 8]; BLOCK_TOKENS] {
    #[cfg(target_arch = "x86_64")]
    if FUSED {
        // SAFETY: `FUSED` code runs only inside `rows_product_avx2_fma`,
        // which is called only where the CPU has AVX2 and FMA.
        return unsafe { avx2::transposed_tile(tile) };
    }
    std::array::from_fn(|lane| {
        std::array::from_fn(|row| if row < PANEL_ROWS { tile[row][lane] } else { 0.0 })
    })
}

/// The register tile: `sums[r][t] += Σ_d panel_rows[r][d] · tokens[d][t]`
/// over one chunk of depth (every slice as long as `tokens`).
#[inline(always)]
fn tile<const FUSED: bool>(
    panel_rows: &[&[f32]; PANEL_ROWS],
    tokens: &[[f32; BLOCK_TOKENS]],
    sums: &mut Tile,
) {
    let depth = tokens.len();
    let panel_rows: [&[f32]; PANEL_ROWS] = std::array::from_fn(|row| &panel_rows[row][..depth]);
    // A local copy, so the sums live in registers for the whole chunk.
    let mut tile = *sums;
    for (d, values) in tokens.iter().enumerate() {
        for (row, row_sums) in tile.iter_mut().enumerate() {
            let weight = panel_rows[row][d];
            for (sum, &value) in row_sums.iter_mut().zip(values) {
                *sum = if FUSED {
                    weight.mul_add(value, *sum)
                } else {
                    *sum + weight * value
                };
            }
        }
    }
    *sums = tile;
}

/// The two layout changes as 8 × 8 transposes in AVX2 registers: tokens
/// into packed blocks, and tiles into output rows. Element by element they
/// cost a third of the arithmetic at k = 128.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };

    use super::{BLOCK_TOKENS, PANEL_ROWS, Tile};
    use crate::ops::WeightElement;

    /// `columns[i][j] = rows[j][i]`.
    #[target_feature(enable = "avx2")]
    fn transpose(rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
        let r: [__m256; 8] = bytemuck::cast(rows);
        // Pairs of rows interleaved, then quadruples, then the 128-bit halves.
        let t = [
            _mm256_unpacklo_ps(r[0], r[1]),
            _mm256_unpackhi_ps(r[0], r[1]),
            _mm256_unpacklo_ps(r[2], r[3]),
            _mm256_unpackhi_ps(r[2], r[3]),
            _mm256_unpacklo_ps(r[4], r[5]),
            _mm256_unpackhi_ps(r[4], r[5]),
            _mm256_unpacklo_ps(r[6], r[7]),
            _mm256_unpackhi_ps(r[6], r[7]),
        ];
        let q = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xee>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xee>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xee>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xee>(t[5], t[7]),
        ];
        bytemuck::cast([
            _mm256_permute2f128_ps::<0x20>(q[0], q[4]),
            _mm256_permute2f128_ps::<0x20>(q[1], q[5]),
            _mm256_permute2f128_ps::<0x20>(q[2], q[6]),
            _mm256_permute2f128_ps::<0x20>(q[3], q[7]),
            _mm256_permute2f128_ps::<0x31>(q[0], q[4]),
            _mm256_permute2f128_ps::<0x31>(q[1], q[5]),
            _mm256_permute2f128_ps::<0x31>(q[2], q[6]),
            _mm256_permute2f128_ps::<0x31>(q[3], q[7]),
        ])
    }

    /// `block[d][lane] = rows[lane][d]` widened, for a full block (every
    /// row as long as `block`).
    #[target_feature(enable = "avx2")]
    pub(super) fn pack_block<W: WeightElement>(
        rows: &[&[W]; BLOCK_TOKENS],
        block: &mut [[f32; BLOCK_TOKENS]],
    ) {
        let k = block.len();
        let whole = k - k % 8;
        for start in (0..whole).step_by(8) {
            for half in 0..BLOCK_TOKENS / 8 {
                let gathered: [[f32; 8]; 8] = std::array::from_fn(|lane| {
                    let row = &rows[half * 8 + lane][start..start + 8];
                    std::array::from_fn(|offset| row[offset].to_f32())
                });
                for (line, depth) in block[start..start + 8].iter_mut().zip(transpose(gathered)) {
                    line[half * 8..half * 8 + 8].copy_from_slice(&depth);
                }
            }
        }
        for (d, line) in block.iter_mut().enumerate().skip(whole) {
            for (value, row) in line.iter_mut().zip(rows) {
                *value = row[d].to_f32();
            }
        }
    }

    /// A tile by token: `[token][row]`, rows past the panel's six zero.
    #[target_feature(enable = "avx2")]
    pub(super) fn transposed_tile(tile: &Tile) -> [[f32; 8]; BLOCK_TOKENS] {
        let mut columns = [[0f32; 8]; BLOCK_TOKENS];
        for half in 0..BLOCK_TOKENS / 8 {
            let rows: [[f32; 8]; 8] = std::array::from_fn(|row| {
                if row < PANEL_ROWS {
                    bytemuck::cast::<[f32; BLOCK_TOKENS], [[f32; 8]; 2]>(tile[row])[half]
                } else {
                    [0.0; 8]
                }
            });
            columns[half * 8..half * 8 + 8].copy_from_slice(&transpose(rows));
        }
        columns
    }
}

#[cfg(test)]
mod tests {
    use super::{fma_available, product};
    use crate::rng::SplitMix64;

    /// The portable loops (CPUs without AVX2 or FMA) and, where the CPU has
    /// them, the AVX2 ones, against a plain f64 sum; `tests/ops/matmul.rs` covers
    /// the op through the device, which takes only one of the two paths.
    #[test]
    fn both_paths_match_a_plain_sum() {
        let mut paths = vec![false];
        if fma_available() {
            paths.push(true);
        }
        for [m, n, k] in [[1, 1, 1], [17, 13, 9], [33, 7, 520], [16, 48, 8]] {
            let mut rng = SplitMix64::new((m * 10_000 + n * 100 + k) as u64);
            let weight = rng.vec_f32(n * k, -1.0, 1.0);
            let x = rng.vec_f32(m * k, -1.0, 1.0);
            for &fused in &paths {
                let mut out = vec![f32::NAN; m * n];
                product(&weight, &x, &mut out, [m, n, k], fused);
                for token in 0..m {
                    for row in 0..n {
                        let expected: f64 = (0..k)
                            .map(|i| f64::from(x[token * k + i]) * f64::from(weight[row * k + i]))
                            .sum();
                        let actual = f64::from(out[token * n + row]);
                        assert!(
                            (actual - expected).abs() <= 1e-5 * (1.0 + expected.abs()),
                            "m {m} n {n} k {k} fused {fused}: [{token}, {row}] {actual} vs {expected}"
                        );
                    }
                }
            }
        }
    }
}
