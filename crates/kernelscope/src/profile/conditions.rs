//! The conditions a run was taken under (device, build, ceilings, timing,
//! topology of a split run, the program of a profile of another program):
//! what decides whether two profiles can be compared.

use serde::{Deserialize, Serialize};

use super::{DispatchTiming, ProfileLevel, TimingMethod};

/// The conditions a run was taken under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// The device's name (`cpu: AMD EPYC 7B13 (2 threads)`, `cuda:0 NVIDIA H200`).
    pub device: String,
    /// The backend (`cpu`, `cuda`).
    pub backend: String,
    /// Driver version, where there is one.
    pub driver: Option<String>,
    /// `eager` (dispatch by dispatch) or `graph` (captured and replayed).
    pub mode: String,
    /// The profiling level.
    pub profiling: ProfileLevel,
    /// How submissions were timed.
    pub submission_timing: TimingMethod,
    /// Whether and how dispatches were timed.
    pub dispatch_timing: DispatchTiming,
    /// The model or workload, where there is one.
    pub model: Option<String>,
    /// The weights' format as people name it, where there is a model: a
    /// dtype (`bf16`) or a GGUF file's type (`Q4_K_M`, `Q8_0`). Absent from
    /// profiles written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_format: Option<String>,
    /// The model's shape, where there is a model: its architecture, layers,
    /// widths, heads and vocabulary (`llama: 16 layers, hidden 2048, ...`),
    /// whatever its weights' format. Two runs of one shape in different
    /// weight formats are one model in two formats. Absent from profiles
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_shape: Option<String>,
    /// The ceilings the roofline is drawn against (read, write and copy
    /// bandwidth, compute, the physical limits), each with its method.
    /// Profiles before schema 3 recorded a copy bandwidth and a compute rate
    /// only, and load with those as the copy and compute ceilings.
    #[serde(default)]
    pub ceilings: super::Ceilings,
    /// How the run was split over devices (tensor parallelism); absent for
    /// one device, and from profiles written before splits existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// Whether kernels could begin before the one before them ended
    /// (programmatic dependent launch): their intervals on one stream may
    /// then overlap, which the cross-check otherwise flags. Absent (false)
    /// from profiles written before it was recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early_launch: bool,
    /// On a CPU, the instruction set its mat-vecs ran in
    /// (`cpu_simd::dot::describe`: `AVX-512 BF16 for bf16 weights (...),
    /// AVX2+FMA for the others; 8-bit integer products (quantized decode):
    /// ...`), set by
    /// whoever ran them; absent elsewhere and from profiles written before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_kernels: Option<String>,
    /// The tokens timed, where not every token was (`--profile-tokens`):
    /// the others carry counters only. Absent when every token was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled_tokens: Option<super::TokenSelection>,
    /// How dispatch bytes were measured, where they were not declared
    /// (`kscope profile`: DRAM bytes by PM sampling every N µs); absent
    /// where dispatches declare their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_measured: Option<String>,
    /// The program profiled from outside (`kscope profile -- CMD`): its
    /// command line, how its steps were found, how it ended. Absent for
    /// kscope's own runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Program>,
    /// How the layers and roles of the dispatches were found (kscope's
    /// engine names them; a program's are found from its records, see
    /// [`annotate`](super::annotate)). Absent from profiles written before
    /// roles were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anatomy: Option<String>,
}

impl Conditions {
    /// These conditions with the device's ceilings.
    pub fn with_ceilings(mut self, ceilings: super::Ceilings) -> Self {
        self.ceilings = ceilings;
        self
    }

    /// The roofline's ridge point in flops per byte (see
    /// [`Ceilings::ridge_point`](super::Ceilings::ridge_point)).
    pub fn ridge_point(&self) -> Option<f64> {
        self.ceilings.ridge_point()
    }

    /// The conditions that must match for two runs to be compared, as
    /// `name: a vs b` for each one that differs.
    pub fn differences(&self, other: &Conditions) -> Vec<String> {
        let mut differences = Vec::new();
        let mut check = |name: &str, a: &str, b: &str| {
            if a != b {
                differences.push(format!("{name}: {a} vs {b}"));
            }
        };
        check("device", &self.device, &other.device);
        check("backend", &self.backend, &other.backend);
        check("mode", &self.mode, &other.mode);
        check("profiling", self.profiling.name(), other.profiling.name());
        check(
            "driver",
            self.driver.as_deref().unwrap_or("none"),
            other.driver.as_deref().unwrap_or("none"),
        );
        check(
            "model",
            self.model.as_deref().unwrap_or("none"),
            other.model.as_deref().unwrap_or("none"),
        );
        let topology = |topology: &Option<Topology>| {
            topology
                .as_ref()
                .map_or_else(|| "one device".to_string(), Topology::describe)
        };
        check("topology", &topology(&self.topology), &topology(&other.topology));
        let program = |program: &Option<Program>| {
            program
                .as_ref()
                .map_or_else(|| "kscope's engine".to_string(), Program::name)
        };
        check("program", &program(&self.program), &program(&other.program));
        // The peaks are not compared: they are measured on the machine at
        // the start of each run, not chosen by the code under test, and
        // vary by a few percent between runs of the same device (the
        // comparison notes a large change, see `compare`).
        // Methods are compared as data (mechanism and revision), never by
        // their prose: a note such as why CUPTI was unavailable decides nothing.
        if self.submission_timing != other.submission_timing {
            differences.push(format!(
                "submission timing: {} vs {}",
                self.submission_timing, other.submission_timing
            ));
        }
        if !self.dispatch_timing.comparable_with(&other.dispatch_timing) {
            differences.push(format!(
                "dispatch timing: {} vs {}",
                self.dispatch_timing.describe(),
                other.dispatch_timing.describe()
            ));
        }
        differences
    }
}

/// How a run was split over devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Ranks (devices) in the split.
    pub ranks: usize,
    /// Each rank's device, rank 0 first.
    pub devices: Vec<String>,
    /// The collective library and its version (`NCCL 2.27.5`, `in-process`).
    pub library: String,
    /// How the devices are linked (`peer to peer, native atomics (NVLink)`).
    pub link: String,
}

impl Topology {
    /// One line: `2 ranks over cuda:0 …, cuda:1 … (NCCL 2.27.5; NVLink)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ranks over {} ({}; {})",
            self.ranks,
            self.devices.join(", "),
            self.library,
            self.link
        )
    }
}

/// The program a profile was taken of, in its conditions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The command line `kscope profile` ran.
    pub command: Vec<String>,
    /// How its steps were found (rank 0's rule).
    pub steps: String,
    /// Its processes that ran device work (the profile's ranks).
    pub processes: usize,
    /// How it ended (`exit 0`, `killed by signal 9`).
    pub ended: String,
}

impl Program {
    /// What the program is, for telling two apart: its executable's file
    /// name, and for an interpreter or launcher (`python`, `torchrun`) the
    /// script's.
    pub fn name(&self) -> String {
        let file_name = |text: &str| text.rsplit('/').next().unwrap_or(text).to_string();
        let Some(first) = self.command.first() else {
            return String::new();
        };
        let executable = file_name(first);
        let launcher = [
            "python",
            "torchrun",
            "accelerate",
            "deepspeed",
            "uv",
            "bash",
            "sh",
        ]
        .iter()
        .any(|launcher| executable.starts_with(launcher));
        match self.command[1..]
            .iter()
            .find(|argument| !argument.starts_with('-'))
        {
            Some(script) if launcher => format!("{executable} {}", file_name(script)),
            _ => executable,
        }
    }
}
