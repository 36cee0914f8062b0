//! A foreign program's record files made into a profile: steps found by
//! each rule (NVTX ranges by name, graph launches, syncs, the whole run),
//! every kernel placed once with its NVTX scope, processes as ranks, and a
//! file cut short or holding no work said so. The records are made up
//! (`testing::program_records`) with seeded kernel times.

use kernelscope::profile::{ProcessTrace, Profile, profile_of_program};
use kernelscope::testing::program_records::{EAGER_KERNELS, GRAPH_KERNELS, ProgramShape, program_records};

fn process(shape: &ProgramShape, seed: u64) -> ProcessTrace {
    ProcessTrace {
        path: format!("/records/{}.kst", shape.pid).into(),
        trace: kernelscope_trace::read(&program_records(shape, seed)),
    }
}

fn profile(processes: &[ProcessTrace], step: Option<&str>) -> Profile {
    let profile = profile_of_program(
        processes,
        step,
        vec!["python".into(), "generate.py".into()],
        "exited with status 0".into(),
        "kscope test",
    )
    .expect("a profile");
    // What `kscope report` would load holds together.
    let reloaded = Profile::from_json(&profile.to_json(), "injected.json".as_ref()).expect("it reloads");
    assert_eq!(reloaded, profile);
    profile
}

/// Kernels, copies and sets a step of `shape` runs.
fn units_a_step(shape: &ProgramShape) -> usize {
    shape.layers * EAGER_KERNELS.len() + if shape.graph { GRAPH_KERNELS } else { 0 } + usize::from(shape.sync)
}

#[test]
fn named_steps_hold_every_unit_under_its_nvtx_scope() {
    for seed in [3, 17, 90] {
        let shape = ProgramShape {
            steps: 3 + seed as usize % 4,
            layers: 1 + seed as usize % 3,
            ..ProgramShape::default()
        };
        let profile = profile(&[process(&shape, seed)], Some("step"));
        let program = profile.conditions.program.as_ref().unwrap();
        assert_eq!(program.steps, "NVTX ranges named \"step\"");
        assert_eq!(program.name(), "python generate.py");
        assert_eq!(profile.tokens.len(), shape.steps);
        assert_eq!(profile.dispatches.len(), shape.steps * units_a_step(&shape));
        for token in &profile.tokens {
            let members: Vec<_> = profile
                .dispatches
                .iter()
                .filter(|dispatch| dispatch.token == Some(token.index))
                .collect();
            assert_eq!(members.len(), units_a_step(&shape), "token {}", token.index);
            for layer in 0..shape.layers {
                let scope = format!("layer.{layer}");
                let in_layer = members.iter().filter(|dispatch| *dispatch.scope == scope).count();
                assert_eq!(in_layer, EAGER_KERNELS.len(), "{scope}");
            }
            let graph: Vec<_> = members
                .iter()
                .filter(|dispatch| dispatch.label.as_ref() == "graph launch")
                .collect();
            assert_eq!(graph.len(), GRAPH_KERNELS);
            assert!(graph.iter().all(|dispatch| dispatch.scope.as_ref() == "decode"));
            // The step's own range is cut off the scopes; the sync copy sits directly in it.
            assert!(
                members
                    .iter()
                    .any(|dispatch| dispatch.scope.is_empty() && dispatch.kernel.as_ref() == "memcpy DtoH")
            );
            for dispatch in &members {
                assert!(token.start_ns <= dispatch.start_ns && dispatch.end_ns <= token.end_ns);
            }
            assert_eq!(token.counters.dispatches, (units_a_step(&shape) - 1) as u64);
            assert_eq!(token.counters.graph_launches, 1);
            assert_eq!(token.counters.syncs, 1);
            assert_eq!(token.counters.host_device_copies, 1);
        }
        // Mangled names read demangled, kinds come from the names.
        assert!(profile.dispatches.iter().any(|dispatch| {
            dispatch
                .kernel
                .starts_with("at::native::vectorized_elementwise_kernel<4")
        }));
        assert!(
            profile
                .dispatches
                .iter()
                .any(|dispatch| dispatch.op_kind.to_string() == "Attention")
        );
        assert_eq!(profile.conditions.mode, "graph");
        assert_eq!(
            profile.conditions.device,
            format!("cuda:0 NVIDIA H100 80GB HBM3 (sm_90)")
        );
        assert!(profile.warnings.is_empty(), "{:?}", profile.warnings);
    }
}

#[test]
fn without_a_name_graph_launches_then_syncs_then_the_run_are_the_steps() {
    let shape = ProgramShape::default();
    let by_graph = profile(&[process(&shape, 5)], None);
    assert_eq!(
        by_graph.conditions.program.as_ref().unwrap().steps,
        "CUDA graph launches"
    );
    assert_eq!(by_graph.tokens.len(), shape.steps);
    for dispatch in &by_graph.dispatches {
        // Only the graph's kernels are in steps; eager work is between them.
        assert_eq!(
            dispatch.token.is_some(),
            dispatch.label.as_ref() == "graph launch",
            "{dispatch:?}"
        );
    }

    let eager = ProgramShape {
        graph: false,
        ..ProgramShape::default()
    };
    let by_sync = profile(&[process(&eager, 6)], None);
    assert!(
        by_sync
            .conditions
            .program
            .as_ref()
            .unwrap()
            .steps
            .contains("synchronisations")
    );
    assert_eq!(by_sync.tokens.len(), eager.steps);
    assert!(by_sync.dispatches.iter().all(|dispatch| dispatch.token.is_some()));
    assert_eq!(by_sync.conditions.mode, "eager");

    let plain = ProgramShape {
        graph: false,
        sync: false,
        ranges: false,
        ..ProgramShape::default()
    };
    let whole = profile(&[process(&plain, 7)], Some("step"));
    assert_eq!(whole.tokens.len(), 1);
    assert_eq!(whole.dispatches.len(), plain.steps * units_a_step(&plain));
    assert!(whole.dispatches.iter().all(|dispatch| dispatch.scope.is_empty()));
    assert!(
        whole
            .warnings
            .iter()
            .any(|warning| warning.contains("--step \"step\"") && warning.contains("opened none")),
        "{:?}",
        whole.warnings
    );
}

#[test]
fn an_unknown_step_name_is_said_with_the_names_there_are() {
    let profile = profile(&[process(&ProgramShape::default(), 8)], Some("token"));
    let warning = profile
        .warnings
        .iter()
        .find(|warning| warning.contains("--step \"token\""))
        .expect("a warning");
    assert!(
        warning.contains("layer.0") && warning.contains("decode"),
        "{warning}"
    );
    assert_eq!(
        profile.conditions.program.as_ref().unwrap().steps,
        "CUDA graph launches"
    );
}

#[test]
fn processes_become_ranks_in_rank_order() {
    let second = ProgramShape {
        rank: Some(1),
        pid: 51,
        ..ProgramShape::default()
    };
    let first = ProgramShape {
        rank: Some(0),
        pid: 77,
        steps: 4,
        ..ProgramShape::default()
    };
    let profile = profile(&[process(&second, 1), process(&first, 2)], Some("step"));
    assert_eq!(profile.tokens.len(), 4, "rank 0's steps are the profile's own");
    assert_eq!(profile.ranks.len(), 1);
    assert_eq!(profile.ranks[0].tokens.len(), 5);
    assert_eq!(profile.ranks[0].device, "cuda:1 NVIDIA H100 80GB HBM3 (sm_90)");
    let topology = profile.conditions.topology.as_ref().unwrap();
    assert_eq!(topology.ranks, 2);
    assert_eq!(profile.conditions.program.as_ref().unwrap().processes, 2);
    // Steps the ranks do not share are not set side by side, and said so.
    let (steps, note) = kernelscope::profile::rank_steps(&profile);
    assert_eq!(steps.len(), 4);
    assert!(note.unwrap().contains("rank 0 timed 4 steps but rank 1 timed 5"));
}

/// Two ranks of a tensor-parallel program, each layer ending in an NCCL
/// all-reduce: the all-reduces are collectives, matched across the ranks
/// (what each rank waited and the communication after the last arrival),
/// and every step is cut on each rank into compute, communication and
/// idle that add up to its span, the slowest rank being the one that
/// computed longest.
#[test]
fn a_tensor_parallel_program_shows_its_collectives_and_each_ranks_steps() {
    use kernelscope::profile::{collective_costs, rank_steps};
    use kernelscope::testing::program_records::ALL_REDUCE_KERNEL;
    for seed in [4, 29] {
        let rank = |rank: u32| ProgramShape {
            rank: Some(rank),
            pid: 300 + rank,
            layers: 3,
            all_reduces: true,
            ..ProgramShape::default()
        };
        let (first, second) = (rank(0), rank(1));
        let profile = profile(&[process(&first, seed), process(&second, seed + 1)], Some("step"));
        let all_reduces = profile
            .dispatches
            .iter()
            .filter(|dispatch| dispatch.op_kind.is_collective())
            .count();
        assert_eq!(all_reduces, first.steps * first.layers, "seed {seed}");
        assert!(
            profile
                .dispatches
                .iter()
                .filter(|dispatch| dispatch.op_kind.is_collective())
                .all(|dispatch| dispatch.kernel.starts_with("ncclDevKernel_AllReduce")
                    && dispatch.op_kind.to_string() == "AllReduce"),
            "{ALL_REDUCE_KERNEL}"
        );
        let (costs, unmatched) = collective_costs(&profile);
        assert_eq!(unmatched, None);
        let matched: usize = costs.iter().map(|(_, cost)| cost.count).sum();
        assert_eq!(matched, all_reduces);
        assert!(costs.iter().all(|(_, cost)| cost.waiting_ns.len() == 2));

        let (steps, note) = rank_steps(&profile);
        assert_eq!(note, None);
        assert_eq!(steps.len(), first.steps);
        for step in &steps {
            assert_eq!(step.ranks.len(), 2);
            for (rank, time) in step.ranks.iter().enumerate() {
                assert_eq!(
                    time.compute_ns + time.communication_ns + time.idle_ns,
                    time.span_ns,
                    "seed {seed} step {} rank {rank}",
                    step.position
                );
                assert!(time.compute_ns > 0 && time.communication_ns > 0, "{time:?}");
            }
            let slowest = step.slowest_rank();
            let other = 1 - slowest;
            assert!(step.ranks[slowest].compute_ns >= step.ranks[other].compute_ns);
            assert_eq!(
                step.imbalance_ns(),
                step.ranks[slowest].compute_ns - step.ranks[other].compute_ns
            );
        }
    }
}

#[test]
fn a_process_that_died_is_profiled_up_to_where_it_stopped() {
    let shape = ProgramShape {
        ended: false,
        ..ProgramShape::default()
    };
    let bytes = program_records(&shape, 9);
    // Cut mid-frame, as a kill between two writes of a larger buffer would.
    let cut = &bytes[..bytes.len() * 2 / 3 + 3];
    let process = ProcessTrace {
        path: "/records/4242.kst".into(),
        trace: kernelscope_trace::read(cut),
    };
    let profile = profile(&[process], Some("step"));
    assert!(
        profile
            .warnings
            .iter()
            .any(|warning| warning.contains("ended without finishing its records")),
        "{:?}",
        profile.warnings
    );
    assert!(!profile.dispatches.is_empty());
}

#[test]
fn nothing_recorded_is_an_error_that_says_so() {
    let none = profile_of_program(
        &[],
        None,
        vec!["./app".into()],
        "exited with status 0".into(),
        "t",
    );
    assert!(
        none.unwrap_err()
            .to_string()
            .contains("no process of the program loaded CUDA")
    );
    let idle = ProgramShape {
        steps: 0,
        ..ProgramShape::default()
    };
    let error =
        profile_of_program(&[process(&idle, 1)], None, vec!["./app".into()], "x".into(), "t").unwrap_err();
    assert!(error.to_string().contains("ran no kernel"), "{error}");
}

#[test]
fn launches_without_records_say_another_profiler_took_them() {
    for (seed, from) in [(31, 1), (32, 3)] {
        let shape = ProgramShape {
            records_taken_from_step: Some(from),
            ..ProgramShape::default()
        };
        let profile = profile(&[process(&shape, seed)], Some("step"));
        let lost = (shape.steps - from) * shape.layers * EAGER_KERNELS.len();
        let warning = profile
            .warnings
            .iter()
            .find(|warning| warning.contains("left no kernel record"))
            .unwrap_or_else(|| panic!("no warning: {:?}", profile.warnings));
        assert!(warning.contains(&format!("the last {lost} of ")), "{warning}");
        assert!(warning.contains("torch.profiler"), "{warning}");
    }
}

/// A program that captures its graph (launches that leave no record) and
/// then only replays it, with no eager kernel after the capture, is missing
/// nothing: the replays' records come after the captured launches.
#[test]
fn launches_captured_into_a_replayed_graph_are_not_called_lost() {
    for (seed, steps) in [(8, 3), (19, 40)] {
        let shape = ProgramShape {
            steps,
            layers: 0,
            captured_launches: GRAPH_KERNELS * (1 + seed as usize % 3),
            ..ProgramShape::default()
        };
        let replayed = profile(&[process(&shape, seed)], Some("step"));
        assert_eq!(replayed.tokens.len(), steps, "seed {seed}");
        assert!(
            !replayed
                .warnings
                .iter()
                .any(|warning| warning.contains("left no kernel record")),
            "seed {seed}: {:?}",
            replayed.warnings
        );
        // The same program with every record taken after its first step is missing kernels.
        let taken = ProgramShape {
            layers: 1,
            records_taken_from_step: Some(1),
            ..shape.clone()
        };
        let missing = profile(&[process(&taken, seed)], Some("step"));
        let lost = (steps - 1) * EAGER_KERNELS.len();
        assert!(
            missing
                .warnings
                .iter()
                .any(|warning| warning.contains(&format!("the last {lost} of "))),
            "seed {seed}: {:?}",
            missing.warnings
        );
    }
}

/// CUPTI's activity records of API calls carry no NVTX range, and show each
/// runtime call's driver call too: the profile found from them is the one
/// the callbacks' records give, by every step rule.
#[test]
fn calls_recorded_as_activity_give_the_profile_callbacks_give() {
    for (seed, step) in [(5, Some("step")), (41, None), (77, Some("decode"))] {
        let shape = ProgramShape {
            steps: 2 + seed as usize % 5,
            layers: 1 + seed as usize % 4,
            ..ProgramShape::default()
        };
        let by_time = ProgramShape {
            calls_by_time: true,
            ..shape.clone()
        };
        let from_callbacks = profile(&[process(&shape, seed)], step);
        let from_activity = profile(&[process(&by_time, seed)], step);
        assert!(
            from_callbacks
                .dispatches
                .iter()
                .any(|dispatch| dispatch.scope.contains("layer."))
        );
        assert_eq!(from_activity.tokens, from_callbacks.tokens, "seed {seed}");
        assert_eq!(from_activity.dispatches, from_callbacks.dispatches, "seed {seed}");
        assert_eq!(from_activity.counters, from_callbacks.counters, "seed {seed}");
        assert_eq!(
            from_activity.conditions.program,
            from_callbacks.conditions.program
        );
    }
}

/// Graphs traced whole (`--graphs whole`) give each graph launch one
/// dispatch, of kind `WholeGraph`, where its launch was made and spanning
/// the nodes a node-by-node trace of the same run shows; everything outside
/// graphs is unchanged, and steps are found the same way.
#[test]
fn a_graph_traced_whole_is_one_dispatch_spanning_its_nodes() {
    for (seed, step) in [(8, Some("step")), (23, None)] {
        let shape = ProgramShape {
            steps: 2 + seed as usize % 4,
            calls_by_time: seed % 2 == 1,
            ..ProgramShape::default()
        };
        let whole_shape = ProgramShape {
            whole_graphs: true,
            ..shape.clone()
        };
        let by_node = profile(&[process(&shape, seed)], step);
        let whole = profile(&[process(&whole_shape, seed)], step);
        assert_eq!(whole.tokens.len(), shape.steps, "seed {seed}");
        assert_eq!(whole.conditions.mode, kernelscope::profile::WHOLE_GRAPHS_MODE);
        assert_eq!(by_node.conditions.mode, "graph");
        assert_eq!(
            whole.conditions.program.as_ref().unwrap().steps,
            by_node.conditions.program.as_ref().unwrap().steps
        );
        let in_graph =
            |dispatch: &&kernelscope::profile::DispatchRecord| dispatch.label.as_ref() == "graph launch";
        let outside = |profile: &Profile| -> Vec<_> {
            profile
                .dispatches
                .iter()
                .filter(|dispatch| !in_graph(dispatch))
                .map(|dispatch| (dispatch.kernel.clone(), dispatch.start_ns, dispatch.token))
                .collect()
        };
        assert_eq!(outside(&whole), outside(&by_node), "seed {seed}");
        for token in 0..shape.steps as u32 {
            let graphs: Vec<_> = whole
                .dispatches
                .iter()
                .filter(|dispatch| dispatch.token == Some(token) && in_graph(dispatch))
                .collect();
            assert_eq!(graphs.len(), 1, "seed {seed} token {token}");
            let graph = graphs[0];
            assert_eq!(graph.op_kind.to_string(), "WholeGraph");
            assert_eq!(graph.kernel.as_ref(), "whole CUDA graph 1");
            if step.is_some() {
                assert_eq!(graph.scope.as_ref(), "decode");
            }
            let nodes: Vec<_> = by_node
                .dispatches
                .iter()
                .filter(|dispatch| dispatch.token == Some(token) && in_graph(dispatch))
                .collect();
            assert_eq!(nodes.len(), GRAPH_KERNELS);
            assert!(nodes.iter().all(|node| graph.start_ns < node.start_ns));
            assert_eq!(graph.end_ns, nodes.iter().map(|node| node.end_ns).max().unwrap());
        }
    }
}
