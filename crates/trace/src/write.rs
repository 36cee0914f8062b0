//! Writing a record file: each frame made whole in memory and handed to the
//! sink in one write, so a process that dies between writes leaves whole
//! frames only (and at worst one torn one, which the reader stops at).

use std::collections::HashMap;
use std::io::Write;

use crate::error::TraceError;
use crate::frame::{FRAME_HEADER_BYTES, MAX_PAYLOAD_BYTES};
use crate::records::{End, Header, Kind, Record};

/// The id a string was sent under (0 is never one: it means "none").
pub type TextId = u32;

/// Writes frames to `sink`, each string once.
pub struct Writer<W: Write> {
    sink: W,
    texts: HashMap<String, TextId>,
    frame: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// A writer whose first frame is `header`.
    pub fn new(sink: W, header: &Header) -> Result<Self, TraceError> {
        let mut writer = Writer {
            sink,
            texts: HashMap::new(),
            frame: Vec::new(),
        };
        let payload = serde_json::to_vec(header)?;
        writer.frame(Kind::Header, 1, &payload)?;
        Ok(writer)
    }

    /// The id of `text`, sending it first if it is new.
    pub fn text(&mut self, text: &str) -> Result<TextId, TraceError> {
        if let Some(&id) = self.texts.get(text) {
            return Ok(id);
        }
        let id = TextId::try_from(self.texts.len() + 1).expect("fewer than 2^32 strings");
        let mut payload = Vec::with_capacity(4 + text.len());
        payload.extend_from_slice(&id.to_le_bytes());
        payload.extend_from_slice(text.as_bytes());
        self.frame(Kind::Text, 1, &payload)?;
        self.texts.insert(text.to_string(), id);
        Ok(id)
    }

    /// Writes one record.
    pub fn record<R: Record>(&mut self, record: &R) -> Result<(), TraceError> {
        self.frame(R::KIND, R::VERSION, bytemuck::bytes_of(record))
    }

    /// Writes the last frame and hands the sink back (flushed).
    pub fn end(mut self, end: &End) -> Result<W, TraceError> {
        self.record(end)?;
        self.sink.flush()?;
        Ok(self.sink)
    }

    /// The sink, without an end frame: what a process that died leaves.
    pub fn into_sink(self) -> W {
        self.sink
    }

    fn frame(&mut self, kind: Kind, version: u16, payload: &[u8]) -> Result<(), TraceError> {
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(TraceError::TooLong {
                kind: kind.name(),
                bytes: payload.len(),
                limit: MAX_PAYLOAD_BYTES,
            });
        }
        self.frame.clear();
        self.frame.reserve(FRAME_HEADER_BYTES + payload.len());
        // Fits u32: at most MAX_PAYLOAD_BYTES.
        self.frame
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.frame.extend_from_slice(&(kind as u16).to_le_bytes());
        self.frame.extend_from_slice(&version.to_le_bytes());
        self.frame.extend_from_slice(payload);
        self.sink.write_all(&self.frame)?;
        Ok(())
    }
}
