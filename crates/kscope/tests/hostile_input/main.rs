//! Hostile and malformed input, one test per class: configs whose numbers
//! would reach the math broken, fields the engine does not implement,
//! checkpoints that point outside their directory or at FIFOs, and output
//! flags aimed at files that exist. Each case asserts exit 2, one line on
//! stderr naming the file, flag or field, and that no file changed.

#[path = "../common/mod.rs"]
mod common;

mod command_line;
mod comparisons;
mod config;
mod gguf;
mod helpers;
mod interrupted;
mod non_finite;
mod outputs;
mod profiles;
mod special_files;
mod vocabulary;
mod weights;
