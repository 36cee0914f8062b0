//! Chat templates, generation_config.json and streaming decode, on model
//! directories written here: a small byte-level BPE `tokenizer.json` (the
//! GPT-2 byte alphabet, a few merges, ChatML and Llama-3 special tokens), a
//! Qwen2-style ChatML template and a Llama-3-style one.

mod generation_config;
mod helpers;
mod template_errors;
mod templates;
mod tokens;
