//! What each step of the feed-forward kernel reads, writes and computes:
//! the phases the profile splits a launch into, and the launch's whole cost.

use crate::ops::bytes_of;
use crate::profile::{PhaseMeta, Role, Roles};
use crate::quant::QuantFormat;
use crate::runtime::{DType, OpKind, Primitive};

/// What each step reads, writes and computes: the phases the profile
/// splits the launch into, and their sum.
pub(super) struct StepCosts {
    steps: [(Role, &'static str, OpKind, u64, u64, u64, bool); 4],
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
        let staged = |values: usize| (values + 8 * (values / 32)) as u64;
        let gate_bytes = (2 * n * gate_blocks * gate.block_bytes()) as u64;
        let down_bytes = (k * down_blocks * down.block_bytes()) as u64;
        let f32_bytes = |values: usize| bytes_of(values, DType::F32);
        StepCosts {
            steps: [
                (
                    Role::MlpNorm,
                    "norm",
                    OpKind::RmsNorm,
                    f32_bytes(2 * k),
                    0,
                    6 * k as u64,
                    false,
                ),
                (
                    Role::GateUp,
                    "gate/up",
                    OpKind::fused(&[Primitive::MatVec, Primitive::SiluMul]),
                    gate_bytes,
                    f32_bytes(n),
                    4 * (n * k) as u64 + 6 * n as u64,
                    true,
                ),
                (
                    Role::ActivationQuantization,
                    "quantize",
                    OpKind::Copy,
                    f32_bytes(n),
                    staged(n),
                    2 * n as u64,
                    true,
                ),
                (
                    Role::Down,
                    "down",
                    OpKind::fused(&[Primitive::MatVec, Primitive::ElemAdd]),
                    down_bytes + staged(n) + f32_bytes(k),
                    f32_bytes(k),
                    2 * (n * k) as u64 + k as u64,
                    false,
                ),
            ],
        }
    }

    /// Bytes read, bytes written and flops of the whole launch.
    pub(super) fn total(&self) -> (u64, u64, u64) {
        self.steps.iter().fold((0, 0, 0), |(read, written, flops), step| {
            (read + step.3, written + step.4, flops + step.5)
        })
    }

    /// The steps as the profile's phases.
    pub(super) fn phases(&self) -> Vec<PhaseMeta> {
        self.steps
            .iter()
            .map(
                |&(role, name, op_kind, read, written, flops, barrier)| PhaseMeta {
                    name: name.into(),
                    op_kind,
                    roles: Roles::NONE.with(role),
                    bytes: read + written,
                    bytes_written: written,
                    flops,
                    ends_at_grid_barrier: barrier,
                },
            )
            .collect()
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
