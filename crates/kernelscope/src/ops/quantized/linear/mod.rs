//! A linear layer over block-quantized weights (`crate::quant`: Q4_0 ...
//! Q6_K, as GGUF files hold them): `out[r, n] = W[n, :] · x[r, :]` for one
//! position (`matvec_<format>_q8`: activations quantized to 8-bit blocks
//! and integer products, as llama.cpp runs decode, where the format has
//! them; `matvec_<format>_f32`: the f32 reference, CPU only) or a chunk of
//! rows (`matmul_<format>`), reading the weights in their blocks, never as
//! a dense copy. The kernels are named by the format so a profile says
//! which format each product read, and the bytes declared are the blocks'
//! own (values and scales).
//!
//! On a CPU with AVX-512 BF16 a chunk of rows with 8-bit activations runs
//! on bf16 tiles instead (`matmul_<format>_bf16`, `cpu_bf16_tiles.rs`):
//! weights dequantized a few rows at a time, the bf16 GEMM's kernel.
//!
//! The CPU reads ggml's blocks as the file holds them; CUDA reads rows laid
//! out in planes ([`crate::quant::planes`], [`BlockLayout`]), and fuses
//! decode as the dense mat-vecs do (`fused`: RMSNorm into the mat-vecs that
//! read it, gate/up with SiLU·mul, the residual add, x quantized once per
//! product by `stage.cu`): loads and staging in `quantized.cuh`, the formats
//! in `formats.cuh`, the row loops in `products.cuh`, the products whose
//! blocks quantize their own output in `chunked.cuh`, the kernels in
//! `kernels.cu`, instantiated per format.

#[cfg(target_arch = "x86_64")]
mod arguments;
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod cpu;
#[cfg(target_arch = "x86_64")]
mod cpu_bf16_tiles;
mod cuda;
pub mod fused;
pub(crate) mod gemm;
mod layout;
pub(crate) mod stage;
pub(crate) mod streamed;
pub(crate) mod streamed_norm_stage;
pub(crate) mod streamed_rope;

pub(crate) use arguments::ARGUMENTS;
use arguments::{K, N, OUT, ROWS, WEIGHT, X};
pub use cpu::{IntegerPath, integer_path};
use cuda::CUDA_KERNELS;
pub(crate) use cuda::{
    CUDA_THREADS, ROWS_PER_WARP, check_staged, cuda_grid, cuda_source, cuda_source_for, cuda_source_with,
    quantized_kernel, staged_bytes,
};
pub use gemm::GEMM_ROWS;
pub use layout::BlockLayout;
pub(crate) use layout::weight_blocks;

use crate::error::Result;
use crate::ops::{Arguments, bytes_of, expect_rows, rows_of};
use crate::quant::QuantFormat;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// How a quantized mat-vec takes its activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activations {
    /// Quantized once per mat-vec to 8-bit blocks and multiplied in
    /// integers, as llama.cpp does (`matvec_<format>_q8`), where the format
    /// has that product; f32 elsewhere.
    #[default]
    Int8,
    /// In f32, each weight block dequantized (`matvec_<format>_f32`): the
    /// reference, within f32 rounding of the dense product. CPU only.
    F32,
}

/// Registers, for every format, on the CPU `matvec_<format>_f32`,
/// `matmul_<format>` and, where the format has the integer product,
/// `matvec_<format>_q8` and `matmul_<format>_q8`, and on x86-64
/// `matmul_<format>_bf16` (bf16 tiles, where the CPU has AVX-512 BF16);
/// on CUDA the integer products of every format
/// (`matvec_<format>_q8`, `matmul_<format>` and the fused kernels of
/// `fused`) and the dequantization to bf16.
pub fn register(registry: &mut KernelRegistry) {
    for format in QuantFormat::ALL {
        let product = move |args: &crate::runtime::KernelArgs<'_>| cpu::quantized_product(format, args);
        registry.register_cpu(&format!("matvec_{}_f32", format.name()), product);
        registry.register_format(&format!("matvec_{}_f32", format.name()), format.name());
        registry.register_cpu(&format!("matmul_{}", format.name()), product);
        registry.register_format(&format!("matmul_{}", format.name()), format.name());
        if format.int8_block().is_some() {
            registry.register_cpu(&format!("matvec_{}_q8", format.name()), move |args| {
                cpu::quantized_product_int8(format, args)
            });
            registry.register_cpu(&format!("matmul_{}_q8", format.name()), move |args| {
                cpu::quantized_matmul_int8(format, args)
            });
            registry.register_format(&format!("matmul_{}_q8", format.name()), format.name());
        }
        #[cfg(target_arch = "x86_64")]
        registry.register_cpu(&format!("matmul_{}_bf16", format.name()), move |args| {
            cpu_bf16_tiles::quantized_matmul_bf16(format, args)
        });
        #[cfg(target_arch = "x86_64")]
        registry.register_format(&format!("matmul_{}_bf16", format.name()), format.name());
        let source: std::sync::Arc<str> = cuda_source(format).into();
        for kernel in CUDA_KERNELS {
            let name = kernel.replace("{}", format.name());
            registry.register_cuda_source(&name, source.clone());
            registry.register_format(&name, format.name());
        }
    }
    gemm::register(registry);
    fused::register(registry);
    let also: Vec<_> = streamed_rope::HELD_ROPE_KERNELS
        .into_iter()
        .chain(streamed_norm_stage::HELD_NORM_STAGE_KERNELS)
        .collect();
    streamed::register(registry, &also);
}

/// The quantized products for one format.
#[derive(Clone, Debug)]
pub struct QuantizedLinear {
    matvec: Kernel,
    matmul: Kernel,
    format: QuantFormat,
    layout: BlockLayout,
    /// Prefill chunks of [`GEMM_ROWS`] rows or more on tensor cores, where
    /// the device has them (CUDA).
    gemm: Option<gemm::DequantizedGemm>,
}

/// Whether the CPU runs a chunk of `format` rows on bf16 tiles
/// (`cpu_bf16_tiles.rs`): where it has the bf16 GEMM's instructions and the
/// format's blocks divide the GEMM's passes.
fn bf16_tiles(format: QuantFormat) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::ops::matmul::uses_bf16_products(DType::BF16)
            && crate::ops::matmul::cpu_bf16::DEPTH_CHUNK.is_multiple_of(format.block_elements())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = format;
        false
    }
}

impl QuantizedLinear {
    /// The op for weights of `format` on `device`, its mat-vec taking
    /// `activations` as asked (f32 where the format has no integer product
    /// on the CPU; CUDA has only the integer products).
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        format: QuantFormat,
        activations: Activations,
    ) -> Result<Self> {
        let layout = BlockLayout::of(device);
        let integer = match layout {
            BlockLayout::Blocks => format.int8_block().is_some(),
            BlockLayout::Planes => true,
        };
        let (matvec, matmul) = match (activations, layout) {
            (Activations::Int8, BlockLayout::Blocks) if integer => (
                format!("matvec_{}_q8", format.name()),
                if bf16_tiles(format) {
                    format!("matmul_{}_bf16", format.name())
                } else {
                    format!("matmul_{}_q8", format.name())
                },
            ),
            (Activations::Int8, _) if integer => (
                format!("matvec_{}_q8", format.name()),
                format!("matmul_{}", format.name()),
            ),
            _ => (
                format!("matvec_{}_f32", format.name()),
                format!("matmul_{}", format.name()),
            ),
        };
        let what = match activations {
            Activations::F32 => format!("{format} weights are multiplied with f32 activations"),
            Activations::Int8 => format!("{format} weights are multiplied"),
        };
        let gemm = match layout {
            BlockLayout::Blocks => None,
            BlockLayout::Planes => Some(gemm::DequantizedGemm::new(registry, device, format)?),
        };
        Ok(QuantizedLinear {
            matvec: quantized_kernel(registry, device, matvec, &what)?,
            matmul: quantized_kernel(registry, device, matmul, &what)?,
            format,
            layout,
            gemm,
        })
    }

    /// Whether [`QuantizedLinear::encode`] takes a bf16 input as well as
    /// f32: where a prefill chunk's product runs on tensor cores (CUDA), so
    /// the layer before it can write the GEMM's input directly.
    pub fn takes_bf16_input(&self) -> bool {
        self.gemm.is_some()
    }

    /// The weights' format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// The layout the kernels read a weight's rows in.
    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// `out[r, :] = weight · x[r, :]` for every row r of `x` f32 (or bf16
    /// where [`QuantizedLinear::takes_bf16_input`]) `[rows, k]` (or flat),
    /// `out` f32 `[rows, n]`; `weight` is u8
    /// `[n, row_bytes]`, each row `k` elements in this format's blocks, in
    /// the device's [`BlockLayout`].
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "quantized linear";
        let (n, blocks, k) = weight_blocks(OP, self.format, self.layout, weight)?;
        let rows = rows_of(OP, "input", x, k)?;
        expect_rows(OP, "output", out, DType::F32, rows, &[n])?;
        // A bf16 input (a prefill chunk's GEMM input on CUDA) is taken as it
        // is by the GEMM, and widened to f32 scratch for the mat-vecs.
        let widened;
        let x = match (&self.gemm, x.dtype()) {
            (Some(gemm), DType::BF16) => {
                expect_rows(OP, "input", x, DType::BF16, rows, &[k])?;
                if rows >= GEMM_ROWS {
                    x
                } else {
                    widened = gemm.widen(encoder, x, rows, k)?;
                    &widened
                }
            }
            _ => {
                expect_rows(OP, "input", x, DType::F32, rows, &[k])?;
                x
            }
        };
        if let Some(gemm) = &self.gemm
            && rows >= GEMM_ROWS
        {
            return gemm.encode(encoder, weight, [n, blocks, k], x, rows, out);
        }
        let (kernel, op_kind) = if rows == 1 {
            (&self.matvec, OpKind::MatVec)
        } else {
            (&self.matmul, OpKind::MatMul)
        };
        let grid = match self.layout {
            BlockLayout::Blocks => LaunchGrid {
                blocks: [n as u32, 1, 1],
                threads_per_block: [1, 1, 1],
                shared_memory_bytes: 0,
            },
            BlockLayout::Planes => {
                check_staged(OP, k)?;
                cuda_grid(n, ROWS_PER_WARP, rows, k)
            }
        };
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(WEIGHT, weight)
                .buffer(X, x)
                .buffer(OUT, out)
                .scalar(N, n as u32)
                .scalar(K, k as u32)
                .scalar(ROWS, rows as u32)
                .dispatch(kernel)?
                .grid(grid)
                .cost(
                    (n * blocks * self.format.block_bytes()) as u64 + bytes_of(rows * k, DType::F32),
                    bytes_of(rows * n, DType::F32),
                    2 * (rows * n * k) as u64,
                )
                .op_kind(op_kind),
        )
    }
}
