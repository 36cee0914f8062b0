//! One rank's part of a model: its share of the weights (all of them when
//! the model is not split), the ops bound to its device, its state and its
//! executor. Every rank of a tensor-parallel model runs the same program
//! (the same calls, the same collectives, in the same order) on its own
//! thread; the [`Model`](super::Model) drives them.

use kernelscope::ops::attention::Attention;
use kernelscope::ops::sample::Sampling;
use kernelscope::profile::Phase;
use kernelscope::{DType, Device};

use super::execution::{Decode, ExecutionMode, Executor, Readback, StepInput, StepOutput};
use super::forward::Choice;
use super::forward_parts::Forward;
use super::prefill::PrefillBuffers;
use super::state::{Ops, State};
use crate::config::Config;
use crate::config::shard::Partition;
use crate::error::{MemoryRemedy, ModelError, Result};
use crate::weights::Weights;

/// Prompt positions per forward pass unless set otherwise
/// ([`Model::set_prefill_chunk`](super::Model::set_prefill_chunk)): chosen by measurement (docs/PERF.md: on
/// an H100, llama-3-8b pp2048 ran at 14,610 / 16,886 / 17,996 tok/s with
/// chunks of 512 / 1024 / 2048; a chunk is never larger than its prompt).
pub const DEFAULT_PREFILL_CHUNK: usize = 2048;

/// One rank's part of a model.
pub(crate) struct Shard {
    /// This rank's config: its share of the heads and intermediate rows.
    pub(super) config: Config,
    pub(super) weights: Weights,
    pub(super) device: Device,
    pub(super) ops: Ops,
    pub(super) state: State,
    pub(super) executor: Executor,
    /// Prompt positions per forward pass (1: one at a time, as decode).
    pub(super) prefill_chunk: usize,
    /// A chunk's activations, kept between prompts.
    pub(super) prefill: Option<PrefillBuffers>,
}

impl Shard {
    /// Rank `partition.rank` of the model of `config` (the whole model's),
    /// with its share of the weights on `device` and, when the model is
    /// split, its communicator.
    pub(super) fn new(
        config: &Config,
        partition: Partition,
        weights: Weights,
        device: &Device,
        communicator: Option<&kernelscope::Communicator>,
    ) -> Result<Shard> {
        let config = partition.local_config(config);
        let mut ops = Ops::new(device, weights.dtype, &weights.formats(), partition, communicator)?;
        if let Some(experts) = &config.experts {
            // The experts' own dtype (16-bit experts of a file whose other
            // dense tensors are f32) and the quantized formats they hold.
            let mut expert_dtype = None;
            let mut quantized = Vec::new();
            for layer in &weights.layers {
                if let crate::weights::FeedForward::Experts(experts) = &layer.feed_forward {
                    for format in [experts.format, experts.down_format] {
                        match format {
                            kernelscope::ops::WeightFormat::Dense(dtype) => {
                                expert_dtype.get_or_insert(dtype);
                            }
                            kernelscope::ops::WeightFormat::Quantized(format)
                                if !quantized.contains(&format) =>
                            {
                                quantized.push(format)
                            }
                            kernelscope::ops::WeightFormat::Quantized(_) => {}
                        }
                    }
                }
            }
            let expert_dtype = expert_dtype.unwrap_or(weights.dtype);
            ops.experts = Some(super::expert_ops::ExpertOps::new(
                device,
                expert_dtype,
                &quantized,
                ops.gemm_input,
                experts,
                config.num_layers,
            )?);
        }
        let state = State::new(&config, &ops.partition, device)?;
        Ok(Shard {
            config,
            weights,
            device: device.clone(),
            ops,
            state,
            executor: Executor::new(device),
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            prefill: None,
        })
    }

    /// Drops the captured graphs (their collectives belong to communicators
    /// an abort replaced); the next steps capture again.
    pub(super) fn forget_graphs(&mut self) {
        self.executor.invalidate();
    }

    /// Sets how steps reach the device (eager by default; see
    /// [`ExecutionMode::fastest_on`]).
    pub(super) fn set_execution_mode(&mut self, mode: ExecutionMode) {
        self.executor.set_mode(mode);
    }

    /// Turns the fused decode kernels on (the default) or off. Off, each op
    /// is its own dispatch: the reference the fused path is tested against,
    /// and the run a `kscope compare` of the two sets beside it. Models
    /// whose hidden size is too large for the fused kernels' shared memory
    /// run unfused either way.
    pub(super) fn set_fusion(&mut self, fusion: bool) {
        if self.ops.fusion != fusion {
            self.ops.fusion = fusion;
            self.executor.invalidate();
        }
    }

    /// Whether decode runs the fused kernels.
    pub(super) fn fusion(&self) -> bool {
        self.ops.fusion && kernelscope::ops::norm_matvec::fits(self.config.hidden_size)
    }

    /// Sets how many prompt positions run as one forward pass: 1 runs the
    /// prompt position by position (as decode runs), larger values in
    /// chunks of that many (GEMMs over the chunk's rows).
    pub(super) fn set_prefill_chunk(&mut self, positions: usize) -> Result<()> {
        if positions == 0 {
            return Err(ModelError::InvalidCount {
                field: "prefill chunk positions",
                value: positions,
                minimum: 1,
            });
        }
        self.prefill_chunk = positions;
        Ok(())
    }

    /// Prompt positions per forward pass.
    pub(super) fn prefill_chunk(&self) -> usize {
        self.prefill_chunk
    }

    /// Runs `prompt` from `start` (the cache holding the positions before
    /// it) and returns the greedy token after its last position.
    pub(super) fn prefill(&mut self, prompt: &[u32], start: usize) -> Result<u32> {
        if prompt.is_empty() {
            return Err(ModelError::InvalidInput("the prompt has no tokens".into()));
        }
        for &token in prompt {
            self.check_token(token)?;
        }
        let end = start.saturating_add(prompt.len());
        if end > self.config.context_length() {
            return Err(ModelError::ContextExceeded {
                prompt: end,
                generate: 0,
                context: self.config.context_length(),
                limit: self.context_limit(),
            });
        }
        self.run_prompt(
            prompt,
            start,
            Readback::Token,
            &mut || Choice::Greedy,
            &mut |_, _| {},
        )
    }

    /// Sets the KV cache's element type (the weights' dtype by default; f32
    /// is the reference path). The cache is emptied: call before a prompt.
    pub(super) fn set_kv_dtype(&mut self, dtype: DType) -> Result<()> {
        if !kernelscope::ops::WEIGHT_DTYPES.contains(&dtype) {
            return Err(ModelError::UnsupportedKvDtype { dtype });
        }
        self.ops.set_kv_dtype(&self.device, dtype)?;
        self.state.key_cache.clear();
        self.state.value_cache.clear();
        self.state.context = 0;
        self.executor.invalidate();
        Ok(())
    }

    /// How the quantized mat-vecs take their activations.
    pub(super) fn set_quantized_activations(
        &mut self,
        activations: kernelscope::ops::quantized::linear::Activations,
    ) -> Result<()> {
        self.ops.set_quantized_activations(&self.device, activations)?;
        // Captured graphs hold the old kernels.
        self.executor.invalidate();
        Ok(())
    }

    /// The KV cache's element type.
    pub(super) fn kv_dtype(&self) -> DType {
        self.ops.kv_dtype
    }

    /// How steps reach the device.
    pub(super) fn execution_mode(&self) -> ExecutionMode {
        self.executor.mode()
    }

    /// The model math bound to its buffers, beside the executor that runs it.
    pub(super) fn forward_and_executor(&mut self) -> (Forward<'_>, &mut Executor) {
        let forward = Forward {
            config: &self.config,
            weights: &self.weights,
            ops: &self.ops,
            state: &self.state,
        };
        (forward, &mut self.executor)
    }

    /// Makes the KV cache hold at least `positions` positions (within the
    /// context length). When it grows, the positions already cached are
    /// copied over on the device (a step past the reserved context, or a
    /// decode continuing a generation, keeps its history) and the size at
    /// least doubles, so stepping one position at a time copies little.
    pub(super) fn reserve_context(&mut self, positions: usize) -> Result<()> {
        let context = self.config.context_length();
        if positions > context {
            return Err(ModelError::ContextExceeded {
                prompt: positions,
                generate: 0,
                context,
                limit: self.context_limit(),
            });
        }
        if positions <= self.state.context {
            return Ok(());
        }
        let kept_positions = self.state.context;
        let requested = positions;
        let kv_dtype = self.ops.kv_dtype;
        let kv_element = kv_dtype.size_in_bytes();
        let mut positions = positions.max(kept_positions.saturating_mul(2)).min(context);
        // Checked before allocating: the caches for `positions`, next to what
        // the device has free (the old caches are freed only after the copy).
        let cache_bytes = |positions: usize| {
            (positions as u64)
                .checked_mul(self.config.kv_dim() as u64)
                .and_then(|bytes| bytes.checked_mul(2 * kv_element as u64 * self.config.num_layers as u64))
        };
        let fits = |bytes: Option<u64>| match (bytes, self.device.memory_info()) {
            (None, _) => false,
            (Some(bytes), Some(memory)) => bytes <= memory.free,
            (Some(_), None) => true,
        };
        if !fits(cache_bytes(positions)) {
            // Growth by doubling is a convenience; what was asked may still fit.
            positions = requested;
        }
        if !fits(cache_bytes(positions)) {
            let available_mib = self.device.memory_info().map_or(0, |memory| memory.free >> 20);
            return Err(ModelError::OutOfMemory {
                what: format!(
                    "a KV cache of {positions} positions ({} layers x {} values x 2, {kv_dtype})",
                    self.config.num_layers,
                    self.config.kv_dim()
                ),
                needed_mib: cache_bytes(positions).map_or(u64::MAX, |bytes| bytes.div_ceil(1 << 20)),
                available_mib,
                device: self.device.name().to_string(),
                remedy: if kv_dtype == DType::F32 && self.weights.dtype != DType::F32 {
                    MemoryRemedy::FewerPositionsOrNarrowerCache
                } else {
                    MemoryRemedy::FewerPositions
                },
            });
        }
        let kv = self.config.kv_dim();
        let layers = self.config.num_layers;
        let cache = || {
            (0..layers)
                .map(|_| self.device.alloc(kv_dtype, &[positions, kv]))
                .collect::<kernelscope::Result<Vec<_>>>()
        };
        let (keys, values) = (cache()?, cache()?);
        if kept_positions > 0 {
            let encoder = self.executor.encoder();
            let old = self.state.key_cache.iter().chain(&self.state.value_cache);
            for (old, new) in old.zip(keys.iter().chain(&values)) {
                let kept = new.slice(0, kept_positions * kv)?;
                self.ops.copy.encode(encoder, old, &kept)?;
            }
            encoder.commit_labeled("grow kv cache")?;
        }
        let heads = self.config.heads();
        self.state.attention_scratch = self
            .device
            .alloc(DType::F32, &[Attention::scratch_len(heads, positions)])?;
        self.state.key_cache = keys;
        self.state.value_cache = values;
        self.state.context = positions;
        // Captured steps point at the old caches.
        self.executor.invalidate();
        Ok(())
    }

    /// Why the context ends where it does, for [`ModelError::ContextExceeded`].
    pub(super) fn context_limit(&self) -> String {
        match self.config.sliding_window {
            Some(window) if window < self.config.max_position_embeddings => format!(
                " (the sliding window, sliding_window = {window}: sliding-window attention is not implemented)"
            ),
            _ => String::new(),
        }
    }

    pub(super) fn check_token(&self, token: u32) -> Result<()> {
        if token as usize >= self.config.vocab_size {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab: self.config.vocab_size,
            });
        }
        Ok(())
    }

    /// [`Executor::run_step`] after growing the KV cache to hold the position.
    pub(super) fn run_step(&mut self, input: StepInput, readback: Readback) -> Result<StepOutput> {
        self.check_token(input.token)?;
        if input.position >= self.state.context {
            self.reserve_context(input.position + 1)?;
        }
        let (forward, executor) = self.forward_and_executor();
        executor.run_step(&forward, input, readback)
    }

    /// Runs one position: `token` at `position`, and returns the next token
    /// chosen from its logits (with `uniform` in `[0, 1)` as the random
    /// number when `sampling` has a temperature above 0). One submission, one
    /// host sync (reading the chosen token back), two host-device copies
    /// (token and position in, chosen token out).
    pub(super) fn step(
        &mut self,
        token: u32,
        position: usize,
        phase: Phase,
        sampling: Sampling,
        uniform: f32,
    ) -> Result<u32> {
        let input = StepInput {
            token,
            position,
            phase,
            choice: Choice::new(sampling, uniform),
        };
        Ok(self.run_step(input, Readback::Token)?.token)
    }

    /// The logits of the last step (one host-device copy).
    pub(super) fn logits(&self) -> Result<Vec<f32>> {
        Ok(self.state.vocab_logits.to_vec::<f32>()?)
    }

    /// Greedy decode of up to `count` tokens, feeding `token` at `position`
    /// first and each choice back after it; `on_token` sees every chosen
    /// token in order and stops the loop by returning `false`. In graph mode
    /// the steps are pipelined: a stop comes one step late on the device (the
    /// step already queued runs and shows in the profile; its token is
    /// dropped).
    pub(super) fn decode_greedy(
        &mut self,
        token: u32,
        position: usize,
        count: usize,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> Result<()> {
        self.check_token(token)?;
        if count == 0 {
            return Ok(());
        }
        self.reserve_context(position + count)?;
        let decode = Decode {
            token,
            position,
            count,
            readback: Readback::Token,
        };
        let (forward, executor) = self.forward_and_executor();
        executor.decode(
            &forward,
            decode,
            || Choice::Greedy,
            |output| Ok(on_token(output.token)),
        )
    }
}
