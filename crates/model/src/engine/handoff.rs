//! The products that hand their output to the next product across steps:
//! a quantized mat-vec adding into the residual stream (o_proj, the down
//! projection) whose next step is a norm read by quantized mat-vecs stages
//! that norm's output from its last block, and gate/up stages its output
//! for a quantized down projection (`QuantizedFused`'s handoff), so the
//! kernels that normalised and quantized them apart are gone. The staged
//! input waits in [`Activations::handed_off`] for the step that reads it,
//! which takes it only if no dispatch came between (anything else stages
//! x itself). Also the patterns of those products (fusion's others are in
//! `fusion`): attention into o_proj, and a mat-vec into the residual.

use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::fused::{QuantizedFused, StagedInput};
use kernelscope::{Buffer, CommandEncoder};

use super::forward_parts::Forward;
use super::layer::{Activations, Slot, Step};
use crate::error::Result;
use crate::linear::{Linear, Parallel};

/// A quantized input a product's last block staged, for the step after it.
pub(crate) struct HandedOff {
    source: Source,
    staged: StagedInput,
    /// The encoder's position after the product: only a reader dispatched
    /// right there may take it.
    position: usize,
}

/// What a handed-off input holds.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// `rmsnorm(hidden) * weight`, for the readers of the norm of `weight`.
    Norm(Buffer),
    /// A slot's values (gate/up's output for the down projection).
    Slot(Slot),
}

impl Source {
    fn is(&self, other: &Source) -> bool {
        match (self, other) {
            (Source::Norm(a), Source::Norm(b)) => {
                a.same_allocation(b) && a.byte_offset() == b.byte_offset() && a.len() == b.len()
            }
            (Source::Slot(a), Source::Slot(b)) => a == b,
            _ => false,
        }
    }
}

impl Forward<'_> {
    /// Leaves `staged`, just dispatched, for the step after the product.
    pub(super) fn hand_off(
        &self,
        encoder: &CommandEncoder,
        activations: &Activations,
        source: Source,
        staged: StagedInput,
    ) {
        *activations.handed_off.borrow_mut() = Some(HandedOff {
            source,
            staged,
            position: encoder.position(),
        });
    }

    /// The input handed off as `source` by the dispatch just before, if
    /// there is one (taken: a later step stages its own).
    pub(super) fn take_handed_off(
        &self,
        encoder: &CommandEncoder,
        activations: &Activations,
        source: &Source,
    ) -> Option<StagedInput> {
        let handed = activations.handed_off.borrow_mut().take()?;
        (handed.position == encoder.position() && handed.source.is(source)).then_some(handed.staged)
    }

    /// The norm weight of the norm `steps` begin with (past scope markers),
    /// where its first reader is a quantized mat-vec with fused kernels,
    /// which reads a staged x (and the layer's feed-forward kernel does not
    /// take the norm in its own launch): what a product before it hands off.
    pub(super) fn staged_norm_after<'w>(&self, steps: &[Step<'w>]) -> Option<&'w Buffer> {
        let start = steps.iter().position(|step| !matches!(step, Step::Scope(_)))?;
        let steps = &steps[start..];
        let [
            Step::Norm { weight },
            Step::Linear {
                linear,
                input: Slot::Normed,
                ..
            },
            ..,
        ] = steps
        else {
            return None;
        };
        let quantized = matches!(linear.format(), WeightFormat::Quantized(_));
        (quantized && self.fuses_as_output(linear) && self.feed_forward_kernel(steps).is_none())
            .then_some(*weight)
    }

    /// Whether `steps` begin with a quantized down projection adding into
    /// the residual stream that reads a staged x (whole, unbiased, fused
    /// kernels): what gate/up before it hands off to.
    pub(super) fn staged_down_first(&self, steps: &[Step<'_>]) -> bool {
        let [
            Step::Linear {
                linear,
                input: Slot::Activated,
                output: Slot::Projected,
            },
            Step::AddResidual,
            ..,
        ] = steps
        else {
            return false;
        };
        let quantized = matches!(linear.format(), WeightFormat::Quantized(_));
        quantized
            && linear.parallel == Parallel::Whole
            && !linear.has_bias()
            && self.has_fused_kernels(linear.format())
    }

    /// `hidden += W · staged` by `fused`, handing off to the norm `next`
    /// names where there is one.
    fn encode_add_handing_off(
        &self,
        encoder: &mut CommandEncoder,
        fused: &QuantizedFused,
        weight: &Buffer,
        staged: &StagedInput,
        next: Option<&Buffer>,
        activations: &Activations,
    ) -> Result<()> {
        let hidden = &activations.hidden;
        let Some(norm_weight) = next else {
            return Ok(fused.encode_matvec_add_staged(encoder, weight, staged, hidden)?);
        };
        let eps = self.config.rms_norm_eps;
        if let Some(handed) =
            fused.encode_matvec_add_handing_off(encoder, weight, staged, hidden, norm_weight, eps)?
        {
            self.hand_off(encoder, activations, Source::Norm(norm_weight.clone()), handed);
        }
        Ok(())
    }

    /// Attention whose combine step quantizes its output for a quantized
    /// o_proj, then o_proj adding into the residual stream: the kernel that
    /// quantized the attention's output before o_proj is gone (the combine
    /// step's warps hold one block of 32 values each). Only where o_proj is
    /// whole (a split o_proj's partial sums need their all-reduce), unbiased
    /// and has fused kernels, and the head dimension is whole blocks of 32.
    pub(super) fn fuse_attention_output(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let [
            Step::Attention { layer },
            Step::Linear {
                linear,
                input: Slot::Attention,
                output: Slot::Projected,
            },
            Step::AddResidual,
            ..,
        ] = steps
        else {
            return Ok(0);
        };
        let WeightFormat::Quantized(format) = linear.format() else {
            return Ok(0);
        };
        let heads = self.config.heads();
        let whole = linear.parallel == Parallel::Whole && !linear.has_bias();
        if !whole || !self.has_fused_kernels(linear.format()) || !heads.dim.is_multiple_of(32) {
            return Ok(0);
        }
        let fused = self
            .ops
            .quantized_fused(format)
            .expect("has_fused_kernels checked the kernels");
        let staged = fused.stage_scratch(encoder.device(), heads.query * heads.dim)?;
        self.encode_attention(encoder, *layer, activations, Some(staged.buffer()))?;
        let next = self.staged_norm_after(&steps[3..]);
        self.encode_add_handing_off(encoder, fused, &linear.weight, &staged, next, activations)?;
        Ok(3)
    }

    /// A mat-vec adding into the residual stream (a bias belongs before the
    /// add, so a biased projection stays apart).
    pub(super) fn fuse_matvec_residual(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let [
            Step::Linear {
                linear,
                input,
                output: Slot::Projected,
            },
            Step::AddResidual,
            ..,
        ] = steps
        else {
            return Ok(0);
        };
        let splits_allow = matches!(linear.parallel, Parallel::Whole | Parallel::SplitInputs);
        if linear.has_bias() || !self.has_fused_kernels(linear.format()) || !splits_allow {
            return Ok(0);
        }
        let x = activations.slot(*input)?;
        match linear.format() {
            // Whole, it is the residual stream's last write before the
            // steps after: it may hand off to their norm, and read what
            // gate/up handed it.
            WeightFormat::Quantized(format) if linear.parallel == Parallel::Whole => {
                let fused = self
                    .ops
                    .quantized_fused(format)
                    .expect("has_fused_kernels checked the kernels");
                let staged = match self.take_handed_off(encoder, activations, &Source::Slot(*input)) {
                    Some(staged) => staged,
                    None => fused.encode_quantize(encoder, x)?,
                };
                let next = self.staged_norm_after(&steps[2..]);
                self.encode_add_handing_off(encoder, fused, &linear.weight, &staged, next, activations)?;
            }
            _ => self.encode_matvec_into_residual(encoder, linear, x, activations)?,
        }
        Ok(2)
    }

    /// `hidden += linear(input)` in one kernel. Split, each rank's product
    /// is a partial sum: rank 0 adds its part into the residual stream and
    /// the others overwrite their (identical) copy of it with theirs, so one
    /// all-reduce of the residual stream adds it all up.
    fn encode_matvec_into_residual(
        &self,
        encoder: &mut CommandEncoder,
        linear: &Linear,
        input: &Buffer,
        activations: &Activations,
    ) -> Result<()> {
        let hidden = &activations.hidden;
        // `hidden += W · input`, or (`add` false) `hidden = W · input`.
        let product = |encoder: &mut CommandEncoder, add: bool| -> Result<()> {
            match linear.format() {
                WeightFormat::Dense(dtype) => {
                    let kernels = self.ops.linear_kernels(dtype)?;
                    if add {
                        kernels
                            .matvec_add
                            .encode(encoder, &linear.weight, input, hidden)?
                    } else {
                        kernels.matvec.encode(encoder, &linear.weight, input, hidden)?
                    }
                }
                WeightFormat::Quantized(format) => {
                    if add {
                        self.ops
                            .quantized_fused(format)
                            .expect("has_fused_kernels checked the kernels")
                            .encode_matvec_add(encoder, &linear.weight, input, hidden)?
                    } else {
                        self.ops
                            .quantized_linear(format)?
                            .encode(encoder, &linear.weight, input, hidden)?
                    }
                }
            }
            Ok(())
        };
        match &self.ops.collectives {
            Some(collectives) if linear.parallel == Parallel::SplitInputs => {
                product(encoder, self.ops.partition.rank == 0)?;
                collectives.all_reduce.encode(encoder, hidden)?;
            }
            _ => product(encoder, true)?,
        }
        Ok(())
    }
}
