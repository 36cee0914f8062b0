//! A linear layer as the model math sees it: its weight, its bias and how
//! tensor parallelism split it, so a layer reads as if the model were whole.
//! The layer owns the consequences of its split (a partial sum to complete,
//! a share of the vocabulary to gather); the engine (`engine::layer`) picks
//! the kernels for its weight's format and the pass's shape. A new weight
//! format becomes a new [`Linear`] weight, not a new copy of the layer.

use kernelscope::ops::WeightFormat;
use kernelscope::{Buffer, DType};

use crate::config::shard::Split;

/// How tensor parallelism cut a linear layer for one rank (the names of
/// Megatron's column- and row-parallel layers describe the `[in, out]`
/// layout; ours are `[out, in]`, so they are named by what is split).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parallel {
    /// Not split: every rank holds all of it.
    Whole,
    /// Each rank holds some output rows (Megatron's column-parallel: q, k,
    /// v, gate, up): its outputs are final for the rows it holds.
    SplitOutputs,
    /// Each rank holds some input columns (Megatron's row-parallel: o_proj,
    /// down_proj): its output is a partial sum, completed by an all-reduce.
    SplitInputs,
    /// Each rank holds a share of the vocabulary (the LM head): the shares
    /// are gathered into the whole row of logits.
    SplitVocabulary,
}

impl Parallel {
    /// The parallelism of a projection whose weight was cut by `split`
    /// (`vocabulary`: its rows are vocabulary ids).
    pub(crate) fn of(split: &Split, vocabulary: bool) -> Parallel {
        match split {
            Split::Whole => Parallel::Whole,
            Split::Rows(_) if vocabulary => Parallel::SplitVocabulary,
            Split::Rows(_) | Split::ExpertRows(_) => Parallel::SplitOutputs,
            Split::Columns(_) => Parallel::SplitInputs,
        }
    }
}

/// A linear layer's bias on one rank.
#[derive(Clone, Debug)]
pub enum Bias {
    /// The model has none.
    None,
    /// This rank adds this bias (its share, when the outputs are split).
    Held(Buffer),
    /// The model has one, but another rank adds it (a partial sum's bias is
    /// added once, by rank 0): this rank must still take the path of a
    /// biased layer, so that every rank reduces the same buffer.
    OnAnotherRank,
}

/// `y = W x (+ b)` with `W` `[out, in]`, dense or in quantized blocks.
#[derive(Clone, Debug)]
pub struct Linear {
    /// `[out, in]` (this rank's share): elements of a dense dtype, or a u8
    /// `[out, row bytes]` of quantized blocks.
    pub weight: Buffer,
    /// How `weight` stores the matrix.
    pub format: WeightFormat,
    /// The bias, where the model has one.
    pub bias: Bias,
    /// How tensor parallelism split it.
    pub parallel: Parallel,
}

impl Linear {
    /// A layer of `weight` and `bias` (`model_has_bias`: whether the model
    /// has a bias here, though this rank may not hold it) split as
    /// `parallel`.
    pub(crate) fn new(
        weight: Buffer,
        format: WeightFormat,
        bias: Option<Buffer>,
        model_has_bias: bool,
        parallel: Parallel,
    ) -> Linear {
        let bias = match (bias, model_has_bias) {
            (Some(bias), _) => Bias::Held(bias),
            (None, true) => Bias::OnAnotherRank,
            (None, false) => Bias::None,
        };
        Linear {
            weight,
            format,
            bias,
            parallel,
        }
    }

    /// The bias this rank adds, if any.
    pub fn held_bias(&self) -> Option<&Buffer> {
        match &self.bias {
            Bias::Held(bias) => Some(bias),
            Bias::None | Bias::OnAnotherRank => None,
        }
    }

    /// Whether the model has a bias here (on this rank or another).
    pub fn has_bias(&self) -> bool {
        !matches!(self.bias, Bias::None)
    }

    /// The weight's format: what the kernels are picked for.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// The weight's dtype when it is dense (what the fused kernels read).
    pub fn dense_format(&self) -> Option<DType> {
        self.format.dense()
    }
}
