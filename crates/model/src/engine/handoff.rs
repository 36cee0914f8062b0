//! A product's output quantized where it is produced, for the product after
//! it: a quantized gate/up whose next step is a quantized down projection
//! stages its output for it in the same kernel (each block quantizes the
//! rows it computed: `QuantizedFused::encode_matvec_silu_staged`), so the
//! kernel that quantized it apart goes. The staged input waits in
//! [`Activations::handed_off`] for the step that reads it, which takes it
//! only if no dispatch came between (anything else stages x itself).

use kernelscope::CommandEncoder;
use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::fused::StagedInput;

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
