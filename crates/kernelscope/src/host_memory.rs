//! How much host memory a new allocation may take, so that what a file or
//! a flag asks for is refused with a message before Rust's allocator would
//! abort the process on it (`ulimit -v`, a small container).

/// The host memory available to a new allocation, in bytes: the system's
/// (`MemAvailable` of /proc/meminfo), less where this process's address
/// space is limited (`ulimit -v`) to what is left of that limit; `None`
/// where the system does not say (not Linux).
pub fn available_bytes() -> Option<u64> {
    let system = kib_of("/proc/meminfo", "MemAvailable:")? << 10;
    let Some(limit) = address_space_limit() else {
        return Some(system);
    };
    let used = kib_of("/proc/self/status", "VmSize:").unwrap_or(0) << 10;
    Some(system.min(limit.saturating_sub(used)))
}

/// The `KEY  N kB` figure of a /proc file, in KiB.
fn kib_of(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|line| line.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The soft limit on this process's address space in bytes (`ulimit -v`),
/// `None` when unlimited. /proc/self/limits says it without a system call.
fn address_space_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|line| line.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn memory_is_known_on_linux_and_within_the_system() {
        let available = available_bytes().expect("Linux says how much memory is available");
        let total = kib_of("/proc/meminfo", "MemTotal:").unwrap() << 10;
        assert!(available > 0 && available <= total, "{available} of {total}");
    }
}
