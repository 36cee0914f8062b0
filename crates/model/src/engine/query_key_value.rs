//! q, k and v's products with RoPE and the KV-cache append in their stores:
//! where a layer's attention begins with RMSNorm, the q, k and v mat-vecs
//! of the normed input, RoPE on q and k and the append, all unbiased and
//! whole on this rank, the products rotate q and k and store k and v in
//! the caches themselves, so the `rope_append` kernel is gone. Dense
//! weights take one kernel for all of it (`NormMatVecRope`, caches of the
//! weights' dtype); quantized weights one normalised and quantized x for
//! each format's product (`QuantizedFused::encode_matvecs_rope_staged`,
//! bf16 caches; a Q4_K_M layer's q and k in Q4_K and v in Q6_K: two
//! products). Qwen3's per-head norms come between the products and RoPE,
//! so its layers keep `rope_append_normed`; a biased layer keeps its bias
//! step.

use kernelscope::CommandEncoder;
use kernelscope::ops::WeightFormat;
use kernelscope::ops::norm_matvec;
use kernelscope::ops::quantized::linear::fused::QuantizedFused;
use kernelscope::ops::quantized::linear::fused::rope::QueryKeyValue;
use kernelscope::ops::rope_append::RopeAppendStores;

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
        let state = self.state;
        let caches = [&state.key_cache[*layer], &state.value_cache[*layer]];
        let heads = self.config.heads();
        let part_rows = [heads.query, heads.key_value, heads.key_value].map(|count| count * heads.dim);
        let fuses = linears.iter().zip(part_rows).all(|(linear, rows)| {
            !linear.has_bias() && self.fuses_as_output(linear) && linear.weight.shape().first() == Some(&rows)
        });
        if !fuses {
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
        let (x, eps) = (&activations.hidden, self.config.rms_norm_eps);
        let cached_in = |dtype| caches.iter().all(|cache| cache.dtype() == dtype);
        let formats = linears.map(|linear| linear.format());
        if let WeightFormat::Dense(dtype) = formats[0] {
            let one_dtype = formats.iter().all(|format| *format == formats[0]);
            if !(one_dtype && cached_in(dtype) && norm_matvec::fits(x.len())) {
                return Ok(0);
            }
            let weights = linears.map(|linear| &linear.weight);
            self.ops
                .linear_kernels(dtype)?
                .norm_matvec_rope
                .encode(encoder, x, weight, weights, &stores, eps)?;
            return Ok(7);
        }
        let mut quantized = Vec::with_capacity(formats.len());
        for format in formats {
            match format {
                WeightFormat::Quantized(format) => quantized.push(format),
                WeightFormat::Dense(_) => return Ok(0),
            }
        }
        if !cached_in(QuantizedFused::ROPE_CACHE_DTYPE) {
            return Ok(0);
        }
        let formats = quantized;
        let parts = [QueryKeyValue::Query, QueryKeyValue::Key, QueryKeyValue::Value];
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
            let weights: Vec<_> = linears[start..end].iter().map(|linear| &linear.weight).collect();
            let input = match &staged {
                Some(input) => input,
                None => {
                    // The first product is the norm's reader.
                    let reader = fused.matvecs_rope_reader(&weights);
                    staged.insert(fused.encode_norm_stage(encoder, x, weight, eps, x.len(), reader)?)
                }
            };
            fused.encode_matvecs_rope_staged(encoder, input, &weights, parts[start], &stores)?;
            start = end;
        }
        Ok(7)
    }
}
