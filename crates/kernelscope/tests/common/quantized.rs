//! What the quantized-kernel tests share: random quantized matrices and
//! their exact products.

use kernelscope::ops::quantized::linear::BlockLayout;
use kernelscope::quant::QuantFormat;
use kernelscope::rng::SplitMix64;
use kernelscope::{Buffer, DType, Device};

/// A quantized matrix: its ggml blocks and what they dequantize to.
pub struct Matrix {
    pub format: QuantFormat,
    pub n: usize,
    pub k: usize,
    pub blocks: Vec<u8>,
    pub values: Vec<f32>,
}

/// `n` random rows of `blocks_per_row` blocks of `format`, each block of
/// 32 at its own scale (1e-3, 1 or 40; every fifth all positive).
pub fn random_matrix(format: QuantFormat, n: usize, blocks_per_row: usize, seed: u64) -> Matrix {
    let k = blocks_per_row * format.block_elements();
    let mut rng = SplitMix64::new(seed);
    let mut raw = rng.vec_f32(n * k, -1.0, 1.0);
    for (index, block) in raw.chunks_mut(32).enumerate() {
        let scale = [1e-3f32, 1.0, 40.0][(index * 7 + seed as usize) % 3];
        let positive = index % 5 == 2;
        for value in block {
            *value = if positive { value.abs() + 0.5 } else { *value } * scale;
        }
    }
    let row_bytes = format.row_bytes(k).unwrap();
    let mut blocks = vec![0u8; n * row_bytes];
    let mut values = vec![0.0f32; n * k];
    for row in 0..n {
        let stored = &mut blocks[row * row_bytes..(row + 1) * row_bytes];
        format.quantize_row(&raw[row * k..(row + 1) * k], stored).unwrap();
        format
            .dequantize_row(stored, &mut values[row * k..(row + 1) * k])
            .unwrap();
    }
    Matrix {
        format,
        n,
        k,
        blocks,
        values,
    }
}

impl Matrix {
    pub fn row_bytes(&self) -> usize {
        self.blocks.len() / self.n
    }

    /// The matrix on `device` in the layout its kernels read.
    pub fn upload(&self, device: &Device) -> Buffer {
        let layout = BlockLayout::of(device);
        let row_bytes = self.row_bytes();
        let arranged = layout.arrange(self.format, self.n, |row| {
            &self.blocks[row * row_bytes..(row + 1) * row_bytes]
        });
        let buffer = device
            .alloc(DType::U8, &[self.n, arranged.len() / self.n])
            .unwrap();
        buffer.write_bytes(&arranged).unwrap();
        buffer
    }
}

/// For each row of `m`: the exact product with `x` (f64), and the sum of
/// the magnitudes of its terms (what rounding errors scale with).
pub fn exact_products(m: &Matrix, x: &[f32]) -> Vec<(f64, f64)> {
    (0..m.n)
        .map(|row| {
            let w = &m.values[row * m.k..(row + 1) * m.k];
            w.iter().zip(x).fold((0.0, 0.0), |(sum, size), (&w, &x)| {
                let term = w as f64 * x as f64;
                (sum + term, size + term.abs())
            })
        })
        .collect()
}

/// `actual` against the exact products of the 8-bit x: within
/// `relative` of each row's magnitude.
pub fn assert_matches(actual: &[f32], expected: &[(f64, f64)], relative: f64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    let bad: Vec<String> = actual
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (a, (e, size)))| {
            let error = (**a as f64 - e).abs();
            error.is_nan() || error > relative * size + 1e-6
        })
        .take(5)
        .map(|(i, (a, (e, size)))| format!("[{i}] expected {e:e} (terms {size:e}), got {a:e}"))
        .collect();
    assert!(bad.is_empty(), "{what}: {}", bad.join("; "));
}

pub fn read(buffer: &Buffer) -> Vec<f32> {
    buffer.to_vec::<f32>().unwrap()
}

pub fn poisoned(device: &Device, len: usize) -> Buffer {
    device.buffer_from_slice(&vec![f32::NAN; len], &[len]).unwrap()
}

pub fn random(seed: u64, count: usize, scale: f32) -> Vec<f32> {
    SplitMix64::new(seed)
        .vec_f32(count, -1.0, 1.0)
        .iter()
        .map(|v| v * scale)
        .collect()
}

/// x as the CUDA kernels stage it: blocks of 32 at scale max|x| / 127,
/// each value rounded to a whole number of steps (half away from zero), in
/// the same f32 operations.
pub fn staged(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(32) {
        let largest = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = largest / 127.0;
        let inverse = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        out.extend(block.iter().map(|v| (v * inverse).round() * scale));
    }
    out
}

/// The RMSNorm epsilon of the fused-kernel tests.
pub const EPS: f32 = 1e-5;

/// RMSNorm of `x` on the host as the kernels stage it (f32 values).
pub fn normed(x: &[f32], norm_weight: &[f32]) -> Vec<f32> {
    let squares: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let scale = (1.0 / (squares / x.len() as f64 + EPS as f64).sqrt()) as f32;
    x.iter().zip(norm_weight).map(|(v, w)| v * scale * w).collect()
}

/// `actual[i]` against `silu(gate[i] · h) * (up[i] · h)` of the exact
/// products, for every row: errors in g and u (3e-3 of their magnitudes)
/// carried through silu(g)·u, whose slope in g is at most 1.1·|u|.
pub fn assert_gate_up_matches(gate: &Matrix, up: &Matrix, h: &[f32], actual: &[f32], what: &str) {
    let (gates, ups) = (exact_products(gate, h), exact_products(up, h));
    assert_eq!(actual.len(), gates.len(), "{what}: length");
    for (i, ((g, g_size), (u, u_size))) in gates.into_iter().zip(ups).enumerate() {
        let expected = g / (1.0 + (-g).exp()) * u;
        let bound = 3e-3 * (1.1 * g_size * u.abs() + u_size * g.abs().max(1.0)) + 1e-6;
        assert!(
            (actual[i] as f64 - expected).abs() <= bound,
            "{what} [{i}]: {} against {expected} (bound {bound:e})",
            actual[i]
        );
    }
}
