//! A decoder's anatomy in a profile: which layer each dispatch ran in and
//! what it did for the model (its [`Role`]). kscope's engine says both as
//! it encodes; for another program (llama.cpp, PyTorch) they are found
//! from the records: layers from the period of each token's kernel
//! sequence (or the program's own NVTX marks), roles from kernel names and
//! their order inside a layer, and, given the model, bytes and flops from
//! its tensors' shapes.

mod role;

pub use role::{Role, Roles};
