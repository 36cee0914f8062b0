//! The environment, read once. `kscope profile` starts the program with the
//! `KSCOPE_*` variables of [`kernelscope_trace::injection_settings`]; the
//! first entry point to run (CUDA's, NVTX's or a graph launch stood in
//! for) reads them here, says on stderr what it cannot take, and every
//! other module takes its values from [`settings`]. The launcher's numbering
//! of the process (torchrun's `RANK`, `LOCAL_RANK`, `WORLD_SIZE`), for the
//! record file's header, is read at the same time. Nothing else in the
//! library reads the environment.
//!
//! The lowest layer of the library: it uses no other module of it.

use std::io::Write;
use std::sync::OnceLock;

use kernelscope_trace::InjectionSettings;
use kernelscope_trace::injection_settings::{GraphTracing, OmittedParts, ProblemEffect};

/// What the process was started with.
pub(crate) struct Settings {
    /// The protocol's variables.
    pub(crate) injection: InjectionSettings,
    /// Why CUPTI is not to be attached: a diagnostic variable set to what
    /// the library cannot take ([`ProblemEffect::CuptiNotAttached`]).
    pub(crate) cupti_refused: Option<String>,
    /// The launcher's numbering of this process, where it gave one.
    pub(crate) rank: Option<u32>,
    pub(crate) local_rank: Option<u32>,
    pub(crate) world_size: Option<u32>,
}

/// The settings, read from the environment on the first call (problems said
/// on stderr then, once per process).
pub(crate) fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(read)
}

fn read() -> Settings {
    let parsed = InjectionSettings::from_environment();
    let mut cupti_refused = None;
    for problem in parsed.problems {
        match problem.effect {
            // Not eprintln: the first reader may be a graph launch of the
            // program's, where a closed stderr must not panic.
            ProblemEffect::DefaultUsed => {
                let _ = writeln!(std::io::stderr(), "kscope profile: {}", problem.message);
            }
            ProblemEffect::CuptiNotAttached => cupti_refused = Some(problem.message),
        }
    }
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.trim().parse().ok())
    };
    Settings {
        injection: parsed.settings,
        cupti_refused,
        rank: number("RANK"),
        local_rank: number("LOCAL_RANK"),
        world_size: number("WORLD_SIZE"),
    }
}

impl Settings {
    /// How CUDA graphs are recorded.
    pub(crate) fn graph_tracing(&self) -> GraphTracing {
        self.injection.graphs
    }

    /// The parts of the recording an overhead experiment leaves out.
    pub(crate) fn omitted(&self) -> OmittedParts {
        self.injection.diagnostics.omitted
    }

    /// Whether a window of steps was asked for (and could be taken).
    pub(crate) fn windowed(&self) -> bool {
        self.injection.step_window.is_some()
    }

    /// The DRAM sampling interval asked for, ns; `None` when none was, and
    /// under a window of steps, which detaches CUPTI under the sampler.
    pub(crate) fn dram_sampling_interval_ns(&self) -> Option<u64> {
        if self.windowed() {
            return None;
        }
        self.injection
            .dram_sampling_interval_ns
            .map(|interval| interval.get())
    }

    /// Whether CUPTI is ever to be attached: not when graph launches are
    /// timed by events (nor when an overhead experiment leaves it out).
    pub(crate) fn attaches_cupti(&self) -> bool {
        !self.omitted().cupti && self.graph_tracing() != GraphTracing::Events
    }
}
