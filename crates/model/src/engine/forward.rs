//! One position's forward pass, top to bottom like the model it runs (the
//! layer math itself is in `layer`, shared with prefill), and the choice of
//! the next token from its logits. Every dispatch is scoped (`embed`,
//! `layer.N.attn`, `layer.N.mlp`, `lm_head`, `sample`) for the profiler.
//! Nothing here decides how the work reaches the device (see `execution`);
//! it only encodes it.

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Role;
use kernelscope::{Buffer, CommandEncoder};

use super::forward_parts::Forward;
use super::layer::{self, Activations, PassShape, Step};
use super::state::{POSITION_SLOT, TOKEN_SLOT};
use crate::error::{ModelError, Result};

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

impl Forward<'_> {
    /// Encodes the forward pass of the token and position in `state.step`,
    /// through the logits. `position` only sizes the attention's declared
    /// cost; the kernels read the position from the step slots, so a capture
    /// of this work serves every position the cache holds.
    pub fn encode(&self, encoder: &mut CommandEncoder, position: usize) -> Result<()> {
        let state = self.state;
        encoder.set_scope("embed");
        encoder.set_roles(Role::Embedding);
        self.encode_embedding(encoder, &state.step, TOKEN_SLOT, &state.hidden)?;
        let activations = self.step_activations(position, state.hidden.clone());
        for (index, layer) in self.weights.layers.iter().enumerate() {
            self.encode_steps(encoder, &layer::decoder_layer(index, layer), &activations)?;
        }
        self.encode_steps(encoder, &self.lm_head_steps(), &activations)
    }

    /// The LM head's steps.
    pub fn lm_head_steps(&self) -> [Step<'_>; 3] {
        layer::lm_head(&self.weights.final_norm, &self.weights.lm_head)
    }

    /// The activations of one position's pass (the step's state), over the
    /// residual stream `hidden` (`state.hidden`, or a prefill chunk's last
    /// row), writing the logits where the step's choice reads them.
    pub fn step_activations(&self, position: usize, hidden: Buffer) -> Activations {
        let state = self.state;
        Activations {
            shape: PassShape::Vector { position },
            hidden,
            normed: state.normed.clone(),
            query: state.query.clone(),
            key: state.key.clone(),
            value: state.value.clone(),
            projections: Some(state.projections.clone()),
            attention: state.attention.clone(),
            projected: state.projected.clone(),
            gate: state.gate.clone(),
            up: state.up.clone(),
            activated: state.activated.clone(),
            logits: Some(state.shard_logits.clone()),
            gather: state
                .shard_logits_padded
                .clone()
                .map(|padded| (padded, state.logits.clone())),
            positions: (state.step.clone(), POSITION_SLOT),
            experts: state.experts.clone(),
            handed_off: Default::default(),
        }
    }

    /// The embedding of the `rows` tokens from `tokens[first..]` into
    /// `hidden` (`[rows, hidden]`). Split, each rank looks up the ids its
    /// share of the table holds (zeros for the rest) and the ranks' rows are
    /// summed.
    pub fn encode_embedding(
        &self,
        encoder: &mut CommandEncoder,
        tokens: &Buffer,
        first: usize,
        hidden: &Buffer,
    ) -> Result<()> {
        let (ops, partition) = (self.ops, &self.ops.partition);
        let (table, table_first, vocab) = (
            &self.weights.embedding,
            partition.vocabulary.start,
            self.config.vocab_size,
        );
        match &ops.quantized_embedding {
            Some(quantized) => {
                quantized.encode_shard(encoder, table, table_first, vocab, tokens, first, hidden)?
            }
            None => ops
                .embedding
                .encode_shard(encoder, table, table_first, vocab, tokens, first, hidden)?,
        }
        if let Some(collectives) = &ops.collectives {
            collectives.all_reduce.encode(encoder, hidden)?;
        }
        Ok(())
    }

    /// Encodes the choice of the next token from the logits into
    /// `state.next_token`.
    pub fn encode_choice(&self, encoder: &mut CommandEncoder, choice: Choice) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        encoder.set_scope("sample");
        encoder.set_roles(Role::Sampling);
        match choice {
            Choice::Greedy => ops
                .argmax
                .encode(encoder, &state.vocab_logits, &state.next_token)?,
            Choice::Sampled { sampling, uniform } => {
                let sample = ops
                    .sample
                    .as_ref()
                    .map_err(|error| ModelError::SamplingUnavailable {
                        source: error.clone(),
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
        encoder.set_roles(Role::Sampling);
        let token_slot = self.state.step.slice(TOKEN_SLOT, 1)?;
        self.ops
            .copy
            .encode(encoder, &self.state.next_token, &token_slot)?;
        Ok(())
    }
}
