//! Fusion as pattern recognition over a pass's steps: where the steps of
//! the one written layer (`layer`) begin with a pattern one kernel can do
//! (RMSNorm and the mat-vecs that read it; RMSNorm, gate/up and SiLU·mul; a
//! mat-vec and the residual add; RoPE on q and k and the KV append), that
//! kernel is encoded in their place. The fused kernels are mat-vecs, so
//! only one position's pass fuses; a linear layer fuses only where its
//! format has the kernel and its split needs nothing between the steps
//! (a bias belongs before a residual add, a partial sum's all-reduce
//! before anything reads it).

use kernelscope::{Buffer, CommandEncoder};

use super::forward::Forward;
use super::layer::{Activations, Slot, Step};
use crate::error::Result;
use crate::linear::{Linear, Parallel};

impl Forward<'_> {
    /// Encodes the fused kernel of the pattern `steps` begins with, if one
    /// does, and returns how many steps it covered (0: none).
    pub(super) fn encode_fused(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        use Slot::*;
        let fused = self.ops.linear_kernels(self.weights.dtype)?;
        let eps = self.config.rms_norm_eps;
        let local = |linear: &Linear| {
            !matches!(linear.parallel, Parallel::SplitInputs) && linear.format() == self.weights.dtype
        };
        match steps {
            // RMSNorm + gate/up + SiLU·mul.
            [
                Step::Norm { weight },
                Step::Linear {
                    linear: gate,
                    input: Normed,
                    output: Gate,
                },
                Step::Linear {
                    linear: up,
                    input: Normed,
                    output: Up,
                },
                Step::SiluMul,
                ..,
            ] if local(gate) && local(up) && !gate.has_bias() && !up.has_bias() => {
                fused.norm_matvec_silu.encode(
                    encoder,
                    &activations.hidden,
                    weight,
                    &gate.weight,
                    &up.weight,
                    &activations.activated,
                    eps,
                )?;
                Ok(4)
            }
            // RMSNorm + every mat-vec that reads it (q, k, v; the LM head).
            [Step::Norm { weight }, rest @ ..] => {
                let readers: Vec<(&Linear, Slot)> = rest
                    .iter()
                    .map_while(|step| match *step {
                        Step::Linear {
                            linear,
                            input: Normed,
                            output,
                        } => Some((linear, output)),
                        _ => None,
                    })
                    .collect();
                let outputs: Vec<Slot> = readers.iter().map(|reader| reader.1).collect();
                let joined = activations.joined(&outputs);
                let (Some(joined), 1..=3) = (joined, readers.len()) else {
                    return Ok(0);
                };
                if !readers.iter().all(|(linear, _)| local(linear)) {
                    return Ok(0);
                }
                let weights: Vec<&Buffer> = readers.iter().map(|(linear, _)| &linear.weight).collect();
                fused
                    .norm_matvec
                    .encode(encoder, &activations.hidden, weight, &weights, &joined, eps)?;
                for (linear, output) in &readers {
                    let output = activations.slot(*output)?;
                    if let Some(bias) = linear.held_bias() {
                        self.ops.add_bias.encode(encoder, output, bias)?;
                    }
                    self.complete_split(encoder, linear, output, activations)?;
                }
                Ok(1 + readers.len())
            }
            // RoPE on q and k + the KV append.
            [
                Step::Rope { target: Query },
                Step::Rope { target: Key },
                Step::AppendKeyValue { layer },
                ..,
            ] => {
                let state = self.state;
                self.ops.rope_append.encode(
                    encoder,
                    &activations.query,
                    &activations.key,
                    &activations.value,
                    &state.key_cache[*layer],
                    &state.value_cache[*layer],
                    &state.rope_frequencies,
                    &activations.positions.0,
                    activations.positions.1,
                    self.config.heads(),
                )?;
                Ok(3)
            }
            // A mat-vec adding into the residual stream (a bias belongs
            // before the add, so a biased projection stays apart).
            [
                Step::Linear {
                    linear,
                    input,
                    output: Projected,
                },
                Step::AddResidual,
                ..,
            ] if !linear.has_bias()
                && linear.format() == self.weights.dtype
                && matches!(linear.parallel, Parallel::Whole | Parallel::SplitInputs) =>
            {
                self.encode_matvec_into_residual(encoder, linear, activations.slot(*input)?, activations)?;
                Ok(2)
            }
            _ => Ok(0),
        }
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
        let kernels = self.ops.linear_kernels(linear.format())?;
        let hidden = &activations.hidden;
        match &self.ops.collectives {
            Some(collectives) if linear.parallel == Parallel::SplitInputs => {
                if self.ops.partition.rank == 0 {
                    kernels
                        .matvec_add
                        .encode(encoder, &linear.weight, input, hidden)?;
                } else {
                    kernels.matvec.encode(encoder, &linear.weight, input, hidden)?;
                }
                collectives.all_reduce.encode(encoder, hidden)?;
            }
            _ => kernels
                .matvec_add
                .encode(encoder, &linear.weight, input, hidden)?,
        }
        Ok(())
    }
}
