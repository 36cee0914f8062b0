//! The model crate's errors: each names the file or tensor at fault and what
//! was expected, so the CLI can print one line and exit 2.

use std::path::PathBuf;

use kernelscope::DType;

/// What can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// `config.json` is missing.
    #[error("{path}: no config.json here (expected a Hugging Face model directory)")]
    ConfigMissing {
        /// The directory.
        path: PathBuf,
    },
    /// `config.json` could not be parsed or has an unusable value.
    #[error("{path}: {problem}")]
    ConfigInvalid {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The architecture is not one this engine runs.
    #[error(
        "{path}: architecture `{architecture}` is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)"
    )]
    UnsupportedArchitecture {
        /// The config file.
        path: PathBuf,
        /// The architecture named there.
        architecture: String,
    },
    /// A safetensors file is truncated or its header is malformed.
    #[error("{path}: {problem}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A GGUF file is truncated, malformed, or breaks one of the format's rules.
    #[error("{path}: {problem}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field, key or tensor.
        problem: String,
    },
    /// A GGUF metadata key is missing or does not hold what was asked of it.
    #[error("{path}: metadata key `{key}` {problem}")]
    GgufKey {
        /// The file.
        path: PathBuf,
        /// The key, as shown in messages (escaped, shortened).
        key: String,
        /// What is wrong ("is missing", "is a string, expected an integer").
        problem: String,
    },
    /// A GGUF tensor's type is one ggml knows but this engine does not run.
    #[error(
        "{path}: tensor `{tensor}` is {type_name}, which kernelscope does not run (supported: {supported})"
    )]
    GgufUnsupportedType {
        /// The file holding the tensor.
        path: PathBuf,
        /// The tensor's name (escaped, shortened).
        tensor: String,
        /// The type's name as llama.cpp prints it (`IQ2_XXS`).
        type_name: &'static str,
        /// The types that are supported.
        supported: String,
    },
    /// A tensor the config requires is in no file.
    #[error("{directory}: tensor `{name}` is missing from the safetensors files")]
    TensorMissing {
        /// The model directory.
        directory: PathBuf,
        /// The tensor name.
        name: String,
    },
    /// A tensor's shape does not match the config.
    #[error("{path}: tensor `{name}` has shape {found:?}, expected {expected:?} from {described_by}")]
    TensorShape {
        /// What the expected shape comes from: `config.json`, or a GGUF
        /// file's metadata.
        described_by: &'static str,
        /// The file holding it.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not the model's.
    #[error("{path}: tensor `{name}` has dtype {found}, expected {expected}")]
    TensorDtype {
        /// The file holding it.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// The model's dtype.
        expected: String,
        /// The tensor's dtype.
        found: String,
    },
    /// A tensor to be quantized holds a NaN or an infinity, which no
    /// block's scale can represent (llama-quantize refuses them too).
    #[error(
        "tensor `{name}`: element {index} (row {row}, column {column}) is {value}; a quantized block cannot hold it (llama-quantize refuses such tensors too): fix the checkpoint, or write f32, f16 or bf16"
    )]
    NonFiniteWeight {
        /// The tensor name.
        name: String,
        /// The first non-finite element, counted from 0.
        index: usize,
        /// Its row.
        row: usize,
        /// Its column.
        column: usize,
        /// The value: NaN, inf or -inf.
        value: f32,
    },
    /// A step's logits hold NaN or infinity: its next token would be
    /// chosen among numbers that mean nothing.
    #[error(
        "the logits after {phase} hold {count} non-finite values of {vocab} (the first, of token {index}, is {value}): the model's weights hold NaN or infinity, or its arithmetic overflowed"
    )]
    NonFiniteLogits {
        /// `the prompt` or `the last generated token`.
        phase: &'static str,
        /// How many logits are not finite.
        count: usize,
        /// How many there are.
        vocab: usize,
        /// The first non-finite one's token.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// A token id is not below the vocabulary size.
    #[error("token id {token} is out of range: the vocabulary has {vocab} tokens (ids 0..{vocab})")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// The prompt plus the tokens to generate exceed the context length.
    #[error(
        "{prompt} prompt tokens + {generate} tokens to generate exceed the model's context length of {context} positions{limit}"
    )]
    ContextExceeded {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens to generate.
        generate: usize,
        /// `max_position_embeddings`, or the sliding window.
        context: usize,
        /// Why the context ends there when it is not `max_position_embeddings`
        /// (starts with " ("), or empty.
        limit: String,
    },
    /// The model cannot be split over the ranks asked for.
    #[error(
        "cannot split the model over {ranks} ranks: {problem}; splits that work up to {largest_split_tried} ranks: {}",
        comma_separated(.working_splits)
    )]
    TensorParallel {
        /// Ranks asked for.
        ranks: usize,
        /// What does not divide, in the config's terms.
        problem: String,
        /// The rank counts from 1 to `largest_split_tried` that the model
        /// does split over (never empty: one rank always works).
        working_splits: Vec<usize>,
        /// The largest rank count tried. Whether a count works is not
        /// monotonic (9 rows split over 5 ranks but not over 4), so larger
        /// counts may work too.
        largest_split_tried: usize,
    },
    /// A count below the least it may be.
    #[error("{field} must be at least {minimum}, got {value}")]
    InvalidCount {
        /// What is counted, as the library names it (`ranks`).
        field: &'static str,
        /// The count given.
        value: usize,
        /// The least it may be.
        minimum: usize,
    },
    /// A rank of a split model stopped because rank 0 stopped (rank 0's own
    /// error is the one reported).
    #[error("rank 0 stopped the generation")]
    LeaderStopped,
    /// The input is empty or otherwise unusable.
    #[error("{0}")]
    InvalidInput(String),
    /// No such preset.
    #[error("unknown preset `{name}` (presets: {known})")]
    UnknownPreset {
        /// What was asked for.
        name: String,
        /// The presets there are.
        known: String,
    },
    /// The tokenizer failed or is absent.
    #[error("{0}")]
    Tokenizer(String),
    /// A weight dtype the engine does not run.
    #[error("dtype {0} is not a weight dtype (expected bf16, f16 or f32)")]
    UnsupportedDtype(DType),
    /// A path that must be a regular file is something else.
    #[error("{path}: {kind}, not a regular file")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is ("a directory", "a FIFO", ...).
        kind: &'static str,
    },
    /// A file is larger than anything of its kind can be.
    #[error("{path}: {size} bytes, more than the {limit} bytes allowed for this file")]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A checkpoint names a file outside its model directory.
    #[error("{path}: refusing to open `{name}`: {problem}")]
    PathEscape {
        /// The file that names it (the index).
        path: PathBuf,
        /// The name as written there.
        name: String,
        /// Why it is refused.
        problem: String,
    },
    /// The model does not fit in the device's memory.
    #[error("{what} needs {needed_mib} MiB but {device} has {available_mib} MiB free{}", remedy.advice())]
    OutOfMemory {
        /// What was being allocated.
        what: String,
        /// MiB needed.
        needed_mib: u64,
        /// MiB free on the device.
        available_mib: u64,
        /// The device's name.
        device: String,
        /// What to try instead.
        remedy: MemoryRemedy,
    },
    /// Sampling (a temperature above 0) was asked of a device without a
    /// sampling kernel.
    #[error(
        "sampling at a temperature above 0 is unavailable here ({source}); choose greedily (temperature 0)"
    )]
    SamplingUnavailable {
        /// Why the sampling op could not be made (shared: the model keeps
        /// it to report on every sampled request).
        source: std::sync::Arc<kernelscope::Error>,
    },
    /// A KV cache element type the engine does not implement.
    #[error("a KV cache of {dtype}: the KV cache holds f32, f16 or bf16")]
    UnsupportedKvDtype {
        /// The element type asked for.
        dtype: kernelscope::DType,
    },
    /// A chat template that cannot be read, parsed or rendered.
    #[error("{path}: {problem}")]
    ChatTemplate {
        /// The file holding the template.
        path: PathBuf,
        /// What went wrong (minijinja's message, with its line).
        problem: String,
    },
    /// `generation_config.json` could not be parsed or has an unusable value.
    #[error("{path}: {problem}")]
    GenerationConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        problem: String,
    },
    /// A repository id not found (or not usable) in the Hugging Face cache.
    #[error("{repo_id}: {problem}")]
    HubCache {
        /// `org/name`.
        repo_id: String,
        /// What is wrong, and the command that downloads it where that helps.
        problem: String,
    },
    /// Writing a file was stopped (SIGINT or SIGTERM) before it was
    /// complete; nothing was left at the path.
    #[error("{path}: interrupted before it was complete; nothing was written there")]
    Interrupted {
        /// The file that was being written.
        path: PathBuf,
    },
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An error from the runtime (a kernel, a buffer).
    #[error(transparent)]
    Runtime(#[from] kernelscope::Error),
}

/// `text` from a file, fit for a one-line message: at most 80 characters,
/// control characters and quotes escaped (a name holding a newline must not
/// break the line, nor a long one flood it).
pub(crate) fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(80).flat_map(char::escape_debug).collect();
    if text.chars().count() > 80 {
        out.push_str("...");
    }
    out
}

/// A message from another library on one line: control characters (which
/// it may have copied from the input) escaped.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|character| {
            let escaped: Vec<char> = if character.is_control() {
                character.escape_debug().collect()
            } else {
                vec![character]
            };
            escaped
        })
        .collect()
}

/// `1, 2, 4`: counts as a message lists them.
pub(crate) fn comma_separated(counts: &[usize]) -> String {
    counts.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

/// The model crate's result type.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// What a caller can change when something does not fit in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryRemedy {
    /// Nothing the request can change (the weights themselves).
    None,
    /// Ask for fewer positions (a shorter prompt, fewer tokens, less depth).
    FewerPositions,
    /// Fewer positions, or a KV cache in the weights' narrower dtype than f32.
    FewerPositionsOrNarrowerCache,
}

impl MemoryRemedy {
    /// The advice in the library's words, starting with "; " (empty for none).
    pub fn advice(self) -> &'static str {
        match self {
            MemoryRemedy::None => "",
            MemoryRemedy::FewerPositions => "; ask for fewer positions",
            MemoryRemedy::FewerPositionsOrNarrowerCache => {
                "; ask for fewer positions, or keep the KV cache in the weights' dtype rather than f32"
            }
        }
    }
}
