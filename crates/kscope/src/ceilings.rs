//! The ceilings every subcommand reads rates against (`info`, `bench`,
//! `run --profile`, `calibrate`): measured once per device per process by
//! `kernelscope::probes::ceilings`, printed the same way everywhere, with the
//! method of each figure and the physical limit beside the measured ones.

use anyhow::{Context, Result};
use kernelscope::probes::ceilings::{CeilingProbes, Measured, measure_ceilings};
use kernelscope::profile::Ceilings;
use serde_json::{Value, json};

/// The ceilings of the device `spec` names, with bandwidth probes of
/// `bandwidth_mib` MiB (`None`: 1024 on a GPU, 256 on the CPU; 0: none) and
/// a GPU GEMM of side `compute_size`
/// (`None`: the default; `Some(0)`: no compute ceiling). Measured on a
/// fresh handle without CUPTI, so call it before anything in this process
/// profiles at dispatch level.
pub fn measure(spec: &str, bandwidth_mib: Option<usize>, compute_size: Option<usize>) -> Result<Measured> {
    if let (Some(mib), Some(available)) = (bandwidth_mib, available_memory_mib()) {
        // The host holds the probe's pattern; on the CPU the device's
        // buffers are host memory too (the read's input, a copy's two).
        // `auto` may be the CPU, so it is counted as one.
        let copies = if spec.starts_with("cuda") { 1 } else { 3 };
        let needed = mib.saturating_mul(copies);
        if needed > available {
            anyhow::bail!(
                "--bandwidth-mib {mib}: the probes of {spec} hold about {needed} MiB of host memory and {available} MiB are available; pass a smaller --bandwidth-mib"
            );
        }
    }
    measure_ceilings(
        spec,
        CeilingProbes {
            bandwidth_bytes: bandwidth_mib.map(|mib| mib << 20),
            compute_size,
        },
    )
    .with_context(|| format!("measuring the ceilings of {spec}"))
}

/// [`kernelscope::host_memory::available_bytes`] in MiB.
fn available_memory_mib() -> Option<usize> {
    kernelscope::host_memory::available_bytes().map(|bytes| (bytes >> 20) as usize)
}

/// The ceilings as indented lines: each measured figure and its method,
/// the physical limits, and the ridge point.
pub fn lines(measured: &Measured) -> Vec<String> {
    let ceilings = &measured.ceilings;
    let mut lines = Vec::new();
    let mut line = |label: &str, value: String, method: &str| {
        lines.push(format!("{label}: {value} ({method})"));
    };
    let gbps = |gbps: f64| format!("{gbps:.1} GB/s");
    let gflops = |gflops: f64| format!("{gflops:.1} GFLOP/s");
    if let Some(read) = &ceilings.read {
        line("memory read ceiling", gbps(read.value), &read.method);
    }
    if let Some(write) = &ceilings.write {
        line("memory write ceiling", gbps(write.value), &write.method);
    }
    if let Some(copy) = &ceilings.copy {
        line("memory copy bandwidth", gbps(copy.value), &copy.method);
    }
    if let Some(physical) = &ceilings.physical_bandwidth {
        line("memory physical limit", gbps(physical.value), &physical.method);
    }
    if let Some(compute) = &ceilings.compute {
        line("compute ceiling", gflops(compute.value), &compute.method);
    }
    for peak in &measured.instruction_peaks {
        line(
            "  instruction",
            gflops(peak.gflops),
            &format!("{} on {} threads", peak.instruction, peak.threads),
        );
    }
    if let Some(physical) = &ceilings.physical_compute {
        line("compute physical limit", gflops(physical.value), &physical.method);
    }
    if let Some(ridge) = ceilings.ridge_point() {
        lines.push(format!(
            "ridge point: {ridge:.2} FLOP/B (compute ceiling over read ceiling: kernels below it are memory-bound)"
        ));
    }
    lines
}

/// The ceilings as JSON: each one's value and method, the CPU's
/// instruction peaks, and the ridge point.
pub fn to_json(measured: &Measured) -> Value {
    json!({
        "ceilings": ceilings_json(&measured.ceilings),
        "instruction_peaks": measured.instruction_peaks.iter().map(|peak| json!({
            "instruction": peak.instruction,
            "gflops": peak.gflops,
            "threads": peak.threads,
        })).collect::<Vec<_>>(),
        "ridge_point_flop_per_byte": measured.ceilings.ridge_point(),
    })
}

/// Each ceiling present as `{ "value": …, "unit": …, "method": … }`.
fn ceilings_json(ceilings: &Ceilings) -> Value {
    let entries: serde_json::Map<String, Value> = ceilings
        .each()
        .map(|(name, unit, ceiling)| {
            (
                name.to_string(),
                json!({ "value": ceiling.value, "unit": unit, "method": ceiling.method }),
            )
        })
        .collect();
    Value::Object(entries)
}
