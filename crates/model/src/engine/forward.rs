//! The model math: one position's forward pass, encoded top to bottom like
//! the model it runs, and the choice of the next token from its logits.
//! Every dispatch is scoped (`embed`, `layer.N.attn`, `layer.N.mlp`,
//! `lm_head`, `sample`) for the profiler. Nothing here decides how the
//! work reaches the device (see `execution`); it only encodes it.

use kernelscope::CommandEncoder;
use kernelscope::ops::norm_matvec;
use kernelscope::ops::sample::Sampling;

use super::state::{Ops, POSITION_SLOT, State, TOKEN_SLOT};
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::weights::{LayerWeights, Weights};

/// How a step picks its next token from the logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Choice {
    /// The largest logit.
    Greedy,
    /// A draw from the tempered top-p distribution with the host's random
    /// number `uniform` in `[0, 1)`, which changes every step.
    Sampled {
        /// Temperature (above 0) and top-p.
        sampling: Sampling,
        /// The step's random number.
        uniform: f32,
    },
}

impl Choice {
    /// Greedy at a temperature of 0 or below, sampled otherwise.
    pub fn new(sampling: Sampling, uniform: f32) -> Choice {
        if sampling.temperature <= 0.0 {
            Choice::Greedy
        } else {
            Choice::Sampled { sampling, uniform }
        }
    }
}

/// The model's weights, ops and state, borrowed together for encoding.
pub(crate) struct Forward<'a> {
    pub config: &'a Config,
    pub weights: &'a Weights,
    pub ops: &'a Ops,
    pub state: &'a State,
}

impl Forward<'_> {
    /// Encodes the forward pass of the token and position in `state.step`,
    /// through the logits. `position` only sizes the attention's declared
    /// cost; the kernels read the position from the step slots, so a capture
    /// of this work serves every position the cache holds.
    ///
    /// Batched prefill belongs beside this: one pass of `MatMul` over all
    /// prompt positions per projection (reading each weight once for the
    /// whole prompt) with a causal attention over the prompt block.
    pub fn encode(&self, encoder: &mut CommandEncoder, position: usize) -> Result<()> {
        let Forward {
            config,
            weights,
            ops,
            state,
        } = *self;
        let eps = config.rms_norm_eps;
        // The fused kernels normalise the hidden state in shared memory.
        let fused = ops.fusion && norm_matvec::fits(config.hidden_size);

        encoder.set_scope("embed");
        self.encode_embedding(encoder, &state.step, TOKEN_SLOT, &state.hidden)?;

        for (index, layer) in weights.layers.iter().enumerate() {
            if fused {
                self.encode_layer_fused(encoder, index, layer, position)?;
            } else {
                self.encode_layer(encoder, index, layer, position)?;
            }
        }

        encoder.set_scope("lm_head");
        if fused {
            ops.fused.norm_matvec.encode(
                encoder,
                &state.hidden,
                &weights.final_norm,
                &[&weights.lm_head],
                &state.shard_logits,
                eps,
            )?;
        } else {
            ops.rms_norm
                .encode(encoder, &state.hidden, &weights.final_norm, &state.normed, eps)?;
            ops.matvec
                .encode(encoder, &weights.lm_head, &state.normed, &state.shard_logits)?;
        }
        self.encode_gather_logits(encoder)
    }

    /// The embedding of the `rows` tokens from `tokens[first..]` into
    /// `hidden` (`[rows, hidden]`). Split, each rank looks up the ids its
    /// share of the table holds (zeros for the rest) and the ranks' rows are
    /// summed.
    pub fn encode_embedding(
        &self,
        encoder: &mut CommandEncoder,
        tokens: &kernelscope::Buffer,
        first: usize,
        hidden: &kernelscope::Buffer,
    ) -> Result<()> {
        let (ops, partition) = (self.ops, &self.ops.partition);
        ops.embedding.encode_shard(
            encoder,
            &self.weights.embedding,
            partition.vocabulary.start,
            self.config.vocab_size,
            tokens,
            first,
            hidden,
        )?;
        if let Some(collectives) = &ops.collectives {
            collectives.all_reduce.encode(encoder, hidden)?;
        }
        Ok(())
    }

    /// Gathers the ranks' shares of the logits into `state.logits` (nothing
    /// to do when not split: the LM head wrote them there).
    pub fn encode_gather_logits(&self, encoder: &mut CommandEncoder) -> Result<()> {
        let state = self.state;
        if let (Some(collectives), Some(padded)) = (&self.ops.collectives, &state.shard_logits_padded) {
            collectives.all_gather.encode(encoder, padded, &state.logits)?;
        }
        Ok(())
    }

    /// An output projection (o_proj, down_proj) of `input` added into the
    /// residual stream, with the projection's bias where the model has one
    /// (`model_has_bias`; `bias` is this rank's, absent but on rank 0). Split,
    /// each rank's projection is a partial sum over its columns, completed
    /// by an all-reduce: fused, rank 0 adds its part into the residual
    /// stream and the others overwrite their (identical) copy of it with
    /// theirs, so one all-reduce of the residual stream adds it all up.
    fn encode_output_projection(
        &self,
        encoder: &mut CommandEncoder,
        weight: &kernelscope::Buffer,
        input: &kernelscope::Buffer,
        model_has_bias: bool,
        bias: Option<&kernelscope::Buffer>,
        fused: bool,
    ) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        // Chosen by whether the model has the bias (`model_has_bias`), not by
        // whether this rank holds it (only rank 0 does): every rank must take
        // the same path, all-reducing the same buffer.
        match (&ops.collectives, fused && !model_has_bias) {
            (None, true) => ops
                .fused
                .matvec_add
                .encode(encoder, weight, input, &state.hidden)?,
            (Some(collectives), true) => {
                if ops.partition.rank == 0 {
                    ops.fused
                        .matvec_add
                        .encode(encoder, weight, input, &state.hidden)?;
                } else {
                    ops.matvec.encode(encoder, weight, input, &state.hidden)?;
                }
                collectives.all_reduce.encode(encoder, &state.hidden)?;
            }
            (collectives, false) => {
                ops.matvec.encode(encoder, weight, input, &state.projected)?;
                if let Some(bias) = bias {
                    ops.add_bias.encode(encoder, &state.projected, bias)?;
                }
                if let Some(collectives) = collectives {
                    collectives.all_reduce.encode(encoder, &state.projected)?;
                }
                ops.add_residual
                    .encode(encoder, &state.hidden, &state.projected)?;
            }
        }
        Ok(())
    }

    /// One decoder layer with the unfused ops, one dispatch per op.
    fn encode_layer(
        &self,
        encoder: &mut CommandEncoder,
        index: usize,
        layer: &LayerWeights,
        position: usize,
    ) -> Result<()> {
        let Forward {
            config, ops, state, ..
        } = *self;
        let eps = config.rms_norm_eps;
        let heads = config.heads();
        encoder.set_scope(&format!("layer.{index}.attn"));
        ops.rms_norm
            .encode(encoder, &state.hidden, &layer.input_norm, &state.normed, eps)?;
        ops.matvec
            .encode(encoder, &layer.q_proj, &state.normed, &state.query)?;
        ops.matvec
            .encode(encoder, &layer.k_proj, &state.normed, &state.key)?;
        ops.matvec
            .encode(encoder, &layer.v_proj, &state.normed, &state.value)?;
        self.encode_qkv_bias(encoder, layer)?;
        ops.rope.encode(
            encoder,
            &state.query,
            &state.rope_frequencies,
            &state.step,
            POSITION_SLOT,
            heads.query,
        )?;
        ops.rope.encode(
            encoder,
            &state.key,
            &state.rope_frequencies,
            &state.step,
            POSITION_SLOT,
            heads.key_value,
        )?;
        let (key_cache, value_cache) = (&state.key_cache[index], &state.value_cache[index]);
        ops.kv_append.encode(
            encoder,
            &state.key,
            &state.value,
            key_cache,
            value_cache,
            &state.step,
            POSITION_SLOT,
        )?;
        self.encode_attention(encoder, index, position)?;
        self.encode_output_projection(
            encoder,
            &layer.o_proj,
            &state.attention,
            config.o_bias,
            layer.o_bias.as_ref(),
            false,
        )?;

        encoder.set_scope(&format!("layer.{index}.mlp"));
        ops.rms_norm.encode(
            encoder,
            &state.hidden,
            &layer.post_attention_norm,
            &state.normed,
            eps,
        )?;
        ops.matvec
            .encode(encoder, &layer.gate_proj, &state.normed, &state.gate)?;
        ops.matvec
            .encode(encoder, &layer.up_proj, &state.normed, &state.up)?;
        ops.silu_mul
            .encode(encoder, &state.gate, &state.up, &state.activated)?;
        self.encode_output_projection(encoder, &layer.down_proj, &state.activated, false, None, false)?;
        Ok(())
    }

    /// One decoder layer with the fused kernels: RMSNorm + q/k/v, RoPE + KV
    /// append, attention, o_proj + residual, RMSNorm + gate/up + SiLU·mul,
    /// down_proj + residual. The same math as [`encode_layer`](Self::encode_layer).
    fn encode_layer_fused(
        &self,
        encoder: &mut CommandEncoder,
        index: usize,
        layer: &LayerWeights,
        position: usize,
    ) -> Result<()> {
        let Forward {
            config, ops, state, ..
        } = *self;
        let (fused, eps) = (&ops.fused, config.rms_norm_eps);
        encoder.set_scope(&format!("layer.{index}.attn"));
        fused.norm_matvec.encode(
            encoder,
            &state.hidden,
            &layer.input_norm,
            &[&layer.q_proj, &layer.k_proj, &layer.v_proj],
            &state.projections,
            eps,
        )?;
        self.encode_qkv_bias(encoder, layer)?;
        fused.rope_append.encode(
            encoder,
            &state.query,
            &state.key,
            &state.value,
            &state.key_cache[index],
            &state.value_cache[index],
            &state.rope_frequencies,
            &state.step,
            POSITION_SLOT,
            config.heads(),
        )?;
        self.encode_attention(encoder, index, position)?;
        // A bias belongs before the residual add: with one, the projection
        // and the add stay apart.
        self.encode_output_projection(
            encoder,
            &layer.o_proj,
            &state.attention,
            config.o_bias,
            layer.o_bias.as_ref(),
            true,
        )?;

        encoder.set_scope(&format!("layer.{index}.mlp"));
        fused.norm_matvec_silu.encode(
            encoder,
            &state.hidden,
            &layer.post_attention_norm,
            &layer.gate_proj,
            &layer.up_proj,
            &state.activated,
            eps,
        )?;
        self.encode_output_projection(encoder, &layer.down_proj, &state.activated, false, None, true)?;
        Ok(())
    }

    /// The q/k/v biases, where the architecture has them.
    fn encode_qkv_bias(&self, encoder: &mut CommandEncoder, layer: &LayerWeights) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        if let Some([q_bias, k_bias, v_bias]) = &layer.qkv_bias {
            ops.add_bias.encode(encoder, &state.query, q_bias)?;
            ops.add_bias.encode(encoder, &state.key, k_bias)?;
            ops.add_bias.encode(encoder, &state.value, v_bias)?;
        }
        Ok(())
    }

    /// Attention of this position's query over layer `index`'s cache.
    fn encode_attention(&self, encoder: &mut CommandEncoder, index: usize, position: usize) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        ops.attention.encode(
            encoder,
            &state.query,
            &state.key_cache[index],
            &state.value_cache[index],
            &state.step,
            POSITION_SLOT,
            self.config.heads(),
            position + 1,
            &state.attention_scratch,
            &state.attention,
        )?;
        Ok(())
    }

    /// Encodes the choice of the next token from the logits into
    /// `state.next_token`.
    pub fn encode_choice(&self, encoder: &mut CommandEncoder, choice: Choice) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        encoder.set_scope("sample");
        match choice {
            Choice::Greedy => ops
                .argmax
                .encode(encoder, &state.vocab_logits, &state.next_token)?,
            Choice::Sampled { sampling, uniform } => {
                let sample = ops.sample.as_ref().map_err(|error| {
                    ModelError::InvalidInput(format!(
                        "sampling with --temperature above 0 is unavailable here ({error}); use --temperature 0"
                    ))
                })?;
                sample.encode(encoder, &state.vocab_logits, &state.next_token, sampling, uniform)?;
            }
        }
        Ok(())
    }

    /// Encodes the copy of the chosen token into the step's token slot, so
    /// the next step can be queued before the host has read this one's
    /// choice back.
    pub fn encode_feedback(&self, encoder: &mut CommandEncoder) -> Result<()> {
        encoder.set_scope("sample");
        let token_slot = self.state.step.slice(TOKEN_SLOT, 1)?;
        self.ops
            .copy
            .encode(encoder, &self.state.next_token, &token_slot)?;
        Ok(())
    }
}
