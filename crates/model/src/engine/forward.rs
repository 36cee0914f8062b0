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
        ops.embedding.encode(
            encoder,
            &weights.embedding,
            &state.step,
            TOKEN_SLOT,
            &state.hidden,
        )?;

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
                &state.logits,
                eps,
            )?;
        } else {
            ops.rms_norm
                .encode(encoder, &state.hidden, &weights.final_norm, &state.normed, eps)?;
            ops.matvec
                .encode(encoder, &weights.lm_head, &state.normed, &state.logits)?;
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
        ops.matvec
            .encode(encoder, &layer.o_proj, &state.attention, &state.projected)?;
        if let Some(o_bias) = &layer.o_bias {
            ops.add_bias.encode(encoder, &state.projected, o_bias)?;
        }
        ops.add_residual
            .encode(encoder, &state.hidden, &state.projected)?;

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
        ops.matvec
            .encode(encoder, &layer.down_proj, &state.activated, &state.projected)?;
        ops.add_residual
            .encode(encoder, &state.hidden, &state.projected)?;
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
        if let Some(o_bias) = &layer.o_bias {
            // The bias belongs before the residual add: keep them apart.
            ops.matvec
                .encode(encoder, &layer.o_proj, &state.attention, &state.projected)?;
            ops.add_bias.encode(encoder, &state.projected, o_bias)?;
            ops.add_residual
                .encode(encoder, &state.hidden, &state.projected)?;
        } else {
            fused
                .matvec_add
                .encode(encoder, &layer.o_proj, &state.attention, &state.hidden)?;
        }

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
        fused
            .matvec_add
            .encode(encoder, &layer.down_proj, &state.activated, &state.hidden)?;
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
            Choice::Greedy => ops.argmax.encode(encoder, &state.logits, &state.next_token)?,
            Choice::Sampled { sampling, uniform } => {
                let sample = ops.sample.as_ref().map_err(|error| {
                    ModelError::InvalidInput(format!(
                        "sampling with --temperature above 0 is unavailable here ({error}); use --temperature 0"
                    ))
                })?;
                sample.encode(encoder, &state.logits, &state.next_token, sampling, uniform)?;
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
