//! A decoder layer's MLP as the weights hold it: the dense SiLU-gated MLP,
//! or a sparse layer's router and stacked experts, with what a token reads
//! of each.

use kernelscope::Buffer;
use kernelscope::ops::WeightFormat;

use crate::linear::Linear;

/// A layer's MLP.
#[derive(Clone, Debug)]
pub enum FeedForward {
    /// The SiLU-gated MLP: `down(silu(gate x) * up x)`.
    Dense {
        /// `[inter, hidden]`.
        gate: Linear,
        /// `[inter, hidden]`.
        up: Linear,
        /// `[hidden, inter]`.
        down: Linear,
    },
    /// A mixture of SiLU-gated experts, `per_token` of them chosen per token.
    Experts(ExpertWeights),
}

impl FeedForward {
    /// Bytes of its matrices one token reads: all of a dense MLP's; of a
    /// sparse layer's, the router and its chosen experts' share.
    pub fn bytes_per_token(&self) -> u64 {
        match self {
            FeedForward::Dense { .. } => self
                .matrices()
                .iter()
                .map(|(weight, _)| weight.byte_len() as u64)
                .sum(),
            FeedForward::Experts(experts) => {
                let stacked: u64 = [&experts.gate, &experts.up, &experts.down]
                    .iter()
                    .map(|weight| weight.byte_len() as u64)
                    .sum();
                experts.router.weight.byte_len() as u64
                    + stacked * experts.per_token as u64 / experts.count.max(1) as u64
            }
        }
    }

    /// Its weight matrices, as stored.
    pub fn matrices(&self) -> Vec<(&Buffer, WeightFormat)> {
        match self {
            FeedForward::Dense { gate, up, down } => [gate, up, down]
                .into_iter()
                .map(|linear| (&linear.weight, linear.format))
                .collect(),
            FeedForward::Experts(experts) => vec![
                (&experts.router.weight, experts.router.format),
                (&experts.gate, experts.format),
                (&experts.up, experts.format),
                (&experts.down, experts.down_format),
            ],
        }
    }
}

/// A sparse layer's router and experts (`experts` of them, each with
/// `expert_inter` rows), stacked: expert `e`'s matrices are the `e`-th
/// block of each buffer.
#[derive(Clone, Debug)]
pub struct ExpertWeights {
    /// `[experts, hidden]`: each expert's logit.
    pub router: Linear,
    /// `[experts, expert_inter, hidden]` (quantized: u8 `[experts,
    /// expert_inter, row_bytes]`, each row `hidden` values in blocks).
    pub gate: Buffer,
    /// As `gate`.
    pub up: Buffer,
    /// `[experts, hidden, expert_inter]` (quantized: u8 `[experts, hidden,
    /// row_bytes]`).
    pub down: Buffer,
    /// How gate and up store their matrices.
    pub format: WeightFormat,
    /// How down stores its matrices (a quantized file may give it more
    /// bits than gate and up, as Q4_K_M's Q6_K layers do).
    pub down_format: WeightFormat,
    /// Experts in each stacked buffer.
    pub count: usize,
    /// Experts each token is routed to: a token reads `per_token / count`
    /// of each stacked buffer.
    pub per_token: usize,
}
