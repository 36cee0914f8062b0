//! A product's output quantized where it is produced, for the product after
//! it: a quantized gate/up whose next step is a quantized down projection
//! stages its output for it in the same kernel (each block quantizes the
//! rows it computed: `QuantizedFused::encode_matvec_silu_staged`), so the
//! kernel that quantized it apart goes. The staged input waits in
//! [`Activations::handed_off`] for the step that reads it, which takes it
//! only if no dispatch came between (anything else stages x itself).
//! Likewise o_proj stages the residual stream for the norm after it, times
//! the norm's weight and with its chunks' sums of squares, where that norm
//! is read by such a gate/up (which finishes the norm from the sums), so
//! the norm's own kernel goes too.

use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::fused::StagedInput;
use kernelscope::{Buffer, CommandEncoder};

use super::activations::HandedOff;
use super::forward_parts::Forward;
use super::layer::{Activations, Slot, Step};
use crate::linear::{Linear, Parallel};

impl Forward<'_> {
    /// Leaves `staged` (`slot`'s values, quantized by the dispatch just
    /// encoded) for the step after it.
    pub(super) fn hand_off(
        &self,
        encoder: &CommandEncoder,
        activations: &Activations,
        slot: Slot,
        staged: StagedInput,
    ) {
        *activations.handed_off.borrow_mut() = Some(HandedOff {
            slot,
            staged,
            position: encoder.position(),
        });
    }

    /// `slot`'s values as the dispatch just before staged them, if it did
    /// (taken: a later step stages its own).
    pub(super) fn take_handed_off(
        &self,
        encoder: &CommandEncoder,
        activations: &Activations,
        slot: Slot,
    ) -> Option<StagedInput> {
        let handed = activations.handed_off.borrow_mut().take()?;
        (handed.position == encoder.position() && handed.slot == slot).then_some(handed.staged)
    }

    /// Whether `steps` begin with a quantized down projection adding into
    /// the residual stream that reads a staged x (whole, unbiased, with
    /// fused kernels): what gate/up before it stages its output for.
    pub(super) fn staged_down_first(&self, steps: &[Step<'_>]) -> bool {
        let Some(linear) = down_step(steps) else {
            return false;
        };
        let quantized = matches!(linear.format(), WeightFormat::Quantized(_));
        let whole = linear.parallel == Parallel::Whole && !linear.has_bias();
        quantized && whole && self.has_fused_kernels(linear.format())
    }

    /// The norm weight of `steps` where they begin with RMSNorm, gate/up and
    /// SiLU·mul that `fuse_norm_gate_up` encodes as a quantized gate/up
    /// staging its output for the down projection after it, in a kernel
    /// that reads an x still waiting for its norm: what the o_proj before
    /// them stages its output for. Not where the persistent feed-forward
    /// kernel takes those steps.
    /// The profiler's scope markers before the norm dispatch nothing, so
    /// they are passed over (the next layer half's scope opens there).
    pub(super) fn pending_norm_reader<'w>(&self, steps: &[Step<'w>]) -> Option<&'w Buffer> {
        let first = steps.iter().position(|step| !matches!(step, Step::Scope(_)))?;
        let (weight, gate, up, rest) = gate_up_steps(&steps[first..])?;
        let WeightFormat::Quantized(format) = gate.format() else {
            return None;
        };
        let persistent = match down_step(rest).map(Linear::format) {
            Some(WeightFormat::Quantized(down)) => self.ops.quantized_feed_forward(format, down).is_some(),
            _ => false,
        };
        let unbiased = !gate.has_bias() && !up.has_bias();
        let fuses = up.format() == gate.format() && self.fuses_as_output(gate) && self.fuses_as_output(up);
        let reads = fuses
            && self
                .ops
                .quantized_fused(format)
                .is_some_and(|fused| fused.gate_up_reads_pending_norm(&gate.weight));
        (!persistent && unbiased && reads && self.staged_down_first(rest)).then_some(weight)
    }
}

/// The down projection of steps that begin with it (SiLU·mul's output into
/// the residual stream) and the residual add.
pub(super) fn down_step<'w>(steps: &[Step<'w>]) -> Option<&'w Linear> {
    match steps {
        [
            Step::Linear {
                linear,
                input: Slot::Activated,
                output: Slot::Projected,
            },
            Step::AddResidual,
            ..,
        ] => Some(linear),
        _ => None,
    }
}

/// The norm weight, gate and up of steps that begin with RMSNorm, the gate
/// and up mat-vecs of the normed input and SiLU·mul, and the steps after.
pub(super) fn gate_up_steps<'s, 'w>(
    steps: &'s [Step<'w>],
) -> Option<(&'w Buffer, &'w Linear, &'w Linear, &'s [Step<'w>])> {
    match steps {
        [
            Step::Norm { weight },
            Step::Linear {
                linear: gate,
                input: Slot::Normed,
                output: Slot::Gate,
            },
            Step::Linear {
                linear: up,
                input: Slot::Normed,
                output: Slot::Up,
            },
            Step::SiluMul,
            rest @ ..,
        ] => Some((weight, gate, up, rest)),
        _ => None,
    }
}
