//! A linear layer over block-quantized weights (`crate::quant`: Q4_0 ...
//! Q6_K, as GGUF files hold them): `out[r, n] = W[n, :] · x[r, :]` for one
//! position (`matvec_<format>_q8`: activations quantized to 8-bit blocks
//! and integer products, as llama.cpp runs decode, where the format has
//! them; `matvec_<format>_f32`: the f32 reference) or a chunk of rows
//! (`matmul_<format>`),
//! reading the weights in their blocks, never as a dense copy. The kernels
//! are named by the format so a profile says which format each product
//! read, and the bytes declared are the blocks' own (values and scales).
//! CPU only for now: CUDA runs GGUF models on weights dequantized at load,
//! and asking this op for a CUDA kernel is an error naming that way out.

mod cpu;

use super::{Arguments, bytes_of, dimensions, expect, expect_rows, kernel_arguments, rows_of};
use crate::error::{Error, Remedy, Result};
use crate::quant::QuantFormat;
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
    /// reference, within f32 rounding of the dense product.
    F32,
}

/// Registers, for every format, `matvec_<format>_f32`, `matmul_<format>`
/// and, where the format has the integer product, `matvec_<format>_q8`.
pub fn register(registry: &mut KernelRegistry) {
    for format in QuantFormat::ALL {
        let product = move |args: &crate::runtime::KernelArgs<'_>| cpu::quantized_product(format, args);
        registry.register_cpu(&format!("matvec_{}_f32", format.name()), product);
        registry.register_cpu(&format!("matmul_{}", format.name()), product);
        if format.int8_block().is_some() {
            registry.register_cpu(&format!("matvec_{}_q8", format.name()), move |args| {
                cpu::quantized_product_int8(format, args)
            });
        }
    }
}

/// The kernel `name` of a quantized format for `device`, or, where the
/// backend has none (only the CPU has them so far), an error saying that
/// `what` (`Q4_K weights are multiplied`) happens in the blocks only on the
/// CPU and is dequantized at load elsewhere.
pub(crate) fn cpu_only_kernel(
    registry: &KernelRegistry,
    device: &Device,
    name: String,
    what: &str,
) -> Result<Kernel> {
    registry.kernel(device, &name).map_err(|error| match error {
        Error::KernelMissing { backend, .. } => Error::KernelMissing {
            name,
            backend,
            workaround: format!(
                "{what} in their blocks only on the CPU so far; on {backend} they are dequantized at load"
            ),
            remedies: &[Remedy::OtherDevice { device: "cpu" }],
        },
        other => other,
    })
}

/// The quantized products for one format: a mat-vec and a row-batched
/// product.
#[derive(Clone, Debug)]
pub struct QuantizedLinear {
    matvec: Kernel,
    matmul: Kernel,
    format: QuantFormat,
}

impl QuantizedLinear {
    /// The op for weights of `format` on `device`, its mat-vec taking
    /// `activations` as asked (f32 where the format has no integer product).
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        format: QuantFormat,
        activations: Activations,
    ) -> Result<Self> {
        let matvec = match activations {
            Activations::Int8 if format.int8_block().is_some() => format!("matvec_{}_q8", format.name()),
            _ => format!("matvec_{}_f32", format.name()),
        };
        let what = format!("{format} weights are multiplied");
        Ok(QuantizedLinear {
            matvec: cpu_only_kernel(registry, device, matvec, &what)?,
            matmul: cpu_only_kernel(registry, device, format!("matmul_{}", format.name()), &what)?,
            format,
        })
    }

    /// The weights' format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// `out[r, :] = weight · x[r, :]` for every row r of `x` f32
    /// `[rows, k]` (or flat), `out` f32 `[rows, n]`; `weight` is u8
    /// `[n, row_bytes]`, each row `k` elements in this format's blocks.
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        weight: &Buffer,
        x: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        const OP: &str = "quantized linear";
        let [n, row_bytes] = dimensions(OP, "weight", weight)?;
        expect(OP, "weight", weight, DType::U8, &[n, row_bytes])?;
        let blocks = row_bytes / self.format.block_bytes();
        if row_bytes == 0 || !row_bytes.is_multiple_of(self.format.block_bytes()) {
            return Err(Error::ShapeMismatch {
                context: format!(
                    "{OP} weight: a {} row of {row_bytes} bytes is not whole {}-byte blocks",
                    self.format,
                    self.format.block_bytes()
                ),
                expected: vec![n, blocks.max(1) * self.format.block_bytes()],
                found: vec![n, row_bytes],
            });
        }
        let k = blocks * self.format.block_elements();
        let rows = rows_of(OP, "input", x, k)?;
        expect_rows(OP, "input", x, DType::F32, rows, &[k])?;
        expect_rows(OP, "output", out, DType::F32, rows, &[n])?;
        let (kernel, op_kind) = if rows == 1 {
            (&self.matvec, OpKind::MatVec)
        } else {
            (&self.matmul, OpKind::MatMul)
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
                .grid(LaunchGrid {
                    blocks: [n as u32, 1, 1],
                    threads_per_block: [1, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    (n * row_bytes) as u64 + bytes_of(rows * k, DType::F32),
                    bytes_of(rows * n, DType::F32),
                    2 * (rows * n * k) as u64,
                )
                .op_kind(op_kind),
        )
    }
}
