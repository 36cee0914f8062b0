//! What can go wrong writing a record file. Reading never fails: a file's
//! torn or garbled tail is an [`Ending`](crate::Ending), not an error.

/// An error writing a record file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The sink refused the bytes.
    #[error("writing a trace frame: {0}")]
    Write(#[from] std::io::Error),
    /// A payload longer than a frame may carry.
    #[error("a {kind} frame of {bytes} bytes is longer than the {limit} a frame may carry")]
    TooLong {
        /// The record's kind.
        kind: &'static str,
        /// Its payload's length.
        bytes: usize,
        /// [`MAX_PAYLOAD_BYTES`](crate::MAX_PAYLOAD_BYTES).
        limit: usize,
    },
    /// The header could not be made JSON.
    #[error("encoding the trace header: {0}")]
    Header(#[from] serde_json::Error),
}
