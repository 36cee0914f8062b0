//! Preset shapes for synthetic checkpoints: tiny ones for tests and the
//! built-in default, and real shapes of public models for benchmarks.

use kernelscope::ops::rope::{Llama3Scaling, RopeScaling};

use crate::config::{Architecture, Config, Experts};
use crate::error::{ModelError, Result};

/// The preset names, smallest first.
pub const PRESETS: [&str; 16] = [
    "tiny",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-qwen3-moe",
    "tiny-mixtral",
    "tiny-llama3",
    "tiny-256",
    "qwen2.5-0.5b",
    "llama-3.2-1b",
    "llama-3-8b",
    "qwen3-8b",
    "qwen3-30b-a3b",
    "llama-3.1-8b",
    "tinyllama-1.1b",
    "mixtral-8x7b",
    "llama-3-70b",
];

/// About a million parameters of `architecture`: fast enough for
/// every test, big enough for grouped-query attention.
fn tiny(architecture: Architecture) -> Config {
    Config {
        architecture,
        vocab_size: 2048,
        hidden_size: 128,
        intermediate_size: 352,
        num_layers: 4,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 32,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        rope_scaling: None,
        rope_attention_scaling: 1.0,
        max_position_embeddings: 512,
        sliding_window: None,
        rope_frequency_factors: None,
        tie_word_embeddings: true,
        qkv_bias: false,
        o_bias: false,
        qk_norm: false,
        experts: None,
        eos_token_ids: vec![2],
    }
}

/// The configuration of preset `name`.
pub fn preset(name: &str) -> Result<Config> {
    Ok(match name {
        // Llama with grouped-query attention and tied embeddings.
        "tiny" => tiny(Architecture::Llama),
        "tiny-qwen2" => tiny_qwen2(),
        "tiny-qwen3" => tiny_qwen3(),
        "tiny-qwen3-moe" => tiny_qwen3_moe(),
        "tiny-mixtral" => tiny_mixtral(),
        "tiny-llama3" => tiny_llama3(),
        "tiny-256" => tiny_256(),
        "qwen2.5-0.5b" => qwen2_5_0_5b(),
        "llama-3.2-1b" => llama_3_2_1b(),
        "llama-3-8b" => llama_3_8b(),
        "qwen3-8b" => qwen3_8b(),
        "qwen3-30b-a3b" => qwen3_30b_a3b(),
        "mixtral-8x7b" => mixtral_8x7b(),
        "llama-3-70b" => llama_3_70b(),
        "llama-3.1-8b" => llama_3_1_8b(),
        "tinyllama-1.1b" => tinyllama_1_1b(),
        other => {
            return Err(ModelError::UnknownPreset {
                name: other.to_string(),
                known: PRESETS.join(", "),
            });
        }
    })
}

/// The tiny shape as Qwen2: q/k/v biases, an untied LM head.
fn tiny_qwen2() -> Config {
    Config {
        qkv_bias: true,
        tie_word_embeddings: false,
        rope_theta: 1_000_000.0,
        rms_norm_eps: 1e-6,
        ..tiny(Architecture::Qwen2)
    }
}

/// The tiny shape as Qwen3: q and k normalised per head before RoPE, a
/// head wider than hidden / heads (as Qwen3-0.6B's 128 over 1024 / 16),
/// no biases, an untied LM head.
fn tiny_qwen3() -> Config {
    Config {
        head_dim: 48,
        qk_norm: true,
        experts: None,
        tie_word_embeddings: false,
        rope_theta: 1_000_000.0,
        rms_norm_eps: 1e-6,
        ..tiny(Architecture::Qwen3)
    }
}

/// The tiny Qwen3 with a mixture of experts: 4 of 16 experts of 64 rows
/// per token, weights renormalised, the first layer dense (as
/// `mlp_only_layers` allows), so both kinds of layer meet in one model.
fn tiny_qwen3_moe() -> Config {
    let base = tiny_qwen3();
    Config {
        experts: Some(Experts {
            count: 16,
            per_token: 4,
            intermediate_size: 64,
            normalize_weights: true,
            sparse_layers: (0..base.num_layers).map(|layer| layer != 0).collect(),
        }),
        ..tiny(Architecture::Qwen3Moe)
    }
    .with_attention_of(&base)
}

/// The tiny Mistral shape as Mixtral: 2 of 8 experts of 160 rows in every
/// layer, an untied LM head.
fn tiny_mixtral() -> Config {
    let base = tiny(Architecture::Mixtral);
    Config {
        intermediate_size: 160,
        tie_word_embeddings: false,
        rope_theta: 1_000_000.0,
        experts: Some(Experts {
            count: 8,
            per_token: 2,
            intermediate_size: 160,
            normalize_weights: true,
            sparse_layers: vec![true; base.num_layers],
        }),
        ..base
    }
}

/// Llama 3 RoPE scaling whose thresholds fall inside this head size's
/// wavelengths, so all three bands of the rule are exercised.
fn tiny_llama3() -> Config {
    Config {
        rope_theta: 500_000.0,
        rope_scaling: Some(RopeScaling::Llama3(Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64.0,
        })),
        tie_word_embeddings: false,
        ..tiny(Architecture::Llama)
    }
}

/// The tiny Llama with rows of 256: whole blocks of the K-quants (Q4_K,
/// Q5_K, Q6_K), which the tiny preset's rows of 128 are not, so GGUF files
/// of every type hold what real models' files hold.
fn tiny_256() -> Config {
    Config {
        hidden_size: 256,
        intermediate_size: 768,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 64,
        num_layers: 8,
        tie_word_embeddings: false,
        ..tiny(Architecture::Llama)
    }
}

/// Qwen2.5 0.5B's shape: 14 query heads over 2 key/value heads, q/k/v
/// biases, tied embeddings.
fn qwen2_5_0_5b() -> Config {
    Config {
        architecture: Architecture::Qwen2,
        vocab_size: 151_936,
        hidden_size: 896,
        intermediate_size: 4864,
        num_layers: 24,
        num_heads: 14,
        num_kv_heads: 2,
        head_dim: 64,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        rope_scaling: None,
        rope_attention_scaling: 1.0,
        sliding_window: None,
        rope_frequency_factors: None,
        max_position_embeddings: 32_768,
        tie_word_embeddings: true,
        qkv_bias: true,
        o_bias: false,
        qk_norm: false,
        experts: None,
        eos_token_ids: vec![151_643],
    }
}

/// Llama 3.2 1B's shape: Llama 3 RoPE scaling, tied embeddings.
fn llama_3_2_1b() -> Config {
    Config {
        architecture: Architecture::Llama,
        vocab_size: 128_256,
        hidden_size: 2048,
        intermediate_size: 8192,
        num_layers: 16,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 64,
        rms_norm_eps: 1e-5,
        rope_theta: 500_000.0,
        rope_scaling: Some(RopeScaling::Llama3(Llama3Scaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        })),
        rope_attention_scaling: 1.0,
        sliding_window: None,
        rope_frequency_factors: None,
        max_position_embeddings: 131_072,
        tie_word_embeddings: true,
        qkv_bias: false,
        o_bias: false,
        qk_norm: false,
        experts: None,
        eos_token_ids: vec![128_001],
    }
}

/// Llama 3 8B's shape: 8,192 positions, an untied LM head.
fn llama_3_8b() -> Config {
    Config {
        architecture: Architecture::Llama,
        vocab_size: 128_256,
        hidden_size: 4096,
        intermediate_size: 14_336,
        num_layers: 32,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        rms_norm_eps: 1e-5,
        rope_theta: 500_000.0,
        rope_scaling: None,
        rope_attention_scaling: 1.0,
        sliding_window: None,
        rope_frequency_factors: None,
        max_position_embeddings: 8192,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        qk_norm: false,
        experts: None,
        eos_token_ids: vec![128_001],
    }
}

/// Qwen3 8B's shape (Qwen/Qwen3-8B's config.json): 36 layers, 32 query
/// heads over 8 key/value heads of 128, q and k normalised per head.
fn qwen3_8b() -> Config {
    Config {
        architecture: Architecture::Qwen3,
        vocab_size: 151_936,
        hidden_size: 4096,
        intermediate_size: 12_288,
        num_layers: 36,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        rope_scaling: None,
        rope_attention_scaling: 1.0,
        sliding_window: None,
        rope_frequency_factors: None,
        max_position_embeddings: 40_960,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        qk_norm: true,
        experts: None,
        eos_token_ids: vec![151_645],
    }
}

/// Llama 3 70B: 141 GB of bf16 weights, more than one H200 holds;
/// run split (--tp 2 or more), its weights generated on each GPU.
fn llama_3_70b() -> Config {
    Config {
        architecture: Architecture::Llama,
        vocab_size: 128_256,
        hidden_size: 8192,
        intermediate_size: 28_672,
        num_layers: 80,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        rms_norm_eps: 1e-5,
        rope_theta: 500_000.0,
        rope_scaling: None,
        rope_attention_scaling: 1.0,
        sliding_window: None,
        rope_frequency_factors: None,
        max_position_embeddings: 8192,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        qk_norm: false,
        experts: None,
        eos_token_ids: vec![128_001],
    }
}

/// Llama 3's shapes with Llama 3.1's long context: the llama3 RoPE
/// scaling and 131,072 positions.
fn llama_3_1_8b() -> Config {
    Config {
        rope_scaling: Some(RopeScaling::Llama3(Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        })),
        max_position_embeddings: 131_072,
        eos_token_ids: vec![128_001, 128_008, 128_009],
        ..llama_3_8b()
    }
}

/// TinyLlama 1.1B's shape: Llama 2's vocabulary and RoPE base.
fn tinyllama_1_1b() -> Config {
    Config {
        architecture: Architecture::Llama,
        vocab_size: 32_000,
        hidden_size: 2048,
        intermediate_size: 5632,
        num_layers: 22,
        num_heads: 32,
        num_kv_heads: 4,
        head_dim: 64,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        rope_scaling: None,
        rope_attention_scaling: 1.0,
        sliding_window: None,
        rope_frequency_factors: None,
        max_position_embeddings: 2048,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        qk_norm: false,
        experts: None,
        eos_token_ids: vec![2],
    }
}

/// Qwen3-30B-A3B: 48 layers, each routing to 8 of 128 experts of 768 rows
/// (about 3.3 billion of 30.5 billion parameters active per token).
fn qwen3_30b_a3b() -> Config {
    let base = qwen3_8b();
    Config {
        architecture: Architecture::Qwen3Moe,
        hidden_size: 2048,
        intermediate_size: 6144,
        num_layers: 48,
        num_heads: 32,
        num_kv_heads: 4,
        head_dim: 128,
        max_position_embeddings: 40_960,
        tie_word_embeddings: false,
        experts: Some(Experts {
            count: 128,
            per_token: 8,
            intermediate_size: 768,
            normalize_weights: true,
            sparse_layers: vec![true; 48],
        }),
        ..base
    }
}

/// Mixtral-8x7B: 32 layers, each routing to 2 of 8 experts of 14,336 rows
/// (about 12.9 billion of 46.7 billion parameters active per token).
fn mixtral_8x7b() -> Config {
    Config {
        architecture: Architecture::Mixtral,
        vocab_size: 32_000,
        hidden_size: 4096,
        intermediate_size: 14_336,
        num_layers: 32,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        rms_norm_eps: 1e-5,
        rope_theta: 1_000_000.0,
        max_position_embeddings: 32_768,
        tie_word_embeddings: false,
        experts: Some(Experts {
            count: 8,
            per_token: 2,
            intermediate_size: 14_336,
            normalize_weights: true,
            sparse_layers: vec![true; 32],
        }),
        eos_token_ids: vec![2],
        ..tiny(Architecture::Mixtral)
    }
}

impl Config {
    /// This config with `other`'s attention (heads, head size, RoPE, per-head
    /// norms, biases, tying): a sparse preset on its dense sibling's attention.
    fn with_attention_of(self, other: &Config) -> Config {
        Config {
            num_heads: other.num_heads,
            num_kv_heads: other.num_kv_heads,
            head_dim: other.head_dim,
            qk_norm: other.qk_norm,
            qkv_bias: other.qkv_bias,
            o_bias: other.o_bias,
            rope_theta: other.rope_theta,
            rms_norm_eps: other.rms_norm_eps,
            tie_word_embeddings: other.tie_word_embeddings,
            ..self
        }
    }
}
