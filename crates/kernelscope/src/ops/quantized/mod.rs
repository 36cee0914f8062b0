//! The quantized family: ops over weights in GGUF's block formats (Q4_K,
//! Q8_0, ...), which share the formats' layouts, their CUDA loads
//! (`linear/formats.cuh`) and the activations quantized to 8 bits once per
//! product (`linear/stage.cu`). `linear` is the mat-vec and GEMM of a
//! projection, `embedding` the lookup of a quantized table, `experts` a
//! mixture-of-experts layer's products over quantized experts,
//! `feed_forward` a dense layer's whole MLP half in one persistent launch.

pub mod embedding;
pub mod experts;
pub mod feed_forward;
pub mod linear;

use crate::runtime::KernelRegistry;

/// Registers every quantized kernel.
pub fn register(registry: &mut KernelRegistry) {
    embedding::register(registry);
    linear::register(registry);
    experts::register(registry);
    feed_forward::register(registry);
}
