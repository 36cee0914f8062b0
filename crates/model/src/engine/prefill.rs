//! Batched prefill: a chunk of prompt positions runs as one forward pass,
//! each projection a GEMM over all of the chunk's rows (every weight read
//! once per chunk instead of once per position; tensor cores on CUDA), with
//! causal attention over the chunk and the positions cached before it. The
//! residual stream stays f32; what feeds a GEMM (norm, attention and SiLU
//! outputs) is written in the dtype the GEMM takes: the weights' own, or
//! bf16 for quantized weights on CUDA ([`Ops::gemm_input`](super::state::Ops::gemm_input)).

use kernelscope::profile::Role;
use kernelscope::{Buffer, CommandEncoder, DType, Device};

use super::forward_parts::Forward;
use super::layer::{self, Activations, PassShape};
use crate::config::Config;
use crate::config::shard::Partition;
use crate::error::{ModelError, Result};

/// Which logits a chunk computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ChunkLogits {
    /// None: an inner chunk whose logits nobody reads.
    None,
    /// The last row's, into the step's logits (to choose the next token).
    Last,
    /// Every row's (`--logits-out`); the last one as [`Last`](Self::Last)
    /// computes it, into both.
    All,
}

/// The activations of a chunk of up to `capacity` rows. `width` names are
/// as in [`State`](super::state::State); `W` is the GEMM input's dtype
/// ([`Ops::gemm_input`](super::state::Ops::gemm_input)).
pub(crate) struct PrefillBuffers {
    /// Rows the buffers hold.
    pub capacity: usize,
    /// `[capacity]` u32 token ids and their positions, written by the host.
    pub tokens: Buffer,
    pub positions: Buffer,
    /// `[capacity, hidden]` f32 residual stream.
    pub hidden: Buffer,
    /// `[capacity, hidden]` W: RMSNorm output, a GEMM input.
    pub normed: Buffer,
    /// `[capacity, q]`, `[capacity, kv]`, `[capacity, kv]` f32 projections.
    pub query: Buffer,
    pub key: Buffer,
    pub value: Buffer,
    /// `[capacity, q]` W: attention output, o_proj's input.
    pub attention: Buffer,
    /// `[capacity, hidden]` f32 output of o_proj and down_proj.
    pub projected: Buffer,
    /// `[capacity, inter]` f32 gate and up, and their SiLU product in W.
    pub gate: Buffer,
    pub up: Buffer,
    pub activated: Buffer,
    /// `[capacity, vocabulary ids held]` f32 (room for `[capacity,
    /// vocabulary_stride]`), only where every row's logits are asked for:
    /// this rank's share of them.
    pub logits: Option<Buffer>,
    /// `[ranks, capacity × vocabulary_stride]` f32: every rank's `logits`,
    /// gathered, when the model is split and every row's logits are asked for.
    pub gathered_logits: Option<Buffer>,
    /// A sparse model's router and expert buffers, `capacity` rows.
    pub experts: Option<super::experts::ExpertBuffers>,
}

impl PrefillBuffers {
    /// Buffers for `capacity` rows, GEMM inputs in `gemm_input` and a sparse
    /// model's grouped runs in `expert_input`; with `all_logits`, room for
    /// every row's logits too.
    pub fn new(
        config: &Config,
        partition: &Partition,
        device: &Device,
        [gemm_input, expert_input]: [DType; 2],
        capacity: usize,
        all_logits: bool,
    ) -> Result<Self> {
        let rows = |dtype: DType, width: usize| device.alloc(dtype, &[capacity * width]);
        Ok(PrefillBuffers {
            capacity,
            tokens: device.alloc(DType::U32, &[capacity])?,
            positions: device.alloc(DType::U32, &[capacity])?,
            hidden: rows(DType::F32, config.hidden_size)?,
            normed: rows(gemm_input, config.hidden_size)?,
            query: rows(DType::F32, config.q_dim())?,
            key: rows(DType::F32, config.kv_dim())?,
            value: rows(DType::F32, config.kv_dim())?,
            attention: rows(gemm_input, config.q_dim())?,
            projected: rows(DType::F32, config.hidden_size)?,
            gate: rows(DType::F32, config.intermediate_size)?,
            up: rows(DType::F32, config.intermediate_size)?,
            activated: rows(gemm_input, config.intermediate_size)?,
            logits: if all_logits {
                Some(rows(DType::F32, partition.vocabulary_stride)?)
            } else {
                None
            },
            gathered_logits: if all_logits && partition.is_split() {
                Some(rows(DType::F32, partition.ranks * partition.vocabulary_stride)?)
            } else {
                None
            },
            experts: config
                .experts
                .as_ref()
                .map(|experts| {
                    let buffers = super::experts::ExpertBuffers::for_chunks(
                        device,
                        experts,
                        config.num_layers,
                        capacity,
                        config.hidden_size,
                        expert_input,
                    )?;
                    if partition.rank > 0 {
                        buffers.with_zeros(device, config.hidden_size)
                    } else {
                        Ok(buffers)
                    }
                })
                .transpose()?,
        })
    }

    /// The buffer holding every row's logits after a chunk of `rows` rows:
    /// the gathered shares when split (in [`arrange_logits`]'s layout),
    /// else `[rows, vocab]` in order.
    pub fn all_logits(&self, rows: usize, partition: &Partition) -> Option<Result<Buffer>> {
        let width = partition.vocabulary_stride;
        match (&self.gathered_logits, &self.logits) {
            (Some(gathered), _) => Some(rows_of(gathered, rows, partition.ranks * width)),
            (None, Some(logits)) => Some(rows_of(logits, rows, width)),
            (None, None) => None,
        }
    }

    /// Whether these buffers serve `rows` rows with the logits asked for.
    pub fn serve(&self, rows: usize, all_logits: bool) -> bool {
        rows <= self.capacity && (!all_logits || self.logits.is_some())
    }
}

/// Every row's logits in id order, `[rows, vocab]`, from what
/// [`PrefillBuffers::all_logits`] held: when split, rank r's block of
/// `rows × vocabulary_stride` values starts with its `[rows, ids held]`.
pub(crate) fn arrange_logits(values: Vec<f32>, rows: usize, partition: &Partition, vocab: usize) -> Vec<f32> {
    if !partition.is_split() {
        return values;
    }
    let stride = partition.vocabulary_stride;
    let mut arranged = Vec::with_capacity(rows * vocab);
    for row in 0..rows {
        for rank in 0..partition.ranks {
            let held = stride.min(vocab - rank * stride);
            let start = rank * rows * stride + row * held;
            arranged.extend_from_slice(&values[start..start + held]);
        }
    }
    arranged
}

/// The first `rows` rows of `buffer`, rows of `width` elements.
fn rows_of(buffer: &Buffer, rows: usize, width: usize) -> Result<Buffer> {
    Ok(buffer.slice(0, rows * width)?)
}

impl Forward<'_> {
    /// Encodes the forward pass of `rows` prompt positions whose tokens and
    /// positions the host wrote into `chunk`, the last at `context_end - 1`
    /// (the positions are contiguous; `context_end` sizes attention's
    /// declared cost), through the logits `logits` asks for. The chunk's
    /// keys and values are appended to the cache before its attention, so
    /// each row attends to the history and to the rows up to its own.
    pub fn encode_prefill(
        &self,
        encoder: &mut CommandEncoder,
        chunk: &PrefillBuffers,
        rows: usize,
        context_end: usize,
        logits: ChunkLogits,
    ) -> Result<()> {
        let config = self.config;
        let partition = &self.ops.partition;
        let (hidden_size, q_dim, kv_dim, inter) = (
            config.hidden_size,
            config.q_dim(),
            config.kv_dim(),
            config.intermediate_size,
        );
        let held = partition.vocabulary.len();
        let activations = Activations {
            shape: PassShape::Rows { context_end },
            hidden: rows_of(&chunk.hidden, rows, hidden_size)?,
            normed: rows_of(&chunk.normed, rows, hidden_size)?,
            query: rows_of(&chunk.query, rows, q_dim)?,
            key: rows_of(&chunk.key, rows, kv_dim)?,
            value: rows_of(&chunk.value, rows, kv_dim)?,
            projections: None,
            attention: rows_of(&chunk.attention, rows, q_dim)?,
            projected: rows_of(&chunk.projected, rows, hidden_size)?,
            gate: rows_of(&chunk.gate, rows, inter)?,
            up: rows_of(&chunk.up, rows, inter)?,
            activated: rows_of(&chunk.activated, rows, inter)?,
            logits: chunk
                .logits
                .as_ref()
                .map(|all| rows_of(all, rows, held))
                .transpose()?,
            // Every row's shares are gathered once the last row's logits
            // are in place (below).
            gather: None,
            positions: (chunk.positions.clone(), 0),
            experts: match (&chunk.experts, &config.experts) {
                (Some(buffers), Some(experts)) => Some(buffers.rows(experts, rows)?),
                _ => None,
            },
            handed_off: Default::default(),
        };

        encoder.set_scope("embed");
        encoder.set_roles(Role::Embedding);
        self.encode_embedding(encoder, &chunk.tokens, 0, &activations.hidden)?;
        for (index, layer) in self.weights.layers.iter().enumerate() {
            self.encode_steps(encoder, &layer::decoder_layer(index, layer), &activations)?;
        }

        // The last row as one position's pass (f32 norm, mat-vec), so the
        // choice is the same whether every row's logits are kept or not.
        let last = activations.hidden.slice((rows - 1) * hidden_size, hidden_size)?;
        let last_row = self.step_activations(context_end - 1, last);
        match logits {
            ChunkLogits::None => {}
            ChunkLogits::Last => self.encode_steps(encoder, &self.lm_head_steps(), &last_row)?,
            ChunkLogits::All => {
                let all = activations.logits.as_ref().ok_or_else(|| {
                    ModelError::InvalidInput(
                        "every row's logits were asked of buffers without room for them".into(),
                    )
                })?;
                self.encode_steps(encoder, &self.lm_head_steps(), &activations)?;
                self.encode_steps(encoder, &self.lm_head_steps(), &last_row)?;
                // That row of the kept logits is what the choice was made from.
                let kept_last = all.slice((rows - 1) * held, held)?;
                self.ops
                    .copy
                    .encode(encoder, &self.state.shard_logits, &kept_last)?;
                if let (Some(collectives), Some(padded), Some(gathered)) =
                    (&self.ops.collectives, &chunk.logits, &chunk.gathered_logits)
                {
                    let padded = rows_of(padded, rows, partition.vocabulary_stride)?;
                    let gathered = rows_of(gathered, rows, partition.ranks * partition.vocabulary_stride)?;
                    collectives.all_gather.encode(encoder, &padded, &gathered)?;
                }
            }
        }
        Ok(())
    }
}
