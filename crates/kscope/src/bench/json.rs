//! `kscope bench --output json`: one object per test, with the conditions
//! and ceilings it ran under, in the manner of llama-bench's JSON.

use anyhow::Result;
use kernelscope::Device;
use kernelscope::profile::Phase;
use kernelscope_model::Model;
use serde_json::json;

use super::args::BenchArgs;
use super::results::{Ceilings, Row};

/// The rows as a JSON array, one object per test with everything that
/// produced it.
pub(super) fn print_json(
    args: &BenchArgs,
    device: &Device,
    model: &Model,
    rows: &[Row],
    ceilings: &Ceilings,
) -> Result<()> {
    let dtype = model.weight_format();
    let entries: Vec<_> = rows
        .iter()
        .map(|row| {
            let Row {
                test,
                count,
                phase,
                spread,
                ..
            } = row;
            json!({
                "model": model.name(),
                "backend": device.backend(),
                "device_name": device.name(),
                "tp": model.ranks(),
                "devices": model.devices().iter().map(|device| device.name().to_string()).collect::<Vec<_>>(),
                "dtype": dtype,
                "mode": model.execution_mode().name(),
                "fused": model.fusion(),
                "early_launch": device.capabilities().early_launch_in_graphs,
                "cpu_kernels": (device.backend() == "cpu").then(kernelscope::ops::describe_cpu_kernels),
                "profiling": args.profile.name(),
                "profile_tokens": args.profile_tokens.unwrap_or_default().to_string(),
                "test": test,
                "n_prompt": if *phase == Phase::Prefill { *count } else { 0 },
                "n_gen": if *phase == Phase::Decode { *count } else { 0 },
                "n_depth": args.depth,
                "prefill_chunk": model.prefill_chunk(),
                "reps": spread.count,
                "mean_tps": spread.mean,
                "stddev_tps": spread.stddev,
                "unprofiled_mean_tps": row.unprofiled.as_ref().map(|unprofiled| unprofiled.mean),
                "unprofiled_stddev_tps": row.unprofiled.as_ref().map(|unprofiled| unprofiled.stddev),
                "profiling_cost": row.profiling_cost(),
                "weight_bytes_per_token": ceilings.bytes_per_token,
                "bandwidth_gbps": ceilings.measured.ceilings.read.as_ref().map(|read| read.value),
                "bandwidth_basis": "read",
                "roofline_tps": ceilings.roofline,
                "peak_compute_gflops": ceilings.measured.ceilings.compute_gflops(),
                "ceilings": crate::ceilings::to_json(&ceilings.measured),
            })
        })
        .collect();
    println!("{}", serde_json::to_string_pretty(&entries)?);
    Ok(())
}
