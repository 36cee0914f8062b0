//! The protocol between `kscope profile` and the injection library
//! (kernelscope-inject), which `kscope profile` loads into the program it
//! profiles: the `KSCOPE_*` environment variables it starts the program
//! with, each named once here, and [`InjectionSettings`], what they say,
//! typed. kscope writes them with [`InjectionSettings::to_environment`]; the
//! library reads them once, at start-up, with
//! [`InjectionSettings::from_environment`]; kernelscope's runtime checks
//! [`TRACE_DIR_VARIABLE`] to leave CUPTI to the library. Names and values
//! are a protocol: a kscope binary and a library built apart must agree,
//! so they never change meaning.
//!
//! Two variables are diagnostics, which kscope never sets
//! ([`Diagnostics`]): given to kscope, they reach the program through its
//! environment untouched (`tools/gpu/graph_overhead_parts.sh`).

use std::ffi::OsString;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;

/// The folder the process writes its record file to, `<pid>.kst`. Its
/// presence also tells a kernelscope runtime inside the program that CUPTI
/// is the library's.
pub const TRACE_DIR_VARIABLE: &str = "KSCOPE_TRACE_DIR";
/// How API calls are recorded ([`ApiCallRecording`]).
pub const API_CALLS_VARIABLE: &str = "KSCOPE_API_CALLS";
/// How CUDA graphs are traced ([`GraphTracing`]).
pub const GRAPHS_VARIABLE: &str = "KSCOPE_GRAPHS";
/// The NVTX range name of a step, for a window of steps ([`StepWindow`]).
pub const STEP_VARIABLE: &str = "KSCOPE_STEP";
/// The window of steps recorded, `A..B` ([`StepWindow`]).
pub const STEP_WINDOW_VARIABLE: &str = "KSCOPE_STEP_WINDOW";
/// How often DRAM bytes are sampled, ns (absent or 0: not at all).
pub const DRAM_SAMPLING_INTERVAL_VARIABLE: &str = "KSCOPE_PM_INTERVAL_NS";
/// Parts of the recording left out, a comma list ([`OmittedParts`]).
pub const OMIT_VARIABLE: &str = "KSCOPE_INJECT_OMIT";
/// CUPTI's device buffer for records, MiB ([`Diagnostics`]).
pub const CUPTI_DEVICE_BUFFER_VARIABLE: &str = "KSCOPE_CUPTI_DEVICE_BUFFER_MB";

/// Every `KSCOPE_*` variable of the protocol.
pub const VARIABLES: [&str; 8] = [
    TRACE_DIR_VARIABLE,
    API_CALLS_VARIABLE,
    GRAPHS_VARIABLE,
    STEP_VARIABLE,
    STEP_WINDOW_VARIABLE,
    DRAM_SAMPLING_INTERVAL_VARIABLE,
    OMIT_VARIABLE,
    CUPTI_DEVICE_BUFFER_VARIABLE,
];

/// NVIDIA's: the library the CUDA driver loads inside `cuInit` (kscope
/// names the injection library).
pub const CUDA_INJECTION_VARIABLE: &str = "CUDA_INJECTION64_PATH";
/// NVIDIA's: the library the NVTX library loads on the program's first NVTX call.
pub const NVTX_INJECTION_VARIABLE: &str = "NVTX_INJECTION64_PATH";

/// Everything the variables tell the library.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InjectionSettings {
    /// [`TRACE_DIR_VARIABLE`]; without it the library records nothing.
    pub trace_dir: Option<PathBuf>,
    /// [`API_CALLS_VARIABLE`].
    pub api_calls: ApiCallRecording,
    /// [`GRAPHS_VARIABLE`].
    pub graphs: GraphTracing,
    /// [`STEP_VARIABLE`] and [`STEP_WINDOW_VARIABLE`]; `None`: every step.
    pub step_window: Option<StepWindow>,
    /// [`DRAM_SAMPLING_INTERVAL_VARIABLE`]; `None`: no DRAM sampling.
    pub dram_sampling_interval_ns: Option<NonZeroU64>,
    /// The variables kscope never sets.
    pub diagnostics: Diagnostics,
}

/// How the program's launches, graph launches, synchronisations and copies
/// are recorded (`kscope profile --api-calls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiCallRecording {
    /// CUPTI's activity records of these calls alone; the NVTX range a call
    /// was made in is found afterwards from its thread and time
    /// ([`crate::RANGE_BY_TIME`]). The cheapest for the program.
    #[default]
    Activity,
    /// A callback of the library's at each call's entry and exit, which
    /// reads the thread's open range then and there: costs the program more.
    Callbacks,
    /// None: kernels, copies and sets only (steps fall back to the whole
    /// run, kernels have no NVTX scope); for measuring what the rest costs.
    Off,
}

/// How CUDA graphs are recorded (`kscope profile --graphs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphTracing {
    /// Every kernel, copy and set a graph launch runs.
    #[default]
    Nodes,
    /// One time per graph launch (CUPTI's graph trace), written as a kernel
    /// named by [`crate::whole_graph_name`].
    Whole,
    /// One time per graph launch by two CUDA events around it, CUPTI never
    /// attached (the library is preloaded too); nothing else on the device.
    Events,
}

/// A window of steps (`kscope profile --step NAME --steps A..B`): steps are
/// the NVTX ranges named `step`, counted from 0; those numbered `first` to
/// `end - 1` are recorded. The library refuses a window with an empty name
/// or `first >= end` (kscope's flags make neither).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepWindow {
    /// The steps' NVTX range name.
    pub step: String,
    /// The first step recorded.
    pub first: u64,
    /// The step after the last recorded.
    pub end: u64,
}

/// The variables for finding what the recording costs the program, not for
/// profiles anyone reads; kscope never sets them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// [`OMIT_VARIABLE`].
    pub omitted: OmittedParts,
    /// [`CUPTI_DEVICE_BUFFER_VARIABLE`]; `None`: CUPTI's default.
    pub cupti_device_buffer_mib: Option<NonZeroUsize>,
}

/// Parts of the recording left out, to measure what each costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmittedParts {
    /// `clock`: CUPTI keeps its own clock (its records then do not line up
    /// with NVTX ranges and API calls: the profile's steps and scopes are wrong).
    pub clock: bool,
    /// `copies`: no copies or sets are recorded.
    pub copies: bool,
    /// `flusher`: no thread hands records to the file every flush period
    /// (they are written at exit).
    pub flusher: bool,
    /// `kernels`: no kernels are recorded (graph launches still are when
    /// graphs are traced whole; with nodes traced only CUPTI's attachment is paid).
    pub kernels: bool,
    /// `subscriber`: no CUPTI subscriber (no context callback: devices go
    /// undescribed and no DRAM sampler starts; API calls only as activity).
    pub subscriber: bool,
    /// `cupti`: CUPTI is never attached (only loading the library and NVTX are paid).
    pub cupti: bool,
}

/// What a variable said that the library cannot take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingProblem {
    /// The variable.
    pub variable: &'static str,
    /// What is wrong and what is done instead, one line.
    pub message: String,
    /// What the library does about it.
    pub effect: ProblemEffect,
}

/// What the library does about a [`SettingProblem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemEffect {
    /// Says it on stderr at start-up and uses the default.
    DefaultUsed,
    /// Does not attach CUPTI, giving the problem as why (a bad diagnostic).
    CuptiNotAttached,
}

/// The settings read from an environment and what could not be taken.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedSettings {
    /// The settings, a default where a variable was unset or wrong.
    pub settings: InjectionSettings,
    /// The variables set to what the library cannot take, in the order read.
    pub problems: Vec<SettingProblem>,
}

impl ApiCallRecording {
    /// Its value of [`API_CALLS_VARIABLE`].
    pub fn name(self) -> &'static str {
        match self {
            ApiCallRecording::Activity => "activity",
            ApiCallRecording::Callbacks => "callbacks",
            ApiCallRecording::Off => "off",
        }
    }
}

impl GraphTracing {
    /// Its value of [`GRAPHS_VARIABLE`].
    pub fn name(self) -> &'static str {
        match self {
            GraphTracing::Nodes => "nodes",
            GraphTracing::Whole => "whole",
            GraphTracing::Events => "events",
        }
    }
}

impl StepWindow {
    /// A window of steps named `step` from `A..B` (`first < end`, a name).
    pub fn parse(step: String, text: &str) -> Option<StepWindow> {
        let (first, end) = text.split_once("..")?;
        let (first, end) = (first.trim().parse().ok()?, end.trim().parse().ok()?);
        (first < end && !step.is_empty()).then_some(StepWindow { step, first, end })
    }
}

impl OmittedParts {
    /// The parts in the order [`OMIT_VARIABLE`] lists them, with their names.
    fn parts(&self) -> [(&'static str, bool); 6] {
        [
            ("clock", self.clock),
            ("copies", self.copies),
            ("flusher", self.flusher),
            ("kernels", self.kernels),
            ("subscriber", self.subscriber),
            ("cupti", self.cupti),
        ]
    }

    /// The part named `name`, if there is one.
    fn part_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "clock" => &mut self.clock,
            "copies" => &mut self.copies,
            "flusher" => &mut self.flusher,
            "kernels" => &mut self.kernels,
            "subscriber" => &mut self.subscriber,
            "cupti" => &mut self.cupti,
            _ => return None,
        })
    }
}

impl InjectionSettings {
    /// The variables kscope starts the program with: each name with its
    /// value, or `None` where it is to be removed (so that a value in
    /// kscope's own environment does not reach the program). The
    /// [`Diagnostics`] are given only where set, and never removed.
    pub fn to_environment(&self) -> Vec<(&'static str, Option<OsString>)> {
        let window = self.step_window.as_ref();
        let mut variables = vec![
            (TRACE_DIR_VARIABLE, self.trace_dir.clone().map(OsString::from)),
            (API_CALLS_VARIABLE, Some(self.api_calls.name().into())),
            (GRAPHS_VARIABLE, Some(self.graphs.name().into())),
            (STEP_VARIABLE, window.map(|window| window.step.clone().into())),
            (
                STEP_WINDOW_VARIABLE,
                window.map(|window| format!("{}..{}", window.first, window.end).into()),
            ),
            (
                DRAM_SAMPLING_INTERVAL_VARIABLE,
                self.dram_sampling_interval_ns
                    .map(|interval| interval.to_string().into()),
            ),
        ];
        let omitted: Vec<&str> = self
            .diagnostics
            .omitted
            .parts()
            .into_iter()
            .filter_map(|(name, left_out)| left_out.then_some(name))
            .collect();
        if !omitted.is_empty() {
            variables.push((OMIT_VARIABLE, Some(omitted.join(",").into())));
        }
        if let Some(mebibytes) = self.diagnostics.cupti_device_buffer_mib {
            variables.push((CUPTI_DEVICE_BUFFER_VARIABLE, Some(mebibytes.to_string().into())));
        }
        variables
    }

    /// The settings of this process's environment.
    pub fn from_environment() -> ParsedSettings {
        InjectionSettings::from_variables(|name| std::env::var_os(name))
    }

    /// The settings `variable` gives (a variable's value, `None` when
    /// unset). A value that is not UTF-8 counts as unset, but for the path
    /// of [`TRACE_DIR_VARIABLE`].
    pub fn from_variables(variable: impl Fn(&str) -> Option<OsString>) -> ParsedSettings {
        let text = |name: &str| variable(name).and_then(|value| value.into_string().ok());
        let mut problems = Vec::new();
        let mut problem = |variable: &'static str, message: String, effect: ProblemEffect| {
            problems.push(SettingProblem {
                variable,
                message,
                effect,
            })
        };
        let api_calls = match text(API_CALLS_VARIABLE).as_deref() {
            None | Some("activity") => ApiCallRecording::Activity,
            Some("callbacks") => ApiCallRecording::Callbacks,
            Some("off") => ApiCallRecording::Off,
            Some(other) => {
                problem(
                    API_CALLS_VARIABLE,
                    format!(
                        "{API_CALLS_VARIABLE}={other} is not activity, callbacks or off; recording activity"
                    ),
                    ProblemEffect::DefaultUsed,
                );
                ApiCallRecording::Activity
            }
        };
        let graphs = match text(GRAPHS_VARIABLE).as_deref() {
            None | Some("nodes") => GraphTracing::Nodes,
            Some("whole") => GraphTracing::Whole,
            Some("events") => GraphTracing::Events,
            Some(other) => {
                problem(
                    GRAPHS_VARIABLE,
                    format!("{GRAPHS_VARIABLE}={other} is not nodes, whole or events; tracing every node"),
                    ProblemEffect::DefaultUsed,
                );
                GraphTracing::Nodes
            }
        };
        let step_window = match (text(STEP_VARIABLE), text(STEP_WINDOW_VARIABLE)) {
            (Some(step), Some(window)) => {
                let parsed = StepWindow::parse(step, &window);
                if parsed.is_none() {
                    problem(
                        STEP_WINDOW_VARIABLE,
                        format!(
                            "{STEP_WINDOW_VARIABLE}={window} is not A..B with A < B; recording every step"
                        ),
                        ProblemEffect::DefaultUsed,
                    );
                }
                parsed
            }
            _ => None,
        };
        let dram_sampling_interval_ns = text(DRAM_SAMPLING_INTERVAL_VARIABLE)
            .and_then(|interval| interval.trim().parse::<u64>().ok())
            .and_then(NonZeroU64::new);
        let mut omitted = OmittedParts::default();
        let omit = text(OMIT_VARIABLE).unwrap_or_default();
        for part in omit.split(',').map(str::trim).filter(|part| !part.is_empty()) {
            match omitted.part_mut(part) {
                Some(left_out) => *left_out = true,
                None => problem(
                    OMIT_VARIABLE,
                    format!(
                        "{OMIT_VARIABLE} part {part:?} is not clock, copies, flusher, kernels, subscriber or cupti; ignored"
                    ),
                    ProblemEffect::DefaultUsed,
                ),
            }
        }
        let cupti_device_buffer_mib = text(CUPTI_DEVICE_BUFFER_VARIABLE).and_then(|megabytes| {
            let parsed = megabytes.trim().parse().ok().and_then(NonZeroUsize::new);
            if parsed.is_none() {
                problem(
                    CUPTI_DEVICE_BUFFER_VARIABLE,
                    format!(
                        "{CUPTI_DEVICE_BUFFER_VARIABLE}={megabytes} is not a whole number of MiB above 0"
                    ),
                    ProblemEffect::CuptiNotAttached,
                );
            }
            parsed
        });
        ParsedSettings {
            settings: InjectionSettings {
                trace_dir: variable(TRACE_DIR_VARIABLE).map(PathBuf::from),
                api_calls,
                graphs,
                step_window,
                dram_sampling_interval_ns,
                diagnostics: Diagnostics {
                    omitted,
                    cupti_device_buffer_mib,
                },
            },
            problems,
        }
    }
}

#[cfg(test)]
mod tests;
