//! A GGUF file being written (`gen-model`, `quantize`) goes to a hidden
//! temporary file beside `--out` first. Ctrl-C or SIGTERM stops the writer
//! before its next tensor, which deletes that file (a second signal kills
//! at once); what a killed run (`kill -9`) left is removed by the next
//! run that writes beside it.

use std::path::{Path, PathBuf};

/// Stops GGUF writing on the first SIGINT or SIGTERM, then lets a second
/// one kill the process as usual.
pub fn stop_on_signals() {
    extern "C" fn on_signal(_: libc::c_int) {
        kernelscope_model::gguf::stop_writing();
    }
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an
        // atomic (async-signal-safe), and SA_RESETHAND restores the default
        // action for the next signal.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Removes the temporary files beside `out` that earlier kscope runs
/// writing `out` left when they were killed (`.NAME.kscope-PID[-N].tmp`
/// whose process is gone), saying so; those of a run still going are
/// left alone.
pub fn remove_left_temporaries(out: &Path) {
    let Some(name) = out.file_name().map(|name| name.to_string_lossy().into_owned()) else {
        return;
    };
    let folder = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return;
    };
    let prefix = format!(".{name}.kscope-");
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = left_by(&file_name, &prefix) else {
            continue;
        };
        let path = entry.path();
        if process_gone(pid) && entry.file_type().is_ok_and(|kind| kind.is_file()) {
            match std::fs::remove_file(&path) {
                Ok(()) => eprintln!(
                    "note: removed {}, left by an earlier run (process {pid}) that was killed",
                    path.display()
                ),
                Err(error) => eprintln!(
                    "warning: {} was left by an earlier run (process {pid}) and could not be removed: {error}",
                    path.display()
                ),
            }
        }
    }
}

/// The process that wrote temporary file `file_name`, if it is one of
/// kscope's for the output `prefix` names.
fn left_by(file_name: &str, prefix: &str) -> Option<u32> {
    let rest = file_name.strip_prefix(prefix)?.strip_suffix(".tmp")?;
    let pid = rest.split('-').next()?;
    pid.parse().ok()
}

/// Whether process `pid` no longer exists (never for this one).
fn process_gone(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    !alive
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_names_the_process_that_wrote_it() {
        let prefix = ".model.gguf.kscope-";
        assert_eq!(left_by(".model.gguf.kscope-4242-3.tmp", prefix), Some(4242));
        assert_eq!(left_by(".model.gguf.kscope-77.tmp", prefix), Some(77));
        assert_eq!(left_by(".other.gguf.kscope-77.tmp", prefix), None);
        assert_eq!(left_by(".model.gguf.kscope-x.tmp", prefix), None);
        assert_eq!(left_by(".model.gguf.kscope-77.part", prefix), None);
        assert!(!process_gone(std::process::id()));
    }
}
