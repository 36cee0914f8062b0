//! The argument lists each CUDA kernel is declared to take, by op folder
//! and `.cu` file, by kernel name where one file holds several lists, and
//! for the kernels with no `.cu` of ours: what the checks in
//! `kernel_sources_tests` compare every signature and dispatch against.

use crate::ops::Argument;

/// Every op's folder, each `.cu` file in it, and the kernel arguments its
/// kernels take (an op of two steps has a file, and a list, per step).
pub(super) const DECLARED: [(&str, &str, &[Argument]); 37] = [
    ("ops/add", "add", crate::ops::add::ARGUMENTS),
    ("ops/argmax", "argmax", crate::ops::argmax::ARGUMENTS),
    ("ops/attention", "attention", crate::ops::attention::ARGUMENTS),
    (
        "ops/attention",
        "vector_kernels",
        crate::ops::attention::ARGUMENTS,
    ),
    (
        "ops/attention",
        "combine",
        crate::ops::attention::combine::ARGUMENTS,
    ),
    ("ops/attention", "rope", crate::ops::attention::rope::ARGUMENTS),
    ("ops/copy", "copy", crate::ops::copy::ARGUMENTS),
    ("ops/embedding", "embedding", crate::ops::embedding::ARGUMENTS),
    (
        "probes/stream_read",
        "stream_read",
        crate::probes::stream_read::ARGUMENTS,
    ),
    (
        "probes/stream_write",
        "stream_write",
        crate::probes::stream_write::ARGUMENTS,
    ),
    ("ops/kv_append", "kv_append", crate::ops::kv_append::ARGUMENTS),
    ("ops/matmul", "matmul", crate::ops::matmul::ARGUMENTS),
    ("ops/matvec", "matvec", crate::ops::matvec::ARGUMENTS),
    ("ops/matvec", "residual", crate::ops::matvec::residual::ARGUMENTS),
    (
        "ops/norm_matvec",
        "norm_matvec",
        crate::ops::norm_matvec::ARGUMENTS,
    ),
    (
        "ops/norm_matvec",
        "silu",
        crate::ops::norm_matvec::silu::ARGUMENTS,
    ),
    (
        "ops/norm_matvec",
        "rope",
        crate::ops::norm_matvec::rope::ARGUMENTS,
    ),
    (
        "ops/prefill_attention",
        "prefill_attention",
        crate::ops::prefill_attention::ARGUMENTS,
    ),
    ("ops/head_norm", "head_norm", crate::ops::head_norm::ARGUMENTS),
    ("ops/moe/route", "moe_route", crate::ops::moe::route::ARGUMENTS),
    (
        "ops/moe/experts",
        "gate_up",
        crate::ops::moe::experts::gate_up::ARGUMENTS,
    ),
    (
        "ops/moe/experts",
        "down",
        crate::ops::moe::experts::down::ARGUMENTS,
    ),
    (
        "ops/moe/experts",
        "norm_gate_up",
        crate::ops::moe::experts::norm_gate_up::ARGUMENTS,
    ),
    (
        "ops/moe/group",
        "gather",
        crate::ops::moe::group::gather::ARGUMENTS,
    ),
    (
        "ops/moe/group",
        "combine",
        crate::ops::moe::group::combine::ARGUMENTS,
    ),
    ("ops/rms_norm", "rms_norm", crate::ops::rms_norm::ARGUMENTS),
    ("ops/rope", "rope", crate::ops::rope::ARGUMENTS),
    (
        "ops/rope_append",
        "rope_append",
        crate::ops::rope_append::ARGUMENTS,
    ),
    (
        "ops/rope_append",
        "normed",
        crate::ops::rope_append::normed::ARGUMENTS,
    ),
    ("ops/sample", "sample", crate::ops::sample::ARGUMENTS),
    ("ops/silu_mul", "silu_mul", crate::ops::silu_mul::ARGUMENTS),
    ("probes/spin", "spin", crate::probes::spin::ARGUMENTS),
    ("ops/synthetic", "synthetic", crate::ops::synthetic::ARGUMENTS),
    (
        "ops/quantized/linear",
        "narrow",
        crate::ops::quantized::linear::gemm::ARGUMENTS,
    ),
    (
        "ops/quantized/linear",
        "streamed_kernels",
        crate::ops::quantized::linear::streamed::arguments::ARGUMENTS,
    ),
    (
        "ops/quantized/feed_forward",
        "feed_forward",
        crate::ops::quantized::feed_forward::arguments::ARGUMENTS,
    ),
    (
        "ops/quantized/feed_forward",
        "feed_forward_streamed",
        crate::ops::quantized::feed_forward::arguments::ARGUMENTS,
    ),
];

/// Files holding kernels of several argument lists (most instantiated per
/// quantized format: `{format}` in their names, see
/// `quantized::linear::cuda_source`): each kernel's list by its name.
pub(super) const DECLARED_PER_KERNEL: [(&str, &[Argument]); 28] = [
    (
        "attention_combine_q8",
        crate::ops::attention::combine_quantized::ARGUMENTS,
    ),
    ("matvec_{format}_q8", crate::ops::quantized::linear::ARGUMENTS),
    ("matmul_{format}", crate::ops::quantized::linear::ARGUMENTS),
    ("matvec_add_{format}_q8", crate::ops::matvec::residual::ARGUMENTS),
    (
        "matvecs_{format}_q8",
        crate::ops::quantized::linear::fused::matvecs::ARGUMENTS,
    ),
    (
        "matvecs_rope_{format}_q8_bf16",
        crate::ops::quantized::linear::fused::matvecs_rope::ARGUMENTS,
    ),
    (
        "matvec_silu_{format}_q8",
        crate::ops::quantized::linear::fused::silu::ARGUMENTS,
    ),
    (
        "matvec_silu_{format}_q8_stage",
        crate::ops::quantized::linear::fused::silu_stage::ARGUMENTS,
    ),
    (
        "matvec_silu_{format}_q8_norm_stage",
        crate::ops::quantized::linear::fused::silu_norm_stage::ARGUMENTS,
    ),
    (
        "matvec_add_{format}_q8_norm_stage",
        crate::ops::quantized::linear::fused::matvec_add_norm_stage::ARGUMENTS,
    ),
    (
        "quantize_q8",
        crate::ops::quantized::linear::fused::staging::quantize::ARGUMENTS,
    ),
    (
        "norm_quantize_q8",
        crate::ops::quantized::linear::fused::staging::norm_quantize::ARGUMENTS,
    ),
    (
        "quantize_q8_streamed_reader",
        crate::ops::quantized::linear::fused::staging::quantize::ARGUMENTS,
    ),
    (
        "norm_quantize_q8_streamed_reader",
        crate::ops::quantized::linear::fused::staging::norm_quantize::ARGUMENTS,
    ),
    ("embedding_{format}", crate::ops::embedding::ARGUMENTS),
    (
        "dequantize_{format}_bf16",
        crate::ops::quantized::linear::gemm::dequantize::ARGUMENTS,
    ),
    (
        "moe_gate_up_{format}_q8",
        crate::ops::quantized::experts::gate_up::ARGUMENTS,
    ),
    (
        "moe_down_add_{format}_q8",
        crate::ops::quantized::experts::down::ARGUMENTS,
    ),
    (
        "stream_silu_q4_k_held2_norm",
        crate::ops::quantized::linear::streamed::norm_arguments::ARGUMENTS,
    ),
    (
        "stream_silu_q4_k_held4_norm",
        crate::ops::quantized::linear::streamed::norm_arguments::ARGUMENTS,
    ),
    (
        "stream_matvecs_rope_q4_k_held2_bf16",
        crate::ops::quantized::linear::streamed_rope::rope_arguments::ARGUMENTS,
    ),
    (
        "stream_matvecs_rope_q4_k_held4_bf16",
        crate::ops::quantized::linear::streamed_rope::rope_arguments::ARGUMENTS,
    ),
    (
        "stream_add_q4_k_split2_held2",
        crate::ops::quantized::linear::streamed::add_arguments::ARGUMENTS,
    ),
    (
        "stream_add_q4_k_split2_held4",
        crate::ops::quantized::linear::streamed::add_arguments::ARGUMENTS,
    ),
    (
        "stream_add_q6_k_split2_held2",
        crate::ops::quantized::linear::streamed::add_arguments::ARGUMENTS,
    ),
    (
        "stream_add_q6_k_split2_held4",
        crate::ops::quantized::linear::streamed::add_arguments::ARGUMENTS,
    ),
    (
        "stream_add_q4_k_held2_norm_stage",
        crate::ops::quantized::linear::fused::matvec_add_norm_stage::ARGUMENTS,
    ),
    (
        "stream_add_q4_k_held4_norm_stage",
        crate::ops::quantized::linear::fused::matvec_add_norm_stage::ARGUMENTS,
    ),
];

/// The argument lists of kernels with no `.cu` of ours, declared in the
/// runtime, which reads them: the collectives'. (The GEMM's is matmul's,
/// checked against matmul.cu above.)
pub(super) const DECLARED_WITHOUT_SOURCE: [(&str, &[Argument]); 2] = [
    (
        "all_reduce_sum",
        crate::runtime::collective::group::all_reduce::ARGUMENTS,
    ),
    (
        "all_gather",
        crate::runtime::collective::group::all_gather::ARGUMENTS,
    ),
];
