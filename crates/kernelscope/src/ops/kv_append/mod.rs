//! Appends this position's key and value rows to a layer's KV cache, at the
//! position held in device memory.

mod cpu;

use super::{Arguments, bytes_of, expect, kernel_arguments};
use crate::error::Result;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

kernel_arguments! {
    KEY: "key" Read,
    VALUE: "value" Read,
    KEY_CACHE: "key_cache" ReadWrite,
    VALUE_CACHE: "value_cache" ReadWrite,
    POSITION_SLOT: "position_slot" Read,
    INDEX: "index" U32,
    MAX_POSITIONS: "max_positions" U32,
    KV_DIM: "kv_dim" U32,
}

/// Registers `kv_append_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("kv_append_f32", cpu::kv_append);
    registry.register_cuda_source("kv_append_f32", super::cuda_source(include_str!("kv_append.cu")));
}

/// The KV-append op.
#[derive(Clone, Debug)]
pub struct KvAppend {
    kernel: Kernel,
}

impl KvAppend {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(KvAppend {
            kernel: super::kernel_for(registry, device, "kv_append", DType::F32)?,
        })
    }

    /// `key_cache[pos] = key; value_cache[pos] = value` with caches
    /// `[max_positions, kv_dim]` and `pos = position_slot[index]`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        key: &Buffer,
        value: &Buffer,
        key_cache: &Buffer,
        value_cache: &Buffer,
        position_slot: &Buffer,
        index: usize,
    ) -> Result<()> {
        let kv_dim = key.len();
        let max_positions = key_cache.len() / kv_dim.max(1);
        expect("kv_append", "key", key, DType::F32, &[kv_dim])?;
        expect("kv_append", "value", value, DType::F32, &[kv_dim])?;
        expect(
            "kv_append",
            "key cache",
            key_cache,
            DType::F32,
            &[max_positions, kv_dim],
        )?;
        expect(
            "kv_append",
            "value cache",
            value_cache,
            DType::F32,
            &[max_positions, kv_dim],
        )?;
        super::expect_slot("kv_append", position_slot, index)?;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(KEY, key)
                .buffer(VALUE, value)
                .buffer(KEY_CACHE, key_cache)
                .buffer(VALUE_CACHE, value_cache)
                .buffer(POSITION_SLOT, position_slot)
                .scalar(INDEX, index as u32)
                .scalar(MAX_POSITIONS, max_positions as u32)
                .scalar(KV_DIM, kv_dim as u32)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(kv_dim, 256))
                .cost(bytes_of(4 * kv_dim, DType::F32), 0)
                .op_kind(OpKind::Copy),
        )
    }
}
