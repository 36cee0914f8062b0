//! Tensor parallelism's split of a model (Megatron style): each rank holds
//! a contiguous share of the query heads with their key/value heads (whole
//! GQA groups), of the MLP's intermediate rows, and of the vocabulary; the
//! projections that read a split dimension (o_proj, down_proj) hold the
//! matching columns, so each rank computes a partial sum that an all-reduce
//! completes. Norms (and o_proj's bias, added by rank 0 only) are whole on
//! every rank. Shares are as even as the split allows: query heads must
//! divide evenly (a head cannot be split); key/value heads divide evenly
//! too, or, with fewer of them than ranks, each is held by several ranks
//! (those whose query heads share it, as vLLM and Megatron do); intermediate
//! rows and vocabulary ids go in shares of ⌈n / ranks⌉, the last rank taking
//! what is left.
//!
//! Experts split by their intermediate rows: every rank holds its rows of
//! every expert's gate and up and those columns of every down; routers are
//! whole. Every rank routes every row itself (the same logits, the same
//! choice), computes its share of each chosen expert and adds its partial
//! sum into the residual stream before one all-reduce, so the ranks are
//! balanced by construction whatever the routing. A GGUF file's quantized
//! matrix splits its columns only on whole blocks; a split that would cut
//! one is refused naming the tensor.
//!
//! Per layer that is two all-reduces of the residual stream, after o_proj
//! and after down_proj. The embedding adds one (each rank writes zeros for
//! ids it does not hold), and the LM head's shares of the logits are
//! all-gathered, so every rank chooses the same token from the same bits.

use std::ops::Range;

use super::model_config::Config;
use super::tensors::Dimension;
use crate::error::{ModelError, Result};

/// One rank's share of every split dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// This rank, `0..ranks`.
    pub rank: usize,
    /// Ranks in the split.
    pub ranks: usize,
    /// Query heads held (a range of head indices).
    pub query_heads: Range<usize>,
    /// Key/value heads held.
    pub key_value_heads: Range<usize>,
    /// Intermediate rows held.
    pub intermediate: Range<usize>,
    /// Rows held of each expert (a sparse model's experts are split by
    /// their intermediate dimension: every rank holds a share of every
    /// expert, so each token's work is spread evenly over the ranks).
    pub expert_intermediate: Range<usize>,
    /// Vocabulary ids held (rows of the embedding and the LM head).
    pub vocabulary: Range<usize>,
    /// Ids per rank's share (the last may hold fewer): gathered logits hold
    /// `ranks × vocabulary_stride` values, the first `vocab_size` of them
    /// the logits in id order.
    pub vocabulary_stride: usize,
}

/// How a tensor is cut for one rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// All of it.
    Whole,
    /// Rows (first dimension) `range`; for a vector, elements `range`.
    Rows(Range<usize>),
    /// Columns (the last dimension) `range` of every row.
    Columns(Range<usize>),
    /// Rows (the middle dimension) `range` of every expert of a stacked
    /// `[experts, rows, columns]` tensor.
    ExpertRows(Range<usize>),
}

/// Shares of ⌈size / ranks⌉: rank `rank`'s range, refused where a rank
/// would get nothing.
fn share(size: usize, rank: usize, ranks: usize, what: &str) -> Result<(Range<usize>, usize)> {
    let stride = size.div_ceil(ranks);
    // Whether every one of `ranks` ranks gets something; not monotonic in
    // `ranks` (9 splits over 5 ranks, not over 4), so the error lists them.
    let splits = |ranks: usize| size.div_ceil(ranks) * (ranks - 1) < size;
    if !splits(ranks) {
        let largest_split_tried = (2 * ranks).min(size);
        return Err(ModelError::TensorParallel {
            ranks,
            problem: format!("{what} ({size}) leaves the last rank nothing in shares of {stride}"),
            working_splits: (1..=largest_split_tried).filter(|&ranks| splits(ranks)).collect(),
            largest_split_tried,
        });
    }
    let start = stride * rank;
    Ok((start..(start + stride).min(size), stride))
}

impl Partition {
    /// The one rank of an unsplit model.
    pub fn whole(config: &Config) -> Partition {
        Partition {
            rank: 0,
            ranks: 1,
            query_heads: 0..config.num_heads,
            key_value_heads: 0..config.num_kv_heads,
            intermediate: 0..config.intermediate_size,
            expert_intermediate: 0..config
                .experts
                .as_ref()
                .map_or(0, |experts| experts.intermediate_size),
            vocabulary: 0..config.vocab_size,
            vocabulary_stride: config.vocab_size,
        }
    }

    /// Rank `rank`'s share of `config` split over `ranks`; an error naming
    /// what does not divide and the rank counts that do.
    pub fn new(config: &Config, rank: usize, ranks: usize) -> Result<Partition> {
        if ranks == 0 {
            return Err(ModelError::InvalidCount {
                field: "ranks",
                value: ranks,
                minimum: 1,
            });
        }
        if rank >= ranks {
            return Err(ModelError::InvalidInput(format!(
                "rank {rank} of {ranks} does not exist"
            )));
        }
        let (heads, key_value) = (config.num_heads, config.num_kv_heads);
        let splits = |count: usize| {
            heads.is_multiple_of(count)
                && (key_value.is_multiple_of(count) || count.is_multiple_of(key_value))
        };
        if !splits(ranks) {
            // No count above the heads divides them, so this list is whole.
            return Err(ModelError::TensorParallel {
                ranks,
                problem: format!(
                    "{heads} query heads in groups over {key_value} key/value heads cannot be shared evenly (a head cannot be split)"
                ),
                working_splits: (1..=heads).filter(|&count| splits(count)).collect(),
                largest_split_tried: heads,
            });
        }
        let query_per_rank = heads / ranks;
        let key_value_heads = if key_value.is_multiple_of(ranks) {
            let per_rank = key_value / ranks;
            rank * per_rank..(rank + 1) * per_rank
        } else {
            // Fewer key/value heads than ranks: rank r's query heads all
            // belong to the group of head r / (ranks / key_value).
            let head = rank / (ranks / key_value);
            head..head + 1
        };
        let (intermediate, _) = share(config.intermediate_size, rank, ranks, "intermediate_size")?;
        let (vocabulary, vocabulary_stride) = share(config.vocab_size, rank, ranks, "vocab_size")?;
        let expert_intermediate = match &config.experts {
            Some(experts) => {
                share(
                    experts.intermediate_size,
                    rank,
                    ranks,
                    "the experts' intermediate size",
                )?
                .0
            }
            None => 0..0,
        };
        Ok(Partition {
            rank,
            ranks,
            query_heads: rank * query_per_rank..(rank + 1) * query_per_rank,
            key_value_heads,
            intermediate,
            expert_intermediate,
            vocabulary,
            vocabulary_stride,
        })
    }

    /// Every rank's share of `config` over `ranks`.
    pub fn all(config: &Config, ranks: usize) -> Result<Vec<Partition>> {
        (0..ranks)
            .map(|rank| Partition::new(config, rank, ranks))
            .collect()
    }

    /// Whether the model is split at all.
    pub fn is_split(&self) -> bool {
        self.ranks > 1
    }

    /// The config of this rank's share: its heads and intermediate rows
    /// (the vocabulary size stays the whole vocabulary's, which token ids
    /// are checked against).
    pub fn local_config(&self, config: &Config) -> Config {
        let mut local = config.clone();
        local.num_heads = self.query_heads.len();
        local.num_kv_heads = self.key_value_heads.len();
        local.intermediate_size = self.intermediate.len();
        if let Some(experts) = &mut local.experts {
            experts.intermediate_size = self.expert_intermediate.len();
        }
        local
    }

    /// The range this rank holds of `dimension` of `config` (in elements),
    /// `None` when it holds all of it.
    fn range_of(&self, dimension: Dimension, config: &Config) -> Option<Range<usize>> {
        if !self.is_split() {
            return None;
        }
        let dim = config.head_dim;
        match dimension {
            // A per-head norm's weight is every head's, and a router's every
            // expert's: each rank holds them whole.
            Dimension::Hidden | Dimension::HeadDim | Dimension::Experts => None,
            Dimension::ExpertIntermediate => Some(self.expert_intermediate.clone()),
            Dimension::Vocabulary => Some(self.vocabulary.clone()),
            Dimension::Intermediate => Some(self.intermediate.clone()),
            Dimension::Query => Some(self.query_heads.start * dim..self.query_heads.end * dim),
            Dimension::KeyValue => Some(self.key_value_heads.start * dim..self.key_value_heads.end * dim),
        }
    }

    /// How a tensor of `dimensions` is cut for this rank: along the first
    /// split dimension it has (tensors have at most one).
    pub(crate) fn split(&self, dimensions: &[Dimension], config: &Config) -> Split {
        for (axis, &dimension) in dimensions.iter().enumerate() {
            if let Some(range) = self.range_of(dimension, config) {
                return if axis == 0 {
                    Split::Rows(range)
                } else if axis + 1 == dimensions.len() {
                    Split::Columns(range)
                } else {
                    Split::ExpertRows(range)
                };
            }
        }
        Split::Whole
    }
}

impl Split {
    /// The shape of the cut of a tensor of `shape`.
    pub(crate) fn shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut cut = shape.to_vec();
        match self {
            Split::Whole => {}
            Split::Rows(range) => cut[0] = range.len(),
            Split::Columns(range) => *cut.last_mut().expect("a split tensor has dimensions") = range.len(),
            Split::ExpertRows(range) => cut[1] = range.len(),
        }
        cut
    }

    /// The element indices of the whole tensor of `shape` the cut holds, in
    /// the cut's row-major order, as runs of `(start, length)`.
    pub(crate) fn runs(&self, shape: &[usize]) -> Vec<(usize, usize)> {
        let elements: usize = shape.iter().product();
        match self {
            Split::Whole => vec![(0, elements)],
            Split::Rows(range) => {
                let row_length: usize = shape.iter().skip(1).product();
                vec![(range.start * row_length, range.len() * row_length)]
            }
            Split::Columns(range) => {
                let row_length = *shape.last().expect("a split tensor has dimensions");
                (0..elements / row_length.max(1))
                    .map(|row| (row * row_length + range.start, range.len()))
                    .collect()
            }
            Split::ExpertRows(range) => {
                let (rows, columns) = (shape[1], shape[2]);
                (0..shape[0])
                    .map(|expert| ((expert * rows + range.start) * columns, range.len() * columns))
                    .collect()
            }
        }
    }
}
