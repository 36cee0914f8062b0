//! `kscope calibrate`: checks the profiler's per-dispatch times against
//! kernels of known duration (a warp spinning for a counted number of SM
//! clock cycles, the clock rate measured in the same run), eagerly and in a
//! graph, and prints each error against the target (2 % or 0.1 µs, the
//! larger), raw and above the floor every kernel pays (a spin of 0 cycles);
//! then the device's ceilings (read, write and copy bandwidth, compute, the
//! physical limits, each with its method), which every roofline divides by.
//! Exits 1 when a time misses the target above the floor.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use kernelscope::probes::ceilings::Measured;
use kernelscope::probes::spin::{Calibration, allowed_error_ns, calibrate};
use kernelscope::profile::ProfileLevel;
use kernelscope::{Device, DeviceOptions};

/// Arguments of `kscope calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Device: auto (CUDA when a GPU is usable, else the CPU), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "md")]
    pub output: crate::bench::Output,
    /// The same as --output json.
    #[arg(long, conflicts_with = "output")]
    pub json: bool,
    /// Size of each bandwidth probe in MiB, up to 16384 (default 1024 on a
    /// GPU, 256 on the CPU; 0 skips them).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(0..=16384))]
    pub bandwidth_mib: Option<u64>,
    /// Side of a GPU's compute probe (a square bf16 GEMM), up to 16384
    /// (default 8192; 0 skips the compute ceiling).
    #[arg(long, value_name = "N", value_parser = crate::model_args::compute_size)]
    pub compute_size: Option<usize>,
}

fn microseconds(ns: f64) -> String {
    format!("{:.3}", ns / 1e3)
}

fn signed_microseconds(ns: f64) -> String {
    format!("{:+.3}", ns / 1e3)
}

fn print_markdown(device: &Device, calibration: &Calibration) {
    // On the CPU a "cycle" is a nanosecond of the host clock.
    let clock = if device.backend() == "cpu" {
        "host clock (1 cycle = 1 ns)"
    } else {
        "SM clock"
    };
    println!(
        "calibration on {} ({}): {clock} {:.1} MHz before, {:.1} MHz after ({:.3} % apart)",
        device.name(),
        device.backend(),
        calibration.clock_hz / 1e6,
        calibration.clock_hz_after / 1e6,
        100.0 * calibration.clock_drift()
    );
    let floor_graph = calibration.floor_graph_ns.map_or("-".into(), microseconds);
    println!(
        "a spin of 0 cycles (the floor of any dispatch): {} µs eager, {floor_graph} µs in a graph",
        microseconds(calibration.floor_eager_ns)
    );
    println!(
        "| known µs | cycles | eager µs | error µs | graph µs | error µs | allowed µs | within | within above the floor |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    for point in &calibration.points {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            microseconds(point.known_ns),
            point.cycles,
            microseconds(point.eager_ns),
            signed_microseconds(point.eager_error_ns()),
            point.graph_ns.map_or("-".into(), microseconds),
            point.graph_error_ns().map_or("-".into(), signed_microseconds),
            microseconds(allowed_error_ns(point.known_ns)),
            if point.within_target() { "yes" } else { "no" },
            if point.within_target_above_floor(calibration) {
                "yes"
            } else {
                "no"
            }
        );
    }
}

fn print_json(device: &Device, calibration: &Calibration, measured: &Measured) -> Result<()> {
    let points: Vec<_> = calibration
        .points
        .iter()
        .map(|point| {
            serde_json::json!({
                "known_ns": point.known_ns,
                "cycles": point.cycles,
                "eager_ns": point.eager_ns,
                "graph_ns": point.graph_ns,
                "allowed_error_ns": allowed_error_ns(point.known_ns),
                "within_target": point.within_target(),
                "within_target_above_floor": point.within_target_above_floor(calibration),
            })
        })
        .collect();
    let report = serde_json::json!({
        "device_name": device.name(),
        "backend": device.backend(),
        "clock_hz": calibration.clock_hz,
        "clock_hz_after": calibration.clock_hz_after,
        "floor_eager_ns": calibration.floor_eager_ns,
        "floor_graph_ns": calibration.floor_graph_ns,
        "points": points,
        "ceilings": crate::ceilings::to_json(measured),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

pub fn run(args: CalibrateArgs) -> Result<ExitCode> {
    // The ceilings first, on a handle of their own, before CUPTI starts.
    let measured = crate::ceilings::measure(
        &args.device,
        args.bandwidth_mib.map(|mib| mib as usize),
        args.compute_size,
    )?;
    let (device, _) = Device::open(&args.device, DeviceOptions::new().profile(ProfileLevel::Dispatch))?;
    let calibration = calibrate(&device)?;
    if args.json || matches!(args.output, crate::bench::Output::Json) {
        print_json(&device, &calibration, &measured)?;
    } else {
        print_markdown(&device, &calibration);
        println!("\nceilings of {}:", device.name());
        for line in crate::ceilings::lines(&measured) {
            println!("  {line}");
        }
    }
    let missed = calibration
        .points
        .iter()
        .filter(|point| !point.within_target())
        .count();
    if missed > 0 {
        eprintln!(
            "calibrate: {missed} of {} durations missed the target (2 % or 0.1 µs)",
            calibration.points.len()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
