//! The records a file holds. Fixed-size ones are `#[repr(C)]` plain data,
//! padded by hand to whole 8-byte words so that every byte is a field
//! (`bytemuck::Pod` allows no hidden padding). Times are ns on CUPTI's
//! clock; `correlation` is CUPTI's correlation id, which joins a kernel to
//! the API call that launched it (every kernel of one graph launch shares
//! the launch's); text fields are [`TextId`](crate::TextId)s of earlier
//! text frames (0: none).

use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

/// A frame's kind, as written in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Kind {
    /// [`Header`], JSON: the first frame of a file.
    Header = 1,
    /// A string and its id.
    Text = 2,
    /// [`Kernel`].
    Kernel = 3,
    /// [`Memcpy`].
    Memcpy = 4,
    /// [`Memset`].
    Memset = 5,
    /// [`Sync`].
    Sync = 6,
    /// [`ApiCall`].
    ApiCall = 7,
    /// [`ExternalCorrelation`].
    ExternalCorrelation = 8,
    /// [`NvtxRange`].
    NvtxRange = 9,
    /// [`PmSample`].
    PmSample = 10,
    /// [`End`]: the last frame of a process that exited normally.
    End = 11,
    /// [`Device`].
    Device = 12,
}

impl Kind {
    /// The kind written as `code`, if it is one this reader knows.
    pub fn from_code(code: u16) -> Option<Kind> {
        Some(match code {
            1 => Kind::Header,
            2 => Kind::Text,
            3 => Kind::Kernel,
            4 => Kind::Memcpy,
            5 => Kind::Memset,
            6 => Kind::Sync,
            7 => Kind::ApiCall,
            8 => Kind::ExternalCorrelation,
            9 => Kind::NvtxRange,
            10 => Kind::PmSample,
            11 => Kind::End,
            12 => Kind::Device,
            _ => return None,
        })
    }

    /// The kind's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Header => "header",
            Kind::Text => "text",
            Kind::Kernel => "kernel",
            Kind::Memcpy => "memcpy",
            Kind::Memset => "memset",
            Kind::Sync => "sync",
            Kind::ApiCall => "api call",
            Kind::ExternalCorrelation => "external correlation",
            Kind::NvtxRange => "nvtx range",
            Kind::PmSample => "pm sample",
            Kind::End => "end",
            Kind::Device => "device",
        }
    }
}

/// A fixed-size record: its kind, and the version of its layout (a reader
/// takes only the versions it knows; a changed layout gets a new version).
pub trait Record: Pod {
    /// The frame kind it is written as.
    const KIND: Kind;
    /// Its layout's version.
    const VERSION: u16 = 1;
}

/// Who wrote the file: the first frame, JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The process.
    pub pid: u32,
    /// Its parent, which tells a launcher's children apart.
    pub parent_pid: u32,
    /// Its command line.
    pub command: Vec<String>,
    /// `RANK`, `LOCAL_RANK` and `WORLD_SIZE` where the launcher set them.
    pub rank: Option<u32>,
    /// `LOCAL_RANK`.
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE`.
    pub world_size: Option<u32>,
    /// CUPTI's API version, where CUPTI was loaded.
    pub cupti_version: Option<u32>,
    /// The devices the process saw (`cuda:0 NVIDIA H100 80GB HBM3 (sm_90)`).
    pub devices: Vec<String>,
}

/// What a whole CUDA graph's execution is named when its nodes are not
/// traced (`kscope profile --graphs whole`): it is written as one
/// [`Kernel`] per graph launch, named this followed by the graph's id,
/// timed from the graph's start to its end, with no grid or block.
pub const WHOLE_GRAPH_NAME_PREFIX: &str = "whole CUDA graph ";

/// The name of graph `graph`'s whole execution ([`WHOLE_GRAPH_NAME_PREFIX`]).
pub fn whole_graph_name(graph: u32) -> String {
    format!("{WHOLE_GRAPH_NAME_PREFIX}{graph}")
}

/// The context of a [`Kernel`] timed by CUDA events in the program
/// (`kscope profile --graphs events`): CUPTI numbers contexts from 1.
pub const EVENT_TIMED_CONTEXT: u32 = 0;

/// One kernel's execution (or, named by [`whole_graph_name`], one whole graph's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Kernel {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// The graph node it ran as (0: launched outside a graph).
    pub graph_node: u64,
    /// CUPTI's correlation id (joins it to the API call that made it).
    pub correlation: u32,
    /// Its name (mangled, as CUPTI gives it).
    pub name: u32,
    /// The device's ordinal.
    pub device: u32,
    /// CUPTI's context id; [`EVENT_TIMED_CONTEXT`] for a whole graph timed
    /// by CUDA events in the program rather than by CUPTI.
    pub context: u32,
    /// CUPTI's stream id.
    pub stream: u32,
    /// The graph it ran in (0: none).
    pub graph: u32,
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads a block in x, y, z.
    pub block: [u32; 3],
    /// Registers a thread.
    pub registers: u32,
    /// Shared memory a block, static and dynamic.
    pub shared_bytes: u32,
}

impl Record for Kernel {
    const KIND: Kind = Kind::Kernel;
}

/// A copy between host and device memory, or within one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Memcpy {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// CUPTI's correlation id (joins it to the API call that made it).
    pub correlation: u32,
    /// CUPTI's copy kind (`CUpti_ActivityMemcpyKind`: 1 host to device, 2 device to host, 8 device to device, ...).
    pub copy_kind: u32,
    /// The device's ordinal.
    pub device: u32,
    /// CUPTI's context id.
    pub context: u32,
    /// CUPTI's stream id.
    pub stream: u32,
    /// The graph it ran in (0: none).
    pub graph: u32,
}

impl Record for Memcpy {
    const KIND: Kind = Kind::Memcpy;
}

/// A memory set on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Memset {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// CUPTI's correlation id (joins it to the API call that made it).
    pub correlation: u32,
    /// The byte value set.
    pub value: u32,
    /// The device's ordinal.
    pub device: u32,
    /// CUPTI's context id.
    pub context: u32,
    /// CUPTI's stream id.
    pub stream: u32,
    /// The graph it ran in (0: none).
    pub graph: u32,
}

impl Record for Memset {
    const KIND: Kind = Kind::Memset;
}

/// A host wait for the device (`cudaStreamSynchronize`, an event, a context).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Sync {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// CUPTI's correlation id (joins it to the API call that made it).
    pub correlation: u32,
    /// CUPTI's synchronization type (`CUpti_ActivitySynchronizationType`).
    pub sync_kind: u32,
    /// CUPTI's context id.
    pub context: u32,
    /// CUPTI's stream id.
    pub stream: u32,
}

impl Record for Sync {
    const KIND: Kind = Kind::Sync;
}

/// What an [`ApiCall`] did, as far as a profile cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ApiWhat {
    /// Launched one kernel.
    Launch = 1,
    /// Launched a CUDA graph (every node's record shares its correlation).
    GraphLaunch = 2,
    /// Waited on the host for the device (a stream, an event, the context).
    Sync = 3,
    /// Copied or set memory.
    Memory = 4,
}

impl ApiWhat {
    /// The kind written as `code`, if it is one this reader knows.
    pub fn from_code(code: u32) -> Option<ApiWhat> {
        Some(match code {
            1 => ApiWhat::Launch,
            2 => ApiWhat::GraphLaunch,
            3 => ApiWhat::Sync,
            4 => ApiWhat::Memory,
            _ => return None,
        })
    }
}

/// A runtime or driver API call the profile needs (a launch, a graph
/// launch, a synchronisation, a copy), by its CUPTI callback id, with the
/// NVTX range open on its thread when it was made: what puts a kernel,
/// which runs later, under the range that launched it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct ApiCall {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// The host thread.
    pub thread: u64,
    /// The innermost NVTX push/pop range open on the thread ([`NvtxRange::id`];
    /// 0: none; [`RANGE_BY_TIME`]: the writer did not know, the reader finds it).
    pub range: u64,
    /// CUPTI's correlation id (the kernels, copies and sets it made carry it).
    pub correlation: u32,
    /// CUPTI's callback id of the call.
    pub callback: u32,
    /// 0: the runtime API, 1: the driver API.
    pub domain: u32,
    /// What it did ([`ApiWhat`] as a number).
    pub what: u32,
}

/// [`ApiCall::range`] of a call recorded without its range (CUPTI's own
/// API records): the innermost push/pop range of its thread open at its
/// start is found from the ranges' times.
pub const RANGE_BY_TIME: u64 = u64::MAX;

impl ApiCall {
    /// What it did, when the writer said something this reader knows.
    pub fn what(&self) -> Option<ApiWhat> {
        ApiWhat::from_code(self.what)
    }
}

impl Record for ApiCall {
    const KIND: Kind = Kind::ApiCall;
}

/// CUPTI's link from a correlation id to an outside id: the NVTX range open
/// when the call was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct ExternalCorrelation {
    /// The outside id.
    pub external: u64,
    /// CUPTI's correlation id (joins it to the API call that made it).
    pub correlation: u32,
    /// CUPTI's external correlation kind.
    pub external_kind: u32,
}

impl Record for ExternalCorrelation {
    const KIND: Kind = Kind::ExternalCorrelation;
}

/// A closed NVTX range: a push/pop pair on one thread, or a start/end
/// pair (which may end on another thread; its `depth` and `parent` are 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct NvtxRange {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// The host thread it was opened on.
    pub thread: u64,
    /// Its id, unique in the process (never 0): [`ApiCall::range`] names it.
    pub id: u64,
    /// The range it was pushed inside (0: none).
    pub parent: u64,
    /// Its NVTX domain's name (0: the default domain).
    pub domain: u32,
    /// Its message.
    pub message: u32,
    /// Ranges open around it on its thread.
    pub depth: u32,
    /// 1: a push/pop range, on `thread`'s stack (an API call made on that
    /// thread between its start and end was made inside it); 0: a
    /// start/end range.
    pub stacked: u32,
}

impl Record for NvtxRange {
    const KIND: Kind = Kind::NvtxRange;
}

/// DRAM bytes over one performance-monitor sampling interval of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct PmSample {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// DRAM bytes read in the interval.
    pub dram_read_bytes: u64,
    /// DRAM bytes written in the interval.
    pub dram_write_bytes: u64,
    /// The device's ordinal.
    pub device: u32,
    /// Zero: pads the record to whole words.
    pub padding: u32,
}

impl Record for PmSample {
    const KIND: Kind = Kind::PmSample;
}

/// A device the process made a context on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Device {
    /// Its memory, bytes.
    pub memory_bytes: u64,
    /// The ordinal the process saw it as (what [`Kernel::device`] says).
    pub ordinal: u32,
    /// Its name (`NVIDIA H100 80GB HBM3`).
    pub name: u32,
    /// Compute capability, major.
    pub major: u32,
    /// Compute capability, minor.
    pub minor: u32,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Zero: pads the record to whole words.
    pub padding: u32,
}

impl Record for Device {
    const KIND: Kind = Kind::Device;
}

/// How a process ended, as its last frame says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// It returned from main or called exit.
    Exit,
    /// A fatal signal, flushed in its handler before the process died.
    Signal(u32),
}

/// The last frame of a process that got to write one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct End {
    /// When the frame was written, ns on CUPTI's clock.
    pub at_ns: u64,
    /// 0: exit; else the fatal signal's number.
    pub signal: u32,
    /// Records CUPTI reported dropped (its buffers full).
    pub dropped: u32,
}

impl End {
    /// How the process ended.
    pub fn reason(&self) -> EndReason {
        match self.signal {
            0 => EndReason::Exit,
            signal => EndReason::Signal(signal),
        }
    }
}

impl Record for End {
    const KIND: Kind = Kind::End;
}
