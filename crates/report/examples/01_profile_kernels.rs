//! Example 01: register a few kernels, run them as a pretend two-layer
//! "decode" for several tokens, and print the profile report: per token,
//! per layer, per op and kernel, the submission table, counters and the
//! cross-check. Optionally writes the JSON profile and a Chrome trace.
//!
//! ```text
//! cargo run --release -p kernelscope-report --example 01_profile_kernels -- \
//!     [--tokens N] [--profile-json FILE] [--trace FILE] [--slowdown PERCENT]
//! ```
//!
//! `--slowdown 20` makes the `scale` kernel do 20% more passes, so that
//! `kscope compare base.json slow.json` has a regression to find.
//! `KSCOPE_PROFILE=off|submission|dispatch` picks the level (default dispatch).

use std::path::PathBuf;

use kernelscope::profile::{Phase, ProfileLevel};
use kernelscope::{DType, Device, DeviceOptions, Dispatch, KernelRegistry, OpKind};
use kernelscope_report::{chrome_trace, render_report};

const ELEMENTS: usize = 1 << 20;

struct Options {
    tokens: u32,
    profile_json: Option<PathBuf>,
    trace: Option<PathBuf>,
    slowdown_percent: u32,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        tokens: 8,
        profile_json: None,
        trace: None,
        slowdown_percent: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--tokens" => options.tokens = value()?.parse().map_err(|_| "--tokens needs a number")?,
            "--profile-json" => options.profile_json = Some(value()?.into()),
            "--trace" => options.trace = Some(value()?.into()),
            "--slowdown" => {
                options.slowdown_percent = value()?.parse().map_err(|_| "--slowdown needs a percentage")?
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(options)
}

/// The example's kernels: `inc_one`, a scale, an add, and every op.
fn registry(slowdown_percent: u32) -> KernelRegistry {
    let mut registry = kernelscope::ops::registry();
    registry.register_cpu("inc_one", |args| {
        let (input, output) = (args.input::<f32>(0)?, args.output::<f32>(1)?);
        output.iter_mut().zip(input).for_each(|(o, i)| *o = i + 1.0);
        Ok(())
    });
    registry.register_cpu("scale", move |args| {
        let (input, output, factor) = (args.input::<f32>(0)?, args.output::<f32>(1)?, args.f32(2)?);
        let start = std::time::Instant::now();
        output.iter_mut().zip(input).for_each(|(o, i)| *o = i * factor);
        // Spinning for a share of the real work stands in for a slower kernel.
        let slower = start.elapsed() * slowdown_percent / 100;
        let spin = std::time::Instant::now();
        while spin.elapsed() < slower {
            std::hint::spin_loop();
        }
        Ok(())
    });
    registry.register_cpu("add", |args| {
        let (a, b, output) = (
            args.input::<f32>(0)?,
            args.input::<f32>(1)?,
            args.output::<f32>(2)?,
        );
        output
            .iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(o, (a, b))| *o = a + b);
        Ok(())
    });
    registry
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = parse_options()?;
    let mut device_options = DeviceOptions::from_env()?;
    if std::env::var_os("KSCOPE_PROFILE").is_none() {
        device_options = device_options.profile(ProfileLevel::Dispatch);
    }
    let device = Device::cpu_with(device_options);
    // The ceilings the roofline divides by: read, write and copy probes of
    // 64 MiB and the CPU's widest multiply-add instructions.
    let probes = kernelscope::probes::ceilings::CeilingProbes {
        bandwidth_bytes: Some(64 << 20),
        compute_size: None,
    };
    let ceilings = kernelscope::probes::ceilings::measure_on(&device, probes)?.ceilings;
    device.profiler().reset();

    let registry = registry(options.slowdown_percent);
    let inc_one = registry.kernel(&device, "inc_one")?;
    let scale = registry.kernel(&device, "scale")?;
    let add = registry.kernel(&device, "add")?;
    let copy = kernelscope::ops::copy::Copy::new(&registry, &device)?;

    let bytes = (ELEMENTS * 4) as u64;
    let input: Vec<f32> = kernelscope::testing::random_f32(42, ELEMENTS);
    let hidden = device.buffer_from_slice(&input, &[ELEMENTS])?;
    let query = device.alloc(DType::F32, &[ELEMENTS])?;
    let key = device.alloc(DType::F32, &[ELEMENTS])?;
    let mixed = device.alloc(DType::F32, &[ELEMENTS])?;

    let mut encoder = device.command_encoder();
    let run_token = |encoder: &mut kernelscope::CommandEncoder| -> kernelscope::Result<()> {
        for layer in 0..2 {
            // Two independent dispatches (they may overlap: no barrier) ...
            encoder.set_scope(&format!("layer.{layer}.attn"));
            let scaled = Dispatch::new(&scale).read(&hidden).write(&query).param(0.5f32);
            encoder.dispatch(
                scaled
                    .cost(bytes, bytes, ELEMENTS as u64)
                    .op_kind(OpKind::ElemMul),
            )?;
            encoder.dispatch(Dispatch::new(&inc_one).read(&hidden).write(&key).cost(
                bytes,
                bytes,
                ELEMENTS as u64,
            ))?;
            // ... then one that reads both: the tracker places a barrier.
            encoder.set_scope(&format!("layer.{layer}.mlp"));
            let summed = Dispatch::new(&add).read(&query).read(&key).write(&mixed);
            encoder.dispatch(
                summed
                    .cost(2 * bytes, bytes, ELEMENTS as u64)
                    .op_kind(OpKind::ElemAdd),
            )?;
            copy.encode(encoder, &mixed, &hidden)?;
        }
        encoder.commit_and_wait_labeled("decode.token")
    };
    // One warm-up token (first touch of fresh memory), not profiled.
    run_token(&mut encoder)?;
    device.profiler().reset();
    for _ in 0..options.tokens {
        device.profiler().begin_token(Phase::Decode);
        run_token(&mut encoder)?;
        device.profiler().end_token();
    }

    let conditions = device
        .conditions("eager", Some("example 01: 2 pretend layers".into()))
        .with_ceilings(ceilings);
    let profile = device.profile(conditions);
    print!("{}", render_report(&profile));
    if let Some(path) = &options.profile_json {
        profile.save(path)?;
        println!("profile written to {}", path.display());
    }
    if let Some(path) = &options.trace {
        std::fs::write(path, serde_json::to_string(&chrome_trace(&profile))?)?;
        println!(
            "trace written to {} (open in https://ui.perfetto.dev)",
            path.display()
        );
    }
    Ok(())
}
