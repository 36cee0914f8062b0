//! The model math: one position's forward pass, encoded top to bottom like
//! the model it runs, and the choice of the next token from its logits.
//! Every dispatch is scoped (`embed`, `layer.N.attn`, `layer.N.mlp`,
//! `lm_head`, `sample`) for the profiler. Nothing here decides how the
//! work reaches the device (see `execution`); it only encodes it.

use kernelscope::CommandEncoder;
use kernelscope::ops::sample::Sampling;

use super::state::{Ops, POSITION_SLOT, State, TOKEN_SLOT};
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::weights::Weights;

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
        let heads = config.heads();

        encoder.set_scope("embed");
        ops.embedding.encode(
            encoder,
            &weights.embedding,
            &state.step,
            TOKEN_SLOT,
            &state.hidden,
        )?;

        for (index, layer) in weights.layers.iter().enumerate() {
            encoder.set_scope(&format!("layer.{index}.attn"));
            ops.rms_norm
                .encode(encoder, &state.hidden, &layer.input_norm, &state.normed, eps)?;
            ops.matvec
                .encode(encoder, &layer.q_proj, &state.normed, &state.query)?;
            ops.matvec
                .encode(encoder, &layer.k_proj, &state.normed, &state.key)?;
            ops.matvec
                .encode(encoder, &layer.v_proj, &state.normed, &state.value)?;
            if let Some([q_bias, k_bias, v_bias]) = &layer.qkv_bias {
                ops.add_bias.encode(encoder, &state.query, q_bias)?;
                ops.add_bias.encode(encoder, &state.key, k_bias)?;
                ops.add_bias.encode(encoder, &state.value, v_bias)?;
            }
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
            ops.attention.encode(
                encoder,
                &state.query,
                key_cache,
                value_cache,
                &state.step,
                POSITION_SLOT,
                heads,
                position + 1,
                &state.attention_scratch,
                &state.attention,
            )?;
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
        }

        encoder.set_scope("lm_head");
        ops.rms_norm
            .encode(encoder, &state.hidden, &weights.final_norm, &state.normed, eps)?;
        ops.matvec
            .encode(encoder, &weights.lm_head, &state.normed, &state.logits)?;
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
