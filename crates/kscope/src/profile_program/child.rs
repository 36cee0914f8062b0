//! Starting the profiled program with the injection library (and the
//! `KSCOPE_*` variables of `ProfileArgs::injection_settings`), passing it
//! the signals meant for it, and waiting for it and its descendants.

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kernelscope_trace::injection_settings::{CUDA_INJECTION_VARIABLE, NVTX_INJECTION_VARIABLE};

use super::{Graphs, ProfileArgs};

/// How long descendants left running after CMD ends are waited for.
const DESCENDANT_GRACE: Duration = Duration::from_secs(10);

/// The child's pid, for the forwarding signal handler (0: none yet).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// How the program ended.
pub(super) enum Ended {
    Exited(i32),
    Signalled(i32),
}

impl Ended {
    /// The exit code a shell would give: the child's, or 128 + its signal.
    pub(super) fn exit_code(&self) -> u8 {
        match *self {
            Ended::Exited(code) => code.clamp(0, 255) as u8,
            Ended::Signalled(signal) => (128 + signal).clamp(0, 255) as u8,
        }
    }

    pub(super) fn describe(&self) -> String {
        match *self {
            Ended::Exited(code) => format!("exited with status {code}"),
            Ended::Signalled(signal) => format!("was killed by signal {signal}"),
        }
    }
}

/// Runs the program under the injection, sampling DRAM bytes and recording
/// API calls as `args` say, and waits for it and for any descendant it
/// left behind (up to [`DESCENDANT_GRACE`]).
pub(super) fn run_child(args: &ProfileArgs, library: &Path, records: &Path) -> Result<Ended> {
    let command = &args.command;
    // SAFETY: prctl with an integer argument; makes orphaned descendants ours to reap.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let mut program = std::process::Command::new(&command[0]);
    program
        .args(&command[1..])
        .env(CUDA_INJECTION_VARIABLE, library)
        .env(NVTX_INJECTION_VARIABLE, library);
    for (variable, value) in args.injection_settings(records).to_environment() {
        match value {
            Some(value) => program.env(variable, value),
            None => program.env_remove(variable),
        };
    }
    if args.graphs == Graphs::Events {
        // Preloaded, its cudaGraphLaunch stands in for the CUDA runtime's.
        let mut preload = library.as_os_str().to_owned();
        if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|existing| !existing.is_empty()) {
            preload.push(":");
            preload.push(existing);
        }
        program.env("LD_PRELOAD", preload);
    }
    let mut child = program
        .spawn()
        .with_context(|| format!("starting {}", command[0]))?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    forward_signals();
    let status = child.wait().context("waiting for the program")?;
    CHILD.store(0, Ordering::SeqCst);
    reap_descendants();
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exited(code),
        (None, Some(signal)) => Ended::Signalled(signal),
        (None, None) => Ended::Exited(1),
    })
}

/// Passes SIGTERM, SIGHUP and SIGQUIT on to the program; ignores SIGINT,
/// which a terminal sends the program itself.
fn forward_signals() {
    extern "C" fn forward(signal: libc::c_int) {
        let child = CHILD.load(Ordering::SeqCst);
        if child > 0 {
            // SAFETY: kill is async-signal-safe; the pid is our child's.
            unsafe { libc::kill(child, signal) };
        }
    }
    // SAFETY: installs a handler that only reads an atomic and calls kill.
    unsafe {
        for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(signal, forward as *const () as libc::sighandler_t);
        }
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
}

/// Reaps descendants re-parented to kscope, waiting for those still
/// running up to [`DESCENDANT_GRACE`].
fn reap_descendants() {
    let deadline = Instant::now() + DESCENDANT_GRACE;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with an out-parameter; -1 is any child of ours.
        let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match reaped {
            pid if pid > 0 => continue,
            0 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            0 => {
                eprintln!(
                    "kscope profile: descendants of the program still run after {} s; profiling what they recorded so far",
                    DESCENDANT_GRACE.as_secs()
                );
                return;
            }
            _ => return,
        }
    }
}
