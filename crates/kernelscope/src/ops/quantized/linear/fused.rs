//! Decode's fused mat-vecs over quantized weights, as `ops::norm_matvec`
//! and `matvec::residual` are for dense ones: RMSNorm into the mat-vecs
//! that read it (`norm_matvec_<format>_q8`, up to three matrices of one
//! format), RMSNorm + gate/up + SiLU·mul (`norm_matvec_silu_<format>_q8`),
//! and the mat-vec adding into the residual stream
//! (`matvec_add_<format>_q8`). CUDA only; the CPU runs the steps apart.
//! Each is two dispatches: x normalised (where the op normalises) and
//! quantized once to 8-bit blocks in scratch (`norm_quantize_q8`,
//! `quantize_q8`: stage.cu), then the product every block of which reads
//! that (`matvecs_<format>_q8`, `matvec_silu_<format>_q8`,
//! `matvec_add_<format>_q8`). Gate/up may also stage its own output for
//! the down projection, which then needs no quantize kernel (`gate_up`),
//! and q/k/v rotate and append their own outputs, which then need no
//! `rope_append` (`rope`); o_proj may stage the residual for the MLP's
//! norm, which the gate/up after it finishes (`norm_stage`).
//! The references they are tested against are the compositions of the
//! RMSNorm, quantized mat-vec, SiLU·mul and add ops.

use std::sync::{Arc, Mutex};

use super::cuda::{CUDA_MOST_BLOCKS, ROWS_PER_WARP, cuda_grid, quantized_kernel, staged_bytes};
use super::gemm::scratch_view;
use super::layout::{BlockLayout, weight_blocks};
use super::streamed::{StreamedDown, StreamedGateUp, add_arguments as streamed_add};
use super::streamed_norm_stage::StreamedNormStage;
use super::streamed_rope::StreamedQueryKeyValue;
use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect};
use crate::quant::QuantFormat;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind, Primitive,
};

mod gate_up;
mod norm_stage;
pub mod rope;
mod staged_input;
pub(crate) mod staging;

use staged_input::PendingNorm;
pub use staged_input::StagedInput;
pub use staging::Reader;
use staging::check_quantizable;
pub(super) use staging::register;
pub(crate) use staging::stage_input;

/// The arguments of the fused products (kernels.cu).
pub(crate) use super::arguments::{
    matvec_add_norm_stage, matvecs, matvecs_rope, silu, silu_norm_stage, silu_stage,
};
use crate::ops::matvec::residual as add;

/// The name errors give the fused mat-vec adding into the residual stream.
const MATVEC_ADD: &str = "quantized matvec_add";

/// The fused quantized kernels of one format.
#[derive(Clone, Debug)]
pub struct QuantizedFused {
    quantize: Kernel,
    norm_quantize: Kernel,
    /// The same, their reader let launch before they wait: for streamed
    /// readers (stage.cu).
    quantize_streamed_reader: Kernel,
    norm_quantize_streamed_reader: Kernel,
    matvec_add: Kernel,
    matvecs: Kernel,
    /// matvecs with RoPE and the KV append in its stores (`rope`).
    matvecs_rope: Kernel,
    matvec_silu: Kernel,
    /// matvec_silu staging its output for the down projection (`gate_up`).
    matvec_silu_stage: Kernel,
    /// matvec_silu_stage over an x still to be normalised, and matvec_add
    /// staging its output so for the next norm (`norm_stage`).
    matvec_silu_norm_stage: Kernel,
    matvec_add_norm_stage: Kernel,
    /// Q4_K's gate/up streamed through shared memory, where the device has
    /// bulk copies (`streamed.rs`).
    streamed_gate_up: Option<StreamedGateUp>,
    /// The down projection (and any `matvec_add` of long rows) streamed,
    /// rows split over two warps, where the device has bulk copies.
    streamed_down: Option<StreamedDown>,
    /// Q4_K's q/k/v with RoPE streamed, where the device has bulk copies
    /// (`streamed_rope.rs`).
    streamed_query_key_value: Option<StreamedQueryKeyValue>,
    /// Q4_K's o_proj staging the MLP's norm, streamed where the device has
    /// bulk copies (`streamed_norm_stage.rs`).
    streamed_norm_stage: Option<StreamedNormStage>,
    format: QuantFormat,
    /// x quantized, read by the product after it: grown to the longest x
    /// seen and shared by every clone (one stream runs the layers in turn).
    staged: Arc<Mutex<Option<Buffer>>>,
    /// Gate/up's output staged for the down projection, apart from
    /// `staged`, which gate/up reads.
    activation: Arc<Mutex<Option<Buffer>>>,
    /// o_proj's output staged for the next norm's readers, and its
    /// chunks' sums of squares (`norm_stage`), apart from both above
    /// (o_proj reads `staged`, gate/up of its format writes `activation`).
    norm_staged: Arc<Mutex<Option<Buffer>>>,
    squares: Arc<Mutex<Option<Buffer>>>,
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
            quantize: kernel("quantize_q8")?,
            norm_quantize: kernel("norm_quantize_q8")?,
            quantize_streamed_reader: kernel("quantize_q8_streamed_reader")?,
            norm_quantize_streamed_reader: kernel("norm_quantize_q8_streamed_reader")?,
            matvec_add: kernel("matvec_add_{}_q8")?,
            matvecs: kernel("matvecs_{}_q8")?,
            matvecs_rope: kernel("matvecs_rope_{}_q8_bf16")?,
            matvec_silu: kernel("matvec_silu_{}_q8")?,
            matvec_silu_stage: kernel("matvec_silu_{}_q8_stage")?,
            matvec_silu_norm_stage: kernel("matvec_silu_{}_q8_norm_stage")?,
            matvec_add_norm_stage: kernel("matvec_add_{}_q8_norm_stage")?,
            streamed_gate_up: StreamedGateUp::new(registry, device, format)?,
            streamed_down: StreamedDown::new(registry, device, format)?,
            streamed_query_key_value: StreamedQueryKeyValue::new(registry, device, format)?,
            streamed_norm_stage: StreamedNormStage::new(registry, device, format)?,
            format,
            staged: Arc::default(),
            activation: Arc::default(),
            norm_staged: Arc::default(),
            squares: Arc::default(),
        })
    }

    /// Dispatches x (f32 `[k]`) quantized, normalised first where
    /// `norm` gives the norm weight and eps, into the staged scratch; returns
    /// the scratch the product reads, which `reader` says how to launch.
    fn encode_stage(
        &self,
        encoder: &mut CommandEncoder,
        op: &str,
        x: &Buffer,
        norm: Option<(&Buffer, f32)>,
        k: usize,
        reader: Reader,
    ) -> Result<Buffer> {
        expect(op, "input", x, DType::F32, &[k])?;
        let kernel = match (norm.is_some(), reader) {
            (true, Reader::Registers) => &self.norm_quantize,
            (true, Reader::Streamed) => &self.norm_quantize_streamed_reader,
            (false, Reader::Registers) => &self.quantize,
            (false, Reader::Streamed) => &self.quantize_streamed_reader,
        };
        stage_input(encoder, op, x, k, kernel, norm, &self.staged)
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
        let (n, _, k) = weight_blocks(MATVEC_ADD, self.format, BlockLayout::Planes, weight)?;
        let streams = self
            .streamed_down
            .as_ref()
            .is_some_and(|streamed| streamed.plan(n, k, weight.shape()[1]).is_some());
        let reader = Reader::streamed_where(streams);
        let buffer = self.encode_stage(encoder, MATVEC_ADD, x, None, k, reader)?;
        self.encode_matvec_add_staged(encoder, weight, &StagedInput::normalised(buffer, k), out)
    }

    /// This format's scratch for a quantized x of `length` values, to be
    /// written by a kernel that quantizes its own output (see
    /// [`StagedInput::buffer`]) and read by
    /// [`encode_matvec_add_staged`](Self::encode_matvec_add_staged); valid
    /// until the next stage of this format.
    pub fn stage_scratch(&self, device: &Device, length: usize) -> Result<StagedInput> {
        check_quantizable(MATVEC_ADD, length)?;
        let mut slot = self.staged.lock().expect("not poisoned");
        let buffer = scratch_view(device, &mut slot, DType::U8, &[staged_bytes(length)])?;
        Ok(StagedInput::normalised(buffer, length))
    }

    /// `out[n] += weight · x`, x as `staged` holds it.
    pub fn encode_matvec_add_staged(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        staged: &StagedInput,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = MATVEC_ADD;
        let (n, blocks, k) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
        expect(OP, "output", out, DType::F32, &[n])?;
        if staged.length != k {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: x staged for another length than the weight's rows"),
                expected: vec![k],
                found: vec![staged.length],
            });
        }
        staged.expect_normalised(OP, add::X)?;
        let staged = &staged.buffer;
        let bytes_read =
            (n * blocks * self.format.block_bytes() + staged_bytes(k)) as u64 + bytes_of(n, DType::F32);
        let kind = OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]);
        let row_bytes = weight.shape()[1];
        if let Some((kernel, plan)) = self
            .streamed_down
            .as_ref()
            .and_then(|streamed| streamed.plan(n, k, row_bytes))
        {
            return encoder.dispatch(
                Arguments::new(streamed_add::ARGUMENTS)
                    .buffer(streamed_add::WEIGHT, weight)
                    .buffer(streamed_add::X, staged)
                    .buffer(streamed_add::OUT, out)
                    .scalar(streamed_add::N, n as u32)
                    .scalar(streamed_add::K, k as u32)
                    .scalar(streamed_add::STAGES, plan.stages)
                    .dispatch(kernel)?
                    .grid(plan.grid)
                    .cost(bytes_read, bytes_of(n, DType::F32), 2 * (n * k) as u64 + n as u64)
                    .op_kind(kind),
            );
        }
        encoder.dispatch(
            Arguments::new(add::ARGUMENTS)
                .buffer(add::WEIGHT, weight)
                .buffer(add::X, staged)
                .buffer(add::OUT, out)
                .scalar(add::N, n as u32)
                .scalar(add::K, k as u32)
                .dispatch(&self.matvec_add)?
                .grid(product_grid(n, ROWS_PER_WARP, CUDA_MOST_BLOCKS))
                .cost(bytes_read, bytes_of(n, DType::F32), 2 * (n * k) as u64 + n as u64)
                .op_kind(kind),
        )
    }

    /// `out = [weights[0]; weights[1]; ...] · (rmsnorm(x, eps) * norm_weight)`
    /// for one to three weight matrices of this format; `out` f32 holds
    /// the rows of all of them in order; `norm_weight` f32 `[k]`. Two
    /// dispatches: [`encode_norm_stage`](Self::encode_norm_stage), then
    /// [`encode_matvecs_staged`](Self::encode_matvecs_staged).
    pub fn encode_norm_matvec(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        weights: &[&Buffer],
        out: &Buffer,
        eps: f32,
    ) -> Result<()> {
        let k = x.len();
        let staged = self.encode_norm_stage(encoder, x, norm_weight, eps, k, Reader::Registers)?;
        self.encode_matvecs_staged(encoder, &staged, weights, out)
    }

    /// `rmsnorm(x, eps) * norm_weight` (x f32 `[k]`) quantized to 8-bit
    /// blocks in this format's scratch, in the layout every format's fused
    /// products read: what [`encode_matvecs_staged`](Self::encode_matvecs_staged)
    /// of this or another format multiplies, so readers of one norm in
    /// several formats (a Q4_K_M layer's q and k in Q4_K, its v in Q6_K)
    /// quantize it once. Valid until the next stage of this format.
    /// `reader` is how the product reading it runs.
    pub fn encode_norm_stage(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        norm_weight: &Buffer,
        eps: f32,
        k: usize,
        reader: Reader,
    ) -> Result<StagedInput> {
        let op = "quantized norm_matvec";
        let buffer = self.encode_stage(encoder, op, x, Some((norm_weight, eps)), k, reader)?;
        Ok(StagedInput::normalised(buffer, k))
    }

    /// `out = [weights[0]; weights[1]; ...] · x` for one to three weight
    /// matrices of this format, x as `staged` holds it (quantized by
    /// [`encode_norm_stage`](Self::encode_norm_stage) of any format); `out`
    /// f32 holds the rows of all of them in order.
    pub fn encode_matvecs_staged(
        &self,
        encoder: &mut CommandEncoder,
        staged: &StagedInput,
        weights: &[&Buffer],
        out: &Buffer,
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
        staged.expect_normalised(OP, matvecs::X)?;
        let k = staged.length;
        for (slot, weight) in weights.iter().enumerate() {
            let (n, blocks, elements) = weight_blocks(OP, self.format, BlockLayout::Planes, weight)?;
            if elements != k {
                return Err(Error::ShapeMismatch {
                    context: format!("{OP}: every weight matrix has rows as long as x"),
                    expected: vec![n, k],
                    found: vec![n, elements],
                });
            }
            rows[slot] = n;
            read += n * blocks * self.format.block_bytes();
        }
        let n: usize = rows.iter().sum();
        expect(OP, "output", out, DType::F32, &[n])?;
        // Unused slots repeat the first matrix with no rows: never read.
        let weight = |slot: usize| weights.get(slot).copied().unwrap_or(weights[0]);
        encoder.dispatch(
            Arguments::new(matvecs::ARGUMENTS)
                .buffer(matvecs::X, &staged.buffer)
                .buffer(matvecs::WEIGHT_A, weight(0))
                .buffer(matvecs::WEIGHT_B, weight(1))
                .buffer(matvecs::WEIGHT_C, weight(2))
                .buffer(matvecs::OUT, out)
                .scalar(matvecs::ROWS_A, rows[0] as u32)
                .scalar(matvecs::ROWS_B, rows[1] as u32)
                .scalar(matvecs::ROWS_C, rows[2] as u32)
                .scalar(matvecs::K, k as u32)
                .dispatch(&self.matvecs)?
                .grid(product_grid(n, ROWS_PER_WARP, CUDA_MOST_BLOCKS))
                .cost(
                    (read + staged_bytes(k)) as u64,
                    bytes_of(n, DType::F32),
                    2 * (n * k) as u64,
                )
                .op_kind(OpKind::MatVec),
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
        let (_, _, k) = self.gate_up_shape(OP, gate, up, out)?;
        let buffer = self.encode_stage(encoder, OP, x, Some((norm_weight, eps)), k, Reader::Registers)?;
        let staged = StagedInput::normalised(buffer, k);
        self.encode_gate_up(encoder, &staged, gate, up, out, false)
            .map(drop)
    }
}

/// The grid of a product over `n` weight rows reading x quantized in
/// global memory (no shared memory: nothing staged), of at most
/// `most_blocks` blocks.
fn product_grid(n: usize, rows_per_warp: usize, most_blocks: usize) -> LaunchGrid {
    let mut grid = cuda_grid(n, rows_per_warp, 1, 0);
    grid.blocks[0] = grid.blocks[0].min(most_blocks as u32);
    grid
}

/// The most blocks of the gate/up product: Q4_K's (read in pairs of
/// sub-blocks, 80 registers a thread) one wave of 3 blocks on each of 132
/// SMs (llama-3-8b 28.8 -> 26.8 µs against 4 a SM, H200); other formats
/// the mat-vecs' bound.
fn gate_up_blocks(format: QuantFormat) -> usize {
    match format {
        QuantFormat::Q4_K => 396,
        _ => CUDA_MOST_BLOCKS,
    }
}
