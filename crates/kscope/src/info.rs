//! `kscope info`: which backends this build has, which devices it finds,
//! how each can time submissions and dispatches, and its measured memory
//! bandwidth and peak compute rate (the roofline's two ceilings, whose ratio
//! is the ridge point).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use kernelscope::{Device, DeviceOptions};

use crate::model_args::{
    ComputePeak, peak_bandwidth, peak_compute, peak_read_bandwidth, peak_write_bandwidth,
};

/// Arguments of `kscope info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Skip the bandwidth measurement (a few large copies on each device).
    #[arg(long)]
    pub no_bandwidth: bool,
    /// Size of each bandwidth-probe copy in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub bandwidth_mib: u64,
    /// Skip the compute measurement (a few large bf16 GEMMs on each device).
    #[arg(long)]
    pub no_compute: bool,
    /// Side of the compute probe's square bf16 GEMM, up to 16384 (default
    /// 8192 on a GPU, 512 on the CPU; 0 skips it).
    #[arg(long, value_name = "N", value_parser = crate::model_args::compute_size, conflicts_with = "no_compute")]
    pub compute_size: Option<usize>,
}

/// What `kscope info` measured on one device.
struct Measured {
    /// Copy bandwidth in GB/s, read + write.
    bandwidth: Option<f64>,
    /// Streaming-read bandwidth in GB/s, bytes read.
    read_bandwidth: Option<f64>,
    /// Streaming-write bandwidth in GB/s, bytes written.
    write_bandwidth: Option<f64>,
    /// Peak bf16 GEMM rate.
    compute: Option<ComputePeak>,
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
    let compute_size = if args.no_compute {
        Some(0)
    } else {
        args.compute_size
    };
    let cpu = Device::cpu_with(DeviceOptions::new());
    let measured = Measured {
        bandwidth: if args.no_bandwidth {
            None
        } else {
            Some(kernelscope::ops::copy::measure_bandwidth(
                &cpu,
                (args.bandwidth_mib as usize) << 20,
                5,
            )?)
        },
        read_bandwidth: if args.no_bandwidth {
            None
        } else {
            Some(peak_read_bandwidth("cpu", args.bandwidth_mib as usize)?)
        },
        write_bandwidth: if args.no_bandwidth {
            None
        } else {
            Some(peak_write_bandwidth("cpu", args.bandwidth_mib as usize)?)
        },
        compute: peak_compute("cpu", compute_size)?,
    };
    describe(&cpu, &measured, args.bandwidth_mib)?;
    match Device::cuda_device_count() {
        Ok(count) => {
            for ordinal in 0..count {
                // Opened at dispatch level so the report shows what profiling would use.
                let options = DeviceOptions::new().profile(kernelscope::profile::ProfileLevel::Dispatch);
                // Peaks first, before the dispatch-level handle starts CUPTI.
                let spec = format!("cuda:{ordinal}");
                let measured = Measured {
                    bandwidth: if args.no_bandwidth {
                        None
                    } else {
                        Some(peak_bandwidth(&spec, args.bandwidth_mib as usize)?)
                    },
                    read_bandwidth: if args.no_bandwidth {
                        None
                    } else {
                        Some(peak_read_bandwidth(&spec, args.bandwidth_mib as usize)?)
                    },
                    write_bandwidth: if args.no_bandwidth {
                        None
                    } else {
                        Some(peak_write_bandwidth(&spec, args.bandwidth_mib as usize)?)
                    },
                    compute: peak_compute(&spec, compute_size)?,
                };
                match Device::cuda_with(ordinal, options) {
                    Ok(device) => describe(&device, &measured, args.bandwidth_mib)?,
                    Err(error) => println!(
                        "  cuda:{ordinal}: cannot be opened: {}",
                        crate::errors::describe(&error)
                    ),
                }
            }
        }
        Err(kernelscope::Error::BackendUnavailable { source, remedies, .. }) => {
            println!(
                "  cuda: none usable: {source}; {}",
                crate::errors::flags_for(remedies)
            )
        }
        Err(error) => println!("  cuda: none usable: {}", crate::errors::describe(&error)),
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(device: &Device, measured: &Measured, mebibytes: u64) -> Result<()> {
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
    if let Some(gbps) = measured.bandwidth {
        println!("    memory bandwidth: {gbps:.1} GB/s (best of 5 copies of {mebibytes} MiB, read + write)");
    }
    if let Some(gbps) = measured.read_bandwidth {
        println!(
            "    memory read bandwidth: {gbps:.1} GB/s (best of 5 streaming reads of {mebibytes} MiB, bytes read)"
        );
    }
    if let Some(gbps) = measured.write_bandwidth {
        println!(
            "    memory write bandwidth: {gbps:.1} GB/s (best of 5 streaming writes of {mebibytes} MiB, bytes written)"
        );
    }
    if let Some(peak) = measured.compute {
        println!("    peak compute: {:.1} GFLOP/s ({})", peak.gflops, peak.method());
        if let Some(gbps) = measured.bandwidth {
            println!(
                "    ridge point: {:.2} FLOP/B (peak compute over memory bandwidth: kernels below it are memory-bound)",
                peak.gflops / gbps
            );
        }
    }
    Ok(())
}
