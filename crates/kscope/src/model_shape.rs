//! A model's shape as profiles record it, in a file of its own: `run` and
//! `profile` write it, `compare` and `kl` read it to tell one model in two
//! weight formats from two models, and none of them should import another.

use kernelscope_model::Config;

/// A model's shape as its profile records it (`Conditions::model_shape`):
/// what two runs of one model in different weight formats share.
pub fn model_shape(config: &Config) -> String {
    format!(
        "{}: {} layers, hidden {}, intermediate {}, {} heads, {} kv heads, head dim {}, vocab {}",
        config.architecture.model_type(),
        config.num_layers,
        config.hidden_size,
        config.intermediate_size,
        config.num_heads,
        config.num_kv_heads,
        config.head_dim,
        config.vocab_size
    )
}
