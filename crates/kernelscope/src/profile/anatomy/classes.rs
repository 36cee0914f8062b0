//! What a kernel is, as the structure of a decoder token sees it: its
//! class (projection, attention, norm, activation quantization, ...) from
//! its name and op kind, and the symbol it is recognised by in every layer.

/// What a kernel is, as far as the structure needs: the landmarks of a
/// decoder layer and everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// A weight matrix times the activations (a mat-vec, a GEMM, or a
    /// library's split-K reduction that finishes one).
    Projection,
    /// Attention (and the kernels that prepare or combine it).
    Attention,
    /// An RMSNorm or another normalisation.
    Norm,
    /// Activations quantized for an integer product (and nothing else).
    Quantize,
    /// Picking a token (argmax, sampling).
    Sample,
    /// The token's embedding row.
    Embedding,
    /// A copy or fill the driver ran (memcpy, memset).
    Transfer,
    /// Anything else: elementwise work, rope, cache writes, casts.
    Other,
}

/// One kernel of a token, as the structure sees it.
#[derive(Clone, Debug)]
pub(crate) struct Unit {
    /// Its name with template arguments and numeric suffixes cut, interned:
    /// equal for the same kernel in every layer.
    pub symbol: u32,
    /// Its class.
    pub class: Class,
    /// Whether its name says it quantizes activations too (a norm that
    /// quantizes: kscope's `norm_quantize_q8`).
    pub quantizes: bool,
    /// Whether its name says it chooses experts (`topk`, `argsort`, `router`).
    pub routes: bool,
    /// Whether it only finishes the projection before it (cuBLASLt's split-K reduction).
    pub finishes_projection: bool,
    /// Whether it is a projection that normalises its input first (a
    /// fused `RmsNorm+MatVec` kind): it does the norm's role too.
    pub normalises: bool,
}

/// The class of a kernel from its readable name and the op kind guessed
/// (or declared) for it.
pub(crate) fn classify(name: &str, op_kind: &str) -> Unit {
    let lower = name.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|word| lower.contains(word));
    let quantizes = has(&["quantize"]) && !has(&["dequantize"]);
    let norm_words = has(&["rms_norm", "rmsnorm", "layer_norm", "layernorm", "norm_"])
        || (lower.starts_with("triton") && has(&["rsqrt"]));
    let projects = op_kind.contains("MatVec") || op_kind.contains("MatMul");
    let normalises = projects && (op_kind.contains("RmsNorm") || op_kind.contains("Norm"));
    let class = if lower.starts_with("memcpy") || lower.starts_with("memset") {
        Class::Transfer
    } else if projects {
        Class::Projection
    } else if has(&["rope"]) {
        // A per-head norm fused with rope (llama.cpp's
        // `rms_norm_mul_rope_f32`, Qwen3's q/k norms) is rope's work.
        Class::Other
    } else if norm_words || op_kind == "RmsNorm" || op_kind == "Norm" {
        Class::Norm
    } else if quantizes {
        Class::Quantize
    } else if has(&["splitkreduce", "splitk_reduce"])
        || op_kind.contains("MatVec")
        || op_kind.contains("MatMul")
    {
        Class::Projection
    } else if op_kind.contains("Attention") || op_kind == "Softmax" {
        Class::Attention
    } else if op_kind == "Argmax" || op_kind == "Sample" || has(&["argmax", "sample", "sampling"]) {
        Class::Sample
    } else if op_kind == "Embedding" || has(&["embedding", "get_rows"]) {
        Class::Embedding
    } else {
        Class::Other
    };
    Unit {
        symbol: 0,
        class,
        quantizes,
        routes: has(&["topk", "top_k", "argsort", "router", "route", "gating"]),
        finishes_projection: has(&["splitkreduce", "splitk_reduce"]),
        normalises,
    }
}

/// The name a kernel is recognised by in every layer: its readable name
/// without template arguments or the numeric suffix compilers add
/// (Inductor's `triton_red_fused_..._7`).
pub(crate) fn symbol_name(readable: &str) -> String {
    let mut out = String::with_capacity(readable.len());
    let mut depth = 0usize;
    for character in readable.chars() {
        match character {
            '<' => {
                if depth == 0 {
                    out.push('<');
                }
                depth += 1;
            }
            '>' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    out.push('>');
                }
            }
            _ if depth == 0 => out.push(character),
            _ => {}
        }
    }
    let trimmed = out.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.len() < out.len() && trimmed.ends_with('_') {
        trimmed.trim_end_matches('_').to_string()
    } else {
        out
    }
}
