//! A prefill chunk's experts as GEMMs: the router's choice read back once
//! per sparse layer, the chunk's rows copied into runs grouped by expert,
//! each expert's projections one GEMM over its run (dense weights, or
//! quantized ones dequantized to bf16 at once on CUDA), and each row's
//! outputs weighted back into the residual stream.

use kernelscope::ops::WeightFormat;
use kernelscope::ops::moe::group::group_by_expert;
use kernelscope::{Buffer, CommandEncoder, DType};

use super::forward_parts::Forward;
use super::layer::Activations;
use crate::error::{ModelError, Result};
use crate::weights::ExpertWeights;

impl Forward<'_> {
    /// A chunk's experts as GEMMs: the router's choice read back (one host
    /// sync per sparse layer of a chunk), the rows copied into runs grouped
    /// by expert, each expert's gate, up and down projections one GEMM over
    /// its rows (tensor cores through cuBLASLt on CUDA), SiLU·mul once over
    /// every run, and each row's outputs weighted into the residual. Does
    /// the down projections too: the layer's `ExpertsDown` step is then
    /// done (see [`Forward::experts_grouped`]).
    pub(super) fn encode_grouped_experts(
        &self,
        encoder: &mut CommandEncoder,
        layer: usize,
        experts: &ExpertWeights,
        activations: &Activations,
    ) -> Result<()> {
        let (ops, buffers) = self.expert_parts(activations)?;
        let grouped = buffers.grouped.as_ref().expect("experts_grouped checked it");
        let config = self.config;
        let hidden = config.hidden_size;
        let [count, inter, _] = stacked_shape(&experts.gate)?;
        let positions = buffers.rows * buffers.per_token;
        encoder.commit_and_wait_labeled("prefill")?;
        let ids: Vec<u32> = buffers.ids(layer)?.to_vec()?;
        let (order, position, offsets) =
            group_by_expert(&ids, buffers.per_token, count).ok_or_else(|| {
                ModelError::InvalidInput(format!(
                    "layer {layer}'s router chose an expert past the {count} it has"
                ))
            })?;
        let order_buffer = grouped.order.slice(0, positions)?;
        order_buffer.write_from(&order)?;
        let position_buffer = grouped.position.slice(0, positions)?;
        position_buffer.write_from(&position)?;
        let dequantized = match experts.format {
            WeightFormat::Quantized(_) => ops.dequantized.as_ref(),
            WeightFormat::Dense(_) => None,
        };
        let (gather, silu_mul) = match dequantized {
            Some(prefill) => (&prefill.gather, &prefill.silu_mul),
            None => (&ops.gather, &self.ops.silu_mul_narrow),
        };
        gather.encode(
            encoder,
            &activations.normed,
            &order_buffer,
            &run(&grouped.input, 0, positions, hidden)?,
        )?;
        let projections = [
            (&experts.gate, experts.format, &grouped.gate),
            (&experts.up, experts.format, &grouped.up),
        ];
        for (stacked, format, output) in projections {
            self.encode_projection(
                encoder,
                stacked,
                format,
                &offsets,
                [&grouped.input, output],
                [hidden, inter],
            )?;
        }
        silu_mul.encode(
            encoder,
            &run(&grouped.gate, 0, positions, inter)?,
            &run(&grouped.up, 0, positions, inter)?,
            &run(&grouped.activated, 0, positions, inter)?,
        )?;
        self.encode_projection(
            encoder,
            &experts.down,
            experts.down_format,
            &offsets,
            [&grouped.activated, &grouped.output],
            [inter, hidden],
        )?;
        self.begin_expert_sum(encoder, buffers, &activations.hidden)?;
        ops.combine.encode(
            encoder,
            &run(&grouped.output, 0, positions, hidden)?,
            &position_buffer,
            &buffers.weights(layer)?,
            &activations.hidden,
        )?;
        self.end_expert_sum(encoder, &activations.hidden)
    }

    /// One projection over every expert's run of rows (from `offsets[e]` to
    /// `offsets[e + 1]` of the grouped `input` and `output`, rows `widths` wide):
    /// `output[run] = stacked[e] · input[run]`. Quantized experts on a device
    /// that dequantizes them are first dequantized at once into bf16
    /// scratch and multiplied as bf16 GEMMs; otherwise each expert's
    /// product is the dense GEMM or its format's quantized product.
    fn encode_projection(
        &self,
        encoder: &mut CommandEncoder,
        stacked: &Buffer,
        format: WeightFormat,
        offsets: &[usize],
        [input, output]: [&Buffer; 2],
        [input_width, output_width]: [usize; 2],
    ) -> Result<()> {
        let ops = self.ops.experts.as_ref().expect("a sparse model has expert ops");
        let dequantized = match (format, &ops.dequantized) {
            (WeightFormat::Quantized(quant), Some(prefill)) => {
                let [experts, rows, _] = stacked_shape(stacked)?;
                let len = experts * rows * input_width;
                let scratch = {
                    let mut slot = prefill.scratch.lock().expect("not poisoned");
                    if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
                        // Dispatches already encoded keep their own handle.
                        *slot = Some(encoder.device().alloc(DType::BF16, &[len])?);
                    }
                    let whole = slot.as_ref().expect("allocated above");
                    whole.slice(0, len)?.reshape(&[experts, rows, input_width])?
                };
                ops.quantized(quant)?
                    .encode_dequantize(encoder, stacked, &scratch)?;
                Some((prefill, scratch))
            }
            _ => None,
        };
        for expert in 0..offsets.len() - 1 {
            let (start, rows) = (offsets[expert], offsets[expert + 1] - offsets[expert]);
            if rows == 0 {
                continue;
            }
            let input = run(input, start, rows, input_width)?;
            let output = run(output, start, rows, output_width)?;
            match &dequantized {
                Some((prefill, scratch)) => {
                    prefill
                        .matmul
                        .encode(encoder, &matrix(scratch, expert)?, &input, &output)?
                }
                None => self.encode_product(encoder, format, &matrix(stacked, expert)?, &input, &output)?,
            }
        }
        Ok(())
    }

    /// `out = weight · input` over one expert's run of rows: the dense
    /// GEMM, or the quantized product of `format` (tensor cores over the
    /// dequantized blocks on CUDA for long runs, its mat-vec rows else).
    fn encode_product(
        &self,
        encoder: &mut CommandEncoder,
        format: WeightFormat,
        weight: &Buffer,
        input: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        match format {
            WeightFormat::Dense(dtype) => self
                .ops
                .linear_kernels(dtype)?
                .matmul
                .encode(encoder, weight, input, out)?,
            WeightFormat::Quantized(quant) => self
                .ops
                .quantized_linear(quant)?
                .encode(encoder, weight, input, out)?,
        }
        Ok(())
    }
}

/// `rows` rows of `width` from row `start` of a flat buffer, as `[rows, width]`.
fn run(buffer: &Buffer, start: usize, rows: usize, width: usize) -> Result<Buffer> {
    Ok(buffer
        .slice(start * width, rows * width)?
        .reshape(&[rows, width])?)
}

/// `[experts, rows, columns]` of a stacked buffer (columns of values, or of
/// bytes of blocks).
fn stacked_shape(stacked: &Buffer) -> Result<[usize; 3]> {
    <[usize; 3]>::try_from(stacked.shape()).map_err(|_| {
        ModelError::InvalidInput("stacked expert weights must be [experts, rows, columns]".into())
    })
}

/// Expert `expert`'s matrix of a stacked buffer.
fn matrix(stacked: &Buffer, expert: usize) -> Result<Buffer> {
    let [_, rows, columns] = stacked_shape(stacked)?;
    Ok(stacked
        .slice(expert * rows * columns, rows * columns)?
        .reshape(&[rows, columns])?)
}
