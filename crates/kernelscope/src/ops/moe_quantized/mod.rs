//! A mixture-of-experts layer's experts over block-quantized weights (GGUF's
//! `ffn_{gate,up,down}_exps` in Q4_0 ... Q6_K), driven by the router's ids
//! in device memory as `ops::moe_experts` is for dense weights: no host
//! sync, only the chosen experts' blocks read, and the bytes declared are
//! those blocks'. Each product is two dispatches: its input quantized once
//! to 8-bit blocks of 32 (`quantize_q8`, all rows at once), then
//! `moe_gate_up_<format>_q8` (gate/up + SiLU·mul) or
//! `moe_down_add_<format>_q8` (down, weighted into the residual), integer
//! products as the dense quantized mat-vecs run (CUDA: the formats and row
//! loops of `quantized_linear`, `experts_q8.cu`). The CPU runs the same
//! two dispatches, its references dequantizing the staged input and
//! dotting each chosen row's blocks in f32 (`cpu`); with
//! [`Activations::F32`] it takes the input in f32, one dispatch each
//! (`moe_gate_up_<format>_f32`, `moe_down_add_<format>_f32`: the reference
//! path, CPU only, as for the dense quantized mat-vecs).
//!
//! Stacked weights are u8 `[experts, rows, row_bytes]`: expert e's rows of
//! blocks, in the device's [`BlockLayout`].

mod cpu;

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::ops::quantized_linear::fused::{
    QUANTIZE_THREADS, QUANTIZED_PER_BLOCK, check_quantizable, quantize,
};
use crate::ops::quantized_linear::gemm::scratch_view;
use crate::ops::quantized_linear::{Activations, BlockLayout, CUDA_THREADS, quantized_kernel, staged_bytes};
use crate::ops::{Arguments, bytes_of, dimensions, expect, expect_rows, rows_of};
use crate::quant::QuantFormat;
use crate::runtime::{
    Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind, Primitive,
};

/// The arguments of `moe_gate_up_<format>_q8`.
pub(crate) mod gate_up {
    crate::ops::kernel_arguments! {
        X: "x" Read,
        IDS: "ids" Read,
        GATE: "gate" Read,
        UP: "up" Read,
        OUT: "out" Write,
        ROWS: "rows" U32,
        HIDDEN_SIZE: "hidden_size" U32,
        EXPERT_ROWS: "expert_rows" U32,
        EXPERTS: "experts" U32,
        K: "k" U32,
    }
}

/// The arguments of `moe_down_add_<format>_q8`.
pub(crate) mod down {
    crate::ops::kernel_arguments! {
        ACTIVATED: "activated" Read,
        IDS: "ids" Read,
        WEIGHTS: "weights" Read,
        DOWN: "down" Read,
        HIDDEN: "hidden" ReadWrite,
        ROWS: "rows" U32,
        HIDDEN_SIZE: "hidden_size" U32,
        EXPERT_ROWS: "expert_rows" U32,
        EXPERTS: "experts" U32,
        K: "k" U32,
    }
}

/// Warps of a CUDA block (each computes one row at a time).
const WARPS: usize = CUDA_THREADS as usize / 32;
/// Blocks along an expert's (or the hidden) rows at most; warps walk the rest.
const MOST_BLOCKS: usize = 4096;

/// How a kernel takes its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// Quantized by `quantize_q8` (`_q8`).
    Staged,
    /// In f32 (`_f32`, CPU only).
    F32,
}

impl Input {
    fn suffix(self) -> &'static str {
        match self {
            Input::Staged => "q8",
            Input::F32 => "f32",
        }
    }
}

/// Registers, for every format, `moe_gate_up_<format>_q8` and
/// `moe_down_add_<format>_q8` (the CPU references and the CUDA kernels),
/// and their `_f32` forms on the CPU.
pub fn register(registry: &mut KernelRegistry) {
    for format in QuantFormat::ALL {
        for input in [Input::Staged, Input::F32] {
            let suffix = input.suffix();
            registry.register_cpu(&format!("moe_gate_up_{}_{suffix}", format.name()), move |args| {
                cpu::moe_gate_up(format, input, args)
            });
            registry.register_cpu(&format!("moe_down_add_{}_{suffix}", format.name()), move |args| {
                cpu::moe_down_add(format, input, args)
            });
        }
        let kernels = include_str!("experts_q8.cu")
            .replace("{format}", format.name())
            .replace("{Format}", &format!("{format:?}"));
        let source: Arc<str> = crate::ops::quantized_linear::cuda_source_with(&kernels).into();
        let gate_up = format!("moe_gate_up_{}_q8", format.name());
        let down = format!("moe_down_add_{}_q8", format.name());
        registry.register_cuda_source(&gate_up, source.clone());
        registry.register_cuda_source(&down, source);
    }
}

/// The quantized experts' products of one format.
#[derive(Clone, Debug)]
pub struct MoeQuantized {
    /// `quantize_q8`, where the products take 8-bit input.
    quantize: Option<Kernel>,
    gate_up: Kernel,
    down: Kernel,
    format: QuantFormat,
    layout: BlockLayout,
    /// The gate/up input and the down input, quantized: grown to the
    /// longest seen and shared by every clone (one stream runs the layers
    /// in turn, and a dispatch keeps its own handle on a replaced one).
    staged_input: Arc<Mutex<Option<Buffer>>>,
    staged_activated: Arc<Mutex<Option<Buffer>>>,
}

impl MoeQuantized {
    /// The products of experts in `format` on `device`, taking their
    /// input as `activations` says (8-bit blocks by default; f32 on the
    /// CPU only).
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        format: QuantFormat,
        activations: Activations,
    ) -> Result<Self> {
        let (input, what) = match activations {
            Activations::Int8 => (
                Input::Staged,
                format!("experts in {format} blocks are multiplied"),
            ),
            Activations::F32 => (
                Input::F32,
                format!("experts in {format} blocks are multiplied with f32 activations"),
            ),
        };
        let kernel = |name: String| quantized_kernel(registry, device, name, &what);
        let suffix = input.suffix();
        Ok(MoeQuantized {
            quantize: match input {
                Input::Staged => Some(kernel("quantize_q8".into())?),
                Input::F32 => None,
            },
            gate_up: kernel(format!("moe_gate_up_{}_{suffix}", format.name()))?,
            down: kernel(format!("moe_down_add_{}_{suffix}", format.name()))?,
            format,
            layout: BlockLayout::of(device),
            staged_input: Arc::default(),
            staged_activated: Arc::default(),
        })
    }

    /// The weights' format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// `(experts, rows, elements a row)` of a stacked weight of this
    /// format, or the error naming `role`.
    fn stacked(&self, op: &str, role: &str, weight: &Buffer) -> Result<(usize, usize, usize)> {
        let [experts, rows, row_bytes] = dimensions(op, role, weight)?;
        expect(op, role, weight, DType::U8, &[experts, rows, row_bytes])?;
        let blocks = self
            .layout
            .blocks(self.format, row_bytes)
            .ok_or_else(|| Error::ShapeMismatch {
                context: format!(
                    "{op} {role}: a {} row of {row_bytes} bytes is not whole blocks in this device's layout",
                    self.format
                ),
                expected: vec![experts, rows, self.layout.row_bytes(self.format, 1)],
                found: vec![experts, rows, row_bytes],
            })?;
        Ok((experts, rows, blocks * self.format.block_elements()))
    }

    /// `x` f32 `[vectors, length]` quantized into `slot`'s scratch (one
    /// dispatch), returning the scratch; x itself where the products take
    /// f32.
    fn encode_stage(
        &self,
        encoder: &mut CommandEncoder,
        op: &str,
        x: &Buffer,
        slot: &Mutex<Option<Buffer>>,
        length: usize,
    ) -> Result<Buffer> {
        let Some(quantize) = &self.quantize else {
            return Ok(x.clone());
        };
        check_quantizable(op, length)?;
        let total = x.len();
        let device = encoder.device().clone();
        let staged = {
            let mut slot = slot.lock().expect("not poisoned");
            scratch_view(&device, &mut slot, DType::U8, &[staged_bytes(total)])?
        };
        encoder.dispatch(
            Arguments::new(quantize::ARGUMENTS)
                .buffer(quantize::X, x)
                .buffer(quantize::OUT, &staged)
                .scalar(quantize::K, total as u32)
                .dispatch(quantize)?
                .grid(LaunchGrid {
                    blocks: [total.div_ceil(QUANTIZED_PER_BLOCK) as u32, 1, 1],
                    threads_per_block: [QUANTIZE_THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(total, DType::F32),
                    staged_bytes(total) as u64,
                    2 * total as u64,
                )
                .op_kind(OpKind::Copy),
        )?;
        Ok(staged)
    }

    /// `out[row, j] = silu(gate[e] · x[row]) * (up[e] · x[row])`, `e =
    /// ids[row, j]`, for gate and up u8 `[experts, expert_rows, row_bytes]`
    /// of this format, x f32 `[rows, hidden]`, ids u32 `[rows, k]`, out f32
    /// `[rows, k, expert_rows]`. An id past the experts gives zeros.
    pub fn encode_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        x: &Buffer,
        ids: &Buffer,
        gate: &Buffer,
        up: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_gate_up (quantized)";
        let (experts, expert_rows, hidden) = self.stacked(OP, "gate", gate)?;
        if self.stacked(OP, "up", up)? != (experts, expert_rows, hidden) {
            return Err(Error::ShapeMismatch {
                context: format!("{OP}: the up projection's shape differs from the gate's"),
                expected: gate.shape().to_vec(),
                found: up.shape().to_vec(),
            });
        }
        let rows = rows_of(OP, "x", x, hidden)?;
        expect_rows(OP, "x", x, DType::F32, rows, &[hidden])?;
        let k = rows_of(OP, "ids", ids, rows)?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(OP, "output", out, DType::F32, rows * k, &[expert_rows])?;
        let staged = self.encode_stage(encoder, OP, x, &self.staged_input, hidden)?;
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(gate_up::ARGUMENTS)
                .buffer(gate_up::X, &staged)
                .buffer(gate_up::IDS, ids)
                .buffer(gate_up::GATE, gate)
                .buffer(gate_up::UP, up)
                .buffer(gate_up::OUT, out)
                .scalar(gate_up::ROWS, rows as u32)
                .scalar(gate_up::HIDDEN_SIZE, hidden as u32)
                .scalar(gate_up::EXPERT_ROWS, expert_rows as u32)
                .scalar(gate_up::EXPERTS, experts as u32)
                .scalar(gate_up::K, k as u32)
                .dispatch(&self.gate_up)?
                .grid(self.grid(expert_rows, k, rows))
                // Each row reads its k experts' blocks: what a decode
                // token's roofline counts.
                .cost(
                    (chosen * 2 * expert_rows * self.format.row_bytes(hidden).unwrap_or(0)
                        + staged.byte_len()) as u64
                        + bytes_of(chosen, DType::U32),
                    bytes_of(chosen * expert_rows, DType::F32),
                    (chosen * expert_rows * (4 * hidden + 5)) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul])),
        )
    }

    /// `hidden[row] += Σ_j weights[row, j] · (down[e_j] · activated[row,
    /// j])`, `e_j = ids[row, j]`, for down u8 `[experts, hidden_size,
    /// row_bytes]` of this format, activated f32 `[rows, k, expert_rows]`,
    /// ids u32 and weights f32 `[rows, k]`, hidden f32 `[rows, hidden_size]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_down_add(
        &self,
        encoder: &mut CommandEncoder,
        activated: &Buffer,
        ids: &Buffer,
        weights: &Buffer,
        down: &Buffer,
        hidden: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_down_add (quantized)";
        let (experts, hidden_size, expert_rows) = self.stacked(OP, "down", down)?;
        let rows = rows_of(OP, "hidden", hidden, hidden_size)?;
        expect_rows(OP, "hidden", hidden, DType::F32, rows, &[hidden_size])?;
        let k = rows_of(OP, "ids", ids, rows)?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[k])?;
        expect_rows(OP, "weights", weights, DType::F32, rows, &[k])?;
        expect_rows(OP, "activated", activated, DType::F32, rows * k, &[expert_rows])?;
        let staged = self.encode_stage(encoder, OP, activated, &self.staged_activated, expert_rows)?;
        let chosen = rows * k;
        encoder.dispatch(
            Arguments::new(down::ARGUMENTS)
                .buffer(down::ACTIVATED, &staged)
                .buffer(down::IDS, ids)
                .buffer(down::WEIGHTS, weights)
                .buffer(down::DOWN, down)
                .buffer(down::HIDDEN, hidden)
                .scalar(down::ROWS, rows as u32)
                .scalar(down::HIDDEN_SIZE, hidden_size as u32)
                .scalar(down::EXPERT_ROWS, expert_rows as u32)
                .scalar(down::EXPERTS, experts as u32)
                .scalar(down::K, k as u32)
                .dispatch(&self.down)?
                .grid(LaunchGrid {
                    blocks: [
                        hidden_size.div_ceil(WARPS).clamp(1, MOST_BLOCKS) as u32,
                        rows as u32,
                        1,
                    ],
                    threads_per_block: [CUDA_THREADS, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    (chosen * hidden_size * self.format.row_bytes(expert_rows).unwrap_or(0)
                        + staged.byte_len()) as u64
                        + bytes_of(chosen, DType::U32)
                        + bytes_of(chosen, DType::F32)
                        + bytes_of(rows * hidden_size, DType::F32),
                    bytes_of(rows * hidden_size, DType::F32),
                    (chosen * hidden_size * (2 * expert_rows + 2)) as u64,
                )
                .op_kind(OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd])),
        )
    }

    /// The gate/up grid: row groups of an expert across (a warp a row of
    /// both matrices), each row's k choices, the rows.
    fn grid(&self, expert_rows: usize, k: usize, rows: usize) -> LaunchGrid {
        LaunchGrid {
            blocks: [
                expert_rows.div_ceil(WARPS).clamp(1, MOST_BLOCKS) as u32,
                k as u32,
                rows as u32,
            ],
            threads_per_block: [CUDA_THREADS, 1, 1],
            shared_memory_bytes: 0,
        }
    }
}
