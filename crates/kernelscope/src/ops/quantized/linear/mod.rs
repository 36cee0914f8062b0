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
//! in `formats.cuh`, the row loops in `products.cuh`, the kernels in
//! `kernels.cu`, instantiated per format.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod cpu;
#[cfg(target_arch = "x86_64")]
mod cpu_bf16_tiles;
pub mod fused;
pub(crate) mod gemm;
pub(crate) mod stage;

pub use cpu::{IntegerPath, integer_path};
pub use gemm::GEMM_ROWS;

use crate::error::{Error, Remedy, Result};
use crate::ops::{Arguments, bytes_of, dimensions, expect, expect_rows, kernel_arguments, rows_of};
use crate::quant::QuantFormat;
use crate::quant::planes::{planar_blocks, planar_row_bytes, to_planes};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

kernel_arguments! { WEIGHT: "weight" Read, X: "x" Read, OUT: "out" Write, N: "n" U32, K: "k" U32, ROWS: "rows" U32 }

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

/// How a device's quantized kernels expect a matrix's rows of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockLayout {
    /// ggml's blocks one after another, as the file holds them (the CPU).
    Blocks,
    /// Each field of a row's blocks together, rows padded to 16 bytes
    /// ([`crate::quant::planes`]: CUDA).
    Planes,
}

impl BlockLayout {
    /// The layout `device`'s quantized kernels read.
    pub fn of(device: &Device) -> BlockLayout {
        if device.backend() == "cpu" {
            BlockLayout::Blocks
        } else {
            BlockLayout::Planes
        }
    }

    /// Bytes one row of `blocks` blocks of `format` takes.
    pub fn row_bytes(self, format: QuantFormat, blocks: usize) -> usize {
        match self {
            BlockLayout::Blocks => blocks * format.block_bytes(),
            BlockLayout::Planes => planar_row_bytes(format, blocks),
        }
    }

    /// The blocks of a row of `row_bytes` bytes, if that is whole blocks in
    /// this layout.
    pub fn blocks(self, format: QuantFormat, row_bytes: usize) -> Option<usize> {
        match self {
            BlockLayout::Blocks => (row_bytes > 0 && row_bytes.is_multiple_of(format.block_bytes()))
                .then(|| row_bytes / format.block_bytes()),
            BlockLayout::Planes => planar_blocks(format, row_bytes),
        }
    }

    /// `rows` rows of ggml blocks (`row(i)` gives row i, all of one length)
    /// in this layout, one after another.
    pub fn arrange<'a>(
        self,
        format: QuantFormat,
        rows: usize,
        row: impl Fn(usize) -> &'a [u8] + Sync,
    ) -> Vec<u8> {
        use rayon::prelude::*;
        let blocks = if rows == 0 {
            0
        } else {
            row(0).len() / format.block_bytes()
        };
        let row_bytes = self.row_bytes(format, blocks);
        let mut out = vec![0u8; rows * row_bytes];
        if row_bytes == 0 {
            return out;
        }
        out.par_chunks_mut(row_bytes)
            .enumerate()
            .for_each(|(index, destination)| match self {
                BlockLayout::Blocks => destination.copy_from_slice(row(index)),
                BlockLayout::Planes => to_planes(format, row(index), destination),
            });
        out
    }
}

/// The blocks and elements of a weight `[n, row_bytes]` of `format` in
/// `layout`, or an error naming `op`'s weight.
pub(crate) fn weight_blocks(
    op: &str,
    format: QuantFormat,
    layout: BlockLayout,
    weight: &Buffer,
) -> Result<(usize, usize, usize)> {
    let [n, row_bytes] = dimensions(op, "weight", weight)?;
    expect(op, "weight", weight, DType::U8, &[n, row_bytes])?;
    let blocks = layout
        .blocks(format, row_bytes)
        .ok_or_else(|| Error::ShapeMismatch {
            context: format!(
                "{op} weight: a {format} row of {row_bytes} bytes is not whole {}-byte blocks{}",
                format.block_bytes(),
                if layout == BlockLayout::Planes {
                    " in planes padded to 16 bytes"
                } else {
                    ""
                }
            ),
            expected: vec![
                n,
                layout.row_bytes(format, (row_bytes / format.block_bytes()).max(1)),
            ],
            found: vec![n, row_bytes],
        })?;
    Ok((n, blocks, blocks * format.block_elements()))
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
        registry.register_cpu(&format!("matmul_{}", format.name()), product);
        if format.int8_block().is_some() {
            registry.register_cpu(&format!("matvec_{}_q8", format.name()), move |args| {
                cpu::quantized_product_int8(format, args)
            });
            registry.register_cpu(&format!("matmul_{}_q8", format.name()), move |args| {
                cpu::quantized_matmul_int8(format, args)
            });
        }
        #[cfg(target_arch = "x86_64")]
        registry.register_cpu(&format!("matmul_{}_bf16", format.name()), move |args| {
            cpu_bf16_tiles::quantized_matmul_bf16(format, args)
        });
        let source: std::sync::Arc<str> = cuda_source(format).into();
        for kernel in CUDA_KERNELS {
            let name = kernel.replace("{}", format.name());
            registry.register_cuda_source(&name, source.clone());
        }
    }
    gemm::register(registry);
    fused::register(registry);
}

/// The CUDA kernels of each format (`kernels.cu`), `{}` standing for its
/// name.
pub(crate) const CUDA_KERNELS: [&str; 6] = [
    "matvec_{}_q8",
    "matmul_{}",
    "matvec_add_{}_q8",
    "matvecs_{}_q8",
    "matvec_silu_{}_q8",
    "dequantize_{}_bf16",
];

/// The CUDA source of `format`'s kernels: the prelude, what every kernel
/// shares (`quantized.cuh`: loads and x staged; `formats.cuh`: the formats;
/// `products.cuh`: the row loops), and `kernels.cu` with the format's name
/// and struct (named as the variant, `Q4_K`) put in.
pub(crate) fn cuda_source(format: QuantFormat) -> String {
    let kernels = include_str!("kernels.cu")
        .replace("{format}", format.name())
        .replace("{Format}", &format!("{format:?}"));
    cuda_source_with(&kernels)
}

/// The CUDA source of `kernels` (one format's, its names put in) over what
/// every quantized kernel shares: the prelude, `quantized.cuh`,
/// `formats.cuh` and `products.cuh` (other ops' quantized kernels too).
pub(crate) fn cuda_source_with(kernels: &str) -> String {
    crate::ops::cuda_source(&format!(
        "{}\n{}\n{}\n{kernels}",
        include_str!("quantized.cuh"),
        include_str!("formats.cuh"),
        include_str!("products.cuh")
    ))
}

/// Threads per block of the CUDA quantized kernels (`QUANT_THREADS`).
pub(crate) const CUDA_THREADS: u32 = 256;
/// Warps of a CUDA block.
const WARPS: usize = CUDA_THREADS as usize / 32;
/// Rows a warp of the one-matrix CUDA kernels reads at once
/// (`MATVEC_GROUP` in quantized.cuh); the gate/up kernel reads one row of
/// each of its two matrices.
pub(crate) const ROWS_PER_WARP: usize = 1;
/// The most blocks a CUDA quantized mat-vec launches: each block quantizes
/// x into its shared memory before reading weights, so past about one
/// resident wave (4 blocks on each of 132 SMs) warps loop over rows rather
/// than more blocks repeating that work.
pub(crate) const CUDA_MOST_BLOCKS: usize = 528;
/// Shared memory a CUDA block may take without opting in to more.
const CUDA_SHARED_BYTES: usize = 48 << 10;

/// Shared memory a CUDA block takes to stage `k` activations as 8-bit
/// blocks of 32 (the values, and a scale and a sum per block).
pub(crate) fn staged_bytes(k: usize) -> usize {
    k + 8 * (k / 32)
}

/// Whether a CUDA quantized kernel can stage `k` activations (k a multiple
/// of 32, as every format's block is), or the error saying why not.
pub(crate) fn check_staged(op: &str, k: usize) -> Result<()> {
    if k.is_multiple_of(32) && staged_bytes(k) <= CUDA_SHARED_BYTES {
        return Ok(());
    }
    Err(Error::ShapeMismatch {
        context: format!(
            "{op} stages its input as 8-bit blocks of 32 in {} KiB of shared memory: {k} elements do not fit",
            CUDA_SHARED_BYTES >> 10
        ),
        expected: vec![CUDA_SHARED_BYTES * 32 / 40],
        found: vec![k],
    })
}

/// The CUDA grid of a quantized mat-vec over `n` weight rows, each warp
/// reading `rows_per_warp` of them at once, for `rows` input rows, staging
/// `k` activations per block.
pub(crate) fn cuda_grid(n: usize, rows_per_warp: usize, rows: usize, k: usize) -> LaunchGrid {
    let y = rows.clamp(1, 64);
    LaunchGrid {
        blocks: [
            n.div_ceil(WARPS * rows_per_warp).clamp(1, CUDA_MOST_BLOCKS) as u32,
            y as u32,
            1,
        ],
        threads_per_block: [CUDA_THREADS, 1, 1],
        shared_memory_bytes: staged_bytes(k) as u32,
    }
}

/// The kernel `name` of a quantized format for `device`, or, where the
/// backend has none, an error saying that `what` (`Q4_K weights are
/// multiplied`) is not done there and the CPU does it.
pub(crate) fn quantized_kernel(
    registry: &KernelRegistry,
    device: &Device,
    name: String,
    what: &str,
) -> Result<Kernel> {
    registry.kernel(device, &name).map_err(|error| match error {
        Error::KernelMissing { backend, .. } => Error::KernelMissing {
            name,
            backend,
            workaround: format!("{what} this way only on the CPU; run with --device cpu"),
            remedies: &[Remedy::OtherDevice { device: "cpu" }],
        },
        other => other,
    })
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
