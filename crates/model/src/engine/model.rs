//! The model the engine runs: a file of its own, so that building it
//! (`construct`) and driving its ranks (`ranks`) take the type without
//! importing `mod.rs`, whose methods call on them.

use kernelscope::Communicator;

use super::shard::Shard;
use crate::config::Config;

/// A Llama-family model ready to run on one device, or split over several
/// (tensor parallelism).
pub struct Model {
    pub(super) name: String,
    /// What the weights are, as a user names it: the dtype, or a GGUF
    /// file's type (`Q4_K_M`).
    pub(super) format: Option<String>,
    /// The whole model's config.
    pub(super) config: Config,
    /// One per rank, rank 0 first.
    pub(super) shards: Vec<Shard>,
    /// One per rank when split; empty for one device.
    pub(super) communicators: Vec<Communicator>,
}
