//! The CPU mat-vecs' inner product in the widest instructions the CPU has,
//! chosen once at run time: AVX-512 BF16 (`vdpbf16ps`, 32 bf16 products an
//! instruction accumulated in f32), AVX2 + FMA (weights widened to f32), or
//! portable Rust. A bf16 mat-vec on AVX2 spends as many instructions
//! widening weights as on the multiply-adds themselves, and on the 2-core
//! development machine read its weights at 53 to 80 % of the read ceiling;
//! `vdpbf16ps` does the widening in the multiply.
//!
//! bf16 weights meet x in exact f32 products by default: each pair of
//! weights (one 32-bit word) widened by a shift and a mask, multiplied in
//! f32 fused multiply-adds against x de-interleaved once per mat-vec into
//! its even and odd elements, eight independent sums (`dot_x86::dot_bf16_avx2`).
//! The result is an f32 dot product summed in another order
//! (`DotPath::Avx512Bf16Exact` where the CPU has AVX-512 BF16, whose
//! prefill GEMM still takes `vdpbf16ps`; `DotPath::Avx2Fma` elsewhere).
//! It beat llama.cpp's bf16 decode on both hosts measured (docs/PERF.md).
//!
//! A named choice rounds instead (`DotPath::Avx512Bf16`,
//! `--cpu-kernels avx512-bf16`): x split once into two bf16 parts, x =
//! high + low, each row dotted with both by `vdpbf16ps` (a bf16 weight times
//! a bf16 part is exact in f32, but two parts hold 16 of x's 24 mantissa
//! bits). A decode of the 1B moved its logits by at most 0.24 (mean 0.026)
//! from the f32 path's (docs/perf-history.md); on the 16-core Xeon it ran
//! slower than the exact path. Rounding x to one bf16 part (llama.cpp's way)
//! moved them by 0.95 (mean 0.14). Every path is tested against the exact
//! product on random data, each forced in turn.

use std::sync::atomic::{AtomicU8, Ordering};

use half::bf16;

#[cfg(target_arch = "x86_64")]
use super::dot_x86;
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
    /// As [`DotPath::Avx512Bf16Exact`] with bf16 mat-vecs on `vdpbf16ps`
    /// and x in two bf16 parts (16 bits of its mantissa): a rounding,
    /// offered by name, never the default.
    Avx512Bf16,
    /// The default where the CPU has AVX-512 BF16: bf16 mat-vecs in exact
    /// f32 products (AVX2 + FMA, weights widened pairwise), the prefill
    /// GEMM on `vdpbf16ps`, other weight dtypes on AVX2 + FMA.
    Avx512Bf16Exact,
}

impl DotPath {
    /// Every path; the last this CPU supports is its default.
    pub const ALL: [DotPath; 4] = [
        DotPath::Portable,
        DotPath::Avx2Fma,
        DotPath::Avx512Bf16,
        DotPath::Avx512Bf16Exact,
    ];

    /// The instruction set as a reader would look it up.
    pub fn name(self) -> &'static str {
        match self {
            DotPath::Portable => "portable",
            DotPath::Avx2Fma => "AVX2+FMA",
            DotPath::Avx512Bf16Exact => "AVX-512 BF16",
            DotPath::Avx512Bf16 => "AVX-512 BF16 (x rounded to two bf16 parts)",
        }
    }

    /// Whether bf16 weights take `vdpbf16ps` on this path: the prefill GEMM
    /// (`ops::matmul`) on both AVX-512 BF16 paths, the mat-vecs only where
    /// x is split into parts ([`x_parts`](Self::x_parts)).
    pub fn takes_bf16_products(self) -> bool {
        matches!(self, DotPath::Avx512Bf16Exact | DotPath::Avx512Bf16)
    }

    /// How many bf16 parts x is split into for bf16 mat-vecs on this path
    /// (0: not split, the products exact).
    pub fn x_parts(self) -> usize {
        match self {
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
    /// x's two bf16 parts (the rounding path).
    parts: Option<[Vec<bf16>; 2]>,
    /// bf16 weights on the AVX-512 BF16 path with x longer than
    /// [`PARTS_IN_L1`]: dotted by `dot_x86::dot_bf16_f32`.
    widened: bool,
    /// bf16 weights on the AVX2 + FMA path: x's even elements, then its odd
    /// ones, matching how `dot_x86::dot_bf16_avx2` widens a pair of weights
    /// (one shift, one mask) without reordering them.
    deinterleaved: Option<Vec<f32>>,
    path: DotPath,
}

/// The longest x whose bf16 parts (4 or 6 bytes an element) stay in a
/// 32 KiB L1 beside the rows' stream. Longer, x's parts were read back from
/// L2 for every row: down_proj's (8,192 long, 48 KiB of parts) ran at 0.63
/// to 0.71 of the fused norm mat-vecs' bandwidth in the same profile, and
/// 0.73 to 0.86 with x in f32 (32 KiB) against widened weights, four
/// alternations on the 2-core EPYC (docs/PERF.md).
pub const PARTS_IN_L1: usize = 4096;

/// Rows [`PreparedX::dot_rows`] dots at once on the parts paths.
pub const ROWS_AT_ONCE: usize = 4;

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
            deinterleaved: None,
            path: dot_path(),
        }
    }

    /// `x` for rows of `W` on `path` (which must be supported).
    pub(crate) fn on<W: WeightElement>(x: &'a [f32], path: DotPath) -> PreparedX<'a> {
        let bf16_path = path.x_parts() > 0 && W::DTYPE == DType::BF16;
        let widened = bf16_path && x.len() > PARTS_IN_L1;
        let parts = (bf16_path && !widened).then(|| {
            let mut rest = x.to_vec();
            std::array::from_fn(|_| {
                rest.iter_mut()
                    .map(|value| {
                        let part = bf16::from_f32(*value);
                        *value -= part.to_f32();
                        part
                    })
                    .collect()
            })
        });
        let exact_bf16 = matches!(path, DotPath::Avx2Fma | DotPath::Avx512Bf16Exact);
        let deinterleaved = (exact_bf16 && W::DTYPE == DType::BF16).then(|| {
            let even = x.iter().step_by(2);
            let odd = x.iter().skip(1).step_by(2);
            even.chain(odd).copied().collect()
        });
        PreparedX {
            x,
            parts,
            widened,
            deinterleaved,
            path,
        }
    }

    /// `out[i] = rows[i] · x` for the `out.len()` rows of `k` elements one
    /// after another in `rows`. On the path with x in bf16 parts,
    /// [`ROWS_AT_ONCE`] rows share each load of the parts.
    #[inline]
    pub(crate) fn dot_rows<W: WeightElement>(&self, rows: &[W], k: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let (Some(parts), false) = (&self.parts, self.widened) {
            let rows: &[bf16] = bytemuck::cast_slice(rows);
            let mut groups = out.chunks_exact_mut(ROWS_AT_ONCE);
            let mut first = 0;
            for group in &mut groups {
                let group_rows: [&[bf16]; ROWS_AT_ONCE] =
                    std::array::from_fn(|row| &rows[(first + row) * k..(first + row + 1) * k]);
                // SAFETY: the parts exist only on the AVX-512 BF16 paths,
                // taken only where the CPU has AVX-512 F and BF16.
                let dots = unsafe { dot_x86::dot_bf16_parts_rows(group_rows, [&parts[0], &parts[1]]) };
                group.copy_from_slice(&dots);
                first += ROWS_AT_ONCE;
            }
            for (offset, value) in groups.into_remainder().iter_mut().enumerate() {
                let row = first + offset;
                *value = self.dot(bytemuck::cast_slice::<bf16, W>(&rows[row * k..(row + 1) * k]));
            }
            return;
        }
        for (row, value) in out.iter_mut().enumerate() {
            *value = self.dot(&rows[row * k..(row + 1) * k]);
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
                return unsafe { dot_x86::dot_bf16_f32(bytemuck::cast_slice(row), self.x) };
            }
            if let Some(parts) = &self.parts {
                let row: &[bf16] = bytemuck::cast_slice(row);
                // SAFETY: the parts exist only on the AVX-512 BF16 paths,
                // which `force_dot_path` and `DotPath::best` take only where
                // the CPU has AVX-512 F and BF16.
                return unsafe { dot_x86::dot_bf16_parts(row, [&parts[0], &parts[1]]) };
            }
            if let Some(deinterleaved) = &self.deinterleaved {
                let (even, odd) = deinterleaved.split_at(self.x.len().div_ceil(2));
                // SAFETY: only on the AVX2 + FMA path, chosen only where the
                // CPU has both (`DotPath::supported`).
                return unsafe { dot_x86::dot_bf16_avx2(bytemuck::cast_slice(row), self.x, even, odd) };
            }
            if self.path != DotPath::Portable {
                // SAFETY: every path but the portable one needs AVX2 and
                // FMA (`DotPath::supported`), checked when it was chosen.
                return unsafe { dot_x86::dot_avx2_fma(row, self.x) };
            }
        }
        super::element::dot_lanes::<W, false>(row, self.x)
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

    /// Several rows at once (`dot_rows`, groups of `ROWS_AT_ONCE` and the
    /// rows left over) give each row's own dot, on every supported path,
    /// for bf16 rows short enough for x's parts and past them.
    #[test]
    fn rows_dotted_together_equal_rows_dotted_alone() {
        let mut rng = SplitMix64::new(0x70e5);
        for path in DotPath::ALL.into_iter().filter(|path| path.supported()) {
            for length in [31, 64, 100, 2048, super::PARTS_IN_L1 + 3] {
                for rows in [1, 3, super::ROWS_AT_ONCE, super::ROWS_AT_ONCE + 1, 9, 16] {
                    let weights: Vec<bf16> = rng
                        .vec_f32(rows * length, -1.0, 1.0)
                        .into_iter()
                        .map(bf16::from_f32)
                        .collect();
                    let x = rng.vec_f32(length, -2.0, 2.0);
                    let prepared = PreparedX::on::<bf16>(&x, path);
                    let mut together = vec![f32::NAN; rows];
                    prepared.dot_rows(&weights, length, &mut together);
                    for (row, got) in together.iter().enumerate() {
                        let alone = prepared.dot(&weights[row * length..(row + 1) * length]);
                        let magnitude: f32 = weights[row * length..(row + 1) * length]
                            .iter()
                            .zip(&x)
                            .map(|(w, v)| (w.to_f32() * v).abs())
                            .sum();
                        assert!(
                            (got - alone).abs() <= 1e-5 * magnitude + 1e-6,
                            "{} length {length}, row {row} of {rows}: {got} together, {alone} alone",
                            path.name()
                        );
                    }
                }
            }
        }
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
