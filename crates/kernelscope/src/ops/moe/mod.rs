//! The mixture-of-experts family over dense weights: `route` picks each
//! token's experts and their weights, `group` gathers the tokens of each
//! expert and combines the experts' outputs back, `experts` runs the
//! chosen experts' MLPs. (Quantized experts are `quantized::experts`.)

pub mod experts;
pub mod group;
pub mod route;

use crate::runtime::KernelRegistry;

/// Registers every mixture-of-experts kernel.
pub fn register(registry: &mut KernelRegistry) {
    route::register(registry);
    group::register(registry);
    experts::register(registry);
}
