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
//!
//! The crate also holds the other half of the protocol between `kscope
//! profile` and the library: the `KSCOPE_*` environment variables it starts
//! the program with, each named once, and what they say, typed
//! ([`injection_settings`]). kscope, the library and kernelscope's runtime
//! all depend on this crate, so none of them spells a variable's name.
//!
//! Its files are layered: `frame` and `error` at the bottom, `records`,
//! `write` and `read` above, `injection_settings` beside them, and this file
//! only declares and re-exports them.

#![warn(missing_docs)]

mod error;
mod frame;
pub mod injection_settings;
mod read;
mod records;
mod write;

pub use error::TraceError;
pub use frame::{FRAME_HEADER_BYTES, MAX_PAYLOAD_BYTES};
pub use injection_settings::{InjectionSettings, ParsedSettings};
pub use read::{Ending, Frame, Trace, read};
pub use records::{
    ApiCall, ApiWhat, Device, EVENT_TIMED_CONTEXT, End, EndReason, ExternalCorrelation, Header, Kernel, Kind,
    Memcpy, Memset, NvtxRange, PmSample, RANGE_BY_TIME, Record, Sync, WHOLE_GRAPH_NAME_PREFIX,
    whole_graph_name,
};
pub use write::{TextId, Writer};
