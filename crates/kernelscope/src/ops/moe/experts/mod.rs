//! A mixture-of-experts layer's experts on the device, driven by the
//! router's choice in device memory (`ops::moe::route`): no host sync, so a
//! decode step stays one graph launch, and only the chosen experts'
//! weights are read. `gate_up` forms each chosen expert's SiLU-gated
//! activation, `down` projects each back and adds the weighted sum into
//! the residual stream; `norm_gate_up` is gate_up with the RMSNorm before
//! it fused in (decode). All take any number of rows (one in decode, a
//! chunk in prefill), reading each row's own experts. Experts are stacked:
//! expert e's matrix is the e-th block of each weight buffer.

mod arguments;
mod common;
mod cpu;
pub mod down;
pub mod gate_up;
pub mod norm_gate_up;

pub use common::MOST_HIDDEN;
pub use down::MoeDownAdd;
pub use gate_up::MoeGateUp;
pub use norm_gate_up::MoeNormGateUp;

use crate::runtime::KernelRegistry;

/// Registers `moe_gate_up_<dtype>`, `moe_gate_up_narrow_<dtype>`,
/// `moe_norm_gate_up_<dtype>` and `moe_down_add_<dtype>` for every weight
/// dtype.
pub fn register(registry: &mut KernelRegistry) {
    gate_up::register(registry);
    norm_gate_up::register(registry);
    down::register(registry);
}
