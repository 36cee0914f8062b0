//! The CPU's arithmetic in its widest instructions, for the ops' CPU
//! kernels: the weight element types widened to f32 ([`WeightElement`]),
//! dot products on AVX-512 BF16, AVX2+FMA or portable lanes chosen once per
//! process (`dot`), and a vectorisable `exp` (`exp`). Below the ops: they
//! use these, these use no op.

pub mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_x86;
mod element;
pub(crate) mod exp;
#[cfg(target_arch = "x86_64")]
pub(crate) mod prefetch;

pub(crate) use dot::dot;
pub use element::WeightElement;
