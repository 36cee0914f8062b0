//! `kscope info`: which backends this build has, which devices it finds,
//! how each can time submissions and dispatches, and its measured memory
//! bandwidth (the roofline's denominator).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use kernelscope::{Device, DeviceOptions};

/// Arguments of `kscope info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Skip the bandwidth measurement (a few large copies on each device).
    #[arg(long)]
    pub no_bandwidth: bool,
    /// Size of each bandwidth-probe copy in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub bandwidth_mib: u64,
}

pub fn run(args: InfoArgs) -> Result<ExitCode> {
    let backends = if cfg!(feature = "cuda") {
        "cpu, cuda"
    } else {
        "cpu"
    };
    println!("kscope {}", env!("CARGO_PKG_VERSION"));
    println!("backends compiled in: {backends}");
    println!("devices:");
    let cpu = Device::cpu_with(DeviceOptions::new());
    let bandwidth = if args.no_bandwidth {
        None
    } else {
        Some(kernelscope::ops::copy::measure_bandwidth(
            &cpu,
            (args.bandwidth_mib as usize) << 20,
            5,
        )?)
    };
    describe(&cpu, bandwidth, args.bandwidth_mib)?;
    match Device::cuda_device_count() {
        Ok(count) => {
            for ordinal in 0..count {
                // Opened at dispatch level so the report shows what profiling would use.
                let options = DeviceOptions::new().profile(kernelscope::profile::ProfileLevel::Dispatch);
                // Bandwidth first, before the dispatch-level handle starts CUPTI.
                let bandwidth = if args.no_bandwidth {
                    None
                } else {
                    Some(crate::model_args::peak_bandwidth(
                        &format!("cuda:{ordinal}"),
                        args.bandwidth_mib as usize,
                    )?)
                };
                match Device::cuda_with(ordinal, options) {
                    Ok(device) => describe(&device, bandwidth, args.bandwidth_mib)?,
                    Err(error) => println!("  cuda:{ordinal}: cannot be opened: {error}"),
                }
            }
        }
        Err(kernelscope::Error::BackendUnavailable { reason, .. }) => {
            println!("  cuda: none usable: {reason}")
        }
        Err(error) => println!("  cuda: none usable: {error}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(device: &Device, bandwidth: Option<f64>, mebibytes: u64) -> Result<()> {
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
    if let Some(gbps) = bandwidth {
        println!("    memory bandwidth: {gbps:.1} GB/s (best of 5 copies of {mebibytes} MiB, read + write)");
    }
    Ok(())
}
