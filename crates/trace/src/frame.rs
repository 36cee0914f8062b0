//! The frame's fixed sizes, shared by the writer and the reader (and so
//! kept below both, not in the crate root that re-exports them).

/// Bytes before a frame's payload: its length, kind and version.
pub const FRAME_HEADER_BYTES: usize = 8;

/// The largest payload a frame may carry (a header with a long command
/// line, a long NVTX message); a length beyond it is a garbled frame.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
