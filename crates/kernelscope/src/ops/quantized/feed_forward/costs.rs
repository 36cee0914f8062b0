//! What each step of the feed-forward kernel reads, writes and computes:
//! the phases the profile splits a launch into, and the launch's whole cost.

use crate::ops::bytes_of;
use crate::ops::quantized::linear::staged_bytes;
use crate::profile::{PhaseMeta, Role, Roles};
use crate::quant::QuantFormat;
use crate::runtime::{DType, OpKind, Primitive};

/// What each step reads, writes and computes: the phases the profile
/// splits the launch into, and their sum.
pub(super) struct StepCosts {
    steps: Vec<PhaseMeta>,
}

/// A step of `role` named `name` that reads `read` bytes and writes
/// `written`, ending at a grid barrier where `barrier`.
fn step(
    role: Role,
    name: &str,
    op_kind: OpKind,
    read: u64,
    written: u64,
    flops: u64,
    barrier: bool,
) -> PhaseMeta {
    PhaseMeta {
        name: name.into(),
        op_kind,
        roles: Roles::NONE.with(role),
        bytes: read + written,
        bytes_written: written,
        flops,
        ends_at_grid_barrier: barrier,
    }
}

impl StepCosts {
    pub(super) fn new(
        gate: QuantFormat,
        down: QuantFormat,
        k: usize,
        n: usize,
        gate_blocks: usize,
        down_blocks: usize,
    ) -> Self {
        let staged = staged_bytes(n) as u64;
        let gate_bytes = (2 * n * gate_blocks * gate.block_bytes()) as u64;
        let down_bytes = (k * down_blocks * down.block_bytes()) as u64;
        let f32_bytes = |values: usize| bytes_of(values, DType::F32);
        let gate_up = OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]);
        let down_add = OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]);
        let (n_k, n_u, k_u) = ((n * k) as u64, n as u64, k as u64);
        StepCosts {
            steps: vec![
                step(
                    Role::MlpNorm,
                    "norm",
                    OpKind::RmsNorm,
                    f32_bytes(2 * k),
                    0,
                    6 * k_u,
                    false,
                ),
                step(
                    Role::GateUp,
                    "gate/up",
                    gate_up,
                    gate_bytes,
                    f32_bytes(n),
                    4 * n_k + 6 * n_u,
                    true,
                ),
                step(
                    Role::ActivationQuantization,
                    "quantize",
                    OpKind::Copy,
                    f32_bytes(n),
                    staged,
                    2 * n_u,
                    true,
                ),
                step(
                    Role::Down,
                    "down",
                    down_add,
                    down_bytes + staged + f32_bytes(k),
                    f32_bytes(k),
                    2 * n_k + k_u,
                    false,
                ),
            ],
        }
    }

    /// Bytes read, bytes written and flops of the whole launch.
    pub(super) fn total(&self) -> (u64, u64, u64) {
        self.steps.iter().fold((0, 0, 0), |(read, written, flops), step| {
            (
                read + step.bytes - step.bytes_written,
                written + step.bytes_written,
                flops + step.flops,
            )
        })
    }

    /// The steps as the profile's phases.
    pub(super) fn phases(&self) -> Vec<PhaseMeta> {
        self.steps.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phases_add_up_to_the_launch() {
        let costs = StepCosts::new(QuantFormat::Q4_K, QuantFormat::Q6_K, 2_048, 8_192, 8, 32);
        let (read, written, flops) = costs.total();
        let phases = costs.phases();
        assert_eq!(phases.len(), 4);
        assert_eq!(
            phases.iter().map(|phase| phase.bytes).sum::<u64>(),
            read + written
        );
        assert_eq!(
            phases.iter().map(|phase| phase.bytes_written).sum::<u64>(),
            written
        );
        assert_eq!(phases.iter().map(|phase| phase.flops).sum::<u64>(), flops);
        // The two steps before a grid barrier say so; the others do not.
        let barriers: Vec<bool> = phases.iter().map(|phase| phase.ends_at_grid_barrier).collect();
        assert_eq!(barriers, [false, true, true, false]);
        // Gate and up: two matrices of 8,192 rows of 8 Q4_K blocks.
        assert_eq!(phases[1].bytes - phases[1].bytes_written, 2 * 8_192 * 8 * 144);
    }
}
