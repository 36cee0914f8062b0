//! The decode engine: `Model` holds the config, the weights, the ops bound
//! to the device and the per-sequence state (activations and KV cache), and
//! runs one token per submission. `forward` reads top to bottom like the
//! model it runs; every dispatch is scoped (`embed`, `layer.N.attn`,
//! `layer.N.mlp`, `lm_head`, `sample`) for the profiler.

use std::path::Path;
use std::time::{Duration, Instant};

use kernelscope::ops::attention::{Attention, Heads};
use kernelscope::ops::rope::{Rope, RopeFrequencies, inverse_frequencies};
use kernelscope::ops::sample::{Sample, Sampling};
use kernelscope::ops::{
    add::Add, argmax::Argmax, copy::Copy as CopyOp, embedding::Embedding, kv_append::KvAppend,
    matvec::MatVec, rms_norm::RmsNorm, silu_mul::SiluMul,
};
use kernelscope::profile::Phase;
use kernelscope::rng::SplitMix64;
use kernelscope::{Buffer, CommandEncoder, DType, Device, Graph, PendingRead};

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::loader::LoadOptions;
use crate::presets::preset;
use crate::weights::Weights;

/// The ops the model uses, bound to its device and weight dtype. Built once,
/// so a kernel missing for this device and dtype is an error before any token.
struct Ops {
    embedding: Embedding,
    rms_norm: RmsNorm,
    matvec: MatVec,
    add_residual: Add,
    add_bias: Add,
    rope: Rope,
    kv_append: KvAppend,
    attention: Attention,
    silu_mul: SiluMul,
    argmax: Argmax,
    /// Feeds a replayed step's choice back as the next step's token.
    copy: CopyOp,
    /// `Err` where the backend has no sampling kernel: the error is reported
    /// only when a temperature above 0 asks for it.
    sample: std::result::Result<Sample, kernelscope::Error>,
}

impl Ops {
    fn new(device: &Device, dtype: DType) -> Result<Ops> {
        let registry = kernelscope::ops::registry();
        Ok(Ops {
            embedding: Embedding::new(&registry, device, dtype)?,
            rms_norm: RmsNorm::new(&registry, device, dtype)?,
            matvec: MatVec::new(&registry, device, dtype)?,
            add_residual: Add::new(&registry, device, DType::F32)?,
            add_bias: Add::new(&registry, device, dtype)?,
            rope: Rope::new(&registry, device)?,
            kv_append: KvAppend::new(&registry, device)?,
            attention: Attention::new(&registry, device)?,
            silu_mul: SiluMul::new(&registry, device)?,
            argmax: Argmax::new(&registry, device)?,
            copy: CopyOp::new(&registry, device)?,
            sample: Sample::new(&registry, device),
        })
    }
}

/// Slot of the position in [`State::step`] (slot 0 holds the token id).
const POSITION_SLOT: usize = 1;

/// One sequence's device state. `hidden = hidden_size`, `q = heads * head_dim`,
/// `kv = kv_heads * head_dim`, `inter = intermediate_size`.
struct State {
    /// `[2]` u32: the token being processed and its position, written by the
    /// host each step and read by the kernels, so captured work can be replayed.
    step: Buffer,
    /// `[1]` u32: the token chosen from this step's logits.
    next_token: Buffer,
    /// `[hidden]` the residual stream.
    hidden: Buffer,
    /// `[hidden]` RMSNorm output.
    normed: Buffer,
    /// `[q]`, `[kv]`, `[kv]` this position's projections.
    query: Buffer,
    key: Buffer,
    value: Buffer,
    /// `[q]` attention output.
    attention: Buffer,
    /// `[hidden]` output of o_proj and of down_proj.
    projected: Buffer,
    /// `[inter]` gate, up and their SiLU product.
    gate: Buffer,
    up: Buffer,
    activated: Buffer,
    /// `[vocab]`.
    logits: Buffer,
    /// RoPE's inverse frequencies and attention scaling.
    rope_frequencies: RopeFrequencies,
    /// Per layer `[context, kv]`.
    key_cache: Vec<Buffer>,
    value_cache: Vec<Buffer>,
    /// Positions the caches hold.
    context: usize,
}

impl State {
    fn new(config: &Config, device: &Device) -> Result<State> {
        let f32_buffer = |len: usize| device.alloc(DType::F32, &[len]);
        let frequencies = inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling);
        Ok(State {
            step: device.alloc(DType::U32, &[2])?,
            next_token: device.alloc(DType::U32, &[1])?,
            hidden: f32_buffer(config.hidden_size)?,
            normed: f32_buffer(config.hidden_size)?,
            query: f32_buffer(config.q_dim())?,
            key: f32_buffer(config.kv_dim())?,
            value: f32_buffer(config.kv_dim())?,
            attention: f32_buffer(config.q_dim())?,
            projected: f32_buffer(config.hidden_size)?,
            gate: f32_buffer(config.intermediate_size)?,
            up: f32_buffer(config.intermediate_size)?,
            activated: f32_buffer(config.intermediate_size)?,
            logits: f32_buffer(config.vocab_size)?,
            rope_frequencies: RopeFrequencies {
                inverse_frequencies: device.buffer_from_slice(&frequencies, &[frequencies.len()])?,
                attention_scaling: config.rope_attention_scaling,
            },
            key_cache: Vec::new(),
            value_cache: Vec::new(),
            context: 0,
        })
    }
}

/// Host time of one processed position.
#[derive(Clone, Copy, Debug)]
pub struct StepTiming {
    /// Prefill or decode.
    pub phase: Phase,
    /// Wall time of the step, host write to token read back.
    pub duration: Duration,
}

/// What [`Model::generate`] produced.
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
}

/// What [`Model::generate_streaming`] is asked to do.
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
    /// Return the logits of every processed position.
    pub keep_logits: bool,
}

/// A Llama-family model ready to run on a device.
pub struct Model {
    name: String,
    config: Config,
    weights: Weights,
    device: Device,
    ops: Ops,
    state: State,
    encoder: CommandEncoder,
    /// Replay one captured forward pass per greedy step (CUDA: one graph
    /// launch per token) instead of encoding every dispatch each time.
    graph_mode: bool,
    /// The captured greedy step, valid while the KV cache is not reallocated.
    step_graph: Option<Graph>,
}

impl Model {
    fn assemble(name: String, config: Config, weights: Weights, device: &Device) -> Result<Model> {
        let ops = Ops::new(device, weights.dtype)?;
        let state = State::new(&config, device)?;
        Ok(Model {
            graph_mode: false,
            step_graph: None,
            name,
            config,
            weights,
            device: device.clone(),
            ops,
            state,
            encoder: device.command_encoder(),
        })
    }

    /// Loads a Hugging Face model directory onto `device`.
    pub fn load(directory: &Path, device: &Device, options: LoadOptions) -> Result<Model> {
        let config = Config::from_directory(directory)?;
        let weights = Weights::load(directory, &config, device, options)?;
        Self::assemble(directory.display().to_string(), config, weights, device)
    }

    /// Builds preset `name` with seeded synthetic weights of `dtype` in memory.
    pub fn from_preset(name: &str, device: &Device, dtype: DType, seed: u64, quiet: bool) -> Result<Model> {
        let config = preset(name)?;
        let weights = Weights::synthetic(&config, device, dtype, seed, quiet)?;
        Self::assemble(
            format!("{name} (synthetic, seed {seed}, {dtype})"),
            config,
            weights,
            device,
        )
    }

    /// Runs greedy steps as replays of one captured forward pass (`true`) or
    /// encodes every dispatch each step (`false`, the default). Sampling with
    /// a temperature always runs eagerly (its random number changes per step).
    pub fn set_graph_mode(&mut self, enabled: bool) {
        self.graph_mode = enabled;
        self.step_graph = None;
    }

    /// Whether greedy steps replay a captured graph.
    pub fn graph_mode(&self) -> bool {
        self.graph_mode
    }

    /// A short description: the directory or preset.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Weight bytes read per decoded token, for the bandwidth roofline.
    pub fn weight_bytes_per_token(&self) -> u64 {
        (self.config.weight_elements_per_token() * self.weights.dtype.size_in_bytes()) as u64
    }

    /// Makes the KV cache hold at least `positions` positions (within the
    /// context length). When it grows, the positions already cached are
    /// copied over on the device (a step past the reserved context, or a
    /// decode continuing a generation, keeps its history) and the size at
    /// least doubles, so stepping one position at a time copies little.
    pub fn reserve_context(&mut self, positions: usize) -> Result<()> {
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
        let mut positions = positions.max(kept_positions.saturating_mul(2)).min(context);
        // Checked before allocating: the caches for `positions`, next to what
        // the device has free (the old caches are freed only after the copy).
        let cache_bytes = |positions: usize| {
            (positions as u64)
                .checked_mul(self.config.kv_dim() as u64)
                .and_then(|bytes| bytes.checked_mul(2 * 4 * self.config.num_layers as u64))
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
                    "a KV cache of {positions} positions ({} layers x {} values x 2, f32)",
                    self.config.num_layers,
                    self.config.kv_dim()
                ),
                needed_mib: cache_bytes(positions).map_or(u64::MAX, |bytes| bytes.div_ceil(1 << 20)),
                available_mib,
                device: self.device.name().to_string(),
                hint: "; ask for fewer tokens (--max-tokens, -p, -n)".to_string(),
            });
        }
        let kv = self.config.kv_dim();
        let layers = self.config.num_layers;
        let cache = || {
            (0..layers)
                .map(|_| self.device.alloc(DType::F32, &[positions, kv]))
                .collect::<kernelscope::Result<Vec<_>>>()
        };
        let (keys, values) = (cache()?, cache()?);
        if kept_positions > 0 {
            let old = self.state.key_cache.iter().chain(&self.state.value_cache);
            for (old, new) in old.zip(keys.iter().chain(&values)) {
                let kept = new.slice(0, kept_positions * kv)?;
                self.ops.copy.encode(&mut self.encoder, old, &kept)?;
            }
            self.encoder.commit_labeled("grow kv cache")?;
        }
        self.state.key_cache = keys;
        self.state.value_cache = values;
        self.state.context = positions;
        // A captured step points at the old caches.
        self.step_graph = None;
        Ok(())
    }

    /// Why the context ends where it does, for [`ModelError::ContextExceeded`].
    fn context_limit(&self) -> String {
        match self.config.sliding_window {
            Some(window) if window < self.config.max_position_embeddings => format!(
                " (the sliding window, sliding_window = {window}: sliding-window attention is not implemented)"
            ),
            _ => String::new(),
        }
    }

    fn check_token(&self, token: u32) -> Result<()> {
        if token as usize >= self.config.vocab_size {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab: self.config.vocab_size,
            });
        }
        Ok(())
    }

    /// Encodes the forward pass of the token and position in `state.step`,
    /// ending with the choice of the next token.
    fn encode_forward(&mut self, position: usize, sampling: Sampling, uniform: f32) -> Result<()> {
        let (config, weights, ops, state) = (&self.config, &self.weights, &self.ops, &self.state);
        let encoder = &mut self.encoder;
        let eps = config.rms_norm_eps;
        let heads = Heads {
            query: config.num_heads,
            key_value: config.num_kv_heads,
            dim: config.head_dim,
        };

        encoder.set_scope("embed");
        ops.embedding
            .encode(encoder, &weights.embedding, &state.step, &state.hidden)?;

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

        encoder.set_scope("sample");
        if sampling.temperature <= 0.0 {
            ops.argmax.encode(encoder, &state.logits, &state.next_token)?;
        } else {
            let sample = ops.sample.as_ref().map_err(|error| {
                ModelError::InvalidInput(format!(
                    "sampling with --temperature above 0 is unavailable here ({error}); use --temperature 0"
                ))
            })?;
            sample.encode(encoder, &state.logits, &state.next_token, sampling, uniform)?;
        }
        Ok(())
    }

    /// Runs one position: `token` at `position`, and returns the next token
    /// chosen from its logits. One submission, one host sync (reading the
    /// chosen token back), two host-device copies (token and position in,
    /// chosen token out).
    pub fn step(
        &mut self,
        token: u32,
        position: usize,
        phase: Phase,
        sampling: Sampling,
        uniform: f32,
    ) -> Result<u32> {
        self.check_token(token)?;
        if position >= self.state.context {
            self.reserve_context(position + 1)?;
        }
        let profiler = self.device.profiler();
        profiler.begin_token(phase);
        self.state.step.write_from(&[token, position as u32])?;
        if self.graph_mode && sampling.temperature <= 0.0 {
            if self.step_graph.is_none() {
                // Kernels read token and position from `state.step`, so one
                // capture serves every position the cache holds.
                self.encoder.begin_capture()?;
                let encoded = self.encode_forward(position, sampling, uniform).and_then(|()| {
                    // The choice becomes the next step's token on the device, so
                    // `decode_greedy` can queue step N+1 before reading N back.
                    self.encoder.set_scope("sample");
                    let token_slot = self.state.step.slice(0, 1)?;
                    self.ops
                        .copy
                        .encode(&mut self.encoder, &self.state.next_token, &token_slot)?;
                    Ok(())
                });
                let graph = self.encoder.end_capture()?;
                encoded?;
                self.step_graph = Some(graph);
            }
            let graph = self.step_graph.as_ref().expect("captured above");
            self.encoder.replay(graph)?;
        } else {
            self.encode_forward(position, sampling, uniform)?;
        }
        let label = match phase {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        };
        self.encoder.commit_labeled(label)?;
        // Reading the chosen token back is the step's one host sync.
        let next = self.state.next_token.to_vec::<u32>()?[0];
        self.device.profiler().end_token();
        Ok(next)
    }

    /// The logits of the last step (one host-device copy).
    pub fn logits(&self) -> Result<Vec<f32>> {
        Ok(self.state.logits.to_vec::<f32>()?)
    }

    /// [`step`](Self::step), with its wall time (and, with `keep_logits`, its
    /// logits) added to `generation`.
    #[allow(clippy::too_many_arguments)]
    fn recorded_step(
        &mut self,
        token: u32,
        position: usize,
        phase: Phase,
        sampling: Sampling,
        rng: &mut SplitMix64,
        generation: &mut Generation,
        keep_logits: bool,
    ) -> Result<u32> {
        let start = Instant::now();
        let next = self.step(token, position, phase, sampling, rng.next_f32())?;
        generation.steps.push(StepTiming {
            phase,
            duration: start.elapsed(),
        });
        if keep_logits {
            generation.logits.push(self.logits()?);
        }
        Ok(next)
    }

    /// Processes the prompt and returns the first generated token.
    ///
    /// Prompt processing goes token by token through [`step`](Self::step)
    /// for now. Batched prefill belongs here: one pass of `MatMul` over all
    /// prompt positions per projection (reading each weight once for the
    /// whole prompt) with a causal attention over the prompt block.
    fn prefill(
        &mut self,
        prompt: &[u32],
        sampling: Sampling,
        rng: &mut SplitMix64,
        generation: &mut Generation,
        keep_logits: bool,
    ) -> Result<u32> {
        let mut next = 0;
        for (position, &token) in prompt.iter().enumerate() {
            next = self.recorded_step(
                token,
                position,
                Phase::Prefill,
                sampling,
                rng,
                generation,
                keep_logits,
            )?;
        }
        Ok(next)
    }

    /// Greedy decode of up to `count` tokens, feeding `token` at `position`
    /// first and each choice back after it; `on_token` sees every chosen
    /// token in order and stops the loop by returning `false`.
    ///
    /// In graph mode the step graph writes its choice into the next step's
    /// token slot on the device, so step N+1 is queued before step N's token
    /// is read back: the host's launch (and, with CUPTI on, its
    /// instrumentation) overlaps the device's work instead of leaving the
    /// device idle. Each token is still one submission, one graph launch and
    /// one host sync, but the wait for token N falls in token N+1's profiler
    /// window (the first decode token shows no sync, the last two). A stop
    /// asked for by `on_token` comes one step late on the device: the step
    /// already queued runs (and shows in the profile), its token is dropped.
    /// Eager mode runs [`step`](Self::step) by step.
    pub fn decode_greedy(
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
        let (mut token, mut position, mut left) = (token, position, count);
        if !self.graph_mode || self.step_graph.is_none() {
            // Eager, or the first graph step, which captures the graph.
            loop {
                token = self.step(token, position, Phase::Decode, Sampling::GREEDY, 0.0)?;
                position += 1;
                left -= 1;
                if !on_token(token) || left == 0 {
                    return Ok(());
                }
                if self.graph_mode && self.step_graph.is_some() {
                    break;
                }
            }
        }
        let graph = self.step_graph.clone().expect("graph mode has a captured step");
        let device = self.device.clone();
        let queue = |model: &mut Self, position: usize, token: Option<u32>| -> Result<PendingRead<u32>> {
            device.profiler().begin_token(Phase::Decode);
            match token {
                // The first queued step: the host knows its token.
                Some(token) => model.state.step.write_from(&[token, position as u32])?,
                // Later ones: the previous replay wrote the token slot.
                None => model
                    .state
                    .step
                    .slice(POSITION_SLOT, 1)?
                    .write_from(&[position as u32])?,
            }
            model.encoder.replay(&graph)?;
            model.encoder.commit_labeled("decode")?;
            Ok(model.state.next_token.read_later::<u32>()?)
        };
        let mut in_flight = Some(queue(self, position, Some(token))?);
        let mut queued = 1;
        while let Some(read) = in_flight.take() {
            if queued < left {
                in_flight = Some(queue(self, position + queued, None)?);
                queued += 1;
            }
            let chosen = read.wait()?[0];
            if !on_token(chosen) {
                break;
            }
        }
        // A step queued past a stop still runs; wait for it so the next
        // caller finds the device idle and its times resolved.
        if let Some(read) = in_flight {
            read.wait()?;
        }
        device.profiler().end_token();
        Ok(())
    }

    /// Runs `prompt`, then generates up to `max_tokens` tokens. Stops early at
    /// an end-of-sequence token when `stop_at_eos`. With `keep_logits`, the
    /// logits of every processed position are returned (prompt positions,
    /// then each generated token but the last, which is never fed back).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        sampling: Sampling,
        seed: u64,
        stop_at_eos: bool,
        keep_logits: bool,
    ) -> Result<Generation> {
        let request = GenerationRequest {
            prompt,
            max_tokens,
            sampling,
            seed,
            stop_at_eos,
            stop_tokens: &[],
            keep_logits,
        };
        self.generate_streaming(&request, |_| Ok(()))
    }

    /// [`generate`](Self::generate) with the request spelled out and
    /// `on_token` called with each generated token as soon as it is known
    /// (to stream text); an error from it stops generation.
    pub fn generate_streaming(
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
        for &token in request.stop_tokens {
            self.check_token(token)?;
        }
        if prompt.is_empty() {
            return Err(ModelError::InvalidInput("the prompt has no tokens".into()));
        }
        if max_tokens == 0 {
            return Err(ModelError::InvalidInput("--max-tokens must be at least 1".into()));
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
        self.reserve_context(positions)?;
        let mut rng = SplitMix64::new(seed);
        let mut generation = Generation {
            prompt: prompt.to_vec(),
            ..Generation::default()
        };
        let mut next = self.prefill(prompt, sampling, &mut rng, &mut generation, keep_logits)?;
        generation.generated.push(next);
        on_token(next)?;
        if sampling.temperature <= 0.0 && !keep_logits {
            let eos = stop_tokens;
            if stop_at_eos && eos.contains(&next) {
                generation.stopped_at_eos = true;
                return Ok(generation);
            }
            let mut last = Instant::now();
            let left = max_tokens - generation.generated.len();
            let position = prompt.len();
            let mut failure = None;
            self.decode_greedy(next, position, left, |token| {
                let now = Instant::now();
                generation.steps.push(StepTiming {
                    phase: Phase::Decode,
                    duration: now - last,
                });
                last = now;
                generation.generated.push(token);
                if let Err(error) = on_token(token) {
                    failure = Some(error);
                    return false;
                }
                let stop = stop_at_eos && eos.contains(&token);
                generation.stopped_at_eos = stop;
                !stop
            })?;
            return match failure {
                Some(error) => Err(error),
                None => Ok(generation),
            };
        }
        while generation.generated.len() < max_tokens {
            if stop_at_eos && stop_tokens.contains(&next) {
                generation.stopped_at_eos = true;
                break;
            }
            let position = prompt.len() + generation.generated.len() - 1;
            next = self.recorded_step(
                next,
                position,
                Phase::Decode,
                sampling,
                &mut rng,
                &mut generation,
                keep_logits,
            )?;
            generation.generated.push(next);
            on_token(next)?;
        }
        Ok(generation)
    }
}
