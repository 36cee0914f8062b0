//! The KV cache and attention ops against an independent f64 reference
//! written here: kv_append in every cache dtype; split decode attention at
//! positions on both sides of split boundaries and far beyond what one
//! block could hold (12,288, 65,536), replayed from one capture at several
//! positions; causal prefill attention over a chunk with and without
//! history and at repeated, out-of-order positions, its mask checked by
//! changing what a row may not see; a bf16 cache against an f32 one; and
//! decode attention quantizing its own output for a quantized o_proj.
//! Cached values are rounded to the cache dtype before the reference is
//! computed, so one f32-math tolerance serves every dtype; narrowed
//! outputs are compared within their rounding.

mod decode;
mod helpers;
mod kv_append;
mod prefill;
mod quantized_output;
