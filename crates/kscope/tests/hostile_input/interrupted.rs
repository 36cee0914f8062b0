//! A GGUF file interrupted while it is written: Ctrl-C (SIGINT) or SIGTERM
//! leaves neither the output nor its hidden temporary file and exits 130
//! naming the output; a temporary file a killed run left is removed by
//! the next run that writes beside it, one of a run still going is not.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{kscope, kscope_binary};

fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kscope-interrupted-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The temporary files in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect()
}

#[test]
fn a_signal_while_writing_leaves_nothing_behind() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let dir = folder(&format!("signal-{signal}"));
        let out = dir.join("big.gguf");
        // A 1B shape: its first tensor alone takes long enough to be caught.
        let mut child = Command::new(kscope_binary())
            .args(["gen-model", "--preset", "llama-3.2-1b", "--quiet", "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let began = Instant::now();
        while temporaries(&dir).is_empty() {
            assert!(
                began.elapsed() < Duration::from_secs(120),
                "no temporary file appeared"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "gen-model ended before it was signalled"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(130), "signal {signal}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(out.to_str().unwrap()) && stderr.contains("interrupted"),
            "{stderr}"
        );
        assert!(
            !stderr.contains(".tmp"),
            "the message names the output, not its temporary: {stderr}"
        );
        assert!(!out.exists());
        assert_eq!(temporaries(&dir), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn what_a_killed_run_left_is_removed_by_the_next() {
    let dir = folder("left");
    let out = dir.join("tiny.gguf");
    // A process that has ended: its pid names the killed run.
    let mut ended = Command::new("true").spawn().unwrap();
    ended.wait().unwrap();
    let left = dir.join(format!(".tiny.gguf.kscope-{}-0.tmp", ended.id()));
    std::fs::write(&left, b"half a file").unwrap();
    // One of a run still going (this test's process), and another output's.
    let going = dir.join(format!(".tiny.gguf.kscope-{}-9.tmp", std::process::id()));
    std::fs::write(&going, b"being written").unwrap();
    let other = dir.join(format!(".other.gguf.kscope-{}-0.tmp", ended.id()));
    std::fs::write(&other, b"another output's").unwrap();
    let (code, _, stderr) = kscope(&[
        "gen-model",
        "--preset",
        "tiny",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("removed") && stderr.contains(left.to_str().unwrap()),
        "{stderr}"
    );
    assert!(!left.exists());
    assert!(going.exists() && other.exists());
    assert!(out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
