//! `kscope run` started by a launcher as one of several ranks, each rank a
//! process of its own on the CPU, as `torchrun --nproc-per-node 2 kscope
//! run ...` starts them (the variables torchrun sets, given by hand): the
//! ranks meet, split the model, and compute the logits one process computes
//! with `--tp 2` threads, bit for bit. Ranks that disagree, or that never
//! come, are a one-line error naming the rank, never a hang.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use kernelscope::rng::SplitMix64;
use kernelscope::testing::free_local_port as free_port;

/// A seed that differs run to run, printed so a failure can be replayed.
fn fresh_seed() -> u64 {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("seed {seed}");
    seed
}

/// Starts `kscope args` as rank `rank` of `world_size`, meeting at `port`.
fn start_rank(args: &[String], rank: usize, world_size: usize, port: u16) -> Child {
    Command::new(common::kscope_binary())
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world_size.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finished(child: Child) -> (i32, String) {
    let (code, _, stderr) = finished_with_output(child);
    (code, stderr)
}

/// (exit code, stdout, stderr) of a rank's process.
fn finished_with_output(child: Child) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    (
        status.code().expect("exited normally"),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// `run` of a preset with random weights and a random prompt, its logits
/// written to `logits`.
fn run_args(weights_seed: u64, prompt: &[u32], logits: &Path, extra: &[&str]) -> Vec<String> {
    let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let mut args: Vec<String> = [
        "run",
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--dtype",
        "f32",
        "--quiet",
        "--max-tokens",
        "4",
        "--rendezvous-timeout",
        "60",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    args.extend([
        "--weights-seed".into(),
        weights_seed.to_string(),
        "--token-ids".into(),
        ids.join(","),
        "--logits-out".into(),
        logits.to_str().unwrap().into(),
    ]);
    args.extend(extra.iter().map(|arg| arg.to_string()));
    args
}

#[test]
fn two_processes_compute_the_logits_of_tp_2_in_one_process() {
    let mut rng = SplitMix64::new(fresh_seed());
    let weights_seed = rng.next_u64() % 1_000_000;
    // The tiny preset's vocabulary is 2,048 tokens.
    let prompt: Vec<u32> = (0..3 + rng.next_u64() % 6)
        .map(|_| (rng.next_u64() % 2048) as u32)
        .collect();
    let directory = common::ScratchFolder::new("ranks-logits");
    let threads = directory.0.join("threads.npy");
    let (code, _, stderr) = common::kscope(
        &run_args(weights_seed, &prompt, &threads, &["--tp", "2"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, 0, "--tp 2: {stderr}");

    let port = free_port();
    // One command line for both, as a launcher starts them: each rank
    // writes its own file (logits.rankN.npy).
    let shared = directory.0.join("logits.npy");
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let logits = directory.0.join(format!("logits.rank{rank}.npy"));
            (
                start_rank(&run_args(weights_seed, &prompt, &shared, &[]), rank, 2, port),
                logits,
            )
        })
        .collect();
    let expected = kernelscope_model::npy::read_f32_2d(&threads).unwrap();
    assert!(
        expected.iter().flatten().any(|&value| value != 0.0),
        "the logits are not all zero"
    );
    for (rank, (child, logits)) in ranks.into_iter().enumerate() {
        let (code, stdout, stderr) = finished_with_output(child);
        assert_eq!(code, 0, "rank {rank}: {stderr}");
        assert!(
            stdout.contains(&format!("rank {rank} of 2 ranks, one a process")),
            "rank {rank} ran as a rank of a group: {stdout}"
        );
        let got = kernelscope_model::npy::read_f32_2d(&logits).unwrap();
        assert_eq!(got.len(), expected.len(), "rank {rank}: positions");
        for (position, (row, want)) in got.iter().zip(&expected).enumerate() {
            // Sums in rank order on both paths: the same bits.
            let same =
                row.len() == want.len() && row.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "rank {rank}, position {position}: the logits differ from --tp 2's"
            );
        }
    }
}

#[test]
fn a_rank_running_another_model_or_request_fails_both_ranks_naming_it() {
    let mut rng = SplitMix64::new(fresh_seed());
    let weights_seed = rng.next_u64() % 1_000_000;
    let prompt = [(rng.next_u64() % 2048) as u32, (rng.next_u64() % 2048) as u32];
    let longer = [prompt[0], prompt[1], (rng.next_u64() % 2048) as u32];
    let directory = common::ScratchFolder::new("ranks-models");
    // Rank 1's weights from another seed (another model), then rank 1 with
    // another prompt (another request: other collectives).
    for (seed_1, prompt_1) in [(weights_seed + 1, &prompt[..]), (weights_seed, &longer[..])] {
        let port = free_port();
        let children: Vec<_> = (0..2)
            .map(|rank| {
                let logits = directory.0.join("logits.npy");
                let (seed, prompt) = if rank == 0 {
                    (weights_seed, &prompt[..])
                } else {
                    (seed_1, prompt_1)
                };
                start_rank(&run_args(seed, prompt, &logits, &[]), rank, 2, port)
            })
            .collect();
        for (rank, child) in children.into_iter().enumerate() {
            let (code, stderr) = finished(child);
            assert_eq!(code, 2, "rank {rank}: {stderr}");
            assert_eq!(
                stderr.trim_end().lines().count(),
                1,
                "rank {rank}: one line: {stderr}"
            );
            assert!(
                stderr.contains("rank 1 runs a preset of hash"),
                "rank {rank}: {stderr}"
            );
        }
    }
}

#[test]
fn a_rank_that_never_comes_is_named_within_the_timeout() {
    let directory = common::ScratchFolder::new("ranks-missing");
    let logits = directory.0.join("logits.npy");
    let seed = fresh_seed() % 1_000_000;
    let mut args = run_args(seed, &[1, 2], &logits, &[]);
    let timeout = args.iter().position(|arg| arg == "--rendezvous-timeout").unwrap();
    args[timeout + 1] = "1".into();
    let started = std::time::Instant::now();
    let (code, stderr) = finished(start_rank(&args, 0, 4, free_port()));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("ranks 1, 2, 3 never arrived within 1s"),
        "{stderr}"
    );
    assert!(
        started.elapsed().as_secs() < 30,
        "it waited {:?}",
        started.elapsed()
    );
}

/// A launcher's variables, the flags beside them, and what the error says.
type Case = (
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
    &'static [&'static str],
);

#[test]
fn the_launchers_errors_name_what_is_wrong() {
    let run = ["run", "--device", "cpu", "--max-tokens", "1", "--quiet"];
    let cases: [Case; 5] = [
        // torchrun's variables without where the ranks meet.
        (
            &[("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")],
            &[],
            &["MASTER_ADDR", "not set"],
        ),
        (
            &[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "4")],
            &[],
            &["OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"],
        ),
        (
            &[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")],
            &[],
            &["SLURM_LOCALID", "srun"],
        ),
        // The tiny preset's 4 query heads over 2 key/value heads: 3 ranks cannot share them.
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "3"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "1"),
            ],
            &[],
            &[
                "started by torchrun as rank 0 of 3",
                "cannot split the model over 3 ranks",
            ],
        ),
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "1"),
            ],
            &["--tp", "2"],
            &["each process is one rank", "leave out --tp"],
        ),
    ];
    for (environment, extra, needles) in cases {
        let output = Command::new(common::kscope_binary())
            .args(run)
            .args(extra)
            .envs(environment.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{environment:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{environment:?}: {stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{environment:?}: no {needle:?} in {stderr}"
            );
        }
    }
    // kl compares two models in one process and joins no group.
    let output = Command::new(common::kscope_binary())
        .args(["kl", "--device", "cpu", "--reference", "unused"])
        .envs([("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("kl runs in one process"), "{stderr}");
    // One rank of one, or a stray RANK, runs as before.
    for environment in [vec![("RANK", "0"), ("WORLD_SIZE", "1")], vec![("RANK", "5")]] {
        let output = Command::new(common::kscope_binary())
            .args(run)
            .envs(environment.iter().copied())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
