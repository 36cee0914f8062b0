//! The model math, written once: a decoder layer (and the LM head) is a
//! list of primitive steps over a pass's rows (one position in decode, a
//! chunk of them in prefill), and one encoder turns any list into
//! dispatches. Kernels are picked where a step is encoded: by the pass's
//! shape (mat-vec for one position, GEMM for a chunk), by each linear
//! layer's weight format and split (its bias, its all-reduce or gather).
//! Fusion is a choice made where a pattern of steps is recognised (see
//! `fusion`), never a second copy of the layer.

use kernelscope::ops::WeightFormat;
use kernelscope::ops::norm_matvec;
use kernelscope::profile::{Role, Roles};
use kernelscope::{Buffer, CommandEncoder, DType};

pub(super) use super::activations::{Activations, PassShape, Slot};
use super::forward_parts::Forward;
use crate::error::{ModelError, Result};
use crate::linear::{Linear, Parallel};
use crate::weights::{ExpertWeights, FeedForward, LayerWeights};

/// One primitive step of the model math.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step<'w> {
    /// The profiler's scope of the steps that follow.
    Scope(Scope),
    /// `normed = rmsnorm(hidden) * weight`.
    Norm { weight: &'w Buffer },
    /// `output = linear(input)`, complete (bias added, partial sums reduced).
    Linear {
        linear: &'w Linear,
        input: Slot,
        output: Slot,
    },
    /// RMSNorm of each head of the query or the key by `weight`
    /// `[head_dim]`, in place (Qwen3, before RoPE).
    HeadNorm { target: Slot, weight: &'w Buffer },
    /// RoPE of the query or the key at the pass's positions.
    Rope { target: Slot },
    /// The key and value appended to layer `layer`'s cache.
    AppendKeyValue { layer: usize },
    /// Attention of the query over layer `layer`'s cache.
    Attention { layer: usize },
    /// `activated = silu(gate) * up`.
    SiluMul,
    /// `hidden += projected`.
    AddResidual,
    /// A sparse layer's choice: the router logits to each row's experts
    /// and their weights, on the device.
    Route { layer: usize },
    /// The chosen experts' gate/up + SiLU·mul over `normed`.
    ExpertsGateUp {
        layer: usize,
        experts: &'w ExpertWeights,
    },
    /// The chosen experts' down projections, weighted into `hidden`.
    ExpertsDown {
        layer: usize,
        experts: &'w ExpertWeights,
    },
}

impl Step<'_> {
    /// What the step does for the model, inside `scope` (the last
    /// [`Step::Scope`] before it): a norm is the attention's, the MLP's or
    /// the final one by where it stands, a residual add belongs to the
    /// projection before it. `None` for a scope marker.
    pub(super) fn role(&self, scope: Option<Scope>) -> Option<Role> {
        use Slot::*;
        Some(match *self {
            Step::Scope(_) => return None,
            Step::Norm { .. } => match scope {
                Some(Scope::Attention { .. }) => Role::AttentionNorm,
                Some(Scope::Mlp { .. }) => Role::MlpNorm,
                Some(Scope::LmHead) | None => Role::FinalNorm,
            },
            Step::Linear { input, output, .. } => match output {
                Query | Key | Value => Role::QkvProjection,
                Projected if input == Attention => Role::OutputProjection,
                Projected => Role::Down,
                Gate | Up => Role::GateUp,
                RouterLogits => Role::Router,
                Logits => Role::LmHead,
                Normed | Attention | Activated => Role::Other,
            },
            Step::HeadNorm { .. } | Step::Rope { .. } | Step::AppendKeyValue { .. } => Role::RopeKvWrite,
            Step::Attention { .. } => Role::Attention,
            Step::SiluMul => Role::GateUp,
            Step::AddResidual => match scope {
                Some(Scope::Attention { .. }) => Role::OutputProjection,
                _ => Role::Down,
            },
            Step::Route { .. } => Role::Router,
            Step::ExpertsGateUp { .. } | Step::ExpertsDown { .. } => Role::Experts,
        })
    }

    /// Whether the step reads activation `slot` (a fused kernel that keeps
    /// a slot in registers only may not cover a step that reads it later).
    pub(super) fn reads(&self, slot: Slot) -> bool {
        match *self {
            Step::Linear { input, .. } => input == slot,
            Step::HeadNorm { target, .. } | Step::Rope { target } => target == slot,
            Step::AppendKeyValue { .. } => matches!(slot, Slot::Key | Slot::Value),
            Step::Attention { .. } => slot == Slot::Query,
            Step::SiluMul => matches!(slot, Slot::Gate | Slot::Up),
            Step::AddResidual => slot == Slot::Projected,
            Step::Route { .. } => slot == Slot::RouterLogits,
            Step::ExpertsGateUp { .. } => slot == Slot::Normed,
            Step::Scope(_) | Step::Norm { .. } | Step::ExpertsDown { .. } => false,
        }
    }
}

/// The profiler's scope of a group of steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    Attention { layer: usize },
    Mlp { layer: usize },
    LmHead,
}

impl Scope {
    fn name(self) -> String {
        match self {
            Scope::Attention { layer } => format!("layer.{layer}.attn"),
            Scope::Mlp { layer } => format!("layer.{layer}.mlp"),
            Scope::LmHead => "lm_head".into(),
        }
    }
}

/// A Llama-family decoder layer: pre-norm attention with RoPE and a KV
/// cache (each head of q and k normalised before RoPE where the layer has
/// those norms, as Qwen3's), then a pre-norm SiLU-gated MLP (or, in a
/// sparse layer, the router and the chosen experts), each added into the
/// residual stream.
pub(super) fn decoder_layer(layer: usize, weights: &LayerWeights) -> LayerSteps<'_> {
    use Slot::*;
    let linear = |linear, input, output| Step::Linear {
        linear,
        input,
        output,
    };
    let head_norms = [(Query, &weights.query_norm), (Key, &weights.key_norm)]
        .into_iter()
        .filter_map(|(target, weight)| weight.as_ref().map(|weight| Step::HeadNorm { target, weight }));
    let attention = [
        Step::Scope(Scope::Attention { layer }),
        Step::Norm {
            weight: &weights.input_norm,
        },
        linear(&weights.query, Normed, Query),
        linear(&weights.key, Normed, Key),
        linear(&weights.value, Normed, Value),
    ];
    let attention_rest = [
        Step::Rope { target: Query },
        Step::Rope { target: Key },
        Step::AppendKeyValue { layer },
        Step::Attention { layer },
        linear(&weights.output, Attention, Projected),
        Step::AddResidual,
        Step::Scope(Scope::Mlp { layer }),
        Step::Norm {
            weight: &weights.post_attention_norm,
        },
    ];
    let feed_forward = match &weights.feed_forward {
        FeedForward::Dense { gate, up, down } => [
            Some(linear(gate, Normed, Gate)),
            Some(linear(up, Normed, Up)),
            Some(Step::SiluMul),
            Some(linear(down, Activated, Projected)),
            Some(Step::AddResidual),
        ],
        FeedForward::Experts(experts) => [
            Some(linear(&experts.router, Normed, RouterLogits)),
            Some(Step::Route { layer }),
            Some(Step::ExpertsGateUp { layer, experts }),
            Some(Step::ExpertsDown { layer, experts }),
            None,
        ],
    };
    let rest = attention_rest
        .into_iter()
        .chain(feed_forward.into_iter().flatten());
    // In place, not collected: eager decode encodes every layer each token.
    let mut steps = LayerSteps {
        steps: [Step::AddResidual; MOST_LAYER_STEPS],
        len: 0,
    };
    for (slot, step) in steps
        .steps
        .iter_mut()
        .zip(attention.into_iter().chain(head_norms).chain(rest))
    {
        *slot = step;
        steps.len += 1;
    }
    steps
}

/// The most steps a decoder layer has (18, and Qwen3's two head norms).
const MOST_LAYER_STEPS: usize = 20;

/// A decoder layer's steps, as a slice.
pub(super) struct LayerSteps<'w> {
    steps: [Step<'w>; MOST_LAYER_STEPS],
    len: usize,
}

impl<'w> std::ops::Deref for LayerSteps<'w> {
    type Target = [Step<'w>];

    fn deref(&self) -> &[Step<'w>] {
        &self.steps[..self.len]
    }
}

/// The LM head: the final RMSNorm and the projection onto the vocabulary.
pub(super) fn lm_head<'w>(final_norm: &'w Buffer, lm_head: &'w Linear) -> [Step<'w>; 3] {
    [
        Step::Scope(Scope::LmHead),
        Step::Norm { weight: final_norm },
        Step::Linear {
            linear: lm_head,
            input: Slot::Normed,
            output: Slot::Logits,
        },
    ]
}

impl Forward<'_> {
    /// Encodes `steps` over `activations`, fusing where a pattern allows.
    pub(super) fn encode_steps(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<()> {
        let fusing = matches!(activations.shape, PassShape::Vector { .. })
            && self.ops.fusion
            && norm_matvec::fits(self.config.hidden_size);
        let mut next = 0;
        // The scope each step stands in, for its role.
        let mut scope = None;
        let roles_of = |steps: &[Step<'_>], mut scope: Option<Scope>| {
            steps.iter().fold(Roles::NONE, |roles, step| {
                if let Step::Scope(inner) = step {
                    scope = Some(*inner);
                }
                step.role(scope).map_or(roles, |role| roles.with(role))
            })
        };
        while next < steps.len() {
            let mark = encoder.position();
            let fused = if fusing {
                self.encode_fused(encoder, &steps[next..], activations)?
            } else {
                0
            };
            if fused == 0 {
                if let Step::Scope(inner) = steps[next] {
                    scope = Some(inner);
                }
                encoder.set_roles(roles_of(&steps[next..=next], scope));
                self.encode_step(encoder, &steps[next], activations)?;
                next += 1;
            } else {
                // A fused kernel's roles are those of the steps it covered,
                // known once it is encoded.
                encoder.set_roles_since(mark, roles_of(&steps[next..next + fused], scope));
                if let Some(Step::Scope(inner)) = steps[next..next + fused]
                    .iter()
                    .rev()
                    .find(|step| matches!(step, Step::Scope(_)))
                {
                    scope = Some(*inner);
                }
                next += fused;
            }
        }
        Ok(())
    }

    /// One step on its own.
    fn encode_step(
        &self,
        encoder: &mut CommandEncoder,
        step: &Step<'_>,
        activations: &Activations,
    ) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        let heads = self.config.heads();
        let (positions, first) = (&activations.positions.0, activations.positions.1);
        match *step {
            Step::Scope(scope) => encoder.set_scope(&scope.name()),
            Step::Norm { weight } => {
                let norm = if activations.normed.dtype() == DType::F32 {
                    &ops.rms_norm
                } else {
                    &ops.rms_norm_narrow
                };
                norm.encode(
                    encoder,
                    &activations.hidden,
                    weight,
                    &activations.normed,
                    self.config.rms_norm_eps,
                )?;
            }
            Step::Linear {
                linear,
                input,
                output,
            } => {
                let (input, output) = (activations.slot(input)?, activations.slot(output)?);
                self.encode_linear(encoder, linear, input, output, activations)?;
            }
            Step::HeadNorm { target, weight } => {
                ops.head_norm.encode(
                    encoder,
                    activations.slot(target)?,
                    weight,
                    self.config.rms_norm_eps,
                )?;
            }
            Step::Rope { target } => {
                let count = if target == Slot::Query {
                    heads.query
                } else {
                    heads.key_value
                };
                let buffer = activations.slot(target)?;
                ops.rope
                    .encode(encoder, buffer, &state.rope_frequencies, positions, first, count)?;
            }
            Step::AppendKeyValue { layer } => ops.kv_append.encode(
                encoder,
                &activations.key,
                &activations.value,
                &state.key_cache[layer],
                &state.value_cache[layer],
                positions,
                first,
            )?,
            Step::Attention { layer } => self.encode_attention(encoder, layer, activations, None)?,
            Step::SiluMul => {
                let silu_mul = if activations.activated.dtype() == DType::F32 {
                    &ops.silu_mul
                } else {
                    &ops.silu_mul_narrow
                };
                silu_mul.encode(
                    encoder,
                    &activations.gate,
                    &activations.up,
                    &activations.activated,
                )?;
            }
            Step::AddResidual => {
                ops.add_residual
                    .encode(encoder, &activations.hidden, &activations.projected)?
            }
            Step::Route { layer } => self.encode_route(encoder, layer, activations)?,
            Step::ExpertsGateUp { layer, experts } => {
                self.encode_experts_gate_up(encoder, layer, experts, activations)?
            }
            Step::ExpertsDown { layer, experts } => {
                self.encode_experts_down(encoder, layer, experts, activations)?
            }
        }
        Ok(())
    }

    /// Attention of the pass's queries over layer `layer`'s cache: one
    /// position's split over the cache (its output also quantized into
    /// `quantized` where given, see `Attention::encode_quantized`), or a
    /// chunk's causal attention, which quantizes nothing.
    pub(super) fn encode_attention(
        &self,
        encoder: &mut CommandEncoder,
        layer: usize,
        activations: &Activations,
        quantized: Option<&Buffer>,
    ) -> Result<()> {
        let (ops, state) = (self.ops, self.state);
        let (positions, first) = (&activations.positions.0, activations.positions.1);
        let (key_cache, value_cache) = (&state.key_cache[layer], &state.value_cache[layer]);
        match activations.shape {
            PassShape::Vector { position } => ops.attention.encode_quantized(
                encoder,
                &activations.query,
                key_cache,
                value_cache,
                positions,
                first,
                self.config.heads(),
                position + 1,
                &state.attention_scratch,
                &activations.attention,
                quantized,
            )?,
            PassShape::Rows { .. } if quantized.is_some() => {
                return Err(ModelError::InvalidInput(
                    "a chunk's attention cannot quantize its output (only one position's fuses with o_proj)"
                        .into(),
                ));
            }
            PassShape::Rows { context_end } => ops.prefill_attention.encode(
                encoder,
                &activations.query,
                key_cache,
                value_cache,
                positions,
                first,
                self.config.heads(),
                context_end,
                &activations.attention,
            )?,
        }
        Ok(())
    }

    /// `output = linear(input)`, complete: the product for the weight's
    /// format and the pass's shape, the bias this rank holds, then what the
    /// split asks (partial sums all-reduced; vocabulary shares gathered
    /// where the pass gives a place for them).
    fn encode_linear(
        &self,
        encoder: &mut CommandEncoder,
        linear: &Linear,
        input: &Buffer,
        output: &Buffer,
        activations: &Activations,
    ) -> Result<()> {
        match linear.format() {
            WeightFormat::Dense(dtype) => {
                let kernels = self.ops.linear_kernels(dtype)?;
                match activations.shape {
                    PassShape::Vector { .. } => {
                        kernels.matvec.encode(encoder, &linear.weight, input, output)?
                    }
                    PassShape::Rows { .. } => {
                        kernels.matmul.encode(encoder, &linear.weight, input, output)?
                    }
                }
            }
            // One kernel for both shapes: it reads the rows x holds.
            WeightFormat::Quantized(format) => {
                self.ops
                    .quantized_linear(format)?
                    .encode(encoder, &linear.weight, input, output)?
            }
        }
        if let Some(bias) = linear.held_bias() {
            self.ops.add_bias.encode(encoder, output, bias)?;
        }
        self.complete_split(encoder, linear, output, activations)
    }

    /// What `linear`'s split asks once its product is in `output`.
    pub(super) fn complete_split(
        &self,
        encoder: &mut CommandEncoder,
        linear: &Linear,
        output: &Buffer,
        activations: &Activations,
    ) -> Result<()> {
        let Some(collectives) = &self.ops.collectives else {
            return Ok(());
        };
        match linear.parallel {
            Parallel::Whole | Parallel::SplitOutputs => {}
            Parallel::SplitInputs => collectives.all_reduce.encode(encoder, output)?,
            Parallel::SplitVocabulary => {
                if let Some((padded, gathered)) = &activations.gather {
                    collectives.all_gather.encode(encoder, padded, gathered)?;
                }
            }
        }
        Ok(())
    }
}
