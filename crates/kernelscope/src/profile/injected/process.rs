//! One process's record file read into a rank's records: its kernels,
//! copies and sets as units, the API calls and NVTX ranges that place
//! them, its devices, and how the file ended.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kernelscope_trace::{ApiCall, ApiWhat, Ending, Frame, NvtxRange, PmSample};

use super::parts::{Built, ProcessTrace, Unit};
use super::{bytes, calls, names, steps};
use crate::profile::{CounterSnapshot, OpKind};

/// CUPTI's copy kinds: host to device, device to host (the host-device copies counted).
const HOST_DEVICE_COPY_KINDS: [u32; 2] = [1, 2];
/// CUPTI's device-to-device copy kind.
const DEVICE_TO_DEVICE_COPY_KIND: u32 = 8;

/// The rank of one process, or `None` when it ran no device work.
pub(super) fn build(process: &ProcessTrace, step: Option<&str>, warnings: &mut Vec<String>) -> Option<Built> {
    let trace = &process.trace;
    let pid = trace.header.as_ref().map_or(0, |header| header.pid);
    let mut units = Vec::new();
    let mut calls: Vec<ApiCall> = Vec::new();
    let mut ranges: HashMap<u64, (NvtxRange, String)> = HashMap::new();
    let mut devices: BTreeMap<u32, String> = BTreeMap::new();
    let mut samples: Vec<PmSample> = Vec::new();
    let mut events_timed = false;
    for frame in &trace.frames {
        match frame {
            Frame::Kernel(kernel) => {
                let name = names::readable(trace.text(kernel.name));
                events_timed |= kernel.context == kernelscope_trace::EVENT_TIMED_CONTEXT
                    && name.starts_with(kernelscope_trace::WHOLE_GRAPH_NAME_PREFIX);
                units.push(Unit {
                    start_ns: kernel.start_ns,
                    end_ns: kernel.end_ns.max(kernel.start_ns),
                    correlation: kernel.correlation,
                    op_kind: names::op_kind(&name),
                    name,
                    stream: kernel.stream,
                    device: kernel.device,
                    graph: kernel.graph,
                    bytes: 0,
                    bytes_written: 0,
                    host_copy: false,
                    kernel: true,
                });
            }
            Frame::Memcpy(copy) => {
                let on_device = copy.copy_kind == DEVICE_TO_DEVICE_COPY_KIND;
                units.push(Unit {
                    start_ns: copy.start_ns,
                    end_ns: copy.end_ns.max(copy.start_ns),
                    correlation: copy.correlation,
                    name: format!("memcpy {}", copy_kind_name(copy.copy_kind)),
                    op_kind: OpKind::Copy,
                    stream: copy.stream,
                    device: copy.device,
                    graph: copy.graph,
                    bytes: if on_device {
                        copy.bytes.saturating_mul(2)
                    } else {
                        0
                    },
                    bytes_written: if on_device { copy.bytes } else { 0 },
                    host_copy: HOST_DEVICE_COPY_KINDS.contains(&copy.copy_kind),
                    kernel: false,
                });
            }
            Frame::Memset(set) => units.push(Unit {
                start_ns: set.start_ns,
                end_ns: set.end_ns.max(set.start_ns),
                correlation: set.correlation,
                name: "memset".into(),
                op_kind: "Memset".parse().unwrap_or(OpKind::Other),
                stream: set.stream,
                device: set.device,
                graph: set.graph,
                bytes: set.bytes,
                bytes_written: set.bytes,
                host_copy: false,
                kernel: false,
            }),
            Frame::ApiCall(call) => calls.push(*call),
            Frame::NvtxRange(range) => {
                ranges.insert(range.id, (*range, trace.text(range.message).to_string()));
            }
            Frame::Device(device) => {
                devices.insert(
                    device.ordinal,
                    format!(
                        "cuda:{} {} (sm_{}{})",
                        device.ordinal,
                        trace.text(device.name),
                        device.major,
                        device.minor
                    ),
                );
            }
            Frame::PmSample(sample) => samples.push(*sample),
            _ => {}
        }
    }
    let calls = calls::settle(calls, &ranges);
    note_ending(process, pid, warnings);
    note_lost_kernels(&units, &calls, pid, warnings);
    if units.is_empty() {
        return None;
    }
    units.sort_by_key(|unit| (unit.start_ns, unit.end_ns));
    let bytes_measured = (!samples.is_empty()).then(|| measure_bytes(&mut units, &samples, pid, warnings));
    let by_start = |what: ApiWhat| {
        let mut chosen: Vec<ApiCall> = calls
            .values()
            .filter(|call| call.what() == Some(what))
            .copied()
            .collect();
        chosen.sort_by_key(|call| call.start_ns);
        chosen
    };
    let (graph_launches, syncs) = (by_start(ApiWhat::GraphLaunch), by_start(ApiWhat::Sync));
    let placed: Vec<steps::Placed> = units
        .iter()
        .map(|unit| steps::Placed {
            launched_ns: calls
                .get(&unit.correlation)
                .map_or(unit.start_ns, |call| call.start_ns),
            correlation: unit.correlation,
            graph: unit.graph,
            end_ns: unit.end_ns,
        })
        .collect();
    let sources = steps::Sources {
        units: &placed,
        calls: &calls,
        ranges: &ranges,
        graph_launches: &graph_launches,
        syncs: &syncs,
    };
    let found = steps::find(&sources, step, warnings);
    let scope_of = |unit: &Unit| scope(calls.get(&unit.correlation), &ranges, &found.step_ranges);
    let first_ns = placed
        .iter()
        .map(|unit| unit.launched_ns)
        .chain(ranges.values().map(|(range, _)| range.start_ns))
        .chain(found.spans.iter().map(|&(start, _)| start))
        .min()
        .unwrap_or(0);
    let (submissions, dispatches) = super::records::submissions_of(&units, &found, scope_of);
    let tokens = super::records::tokens_of(&found, &units, &submissions, &graph_launches, &syncs);
    let counters = CounterSnapshot {
        dispatches: units.iter().filter(|unit| unit.kernel).count() as u64,
        submissions: submissions.len() as u64,
        syncs: syncs.len() as u64,
        graph_launches: graph_launches.len() as u64,
        host_device_copies: units.iter().filter(|unit| unit.host_copy).count() as u64,
        ..CounterSnapshot::default()
    };
    let device = if devices.is_empty() {
        format!("cuda (process {pid}: device not reported)")
    } else {
        devices.into_values().collect::<Vec<_>>().join(", ")
    };
    Some(Built {
        rank: trace.header.as_ref().and_then(|header| header.rank),
        first_ns,
        device,
        rule: found.rule,
        graphs: units.iter().any(|unit| unit.graph != 0),
        whole_graphs: units
            .iter()
            .any(|unit| unit.name.starts_with(kernelscope_trace::WHOLE_GRAPH_NAME_PREFIX)),
        events_timed,
        early_launch: launches_early(&units),
        bytes_measured,
        records: (counters, tokens, submissions, dispatches),
    })
}

/// Sets each kernel's bytes to the DRAM bytes its samples give it (copies
/// and sets keep what CUPTI says they moved, which is exact, but still take
/// their share of each sample; a kernel samples did not cover whole has
/// none), warns what went to none and what was not covered; the samples'
/// median length, ns.
fn measure_bytes(units: &mut [Unit], samples: &[PmSample], pid: u32, warnings: &mut Vec<String>) -> u64 {
    // A kernel's name is its kind: the fit tells slow kinds (norms, ropes,
    // attention at decode) from those that stream memory.
    let mut kinds: HashMap<&str, u32> = HashMap::new();
    let spans: Vec<bytes::Span> = units
        .iter()
        .map(|unit| {
            let next = kinds.len() as u32;
            bytes::Span {
                start_ns: unit.start_ns,
                end_ns: unit.end_ns,
                device: unit.device,
                stream: unit.stream,
                kind: *kinds.entry(unit.name.as_str()).or_insert(next),
            }
        })
        .collect();
    let attribution = bytes::attribute(&spans, samples);
    for (unit, measured) in units.iter_mut().zip(&attribution.units) {
        if unit.kernel {
            // An uncovered kernel's share would be a part of its bytes shown as the whole.
            (unit.bytes, unit.bytes_written) = if measured.covered {
                (measured.read + measured.write, measured.write)
            } else {
                (0, 0)
            };
        }
    }
    warnings.push(attribution.describe(pid));
    attribution.sample_ns
}

/// A warning for a file that did not end cleanly or lost records.
fn note_ending(process: &ProcessTrace, pid: u32, warnings: &mut Vec<String>) {
    let shown = process.path.display();
    match process.trace.ending {
        Ending::Ended(end) if end.signal != 0 => warnings.push(format!(
            "process {pid} was ended by signal {}; its records were saved in its signal handler",
            end.signal
        )),
        Ending::Ended(end) if end.dropped > 0 => warnings.push(format!(
            "process {pid}: CUPTI dropped {} records (its buffers were full)",
            end.dropped
        )),
        Ending::Ended(_) => {}
        Ending::Cut { at } => warnings.push(format!(
            "process {pid} ended without finishing its records ({shown} stops at byte {at}): up to its last 100 ms of work is missing"
        )),
        Ending::Garbled { at, problem } => warnings.push(format!(
            "process {pid}: {shown} is garbled at byte {at} ({problem}); records after it are lost"
        )),
    }
    if process.trace.skipped > 0 {
        warnings.push(format!(
            "process {pid}: {} records of kinds this kscope does not know were skipped",
            process.trace.skipped
        ));
    }
}

/// CUPTI's copy kind as a word.
fn copy_kind_name(kind: u32) -> &'static str {
    match kind {
        1 => "HtoD",
        2 => "DtoH",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "array",
    }
}

/// The NVTX ranges `call` was made inside, outermost first, joined by `/`,
/// below the step's range (whose own name every unit of the step shares).
fn scope(
    call: Option<&ApiCall>,
    ranges: &HashMap<u64, (NvtxRange, String)>,
    step_ranges: &[u64],
) -> Arc<str> {
    let mut parts = Vec::new();
    let mut open = call.map_or(0, |call| call.range);
    while open != 0 && !step_ranges.contains(&open) && parts.len() < 64 {
        let Some((range, message)) = ranges.get(&open) else {
            break;
        };
        parts.push(names::scope_part(message));
        open = range.parent;
    }
    parts.reverse();
    Arc::from(parts.join("/"))
}

/// Whether a unit began on its stream before the one before it there had
/// ended: the program launches early (programmatic dependent launch, as
/// llama.cpp's graphs do), which the cross-check must then not flag.
fn launches_early(units: &[Unit]) -> bool {
    let mut last_end: HashMap<u32, u64> = HashMap::new();
    // `units` are in order of start.
    units.iter().any(|unit| {
        let previous = last_end.insert(unit.stream, unit.end_ns).unwrap_or(0);
        if previous > unit.end_ns {
            last_end.insert(unit.stream, previous);
        }
        unit.start_ns < previous
    })
}

/// A warning when many kernel launches left no kernel record after the
/// last one that did: another CUPTI user in the process (a
/// `torch.profiler` session, Nsight) took CUPTI's records, which are one set
/// per process. Launches captured into a graph leave no record either, but
/// they come before the graph's replays, which do: a graph launch whose
/// nodes left records counts as the latest recorded launch (a program that
/// captures its decode after its prefill has every launch after its
/// prefill's last kernel captured, and is not missing any).
fn note_lost_kernels(units: &[Unit], calls: &HashMap<u32, ApiCall>, pid: u32, warnings: &mut Vec<String>) {
    let recorded: std::collections::HashSet<u32> = units.iter().map(|unit| unit.correlation).collect();
    let launches: Vec<&ApiCall> = calls
        .values()
        .filter(|call| call.what() == Some(ApiWhat::Launch))
        .collect();
    let last_recorded = calls
        .values()
        .filter(|call| matches!(call.what(), Some(ApiWhat::Launch | ApiWhat::GraphLaunch)))
        .filter(|call| recorded.contains(&call.correlation))
        .map(|call| call.start_ns)
        .max()
        .unwrap_or(0);
    let lost: Vec<u64> = launches
        .iter()
        .filter(|call| call.start_ns > last_recorded && !recorded.contains(&call.correlation))
        .map(|call| call.start_ns)
        .collect();
    // A few launches may still be in flight at a crash; one in twenty is not.
    if !lost.is_empty() && lost.len() * 20 > launches.len() {
        let first_unit = units.iter().map(|unit| unit.start_ns).min().unwrap_or(0);
        let first_lost = lost.iter().copied().min().unwrap_or(0);
        warnings.push(format!(
            "process {pid}: the last {} of {} kernel launches left no kernel record, from {:.3} s into its work on: another CUPTI user in the process (torch.profiler, Nsight) took the records; those kernels are missing",
            lost.len(),
            launches.len(),
            first_lost.saturating_sub(first_unit) as f64 / 1e9
        ));
    }
}
