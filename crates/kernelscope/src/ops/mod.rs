//! Ops: one folder per op, each with its CPU reference, its CUDA kernel
//! (where the backend has one) and its launch. Each op declares its op kind,
//! the buffers it reads and writes, and the bytes and flops it moves.

pub mod copy;

use crate::KernelRegistry;

/// A registry holding every op's kernels.
pub fn registry() -> KernelRegistry {
    let mut registry = KernelRegistry::new();
    copy::register(&mut registry);
    registry
}
