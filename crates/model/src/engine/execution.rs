//! The execution policy: how a step's work reaches the device, and the one
//! place that captures, replays and drops graphs and opens and closes the
//! profiler's token windows.
//!
//! Two modes, chosen from the device's capability (`graph_launch`) and the
//! user's `--eager`:
//! - eager: every dispatch is encoded each step, and each step is waited for
//!   before the next (one submission, one host sync per token);
//! - graph: one captured forward pass is replayed per step (CUDA: one graph
//!   launch). Prompt positions are replayed one by one with the host writing
//!   each token; decode is pipelined, step N+1 queued before step N's token
//!   is read back (the replay feeds its choice into the next step's token
//!   slot on the device).
//!
//! What a step reads back (its token, and its logits when kept) and how its
//! next token is chosen (greedy or sampled) never change the path: the same
//! dispatches and graph launches run for each token either way, so a
//! profile taken with `--logits-out` is the profile of the run without it.

use std::collections::HashMap;

use kernelscope::profile::Phase;
use kernelscope::{CommandEncoder, Device, Graph, PendingRead};

use super::forward::Choice;
use super::forward_parts::Forward;
use super::prefill::{ChunkLogits, PrefillBuffers, arrange_logits};
use super::state::POSITION_SLOT;
use crate::error::Result;

/// How each step's work reaches the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExecutionMode {
    /// Encode every dispatch each step, and wait for each step.
    #[default]
    Eager,
    /// Replay one captured forward pass per step (CUDA: one graph launch per
    /// token), with decode pipelined one step ahead.
    Graph,
}

impl ExecutionMode {
    /// Graph replay where the device runs a replay as one launch (removing
    /// the host's per-dispatch cost), eager where replaying gains nothing.
    pub fn fastest_on(device: &Device) -> ExecutionMode {
        if device.capabilities().graph_launch {
            ExecutionMode::Graph
        } else {
            ExecutionMode::Eager
        }
    }

    /// Whether `device`'s profiler, at its level, cannot time the dispatches
    /// of this mode one by one: dispatch-level profiling of graph replays
    /// where dispatches inside graphs are not timed (CUDA without CUPTI).
    pub fn hides_dispatch_times(self, device: &Device) -> bool {
        self == ExecutionMode::Graph
            && device.profiler().level() == kernelscope::profile::ProfileLevel::Dispatch
            && !device.capabilities().dispatch_timing_in_graphs
    }

    /// `eager` or `graph`, as profiles and reports name the mode.
    pub fn name(self) -> &'static str {
        match self {
            ExecutionMode::Eager => "eager",
            ExecutionMode::Graph => "graph",
        }
    }
}

/// What a step reads back to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readback {
    /// The chosen token.
    Token,
    /// The chosen token and the logits it was chosen from.
    TokenAndLogits,
}

/// One position to run with the host supplying its token.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepInput {
    pub token: u32,
    pub position: usize,
    pub phase: Phase,
    pub choice: Choice,
}

/// A run of decode steps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decode {
    /// The token fed at `position`.
    pub token: u32,
    /// Where decoding starts.
    pub position: usize,
    /// The most steps to run.
    pub count: usize,
    /// What each step reads back.
    pub readback: Readback,
}

/// What a step gave back.
#[derive(Clone, Debug)]
pub(crate) struct StepOutput {
    /// The token chosen from the step's logits.
    pub token: u32,
    /// The logits, with [`Readback::TokenAndLogits`].
    pub logits: Option<Vec<f32>>,
}

/// What a prefill chunk gave back.
#[derive(Clone, Debug)]
pub(crate) struct ChunkOutput {
    /// The token chosen after the chunk's last row, when asked for.
    pub token: Option<u32>,
    /// Every row's logits, row after row, with [`ChunkLogits::All`].
    pub logits: Option<Vec<f32>>,
}

/// A step's reads in flight.
struct InFlight {
    token: PendingRead<u32>,
    logits: Option<PendingRead<f32>>,
}

impl InFlight {
    fn wait(self) -> Result<StepOutput> {
        let token = self.token.wait()?[0];
        let logits = self.logits.map(PendingRead::wait).transpose()?;
        Ok(StepOutput { token, logits })
    }
}

/// Runs steps on one device under one [`ExecutionMode`], owning the command
/// encoder and the captured graphs.
pub(crate) struct Executor {
    device: Device,
    mode: ExecutionMode,
    encoder: CommandEncoder,
    /// Forward pass, greedy choice and feedback of the choice into the
    /// token slot: the whole greedy step as one replay.
    greedy_step: Option<Graph>,
    /// Forward pass through the logits only: a sampled step replays it and
    /// encodes its draw after, since the random number changes every step.
    forward_pass: Option<Graph>,
    /// Prefill chunks by (rows, logits, greedy choice included): a chunk
    /// reads its tokens and positions from device memory, so one capture
    /// serves every chunk of that shape.
    prefill_chunks: HashMap<(usize, ChunkLogits, bool), Graph>,
}

impl Executor {
    pub fn new(device: &Device) -> Executor {
        Executor {
            device: device.clone(),
            mode: ExecutionMode::default(),
            encoder: device.command_encoder(),
            greedy_step: None,
            forward_pass: None,
            prefill_chunks: HashMap::new(),
        }
    }

    pub fn mode(&self) -> ExecutionMode {
        self.mode
    }

    pub fn set_mode(&mut self, mode: ExecutionMode) {
        self.mode = mode;
        self.invalidate();
    }

    /// Drops the captured graphs: they point at buffers (the KV cache) that
    /// are about to be replaced.
    pub fn invalidate(&mut self) {
        self.greedy_step = None;
        self.forward_pass = None;
        self.prefill_chunks.clear();
    }

    /// The encoder, for work outside the steps (growing the KV cache).
    pub fn encoder(&mut self) -> &mut CommandEncoder {
        &mut self.encoder
    }

    /// Records the work of `encode` into a graph instead of running it.
    fn capture(
        encoder: &mut CommandEncoder,
        encode: impl FnOnce(&mut CommandEncoder) -> Result<()>,
    ) -> Result<Graph> {
        encoder.begin_capture()?;
        let encoded = encode(encoder);
        // The capture is ended even when encoding failed, so the encoder is
        // usable again.
        let graph = encoder.end_capture()?;
        encoded?;
        Ok(graph)
    }

    /// Adds one step's work to the open submission: the token and position
    /// are already in the step slots. In graph mode the step's choice is also
    /// copied into the token slot, so the next step may be queued at once.
    fn encode_step(&mut self, forward: &Forward<'_>, position: usize, choice: Choice) -> Result<()> {
        let encoder = &mut self.encoder;
        match (self.mode, choice) {
            (ExecutionMode::Eager, choice) => {
                forward.encode(encoder, position)?;
                forward.encode_choice(encoder, choice)
            }
            (ExecutionMode::Graph, Choice::Greedy) => {
                if self.greedy_step.is_none() {
                    self.greedy_step = Some(Self::capture(encoder, |encoder| {
                        forward.encode(encoder, position)?;
                        forward.encode_choice(encoder, Choice::Greedy)?;
                        forward.encode_feedback(encoder)
                    })?);
                }
                let graph = self.greedy_step.as_ref().expect("captured above");
                // Attention's cost is recorded at this step's context, not
                // the capture's.
                Ok(encoder.replay_at(graph, position + 1)?)
            }
            (ExecutionMode::Graph, sampled @ Choice::Sampled { .. }) => {
                if self.forward_pass.is_none() {
                    self.forward_pass = Some(Self::capture(encoder, |encoder| {
                        forward.encode(encoder, position)
                    })?);
                }
                let graph = self.forward_pass.as_ref().expect("captured above");
                encoder.replay_at(graph, position + 1)?;
                forward.encode_choice(encoder, sampled)?;
                forward.encode_feedback(encoder)
            }
        }
    }

    /// Commits the open step under its phase's label and starts reading back
    /// what `readback` asks for.
    fn commit_step(&mut self, forward: &Forward<'_>, phase: Phase, readback: Readback) -> Result<InFlight> {
        let label = match phase {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        };
        self.encoder.commit_labeled(label)?;
        let state = forward.state;
        Ok(InFlight {
            token: state.next_token.read_later::<u32>()?,
            logits: match readback {
                Readback::Token => None,
                Readback::TokenAndLogits => Some(state.vocab_logits.read_later::<f32>()?),
            },
        })
    }

    /// Runs one position with the host's token and waits for it: one
    /// submission, one host sync per read back, one token window.
    pub fn run_step(
        &mut self,
        forward: &Forward<'_>,
        input: StepInput,
        readback: Readback,
    ) -> Result<StepOutput> {
        let device = self.device.clone();
        let profiler = device.profiler();
        profiler.begin_token(input.phase);
        forward
            .state
            .step
            .write_from(&[input.token, input.position as u32])?;
        self.encode_step(forward, input.position, input.choice)?;
        let output = self.commit_step(forward, input.phase, readback)?.wait()?;
        profiler.end_token();
        Ok(output)
    }

    /// Runs one prefill chunk whose tokens and positions are already in
    /// `chunk`: one submission labeled `prefill`, one profiler window for
    /// its `rows` positions, waited for. With `choice`, the next token is
    /// chosen from the last row's logits and read back; with
    /// [`ChunkLogits::All`] every row's logits are read back too. In graph
    /// mode the chunk is one replay of a capture made per chunk shape (with
    /// a greedy choice inside it; a sampled one is encoded after, since its
    /// random number changes), so the host's per-dispatch cost is paid once
    /// and, profiled, the replay is held until enqueued like a decode step.
    pub fn run_chunk(
        &mut self,
        forward: &Forward<'_>,
        chunk: &PrefillBuffers,
        rows: usize,
        context_end: usize,
        logits: ChunkLogits,
        choice: Option<Choice>,
    ) -> Result<ChunkOutput> {
        let device = self.device.clone();
        let profiler = device.profiler();
        profiler.begin_token(Phase::Prefill);
        let encoder = &mut self.encoder;
        // A sparse model's chunk reads its routing back between layers to
        // group rows by expert (grouped GEMMs): no graph can hold that.
        let mode = if forward.ops.experts.is_some() {
            ExecutionMode::Eager
        } else {
            self.mode
        };
        match mode {
            ExecutionMode::Eager => {
                forward.encode_prefill(encoder, chunk, rows, context_end, logits)?;
                if let Some(choice) = choice {
                    forward.encode_choice(encoder, choice)?;
                }
            }
            ExecutionMode::Graph => {
                let greedy = choice == Some(Choice::Greedy);
                let key = (rows, logits, greedy);
                let graph = match self.prefill_chunks.entry(key) {
                    std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                    std::collections::hash_map::Entry::Vacant(entry) => {
                        entry.insert(Self::capture(encoder, |encoder| {
                            forward.encode_prefill(encoder, chunk, rows, context_end, logits)?;
                            if greedy {
                                forward.encode_choice(encoder, Choice::Greedy)?;
                            }
                            Ok(())
                        })?)
                    }
                };
                encoder.replay_at(graph, context_end)?;
                if let Some(sampled @ Choice::Sampled { .. }) = choice {
                    forward.encode_choice(encoder, sampled)?;
                }
            }
        }
        encoder.commit_labeled("prefill")?;
        let token = match choice {
            Some(_) => Some(forward.state.next_token.read_later::<u32>()?),
            None => None,
        };
        let partition = &forward.ops.partition;
        let all_logits = match (logits, chunk.all_logits(rows, partition)) {
            (ChunkLogits::All, Some(all)) => Some(all?.read_later::<f32>()?),
            _ => None,
        };
        let output = ChunkOutput {
            token: token
                .map(|token| token.wait().map(|values| values[0]))
                .transpose()?,
            logits: all_logits
                .map(PendingRead::wait)
                .transpose()?
                .map(|values| arrange_logits(values, rows, partition, forward.config.vocab_size)),
        };
        profiler.end_token();
        Ok(output)
    }

    /// Decodes up to `decode.count` tokens, feeding `decode.token` at
    /// `decode.position` first and each choice back after it, with `choose`
    /// giving each step's choice in order; `on_step` sees every step's output
    /// in order and stops the loop by returning `false`. The KV cache must
    /// hold `position + count` positions.
    ///
    /// In graph mode, step N+1 is queued before step N's token is read back:
    /// the host's launch (and, with CUPTI on, its instrumentation) overlaps
    /// the device's work instead of leaving the device idle. Each token is
    /// still one submission and one graph launch, but the wait for token N
    /// falls in token N+1's profiler window (the first decode token shows no
    /// sync, the last two). A stop asked for by `on_step` comes one step late
    /// on the device: the step already queued runs (and shows in the
    /// profile), its output is dropped. Eager mode runs step by step.
    pub fn decode(
        &mut self,
        forward: &Forward<'_>,
        decode: Decode,
        mut choose: impl FnMut() -> Choice,
        mut on_step: impl FnMut(StepOutput) -> Result<bool>,
    ) -> Result<()> {
        let Decode {
            token,
            position,
            count,
            readback,
        } = decode;
        if count == 0 {
            return Ok(());
        }
        if self.mode == ExecutionMode::Eager {
            let mut input = StepInput {
                token,
                position,
                phase: Phase::Decode,
                choice: Choice::Greedy,
            };
            for _ in 0..count {
                input.choice = choose();
                let output = self.run_step(forward, input, readback)?;
                input.token = output.token;
                input.position += 1;
                if !on_step(output)? {
                    break;
                }
            }
            return Ok(());
        }
        let device = self.device.clone();
        let profiler = device.profiler();
        // The first queued step: the host knows its token.
        profiler.begin_token(Phase::Decode);
        forward.state.step.write_from(&[token, position as u32])?;
        self.encode_step(forward, position, choose())?;
        let mut in_flight = Some(self.commit_step(forward, Phase::Decode, readback)?);
        let mut queued = 1;
        let mut failure = None;
        while let Some(step) = in_flight.take() {
            if queued < count {
                // Later ones: the previous step wrote the token slot.
                profiler.begin_token(Phase::Decode);
                let next_position = position + queued;
                let position_slot = forward.state.step.slice(POSITION_SLOT, 1)?;
                position_slot.write_from(&[next_position as u32])?;
                self.encode_step(forward, next_position, choose())?;
                in_flight = Some(self.commit_step(forward, Phase::Decode, readback)?);
                queued += 1;
            }
            match on_step(step.wait()?) {
                Ok(true) => {}
                Ok(false) => break,
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        // A step queued past a stop still runs; wait for it so the next
        // caller finds the device idle and its times resolved.
        if let Some(step) = in_flight {
            step.wait()?;
        }
        profiler.end_token();
        failure.map_or(Ok(()), Err)
    }
}
