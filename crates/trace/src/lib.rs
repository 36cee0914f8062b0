//! The record files of `kscope profile`: what a process running under the
//! kscope injection library writes as it runs (kernels, copies, syncs, API
//! calls, NVTX ranges, DRAM samples), and the reader kscope turns them into a
//! profile with.
//!
//! A file is a sequence of frames, `[u32 payload length][u16 kind][u16
//! version][payload]`, little-endian, appended with one write each. Once a
//! write returns the bytes are in the page cache, so a process that is
//! killed or crashes leaves every frame written before; the last frame of a
//! clean exit is [`End`], and a file without it ends where its process
//! died. The reader takes every whole frame and stops, without failing, at
//! a torn or garbled tail, saying where and why ([`Ending`]).
//!
//! Records are plain fixed-size structs (`bytemuck::Pod`) so that the
//! writer, which runs inside the profiled process on CUPTI's threads, only
//! copies bytes; strings (kernel names, NVTX messages) are sent once as
//! [`Frame::Text`] and referred to by id. The header, written once, is
//! JSON. A reader skips kinds it does not know, so newer writers can add
//! records.

#![warn(missing_docs)]

mod error;
mod read;
mod records;
mod write;

pub use error::TraceError;
pub use read::{Ending, Frame, Trace, read};
pub use records::{
    ApiCall, ApiWhat, Device, EVENT_TIMED_CONTEXT, End, EndReason, ExternalCorrelation, Header, Kernel, Kind,
    Memcpy, Memset, NvtxRange, PmSample, RANGE_BY_TIME, Record, Sync, WHOLE_GRAPH_NAME_PREFIX,
    whole_graph_name,
};
pub use write::{TextId, Writer};

/// Bytes before a frame's payload: its length, kind and version.
pub const FRAME_HEADER_BYTES: usize = 8;

/// The largest payload a frame may carry (a header with a long command
/// line, a long NVTX message); a length beyond it is a garbled frame.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
