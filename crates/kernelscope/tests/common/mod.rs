//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod quantized;

use kernelscope::rng::SplitMix64;
use kernelscope::runtime::LaunchGrid;
use kernelscope::{Buffer, Dispatch, Kernel, KernelRegistry};

/// `to = from + 1` with `inc_one`: arguments and grid for every backend.
pub fn inc(kernel: &Kernel, from: &Buffer, to: &Buffer) -> Dispatch {
    Dispatch::new(kernel)
        .read(from)
        .write(to)
        .param(from.len() as u32)
        .grid(LaunchGrid::linear(from.len(), 128))
}

/// `data *= factor` in place with `scale_in_place`, for every backend.
pub fn scale(kernel: &Kernel, data: &Buffer, factor: f32) -> Dispatch {
    Dispatch::new(kernel)
        .read_write(data)
        .param(factor)
        .param(data.len() as u32)
        .grid(LaunchGrid::linear(data.len(), 128))
}

/// The `inc_one` kernel (`out[i] = in[i] + 1`) for every
/// backend, plus `scale_in_place`.
pub fn inc_one_registry() -> KernelRegistry {
    let mut registry = kernelscope::testing::inc_one_registry();
    registry.register_cpu("scale_in_place", |args| {
        let data = args.output::<f32>(0)?;
        let factor = args.f32(1)?;
        data.iter_mut().for_each(|value| *value *= factor);
        Ok(())
    });
    registry.register_cuda_source(
        "scale_in_place",
        r#"extern "C" __global__ void scale_in_place(float* data, float factor, unsigned int n) {
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) data[i] *= factor;
        }"#,
    );
    registry
}

/// How the rows of an expert kernel's test choose their experts.
#[derive(Clone, Copy, Debug)]
pub enum Choice {
    /// k distinct random experts per row.
    Random,
    /// Every row the same k experts (all tokens on them; the rest idle).
    Same,
    /// Random, with each row's last choice an id past the last expert.
    OutOfRange,
}

pub fn choose(choice: Choice, seed: u64, rows: usize, experts: usize, k: usize) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    let mut ids = Vec::with_capacity(rows * k);
    for row in 0..rows {
        let mut chosen: Vec<u32> = Vec::new();
        while chosen.len() < k {
            let id = match choice {
                Choice::Same => ((chosen.len() * 5 + 3) % experts) as u32,
                _ => (rng.next_u64() % experts as u64) as u32,
            };
            if !chosen.contains(&id) {
                chosen.push(id);
            }
        }
        if matches!(choice, Choice::OutOfRange) {
            chosen[k - 1] = (experts + row) as u32;
        }
        ids.extend(chosen);
    }
    ids
}
