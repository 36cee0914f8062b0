//! The rendezvous between threads and between two processes on localhost:
//! every rank gets rank 0's bytes, and each way a meeting fails is named on
//! every rank that arrived.

use super::Rendezvous;
use std::time::Duration;

/// A port free at the moment (the listener is dropped before use).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rank(port: u16, rank: usize, world_size: usize, timeout_ms: u64) -> Rendezvous {
    Rendezvous {
        address: format!("127.0.0.1:{port}"),
        rank,
        world_size,
        timeout: Duration::from_millis(timeout_ms),
    }
}

/// 128 random bytes, as NCCL's unique id is.
fn random_id(seed: u64) -> Vec<u8> {
    let mut rng = crate::rng::SplitMix64::new(seed);
    (0..128).map(|_| rng.next_u64() as u8).collect()
}

/// Runs ranks 1.. of `descriptions` in threads and rank 0 here; every
/// rank's result, in rank order.
fn meet_all(
    port: u16,
    descriptions: &[&str],
    world_size: usize,
    shared: &[u8],
) -> Vec<crate::Result<Vec<u8>>> {
    let others: Vec<_> = descriptions
        .iter()
        .enumerate()
        .skip(1)
        .map(|(r, description)| {
            let (me, description) = (rank(port, r, world_size, 3_000), description.to_string());
            std::thread::spawn(move || me.meet(&description, None))
        })
        .collect();
    let mut results = vec![rank(port, 0, world_size, 3_000).meet(descriptions[0], Some(shared))];
    results.extend(others.into_iter().map(|handle| handle.join().unwrap()));
    results
}

#[test]
fn every_rank_receives_rank_0s_bytes() {
    let id = random_id(54);
    let results = meet_all(free_port(), &["fnv1a64 5b40daadb04df2a7"; 4], 4, &id);
    for (r, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap(), id, "rank {r}");
    }
}

#[test]
fn a_rank_running_another_model_fails_every_rank() {
    let results = meet_all(
        free_port(),
        &["fnv1a64 aaaa", "fnv1a64 aaaa", "fnv1a64 bbbb"],
        3,
        &random_id(1),
    );
    for (r, result) in results.into_iter().enumerate() {
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("rank 2 runs fnv1a64 bbbb, rank 0 runs fnv1a64 aaaa"),
            "rank {r}: {message}"
        );
    }
}

#[test]
fn a_rank_that_never_arrives_is_named() {
    let port = free_port();
    let one = std::thread::spawn(move || rank(port, 1, 3, 3_000).meet("m", None));
    let root = rank(port, 0, 3, 400).meet("m", Some(&random_id(2)));
    for (r, result) in [(0, root), (1, one.join().unwrap())] {
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("rank 2 never arrived within"),
            "rank {r}: {message}"
        );
    }
}

#[test]
fn a_rank_started_for_another_group_size_is_named() {
    let port = free_port();
    let one = std::thread::spawn(move || rank(port, 1, 3, 3_000).meet("m", None));
    let root = rank(port, 0, 2, 3_000).meet("m", Some(&random_id(3)));
    for result in [root, one.join().unwrap()] {
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("rank 1 was started for a group of 3, rank 0 for 2"),
            "{message}"
        );
    }
}

#[test]
fn rank_0_that_never_listens_is_an_error_not_a_hang() {
    let started = std::time::Instant::now();
    let message = rank(free_port(), 1, 2, 300)
        .meet("m", None)
        .unwrap_err()
        .to_string();
    assert!(message.contains("rank 0 did not listen within"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The variable that makes this test's own binary, started again, act as
/// rank 1 at the port it holds.
const CHILD_PORT: &str = "KSCOPE_RENDEZVOUS_TEST_PORT";

#[test]
fn two_processes_exchange_an_id() {
    if let Ok(port) = std::env::var(CHILD_PORT) {
        // Rank 1, in the process the test below started.
        let id = rank(port.parse().unwrap(), 1, 2, 10_000)
            .meet("fnv1a64 2ca2fb2358f9a809", None)
            .unwrap();
        let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
        println!("received {hex}");
        return;
    }
    let port = free_port();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "runtime::collective::rendezvous::tests::two_processes_exchange_an_id",
            "--nocapture",
        ])
        .env(CHILD_PORT, port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = random_id(54_000 + port as u64);
    let root = rank(port, 0, 2, 10_000).meet("fnv1a64 2ca2fb2358f9a809", Some(&id));
    let output = child.wait_with_output().unwrap();
    assert_eq!(root.unwrap(), id);
    assert!(output.status.success(), "rank 1's process failed");
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("received {hex}")),
        "rank 1 printed:\n{stdout}"
    );
}
