//! `config.json`: the subset of Hugging Face's Llama/Qwen2/Qwen3/Mistral config the
//! engine needs, validated once so the rest of the code can trust it. Split
//! by job: `model_config` is the config and what follows from it,
//! `architecture` the decoder families, `limits` the bounds its numbers
//! keep, `parse` reads and validates the file, `fields` gives typed reads
//! of its fields, `rope` the RoPE settings of either layout, `tensors` the
//! checkpoint's tensor list; this file only gathers them.

mod architecture;
mod duplicates;
mod expert_layout;
mod experts;
mod fields;
mod limits;
mod model_config;
mod parse;
mod rope;
pub(crate) mod shard;
mod tensors;

pub use architecture::Architecture;
pub use expert_layout::ExpertLayout;
pub(crate) use expert_layout::router_names;
pub use experts::{Experts, MAX_EXPERTS};
pub use limits::{MAX_CONFIG_BYTES, MAX_LAYERS};
pub use model_config::Config;
pub(crate) use tensors::{LayerTensor, TensorRole, TensorSpec};
