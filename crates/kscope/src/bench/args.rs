//! The flags of `kscope bench`: a file of their own, so that the JSON
//! printer reads them without importing the command that calls it.

use clap::{Args, ValueEnum};
use kernelscope::profile::ProfileLevel;

use crate::model_args::ModelArgs;
use crate::numbers;

/// Output format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    /// A markdown table.
    Md,
    /// A JSON array.
    Json,
}

/// Arguments of `kscope bench`.
#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt tokens processed per repetition (0 skips the test).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128, value_parser = numbers::count)]
    pub prompt_tokens: usize,
    /// Tokens generated per repetition (0 skips the test).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128, value_parser = numbers::count)]
    pub generated_tokens: usize,
    /// Depth: positions already in the KV cache when each test starts (as
    /// llama-bench's -d). A random prompt of this length is prefilled once
    /// (not timed); pp and tg then run from that position.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0, value_parser = numbers::count)]
    pub depth: usize,
    /// Repetitions (after one warm-up that is not counted), 1 to 10000.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5, value_parser = numbers::count)]
    pub repetitions: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "md")]
    pub output: Output,
    /// Seed of the random prompt.
    #[arg(long, default_value_t = 0, value_parser = numbers::seed)]
    pub seed: u64,
    /// Profiling level while measuring (off, submission, dispatch): runs the
    /// same bench with the profiler on, to measure its overhead. At any level
    /// but off the bench also runs unprofiled in the same process and prints
    /// the measured cost beside the figures: after a warm-up pass (the GPU
    /// slows over its first seconds of load), unprofiled and profiled runs
    /// alternate twice, each on a model opened for it, and the figures are
    /// over both profiled runs' repetitions.
    #[arg(long, default_value = "off")]
    pub profile: ProfileLevel,
    /// With --profile: time only these tokens (A..B, A.., ..B, each with an
    /// optional :STEP, as in `kscope run`; tokens are numbered over the
    /// warm-up and every repetition in turn). The cost printed is then what
    /// profiling that share of the tokens costs: about nothing for a window,
    /// nearly every token's cost for every n-th (each switch of CUPTI costs
    /// about 16 timed tokens).
    #[arg(long, value_name = "TOKENS", value_parser = numbers::token_selection)]
    pub profile_tokens: Option<kernelscope::profile::TokenSelection>,
    /// Launch dispatch by dispatch instead of one graph per token (CUDA).
    #[arg(long)]
    pub eager: bool,
    /// Run decode with one dispatch per op instead of the fused kernels
    /// (RMSNorm + mat-vec, RoPE + KV append, mat-vec + residual add): the
    /// reference path, for checking and for `kscope compare`.
    #[arg(long)]
    pub unfused: bool,
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
    /// Size of the bandwidth probes (read, write, copy) in MiB, up to 16384
    /// (default 1024 on a GPU, 256 on the CPU; 0 skips the roofline).
    #[arg(long, value_name = "MIB", value_parser = numbers::count)]
    pub bandwidth_mib: Option<usize>,
    /// Side of the square bf16 GEMM that measures a GPU's compute ceiling, up
    /// to 16384 (default 8192; 0 skips the compute ceiling; the CPU's is its
    /// widest multiply-add instructions, which take no size).
    #[arg(long, value_name = "N", value_parser = crate::model_args::compute_size)]
    pub compute_size: Option<usize>,
}
