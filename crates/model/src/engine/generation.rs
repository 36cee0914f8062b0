//! The generation loop: a request (prompt, length, sampling, stops, what to
//! keep) in, the generated tokens with their timings (and logits) out. One
//! path for every request: prompt positions then decode steps through the
//! execution policy, whether or not the logits are kept and whatever the
//! temperature.

use std::time::{Duration, Instant};

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::rng::SplitMix64;

use super::execution::{Decode, Readback, StepInput, StepOutput};
use super::forward::Choice;
use super::forward_parts::Forward;
use super::prefill::{ChunkLogits, PrefillBuffers};
use super::shard::Shard;
use crate::error::{ModelError, Result};

/// Host time of one processed position.
#[derive(Clone, Copy, Debug)]
pub struct StepTiming {
    /// Prefill or decode.
    pub phase: Phase,
    /// Wall time of the step: for a prompt position from the host's write to
    /// its token read back, for a decode step from the previous token's
    /// arrival to its own (pipelined steps overlap).
    pub duration: Duration,
}

/// What [`Model::generate`](super::Model::generate) produced.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    /// The prompt.
    pub prompt: Vec<u32>,
    /// The generated tokens.
    pub generated: Vec<u32>,
    /// One entry per processed position.
    pub steps: Vec<StepTiming>,
    /// Logits of every processed position, when asked for.
    pub logits: Vec<Vec<f32>>,
    /// Whether generation stopped at an end-of-sequence token.
    pub stopped_at_eos: bool,
}

impl Generation {
    /// Total time and count of the steps of `phase`.
    pub fn phase_time(&self, phase: Phase) -> (usize, Duration) {
        let steps = self.steps.iter().filter(|step| step.phase == phase);
        steps.fold((0, Duration::ZERO), |(count, total), step| {
            (count + 1, total + step.duration)
        })
    }

    /// Records a processed position's output and time.
    fn record(&mut self, phase: Phase, duration: Duration, output: StepOutput) {
        self.steps.push(StepTiming { phase, duration });
        if let Some(logits) = output.logits {
            self.logits.push(logits);
        }
    }
}

/// What [`Model::generate`](super::Model::generate) is asked to do. Start from
/// [`GenerationRequest::new`] and set the fields that differ:
///
/// ```
/// # use kernelscope_model::GenerationRequest;
/// let prompt = [1, 2, 3];
/// let request = GenerationRequest {
///     keep_logits: true,
///     ..GenerationRequest::new(&prompt, 16)
/// };
/// assert!(request.stop_at_eos);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct GenerationRequest<'a> {
    /// The prompt's token ids.
    pub prompt: &'a [u32],
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// Greedy, or temperature and top-p.
    pub sampling: Sampling,
    /// Seed of the sampler.
    pub seed: u64,
    /// Stop at an end-of-sequence token (config.json's, and `stop_tokens`).
    pub stop_at_eos: bool,
    /// End-of-sequence ids besides config.json's (generation_config.json's).
    pub stop_tokens: &'a [u32],
    /// Return the logits of every processed position. The device runs the
    /// same work either way; the logits are only read back as well.
    pub keep_logits: bool,
}

impl<'a> GenerationRequest<'a> {
    /// Up to `max_tokens` greedy tokens after `prompt` (seed 0), stopping at
    /// config.json's end-of-sequence ids, without logits.
    pub fn new(prompt: &'a [u32], max_tokens: usize) -> GenerationRequest<'a> {
        GenerationRequest {
            prompt,
            max_tokens,
            sampling: Sampling::GREEDY,
            seed: 0,
            stop_at_eos: true,
            stop_tokens: &[],
            keep_logits: false,
        }
    }
}

/// Each step's choice: greedy, or a draw with the next number of the seeded
/// generator (one number per processed position, so a seed gives the same
/// tokens however the steps are run).
struct Chooser {
    sampling: Sampling,
    rng: SplitMix64,
}

impl Chooser {
    fn next(&mut self) -> Choice {
        Choice::new(self.sampling, self.rng.next_f32())
    }
}

impl Shard {
    /// Runs `prompt`'s positions from `start` (the cache holding the
    /// positions before it) and returns the token chosen after the last,
    /// drawing one choice per position from `choose` (the last one is used,
    /// so a seed picks the same token however the prompt is chunked).
    /// `record` gets each position's time and output (its logits with
    /// [`Readback::TokenAndLogits`]; the token is only meaningful for the
    /// last). With a prefill chunk of 1 each position is one step, as
    /// decode runs; otherwise chunks of positions run as one forward pass
    /// each, and a chunk's time is shared evenly by its positions.
    pub(crate) fn run_prompt(
        &mut self,
        prompt: &[u32],
        start: usize,
        readback: Readback,
        choose: &mut dyn FnMut() -> Choice,
        record: &mut dyn FnMut(Duration, StepOutput),
    ) -> Result<u32> {
        let end = start + prompt.len();
        if end > self.state.context {
            self.reserve_context(end)?;
        }
        if self.prefill_chunk == 1 {
            return self.run_prompt_by_position(prompt, start, readback, choose, record);
        }
        let all_logits = readback == Readback::TokenAndLogits;
        let buffers = self.prefill_buffers(self.prefill_chunk.min(prompt.len()), all_logits)?;
        let mut next = 0;
        let mut first = start;
        for chunk in prompt.chunks(self.prefill_chunk) {
            let rows = chunk.len();
            let last_chunk = first + rows == end;
            // One number per position, as token by token.
            let mut choice = Choice::Greedy;
            for _ in 0..rows {
                choice = choose();
            }
            let logits = match (all_logits, last_chunk) {
                (true, _) => ChunkLogits::All,
                (false, true) => ChunkLogits::Last,
                (false, false) => ChunkLogits::None,
            };
            let began = Instant::now();
            buffers.tokens.slice(0, rows)?.write_from(chunk)?;
            let positions: Vec<u32> = (first..first + rows).map(|position| position as u32).collect();
            buffers.positions.slice(0, rows)?.write_from(&positions)?;
            let forward = Forward {
                config: &self.config,
                weights: &self.weights,
                ops: &self.ops,
                state: &self.state,
            };
            let output = self.executor.run_chunk(
                &forward,
                &buffers,
                rows,
                first + rows,
                logits,
                last_chunk.then_some(choice),
            )?;
            let share = began.elapsed() / rows as u32;
            if let Some(token) = output.token {
                next = token;
            }
            let mut rows_logits = output.logits.map(|all| {
                all.chunks_exact(self.config.vocab_size)
                    .map(<[f32]>::to_vec)
                    .collect::<Vec<_>>()
                    .into_iter()
            });
            for _ in 0..rows {
                let logits = rows_logits.as_mut().and_then(Iterator::next);
                record(share, StepOutput { token: next, logits });
            }
            first += rows;
        }
        self.prefill = Some(buffers);
        Ok(next)
    }

    /// The prompt one position at a time, as decode runs (`--prefill-chunk 1`).
    fn run_prompt_by_position(
        &mut self,
        prompt: &[u32],
        start: usize,
        readback: Readback,
        choose: &mut dyn FnMut() -> Choice,
        record: &mut dyn FnMut(Duration, StepOutput),
    ) -> Result<u32> {
        let mut next = 0;
        for (offset, &token) in prompt.iter().enumerate() {
            let began = Instant::now();
            let input = StepInput {
                token,
                position: start + offset,
                phase: Phase::Prefill,
                choice: choose(),
            };
            let output = self.run_step(input, readback)?;
            next = output.token;
            record(began.elapsed(), output);
        }
        Ok(next)
    }

    /// Buffers for chunks of `capacity` rows (with room for every row's
    /// logits when `all_logits`): the kept ones where they serve, else new
    /// ones (the kept ones dropped first, so their memory is free for the
    /// new, and the captured chunks that point at them forgotten).
    fn prefill_buffers(&mut self, capacity: usize, all_logits: bool) -> Result<PrefillBuffers> {
        if let Some(buffers) = self
            .prefill
            .take()
            .filter(|buffers| buffers.serve(capacity, all_logits))
        {
            return Ok(buffers);
        }
        self.executor.invalidate();
        let gemm_input = self.ops.gemm_input;
        PrefillBuffers::new(
            &self.config,
            &self.ops.partition,
            &self.device,
            [
                gemm_input,
                self.ops
                    .experts
                    .as_ref()
                    .map_or(gemm_input, |experts| experts.grouped_input(gemm_input)),
            ],
            capacity,
            all_logits,
        )
    }

    /// Refuses a request this model cannot run (no prompt, nothing to
    /// generate, ids outside the vocabulary, more positions than the
    /// context) and returns the positions it needs.
    fn check_request(&self, request: &GenerationRequest<'_>) -> Result<usize> {
        let (prompt, max_tokens) = (request.prompt, request.max_tokens);
        for &token in request.stop_tokens {
            self.check_token(token)?;
        }
        if prompt.is_empty() {
            return Err(ModelError::InvalidInput("the prompt has no tokens".into()));
        }
        if max_tokens == 0 {
            return Err(ModelError::InvalidCount {
                field: "tokens to generate",
                value: max_tokens,
                minimum: 1,
            });
        }
        for &token in prompt {
            self.check_token(token)?;
        }
        let positions = prompt.len().saturating_add(max_tokens - 1);
        if positions > self.config.context_length() {
            return Err(ModelError::ContextExceeded {
                prompt: prompt.len(),
                generate: max_tokens,
                context: self.config.context_length(),
                limit: self.context_limit(),
            });
        }
        Ok(positions)
    }

    /// [`Model::generate`](super::Model::generate) with `on_token` called with each
    /// generated token as soon as it is known (to stream text); an error
    /// from it stops generation.
    pub(super) fn generate_streaming(
        &mut self,
        request: &GenerationRequest<'_>,
        mut on_token: impl FnMut(u32) -> Result<()>,
    ) -> Result<Generation> {
        let GenerationRequest {
            prompt,
            max_tokens,
            sampling,
            seed,
            keep_logits,
            stop_at_eos,
            ..
        } = *request;
        let mut stop_tokens = self.config.eos_token_ids.clone();
        stop_tokens.extend_from_slice(request.stop_tokens);
        let positions = self.check_request(request)?;
        self.reserve_context(positions)?;
        let readback = if keep_logits {
            Readback::TokenAndLogits
        } else {
            Readback::Token
        };
        let mut chooser = Chooser {
            sampling,
            rng: SplitMix64::new(seed),
        };
        let mut generation = Generation {
            prompt: prompt.to_vec(),
            ..Generation::default()
        };
        let stops = |token: u32| stop_at_eos && stop_tokens.contains(&token);

        let next = self.run_prompt(
            prompt,
            0,
            readback,
            &mut || chooser.next(),
            &mut |duration, output| generation.record(Phase::Prefill, duration, output),
        )?;
        self.require_finite_logits("the prompt")?;
        generation.generated.push(next);
        on_token(next)?;
        generation.stopped_at_eos = stops(next);
        if generation.stopped_at_eos {
            return Ok(generation);
        }

        let decode = Decode {
            token: next,
            position: prompt.len(),
            count: max_tokens - 1,
            readback,
        };
        let mut last = Instant::now();
        let (forward, executor) = self.forward_and_executor();
        executor.decode(
            &forward,
            decode,
            || chooser.next(),
            |output| {
                let now = Instant::now();
                let token = output.token;
                generation.record(Phase::Decode, now - last, output);
                last = now;
                generation.generated.push(token);
                on_token(token)?;
                generation.stopped_at_eos = stops(token);
                Ok(!generation.stopped_at_eos)
            },
        )?;
        if generation.generated.len() > 1 {
            self.require_finite_logits("the last generated token")?;
        }
        Ok(generation)
    }

    /// Refuses logits holding NaN or infinity (read once after the prompt
    /// and once after the last token: a model whose weights or arithmetic
    /// give them gives them at every step, and two reads of the logits
    /// cost a generation next to nothing).
    fn require_finite_logits(&self, phase: &'static str) -> Result<()> {
        let logits = self.state.vocab_logits.to_vec::<f32>()?;
        let count = logits.iter().filter(|value| !value.is_finite()).count();
        match logits.iter().position(|value| !value.is_finite()) {
            None => Ok(()),
            Some(index) => Err(ModelError::NonFiniteLogits {
                phase,
                count,
                vocab: logits.len(),
                index,
                value: logits[index],
            }),
        }
    }
}
