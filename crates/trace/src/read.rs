//! Reading a record file: every whole frame, in order, and how the file
//! ended. Never fails: a process that died mid-write leaves a torn frame,
//! and garbage (a length past the limit, a record of the wrong size, text
//! that is not UTF-8) ends the reading where it starts, saying where.

use std::collections::HashMap;

use crate::frame::{FRAME_HEADER_BYTES, MAX_PAYLOAD_BYTES};
use crate::records::{
    ApiCall, Device, End, ExternalCorrelation, Header, Kernel, Kind, Memcpy, Memset, NvtxRange, PmSample,
    Record, Sync,
};
use crate::write::TextId;

/// One frame read.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// [`Kernel`].
    Kernel(Kernel),
    /// [`Memcpy`].
    Memcpy(Memcpy),
    /// [`Memset`].
    Memset(Memset),
    /// [`Sync`].
    Sync(Sync),
    /// [`ApiCall`].
    ApiCall(ApiCall),
    /// [`ExternalCorrelation`].
    ExternalCorrelation(ExternalCorrelation),
    /// [`NvtxRange`].
    NvtxRange(NvtxRange),
    /// [`PmSample`].
    PmSample(PmSample),
    /// [`Device`].
    Device(Device),
}

/// How a file ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// With an [`End`] frame: the process exited, or flushed in its
    /// fatal-signal handler (the frame says which).
    Ended(End),
    /// Without one, after its last whole frame: the process died or is
    /// still running.
    Cut {
        /// The offset just past the last whole frame.
        at: usize,
    },
    /// At a frame that cannot be a frame (a length past the limit, a record
    /// of the wrong size, bad header JSON or text), or frames after [`End`].
    Garbled {
        /// The frame's offset.
        at: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// A file's contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Its first frame, when it is one.
    pub header: Option<Header>,
    /// The records, in file order.
    pub frames: Vec<Frame>,
    /// The strings the records refer to.
    pub texts: HashMap<TextId, String>,
    /// Frames of kinds or versions this reader does not know, skipped.
    pub skipped: usize,
    /// How the file ended.
    pub ending: Ending,
}

impl Trace {
    /// The text `id` refers to (empty for 0 or an unknown id).
    pub fn text(&self, id: TextId) -> &str {
        self.texts.get(&id).map_or("", String::as_str)
    }
}

/// Reads every whole frame of `bytes`.
pub fn read(bytes: &[u8]) -> Trace {
    let mut trace = Trace {
        header: None,
        frames: Vec::new(),
        texts: HashMap::new(),
        skipped: 0,
        ending: Ending::Cut { at: 0 },
    };
    let mut at = 0;
    loop {
        let Some(head) = bytes.get(at..at + FRAME_HEADER_BYTES) else {
            trace.ending = Ending::Cut { at };
            return trace;
        };
        let length = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let code = u16::from_le_bytes([head[4], head[5]]);
        let version = u16::from_le_bytes([head[6], head[7]]);
        if length > MAX_PAYLOAD_BYTES {
            trace.ending = Ending::Garbled {
                at,
                problem: "a frame longer than the limit",
            };
            return trace;
        }
        let start = at + FRAME_HEADER_BYTES;
        let Some(payload) = bytes.get(start..start + length) else {
            trace.ending = Ending::Cut { at };
            return trace;
        };
        match take(&mut trace, code, version, payload, at == 0) {
            Ok(Some(end)) => {
                trace.ending = if start + length == bytes.len() {
                    Ending::Ended(end)
                } else {
                    Ending::Garbled {
                        at: start + length,
                        problem: "frames after the end frame",
                    }
                };
                return trace;
            }
            Ok(None) => {}
            Err(problem) => {
                trace.ending = Ending::Garbled { at, problem };
                return trace;
            }
        }
        at = start + length;
    }
}

/// Adds one frame to `trace`; the end frame, when it is one.
fn take(
    trace: &mut Trace,
    code: u16,
    version: u16,
    payload: &[u8],
    first: bool,
) -> Result<Option<End>, &'static str> {
    let Some(kind) = Kind::from_code(code) else {
        trace.skipped += 1;
        return Ok(None);
    };
    match kind {
        Kind::Header if first => {
            trace.header =
                Some(serde_json::from_slice(payload).map_err(|_| "a header that is not its JSON")?);
        }
        Kind::Header => return Err("a second header"),
        Kind::Text => {
            let (id, text) = payload.split_at_checked(4).ok_or("a text frame without its id")?;
            let id = TextId::from_le_bytes([id[0], id[1], id[2], id[3]]);
            let text = std::str::from_utf8(text).map_err(|_| "text that is not UTF-8")?;
            trace.texts.insert(id, text.to_string());
        }
        // An end frame of a later layout still ends the file.
        Kind::End => return Ok(Some(record::<End>(version, payload)?.unwrap_or_default())),
        Kind::Kernel => push(trace, record::<Kernel>(version, payload)?.map(Frame::Kernel)),
        Kind::Memcpy => push(trace, record::<Memcpy>(version, payload)?.map(Frame::Memcpy)),
        Kind::Memset => push(trace, record::<Memset>(version, payload)?.map(Frame::Memset)),
        Kind::Sync => push(trace, record::<Sync>(version, payload)?.map(Frame::Sync)),
        Kind::ApiCall => push(trace, record::<ApiCall>(version, payload)?.map(Frame::ApiCall)),
        Kind::ExternalCorrelation => push(
            trace,
            record::<ExternalCorrelation>(version, payload)?.map(Frame::ExternalCorrelation),
        ),
        Kind::NvtxRange => push(
            trace,
            record::<NvtxRange>(version, payload)?.map(Frame::NvtxRange),
        ),
        Kind::PmSample => push(trace, record::<PmSample>(version, payload)?.map(Frame::PmSample)),
        Kind::Device => push(trace, record::<Device>(version, payload)?.map(Frame::Device)),
    }
    Ok(None)
}

/// Adds `frame` (`None`: a version this reader skips).
fn push(trace: &mut Trace, frame: Option<Frame>) {
    match frame {
        Some(frame) => trace.frames.push(frame),
        None => trace.skipped += 1,
    }
}

/// `payload` as an `R` of a version this reader knows (`None` for another
/// version; an error for the right version at the wrong size).
fn record<R: Record>(version: u16, payload: &[u8]) -> Result<Option<R>, &'static str> {
    if version != R::VERSION {
        return Ok(None);
    }
    bytemuck::try_pod_read_unaligned(payload)
        .map(Some)
        .map_err(|_| "a record of the wrong size")
}
