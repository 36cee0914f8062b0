//! A GGUF file as the engine runs it: the [`Config`] its metadata
//! describes (`general.architecture` `llama`, `qwen2`, `qwen3` or
//! `qwen3moe`, and `llama` with `llama.expert_count` as Mixtral; every
//! hyper-parameter read from its key), its vocabulary, and its tensors
//! placed as `Weights`. llama.cpp's converter permutes the rows of
//! `attn_q` and `attn_k` of the `llama` architecture for its interleaved
//! RoPE; the engine's RoPE rotates halves, as transformers does, so those
//! rows are put back on load. Quantized matrices stay in their blocks where
//! the device has the quantized kernels (the CPU and CUDA); elsewhere they
//! are dequantized to bf16 at load, and the model's name says so.

mod config;
mod finite;
mod model;
mod weights;

use std::path::Path;

use crate::config::Config;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::tokenizer::{GgufVocabulary, Tokenizer};

pub(crate) use config::widen;
use config::{read_config, read_vocabulary};
pub use finite::NonFiniteWeight;
pub use model::GgufModel;
pub use weights::gguf_names;
pub(crate) use weights::{file_row, gguf_name, permuted_heads};

/// Refuses a file whose tensors the metadata does not account for (a
/// `block_count` below the layers it holds would run fewer layers,
/// silently), and a vocabulary of another size than the embedding's rows:
/// llama.cpp refuses both ("wrong number of tensors", "wrong shape").
fn check_accounted(file: &GgufFile, config: &Config, vocabulary: Option<&GgufVocabulary>) -> Result<()> {
    let invalid = |problem: String| crate::error::ModelError::Gguf {
        path: file.path().to_path_buf(),
        problem,
    };
    let expected: std::collections::HashSet<String> = gguf_names(config)
        .into_iter()
        .map(|(_, gguf)| gguf)
        .chain(["rope_freqs.weight".to_string(), "output.weight".to_string()])
        .collect();
    let unaccounted: Vec<&str> = file
        .tensors()
        .iter()
        .map(|tensor| tensor.name())
        .filter(|name| !expected.contains(*name))
        .collect();
    if let Some(first) = unaccounted.first() {
        return Err(invalid(format!(
            "{} tensors the metadata does not account for (block_count {}), the first `{first}`: the file and its metadata disagree",
            unaccounted.len(),
            config.num_layers
        )));
    }
    if let Some(vocabulary) = vocabulary
        && vocabulary.tokens.len() != config.vocab_size
    {
        return Err(invalid(format!(
            "`tokenizer.ggml.tokens` holds {} tokens but the vocabulary is {} (`token_embd.weight`'s rows): the file and its metadata disagree",
            vocabulary.tokens.len(),
            config.vocab_size
        )));
    }
    Ok(())
}

impl GgufModel {
    /// Opens `path` and reads the configuration from its metadata.
    pub fn open(path: &Path) -> Result<GgufModel> {
        let file = GgufFile::open(path)?;
        let config = read_config(&file)?;
        let (vocabulary, vocabulary_problem) = match read_vocabulary(&file) {
            Ok(vocabulary) => (vocabulary, None),
            Err(error) => (None, Some(error.to_string())),
        };
        check_accounted(&file, &config, vocabulary.as_ref())?;
        let chat_template = file
            .metadata()
            .get_str_opt("tokenizer.chat_template")?
            .map(str::to_string);
        Ok(GgufModel {
            file,
            config,
            vocabulary,
            vocabulary_problem,
            chat_template,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The tokenizer of the file's vocabulary, if it has one.
    pub fn tokenizer(&self) -> Result<Option<Tokenizer>> {
        if let Some(problem) = &self.vocabulary_problem {
            return Err(crate::error::ModelError::Tokenizer(problem.clone()));
        }
        self.vocabulary
            .as_ref()
            .map(|vocabulary| Tokenizer::from_gguf(vocabulary, &self.path().display().to_string()))
            .transpose()
    }

    /// The tensors' formats, most common first, as llama.cpp users name a
    /// file's mix: `Q4_K_M: 193 Q4_K, 33 Q6_K, 65 F32` (the prefix is the
    /// file type `general.file_type` names, where it names one).
    pub fn format_mix(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for tensor in self.file.tensors() {
            let name = tensor.tensor_type().name().to_string();
            match counts.iter_mut().find(|(known, _)| *known == name) {
                Some((_, count)) => *count += 1,
                None => counts.push((name, 1)),
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let list = counts
            .iter()
            .map(|(name, count)| format!("{count} {name}"))
            .collect::<Vec<_>>()
            .join(", ");
        match self.file_type() {
            Some(file_type) => format!("{file_type}: {list}"),
            None => list,
        }
    }

    /// Whether any tensor of the file is in a quantized format (GGUF keeps
    /// vectors dense, so these are matrices).
    pub fn holds_quantized_weights(&self) -> bool {
        self.file.tensors().iter().any(|tensor| {
            matches!(
                self.file.tensor_format(tensor),
                Ok(kernelscope::ops::WeightFormat::Quantized(_))
            )
        })
    }

    /// The file's type as llama.cpp names it (`Q4_K_M`), or `GGUF` where
    /// `general.file_type` names none.
    pub fn file_type_name(&self) -> String {
        self.file_type().unwrap_or("GGUF").to_string()
    }

    /// The name of `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`).
    fn file_type(&self) -> Option<&'static str> {
        let id = self.file.metadata().get_u32_opt("general.file_type").ok()??;
        Some(match id {
            0 => "F32",
            1 => "F16",
            2 => "Q4_0",
            3 => "Q4_1",
            7 => "Q8_0",
            8 => "Q5_0",
            9 => "Q5_1",
            10 => "Q2_K",
            11 => "Q3_K_S",
            12 => "Q3_K_M",
            13 => "Q3_K_L",
            14 => "Q4_K_S",
            15 => "Q4_K_M",
            16 => "Q5_K_S",
            17 => "Q5_K_M",
            18 => "Q6_K",
            32 => "BF16",
            _ => return None,
        })
    }
}
