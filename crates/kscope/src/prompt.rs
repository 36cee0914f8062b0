//! What `kscope run` asks the model: the prompt's token ids (the chat
//! rendered with the model's template, the text encoded, the ids given, or
//! a default) and the ids generation stops at.

use std::path::Path;

use anyhow::{Result, bail};
use kernelscope_model::{ChatMessage, ChatTemplate, GenerationConfig, Model, Tokenizer};

use crate::chat_render::{self, TemplateOrigin};

use crate::run::RunArgs;

/// Where a prompt's tokenizer and chat template come from.
#[derive(Clone, Copy)]
pub(crate) struct PromptSource<'a> {
    pub(crate) directory: Option<&'a Path>,
    pub(crate) tokenizer: Option<&'a Tokenizer>,
    /// Why the model's vocabulary gave no tokenizer, where it has one.
    pub(crate) tokenizer_problem: Option<&'a str>,
    pub(crate) gguf_chat: Option<&'a crate::model_args::GgufChat>,
}

/// The prompt's token ids: the chat rendered, the text encoded, the ids
/// given, or a default prompt.
pub(crate) fn prompt_tokens(args: &RunArgs, source: PromptSource<'_>) -> Result<Vec<u32>> {
    if !args.chat.is_empty() {
        return chat_prompt(args, source);
    }
    if let (Some(_), Some(problem)) = (&args.prompt, source.tokenizer_problem) {
        bail!(
            "--prompt needs the model's tokenizer, which cannot be built: {problem}; pass --token-ids instead"
        );
    }
    Ok(match (&args.prompt, &args.token_ids, source.tokenizer) {
        (Some(text), _, Some(tokenizer)) => tokenizer.encode(text)?,
        (Some(_), _, None) => {
            bail!(
                "--prompt needs a tokenizer (tokenizer.json in the model directory, or a GGUF file's vocabulary); pass --token-ids instead"
            )
        }
        (None, Some(ids), _) => ids.clone(),
        (None, None, Some(tokenizer)) => tokenizer.encode("The capital of France is")?,
        (None, None, None) => vec![1, 2, 3, 4],
    })
}

/// The prompt of `--chat`: the turns (after `--system`) rendered with the
/// model's chat template, then encoded as they are (the template writes BOS
/// and the other special tokens itself).
fn chat_prompt(args: &RunArgs, source: PromptSource<'_>) -> Result<Vec<u32>> {
    if let Some(problem) = source.tokenizer_problem {
        bail!("--chat needs the model's tokenizer, which cannot be built: {problem}");
    }
    // The template is compiled here too, so that a file without one, or
    // with a syntax error, is named before any process starts.
    let origin = match (source.gguf_chat, source.directory, source.tokenizer) {
        (Some(chat), _, Some(_)) => {
            ChatTemplate::from_source(&chat.source, &chat.path, chat.bos.as_deref(), chat.eos.as_deref())?;
            TemplateOrigin::Gguf {
                source: &chat.source,
                path: &chat.path,
                bos: chat.bos.as_deref(),
                eos: chat.eos.as_deref(),
            }
        }
        (None, Some(directory), Some(_)) => match ChatTemplate::from_directory(directory)? {
            Some(_) => TemplateOrigin::Directory(directory),
            None => bail!(
                "--chat: {} has no chat template (tokenizer_config.json `chat_template` or chat_template.jinja); pass --prompt instead",
                directory.display()
            ),
        },
        (None, None, Some(_)) => {
            bail!("--chat: the GGUF file has no tokenizer.chat_template; pass --prompt instead")
        }
        _ => bail!(
            "--chat needs a tokenizer and a chat template (a model directory with tokenizer.json, or a GGUF file with a vocabulary)"
        ),
    };
    let tokenizer = source.tokenizer.expect("matched above");
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage::new("system", system));
    }
    for (turn, text) in args.chat.iter().enumerate() {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        messages.push(ChatMessage::new(role, text));
    }
    let rendered = chat_render::render(&origin, &messages)?;
    Ok(tokenizer.encode_without_special_tokens(&rendered)?)
}

/// Every end-of-sequence id of the model directory's
/// generation_config.json, each checked against the vocabulary.
pub(crate) fn stop_tokens(directory: Option<&Path>, model: &Model) -> Result<Vec<u32>> {
    // generation_config.json may name more end-of-sequence ids than
    // config.json (Llama 3 Instruct's <|eot_id|>); transformers stops at all.
    let Some(directory) = directory else {
        return Ok(Vec::new());
    };
    let generation_config = GenerationConfig::from_directory(directory)?;
    let vocab = model.config().vocab_size;
    if let Some(bad) = generation_config
        .eos_token_ids
        .iter()
        .find(|&&id| id as usize >= vocab)
    {
        bail!(
            "{}: eos_token_id {bad} is not below vocab_size ({vocab})",
            directory.join("generation_config.json").display()
        );
    }
    Ok(generation_config.eos_token_ids)
}
