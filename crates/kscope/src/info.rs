//! `kscope info`: which backends this build has, which devices it finds,
//! how each can time submissions and dispatches, and its ceilings (memory
//! read, write and copy bandwidth, compute, the physical limits, each with
//! its method), as text or JSON.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use kernelscope::probes::ceilings::Measured;
use kernelscope::{Device, DeviceOptions};
use serde_json::json;

/// Arguments of `kscope info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Skip the bandwidth measurement (a few large reads, writes and
    /// copies on each device).
    #[arg(long)]
    pub no_bandwidth: bool,
    /// Size of each bandwidth probe in MiB (default 1024 on a GPU, 256 on
    /// the CPU).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub bandwidth_mib: Option<u64>,
    /// Skip the compute measurement (a few large bf16 GEMMs on a GPU, the
    /// widest multiply-add instructions on the CPU).
    #[arg(long)]
    pub no_compute: bool,
    /// Side of a GPU's compute probe (a square bf16 GEMM), up to 16384
    /// (default 8192; 0 skips it). The CPU's probe takes no size.
    #[arg(long, value_name = "N", value_parser = crate::model_args::compute_size, conflicts_with = "no_compute")]
    pub compute_size: Option<usize>,
    /// Print one JSON object (every device's capabilities and ceilings,
    /// each ceiling with its unit and method) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `kscope info` found of one device.
struct Found {
    /// The device, when it opened.
    device: Option<Device>,
    /// Its name, or the spec it was asked for by when it did not open.
    name: String,
    /// Why it did not open.
    problem: Option<String>,
    /// Its ceilings.
    measured: Measured,
}

pub fn run(args: InfoArgs) -> Result<ExitCode> {
    let backends = if cfg!(feature = "cuda") {
        "cpu, cuda"
    } else {
        "cpu"
    };
    let bandwidth_mib = if args.no_bandwidth {
        Some(0)
    } else {
        args.bandwidth_mib.map(|mib| mib as usize)
    };
    let compute_size = if args.no_compute {
        Some(0)
    } else {
        args.compute_size
    };
    let cpu = Device::cpu_with(DeviceOptions::new());
    let mut found = vec![Found {
        name: cpu.name().to_string(),
        measured: crate::ceilings::measure("cpu", bandwidth_mib, compute_size)?,
        device: Some(cpu),
        problem: None,
    }];
    let cuda_problem = match Device::cuda_device_count() {
        Ok(count) => {
            for ordinal in 0..count {
                // Ceilings first, before the dispatch-level handle starts CUPTI.
                let spec = format!("cuda:{ordinal}");
                let measured = crate::ceilings::measure(&spec, bandwidth_mib, compute_size)?;
                // Opened at dispatch level so the report shows what profiling would use.
                let options = DeviceOptions::new().profile(kernelscope::profile::ProfileLevel::Dispatch);
                found.push(match Device::cuda_with(ordinal, options) {
                    Ok(device) => Found {
                        name: device.name().to_string(),
                        device: Some(device),
                        problem: None,
                        measured,
                    },
                    Err(error) => Found {
                        name: spec,
                        device: None,
                        problem: Some(crate::errors::describe(&error)),
                        measured,
                    },
                });
            }
            None
        }
        Err(kernelscope::Error::BackendUnavailable { source, remedies, .. }) => {
            Some(format!("{source}; {}", crate::errors::flags_for(remedies)))
        }
        Err(error) => Some(crate::errors::describe(&error)),
    };
    match args.json {
        false => {
            println!("kscope {}", env!("CARGO_PKG_VERSION"));
            println!("backends compiled in: {backends}");
            println!("devices:");
            for device in &found {
                describe(device);
            }
            if let Some(problem) = &cuda_problem {
                println!("  cuda: none usable: {problem}");
            }
        }
        true => {
            let devices: Vec<_> = found.iter().map(device_json).collect();
            let report = json!({
                "kscope": env!("CARGO_PKG_VERSION"),
                "backends": backends.split(", ").collect::<Vec<_>>(),
                "devices": devices,
                "cuda_unavailable": cuda_problem,
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One device as JSON: its capabilities (when it opened) and ceilings.
fn device_json(found: &Found) -> serde_json::Value {
    let mut entry = crate::ceilings::to_json(&found.measured);
    entry["name"] = json!(found.name);
    entry["problem"] = json!(found.problem);
    if let Some(device) = &found.device {
        let capabilities = device.capabilities();
        entry["backend"] = json!(device.backend());
        entry["submission_timing"] = json!(capabilities.submission_timing.to_string());
        entry["dispatch_timing"] = json!(capabilities.dispatch_timing.describe());
        entry["dispatch_timing_in_graphs"] = json!(capabilities.dispatch_timing_in_graphs);
    }
    entry
}

fn describe(found: &Found) {
    let Some(device) = &found.device else {
        println!(
            "  {}: cannot be opened: {}",
            found.name,
            found.problem.as_deref().unwrap_or("unknown")
        );
        print_ceilings(&found.measured);
        return;
    };
    let capabilities = device.capabilities();
    println!("  {}", device.name());
    println!("    backend: {}", device.backend());
    println!(
        "    per-submission timing: supported ({})",
        capabilities.submission_timing
    );
    println!(
        "    per-dispatch timing: {}",
        capabilities.dispatch_timing.describe()
    );
    println!(
        "    per-dispatch timing inside graph replays: {}",
        if capabilities.dispatch_timing_in_graphs {
            "yes"
        } else {
            "no"
        }
    );
    if let Some(active) = capabilities.nvtx {
        let state = if active {
            "active (ranges for labels and scopes)"
        } else {
            "inactive (no libnvToolsExt on the loader path)"
        };
        println!("    nvtx: {state}");
    }
    print_ceilings(&found.measured);
}

fn print_ceilings(measured: &Measured) {
    for line in crate::ceilings::lines(measured) {
        println!("    {line}");
    }
}
