//! The flags of `kscope profile`, and what they decide before the program
//! starts: how DRAM bytes are sampled, how API calls and graphs are traced,
//! all told to the injection library as [`InjectionSettings`].

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use clap::Args;
use kernelscope_trace::InjectionSettings;
use kernelscope_trace::injection_settings::{ApiCallRecording, Diagnostics, GraphTracing, StepWindow};

use crate::report::ReportFlags;

/// Arguments of `kscope profile`.
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// The model the program runs (a GGUF file or a Hugging Face
    /// directory): each role's bytes and flops per token come from its
    /// tensors' shapes and formats, shared among the role's kernels by
    /// time, so the roofline and the gap account's GB/s work for a program
    /// that declares none. Where DRAM bytes were measured, the model's
    /// replace them for those kernels and the measured ones are kept
    /// beside (the `bytes:` line compares the two). Without it, a `.gguf`
    /// file named in the command (llama-bench's `-m FILE`) is used, and
    /// said.
    #[arg(long, value_name = "FILE|DIR")]
    pub model: Option<PathBuf>,
    /// NVTX ranges of this name are the steps (the report's tokens), e.g.
    /// `--step decode` for `torch.cuda.nvtx.range("decode")`. Without it (or
    /// when the program opens no such range) each CUDA graph launch is a
    /// step, else the work between two host synchronisations, else the run.
    #[arg(long, value_name = "NAME")]
    pub step: Option<String>,
    /// Record only the steps numbered A to B-1 (counting the --step ranges
    /// the program opens from 0, e.g. 100..116): CUPTI collects nothing
    /// before the A-th range opens or after the B-th closes, so the rest
    /// of a long run pays no profiling cost (CUPTI is attached when the
    /// window opens and detached when it closes). The report's tokens 0..
    /// are these steps. Not with --dram-bytes-interval.
    #[arg(long, value_name = "A..B", value_parser = crate::report::token_window, requires = "step", conflicts_with_all = ["from_records", "dram_bytes_interval"])]
    pub steps: Option<std::ops::Range<u32>>,
    /// Write the profile as JSON to FILE (`kscope report`, `kscope compare` read it).
    #[arg(long, value_name = "FILE")]
    pub profile_json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of the run to FILE.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub shape: ReportFlags,
    /// Keep each process's record file (`<pid>.kst`) in DIR, which must be
    /// empty or absent; by default they are deleted once read.
    #[arg(long, value_name = "DIR")]
    pub keep_records: Option<PathBuf>,
    /// The injection library to load into CMD (default: libkscope_inject.so
    /// beside the kscope executable; `cargo build --release -p
    /// kernelscope-inject` builds it).
    #[arg(long, value_name = "FILE")]
    pub injection: Option<PathBuf>,
    /// Measure each kernel's DRAM bytes (read and written) by sampling
    /// every device's DRAM counters every MICROSECONDS (CUPTI PM sampling;
    /// each sample's bytes go to the kernels running in it by their time
    /// in it, less to kernels a fit over every sample finds barely moving
    /// memory), which places the program's kernels on the roofline. On by
    /// default, every 20 µs: on an H200 it cost llama-bench's decode
    /// nothing measurable beyond what tracing its kernels costs
    /// (docs/PERF.md, run S). Off by default with --steps or --graphs events,
    /// which it cannot run beside. Needs profiling rights: root, or for
    /// other users the nvidia module loaded with
    /// `NVreg_RestrictProfilingToAdminUsers=0`; without them each process
    /// says why in one line on stderr and its kernels have no measured
    /// bytes. Intervals below 5 are raised to 5 (shorter ones lose samples
    /// silently; on an H200, samples every 10 µs were lost, and the
    /// profile says when they are). 0 turns it off.
    #[arg(long, value_name = "MICROSECONDS")]
    pub dram_bytes_interval: Option<u64>,
    /// How the program's launches, graph launches, synchronisations and
    /// copies are recorded: `activity` has CUPTI write a record of each
    /// (the cheapest for the program; the NVTX range a launch was made in
    /// is found from its thread and time), `callbacks` calls back into
    /// kscope at each one's entry and exit (costs the program more), `off`
    /// records none (steps fall back to the whole run and kernels have no
    /// NVTX scope: for measuring what recording them costs).
    #[arg(long, value_enum, value_name = "HOW", default_value_t = ApiCalls::Activity)]
    pub api_calls: ApiCalls,
    /// How CUDA graphs are traced: `nodes` times every kernel, copy and
    /// set a graph launch runs; `whole` times each graph launch as one
    /// dispatch (kind WholeGraph) and leaves the kernels inside it
    /// untraced, which costs a program that replays graphs of many small
    /// kernels far less (on an H100, a PyTorch decode of 240 kernels a
    /// graph ran about 20 % slower with nodes traced); `events` times each
    /// graph launch by two CUDA events around `cudaGraphLaunch` without
    /// attaching CUPTI at all (the injection library is preloaded), and
    /// records nothing else on the device: no eager kernel, copy or set,
    /// and no launch made through the driver API or a statically linked
    /// CUDA runtime (nvcc's default). It leaves CUPTI out because CUPTI's
    /// graph trace alone cost that decode 3-4 % on an H100 and an H200;
    /// events cost it 1.2 % on an H200.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = Graphs::Nodes)]
    pub graphs: Graphs,
    /// Read the record files of an earlier run kept with --keep-records
    /// from DIR instead of running a program (to cut them by another
    /// --step, say). Several folders make one profile: the folders each
    /// host of a distributed run kept, its ranks set side by side by their
    /// RANK. Their times are each host's clock as it was, so keep the
    /// hosts' clocks in step (NTP, PTP) for the ranks to line up.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with_all = ["command", "keep_records", "injection"])]
    pub from_records: Vec<PathBuf>,
    /// Overwrite --profile-json, --html and --trace files that exist.
    #[arg(long)]
    pub force: bool,
    /// The program and its arguments, after `--`.
    #[arg(required_unless_present = "from_records", last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// DRAM bytes are sampled every 20 µs unless asked otherwise.
const DEFAULT_DRAM_BYTES_INTERVAL_US: u64 = 20;

impl ProfileArgs {
    /// What the injection library is told (`KSCOPE_*` variables), its
    /// records going to `records`.
    pub(super) fn injection_settings(&self, records: &Path) -> InjectionSettings {
        let step_window = match (&self.step, &self.steps) {
            (Some(step), Some(window)) => Some(StepWindow {
                step: step.clone(),
                first: window.start.into(),
                end: window.end.into(),
            }),
            _ => None,
        };
        InjectionSettings {
            trace_dir: Some(records.to_path_buf()),
            api_calls: self.api_calls.into(),
            graphs: self.graphs.into(),
            step_window,
            dram_sampling_interval_ns: NonZeroU64::new(self.dram_sampling_interval().saturating_mul(1000)),
            // Never set by kscope: those in its own environment reach the program.
            diagnostics: Diagnostics::default(),
        }
    }

    /// How often DRAM bytes are sampled, in microseconds (0: not at all):
    /// as asked, else the default where nothing else rules sampling out.
    pub(super) fn dram_sampling_interval(&self) -> u64 {
        match self.dram_bytes_interval {
            Some(interval) => interval,
            None if self.steps.is_some() || self.graphs == Graphs::Events => 0,
            None => DEFAULT_DRAM_BYTES_INTERVAL_US,
        }
    }
}

/// How API calls are recorded (`--api-calls`), passed to the injection
/// library as `KSCOPE_API_CALLS` ([`ApiCallRecording`]).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiCalls {
    /// CUPTI's activity records of the calls.
    Activity,
    /// A kscope callback at each call.
    Callbacks,
    /// None.
    Off,
}

/// How CUDA graphs are traced (`--graphs`), passed to the injection
/// library as `KSCOPE_GRAPHS` ([`GraphTracing`]).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Graphs {
    /// Every kernel, copy and set inside a graph.
    Nodes,
    /// One time per graph launch.
    Whole,
    /// One time per graph launch, by CUDA events, without CUPTI.
    Events,
}

impl From<ApiCalls> for ApiCallRecording {
    fn from(api_calls: ApiCalls) -> ApiCallRecording {
        match api_calls {
            ApiCalls::Activity => ApiCallRecording::Activity,
            ApiCalls::Callbacks => ApiCallRecording::Callbacks,
            ApiCalls::Off => ApiCallRecording::Off,
        }
    }
}

impl From<Graphs> for GraphTracing {
    fn from(graphs: Graphs) -> GraphTracing {
        match graphs {
            Graphs::Nodes => GraphTracing::Nodes,
            Graphs::Whole => GraphTracing::Whole,
            Graphs::Events => GraphTracing::Events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        profile: ProfileArgs,
    }

    fn parse(flags: &[&str]) -> ProfileArgs {
        let words = ["kscope"].iter().chain(flags).chain(&["--", "true"]);
        Command::try_parse_from(words).expect("the flags parse").profile
    }

    fn interval(flags: &[&str]) -> u64 {
        parse(flags).dram_sampling_interval()
    }

    /// The library reads the flags' values as typed: `--graphs whole` is `KSCOPE_GRAPHS=whole`.
    #[test]
    fn flag_values_are_the_protocol_values() {
        use clap::ValueEnum;
        for api_calls in ApiCalls::value_variants() {
            let typed = api_calls.to_possible_value().expect("named");
            assert_eq!(typed.get_name(), ApiCallRecording::from(*api_calls).name());
        }
        for graphs in Graphs::value_variants() {
            let typed = graphs.to_possible_value().expect("named");
            assert_eq!(typed.get_name(), GraphTracing::from(*graphs).name());
        }
    }

    /// The variables a run with a window of steps starts the program with.
    #[test]
    fn the_flags_become_the_injection_settings() {
        let records = Path::new("/tmp/records");
        let windowed = parse(&["--step", "decode", "--steps", "2..5", "--api-calls", "callbacks"]);
        let environment: Vec<(&str, Option<std::ffi::OsString>)> =
            windowed.injection_settings(records).to_environment();
        let set = |name: &str| {
            environment
                .iter()
                .find(|(variable, _)| *variable == name)
                .and_then(|(_, value)| value.clone())
        };
        assert_eq!(set("KSCOPE_TRACE_DIR"), Some("/tmp/records".into()));
        assert_eq!(set("KSCOPE_API_CALLS"), Some("callbacks".into()));
        assert_eq!(set("KSCOPE_GRAPHS"), Some("nodes".into()));
        assert_eq!(set("KSCOPE_STEP"), Some("decode".into()));
        assert_eq!(set("KSCOPE_STEP_WINDOW"), Some("2..5".into()));
        // Removed from the program's environment: no DRAM sampling under a window.
        assert!(environment.contains(&("KSCOPE_PM_INTERVAL_NS", None)));
        let sampled = parse(&["--dram-bytes-interval", "37"]).injection_settings(records);
        assert_eq!(sampled.dram_sampling_interval_ns, NonZeroU64::new(37_000));
        assert_eq!(sampled.step_window, None);
    }

    #[test]
    fn dram_bytes_are_sampled_unless_asked_not_to_or_ruled_out() {
        assert_eq!(interval(&[]), DEFAULT_DRAM_BYTES_INTERVAL_US);
        assert_eq!(interval(&["--dram-bytes-interval", "0"]), 0);
        assert_eq!(interval(&["--dram-bytes-interval", "37"]), 37);
        assert_eq!(interval(&["--graphs", "events"]), 0);
        assert_eq!(interval(&["--graphs", "whole"]), DEFAULT_DRAM_BYTES_INTERVAL_US);
        assert_eq!(interval(&["--step", "decode", "--steps", "2..5"]), 0);
        assert_eq!(interval(&["--step", "decode"]), DEFAULT_DRAM_BYTES_INTERVAL_US);
    }
}
