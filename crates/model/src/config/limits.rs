//! The bounds a config's numbers must keep, which the parser, the typed
//! field reads and the experts' checks all enforce: a file of their own so
//! that none of those has to import another for them.

/// The most decoder layers a config may declare: far above any released
/// model (126), low enough that listing the layers' tensors is cheap work
/// even for a hostile config.
pub const MAX_LAYERS: usize = 4096;

/// The largest size any single dimension may have: kernels index with u32
/// and products of two dimensions must not overflow u64.
pub(super) const MAX_DIMENSION: u64 = (1 << 31) - 1;

/// The largest `config.json` read (real ones are a few kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;
