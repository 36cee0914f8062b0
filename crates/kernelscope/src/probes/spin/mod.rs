//! Timing truth: a kernel that runs for a known time, and the calibration
//! that checks the profiler's per-dispatch times against it.
//!
//! `spin` holds one warp for a given number of SM clock cycles. The SM clock
//! rate is measured during the run, from a long spin against the GPU's
//! global timer, so `cycles / rate` is a duration known independently of
//! the profiler. [`calibrate`] dispatches spins of 1 to 100 µs eagerly and
//! inside a captured graph and compares the profiler's per-dispatch times
//! with the known durations (`kscope calibrate` prints the table). Nsight
//! Compute is no reference for short kernels: its `gpu__time_duration`
//! counts launch overhead, 0.6–1.0 µs on 1–6 µs kernels.
//!
//! On the CPU a "cycle" is a nanosecond of the host's monotonic clock, so
//! the same calibration measures what the CPU backend's host timing adds.

mod arguments;
mod cpu;
pub use arguments::TARGETS_US;
pub(crate) use arguments::{ARGUMENTS, CYCLES, RECORD};
use arguments::{CLOCK_SPIN_NS, REPETITIONS};

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ops::Arguments;
use crate::runtime::{Buffer, CommandEncoder, DType, Device, Kernel, KernelRegistry, LaunchGrid, OpKind};

/// Registers `spin_u32` (named by its record's element type).
pub fn register(registry: &mut KernelRegistry) {
    registry.register_cpu("spin_u32", cpu::spin);
    registry.register_cuda_source("spin_u32", crate::ops::cuda_source(include_str!("spin.cu")));
}

/// What one spin recorded: the global timer (ns) when it began and ended,
/// and the clock cycles that passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinRecord {
    /// Global timer at the start of the spin, ns.
    pub began_ns: u64,
    /// Global timer at its end, ns.
    pub ended_ns: u64,
    /// Clock cycles that passed.
    pub cycles: u64,
}

/// The spin op and the buffer its dispatches record into.
#[derive(Clone, Debug)]
pub struct Spin {
    kernel: Kernel,
    record: Buffer,
}

impl Spin {
    /// The op on `device`.
    pub fn new(registry: &KernelRegistry, device: &Device) -> Result<Self> {
        Ok(Spin {
            kernel: crate::ops::kernel_for(registry, device, "spin", DType::U32)?,
            record: device.alloc(DType::U32, &[6])?,
        })
    }

    /// Encodes one warp spinning for `cycles` clock cycles.
    pub fn encode(&self, encoder: &mut CommandEncoder, cycles: u64) -> Result<()> {
        encoder.dispatch(
            Arguments::new(ARGUMENTS)
                .scalar(CYCLES, cycles)
                .buffer(RECORD, &self.record)
                .dispatch(&self.kernel)?
                .grid(LaunchGrid::linear(32, 32))
                .cost(0, 24, 0)
                .op_kind(OpKind::Other),
        )
    }

    /// What the last finished spin recorded.
    pub fn last_record(&self) -> Result<SpinRecord> {
        let words = self.record.to_vec::<u32>()?;
        let word = |index: usize| u64::from(words[index]) | (u64::from(words[index + 1]) << 32);
        Ok(SpinRecord {
            began_ns: word(0),
            ended_ns: word(2),
            cycles: word(4),
        })
    }
}

/// The largest per-dispatch error the calibration accepts for a known
/// duration: 2 % of it or 0.1 µs, whichever is larger.
pub fn allowed_error_ns(known_ns: f64) -> f64 {
    (0.02 * known_ns).max(100.0)
}

/// One calibrated duration.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationPoint {
    /// The duration aimed at, ns.
    pub target_ns: f64,
    /// Cycles spun.
    pub cycles: u64,
    /// The known duration: cycles over the measured clock rate, ns.
    pub known_ns: f64,
    /// The median per-dispatch time the profiler gave, launched eagerly, ns.
    pub eager_ns: f64,
    /// The same inside a graph replay; `None` where graphs are not one
    /// device launch or dispatches inside them are not timed.
    pub graph_ns: Option<f64>,
}

impl CalibrationPoint {
    /// The eager error against the known duration, ns (positive: longer).
    pub fn eager_error_ns(&self) -> f64 {
        self.eager_ns - self.known_ns
    }

    /// The graph error against the known duration, ns.
    pub fn graph_error_ns(&self) -> Option<f64> {
        self.graph_ns.map(|graph| graph - self.known_ns)
    }

    /// Whether every measured time, less the floor every dispatch pays (the
    /// time of a spin of 0 cycles: block launch and drain, measured in the
    /// same run), is within [`allowed_error_ns`] of the known duration.
    pub fn within_target_above_floor(&self, calibration: &Calibration) -> bool {
        let allowed = allowed_error_ns(self.known_ns);
        (self.eager_error_ns() - calibration.floor_eager_ns).abs() <= allowed
            && self
                .graph_error_ns()
                .zip(calibration.floor_graph_ns)
                .is_none_or(|(error, floor)| (error - floor).abs() <= allowed)
    }

    /// Whether every measured time is within [`allowed_error_ns`].
    pub fn within_target(&self) -> bool {
        let allowed = allowed_error_ns(self.known_ns);
        self.eager_error_ns().abs() <= allowed
            && self.graph_error_ns().is_none_or(|error| error.abs() <= allowed)
    }
}

/// The calibration of a device's per-dispatch times.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// The clock rate measured before the spins, Hz.
    pub clock_hz: f64,
    /// The clock rate measured after them, Hz: a rate that moved means the
    /// known durations are only as good as that difference.
    pub clock_hz_after: f64,
    /// The profiler's median time of a spin of 0 cycles (the floor of any
    /// dispatch), eager and in a graph, ns.
    pub floor_eager_ns: f64,
    /// The same in a graph; `None` where graphs are not timed.
    pub floor_graph_ns: Option<f64>,
    /// One entry per target duration.
    pub points: Vec<CalibrationPoint>,
}

impl Calibration {
    /// The clock's relative change between the two measurements.
    pub fn clock_drift(&self) -> f64 {
        (self.clock_hz_after - self.clock_hz).abs() / self.clock_hz
    }
}

/// The median of `values` (not empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Measures the clock rate from one long spin: cycles over global-timer ns.
fn measure_clock(device: &Device, spin: &Spin, guess_hz: f64) -> Result<f64> {
    let mut encoder = device.command_encoder();
    spin.encode(&mut encoder, (CLOCK_SPIN_NS * guess_hz / 1e9) as u64)?;
    encoder.commit_and_wait_labeled("calibrate clock")?;
    let record = spin.last_record()?;
    let elapsed = record.ended_ns.saturating_sub(record.began_ns);
    if elapsed == 0 || record.cycles == 0 {
        return Err(Error::KernelFailed {
            kernel: "spin_u32".into(),
            message: format!("a spin recorded {} cycles in {elapsed} ns", record.cycles),
        });
    }
    Ok(record.cycles as f64 * 1e9 / elapsed as f64)
}

/// Calibrates `device`'s per-dispatch times: measures the clock, then times
/// [`REPETITIONS`] spins at each of [`TARGETS_US`] (and of 0 cycles), eagerly
/// and replayed in a graph. The device must time dispatches
/// ([`ProfileLevel::Dispatch`](crate::profile::ProfileLevel)); what it had
/// recorded before is cleared.
pub fn calibrate(device: &Device) -> Result<Calibration> {
    if !device.profiler().times_dispatches() {
        return Err(Error::InvalidProfileLevel(
            "calibration compares per-dispatch times: open the device with dispatch-level profiling".into(),
        ));
    }
    let spin = Spin::new(&crate::runtime::KernelRegistry::of(register), device)?;
    // A first guess of 1 GHz: the first spin then lasts about 20 ms whatever
    // the clock, and the second is sized from its answer.
    let guess = measure_clock(device, &spin, 1e9)?;
    let clock_hz = measure_clock(device, &spin, guess)?;
    let in_graphs = {
        let capabilities = device.capabilities();
        capabilities.graph_launch && capabilities.dispatch_timing_in_graphs
    };
    device.profiler().reset();
    let cycles_of = |ns: f64| (ns * clock_hz / 1e9).round() as u64;
    let mut runs = vec![(0.0, 0u64)];
    runs.extend(TARGETS_US.iter().map(|&us| (us * 1e3, cycles_of(us * 1e3))));
    for (index, &(_, cycles)) in runs.iter().enumerate() {
        let mut encoder = device.command_encoder();
        for _ in 0..REPETITIONS {
            spin.encode(&mut encoder, cycles)?;
        }
        encoder.commit_and_wait_labeled(&format!("calibrate eager {index}"))?;
        if in_graphs {
            encoder.begin_capture()?;
            for _ in 0..REPETITIONS {
                spin.encode(&mut encoder, cycles)?;
            }
            let graph = encoder.end_capture()?;
            encoder.replay(&graph)?;
            encoder.commit_and_wait_labeled(&format!("calibrate graph {index}"))?;
        }
    }
    let clock_hz_after = measure_clock(device, &spin, clock_hz)?;
    let by_label: HashMap<String, Vec<f64>> = device
        .profiler()
        .dispatches_by_label()
        .into_iter()
        .map(|(label, records)| {
            let durations = records.iter().map(|record| record.duration_ns() as f64).collect();
            (label, durations)
        })
        .collect();
    let timed = |mode: &str, index: usize| -> Result<Option<f64>> {
        match by_label.get(&format!("calibrate {mode} {index}")) {
            Some(durations) if durations.len() == REPETITIONS => Ok(Some(median(durations.clone()))),
            Some(durations) => Err(Error::KernelFailed {
                kernel: "spin_u32".into(),
                message: format!("{} of {REPETITIONS} {mode} spins were timed", durations.len()),
            }),
            None if mode == "graph" && !in_graphs => Ok(None),
            None => Err(Error::KernelFailed {
                kernel: "spin_u32".into(),
                message: format!("no {mode} spin was timed"),
            }),
        }
    };
    let eager = |index: usize| -> Result<f64> { Ok(timed("eager", index)?.unwrap_or_default()) };
    let mut points = Vec::with_capacity(TARGETS_US.len());
    for (index, &(target_ns, cycles)) in runs.iter().enumerate().skip(1) {
        points.push(CalibrationPoint {
            target_ns,
            cycles,
            known_ns: cycles as f64 * 1e9 / clock_hz,
            eager_ns: eager(index)?,
            graph_ns: timed("graph", index)?,
        });
    }
    Ok(Calibration {
        clock_hz,
        clock_hz_after,
        floor_eager_ns: eager(0)?,
        floor_graph_ns: timed("graph", 0)?,
        points,
    })
}
