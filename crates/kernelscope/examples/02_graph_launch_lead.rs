//! Example 02: where the time of a graph replay goes that no dispatch
//! accounts for. Captures graphs of N small kernels, replays each many
//! times, and prints per N: the submission time, the sum of its dispatch
//! times, the lead (submission start to first kernel) and the gaps. Run once
//! at `dispatch` level (CUPTI) and once at `submission` level (no CUPTI) to
//! see what CUPTI adds to a replay on the device.
//!
//! ```text
//! cargo run --release -p kernelscope --features cuda --example 02_graph_launch_lead -- \
//!     [--device cuda] [--replays N]
//! ```
//! `KSCOPE_PROFILE=submission|dispatch` picks the level (default dispatch).

use kernelscope::profile::ProfileLevel;
use kernelscope::runtime::LaunchGrid;
use kernelscope::{DType, Device, DeviceOptions, Dispatch};

const NODE_COUNTS: [usize; 5] = [1, 8, 32, 128, 512];
const ELEMENTS: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut spec = "cuda".to_string();
    let mut replays = 50usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--device" => spec = value,
            "--replays" => {
                replays = value
                    .parse()
                    .map_err(|_| format!("--replays: `{value}` is not a number"))?
            }
            other => return Err(format!("unknown flag `{other}` (flags: --device, --replays)").into()),
        }
    }
    let mut options = DeviceOptions::from_env()?;
    if std::env::var_os("KSCOPE_PROFILE").is_none() {
        options = options.profile(ProfileLevel::Dispatch);
    }
    let (device, _) = Device::open(&spec, options)?;
    let kernel = kernelscope::testing::inc_one_registry().kernel(&device, "inc_one")?;
    let input = kernelscope::testing::random_f32(7, ELEMENTS);
    let ping = device.buffer_from_slice(&input, &[ELEMENTS])?;
    let pong = device.alloc(DType::F32, &[ELEMENTS])?;
    println!(
        "{} | profiling {:?} | {replays} replays per graph",
        device.name(),
        device.profiler().level()
    );
    println!("| nodes | submission µs | dispatch sum µs | lead µs | gaps µs | host enqueue µs |");
    println!("|-------|---------------|-----------------|---------|---------|-----------------|");
    for nodes in NODE_COUNTS {
        let mut encoder = device.command_encoder();
        encoder.begin_capture()?;
        for step in 0..nodes {
            let (from, to) = if step % 2 == 0 {
                (&ping, &pong)
            } else {
                (&pong, &ping)
            };
            encoder.dispatch(
                Dispatch::new(&kernel)
                    .read(from)
                    .write(to)
                    .param(ELEMENTS as u32)
                    .grid(LaunchGrid::linear(ELEMENTS, 256))
                    .cost(4 * ELEMENTS as u64, 4 * ELEMENTS as u64, ELEMENTS as u64),
            )?;
        }
        let graph = encoder.end_capture()?;
        // The first replay captures and instantiates the CUDA graph.
        encoder.replay(&graph)?;
        encoder.commit_and_wait()?;
        device.profiler().reset();
        for _ in 0..replays {
            encoder.replay(&graph)?;
            encoder.commit_and_wait()?;
        }
        let profile = device.profile(device.conditions("graph", None));
        let per = |total: u64| total as f64 / replays as f64 / 1e3;
        let submission: u64 = profile.submissions.iter().map(|s| s.duration_ns()).sum();
        let enqueue: u64 = profile.submissions.iter().map(|s| s.host_enqueue_ns()).sum();
        match kernelscope::profile::cross_check(&profile).first() {
            Some(check) => println!(
                "| {nodes:5} | {:13.1} | {:15.1} | {:7.1} | {:7.1} | {:15.1} |",
                per(check.submission_ns),
                per(check.dispatch_sum_ns),
                per(check.idle.before_ns),
                per(check.idle.between_ns + check.idle.after_ns),
                per(enqueue)
            ),
            None => println!(
                "| {nodes:5} | {:13.1} | - | - | - | {:15.1} |",
                per(submission),
                per(enqueue)
            ),
        }
    }
    Ok(())
}
