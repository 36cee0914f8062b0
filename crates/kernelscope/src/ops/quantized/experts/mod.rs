//! A mixture-of-experts layer's experts over block-quantized weights (GGUF's
//! `ffn_{gate,up,down}_exps` in Q4_0 ... Q6_K), driven by the router's ids
//! in device memory as `ops::moe::experts` is for dense weights: no host
//! sync, only the chosen experts' blocks read, and the bytes declared are
//! those blocks'. Each product is two dispatches: its input quantized once
//! to 8-bit blocks of 32 (`quantize_q8`, all rows at once), then
//! `moe_gate_up_<format>_q8` (gate/up + SiLU·mul) or
//! `moe_down_add_<format>_q8` (down, weighted into the residual), integer
//! products as the dense quantized mat-vecs run (CUDA: the formats and row
//! loops of `quantized::linear`, `experts_q8.cu`). The CPU runs the same
//! two dispatches, its references dequantizing the staged input and
//! dotting each chosen row's blocks in f32 (`cpu`); with
//! [`Activations::F32`] it takes the input in f32, one dispatch each
//! (`moe_gate_up_<format>_f32`, `moe_down_add_<format>_f32`: the reference
//! path, CPU only, as for the dense quantized mat-vecs).
//!
//! Stacked weights are u8 `[experts, rows, row_bytes]`: expert e's rows of
//! blocks, in the device's [`BlockLayout`].

mod arguments;
mod cpu;
mod products;
pub(crate) use arguments::{Input, down, gate_up};
use arguments::{MOST_BLOCKS, WARPS};

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::ops::quantized::linear::fused::stage_input;
use crate::ops::quantized::linear::gemm::dispatch_dequantize;
use crate::ops::quantized::linear::{Activations, BlockLayout, quantized_kernel};
use crate::ops::{dimensions, expect};
use crate::quant::QuantFormat;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry};

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
            registry.register_format(&format!("moe_gate_up_{}_{suffix}", format.name()), format.name());
            registry.register_format(&format!("moe_down_add_{}_{suffix}", format.name()), format.name());
        }
        let kernels = crate::ops::quantized::linear::cuda_source_for(format, include_str!("experts_q8.cu"));
        let source: Arc<str> = kernels.into();
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
    /// `norm_quantize_q8`, where the device has it (CUDA): decode's RMSNorm
    /// fused into the gate/up input's quantization.
    norm_quantize: Option<Kernel>,
    gate_up: Kernel,
    down: Kernel,
    /// `dequantize_<format>_bf16`, where the device has it (CUDA): prefill's
    /// experts as bf16 for tensor-core GEMMs.
    dequantize: Option<Kernel>,
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
            norm_quantize: match input {
                Input::Staged => registry.kernel(device, "norm_quantize_q8").ok(),
                Input::F32 => None,
            },
            gate_up: kernel(format!("moe_gate_up_{}_{suffix}", format.name()))?,
            down: kernel(format!("moe_down_add_{}_{suffix}", format.name()))?,
            dequantize: registry
                .kernel(device, &format!("dequantize_{}_bf16", format.name()))
                .ok(),
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

    /// Whether [`MoeQuantized::encode_dequantize`] runs on this device.
    pub fn dequantizes(&self) -> bool {
        self.dequantize.is_some()
    }

    /// Every expert of a stacked weight (u8 `[experts, rows, row_bytes]`)
    /// dequantized into `out` bf16 `[experts, rows, columns]` (rounded to
    /// nearest even), one dispatch: prefill's tensor-core GEMMs then read
    /// each expert's matrix from it.
    pub fn encode_dequantize(
        &self,
        encoder: &mut CommandEncoder,
        stacked: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe dequantize";
        let (experts, rows, columns) = self.stacked(OP, "weight", stacked)?;
        expect(OP, "output", out, DType::BF16, &[experts, rows, columns])?;
        let kernel = self.dequantize.as_ref().ok_or_else(|| Error::KernelMissing {
            name: format!("dequantize_{}_bf16", self.format.name()),
            backend: encoder.device().backend(),
            workaround: "prefill multiplies each expert's blocks in place on this device".into(),
            remedies: &[],
        })?;
        let n = experts * rows;
        let out = out.reshape(&[n, columns])?;
        dispatch_dequantize(encoder, kernel, self.format, stacked, &out, [n, columns])
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
        match &self.quantize {
            Some(quantize) => stage_input(encoder, op, x, length, quantize, None, slot),
            None => Ok(x.clone()),
        }
    }
}
