//! The flags of `kscope run`: a file of their own, so that `prompt.rs`
//! reads them without importing the command that calls it.

use std::path::PathBuf;

use clap::Args;

use crate::model_args::ModelArgs;
use crate::numbers;

/// Arguments of `kscope run`.
#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt text (needs the model's tokenizer.json).
    #[arg(long, conflicts_with_all = ["token_ids", "chat"])]
    pub prompt: Option<String>,
    /// A chat turn, rendered with the model's chat template (needs
    /// tokenizer.json and a chat_template in tokenizer_config.json or
    /// chat_template.jinja). Repeat for a conversation: user, assistant,
    /// user, ... (an odd count, ending with the user). The reply is printed
    /// as it is generated; generation stops at every end-of-sequence id of
    /// config.json and generation_config.json.
    #[arg(long, value_name = "TEXT", conflicts_with = "token_ids")]
    pub chat: Vec<String>,
    /// A system message before the --chat turns.
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
    /// Prompt as token ids, e.g. 1,2,3 (default 1,2,3,4 for models without a tokenizer).
    #[arg(long, value_delimiter = ',', value_name = "IDS", value_parser = numbers::token_id)]
    pub token_ids: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 32, value_name = "N", value_parser = numbers::count)]
    pub max_tokens: usize,
    /// Seed of the sampler (temperature > 0).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = numbers::seed)]
    pub seed: u64,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0, value_parser = numbers::finite)]
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens reaching this probability, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_parser = numbers::finite)]
    pub top_p: f32,
    /// Keep generating after an end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print the per-token / per-layer / per-op report (dispatch-level profiling).
    #[arg(long)]
    pub profile: bool,
    /// Time only these tokens: A..B (tokens A to B-1), A.., ..B, each with
    /// an optional :STEP for every STEP-th (0..:8); token 0 is the prompt's
    /// first chunk. The others run as unprofiled, counted but not timed,
    /// and CUPTI is off between timed tokens, so a window costs little;
    /// every n-th token does not (each switch of CUPTI costs about 16 timed
    /// tokens). Per-token times are means over the timed tokens. Needs a
    /// profiling flag (--profile, --profile-json, --trace, --html).
    #[arg(long, value_name = "TOKENS", value_parser = numbers::token_selection)]
    pub profile_tokens: Option<kernelscope::profile::TokenSelection>,
    /// Write the JSON profile (schema 4) to FILE.
    #[arg(long, value_name = "FILE")]
    pub profile_json: Option<PathBuf>,
    /// Write a Chrome trace (chrome://tracing, Perfetto) to FILE.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write the report as one self-contained HTML page to FILE (roofline,
    /// per-layer and per-token charts, the tables; opens offline).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub report: crate::report::ReportFlags,
    /// Side of the square bf16 GEMM that measures a GPU's compute ceiling
    /// for the profile's roofline (default 8192; the CPU's ceiling is its
    /// widest multiply-add instructions, which take no size; 0 skips either,
    /// and the report then says the ceiling is unknown). Only with
    /// --profile, --profile-json or --trace.
    #[arg(long, value_name = "N", value_parser = crate::model_args::compute_size)]
    pub compute_size: Option<usize>,
    /// Dispatch launch by launch instead of replaying one captured graph per
    /// token (CUDA; the CPU backend always runs eagerly).
    #[arg(long)]
    pub eager: bool,
    /// Run decode with one dispatch per op instead of the fused kernels
    /// (RMSNorm + mat-vec, RoPE + KV append, mat-vec + residual add): the
    /// reference path, for checking and for `kscope compare`.
    #[arg(long)]
    pub unfused: bool,
    /// After every kernel, check each float output for NaN or +infinity and
    /// stop at the first, naming the kernel and its layer: where a model's
    /// numbers first stop being numbers. On a GPU each output is copied to
    /// the host after its kernel, and the step runs eagerly (no graph);
    /// slow, for finding a fault.
    #[arg(long)]
    pub check_finite: bool,
    /// Launch each kernel of a CUDA graph only after the previous one has
    /// finished. By default graphs launch kernels early, under the previous
    /// kernel's tail (programmatic dependent launch; GPUs of compute
    /// capability 9.0 and later), which decodes faster.
    #[arg(long)]
    pub serial_launch: bool,
    /// Run several of decode's steps in one persistent kernel where one
    /// exists (a quantized layer's norm, gate/up, quantize and down on
    /// CUDA; its steps are timed inside it). Off by default: on an H200 it
    /// decoded llama-3.2-1b Q4_K_M 1.5 % slower than the four kernels.
    #[arg(long)]
    pub persistent_steps: bool,
    /// Write the logits of every processed position as .npy (f32, [steps, vocab]).
    #[arg(long, value_name = "FILE")]
    pub logits_out: Option<PathBuf>,
    /// Overwrite output files that exist (--logits-out, --profile-json,
    /// --trace, --html); a model directory's own files are never overwritten.
    #[arg(long)]
    pub force: bool,
}
