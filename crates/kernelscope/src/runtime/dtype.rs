//! Element types a buffer can hold, and the Rust types that stand for them.

use std::fmt;

use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// The element type of a [`Buffer`](crate::Buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16: f32's exponent range, 8 bits of mantissa.
    BF16,
    /// 32-bit unsigned integer.
    U32,
    /// 32-bit signed integer.
    I32,
    /// Bytes: the blocks of a quantized weight (`crate::quant`), whose
    /// format the op reading them is told.
    U8,
}

impl DType {
    /// Bytes per element.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// The short lowercase name used in kernel names (`rms_norm_bf16`) and files.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can live in a [`Buffer`](crate::Buffer).
pub trait Element: bytemuck::Pod + Send + Sync + fmt::Debug + 'static {
    /// The matching buffer dtype.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
}
impl Element for u32 {
    const DTYPE: DType = DType::U32;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for u8 {
    const DTYPE: DType = DType::U8;
}
