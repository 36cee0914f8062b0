//! CPU reference of the quantized products: weight rows in parallel, each
//! read in its blocks. One position dots the row's blocks with x directly;
//! a chunk of rows dequantizes each weight row once into a scratch row and
//! dots it with every input row, so the weights are read once per chunk.
//! The 8-bit integer products (`_q8`) run the row kernels of
//! [`integer_path`]: AVX-512 VNNI for Q8_0 and Q4_K, AVX2 for the rest where the
//! CPU has them, the portable ones of `quant::int8` elsewhere.

use rayon::prelude::*;

use crate::cpu_simd::dot::{DotPath, dot_path};
use crate::error::{Error, Result};
use crate::ops::dot;
use crate::quant::{Int8Activations, QuantFormat, quantize_activations};
use crate::runtime::KernelArgs;

use super::arguments::{K, N, OUT, ROWS, WEIGHT, X};
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};

/// The instructions the 8-bit integer products run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegerPath {
    /// `quant::int8`'s loops in plain Rust.
    Portable,
    /// `maddubs` and `madd` over whole blocks (`avx2`).
    Avx2,
    /// Q8_0 on `vpdpbusd`, two blocks a 512-bit register, and Q4_K four
    /// sub-blocks a register with `vpdpwssd` applying their scales
    /// (`avx512`); the other formats (Q6_K) and a prefill chunk's
    /// several-row Q4_K products as [`IntegerPath::Avx2`].
    Avx512Vnni,
}

impl IntegerPath {
    /// How a profile names it.
    pub fn name(self) -> &'static str {
        match self {
            IntegerPath::Portable => "portable",
            IntegerPath::Avx2 => "AVX2",
            IntegerPath::Avx512Vnni => "AVX-512 VNNI for Q8_0 and Q4_K, AVX2 for the others",
        }
    }
}

/// The integer products' path: the widest this CPU has within the mat-vecs'
/// [`dot_path`], so `--cpu-kernels avx2` or `portable` holds them to those
/// instructions as well (as a CPU without AVX-512 would).
pub fn integer_path() -> IntegerPath {
    #[cfg(target_arch = "x86_64")]
    match dot_path() {
        DotPath::Portable => {}
        DotPath::Avx2Fma if avx2::available() => return IntegerPath::Avx2,
        DotPath::Avx2Fma => {}
        _ if avx512::available() => return IntegerPath::Avx512Vnni,
        _ if avx2::available() => return IntegerPath::Avx2,
        _ => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = dot_path();
    IntegerPath::Portable
}

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 16;

/// A quantized product's operands, checked against its scalars.
pub(super) struct Operands<'a> {
    pub(super) weight: &'a [u8],
    pub(super) x: &'a [f32],
    pub(super) out: &'a mut [f32],
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) rows: usize,
    pub(super) row_bytes: usize,
}

/// The operands of `kernel`'s dispatch: `n` weight rows of `k` elements in
/// `format`'s blocks, `rows` input and output rows, each buffer at least
/// as long as its shape.
pub(super) fn operands<'a>(
    format: QuantFormat,
    kernel: &str,
    args: &'a KernelArgs<'_>,
) -> Result<Operands<'a>> {
    let weight = args.input::<u8>(WEIGHT)?;
    let x = args.input::<f32>(X)?;
    let out = args.output::<f32>(OUT)?;
    let (n, k, rows) = (
        args.u32(N)? as usize,
        args.u32(K)? as usize,
        args.u32(ROWS)? as usize,
    );
    let failed = |message: String| Error::KernelFailed {
        kernel: kernel.to_string(),
        message,
    };
    let row_bytes = format
        .row_bytes(k)
        .ok_or_else(|| failed(format!("{k} elements are not whole {format} blocks")))?;
    if weight.len() < n * row_bytes || x.len() < rows * k || out.len() < rows * n {
        return Err(failed("a buffer is shorter than its shape".into()));
    }
    Ok(Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    })
}

/// `out` f32 `[rows, n]` = `x` f32 `[rows, k]` times the transpose of
/// `weight`, `n` rows of `k` elements in `format`'s blocks.
pub(super) fn quantized_product(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matmul_{}", format.name());
    let Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    } = operands(format, &kernel, args)?;
    let failed = |message: String| Error::KernelFailed {
        kernel: kernel.clone(),
        message,
    };
    // Each task computes its weight rows for every input row.
    let results: Vec<Result<Vec<f32>>> = (0..n.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let first = task * ROWS_PER_TASK;
            let width = (first + ROWS_PER_TASK).min(n) - first;
            // [input row][weight row] of this task.
            let mut values = vec![0.0f32; rows * width];
            let mut scratch = vec![0.0f32; if rows > 1 { k } else { 0 }];
            for offset in 0..width {
                let row = first + offset;
                let blocks = &weight[row * row_bytes..(row + 1) * row_bytes];
                if rows == 1 {
                    values[offset] = format
                        .dot_row(blocks, &x[..k])
                        .map_err(|error| failed(error.to_string()))?;
                } else {
                    format
                        .dequantize_row(blocks, &mut scratch)
                        .map_err(|error| failed(error.to_string()))?;
                    for (r, input) in x.chunks_exact(k).take(rows).enumerate() {
                        values[r * width + offset] = dot(&scratch, input);
                    }
                }
            }
            Ok(values)
        })
        .collect();
    let results = results.into_iter().collect::<Result<Vec<_>>>()?;
    place_task_outputs(&results, rows, n, out);
    Ok(())
}

/// Places each task's outputs (`[input row][its weight rows]`, the tasks'
/// weight rows `ROWS_PER_TASK` apart) into `out` `[rows, n]`, where a
/// task's outputs are strided.
fn place_task_outputs(results: &[Vec<f32>], rows: usize, n: usize, out: &mut [f32]) {
    for (task, values) in results.iter().enumerate() {
        let first = task * ROWS_PER_TASK;
        let width = values.len() / rows.max(1);
        for (r, per_row) in values.chunks_exact(width.max(1)).enumerate() {
            out[r * n + first..r * n + first + width].copy_from_slice(per_row);
        }
    }
}

/// `out` f32 `[n]` = `weight` `[n, k]` · `x` f32 `[k]` with `x` quantized
/// once to 8-bit blocks and each weight block multiplied in integers
/// (`QuantFormat::dot_row_int8`), rows in parallel.
pub(super) fn quantized_product_int8(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matvec_{}_q8", format.name());
    let Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    } = operands(format, &kernel, args)?;
    let block = format
        .int8_block()
        .filter(|block| rows == 1 && k.is_multiple_of(*block));
    let Some(block) = block else {
        return Err(Error::KernelFailed {
            kernel,
            message: format!("one row of whole {format} blocks with an integer product"),
        });
    };
    let mut activations = Int8Activations::default();
    quantize_activations(&x[..k], block, &mut activations);
    let path = integer_path();
    out[..n]
        .par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            rows_int8(
                path,
                format,
                &weight[task * ROWS_PER_TASK * row_bytes..],
                row_bytes,
                &activations,
                chunk,
            )
        });
    Ok(())
}

/// `out` f32 `[rows, n]` = `x` f32 `[rows, k]` times the transpose of
/// `weight`, as [`quantized_product_int8`] does one row: every input row
/// quantized once to 8-bit blocks, then each task's weight rows (a few
/// kilobytes, held in cache) multiplied in integers with every input row,
/// so the weights are read once per chunk. In f32 (`quantized_product`)
/// a prefill chunk ran at a fifth of llama.cpp's speed on the 2-core EPYC:
/// each weight row dequantized and dotted in floats, four times the
/// instructions of the 8-bit products.
pub(super) fn quantized_matmul_int8(format: QuantFormat, args: &KernelArgs<'_>) -> Result<()> {
    let kernel = format!("matmul_{}_q8", format.name());
    let Operands {
        weight,
        x,
        out,
        n,
        k,
        rows,
        row_bytes,
    } = operands(format, &kernel, args)?;
    let Some(block) = format.int8_block().filter(|block| k.is_multiple_of(*block)) else {
        return Err(Error::KernelFailed {
            kernel,
            message: format!("rows of whole {format} blocks with an integer product"),
        });
    };
    let activations: Vec<Int8Activations> = x
        .chunks_exact(k)
        .take(rows)
        .map(|row| {
            let mut activations = Int8Activations::default();
            quantize_activations(row, block, &mut activations);
            activations
        })
        .collect();
    let path = integer_path();
    let results: Vec<Vec<f32>> = (0..n.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let first = task * ROWS_PER_TASK;
            let last = (first + ROWS_PER_TASK).min(n);
            let weights = &weight[first * row_bytes..last * row_bytes];
            // [input row][weight row] of this task.
            let mut values = vec![0.0f32; rows * (last - first)];
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            if format == QuantFormat::Q4_K && path != IntegerPath::Portable {
                // Four input rows per pass over a weight row.
                let width = last - first;
                while done + 4 <= rows {
                    let tile = [
                        &activations[done],
                        &activations[done + 1],
                        &activations[done + 2],
                        &activations[done + 3],
                    ];
                    for row in 0..width {
                        let blocks = &weights[row * row_bytes..(row + 1) * row_bytes];
                        // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                        let products = unsafe { avx2::q4_k_rows::<4>(blocks, tile) };
                        for (r, product) in products.into_iter().enumerate() {
                            values[(done + r) * width + row] = product;
                        }
                    }
                    done += 4;
                }
            }
            for (input, chunk) in activations[done..]
                .iter()
                .zip(values[done * (last - first)..].chunks_exact_mut(last - first))
            {
                rows_int8(path, format, weights, row_bytes, input, chunk);
            }
            values
        })
        .collect();
    place_task_outputs(&results, rows, n, out);
    Ok(())
}

/// `out[r]` for the rows of `weight` (row r at `r × row_bytes`) on `path`,
/// the [`integer_path`] its kernel found once.
pub(super) fn rows_int8(
    path: IntegerPath,
    format: QuantFormat,
    weight: &[u8],
    row_bytes: usize,
    x: &Int8Activations,
    out: &mut [f32],
) {
    match path {
        #[cfg(target_arch = "x86_64")]
        path @ (IntegerPath::Avx2 | IntegerPath::Avx512Vnni) => {
            let vnni = path == IntegerPath::Avx512Vnni;
            let row: unsafe fn(&[u8], &Int8Activations) -> f32 = match format {
                QuantFormat::Q8_0 if vnni => avx512::q8_0_row,
                QuantFormat::Q8_0 => avx2::q8_0_row,
                QuantFormat::Q4_K if vnni => avx512::q4_k_row,
                QuantFormat::Q4_K => avx2::q4_k_row,
                QuantFormat::Q6_K => avx2::q6_k_row,
                _ => return rows_int8_portable(format, weight, row_bytes, x, out),
            };
            for (index, value) in out.iter_mut().enumerate() {
                let blocks = &weight[index * row_bytes..(index + 1) * row_bytes];
                // SAFETY: the CPU has AVX2, FMA and F16C, and AVX-512 F, BW,
                // VL and VNNI on that path (`integer_path` checked, once).
                *value = unsafe { row(blocks, x) };
            }
        }
        _ => rows_int8_portable(format, weight, row_bytes, x, out),
    }
}

#[inline(always)]
fn rows_int8_portable(
    format: QuantFormat,
    weight: &[u8],
    row_bytes: usize,
    x: &Int8Activations,
    out: &mut [f32],
) {
    for (row, value) in out.iter_mut().enumerate() {
        let blocks = &weight[row * row_bytes..(row + 1) * row_bytes];
        *value = format.dot_row_int8(blocks, x).unwrap_or(f32::NAN);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{IntegerPath, rows_int8};
    use crate::quant::{Int8Activations, QuantFormat, quantize_activations};
    use crate::rng::SplitMix64;

    /// Whole mat-vecs through `cpu::rows_int8` equal the portable rows, row by
    /// row, for several row counts and widths, with AVX2's Q8_0 kernel and,
    /// where the CPU has VNNI, with AVX-512's (odd block counts among them,
    /// for its one-block tail).
    #[test]
    fn avx2_row_groups_equal_the_portable_rows() {
        if !super::super::avx2::available() {
            eprintln!("SKIPPED: this CPU has no AVX2");
            return;
        }
        let vnni_paths: &[bool] = if super::super::avx512::available() {
            &[false, true]
        } else {
            eprintln!("SKIPPED (the VNNI half): this CPU has no AVX-512 VNNI");
            &[false]
        };
        let mut rng = SplitMix64::new(0x4a);
        let formats = [QuantFormat::Q8_0, QuantFormat::Q4_K, QuantFormat::Q6_K];
        for (&vnni, format) in vnni_paths
            .iter()
            .flat_map(|vnni| formats.iter().map(move |format| (vnni, *format)))
        {
            let mut shapes = vec![(4usize, 256usize), (7, 512), (13, 1024), (1, 256)];
            if format == QuantFormat::Q8_0 {
                shapes.extend([(3, 32), (5, 96), (2, 2080)]);
            }
            for (rows, columns) in shapes {
                let row_bytes = format.row_bytes(columns).unwrap();
                let mut blocks = vec![0u8; rows * row_bytes];
                let mut magnitudes = Vec::new();
                let x: Vec<f32> = (0..columns).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
                for row in 0..rows {
                    let weights: Vec<f32> = (0..columns).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
                    magnitudes.push(weights.iter().zip(&x).map(|(w, x)| (w * x).abs()).sum::<f32>());
                    format
                        .quantize_row(&weights, &mut blocks[row * row_bytes..(row + 1) * row_bytes])
                        .unwrap();
                }
                let mut activations = Int8Activations::default();
                quantize_activations(&x, format.int8_block().unwrap(), &mut activations);
                let mut out = vec![f32::NAN; rows];
                let path = if vnni {
                    IntegerPath::Avx512Vnni
                } else {
                    IntegerPath::Avx2
                };
                rows_int8(path, format, &blocks, row_bytes, &activations, &mut out);
                for (row, (&fast, magnitude)) in out.iter().zip(&magnitudes).enumerate() {
                    let portable = format
                        .dot_row_int8(&blocks[row * row_bytes..(row + 1) * row_bytes], &activations)
                        .unwrap();
                    assert!(
                        (fast - portable).abs() <= 1e-5 * magnitude,
                        "{format} {rows}x{columns} row {row} (VNNI {vnni}): {fast} vs {portable}"
                    );
                }
            }
        }
    }
}
