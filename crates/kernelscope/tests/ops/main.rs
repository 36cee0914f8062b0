//! Every op against an independent naive reference written here in f64
//! (plain loops, no code shared with the crate), on seeded random inputs at
//! several shapes including odd sizes, for every weight dtype the op
//! supports, and for the row-batched ops at 1, 3 and 17 rows and every
//! output dtype. Outputs are poisoned with NaN (or u32::MAX) before each run
//! so a kernel that writes nothing fails. f16/bf16 weights and inputs are
//! rounded to their dtype before the reference is computed (the ops widen
//! them exactly), so one f32-math tolerance (relative 1e-5) serves every
//! dtype; outputs stored in f16/bf16 must be what a result within that
//! tolerance rounds to (`assert_close_in`). Each test also checks the op
//! kind and kernel its dispatches declare to the profiler.

#[path = "../common/mod.rs"]
mod common;
mod copy;
mod elementwise;
mod embedding;
mod head_norm;
mod helpers;
mod matmul;
mod moe_experts;
mod moe_group;
mod moe_route;
mod rms_norm;
mod rope;
mod sampling;
mod stream_read;
mod stream_write;
