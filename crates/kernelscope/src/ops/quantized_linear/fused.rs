//! Decode's fused mat-vecs over quantized weights, as `ops::norm_matvec`
//! and `matvec::residual` are for dense ones: RMSNorm into the mat-vecs
//! that read it (`norm_matvec_<format>_q8`, up to three matrices of one
//! format), RMSNorm + gate/up + SiLU·mul (`norm_matvec_silu_<format>_q8`),
//! and the mat-vec adding into the residual stream
//! (`matvec_add_<format>_q8`). CUDA only: each block normalises and
//! quantizes x into its shared memory, so fusing costs no extra pass; the
//! CPU runs the steps apart. The references they are tested against are
//! the compositions of the RMSNorm, quantized mat-vec, SiLU·mul and add ops.

use super::{BlockLayout, ROWS_PER_WARP, check_staged, cuda_grid, quantized_kernel, weight_blocks};
use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect};
use crate::quant::QuantFormat;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, OpKind, Primitive};

// The kernels take the dense fused kernels' arguments, name for name: one
// list each (`norm_matvec`, `norm_matvec::silu`, `matvec::residual`).
use crate::ops::matvec::residual as add;
use crate::ops::norm_matvec as norm;
use crate::ops::norm_matvec::silu;

/// The fused quantized kernels of one format.
#[derive(Clone, Debug)]
pub struct QuantizedFused {
    matvec_add: Kernel,
    norm_matvec: Kernel,
    norm_matvec_silu: Kernel,
    format: QuantFormat,
}

impl QuantizedFused {
    /// The fused kernels of `format` on `device`: an error where the
    /// backend has none (the CPU runs the steps apart).
    pub fn new(registry: &KernelRegistry, device: &Device, format: QuantFormat) -> Result<Self> {
        let kernel = |name: &str| {
            quantized_kernel(
                registry,
                device,
                name.replace("{}", format.name()),
                &format!("{format} mat-vecs are fused"),
            )
        };
        Ok(QuantizedFused {
            matvec_add: kernel("matvec_add_{}_q8")?,
            norm_matvec: kernel("norm_matvec_{}_q8")?,
            norm_matvec_silu: kernel("norm_matvec_silu_{}_q8")?,
            format,
        })
    }

    /// The weights' format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// `out[n] += weight · x` (x f32 `[k]`, out f32 `[n]`).
    pub fn encode_matvec_add(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "quantized matvec_add";
        let (n, blocks, k) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
        expect(OP, "input", x, DType::F32, &[k])?;
        expect(OP, "output", out, DType::F32, &[n])?;
        check_staged(OP, k)?;
        encoder.dispatch(
            Arguments::new(add::ARGUMENTS)
                .buffer(add::WEIGHT, weight)
                .buffer(add::X, x)
                .buffer(add::OUT, out)
                .scalar(add::N, n as u32)
                .scalar(add::K, k as u32)
                .dispatch(&self.matvec_add)?
                .grid(cuda_grid(n, ROWS_PER_WARP, 1, k))
                .cost(
                    (n * blocks * self.format.block_bytes()) as u64 + bytes_of(k + n, DType::F32),
                    bytes_of(n, DType::F32),
                    2 * (n * k) as u64 + n as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd])),
        )
    }

    /// `out = [weights[0]; weights[1]; ...] · (rmsnorm(x, eps) * norm_weight)`
    /// for one to three weight matrices of this format; `out` f32 holds
    /// the rows of all of them in order; `norm_weight` f32 `[k]`.
    pub fn encode_norm_matvec(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        weights: &[&Buffer],
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "quantized norm_matvec";
        if !(1..=3).contains(&weights.len()) {
            return Err(Error::ShapeMismatch {
                context: format!("{OP} takes one to three weight matrices"),
                expected: vec![3],
                found: vec![weights.len()],
            });
        }
        let mut rows = [0usize; 3];
        let mut read = 0usize;
        let mut k = 0;
        for (slot, weight) in weights.iter().enumerate() {
            let (n, blocks, elements) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
            if slot > 0 && elements != k {
                return Err(Error::ShapeMismatch {
                    context: format!("{OP}: every weight matrix has rows of the same length"),
                    expected: vec![n, k],
                    found: vec![n, elements],
                });
            }
            k = elements;
            rows[slot] = n;
            read += n * blocks * self.format.block_bytes();
        }
        expect(OP, "input", x, DType::F32, &[k])?;
        expect(OP, "norm weight", norm_weight, DType::F32, &[k])?;
        check_staged(OP, k)?;
        let n: usize = rows.iter().sum();
        expect(OP, "output", out, DType::F32, &[n])?;
        // Unused slots repeat the first matrix with no rows: never read.
        let weight = |slot: usize| weights.get(slot).copied().unwrap_or(weights[0]);
        encoder.dispatch(
            Arguments::new(norm::ARGUMENTS)
                .buffer(norm::X, x)
                .buffer(norm::NORM_WEIGHT, norm_weight)
                .buffer(norm::WEIGHT_A, weight(0))
                .buffer(norm::WEIGHT_B, weight(1))
                .buffer(norm::WEIGHT_C, weight(2))
                .buffer(norm::OUT, out)
                .scalar(norm::ROWS_A, rows[0] as u32)
                .scalar(norm::ROWS_B, rows[1] as u32)
                .scalar(norm::ROWS_C, rows[2] as u32)
                .scalar(norm::K, k as u32)
                .scalar(norm::EPS, eps)
                .dispatch(&self.norm_matvec)?
                .grid(cuda_grid(n, ROWS_PER_WARP, 1, k))
                .cost(
                    read as u64 + bytes_of(2 * k, DType::F32),
                    bytes_of(n, DType::F32),
                    2 * (n * k) as u64 + 4 * k as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::RmsNorm, Primitive::MatVec])),
        )
    }

    /// `out[i] = silu(gate[i] · h) * (up[i] · h)`, `h = rmsnorm(x) *
    /// norm_weight`; gate and up of this format, `[n, k]` each.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_norm_matvec_silu(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "quantized norm_matvec_silu";
        let (n, blocks, k) = weight_blocks(OP, self.format, BlockLayout::Planes, gate)?;
        let (up_rows, _, up_k) = weight_blocks(OP, self.format, BlockLayout::Planes, up)?;
        if (up_rows, up_k) != (n, k) {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: the up projection's shape differs from the gate's"),
                expected: vec![n, k],
                found: vec![up_rows, up_k],
            });
        }
        expect(OP, "input", x, DType::F32, &[k])?;
        expect(OP, "norm weight", norm_weight, DType::F32, &[k])?;
        expect(OP, "output", out, DType::F32, &[n])?;
        check_staged(OP, k)?;
        encoder.dispatch(
            Arguments::new(silu::ARGUMENTS)
                .buffer(silu::X, x)
                .buffer(silu::NORM_WEIGHT, norm_weight)
                .buffer(silu::GATE, gate)
                .buffer(silu::UP, up)
                .buffer(silu::OUT, out)
                .scalar(silu::N, n as u32)
                .scalar(silu::K, k as u32)
                .scalar(silu::EPS, eps)
                .dispatch(&self.norm_matvec_silu)?
                .grid(cuda_grid(n, 1, 1, k))
                .cost(
                    (2 * n * blocks * self.format.block_bytes()) as u64 + bytes_of(2 * k, DType::F32),
                    bytes_of(n, DType::F32),
                    4 * (n * k) as u64 + 4 * k as u64 + 6 * n as u64,
                )
                .op_kind(OpKind::fused(&[
                    Primitive::RmsNorm,
                    Primitive::MatVec,
                    Primitive::SiluMul,
                ])),
        )
    }
}
