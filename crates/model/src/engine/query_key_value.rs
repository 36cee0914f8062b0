//! q, k and v's products with RoPE and the KV-cache append in their stores:
//! where a layer's attention begins with RMSNorm, the q, k and v mat-vecs
//! of the normed input, RoPE on q and k and the append, all three quantized
//! with fused kernels, unbiased, and the caches bf16, one normalised and
//! quantized x feeds each format's product
//! (`QuantizedFused::encode_matvecs_rope_staged`), which rotates q and k
//! and stores k and v in the caches itself: the `rope_append` kernel is
//! gone (a Q4_K_M layer's q and k in Q4_K and v in Q6_K: two products).
//! Qwen3's per-head norms come between the products and RoPE, so its
//! layers keep `rope_append_normed`; a biased layer keeps its bias step.

use kernelscope::CommandEncoder;
use kernelscope::ops::WeightFormat;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::ops::quantized::linear::fused::rope::{QueryKeyValue, RopeAppendStores};

use super::forward_parts::Forward;
use super::layer::{Activations, Slot, Step};
use crate::error::Result;

impl Forward<'_> {
    /// The pattern above: encodes its kernels and returns the seven steps
    /// it covered, or 0 where it does not apply.
    pub(super) fn fuse_query_key_value_rope(
        &self,
        encoder: &mut CommandEncoder,
        steps: &[Step<'_>],
        activations: &Activations,
    ) -> Result<usize> {
        let [
            Step::Norm { weight },
            Step::Linear {
                linear: query,
                input: Slot::Normed,
                output: Slot::Query,
            },
            Step::Linear {
                linear: key,
                input: Slot::Normed,
                output: Slot::Key,
            },
            Step::Linear {
                linear: value,
                input: Slot::Normed,
                output: Slot::Value,
            },
            Step::Rope { target: Slot::Query },
            Step::Rope { target: Slot::Key },
            Step::AppendKeyValue { layer },
            ..,
        ] = steps
        else {
            return Ok(0);
        };
        let linears = [*query, *key, *value];
        let mut formats = Vec::with_capacity(linears.len());
        for linear in linears {
            match linear.format() {
                WeightFormat::Quantized(format) => formats.push(format),
                WeightFormat::Dense(_) => return Ok(0),
            }
        }
        let state = self.state;
        let caches = [&state.key_cache[*layer], &state.value_cache[*layer]];
        let heads = self.config.heads();
        let part_rows = [heads.query, heads.key_value, heads.key_value].map(|count| count * heads.dim);
        let fuses = linears.iter().zip(part_rows).all(|(linear, rows)| {
            !linear.has_bias() && self.fuses_as_output(linear) && linear.weight.shape().first() == Some(&rows)
        });
        let cached_in_bf16 = caches
            .iter()
            .all(|cache| cache.dtype() == QuantizedFused::ROPE_CACHE_DTYPE);
        if !(fuses && cached_in_bf16) {
            return Ok(0);
        }
        let stores = RopeAppendStores {
            query: &activations.query,
            key_cache: caches[0],
            value_cache: caches[1],
            frequencies: &state.rope_frequencies,
            positions: &activations.positions.0,
            first: activations.positions.1,
            heads,
        };
        let parts = [QueryKeyValue::Query, QueryKeyValue::Key, QueryKeyValue::Value];
        let (x, eps) = (&activations.hidden, self.config.rms_norm_eps);
        // One staged x for every format's product, staged by the first.
        let mut staged = None;
        let mut start = 0;
        while start < formats.len() {
            let format = formats[start];
            let end = start
                + formats[start..]
                    .iter()
                    .take_while(|&&other| other == format)
                    .count();
            let fused = self
                .ops
                .quantized_fused(format)
                .expect("fuses_as_output checked the kernels");
            let input = match &staged {
                Some(input) => input,
                None => staged.insert(fused.encode_norm_stage(encoder, x, weight, eps, x.len())?),
            };
            let weights: Vec<_> = linears[start..end].iter().map(|linear| &linear.weight).collect();
            fused.encode_matvecs_rope_staged(encoder, input, &weights, parts[start], &stores)?;
            start = end;
        }
        Ok(7)
    }
}
