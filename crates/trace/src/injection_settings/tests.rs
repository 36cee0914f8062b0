//! The protocol's settings survive being written and read back, and what
//! the library cannot take is named with what it does instead.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

/// The settings an environment of `pairs` gives.
fn parsed(pairs: &[(&str, &str)]) -> ParsedSettings {
    let environment: HashMap<String, OsString> = pairs
        .iter()
        .map(|(name, value)| (name.to_string(), OsString::from(value)))
        .collect();
    InjectionSettings::from_variables(|name| environment.get(name).cloned())
}

fn any_settings() -> impl Strategy<Value = InjectionSettings> {
    let window = prop::option::of(("[a-z.]{1,12}", 0u64..1000, 1u64..1000)).prop_map(|window| {
        window.map(|(step, first, length)| StepWindow {
            step,
            first,
            end: first + length,
        })
    });
    (
        prop::option::of("/[a-z0-9/ ]{1,20}"),
        prop::sample::select(vec![
            ApiCallRecording::Activity,
            ApiCallRecording::Callbacks,
            ApiCallRecording::Off,
        ]),
        prop::sample::select(vec![
            GraphTracing::Nodes,
            GraphTracing::Whole,
            GraphTracing::Events,
        ]),
        window,
        prop::option::of(1u64..u64::MAX),
        prop::array::uniform6(any::<bool>()),
        prop::option::of(1usize..100_000),
    )
        .prop_map(
            |(trace_dir, api_calls, graphs, step_window, interval, parts, buffer)| {
                let [clock, copies, flusher, kernels, subscriber, cupti] = parts;
                InjectionSettings {
                    trace_dir: trace_dir.map(PathBuf::from),
                    api_calls,
                    graphs,
                    step_window,
                    dram_sampling_interval_ns: interval.and_then(NonZeroU64::new),
                    diagnostics: Diagnostics {
                        omitted: OmittedParts {
                            clock,
                            copies,
                            flusher,
                            kernels,
                            subscriber,
                            cupti,
                        },
                        cupti_device_buffer_mib: buffer.and_then(NonZeroUsize::new),
                    },
                }
            },
        )
}

proptest! {
    /// What kscope writes, the library reads back as it was, without a problem.
    #[test]
    fn settings_survive_the_environment(settings in any_settings()) {
        let environment: HashMap<&str, OsString> = settings
            .to_environment()
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?)))
            .collect();
        prop_assert!(environment.keys().all(|name| VARIABLES.contains(name)));
        let read = InjectionSettings::from_variables(|name| environment.get(name).cloned());
        prop_assert_eq!(read.problems, Vec::new());
        prop_assert_eq!(read.settings, settings);
    }
}

#[test]
fn kscope_removes_what_it_does_not_set_but_leaves_the_diagnostics() {
    let written = InjectionSettings::default().to_environment();
    let removed: Vec<&str> = written
        .iter()
        .filter(|(_, value)| value.is_none())
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(
        removed,
        [
            TRACE_DIR_VARIABLE,
            STEP_VARIABLE,
            STEP_WINDOW_VARIABLE,
            DRAM_SAMPLING_INTERVAL_VARIABLE
        ]
    );
    assert!(
        written
            .iter()
            .all(|(name, _)| ![OMIT_VARIABLE, CUPTI_DEVICE_BUFFER_VARIABLE].contains(name))
    );
    let window = InjectionSettings {
        step_window: Some(StepWindow {
            step: "decode".into(),
            first: 100,
            end: 116,
        }),
        ..InjectionSettings::default()
    };
    let written: HashMap<&str, Option<OsString>> = window.to_environment().into_iter().collect();
    assert_eq!(written[STEP_VARIABLE], Some("decode".into()));
    assert_eq!(written[STEP_WINDOW_VARIABLE], Some("100..116".into()));
}

#[test]
fn an_empty_environment_is_the_defaults() {
    assert_eq!(parsed(&[]), ParsedSettings::default());
    let defaults = parsed(&[]).settings;
    assert_eq!(
        (defaults.api_calls, defaults.graphs),
        (ApiCallRecording::Activity, GraphTracing::Nodes)
    );
}

#[test]
fn windows_parse_as_a_before_b() {
    let window = StepWindow::parse("forward".into(), " 3..9").unwrap();
    assert_eq!(
        (window.first, window.end, window.step.as_str()),
        (3, 9, "forward")
    );
    for bad in ["9..3", "4..4", "3", "a..b", "..5", ""] {
        assert!(StepWindow::parse("forward".into(), bad).is_none(), "{bad}");
    }
    assert!(StepWindow::parse(String::new(), "1..2").is_none());
    // A window needs both variables; the step alone is no window.
    assert_eq!(parsed(&[(STEP_VARIABLE, "decode")]).settings.step_window, None);
}

#[test]
fn values_the_library_cannot_take_are_named_with_what_it_does_instead() {
    let read = parsed(&[
        (API_CALLS_VARIABLE, "sometimes"),
        (GRAPHS_VARIABLE, "all"),
        (STEP_VARIABLE, "decode"),
        (STEP_WINDOW_VARIABLE, "9..3"),
        (DRAM_SAMPLING_INTERVAL_VARIABLE, "often"),
        (OMIT_VARIABLE, " clock, ,sound,cupti"),
        (CUPTI_DEVICE_BUFFER_VARIABLE, "0"),
    ]);
    assert_eq!(
        read.settings,
        InjectionSettings {
            diagnostics: Diagnostics {
                omitted: OmittedParts {
                    clock: true,
                    cupti: true,
                    ..OmittedParts::default()
                },
                cupti_device_buffer_mib: None,
            },
            ..InjectionSettings::default()
        }
    );
    let said: Vec<(&str, &str, ProblemEffect)> = read
        .problems
        .iter()
        .map(|problem| (problem.variable, problem.message.as_str(), problem.effect))
        .collect();
    use ProblemEffect::{CuptiNotAttached, DefaultUsed};
    assert_eq!(
        said,
        [
            (
                API_CALLS_VARIABLE,
                "KSCOPE_API_CALLS=sometimes is not activity, callbacks or off; recording activity",
                DefaultUsed
            ),
            (
                GRAPHS_VARIABLE,
                "KSCOPE_GRAPHS=all is not nodes, whole or events; tracing every node",
                DefaultUsed
            ),
            (
                STEP_WINDOW_VARIABLE,
                "KSCOPE_STEP_WINDOW=9..3 is not A..B with A < B; recording every step",
                DefaultUsed
            ),
            (
                OMIT_VARIABLE,
                "KSCOPE_INJECT_OMIT part \"sound\" is not clock, copies, flusher, kernels, subscriber or cupti; ignored",
                DefaultUsed
            ),
            (
                CUPTI_DEVICE_BUFFER_VARIABLE,
                "KSCOPE_CUPTI_DEVICE_BUFFER_MB=0 is not a whole number of MiB above 0",
                CuptiNotAttached
            ),
        ]
    );
    // A sampling interval of 0 is none, and says nothing.
    assert_eq!(
        parsed(&[(DRAM_SAMPLING_INTERVAL_VARIABLE, " 0 ")])
            .settings
            .dram_sampling_interval_ns,
        None
    );
    assert_eq!(
        parsed(&[(DRAM_SAMPLING_INTERVAL_VARIABLE, " 20000 ")])
            .settings
            .dram_sampling_interval_ns,
        NonZeroU64::new(20_000)
    );
}

/// The names are a protocol with binaries built apart: they never change.
#[test]
fn the_variable_names_stay_as_they_were() {
    assert_eq!(
        VARIABLES,
        [
            "KSCOPE_TRACE_DIR",
            "KSCOPE_API_CALLS",
            "KSCOPE_GRAPHS",
            "KSCOPE_STEP",
            "KSCOPE_STEP_WINDOW",
            "KSCOPE_PM_INTERVAL_NS",
            "KSCOPE_INJECT_OMIT",
            "KSCOPE_CUPTI_DEVICE_BUFFER_MB"
        ]
    );
    assert_eq!(
        (CUDA_INJECTION_VARIABLE, NVTX_INJECTION_VARIABLE),
        ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH")
    );
}
