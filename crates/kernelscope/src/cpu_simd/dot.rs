//! The CPU mat-vecs' inner product in the widest instructions the CPU has,
//! chosen once at run time: AVX-512 BF16 (`vdpbf16ps`, 32 bf16 products an
//! instruction accumulated in f32), AVX2 + FMA (weights widened to f32), or
//! portable Rust. A bf16 mat-vec on AVX2 spends as many instructions
//! widening weights as on the multiply-adds themselves, and on the 2-core
//! development machine read its weights at 53 to 80 % of the read ceiling;
//! `vdpbf16ps` does the widening in the multiply.
//!
//! x is not rounded to bf16: it is split once per product into bf16 parts,
//! x = high + middle (+ low), each the bf16 rounding of what the parts
//! before it left, and each row is dotted with every part; a bf16 weight
//! times a bf16 part is exact in f32. Three parts hold all 24 bits of an
//! f32's mantissa, so the result is an f32 dot product summed in another
//! order (`DotPath::Avx512Bf16Exact`, the reference, which the transformers
//! parity tests take). Two parts hold 16 bits (`DotPath::Avx512Bf16`, the
//! default): a decode of the 1B moved its logits by at most 0.24 (mean
//! 0.026) from the AVX2 f32 path's, where the exact three parts differ from
//! that path by 0.15 (mean 0.015) through summation order alone, and it
//! reads the weights at the memory's rate where three parts ran 15-25 %
//! below it (17.65 / 17.38 against 13.48 / 14.68 tok/s, docs/PERF.md). Rounding x
//! to bf16 alone (one part, llama.cpp's way) moved them by 0.95 (mean
//! 0.14) and was no faster than two. Every path is tested against the exact
//! product on random data, each forced in turn.

use std::sync::atomic::{AtomicU8, Ordering};

use half::bf16;

use super::element::WeightElement;
use crate::error::{Error, Result};
use crate::runtime::DType;

/// A way of computing the CPU's dot products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotPath {
    /// Eight f32 lanes in plain Rust, for any CPU.
    Portable,
    /// The same loop compiled for AVX2 and FMA.
    Avx2Fma,
    /// bf16 weights: `vdpbf16ps` on x split into three bf16 parts, an
    /// exact f32 product (other weight dtypes take AVX2 + FMA, which the
    /// CPU then has).
    Avx512Bf16Exact,
    /// As [`DotPath::Avx512Bf16Exact`] with x in two parts (16 bits of its
    /// mantissa): the memory's rate, within f32 summation noise.
    Avx512Bf16,
}

impl DotPath {
    /// Every path, slowest first.
    pub const ALL: [DotPath; 4] = [
        DotPath::Portable,
        DotPath::Avx2Fma,
        DotPath::Avx512Bf16Exact,
        DotPath::Avx512Bf16,
    ];

    /// The instruction set as a reader would look it up.
    pub fn name(self) -> &'static str {
        match self {
            DotPath::Portable => "portable",
            DotPath::Avx2Fma => "AVX2+FMA",
            DotPath::Avx512Bf16Exact => "AVX-512 BF16 (x in three parts)",
            DotPath::Avx512Bf16 => "AVX-512 BF16",
        }
    }

    /// Whether bf16 weights take `vdpbf16ps` on this path (its mat-vecs,
    /// and the prefill GEMM, `ops::matmul`).
    pub fn takes_bf16_products(self) -> bool {
        matches!(self, DotPath::Avx512Bf16Exact | DotPath::Avx512Bf16)
    }

    /// How many bf16 parts x is split into on this path (0: not split).
    pub(crate) fn x_parts(self) -> usize {
        match self {
            DotPath::Avx512Bf16Exact => 3,
            DotPath::Avx512Bf16 => 2,
            _ => 0,
        }
    }

    /// Whether this CPU can run the path.
    pub fn supported(self) -> bool {
        match self {
            DotPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            DotPath::Avx2Fma => {
                std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            // BW for the GEMM's masked loads (`ops::matmul`), which takes
            // this path too, and VL for its register allocation; every CPU
            // with BF16 so far has both.
            DotPath::Avx512Bf16Exact | DotPath::Avx512Bf16 => {
                DotPath::Avx2Fma.supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest path this CPU supports.
    pub fn best() -> DotPath {
        DotPath::ALL
            .into_iter()
            .rev()
            .find(|path| path.supported())
            .unwrap_or(DotPath::Portable)
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(code: u8) -> Option<DotPath> {
        DotPath::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

/// The chosen path's code (0: not chosen yet).
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// The path the CPU mat-vecs take: [`DotPath::best`], found once, unless
/// [`force_dot_path`] chose another.
pub fn dot_path() -> DotPath {
    if let Some(path) = DotPath::from_code(CHOSEN.load(Ordering::Relaxed)) {
        return path;
    }
    let best = DotPath::best();
    // Another thread may have chosen meanwhile; the first choice stands.
    let _ = CHOSEN.compare_exchange(0, best.code(), Ordering::Relaxed, Ordering::Relaxed);
    DotPath::from_code(CHOSEN.load(Ordering::Relaxed)).unwrap_or(best)
}

/// Makes every later CPU mat-vec of this process take `path` (to compare
/// paths, or to measure one); refused, naming the path, where this CPU
/// cannot run it.
pub fn force_dot_path(path: DotPath) -> Result<()> {
    if !path.supported() {
        return Err(Error::CpuKernelsUnsupported {
            path: path.name(),
            available: DotPath::ALL
                .iter()
                .filter(|path| path.supported())
                .map(|path| path.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    CHOSEN.store(path.code(), Ordering::Relaxed);
    Ok(())
}

/// x made ready for many dot products with rows of one weight dtype: on the
/// AVX-512 BF16 paths with bf16 weights, x split into bf16 parts once,
/// or, where x is too long for its parts to stay in L1, widened weights
/// against x in AVX-512 F.
pub(crate) struct PreparedX<'a> {
    x: &'a [f32],
    /// Three parts, or two and an empty one.
    parts: Option<[Vec<bf16>; 3]>,
    /// bf16 weights on the AVX-512 BF16 path with x longer than
    /// [`PARTS_IN_L1`]: dotted by `x86::dot_bf16_f32`.
    widened: bool,
    path: DotPath,
}

/// The longest x whose bf16 parts (4 or 6 bytes an element) stay in a
/// 32 KiB L1 beside the rows' stream. Longer, x's parts were read back from
/// L2 for every row: down_proj's (8,192 long, 48 KiB of parts) ran at 0.63
/// to 0.71 of the fused norm mat-vecs' bandwidth in the same profile, and
/// 0.73 to 0.86 with x in f32 (32 KiB) against widened weights, four
/// alternations on the 2-core EPYC (docs/PERF.md).
pub const PARTS_IN_L1: usize = 4096;

impl<'a> PreparedX<'a> {
    /// `x` for rows of `W`, on the chosen path.
    pub(crate) fn new<W: WeightElement>(x: &'a [f32]) -> PreparedX<'a> {
        PreparedX::on::<W>(x, dot_path())
    }

    /// `x` as it is, for the f32 paths (the chosen one, AVX2 + FMA where the
    /// chosen one is AVX-512 BF16).
    pub(crate) fn unrounded(x: &'a [f32]) -> PreparedX<'a> {
        PreparedX {
            x,
            parts: None,
            widened: false,
            path: dot_path(),
        }
    }

    /// `x` for rows of `W` on `path` (which must be supported).
    pub(crate) fn on<W: WeightElement>(x: &'a [f32], path: DotPath) -> PreparedX<'a> {
        let bf16_path = path.takes_bf16_products() && W::DTYPE == DType::BF16;
        let widened = bf16_path && x.len() > PARTS_IN_L1;
        let parts = (bf16_path && !widened).then(|| {
            let mut rest = x.to_vec();
            let count = path.x_parts();
            std::array::from_fn(|part| {
                if part >= count {
                    return Vec::new();
                }
                rest.iter_mut()
                    .map(|value| {
                        let part = bf16::from_f32(*value);
                        *value -= part.to_f32();
                        part
                    })
                    .collect()
            })
        });
        PreparedX {
            x,
            parts,
            widened,
            path,
        }
    }

    /// `row · x`, `row` as long as x.
    #[inline]
    pub(crate) fn dot<W: WeightElement>(&self, row: &[W]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        {
            if self.widened {
                // SAFETY: only on the AVX-512 BF16 path (bf16 weights),
                // taken only where the CPU has AVX-512 F and BF16.
                return unsafe { x86::dot_bf16_f32(bytemuck::cast_slice(row), self.x) };
            }
            if let Some(parts) = &self.parts {
                let row: &[bf16] = bytemuck::cast_slice(row);
                // SAFETY: the parts exist only on the AVX-512 BF16 paths,
                // which `force_dot_path` and `DotPath::best` take only where
                // the CPU has AVX-512 F and BF16.
                return unsafe {
                    match parts {
                        [high, middle, low] if low.is_empty() => x86::dot_bf16_parts(row, [high, middle]),
                        [high, middle, low] => x86::dot_bf16_parts(row, [high, middle, low]),
                    }
                };
            }
            if self.path != DotPath::Portable {
                // SAFETY: every path but the portable one needs AVX2 and
                // FMA (`DotPath::supported`), checked when it was chosen.
                return unsafe { x86::dot_avx2_fma(row, self.x) };
            }
        }
        super::element::dot_lanes::<W, false>(row, self.x)
    }
}

/// How far ahead of the weights being dotted the CPU mat-vecs (bf16 here,
/// the quantized ones' integer rows too) ask for the next, in bytes: past a
/// short row, into the next, which lies after it. The hardware prefetcher
/// alone left a 2-thread mat-vec of three-part dots at 70-75 % of a plain
/// read loop's rate on the 2-core EPYC; asking 2 KiB ahead raised it to
/// about 89 % (1 to 16 KiB ahead were tried; docs/perf-history.md,
/// 2026-11-26, the loop's table in `git show fb4b29a:docs/PERF.md`) and
/// BF16 decode by 10 % (docs/PERF.md).
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 2048;

/// Asks for the `bytes` (whole 64-byte lines) [`PREFETCH_AHEAD`] past `at`,
/// which may lie past its row and its allocation: the address is computed
/// with `wrapping_add`, and only a prefetch touches it.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "sse")]
pub(crate) fn prefetch_ahead(at: *const u8, bytes: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let ahead = at.wrapping_add(PREFETCH_AHEAD);
    for line in (0..bytes).step_by(64) {
        // A prefetch never faults and changes no memory, whatever the address.
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::bf16;

    use super::WeightElement;

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot_avx2_fma<W: WeightElement>(row: &[W], x: &[f32]) -> f32 {
        crate::cpu_simd::element::dot_lanes::<W, true>(row, x)
    }

    /// `row · x` for a bf16 row and f32 x: each weight widened to f32 (its
    /// bits shifted up) and multiplied into f32 sums, four chains of 16.
    #[target_feature(enable = "avx512f")]
    pub(super) fn dot_bf16_f32(row: &[bf16], x: &[f32]) -> f32 {
        let length = row.len().min(x.len());
        let mut sums = [_mm512_setzero_ps(); 4];
        let mut start = 0;
        while start + 64 <= length {
            prefetch_ahead(row, start);
            for (chain, sum) in sums.iter_mut().enumerate() {
                let at = start + 16 * chain;
                let weights = &row[at..at + 16];
                let values = &x[at..at + 16];
                // SAFETY: `weights` holds 16 bf16 (32 bytes) and `values` 16 f32 (64 bytes).
                let (bits, values) = unsafe {
                    (
                        _mm256_loadu_si256(weights.as_ptr().cast()),
                        _mm512_loadu_ps(values.as_ptr()),
                    )
                };
                let widened = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)));
                *sum = _mm512_fmadd_ps(widened, values, *sum);
            }
            start += 64;
        }
        let total = _mm512_add_ps(_mm512_add_ps(sums[0], sums[1]), _mm512_add_ps(sums[2], sums[3]));
        let mut total = _mm512_reduce_add_ps(total);
        for (weight, value) in row[start..length].iter().zip(&x[start..length]) {
            total = weight.to_f32().mul_add(*value, total);
        }
        total
    }

    /// `row · (parts[0] + parts[1] + ...)` for a bf16 row and parts of its
    /// length: 32 pairs an instruction, each part into its own f32
    /// accumulators (two chains each), then the rest one element at a time.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) fn dot_bf16_parts<const PARTS: usize>(row: &[bf16], parts: [&Vec<bf16>; PARTS]) -> f32 {
        const LANES: usize = 32;
        let length = parts
            .iter()
            .fold(row.len(), |length, part| length.min(part.len()));
        let mut sums = [[_mm512_setzero_ps(); PARTS]; 2];
        let mut start = 0;
        while start + 2 * LANES <= length {
            prefetch_ahead(row, start);
            for (chain, at) in [start, start + LANES].into_iter().enumerate() {
                let weights = load(row, at);
                for (part, values) in parts.iter().enumerate() {
                    let sum = &mut sums[chain][part];
                    *sum = _mm512_dpbf16_ps(*sum, weights, load(values, at));
                }
            }
            start += 2 * LANES;
        }
        if start + LANES <= length {
            let weights = load(row, start);
            for (part, values) in parts.iter().enumerate() {
                sums[0][part] = _mm512_dpbf16_ps(sums[0][part], weights, load(values, start));
            }
            start += LANES;
        }
        let total = sums
            .iter()
            .flatten()
            .fold(_mm512_setzero_ps(), |total, sum| _mm512_add_ps(total, *sum));
        let mut total = _mm512_reduce_add_ps(total);
        for (at, weight) in row.iter().enumerate().take(length).skip(start) {
            let value: f32 = parts.iter().map(|part| part[at].to_f32()).sum();
            total += weight.to_f32() * value;
        }
        total
    }

    /// Asks for the 128 bytes of weights [`super::PREFETCH_AHEAD`] bytes
    /// past element `at` of `row`, which may lie past the row's end.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn prefetch_ahead(row: &[bf16], at: usize) {
        super::prefetch_ahead(row.as_ptr().wrapping_add(at).cast(), 128);
    }

    /// The 32 bf16 of `values` from `at` (which must leave 32 in bounds).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn load(values: &[bf16], at: usize) -> __m512bh {
        let chunk = &values[at..at + 32];
        // SAFETY: `chunk` holds 32 bf16, the 64 bytes an unaligned load reads.
        let bits = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
        // SAFETY: both are 64-byte vectors of plain bits; the bf16 pairs
        // are the words as stored.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
    }
}

/// Dot product of a weight row and an f32 vector, accumulated in f32 over
/// eight lanes so the compiler can vectorise it, compiled for AVX2 and FMA
/// where the CPU has them (checked once, `dot_path`; the build
/// targets baseline x86-64). Mat-vecs that dot many rows with one x use
/// `PreparedX`, which also takes AVX-512 BF16 for bf16 weights.
#[inline]
pub(crate) fn dot<W: WeightElement>(row: &[W], x: &[f32]) -> f32 {
    PreparedX::unrounded(x).dot(row)
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::WeightElement;
    use super::{DotPath, PreparedX};
    use crate::rng::SplitMix64;

    /// Every supported path against the exact product, for each weight
    /// dtype and lengths around the vector widths, on random data.
    fn paths_match_the_exact_product<W: WeightElement>() {
        let supported: Vec<DotPath> = DotPath::ALL.into_iter().filter(|path| path.supported()).collect();
        assert!(supported.contains(&DotPath::Portable));
        let mut rng = SplitMix64::new(41);
        // Past PARTS_IN_L1, bf16 rows on the AVX-512 BF16 path take widened weights.
        for length in [
            1,
            7,
            31,
            32,
            33,
            63,
            64,
            65,
            100,
            2048,
            4096,
            4099,
            8192,
            8192 + 37,
        ] {
            let row: Vec<W> = rng
                .vec_f32(length, -1.0, 1.0)
                .into_iter()
                .map(W::from_f32)
                .collect();
            let x = rng.vec_f32(length, -2.0, 2.0);
            let exact: f64 = row
                .iter()
                .zip(&x)
                .map(|(w, v)| f64::from(w.to_f32()) * f64::from(*v))
                .sum();
            let magnitude: f64 = row
                .iter()
                .zip(&x)
                .map(|(w, v)| (f64::from(w.to_f32()) * f64::from(*v)).abs())
                .sum();
            for &path in &supported {
                let got = f64::from(PreparedX::on::<W>(&x, path).dot(&row));
                assert!(
                    (got - exact).abs() <= 2e-5 * magnitude + 1e-6,
                    "{} {:?} length {length}: {got} against {exact}",
                    path.name(),
                    W::DTYPE
                );
            }
        }
    }

    #[test]
    fn every_supported_path_matches_the_exact_product() {
        paths_match_the_exact_product::<f32>();
        paths_match_the_exact_product::<f16>();
        paths_match_the_exact_product::<bf16>();
        // Say which paths this machine checked, so a run without AVX-512
        // shows it did not test that one.
        eprintln!(
            "CPU dot paths checked: {}",
            DotPath::ALL
                .iter()
                .filter(|path| path.supported())
                .map(|path| path.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    #[test]
    fn an_unsupported_path_is_refused_naming_it() {
        for path in DotPath::ALL {
            if !path.supported() {
                let error = super::force_dot_path(path).unwrap_err().to_string();
                assert!(error.contains(path.name()), "{error}");
            }
        }
        // The portable path always exists; forcing it is not tested here, as
        // the choice is process-wide and other tests run beside this one.
        assert!(DotPath::Portable.supported());
    }
}
