//! Turning generated ids into text as they arrive, for printing a reply
//! while it is generated.

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// Turns generated token ids into text as they arrive.
///
/// Decoding one id at a time is wrong twice over: byte-level BPE splits a
/// multi-byte character over several tokens (each alone decodes to U+FFFD),
/// and SentencePiece decoders strip a leading space at the start of a text.
/// So the stream decodes the ids since the last emitted boundary together
/// with the previously emitted ones as context, emits only the new suffix,
/// and holds text back while it ends in U+FFFD (an incomplete character).
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    /// The ids last emitted (context) followed by the ids not yet emitted.
    ids: Vec<u32>,
    /// How many of `ids` were emitted.
    emitted: usize,
}

impl<'a> TextStream<'a> {
    /// A stream with nothing decoded yet.
    pub fn new(tokenizer: &'a Tokenizer) -> TextStream<'a> {
        TextStream {
            tokenizer,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// Adds the generated `id`; returns the text it completes, which may
    /// be empty (a partial character, a skipped special token).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let context = self.tokenizer.decode(&self.ids[..self.emitted])?;
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        match text.get(context.len()..) {
            Some(new) if !new.is_empty() => {
                let new = new.to_string();
                // The ids just emitted become the context of the next.
                self.ids.drain(..self.emitted);
                self.emitted = self.ids.len();
                Ok(new)
            }
            _ => Ok(String::new()),
        }
    }

    /// Whatever is held back (an incomplete character at the end of the
    /// generation comes out as U+FFFD); the stream then starts afresh.
    pub fn finish(&mut self) -> Result<String> {
        let rest = if self.ids.len() > self.emitted {
            let context = self.tokenizer.decode(&self.ids[..self.emitted])?;
            let text = self.tokenizer.decode(&self.ids)?;
            match text.get(context.len()..) {
                Some(new) => new.to_string(),
                None => text,
            }
        } else {
            String::new()
        };
        self.ids.clear();
        self.emitted = 0;
        Ok(rest)
    }
}
