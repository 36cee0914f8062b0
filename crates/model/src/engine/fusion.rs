//! Fusion as pattern recognition over a pass's steps: where the steps of
//! the one written layer (`layer`) begin with a pattern one kernel can do
//! (RMSNorm and the mat-vecs that read it; RMSNorm, gate/up and SiLU·mul; a
//! mat-vec and the residual add; RoPE on q and k and the KV append, with
//! Qwen3's per-head norms of q and k before it; RMSNorm, q, k and v, RoPE
//! and the append, quantized: `query_key_value`; attention whose combine
//! step quantizes its output for a quantized o_proj), that kernel is
//! encoded in their place. The fused kernels are mat-vecs, so
//! only one position's pass fuses; a linear layer fuses only where its
//! format has the kernel and its split needs nothing between the steps
//! (a bias belongs before a residual add, a partial sum's all-reduce
//! before anything reads it). Quantized weights fuse where the device has
//! their fused kernels (CUDA), readers of the norm grouped by format (a
//! Q4_K_M file's q and k in Q4_K, its v in Q6_K: one product each, the
//! quantized groups reading one normalised and quantized x; a dense
//! group normalises x itself).
//!
//! RoPE, the append and attention in one kernel
//! (`Attention::encode_with_rope`) is not a pattern here: on an H200 it
//! made decode 2-3 % slower than the append then attention (docs/PERF.md).

use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::fused::Reader;
use kernelscope::{Buffer, CommandEncoder, DType};

use super::forward_parts::Forward;
use super::handoff::{down_step, gate_up_steps};
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
        // Gate/up before the general norm + mat-vecs, which would otherwise
        // take its first two steps and leave SiLU·mul apart. Each pattern
        // encodes its kernel and returns the steps it covered, or 0.
        let patterns = [
            Self::fuse_sparse_prologue,
            Self::fuse_feed_forward,
            Self::fuse_norm_gate_up,
            Self::fuse_query_key_value_rope,
            Self::fuse_norm_readers,
            Self::fuse_rope_append,
            Self::fuse_attention_output,
            Self::fuse_matvec_residual,
        ];
        for pattern in patterns {
            let covered = pattern(self, encoder, steps, activations)?;
            if covered > 0 {
                return Ok(covered);
            }
        }
        Ok(0)
    }

    /// Whether `linear` can be one of several outputs of a fused mat-vec:
    /// its format has the fused kernels and its output needs no reduction.
    pub(super) fn fuses_as_output(&self, linear: &Linear) -> bool {
        linear.parallel != Parallel::SplitInputs && self.has_fused_kernels(linear.format())
    }

    /// Whether weights of `format` have fused kernels here: dense ones of
    /// the model's dtype, quantized ones where the device has them (their
    /// norm weight must then be f32, as GGUF files keep it).
    pub(super) fn has_fused_kernels(&self, format: WeightFormat) -> bool {
        match format {
            WeightFormat::Dense(dtype) => dtype == self.weights.dtype,
            WeightFormat::Quantized(quant) => {
                self.weights.dtype == DType::F32 && self.ops.quantized_fused(quant).is_some()
            }
        }
    }

    /// A dense layer's whole feed-forward half (RMSNorm, gate/up, SiLU·mul,
    /// down and the residual add) in one persistent launch, where every
    /// matrix is quantized, unsplit and unbiased and the device runs such
    /// kernels (`QuantizedFeedForward`, asked for by `--persistent-steps`).
    fn fuse_feed_forward(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let Some((weight, gate, up, rest)) = gate_up_steps(steps) else {
            return Ok(0);
        };
        let Some(down) = down_step(rest) else {
            return Ok(0);
        };
        let (WeightFormat::Quantized(gate_format), WeightFormat::Quantized(down_format)) =
            (gate.format(), down.format())
        else {
            return Ok(0);
        };
        let whole = [gate, up, down]
            .iter()
            .all(|linear| linear.parallel == Parallel::Whole && !linear.has_bias());
        let Some(kernels) = self.ops.quantized_feed_forward(gate_format, down_format) else {
            return Ok(0);
        };
        if !whole || up.format() != gate.format() || self.weights.dtype != DType::F32 {
            return Ok(0);
        }
        kernels.encode(
            encoder,
            &activations.hidden,
            weight,
            &gate.weight,
            &up.weight,
            &down.weight,
            self.config.rms_norm_eps,
        )?;
        Ok(6)
    }

    /// RMSNorm + the gate and up mat-vecs + SiLU·mul.
    fn fuse_norm_gate_up(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let Some((weight, gate, up, rest)) = gate_up_steps(steps) else {
            return Ok(0);
        };
        let unbiased = !gate.has_bias() && !up.has_bias();
        let same_format = gate.format() == up.format();
        if !(unbiased && same_format && self.fuses_as_output(gate) && self.fuses_as_output(up)) {
            return Ok(0);
        }
        let (x, out, eps) = (
            &activations.hidden,
            &activations.activated,
            self.config.rms_norm_eps,
        );
        match gate.format() {
            WeightFormat::Dense(dtype) => self.ops.linear_kernels(dtype)?.norm_matvec_silu.encode(
                encoder,
                x,
                weight,
                &gate.weight,
                &up.weight,
                out,
                eps,
            )?,
            WeightFormat::Quantized(format) => {
                let fused = self
                    .ops
                    .quantized_fused(format)
                    .expect("fuses_as_output checked the kernels");
                let (gate, up) = (&gate.weight, &up.weight);
                // Its output staged for a quantized down projection after it,
                // where that product reads it so.
                if self.staged_down_first(rest) {
                    // x as o_proj staged it before the norm, where it did.
                    let staged = match self.take_handed_off(encoder, activations, Slot::Normed) {
                        Some(staged) => staged,
                        None => {
                            let reader = fused.gate_up_reader(gate);
                            fused.encode_norm_stage(encoder, x, weight, eps, x.len(), reader)?
                        }
                    };
                    if let Some(handed) = fused.encode_matvec_silu_staged(encoder, &staged, gate, up, out)? {
                        self.hand_off(encoder, activations, Slot::Activated, handed);
                    }
                } else {
                    fused.encode_norm_matvec_silu(encoder, x, weight, gate, up, out, eps)?
                }
            }
        }
        Ok(4)
    }

    /// RMSNorm + every mat-vec that reads its output (q, k and v; the LM
    /// head), written into one buffer holding their outputs in order; then
    /// each layer's bias and what its split asks. All of the readers or
    /// none: the fused kernel never writes the normalised vector itself.
    fn fuse_norm_readers(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let [Step::Norm { weight }, rest @ ..] = steps else {
            return Ok(0);
        };
        let readers: Vec<(&Linear, Slot)> = rest
            .iter()
            .map_while(|step| match *step {
                Step::Linear {
                    linear,
                    input: Slot::Normed,
                    output,
                } => Some((linear, output)),
                _ => None,
            })
            .collect();
        // The fused kernel never stores the norm: a later reader of it
        // (a sparse layer's experts, after the router) needs it stored.
        let read_later = rest[readers.len()..]
            .iter()
            .take_while(|step| !matches!(step, Step::Norm { .. }))
            .any(|step| step.reads(Slot::Normed));
        if !(1..=3).contains(&readers.len())
            || read_later
            || !readers.iter().all(|(linear, _)| self.fuses_as_output(linear))
        {
            return Ok(0);
        }
        // Readers of one format share a dispatch; formats that differ
        // cost a product each.
        let mut groups: Vec<(WeightFormat, Vec<&Buffer>, Buffer)> = Vec::new();
        let mut start = 0;
        while start < readers.len() {
            let format = readers[start].0.format();
            let end = start
                + readers[start..]
                    .iter()
                    .take_while(|(linear, _)| linear.format() == format)
                    .count();
            let outputs: Vec<Slot> = readers[start..end].iter().map(|(_, output)| *output).collect();
            let Some(joined) = activations.joined(&outputs) else {
                return Ok(0);
            };
            let weights = readers[start..end]
                .iter()
                .map(|(linear, _)| &linear.weight)
                .collect();
            groups.push((format, weights, joined));
            start = end;
        }
        let (x, eps) = (&activations.hidden, self.config.rms_norm_eps);
        // Quantized groups share one quantized x, staged by the first: the
        // layout is every format's (a Q4_K_M layer's v in Q6_K then costs
        // no norm-and-quantize kernel of its own).
        let mut staged = None;
        for (format, weights, joined) in &groups {
            match format {
                WeightFormat::Dense(dtype) => self
                    .ops
                    .linear_kernels(*dtype)?
                    .norm_matvec
                    .encode(encoder, x, weight, weights, joined, eps)?,
                WeightFormat::Quantized(format) => {
                    let fused = self
                        .ops
                        .quantized_fused(*format)
                        .expect("fuses_as_output checked the kernels");
                    let input = match &staged {
                        Some(input) => input,
                        // encode_matvecs_staged runs register loops (the LM head).
                        None => staged.insert(fused.encode_norm_stage(
                            encoder,
                            x,
                            weight,
                            eps,
                            x.len(),
                            Reader::Registers,
                        )?),
                    };
                    fused.encode_matvecs_staged(encoder, input, weights, joined)?
                }
            }
        }
        for (linear, output) in &readers {
            let output = activations.slot(*output)?;
            if let Some(bias) = linear.held_bias() {
                self.ops.add_bias.encode(encoder, output, bias)?;
            }
            self.complete_split(encoder, linear, output, activations)?;
        }
        Ok(1 + readers.len())
    }

    /// RoPE on the query and the key + the KV-cache append, with the
    /// per-head norms of both before it where the layer has them (Qwen3)
    /// and the model built that kernel.
    fn fuse_rope_append(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let (norms, rest) = match steps {
            [
                Step::HeadNorm {
                    target: Slot::Query,
                    weight: query_norm,
                },
                Step::HeadNorm {
                    target: Slot::Key,
                    weight: key_norm,
                },
                rest @ ..,
            ] => match &self.ops.rope_append_normed {
                Some(fused) => (Some((fused, [*query_norm, *key_norm])), rest),
                None => return Ok(0),
            },
            _ => (None, steps),
        };
        let [
            Step::Rope { target: Slot::Query },
            Step::Rope { target: Slot::Key },
            Step::AppendKeyValue { layer },
            ..,
        ] = rest
        else {
            return Ok(0);
        };
        let state = self.state;
        let (query, key, value) = (&activations.query, &activations.key, &activations.value);
        let caches = (&state.key_cache[*layer], &state.value_cache[*layer]);
        let positions = (&activations.positions.0, activations.positions.1);
        match norms {
            Some((fused, weights)) => {
                fused.encode(
                    encoder,
                    query,
                    key,
                    value,
                    caches.0,
                    caches.1,
                    weights,
                    self.config.rms_norm_eps,
                    &state.rope_frequencies,
                    positions.0,
                    positions.1,
                    self.config.heads(),
                )?;
                Ok(5)
            }
            None => {
                self.ops.rope_append.encode(
                    encoder,
                    query,
                    key,
                    value,
                    caches.0,
                    caches.1,
                    &state.rope_frequencies,
                    positions.0,
                    positions.1,
                    self.config.heads(),
                )?;
                Ok(3)
            }
        }
    }

    /// Attention whose combine step quantizes its output for a quantized
    /// o_proj, then o_proj adding into the residual stream: the kernel that
    /// quantized the attention's output before o_proj is gone (the combine
    /// step's warps hold one block of 32 values each). Only where o_proj is
    /// whole (a split o_proj's partial sums need their all-reduce), unbiased
    /// and has fused kernels, and the head dimension is whole blocks of 32.
    fn fuse_attention_output(
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
        let (weight, hidden) = (&linear.weight, &activations.hidden);
        // The residual staged for the norm after it, where gate/up reads it so.
        match self.pending_norm_reader(&steps[3..]) {
            Some(norm_weight) => {
                let eps = self.config.rms_norm_eps;
                let handed = fused.encode_matvec_add_norm_staged(
                    encoder,
                    weight,
                    &staged,
                    hidden,
                    norm_weight,
                    eps,
                )?;
                self.hand_off(encoder, activations, Slot::Normed, handed);
            }
            None => fused.encode_matvec_add_staged(encoder, weight, &staged, hidden)?,
        }
        Ok(3)
    }

    /// A mat-vec adding into the residual stream (a bias belongs before the
    /// add, so a biased projection stays apart).
    fn fuse_matvec_residual(
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
        self.encode_matvec_into_residual(encoder, linear, *input, activations)?;
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
        input_slot: Slot,
        activations: &Activations,
    ) -> Result<()> {
        let (hidden, input) = (&activations.hidden, activations.slot(input_slot)?);
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
                        let fused = self
                            .ops
                            .quantized_fused(format)
                            .expect("has_fused_kernels checked the kernels");
                        // x as gate/up staged it, where it did.
                        match self.take_handed_off(encoder, activations, input_slot) {
                            Some(staged) => {
                                fused.encode_matvec_add_staged(encoder, &linear.weight, &staged, hidden)?
                            }
                            None => fused.encode_matvec_add(encoder, &linear.weight, input, hidden)?,
                        }
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
