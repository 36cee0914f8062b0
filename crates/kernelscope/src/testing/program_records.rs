//! Record files of a made-up CUDA program, as kscope's injection library
//! would write them, for testing `kscope profile` where no GPU is: steps
//! inside NVTX ranges, layers inside those, eager kernels on a stream, a
//! graph launch a step, a synchronous copy closing each step; kernel
//! durations drawn from a seed.

use kernelscope_trace::{
    ApiCall, ApiWhat, Device, End, Header, Kernel, Memcpy, NvtxRange, RANGE_BY_TIME, Writer,
};

use crate::rng::SplitMix64;

/// What the program does.
#[derive(Clone, Debug)]
pub struct ProgramShape {
    /// Steps it runs.
    pub steps: usize,
    /// Layers a step, each an NVTX range `layer.N` (when `ranges`) with two kernels.
    pub layers: usize,
    /// Whether it opens NVTX ranges: `step` around each step, `layer.N`
    /// around each layer, `decode` around the graph launch.
    pub ranges: bool,
    /// Whether each step launches a CUDA graph of [`GRAPH_KERNELS`] kernels.
    pub graph: bool,
    /// Whether each step ends with a synchronous device-to-host copy.
    pub sync: bool,
    /// `RANK` of the process, if a launcher set one.
    pub rank: Option<u32>,
    /// The process id in its header.
    pub pid: u32,
    /// Whether the file ends with its end frame (false: the process died).
    pub ended: bool,
    /// From this step on, its kernels' records (eager and graph) are
    /// missing though their launches are not: what another CUPTI user in
    /// the process (torch.profiler) taking the records looks like.
    pub records_taken_from_step: Option<usize>,
    /// Kernel launches made before the first step that leave no kernel
    /// record: what capturing the steps' graph looks like (a captured
    /// launch runs nothing; the graph's replays leave the records).
    pub captured_launches: usize,
    /// Whether the API calls come as CUPTI's activity records give them:
    /// without their NVTX range ([`RANGE_BY_TIME`]), each runtime call with
    /// the driver call it made inside it (its own correlation id, no work).
    pub calls_by_time: bool,
    /// Whether graphs come traced whole (`kscope profile --graphs whole`):
    /// one record per graph launch, from its first node's start to its last
    /// node's end, instead of one per node.
    pub whole_graphs: bool,
    /// Whether each layer ends with an NCCL all-reduce ([`ALL_REDUCE_KERNEL`],
    /// eager), as a rank of a tensor-parallel program runs.
    pub all_reduces: bool,
}

impl Default for ProgramShape {
    fn default() -> Self {
        ProgramShape {
            steps: 5,
            layers: 2,
            ranges: true,
            graph: true,
            sync: true,
            rank: None,
            pid: 4242,
            ended: true,
            records_taken_from_step: None,
            captured_launches: 0,
            calls_by_time: false,
            whole_graphs: false,
            all_reduces: false,
        }
    }
}

/// Kernels in each step's graph.
pub const GRAPH_KERNELS: usize = 3;

/// The eager kernels' names, as CUPTI gives them (one mangled).
pub const EAGER_KERNELS: [&str; 2] = [
    "matvec_bf16_rows",
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
];

/// The all-reduce ending each layer where [`ProgramShape::all_reduces`], as
/// CUPTI names NCCL 2.28's kernel.
pub const ALL_REDUCE_KERNEL: &str =
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

/// The graph's kernels' names.
pub const GRAPH_KERNEL_NAMES: [&str; GRAPH_KERNELS] = ["rms_norm_f32", "flash_fwd_kernel", "argmax_rows"];

/// A record file of `shape`, its kernel times drawn from `seed`.
pub fn program_records(shape: &ProgramShape, seed: u64) -> Vec<u8> {
    let mut random = SplitMix64::new(seed);
    let mut between = |low: u64, high: u64| low + random.next_u64() % (high - low);
    let header = Header {
        pid: shape.pid,
        parent_pid: 1,
        command: vec![
            "python".into(),
            "generate.py".into(),
            "--steps".into(),
            shape.steps.to_string(),
        ],
        rank: shape.rank,
        local_rank: shape.rank,
        world_size: shape.rank.map(|_| 2),
        cupti_version: Some(130001),
        devices: Vec::new(),
    };
    let mut writer = Writer::new(Vec::new(), &header).expect("writing to memory");
    let gpu = writer.text("NVIDIA H100 80GB HBM3").expect("memory");
    writer
        .record(&Device {
            memory_bytes: 80 << 30,
            ordinal: shape.rank.unwrap_or(0),
            name: gpu,
            major: 9,
            minor: 0,
            multiprocessors: 132,
            padding: 0,
        })
        .expect("memory");
    let thread = 1000 + u64::from(shape.pid);
    let calls = Calls {
        thread,
        by_time: shape.calls_by_time,
    };
    let (mut now, mut correlation, mut next_range) = (1_000_000_000u64 + between(0, 1000), 1u32, 1u64);
    let mut device_free = now;
    let mut ranges: Vec<(NvtxRange, String)> = Vec::new();
    let mut push_range = |start: u64, end: u64, id: u64, parent: u64, depth: u32, message: String| {
        ranges.push((
            NvtxRange {
                start_ns: start,
                end_ns: end,
                thread,
                id,
                parent,
                domain: 0,
                message: 0,
                depth,
                stacked: 1,
            },
            message,
        ));
    };
    for _ in 0..shape.captured_launches {
        calls.launch(&mut writer, &mut now, &mut correlation, 0, ApiWhat::Launch);
    }
    for step in 0..shape.steps {
        let taken = shape.records_taken_from_step.is_some_and(|from| step >= from);
        let step_start = now;
        let step_range = if shape.ranges { take(&mut next_range) } else { 0 };
        for layer in 0..shape.layers {
            let layer_start = now;
            let layer_range = if shape.ranges { take(&mut next_range) } else { 0 };
            // Each eager kernel with the range its duration is drawn from;
            // the all-reduce last where the program has one.
            let eager = EAGER_KERNELS.map(|name| (name, (2_000, 20_000)));
            let all_reduce = shape.all_reduces.then_some((ALL_REDUCE_KERNEL, (5_000, 15_000)));
            for (name, (shortest, longest)) in eager.into_iter().chain(all_reduce) {
                let call = calls.launch(
                    &mut writer,
                    &mut now,
                    &mut correlation,
                    layer_range,
                    ApiWhat::Launch,
                );
                let start = device_free.max(call.end_ns) + between(500, 3000);
                device_free = start + between(shortest, longest);
                if !taken {
                    kernel(&mut writer, name, start, device_free, call.correlation, 0, 7);
                }
            }
            now += between(100, 1000);
            if shape.ranges {
                push_range(
                    layer_start,
                    now,
                    layer_range,
                    step_range,
                    1,
                    format!("layer.{layer}"),
                );
            }
        }
        if shape.graph {
            let decode_start = now;
            let decode_range = if shape.ranges { take(&mut next_range) } else { 0 };
            let call = calls.launch(
                &mut writer,
                &mut now,
                &mut correlation,
                decode_range,
                ApiWhat::GraphLaunch,
            );
            let graph_start = device_free.max(call.end_ns) + between(300, 1500);
            device_free = graph_start;
            for (node, name) in GRAPH_KERNEL_NAMES.iter().enumerate() {
                let start = device_free + between(300, 1500);
                device_free = start + between(3_000, 9_000);
                if !shape.whole_graphs && !taken {
                    kernel(
                        &mut writer,
                        name,
                        start,
                        device_free,
                        call.correlation,
                        node as u64 + 1,
                        9,
                    );
                }
            }
            if shape.whole_graphs && !taken {
                whole_graph(&mut writer, graph_start, device_free, call.correlation);
            }
            if shape.ranges {
                push_range(decode_start, now, decode_range, step_range, 1, "decode".into());
            }
        }
        if shape.sync {
            // A synchronous copy: the call waits for the device, then the copy runs.
            let start = device_free.max(now) + between(500, 2000);
            device_free = start + between(1_000, 3_000);
            let call = ApiCall {
                start_ns: now,
                end_ns: device_free + between(1_000, 5_000),
                thread,
                range: step_range,
                correlation,
                callback: 31,
                domain: 0,
                what: ApiWhat::Sync as u32,
            };
            correlation += 1;
            calls.record(&mut writer, call);
            writer
                .record(&Memcpy {
                    start_ns: start,
                    end_ns: device_free,
                    bytes: 4,
                    correlation: call.correlation,
                    copy_kind: 2,
                    device: 0,
                    context: 1,
                    stream: 7,
                    graph: 0,
                })
                .expect("memory");
            now = call.end_ns + 200;
        }
        if shape.ranges {
            push_range(step_start, now, step_range, 0, 0, "step, seq = 3".into());
        }
        now += between(10_000, 50_000);
        device_free = device_free.max(now);
    }
    for (mut range, message) in ranges {
        range.message = writer.text(&message).expect("memory");
        writer.record(&range).expect("memory");
    }
    if shape.ended {
        writer
            .end(&End {
                at_ns: now,
                signal: 0,
                dropped: 0,
            })
            .expect("memory")
    } else {
        writer.into_sink()
    }
}

/// The next id, counting on.
fn take(next: &mut u64) -> u64 {
    *next += 1;
    *next - 1
}

/// How the program's API calls are written.
struct Calls {
    thread: u64,
    /// See [`ProgramShape::calls_by_time`].
    by_time: bool,
}

/// Where the driver calls' correlation ids begin, past the runtime calls'.
const DRIVER_CORRELATIONS: u32 = 1 << 30;

impl Calls {
    /// Records one API call made inside `range`, 1-2 µs long.
    fn launch(
        &self,
        writer: &mut Writer<Vec<u8>>,
        now: &mut u64,
        correlation: &mut u32,
        range: u64,
        what: ApiWhat,
    ) -> ApiCall {
        let call = ApiCall {
            start_ns: *now,
            end_ns: *now + 1_000 + u64::from(*correlation % 7) * 150,
            thread: self.thread,
            range,
            correlation: *correlation,
            callback: 211,
            domain: 0,
            what: what as u32,
        };
        self.record(writer, call);
        *now = call.end_ns + 200;
        *correlation += 1;
        call
    }

    /// Writes `call` as this program's records give it.
    fn record(&self, writer: &mut Writer<Vec<u8>>, call: ApiCall) {
        if !self.by_time {
            writer.record(&call).expect("memory");
            return;
        }
        writer
            .record(&ApiCall {
                range: RANGE_BY_TIME,
                ..call
            })
            .expect("memory");
        // The runtime makes its call through the driver: seen twice.
        writer
            .record(&ApiCall {
                start_ns: call.start_ns + 100,
                end_ns: call.end_ns - 100,
                range: RANGE_BY_TIME,
                correlation: DRIVER_CORRELATIONS + call.correlation,
                callback: 307,
                domain: 1,
                ..call
            })
            .expect("memory");
    }
}

/// Records one kernel.
fn kernel(
    writer: &mut Writer<Vec<u8>>,
    name: &str,
    start: u64,
    end: u64,
    correlation: u32,
    node: u64,
    stream: u32,
) {
    let name = writer.text(name).expect("memory");
    writer
        .record(&Kernel {
            start_ns: start,
            end_ns: end,
            graph_node: node,
            correlation,
            name,
            device: 0,
            context: 1,
            stream,
            graph: u32::from(node != 0),
            grid: [132, 1, 1],
            block: [256, 1, 1],
            registers: 32,
            shared_bytes: 0,
        })
        .expect("memory");
}

/// Records one whole execution of graph 1, as CUPTI's graph trace gives it.
fn whole_graph(writer: &mut Writer<Vec<u8>>, start: u64, end: u64, correlation: u32) {
    let name = writer
        .text(&kernelscope_trace::whole_graph_name(1))
        .expect("memory");
    writer
        .record(&Kernel {
            start_ns: start,
            end_ns: end,
            correlation,
            name,
            context: 1,
            stream: 9,
            graph: 1,
            ..Kernel::default()
        })
        .expect("memory");
}
