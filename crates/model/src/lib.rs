//! The Llama-family decode engine on the kernelscope runtime.
//!
//! Reads a Hugging Face directory (`config.json`, `*.safetensors`, optional
//! `tokenizer.json`, found by path or as `org/name` in the local hub cache)
//! or builds a synthetic checkpoint from a preset, and runs
//! it one token at a time on any [`kernelscope::Device`], each dispatch
//! tagged with its scope (`embed`, `layer.N.attn`, `layer.N.mlp`,
//! `lm_head`, `sample`) so the profiler can say where the time goes.
//!
//! This crate knows nothing of CUDA: it calls ops on a device.

#![warn(missing_docs)]

mod chat;
mod checkpoint_notes;
mod config;
mod costs;
mod engine;
mod error;
mod feed_forward;
mod files;
pub mod gguf;
pub mod gguf_export;
pub mod gguf_model;
mod hub;
mod linear;
mod loader;
pub mod npy;
mod presets;
mod progress;
pub mod synthetic;
mod tokenizer;
mod weights;

pub use chat::{ChatMessage, ChatTemplate, GenerationConfig, GenerationPrompt, TextStream};
pub use checkpoint_notes::checkpoint_notes;
pub use config::shard::Partition;
pub use config::{Architecture, Config, ExpertLayout, Experts, MAX_CONFIG_BYTES, MAX_EXPERTS, MAX_LAYERS};
pub use costs::model_costs;
pub use engine::{
    DEFAULT_PREFILL_CHUNK, ExecutionMode, Generation, GenerationRequest, Model, Ranks, StepTiming,
};
pub use error::{MemoryRemedy, ModelError, Result};
pub use hub::{HubCacheEnvironment, HubSnapshot, looks_like_repo_id, resolve_hub_model, resolve_in_cache};
pub use kernelscope::ops::rope::{Llama3Scaling, RopeScaling, YarnScaling};
pub use linear::{Bias, Linear, Parallel};
pub use loader::{LoadOptions, TensorInfo, parse_safetensors_index, read_safetensors_header};
pub use presets::{PRESETS, preset};
pub use synthetic::SyntheticOptions;
pub use tokenizer::{GgufVocabulary, Tokenizer};
pub use weights::{ExpertWeights, FeedForward, LayerWeights, Weights};
