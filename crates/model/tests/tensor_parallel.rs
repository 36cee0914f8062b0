//! Tensor parallelism against the unsplit model: every fixture architecture
//! split over 2 and 4 CPU devices (in-process collectives) gives the logits
//! and tokens of the unsplit model, fused and unfused, with batched and
//! token-by-token prefill; a checkpoint whose vocabulary and intermediate
//! size do not divide evenly (and with fewer key/value heads than ranks)
//! splits too; splits that cannot be made are refused with the reason; each
//! rank counts its collectives exactly. On two GPUs (NCCL) the same holds,
//! eagerly and from graphs.

use kernelscope::profile::ProfileLevel;
use kernelscope::testing::Backend;
use kernelscope::{DType, Device, DeviceOptions, OpKind};
use kernelscope_model::synthetic::write_checkpoint;
use kernelscope_model::{
    Architecture, ExecutionMode, GenerationRequest, LoadOptions, Model, ModelError, Partition,
    SyntheticOptions, preset,
};

mod common;
use common::worst_relative_error;

/// f32 weights and caches: a split model does the unsplit model's math with
/// the output projections' sums (and the embedding) completed across ranks,
/// so only the summation order differs: rows agree to f32 rounding (max
/// |a - b| over a row divided by the row's largest |logit|).
const F32_TOLERANCE: f32 = 1e-4;

/// bf16 weights and caches on GPUs: the same math, with the bf16 roundings
/// of what feeds each GEMM at different points of the partial sums.
const BF16_TOLERANCE: f32 = 3e-2;

/// Dense presets, and sparse ones whose experts are split by their rows
/// (every rank a share of every expert, one all-reduce after the experts).
const PRESETS: [(&str, u64); 5] = [
    ("tiny", 11),
    ("tiny-qwen2", 12),
    ("tiny-llama3", 13),
    ("tiny-qwen3-moe", 14),
    ("tiny-mixtral", 15),
];

fn options(dtype: DType, seed: u64) -> SyntheticOptions {
    SyntheticOptions {
        dtype,
        seed,
        quiet: true,
    }
}

/// A prompt of `length` random tokens below `vocab`.
fn prompt(vocab: usize, length: usize, seed: u64) -> Vec<u32> {
    let mut rng = kernelscope::rng::SplitMix64::new(seed);
    (0..length).map(|_| rng.below(vocab as u64) as u32).collect()
}

/// Generates from `prompt` with every position's logits kept.
fn run(model: &mut Model, prompt: &[u32], tokens: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut request = GenerationRequest::new(prompt, tokens);
    request.keep_logits = true;
    request.stop_at_eos = false;
    let generation = model.generate(&request).unwrap();
    (generation.generated, generation.logits)
}

/// Every way the engine can run a request on `devices`, compared with the
/// unsplit model on `reference`: the same tokens and logits within
/// `tolerance`, except that a step whose top two logits are within the
/// tolerance of each other may pick either, and the rows after it (fed
/// another token) are not compared.
fn split_matches_unsplit(
    build: &dyn Fn(&[Device]) -> Model,
    reference: &Device,
    devices: &[Device],
    modes: &[ExecutionMode],
    tolerance: f32,
) {
    let mut unsplit = build(std::slice::from_ref(reference));
    let mut split = build(devices);
    assert_eq!(split.ranks(), devices.len());
    let vocab = unsplit.config().vocab_size;
    let prompt = prompt(vocab, 11, 5 + devices.len() as u64);
    for &mode in modes {
        for fusion in [true, false] {
            for chunk in [1, 4] {
                let what = format!(
                    "{} over {} ranks, {mode:?}, fusion {fusion}, prefill chunk {chunk}",
                    unsplit.name(),
                    devices.len()
                );
                for model in [&mut unsplit, &mut split] {
                    model.set_execution_mode(mode);
                    model.set_fusion(fusion);
                    model.set_prefill_chunk(chunk).unwrap();
                }
                let (expected_tokens, expected_logits) = run(&mut unsplit, &prompt, 6);
                let (tokens, logits) = run(&mut split, &prompt, 6);
                assert_eq!(logits.len(), prompt.len() + 5, "{what}: rows");
                // Generation feeds back its own tokens: past a step where a
                // near-tie picks another token, the inputs differ and so
                // do the logits. Every row up to that step is compared,
                // and the step itself must be a near-tie.
                let compared = match tokens.iter().zip(&expected_tokens).position(|(a, b)| a != b) {
                    None => logits.len(),
                    Some(step) => {
                        let row = prompt.len() - 1 + step;
                        for (logits, side) in [(&logits[row], "split"), (&expected_logits[row], "unsplit")] {
                            let scale = logits.iter().fold(0f32, |m, v| m.max(v.abs()));
                            let gap = (logits[tokens[step] as usize]
                                - logits[expected_tokens[step] as usize])
                                .abs();
                            assert!(
                                gap <= tolerance * scale,
                                "{what}: token {step} differs ({} against {}) though the {side} logits are {gap} apart, not a near-tie",
                                tokens[step],
                                expected_tokens[step]
                            );
                        }
                        row + 1
                    }
                };
                let error = worst_relative_error(&logits[..compared], &expected_logits[..compared]);
                assert!(error <= tolerance, "{what}: logits differ by {error}");
            }
        }
    }
}

#[test]
fn cpu_split_models_give_the_unsplit_logits() {
    for (name, seed) in PRESETS {
        for ranks in [2, 4] {
            let devices: Vec<Device> = (0..ranks).map(|_| Device::cpu()).collect();
            let build = |devices: &[Device]| {
                Model::from_preset_split(name, devices, options(DType::F32, seed)).unwrap()
            };
            split_matches_unsplit(
                &build,
                &Device::cpu(),
                &devices,
                &[ExecutionMode::Eager],
                F32_TOLERANCE,
            );
        }
    }
}

#[test]
fn gpu_split_models_give_the_unsplit_logits() {
    let Some(devices) = Backend::Cuda.devices(2, DeviceOptions::new()) else {
        return;
    };
    for (name, seed) in PRESETS {
        for dtype in [DType::F32, DType::BF16] {
            let build =
                |devices: &[Device]| Model::from_preset_split(name, devices, options(dtype, seed)).unwrap();
            let tolerance = if dtype == DType::F32 {
                F32_TOLERANCE
            } else {
                BF16_TOLERANCE
            };
            // Graph replays against the unsplit model run eagerly: graph == eager too.
            split_matches_unsplit(
                &build,
                &devices[0],
                &devices,
                &[ExecutionMode::Eager, ExecutionMode::Graph],
                tolerance,
            );
        }
    }
}

/// A Llama with every bias, a vocabulary of 2047 and 350 intermediate rows:
/// neither divides by 4 (nor the vocabulary by 2), and its 2 key/value heads
/// are fewer than 4 ranks.
fn uneven_checkpoint() -> std::path::PathBuf {
    let mut config = preset("tiny").unwrap();
    config.architecture = Architecture::Llama;
    config.vocab_size = 2047;
    config.intermediate_size = 350;
    config.qkv_bias = true;
    config.o_bias = true;
    config.tie_word_embeddings = false;
    let directory = std::env::temp_dir().join(format!("kscope-uneven-tp-{}", std::process::id()));
    write_checkpoint(&config, &directory, options(DType::F32, 21)).unwrap();
    directory
}

#[test]
fn uneven_splits_of_a_checkpoint_give_the_unsplit_logits() {
    let directory = uneven_checkpoint();
    for ranks in [2, 4] {
        let partitions = Partition::all(
            &Model::load(&directory, &Device::cpu(), LoadOptions { quiet: true })
                .unwrap()
                .config()
                .clone(),
            ranks,
        )
        .unwrap();
        let held: Vec<usize> = partitions
            .iter()
            .map(|partition| partition.vocabulary.len())
            .collect();
        assert_eq!(held.iter().sum::<usize>(), 2047);
        let devices: Vec<Device> = (0..ranks).map(|_| Device::cpu()).collect();
        let build =
            |devices: &[Device]| Model::load_split(&directory, devices, LoadOptions { quiet: true }).unwrap();
        split_matches_unsplit(
            &build,
            &Device::cpu(),
            &devices,
            &[ExecutionMode::Eager],
            F32_TOLERANCE,
        );
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn impossible_splits_are_refused_with_the_reason() {
    let devices: Vec<Device> = (0..3).map(|_| Device::cpu()).collect();
    let Err(error) = Model::from_preset_split("tiny", &devices, options(DType::F32, 1)) else {
        panic!("4 query heads were split over 3 ranks");
    };
    assert!(
        matches!(error, ModelError::TensorParallel { ranks: 3, .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("splits that work up to 4 ranks: 1, 2, 4"),
        "{message}"
    );
    // The library speaks of ranks; which flag set them is the CLI's to say.
    assert!(!message.contains("--"), "{message}");
    let ModelError::TensorParallel { working_splits, .. } = &error else {
        unreachable!()
    };
    assert_eq!(working_splits, &[1, 2, 4]);
    // A vocabulary so small that the last rank would hold nothing.
    let mut config = preset("tiny").unwrap();
    config.vocab_size = 5;
    let error = Partition::new(&config, 0, 4).unwrap_err();
    assert!(error.to_string().contains("vocab_size (5)"), "{error}");
    let mut config = preset("tiny").unwrap();
    config.intermediate_size = 3;
    assert!(Partition::new(&config, 0, 4).is_err());
    // 9 splits over 5 ranks but not over 4: the error lists what works.
    let mut config = preset("tiny").unwrap();
    config.intermediate_size = 9;
    let error = Partition::new(&config, 0, 4).unwrap_err().to_string();
    assert!(
        error.contains("splits that work up to 8 ranks: 1, 2, 3, 5"),
        "{error}"
    );
    // No ranks at all is a count below its least, named as such.
    let error = Partition::new(&config, 0, 0).unwrap_err();
    assert!(
        matches!(
            error,
            ModelError::InvalidCount {
                field: "ranks",
                value: 0,
                minimum: 1
            }
        ),
        "{error}"
    );
    assert_eq!(error.to_string(), "ranks must be at least 1, got 0");
}

/// Runs `work` on a thread and fails the test if it has not finished within
/// a minute (a split model waiting for a rank that will never come).
fn within_a_minute<T: Send + 'static>(what: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(work());
    });
    receiver
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not return within a minute: a rank is left waiting"))
}

#[test]
fn a_panicking_callback_ends_every_rank() {
    let outcome = within_a_minute("decode with a panicking callback", || {
        let devices: Vec<Device> = (0..2).map(|_| Device::cpu()).collect();
        let mut model = Model::from_preset_split("tiny", &devices, options(DType::F32, 4)).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.decode_greedy(1, 0, 8, |_| panic!("the reader went away"))
        }));
        let streamed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let request = GenerationRequest::new(&[1, 2, 3], 8);
            model.generate_streaming(&request, |_| panic!("the reader went away"))
        }));
        (panicked.is_err(), streamed.is_err())
    });
    assert_eq!(outcome, (true, true), "the callbacks' panics reach the caller");
}

/// A request that fails (on every rank, or on rank 0 alone) aborts the
/// group; the model rebuilds it, and the next requests give the unsplit
/// model's tokens and logits (from graphs captured again, on GPUs).
fn a_failed_request_leaves_the_split_model_usable(backend: Backend) {
    let Some(devices) = backend.devices(2, DeviceOptions::new()) else {
        return;
    };
    let mut model = Model::from_preset_split("tiny", &devices, options(DType::F32, 5)).unwrap();
    let mut unsplit = Model::from_preset("tiny", &devices[0], options(DType::F32, 5)).unwrap();
    let mode = ExecutionMode::fastest_on(&devices[0]);
    model.set_execution_mode(mode);
    let vocab = model.config().vocab_size as u32;
    let good = prompt(vocab as usize, 5, 31);
    // Graphs captured before the failure (GPUs): they hold the old communicators.
    run(&mut model, &good, 3);
    // Every rank refuses a token past the vocabulary: the group is aborted.
    let out_of_range = [1, vocab + 7];
    let mut bad = GenerationRequest::new(&out_of_range, 4);
    bad.stop_at_eos = false;
    let error = model.generate(&bad).unwrap_err();
    assert!(error.to_string().contains("out of range"), "{error}");
    // A callback's error on rank 0 aborts it too.
    let mut request = GenerationRequest::new(&good, 6);
    request.stop_at_eos = false;
    let stopped = model.generate_streaming(&request, |_| Err(ModelError::InvalidInput("stop".into())));
    assert!(stopped.is_err());
    // The next requests run, and give the unsplit model's tokens and logits.
    for _ in 0..2 {
        let (tokens, logits) = run(&mut model, &good, 6);
        let (expected_tokens, expected_logits) = run(&mut unsplit, &good, 6);
        assert_eq!(tokens, expected_tokens);
        let error = worst_relative_error(&logits, &expected_logits);
        assert!(error <= F32_TOLERANCE, "{error}");
    }
}

#[test]
fn cpu_failed_requests_leave_the_split_model_usable() {
    a_failed_request_leaves_the_split_model_usable(Backend::Cpu);
}

#[test]
fn gpu_failed_requests_leave_the_split_model_usable() {
    within_a_minute("a failed request on two GPUs", || {
        a_failed_request_leaves_the_split_model_usable(Backend::Cuda)
    });
}

#[test]
fn every_rank_counts_its_collectives() {
    const RANKS: usize = 2;
    let devices: Vec<Device> = (0..RANKS)
        .map(|_| Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch)))
        .collect();
    let mut model = Model::from_preset_split("tiny", &devices, options(DType::F32, 3)).unwrap();
    let layers = model.config().num_layers as u64;
    model.set_prefill_chunk(1).unwrap();
    let prompt = prompt(model.config().vocab_size, 3, 9);
    let tokens = 4;
    let mut request = GenerationRequest::new(&prompt, tokens);
    request.stop_at_eos = false;
    model.generate(&request).unwrap();
    // One step per position: 3 prompt positions and 3 fed-back tokens.
    let steps = (prompt.len() + tokens - 1) as u64;
    let mut per_rank = Vec::new();
    for (rank, device) in model.devices().iter().enumerate() {
        let counters = device.profiler().counters().snapshot();
        let dispatches: Vec<_> = device
            .profiler()
            .dispatches_by_label()
            .into_iter()
            .flat_map(|(_, entries)| entries)
            .collect();
        let count = |kind: OpKind| dispatches.iter().filter(|entry| entry.op_kind == kind).count() as u64;
        // The embedding and every layer's two output projections.
        assert_eq!(count(OpKind::AllReduce), steps * (1 + 2 * layers), "rank {rank}");
        assert_eq!(count(OpKind::AllGather), steps, "rank {rank}");
        assert_eq!(counters.dispatches, dispatches.len() as u64, "rank {rank}");
        per_rank.push((counters.dispatches, counters.submissions));
    }
    assert!(per_rank.windows(2).all(|pair| pair[0] == pair[1]), "{per_rank:?}");
}

/// A profiled split run: every rank's records in one profile on rank 0's
/// clock, the per-rank and per-scope collective tables in the report, a
/// trace process per rank, a JSON file that reads back, and a comparison
/// with an unsplit run refused unless forced.
#[test]
fn a_split_profile_shows_every_rank() {
    let profiled = || Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
    let mut split =
        Model::from_preset_split("tiny", &[profiled(), profiled()], options(DType::F32, 4)).unwrap();
    let prompt = prompt(split.config().vocab_size, 5, 2);
    let mut request = GenerationRequest::new(&prompt, 4);
    request.stop_at_eos = false;
    split.generate(&request).unwrap();
    let conditions = split.device().conditions("eager", Some(split.name().to_string()));
    let profile = split.profile(conditions);
    let topology = profile
        .conditions
        .topology
        .clone()
        .expect("a split run has a topology");
    assert_eq!((topology.ranks, topology.library.as_str()), (2, "in-process"));
    assert_eq!(profile.ranks.len(), 1);
    assert_eq!(profile.ranks[0].dispatches.len(), profile.dispatches.len());
    let (costs, unmatched) = kernelscope::profile::collective_costs(&profile);
    assert!(unmatched.is_none(), "{unmatched:?}");
    let layers = split.config().num_layers;
    let scopes: Vec<&str> = costs.iter().map(|(scope, _)| scope.as_str()).collect();
    assert_eq!(scopes.len(), layers + 2, "{scopes:?}");
    assert_eq!((scopes[0], scopes[layers + 1]), ("embed", "lm_head"));
    assert!(costs.iter().all(|(_, cost)| cost.waiting_ns.len() == 2));
    let report = kernelscope_report::render_report(&profile);
    assert!(report.contains("ranks: 2 ranks over"), "{report}");
    assert!(report.contains("imbalance µs/token"), "{report}");
    // Each token on each rank: compute, communication and idle adding up
    // to its span, and the slowest rank of the tokens named.
    let (steps, note) = kernelscope::profile::rank_steps(&profile);
    assert_eq!(note, None);
    assert_eq!(steps.len(), profile.timed_tokens().0);
    for step in &steps {
        for time in &step.ranks {
            assert_eq!(
                time.compute_ns + time.communication_ns + time.idle_ns,
                time.span_ns
            );
            assert!(time.communication_ns > 0, "{time:?}");
        }
    }
    assert!(report.contains("per step on each rank's device"), "{report}");
    assert!(
        report.contains("imbalance (the slowest rank's compute less the fastest's)"),
        "{report}"
    );
    let trace = kernelscope_report::chrome_trace(&profile);
    let processes: Vec<&str> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["name"] == "process_name")
        .map(|event| event["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(processes.len(), 2, "{processes:?}");
    assert!(processes[1].starts_with("kernelscope rank 1"), "{processes:?}");
    let path = std::env::temp_dir().join(format!("kscope-split-profile-{}.json", std::process::id()));
    profile.save(&path).unwrap();
    let loaded = kernelscope::profile::Profile::load(&path).unwrap();
    assert_eq!(loaded, profile);
    std::fs::remove_file(&path).unwrap();

    let mut unsplit = Model::from_preset("tiny", &profiled(), options(DType::F32, 4)).unwrap();
    unsplit.generate(&request).unwrap();
    let conditions = unsplit
        .device()
        .conditions("eager", Some(unsplit.name().to_string()));
    let alone = unsplit.profile(conditions);
    let refused = kernelscope::profile::compare(&alone, &profile, 0.05, false).unwrap_err();
    assert!(refused.to_string().contains("topology"), "{refused}");
    assert!(kernelscope::profile::compare(&alone, &profile, 0.05, true).is_ok());
}

/// `preset` written as a GGUF file of `file_type` into `folder`.
fn gguf_of(
    name: &str,
    file_type: kernelscope_model::gguf_export::GgufFileType,
    folder: &std::path::Path,
) -> kernelscope_model::gguf_model::GgufModel {
    let config = preset(name).unwrap();
    let path = folder.join(format!("{name}-{file_type:?}.gguf"));
    kernelscope_model::gguf_export::write_gguf(
        &config,
        &path,
        file_type,
        name,
        true,
        true,
        |tensor, shape| Ok(kernelscope_model::synthetic::tensor_values(tensor, shape, 21)),
    )
    .unwrap();
    kernelscope_model::gguf_model::GgufModel::open(&path).unwrap()
}

/// 8-bit activations round each activation to a step of 1/127 of its
/// block's largest: where the split's different order of partial sums
/// moves a value across half a step, it rounds the other way, and a tiny
/// model's logits move by about a step (as fused against unfused on CUDA).
const INT8_TOLERANCE: f32 = 5e-2;

/// A quantized GGUF file split where every cut falls on whole blocks:
/// tiny-256 in Q8_0 and Q4_0 (blocks of 32; o_proj's 256 columns and the
/// 768 intermediate ones shared by 2 and 4 ranks) gives the unsplit
/// model's logits and tokens: to f32 rounding with f32 activations (the
/// same math, the partial sums added in another order), within a step of
/// the 8-bit rounding with 8-bit ones (each rank's columns are whole
/// activation blocks, so only values the sums' order moves across a
/// rounding boundary differ).
#[test]
fn cpu_split_gguf_models_give_the_unsplit_logits() {
    use kernelscope::ops::quantized::linear::Activations;
    use kernelscope_model::gguf_export::GgufFileType;
    let folder = std::env::temp_dir().join(format!("kscope-tp-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    for file_type in [GgufFileType::Q8_0, GgufFileType::Q4_0] {
        let gguf = gguf_of("tiny-256", file_type, &folder);
        for (activations, tolerance) in [
            (Activations::F32, F32_TOLERANCE),
            (Activations::Int8, INT8_TOLERANCE),
        ] {
            let build = |devices: &[Device]| {
                let mut model = Model::load_gguf(&gguf, devices, LoadOptions { quiet: true }).unwrap();
                model.set_quantized_activations(activations).unwrap();
                model
            };
            for ranks in [2, 4] {
                let devices: Vec<Device> = (0..ranks).map(|_| Device::cpu()).collect();
                split_matches_unsplit(
                    &build,
                    &Device::cpu(),
                    &devices,
                    &[ExecutionMode::Eager],
                    tolerance,
                );
            }
        }
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// A split that would cut quantized blocks is refused naming the tensor,
/// the columns and the block size: tiny-256's o_proj in Q4_K (blocks of
/// 256) over 2 ranks (128 columns each), and tiny's down_proj in Q8_0 (352
/// intermediate columns, 176 a rank, not whole blocks of 32).
#[test]
fn splits_that_cut_quantized_blocks_are_refused_naming_the_tensor() {
    use kernelscope_model::gguf_export::GgufFileType;
    let folder = std::env::temp_dir().join(format!("kscope-tp-gguf-cut-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    for (name, file_type, tensor, block) in [
        (
            "tiny-256",
            GgufFileType::Q4_K_M,
            "attn_output",
            "Q4_K's blocks of 256",
        ),
        ("tiny", GgufFileType::Q8_0, "ffn_down", "Q8_0's blocks of 32"),
    ] {
        let gguf = gguf_of(name, file_type, &folder);
        let devices = [Device::cpu(), Device::cpu()];
        let error = Model::load_gguf(&gguf, &devices, LoadOptions { quiet: true })
            .err()
            .unwrap_or_else(|| panic!("{name} {file_type:?} split over 2 ranks loaded"))
            .to_string();
        assert!(
            error.contains(tensor) && error.contains(block) && error.contains("fewer ranks"),
            "{name} {file_type:?}: {error}"
        );
        assert!(!error.contains('\n'), "one line: {error}");
    }
    std::fs::remove_dir_all(&folder).unwrap();
}

/// The same split on two GPUs (NCCL): quantized blocks in planes on each
/// rank, eagerly and from graphs, against the unsplit model on the first
/// (CUDA's quantized products take 8-bit activations only).
#[test]
fn gpu_split_gguf_models_give_the_unsplit_logits() {
    use kernelscope_model::gguf_export::GgufFileType;
    let Some(devices) = Backend::Cuda.devices(2, DeviceOptions::new()) else {
        return;
    };
    let folder = std::env::temp_dir().join(format!("kscope-tp-gguf-gpu-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let gguf = gguf_of("tiny-256", GgufFileType::Q8_0, &folder);
    let build = |devices: &[Device]| Model::load_gguf(&gguf, devices, LoadOptions { quiet: true }).unwrap();
    split_matches_unsplit(
        &build,
        &devices[0],
        &devices,
        &[ExecutionMode::Eager, ExecutionMode::Graph],
        INT8_TOLERANCE,
    );
    std::fs::remove_dir_all(&folder).unwrap();
}

/// A model whose ranks are processes (`Ranks::Process`), here a group of
/// one joined at a fresh port: its shard holds every weight and its
/// collectives are the group's (NCCL on a GPU, from a unique id passed at
/// the meeting), and it gives the unsplit model's logits, eagerly and (on a
/// GPU) from graphs. Two processes on two GPUs need a machine with both.
fn a_group_of_one_process_gives_the_unsplit_logits(backend: Backend) {
    let Some(device) = backend.device(DeviceOptions::new()) else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let place = kernelscope::runtime::LaunchedRank {
        launcher: kernelscope::runtime::Launcher::Torchrun,
        rank: 0,
        world_size: 1,
        local_rank: 0,
        rendezvous: format!("127.0.0.1:{port}"),
    };
    let communicator =
        kernelscope::Communicator::join(&device, &place, "one model", std::time::Duration::from_secs(30))
            .unwrap();
    let modes: &[ExecutionMode] = match backend {
        Backend::Cpu => &[ExecutionMode::Eager],
        Backend::Cuda => &[ExecutionMode::Eager, ExecutionMode::Graph],
    };
    for (name, seed) in [PRESETS[0], PRESETS[3]] {
        let mut unsplit = Model::from_preset(name, &device, options(DType::F32, seed)).unwrap();
        let mut joined = Model::from_preset_split(name, &communicator, options(DType::F32, seed)).unwrap();
        assert_eq!(joined.process_rank(), None, "a group of one holds its every rank");
        assert!(
            joined.collectives().is_some(),
            "{name}: the group's collectives run"
        );
        let prompt = prompt(unsplit.config().vocab_size, 9, seed + 70);
        for &mode in modes {
            unsplit.set_execution_mode(mode);
            joined.set_execution_mode(mode);
            let (expected_tokens, expected_logits) = run(&mut unsplit, &prompt, 4);
            let (tokens, logits) = run(&mut joined, &prompt, 4);
            let error = worst_relative_error(&logits, &expected_logits);
            assert!(
                error <= F32_TOLERANCE,
                "{name} {mode:?}: logits differ by {error}"
            );
            assert_eq!(tokens, expected_tokens, "{name} {mode:?}");
        }
    }
}

#[test]
fn cpu_a_group_of_one_process_gives_the_unsplit_logits() {
    a_group_of_one_process_gives_the_unsplit_logits(Backend::Cpu);
}

#[test]
fn gpu_a_group_of_one_process_gives_the_unsplit_logits() {
    a_group_of_one_process_gives_the_unsplit_logits(Backend::Cuda);
}
