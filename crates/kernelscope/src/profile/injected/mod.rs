//! Profiles of programs kernelscope did not run (`kscope profile -- CMD`):
//! the record files kscope's injection library wrote inside each process
//! of the program (kernelscope-trace frames: kernels, copies, sets, API
//! calls, NVTX ranges, devices) made into the same [`Profile`] kscope's
//! engine writes, so the report, the HTML page, the trace and `compare`
//! read it unchanged.
//!
//! - A dispatch is a kernel, copy or set the device ran; its scope is the
//!   NVTX ranges its launch was made inside, innermost last
//!   (`forward/layers.3/aten::mm`), below the step's own range.
//! - A step (the report's token) is found as [`StepRule`] says.
//! - A submission is one graph launch, or a step's eager work on one stream.
//! - Each process with device work is a rank, ordered by `RANK` where the
//!   launcher set it, else by when it started; all share one clock
//!   (CLOCK_MONOTONIC of one host), so none is shifted.
//! - Foreign kernels declare no bytes or flops. Where the program ran with
//!   `--dram-bytes-interval`, their bytes are the DRAM bytes measured by PM
//!   sampling and attributed by time (`bytes`), which `conditions.
//!   bytes_measured` says; else they have none and sit on no roofline.
//!   Device-to-device copies and sets carry the bytes CUPTI reports them
//!   moving.
//! - Foreign kernels declare no format either (`DispatchRecord::format` is
//!   none): their names follow the program's own naming, which says
//!   nothing kscope can trust, so the report groups them under `other`.
//! - Kernels that begin before the one before them on their stream ended
//!   mark the run as launching early, so the cross-check expects overlaps.

mod bytes;
mod calls;
mod names;
mod parts;
mod process;
mod records;
mod steps;

use super::conditions::Program;
use super::{Conditions, DispatchTiming, Profile, ProfileLevel, TimingMechanism, TimingMethod, Topology};
use crate::error::{Error, Result};
pub use parts::ProcessTrace;
use parts::{Built, RankParts};
pub use steps::StepRule;

/// A kernel's name as `kscope profile` shows it: demangled C++ without
/// parameters, inner template arguments elided past 160 characters; plain
/// names (kscope's own kernels) unchanged. What to map an in-process
/// profile's names through before setting them beside a program's.
pub fn readable_kernel_name(name: &str) -> String {
    names::readable(name)
}

/// The mode of a profile whose CUDA graphs were traced whole.
pub const WHOLE_GRAPHS_MODE: &str =
    "graph (each graph launch timed whole, the kernels inside it untraced: kscope profile --graphs whole)";

/// The mode of a profile whose graph launches were timed by CUDA events.
pub const EVENT_TIMED_GRAPHS_MODE: &str = "graph (each graph launch timed whole by CUDA events around cudaGraphLaunch, CUPTI not attached, nothing else on the device recorded: kscope profile --graphs events)";

/// What a profile of graph launches timed by events leaves out.
const EVENTS_WARNING: &str = "graph launches timed by CUDA events around cudaGraphLaunch (--graphs events), CUPTI not attached: nothing else the program ran on the device is recorded (eager kernels, copies, sets), nor graph launches through the driver API or a statically linked CUDA runtime";

/// The profile of a program from its processes' record files; `step`
/// names the NVTX ranges that are its steps, if the user gave one.
pub fn profile_of_program(
    processes: &[ProcessTrace],
    step: Option<&str>,
    command: Vec<String>,
    ended: String,
    tool: &str,
) -> Result<Profile> {
    let no_profile = |problem: String| Error::ProgramProfile { problem };
    if processes.is_empty() {
        return Err(no_profile(
            "no process of the program loaded CUDA, so nothing was recorded (is it a CUDA program, and does it find libcuda?)".into(),
        ));
    }
    let mut warnings = Vec::new();
    let mut built: Vec<Built> = processes
        .iter()
        .filter_map(|process| process::build(process, step, &mut warnings))
        .collect();
    if built.is_empty() {
        return Err(no_profile(format!(
            "the program ran no kernel, copy or set on a device ({} process{} recorded)",
            processes.len(),
            if processes.len() == 1 { "" } else { "es" }
        )));
    }
    built.sort_by_key(|process| (process.rank.unwrap_or(u32::MAX), process.first_ns));
    let epoch = built.iter().map(|process| process.first_ns).min().unwrap_or(0);
    for process in &mut built {
        process.shift(epoch);
    }
    // Said in the mode so that `compare` refuses to set a whole-graph
    // profile beside a node-by-node one without --force.
    let events_timed = built.iter().any(|process| process.events_timed);
    if events_timed {
        // Here, not in the CLI: a profile read again from kept records says it too.
        warnings.push(EVENTS_WARNING.into());
    }
    let mode = if events_timed {
        EVENT_TIMED_GRAPHS_MODE
    } else if built.iter().any(|process| process.whole_graphs) {
        WHOLE_GRAPHS_MODE
    } else if built.iter().any(|process| process.graphs) {
        "graph"
    } else {
        "eager"
    };
    let rule = built[0].rule.describe();
    if built.iter().any(|process| process.rule.describe() != rule) {
        warnings
            .push("the program's processes were cut into steps by different rules; rank 0's is named".into());
    }
    let devices: Vec<String> = built.iter().map(|process| process.device.clone()).collect();
    let timing = if events_timed {
        TimingMethod::current(TimingMechanism::CudaEvents).with_note(
            "around each cudaGraphLaunch, injected into the program (kscope profile --graphs events)",
        )
    } else {
        TimingMethod::current(TimingMechanism::CuptiInjected)
    };
    let conditions = Conditions {
        device: devices[0].clone(),
        backend: "cuda".into(),
        driver: None,
        mode: mode.into(),
        profiling: ProfileLevel::Dispatch,
        submission_timing: timing.clone(),
        dispatch_timing: DispatchTiming::Supported { method: timing },
        model: None,
        weight_format: None,
        model_shape: None,
        ceilings: Default::default(),
        topology: None,
        early_launch: built.iter().any(|process| process.early_launch),
        cpu_kernels: None,
        profiled_tokens: None,
        bytes_measured: built
            .iter()
            .find_map(|process| process.bytes_measured)
            .map(|sample_ns| {
                format!(
                    "DRAM bytes by PM sampling ({} samples) attributed to kernels by time, slow kinds weighted down",
                    bytes::microseconds(sample_ns)
                )
            }),
        program: Some(Program {
            command,
            steps: rule,
            processes: built.len(),
            ended,
        }),
        anatomy: None,
    };
    let mut ranks = built.into_iter().map(|process| process.records);
    let first = ranks.next().expect("one at least");
    let others: Vec<(Profile, i128)> = ranks
        .zip(devices.iter().skip(1))
        .map(|(parts, device)| {
            let conditions = Conditions {
                device: device.clone(),
                ..conditions.clone()
            };
            (assemble(tool, conditions, parts, Vec::new()), 0)
        })
        .collect();
    let mut profile = assemble(tool, conditions, first, warnings);
    if !others.is_empty() {
        let topology = Topology {
            ranks: devices.len(),
            devices,
            library: "separate processes".into(),
            link: "one host".into(),
        };
        profile = profile.with_ranks(topology, others);
    }
    let mut profile = profile.with_idle();
    // A decoder's layers and roles, found from its kernels (said in
    // conditions.anatomy), so its report and `compare` line up by role.
    super::annotate(&mut profile);
    profile
        .check()
        .map_err(|problem| no_profile(format!("the records do not hold together: {problem}")))?;
    Ok(profile)
}

/// A profile of one rank's records.
fn assemble(tool: &str, conditions: Conditions, parts: RankParts, warnings: Vec<String>) -> Profile {
    let (counters, tokens, submissions, dispatches) = parts;
    Profile {
        schema: super::PROFILE_SCHEMA_VERSION,
        tool: tool.into(),
        conditions,
        counters,
        tokens,
        submissions,
        dispatches,
        warnings,
        ranks: Vec::new(),
        experts: None,
    }
}
