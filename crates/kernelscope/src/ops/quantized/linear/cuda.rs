//! What the CUDA quantized kernels share on the host side: their source
//! assembled per format (with the check that a format's CUDA struct agrees
//! with its Rust file), the block size and launch grid, the staging of x
//! in shared memory, and the error where a backend lacks a kernel.

use crate::error::{Error, Remedy, Result};
use crate::quant::QuantFormat;
use crate::runtime::{Device, Kernel, KernelRegistry, LaunchGrid};

/// The CUDA kernels of each format (`kernels.cu`), `{}` standing for its
/// name.
pub(crate) const CUDA_KERNELS: [&str; 10] = [
    "matvec_{}_q8",
    "matmul_{}",
    "matvec_add_{}_q8",
    "matvec_add_{}_q8_norm_stage",
    "matvecs_{}_q8",
    "matvecs_rope_{}_q8_bf16",
    "matvec_silu_{}_q8",
    "matvec_silu_{}_q8_stage",
    "matvec_silu_{}_q8_norm_stage",
    "dequantize_{}_bf16",
];

/// The CUDA source of `format`'s kernels: the prelude, what every kernel
/// shares (`quantized.cuh`: loads and x staged; `formats.cuh`: the formats;
/// `products.cuh`: the row loops), and `kernels.cu` with the format's name
/// and struct (named as the variant, `Q4_K`) put in.
pub(crate) fn cuda_source(format: QuantFormat) -> String {
    cuda_source_for(format, include_str!("kernels.cu"))
}

/// The CUDA source of `template` (kernels of one format: `{format}` stands
/// for its name, `{Format}` for its struct in `formats.cuh`) for `format`,
/// over what every quantized kernel shares. The source also asserts, when
/// NVRTC compiles it, that the struct's block size and element count are
/// the Rust format's: the two descriptions of a block cannot drift apart.
pub(crate) fn cuda_source_for(format: QuantFormat, template: &str) -> String {
    let structure = format!("{format:?}");
    let kernels = template
        .replace("{format}", format.name())
        .replace("{Format}", &structure);
    cuda_source_with(&format!(
        "static_assert({structure}::BYTES == {bytes}u && {structure}::BLOCK == {elements}u, \
         \"formats.cuh's {structure} disagrees with quant/formats/{name}.rs\");\n{kernels}",
        bytes = format.block_bytes(),
        elements = format.block_elements(),
        name = format.name(),
    ))
}

/// The CUDA source of `kernels` (one format's, its names put in) over what
/// every quantized kernel shares: the prelude, `quantized.cuh`,
/// `formats.cuh`, `products.cuh` and `chunked.cuh` (other ops' quantized
/// kernels too).
pub(crate) fn cuda_source_with(kernels: &str) -> String {
    crate::ops::cuda_source(&format!(
        "{}\n{}\n{}\n{}\n{}\n{kernels}",
        include_str!("quantized.cuh"),
        include_str!("formats.cuh"),
        include_str!("products.cuh"),
        include_str!("chunked.cuh"),
        include_str!("streamed.cuh")
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
