//! The decode engine: [`Model`] holds the config and one [`Shard`](shard::Shard) per rank
//! (one, unless the model is split over several devices by tensor
//! parallelism). A shard holds its share of the weights, the ops bound to its
//! device and the per-sequence state (activations and KV cache). The work is
//! split by job: `layer` is the model math, written once over a pass's rows
//! as a list of steps (decode is one position, a prefill chunk many), and
//! the encoder of any such list; `fusion` recognises the step patterns a
//! fused kernel does in one dispatch, `handoff` carries an input one product
//! staged to the next (gate/up's output for down); `forward` and `prefill` run the
//! layers over one position's and one chunk's activations; `execution` is
//! how that work reaches the device (eager or graph replay, pipelined
//! decode, the profiler's token windows), `generation` the loop from a
//! request to tokens, `state` the device buffers, `shard` one rank's part,
//! `ranks` how the ranks are driven together, `construct` how a model is
//! built from a checkpoint, a GGUF file or a preset. The types several of
//! those share have files of their own, so that none imports another for
//! them: `model` the [`Model`], `forward_parts` what a pass borrows,
//! `expert_ops` the experts' kernels.
//!
//! A split model runs SPMD: every rank's thread makes the same calls, so the
//! ranks issue the same collectives in the same order and choose the same
//! tokens (from the same gathered logits). Only rank 0 runs the caller's
//! callbacks; the others follow its decision to go on or stop, sent per
//! token, so they never queue a step (and its collectives) that rank 0 does
//! not. A rank that fails aborts the group, so no rank waits forever.
//!
//! ```text
//! Model ── Shard (one per rank) ── Forward { config, weights, ops, state }
//!                                     │
//!       forward.rs (one position) ────┼──── prefill.rs (a chunk of rows)
//!                                     ▼
//!       layer.rs   decoder_layer(i) / lm_head → [Step] ──encode_steps──▶ dispatches
//!                     │ each Step::Linear holds a Linear { weight, format, bias, parallel }
//!                     ▼
//!       fusion.rs  a pattern at the head of the steps → one fused kernel
//!       state.rs   Ops: the dense LinearKernels of the weights' dtype, a
//!                  QuantizedLinear per block format the weights hold, the other ops
//! ```

mod activations;
mod construct;
mod execution;
mod expert_buffers;
mod expert_ops;
mod expert_prefill;
mod experts;
mod forward;
mod forward_parts;
mod fusion;
mod generation;
mod handoff;
mod layer;
mod model;
mod prefill;
mod query_key_value;
mod ranks;
mod shard;
mod state;

use kernelscope::ops::sample::Sampling;
use kernelscope::profile::{Conditions, Phase, Profile, Topology};
use kernelscope::{Communicator, DType, Device};

pub use construct::Ranks;
pub use execution::ExecutionMode;
pub use generation::{Generation, GenerationRequest, StepTiming};
pub use model::Model;
use ranks::take_receiver;
pub use shard::DEFAULT_PREFILL_CHUNK;
pub(crate) use state::WeightFormats;

use crate::config::Config;
use crate::config::shard::Partition;
use crate::error::{ModelError, Result};
use crate::weights::Weights;

impl Model {
    /// Sets how steps reach the device (eager by default; see
    /// [`ExecutionMode::fastest_on`]).
    pub fn set_execution_mode(&mut self, mode: ExecutionMode) {
        let _ = self.on_each(|shard| {
            shard.set_execution_mode(mode);
            Ok(())
        });
    }

    /// Turns the fused decode kernels on (the default) or off. Off, each op
    /// is its own dispatch: the reference the fused path is tested against,
    /// and the run a `kscope compare` of the two sets beside it. Models
    /// whose hidden size is too large for the fused kernels' shared memory
    /// run unfused either way.
    pub fn set_fusion(&mut self, fusion: bool) {
        let _ = self.on_each(|shard| {
            shard.set_fusion(fusion);
            Ok(())
        });
    }

    /// Whether decode runs the fused kernels.
    pub fn fusion(&self) -> bool {
        self.shards[0].fusion()
    }

    /// Sets how many prompt positions run as one forward pass: 1 runs the
    /// prompt position by position (as decode runs), larger values in
    /// chunks of that many (GEMMs over the chunk's rows).
    pub fn set_prefill_chunk(&mut self, positions: usize) -> Result<()> {
        self.on_each(|shard| shard.set_prefill_chunk(positions))
    }

    /// Prompt positions per forward pass.
    pub fn prefill_chunk(&self) -> usize {
        self.shards[0].prefill_chunk()
    }

    /// Runs `prompt` from `start` (the cache holding the positions before
    /// it) and returns the greedy token after its last position.
    pub fn prefill(&mut self, prompt: &[u32], start: usize) -> Result<u32> {
        self.on_every_rank(
            |shard| shard.prefill(prompt, start),
            |_, shard| shard.prefill(prompt, start),
        )
    }

    /// Sets the KV cache's element type (the weights' dtype by default; f32
    /// is the reference path). The cache is emptied: call before a prompt.
    pub fn set_kv_dtype(&mut self, dtype: DType) -> Result<()> {
        self.on_each(|shard| shard.set_kv_dtype(dtype))
    }

    /// How the mat-vecs over quantized weights take their activations:
    /// quantized to 8-bit blocks with integer products (the default, as
    /// llama.cpp decodes), or in f32 (the reference, within f32 rounding of
    /// the dense product of the dequantized weights).
    pub fn set_quantized_activations(
        &mut self,
        activations: kernelscope::ops::quantized::linear::Activations,
    ) -> Result<()> {
        self.on_each(|shard| shard.set_quantized_activations(activations))
    }

    /// The KV cache's element type.
    pub fn kv_dtype(&self) -> DType {
        self.shards[0].kv_dtype()
    }

    /// How steps reach the device.
    pub fn execution_mode(&self) -> ExecutionMode {
        self.shards[0].execution_mode()
    }

    /// A short description: the directory or preset.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the weights are, as a user names it: the dtype (`bf16`), or a
    /// GGUF file's type (`Q4_K_M`; `GGUF` where the file names none).
    pub fn weight_format(&self) -> String {
        self.format
            .clone()
            .unwrap_or_else(|| self.weights().dtype.to_string())
    }

    /// The whole model's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The weights (rank 0's share when split; the dtype is every rank's).
    pub fn weights(&self) -> &Weights {
        &self.shards[0].weights
    }

    /// The device it runs on (rank 0's when split).
    pub fn device(&self) -> &Device {
        &self.shards[0].device
    }

    /// Every rank's device, rank 0 first.
    pub fn devices(&self) -> Vec<Device> {
        self.shards.iter().map(|shard| shard.device.clone()).collect()
    }

    /// Ranks the model is split over (1: not split), those of other
    /// processes included.
    pub fn ranks(&self) -> usize {
        self.communicators
            .first()
            .map_or(self.shards.len(), Communicator::ranks)
    }

    /// This process's rank where the model's ranks are processes of a
    /// launcher's group ([`Ranks::Process`]); `None` where this process
    /// holds every rank.
    pub fn process_rank(&self) -> Option<usize> {
        let communicator = self.communicators.first()?;
        (communicator.ranks() > self.shards.len()).then(|| communicator.rank())
    }

    /// Every rank's share of the split, rank 0 first.
    pub fn partitions(&self) -> Vec<Partition> {
        self.shards
            .iter()
            .map(|shard| shard.ops.partition.clone())
            .collect()
    }

    /// The collective library and how the ranks are linked, when split.
    pub fn collectives(&self) -> Option<(String, String)> {
        self.communicators
            .first()
            .map(|communicator| (communicator.library(), communicator.link()))
    }

    /// Everything the devices' profilers recorded, under `conditions` (rank
    /// 0's): rank 0's profile, joined for a split model by every other
    /// rank's records on rank 0's clock and the topology. Each profiler's
    /// clock starts at its own epoch, an `Instant` of this process, so the
    /// offsets between them are exact; the GPU times on each were placed on
    /// it by that device's own calibration.
    pub fn profile(&self, conditions: Conditions) -> Profile {
        let devices = self.devices();
        let mut profile = devices[0].profile(conditions.clone());
        profile.experts = self.expert_routing();
        let Some((library, link)) = self.collectives() else {
            return profile;
        };
        let first_epoch = devices[0].profiler().epoch();
        let others = devices[1..]
            .iter()
            .map(|device| {
                let epoch = device.profiler().epoch();
                let offset_ns = match epoch.checked_duration_since(first_epoch) {
                    Some(later) => later.as_nanos() as i128,
                    None => -(first_epoch.duration_since(epoch).as_nanos() as i128),
                };
                let conditions = Conditions {
                    device: device.name().to_string(),
                    ..conditions.clone()
                };
                (device.profile(conditions), offset_ns)
            })
            .collect();
        let topology = Topology {
            ranks: devices.len(),
            devices: devices.iter().map(|device| device.name().to_string()).collect(),
            library,
            link,
        };
        profile.with_ranks(topology, others)
    }

    /// Weight bytes read per decoded token by the ranks this process holds
    /// (all of them, unless its ranks are processes: then its own), for the
    /// bandwidth roofline.
    pub fn weight_bytes_per_token(&self) -> u64 {
        // Every rank reads its share of each matrix (in the bytes its format
        // takes: a quantized matrix's blocks); the vectors and the one
        // embedding row count once, as for a model that is not split.
        let matrices: u64 = self
            .shards
            .iter()
            .map(|shard| shard.weights.matrix_bytes_per_token())
            .sum();
        let weights = &self.shards[0].weights;
        let embedding_row = weights.embedding.byte_len() / weights.embedding.shape()[0].max(1);
        matrices + weights.vector_bytes() + embedding_row as u64
    }

    /// Makes the KV cache hold at least `positions` positions (within the
    /// context length). When it grows, the positions already cached are
    /// copied over on the device (a step past the reserved context, or a
    /// decode continuing a generation, keeps its history) and the size at
    /// least doubles, so stepping one position at a time copies little.
    pub fn reserve_context(&mut self, positions: usize) -> Result<()> {
        self.on_every_rank(
            |shard| shard.reserve_context(positions),
            |_, shard| shard.reserve_context(positions),
        )
    }

    /// Runs one position: `token` at `position`, and returns the next token
    /// chosen from its logits (with `uniform` in `[0, 1)` as the random
    /// number when `sampling` has a temperature above 0). One submission, one
    /// host sync (reading the chosen token back), two host-device copies
    /// (token and position in, chosen token out) per rank.
    pub fn step(
        &mut self,
        token: u32,
        position: usize,
        phase: Phase,
        sampling: Sampling,
        uniform: f32,
    ) -> Result<u32> {
        self.on_every_rank(
            |shard| shard.step(token, position, phase, sampling, uniform),
            |_, shard| shard.step(token, position, phase, sampling, uniform),
        )
    }

    /// The experts each layer chose at the last step, read back
    /// (`[layers][k]`, largest weight first; empty for a dense layer), or
    /// `None` for a model without experts.
    pub fn routing(&self) -> Result<Option<Vec<Vec<u32>>>> {
        let shard = &self.shards[0];
        let Some(buffers) = &shard.state.experts else {
            return Ok(None);
        };
        let mut routing = buffers.read_first_row(shard.weights.layers.len())?;
        for (chosen, layer) in routing.iter_mut().zip(&shard.weights.layers) {
            if matches!(layer.feed_forward, crate::weights::FeedForward::Dense { .. }) {
                chosen.clear();
            }
        }
        Ok(Some(routing))
    }

    /// The rows each layer routed to each expert (`[layers][experts]`, zero
    /// for a dense layer) since the model was made or
    /// [`clear_expert_counts`](Self::clear_expert_counts), read back; `None`
    /// for a model without experts.
    pub fn expert_counts(&self) -> Result<Option<Vec<Vec<u64>>>> {
        self.shards[0]
            .ops
            .experts
            .as_ref()
            .map(|experts| experts.read_counts())
            .transpose()
    }

    /// The routing the profile reports: each sparse layer's tallies and
    /// what a routed row reads (`None` for a dense model, or where the
    /// tallies cannot be read back).
    fn expert_routing(&self) -> Option<kernelscope::profile::ExpertRouting> {
        let counts = self.expert_counts().ok()??;
        let weights = &self.shards[0].weights;
        let mut expert_bytes = 0;
        let mut per_token = 0;
        let mut layers = Vec::new();
        for (index, (layer, tokens)) in weights.layers.iter().zip(counts).enumerate() {
            if let crate::weights::FeedForward::Experts(experts) = &layer.feed_forward {
                let stacked: usize = [&experts.gate, &experts.up, &experts.down]
                    .iter()
                    .map(|buffer| buffer.byte_len())
                    .sum();
                expert_bytes = (stacked / experts.count.max(1)) as u64;
                per_token = experts.per_token;
                layers.push(kernelscope::profile::LayerRouting { layer: index, tokens });
            }
        }
        Some(kernelscope::profile::ExpertRouting {
            experts: self.config().experts.as_ref()?.count,
            per_token,
            expert_bytes,
            layers,
        })
    }

    /// Zeroes the expert tallies (a run's profile counts from here).
    pub fn clear_expert_counts(&self) -> Result<()> {
        for shard in &self.shards {
            if let Some(experts) = &shard.ops.experts {
                experts.clear_counts()?;
            }
        }
        Ok(())
    }

    /// The logits of the last step (one host-device copy).
    pub fn logits(&self) -> Result<Vec<f32>> {
        self.shards[0].logits()
    }

    /// Greedy decode of up to `count` tokens, feeding `token` at `position`
    /// first and each choice back after it; `on_token` sees every chosen
    /// token in order and stops the loop by returning `false`. In graph mode
    /// the steps are pipelined: a stop comes one step late on the device (the
    /// step already queued runs and shows in the profile; its token is
    /// dropped).
    pub fn decode_greedy(
        &mut self,
        token: u32,
        position: usize,
        count: usize,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> Result<()> {
        let (senders, receivers) = self.decision_channels();
        let communicators = self.communicators.clone();
        let mut aborted = None;
        self.on_every_rank(
            // `move`: the senders go with the closure, so they are dropped
            // (waking the followers) however rank 0 ends.
            move |shard| {
                shard.decode_greedy(token, position, count, |chosen| {
                    // A token read after an abort may be garbage: stop.
                    let go_on = match Self::check_group(&communicators) {
                        Ok(()) => on_token(chosen),
                        Err(error) => {
                            aborted = Some(error);
                            false
                        }
                    };
                    senders.iter().for_each(|sender| {
                        let _ = sender.send(go_on);
                    });
                    go_on
                })?;
                aborted.map_or(Ok(()), Err)
            },
            |rank, shard| {
                let receiver = take_receiver(&receivers, rank);
                shard.decode_greedy(token, position, count, |_| receiver.recv().unwrap_or(false))
            },
        )
    }

    /// Runs the request's prompt, then generates up to `max_tokens` tokens.
    /// Stops early at an end-of-sequence token when `stop_at_eos`. With
    /// `keep_logits`, the logits of every processed position are returned
    /// (prompt positions, then each generated token but the last, which is
    /// never fed back).
    pub fn generate(&mut self, request: &GenerationRequest<'_>) -> Result<Generation> {
        self.generate_streaming(request, |_| Ok(()))
    }

    /// [`generate`](Self::generate) with `on_token` called with each
    /// generated token as soon as it is known (to stream text); an error
    /// from it stops generation.
    pub fn generate_streaming(
        &mut self,
        request: &GenerationRequest<'_>,
        mut on_token: impl FnMut(u32) -> Result<()>,
    ) -> Result<Generation> {
        let (senders, receivers) = self.decision_channels();
        let communicators = self.communicators.clone();
        self.on_every_rank(
            // `move`: the senders go with the closure, so they are dropped
            // (waking the followers) however rank 0 ends.
            move |shard| {
                shard.generate_streaming(request, |token| {
                    // A token read after an abort may be garbage: stop.
                    let outcome = Self::check_group(&communicators).and_then(|()| on_token(token));
                    senders.iter().for_each(|sender| {
                        let _ = sender.send(outcome.is_ok());
                    });
                    outcome
                })
            },
            |rank, shard| {
                let receiver = take_receiver(&receivers, rank);
                shard.generate_streaming(request, |_| match receiver.recv() {
                    Ok(true) => Ok(()),
                    _ => Err(ModelError::LeaderStopped),
                })
            },
        )
    }
}
