//! What a foreign kernel is called and what kind of work it does, from its
//! name alone: CUPTI gives mangled C++ (PyTorch's, CUTLASS's templates),
//! which is shown demangled without its parameter list, and the op kind is
//! guessed from words kernel authors use (`gemv`, `flash`, `rms_norm`), so
//! the per-op table of a PyTorch or llama.cpp run groups like kscope's own.

use cpp_demangle::{DemangleOptions, Symbol};

use crate::profile::{OpKind, Primitive};

/// Longest kernel name shown whole; longer ones lose their inner template
/// arguments (PyTorch's lambdas demangle to thousands of characters).
pub(crate) const LONGEST_NAME: usize = 160;

/// The kernel's name as people read it: demangled without parameters or
/// return type where it is mangled C++, else as given; past
/// [`LONGEST_NAME`], template arguments nested deeper than the first level
/// become `…`, and then the first level too if still too long.
pub(crate) fn readable(name: &str) -> String {
    let demangled = if name.starts_with("_Z") {
        let options = DemangleOptions::new().no_params().no_return_type();
        Symbol::new(name)
            .ok()
            .and_then(|symbol| symbol.demangle(&options).ok())
            .unwrap_or_else(|| name.to_string())
    } else {
        name.to_string()
    };
    if demangled.chars().count() <= LONGEST_NAME {
        return demangled;
    }
    let shallower = templates_cut_below(&demangled, 2);
    if shallower.chars().count() <= LONGEST_NAME {
        return shallower;
    }
    templates_cut_below(&demangled, 1)
}

/// `name` with the contents of template brackets nested `depth` or deeper
/// replaced by `…` (`depth` 1: every argument list becomes `<…>`).
fn templates_cut_below(name: &str, depth: usize) -> String {
    let mut out = String::with_capacity(name.len().min(4 * LONGEST_NAME));
    let mut level = 0usize;
    for character in name.chars() {
        match character {
            '<' => {
                level += 1;
                if level <= depth {
                    out.push('<');
                }
                if level == depth {
                    out.push('…');
                }
            }
            '>' => {
                if level <= depth {
                    out.push('>');
                }
                level = level.saturating_sub(1);
            }
            _ if level < depth => out.push(character),
            _ => {}
        }
    }
    out
}

/// Words in a kernel's name and the op kind they mean, most specific first.
const KINDS_BY_WORD: [(&[&str], &str); 13] = [
    (&["gemv", "mul_mat_vec", "matvec", "mat_vec"], "MatVec"),
    (
        &["flash", "fmha", "attention", "attn", "sdpa", "paged"],
        "Attention",
    ),
    (
        &["gemm", "matmul", "mul_mat", "xmma", "cutlass", "nvjet", "cublas"],
        "MatMul",
    ),
    (&["rms_norm", "rmsnorm"], "RmsNorm"),
    (&["layer_norm", "layernorm", "norm_"], "Norm"),
    (&["softmax", "soft_max"], "Softmax"),
    (&["rotary", "rope"], "Rope"),
    (&["silu", "swiglu", "swi_glu"], "SiluMul"),
    (&["argmax", "arg_max"], "Argmax"),
    (&["embedding", "get_rows", "index_select"], "Embedding"),
    (&["reduce", "sum_"], "Reduce"),
    (&["copy", "cpy", "cat_", "concat"], "Copy"),
    (
        &["elementwise", "bin_bcast", "vectorized", "unrolled"],
        "Elementwise",
    ),
];

/// The collective an NCCL kernel (`ncclDevKernel_AllReduce_Sum_bf16_RING_LL`,
/// older `ncclKernel_AllGather_RING_LL_Sum_float`) runs, from its lowercase
/// name: so the ranks' collectives are matched and their waiting and
/// communication told apart, as for kscope's own. A kernel that names
/// none (NCCL's generic kernels, which run grouped work) is a collective
/// of no named kind.
fn collective_kind(lower: &str) -> OpKind {
    const KINDS: [(&[&str], Primitive); 5] = [
        (&["allreduce", "all_reduce"], Primitive::AllReduce),
        (&["allgather", "all_gather"], Primitive::AllGather),
        (&["reducescatter", "reduce_scatter"], Primitive::ReduceScatter),
        (&["broadcast"], Primitive::Broadcast),
        (&["sendrecv", "send_recv", "_send", "_recv"], Primitive::SendRecv),
    ];
    let primitive = KINDS
        .iter()
        .find(|(words, _)| words.iter().any(|word| lower.contains(word)))
        .map_or(Primitive::Collective, |&(_, primitive)| primitive);
    OpKind::primitive(primitive)
}

/// The op kind of a whole graph's execution (`kscope profile --graphs
/// whole`), whose kernels were not traced one by one.
pub(crate) const WHOLE_GRAPH_KIND: &str = "WholeGraph";

/// The op kind `name` suggests: a known primitive where a word names one
/// (`MatVec`, `Attention`), a plain group otherwise (`Elementwise`,
/// `Reduce`), `Kernel` when nothing does.
pub(crate) fn op_kind(name: &str) -> OpKind {
    if name.starts_with(kernelscope_trace::WHOLE_GRAPH_NAME_PREFIX) {
        return WHOLE_GRAPH_KIND.parse().unwrap_or(OpKind::Other);
    }
    let lower = name.to_ascii_lowercase();
    if lower.contains("nccl") {
        return collective_kind(&lower);
    }
    let kind = KINDS_BY_WORD
        .iter()
        .find(|(words, _)| words.iter().any(|word| lower.contains(word)))
        .map_or("Kernel", |&(_, kind)| kind);
    kind.parse().unwrap_or(OpKind::Other)
}

/// An NVTX message as a scope: PyTorch's `emit_nvtx` appends the op's
/// sequence number and shapes (`aten::mm, seq = 12, sizes = [...]`), which
/// would make every call its own scope; they are cut off.
pub(crate) fn scope_part(message: &str) -> &str {
    [", seq = ", ", op_id = ", ", sizes = "]
        .iter()
        .filter_map(|marker| message.find(marker))
        .min()
        .map_or(message, |cut| &message[..cut])
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_names_read_without_parameters() {
        assert_eq!(
            readable(
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
            ),
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1> >"
        );
        assert_eq!(readable("matvec_bf16_rows"), "matvec_bf16_rows");
        assert_eq!(readable("_Znot a symbol"), "_Znot a symbol");
    }

    #[test]
    fn huge_template_names_lose_their_inner_arguments() {
        let inner = "at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>".repeat(4);
        let name = format!("at::native::distribution_kernel<float, 4, {inner}>");
        let shown = readable(&name);
        assert!(shown.chars().count() <= LONGEST_NAME, "{shown}");
        assert!(shown.starts_with("at::native::distribution_kernel<"), "{shown}");
        assert_eq!(templates_cut_below("a<b<c>, d>::e<f>", 2), "a<b<…>, d>::e<f>");
        assert_eq!(templates_cut_below("a<b<c>, d>::e<f>", 1), "a<…>::e<…>");
    }

    #[test]
    fn kinds_come_from_the_words_of_a_name() {
        assert_eq!(op_kind("mul_mat_vec_q<type 12>").to_string(), "MatVec");
        assert_eq!(op_kind("sm90_xmma_gemm_bf16bf16_bf16f32").to_string(), "MatMul");
        assert_eq!(op_kind("flash_fwd_splitkv_kernel").to_string(), "Attention");
        assert_eq!(op_kind("rms_norm_f32<1024>").to_string(), "RmsNorm");
        assert_eq!(
            op_kind("at::native::vectorized_elementwise_kernel").to_string(),
            "Elementwise"
        );
        assert_eq!(op_kind("my_kernel").to_string(), "Kernel");
        // A whole graph is not guessed from words its id could spell.
        assert_eq!(
            op_kind(&kernelscope_trace::whole_graph_name(7)).to_string(),
            WHOLE_GRAPH_KIND
        );
        assert_eq!(op_kind("my_graph_kernel").to_string(), "Kernel");
    }

    #[test]
    fn nccl_kernels_are_the_collectives_they_run() {
        let cases = [
            (
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                "AllReduce",
            ),
            ("ncclKernel_AllReduce_RING_LL_Sum_float", "AllReduce"),
            ("ncclDevKernel_AllGather_RING_LL", "AllGather"),
            ("ncclDevKernel_ReduceScatter_Sum_f32_RING_SIMPLE", "ReduceScatter"),
            ("ncclDevKernel_Broadcast_RING_LL", "Broadcast"),
            ("ncclDevKernel_SendRecv", "SendRecv"),
            ("ncclDevKernel_Generic_4", "Collective"),
        ];
        for (name, kind) in cases {
            let found = op_kind(name);
            assert_eq!(found.to_string(), kind, "{name}");
            assert!(found.is_collective(), "{name}");
        }
        // "reduce" alone is a reduction, not a collective.
        assert!(!op_kind("at::native::reduce_kernel<512, 1>").is_collective());
    }

    #[test]
    fn emit_nvtx_suffixes_are_cut() {
        assert_eq!(
            scope_part("aten::mm, seq = 12, op_id = 40, sizes = [[1, 2]]"),
            "aten::mm"
        );
        assert_eq!(scope_part("layer.3"), "layer.3");
        assert_eq!(scope_part("a, b"), "a, b");
    }
}
