//! The router of a mixture-of-experts layer, on the device: for each row of
//! the router's logits `[rows, experts]` (the gate mat-vec's output), the k
//! chosen experts' ids (u32) and weights (f32) `[rows, k]`, so that the
//! expert kernels read their ids from device memory and a decode step
//! needs no host sync. The weights are the softmax over every expert in
//! f32 (as transformers computes it), renormalised over the chosen k where
//! the model asks (Qwen3-MoE's `norm_topk_prob`; Mixtral's softmax over the
//! selected logits is the same renormalisation). Experts are ranked by
//! logit, ties to the lower index.

mod arguments;
pub(crate) mod cpu;
pub use arguments::MOST_CHOSEN;
pub(crate) use arguments::{ARGUMENTS, COUNTS, EXPERTS, IDS, K, LOGITS, RENORMALIZE, ROWS, WEIGHTS};

use crate::error::{Error, Result};
use crate::ops::{Arguments, bytes_of, expect_rows, rows_of};
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `moe_route_f32`.
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("moe_route_f32", cpu::moe_route);
    registry.register_cuda_source(
        "moe_route_f32",
        crate::ops::cuda_source(include_str!("moe_route.cu")),
    );
    registry.register_format("moe_route_f32", "f32");
}

/// The router: `k` experts of `experts`, renormalised or not.
#[derive(Clone, Debug)]
pub struct MoeRoute {
    kernel: Kernel,
    experts: usize,
    k: usize,
    renormalize: bool,
}

impl MoeRoute {
    /// The router choosing `k` of `experts` on `device`; `renormalize`
    /// makes the chosen weights sum to 1.
    pub fn new(
        registry: &KernelRegistry,
        device: &Device,
        experts: usize,
        k: usize,
        renormalize: bool,
    ) -> Result<Self> {
        if k == 0 || k > experts || k > MOST_CHOSEN {
            return Err(Error::ShapeMismatch {
                context: format!(
                    "moe_route chooses 1 to {MOST_CHOSEN} experts and no more than there are: {k} of {experts}"
                ),
                expected: vec![experts.min(MOST_CHOSEN)],
                found: vec![k],
            });
        }
        Ok(MoeRoute {
            kernel: registry.kernel(device, "moe_route_f32")?,
            experts,
            k,
            renormalize,
        })
    }

    /// Routes every row of `logits` f32 `[rows, experts]` into `ids` u32
    /// and `weights` f32 `[rows, k]`, adding each choice to its expert's
    /// tally in `counts` u32 `[experts]` (what the profile reports as the
    /// tokens each expert took: one atomic add per choice).
    pub fn encode(
        &self,
        encoder: &mut CommandEncoder,
        logits: &Buffer,
        ids: &Buffer,
        weights: &Buffer,
        counts: &Buffer,
    ) -> Result<()> {
        const OP: &str = "moe_route";
        let rows = rows_of(OP, "logits", logits, self.experts)?;
        expect_rows(OP, "logits", logits, DType::F32, rows, &[self.experts])?;
        expect_rows(OP, "ids", ids, DType::U32, rows, &[self.k])?;
        expect_rows(OP, "weights", weights, DType::F32, rows, &[self.k])?;
        expect_rows(OP, "counts", counts, DType::U32, 1, &[self.experts])?;
        // A warp per row, four rows per block.
        const ROWS_PER_BLOCK: usize = 4;
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .buffer(LOGITS, logits)
                .buffer(IDS, ids)
                .buffer(WEIGHTS, weights)
                .buffer(COUNTS, counts)
                .scalar(ROWS, rows as u32)
                .scalar(EXPERTS, self.experts as u32)
                .scalar(K, self.k as u32)
                .scalar(RENORMALIZE, u32::from(self.renormalize))
                .dispatch(&self.kernel)?
                .grid(LaunchGrid {
                    blocks: [rows.div_ceil(ROWS_PER_BLOCK).max(1) as u32, 1, 1],
                    threads_per_block: [32 * ROWS_PER_BLOCK as u32, 1, 1],
                    shared_memory_bytes: 0,
                })
                .cost(
                    bytes_of(rows * self.experts, DType::F32),
                    bytes_of(rows * self.k, DType::U32)
                        + bytes_of(rows * self.k, DType::F32)
                        + bytes_of(rows * self.k, DType::U32),
                    ((3 + self.k) * rows * self.experts) as u64,
                )
                .op_kind(OpKind::Softmax)
                .role(crate::profile::Role::Router),
        )
    }
}
