//! Which kernels may be launched early (CUDA's programmatic dependent
//! launch): a kernel launched so can start while the kernel before it is
//! still running, which is only safe when it touches no memory before
//! `wait_for_previous_kernel()` (ops/prelude.cuh) but weights, which no
//! kernel writes. The kernel's source says so by making that call its first
//! statement, or `reads_weights_before_waiting()` where it reads weights
//! first (the streamed products); the launcher reads it here, so the kernel
//! and its launch cannot disagree.
//!
//! The CUDA backend launches kernels so in graphs where the GPU has
//! programmatic dependent launch (compute capability 9.0 or later), unless
//! the device was opened with `DeviceOptions::serial_launch` (kscope's
//! `--serial-launch`). `ops/tests.rs` requires the call as the first
//! statement of every kernel but the calibration spin. A kernel launched
//! early is timed from its predecessor's end (`cuda/matching.rs`), so the
//! wait counts once, in the kernel waited for.
// Read by the CUDA backend alone (and the tests).
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

/// What opens every kernel definition the ops write.
const KERNEL_OPENING: &str = "extern \"C\" __global__ void ";

/// The first statements that make a kernel safe to launch early: the wait
/// itself, the word of a kernel that reads only weights before it, or the
/// wait after letting the next kernel launch (which touches no memory).
const SAFE_OPENINGS: [&str; 3] = [
    "wait_for_previous_kernel();",
    "reads_weights_before_waiting();",
    "let_next_kernel_launch_then_wait();",
];

/// Whether the kernel `name` defined in `source` begins its body with one
/// of [`SAFE_OPENINGS`]. A kernel this cannot find, or whose body starts
/// with anything else, is launched normally.
pub(crate) fn begins_by_waiting(source: &str, name: &str) -> bool {
    let mut rest = source;
    while let Some(start) = rest.find(KERNEL_OPENING) {
        rest = &rest[start + KERNEL_OPENING.len()..];
        // Launch bounds may stand between the return type and the name.
        let declaration = match rest.strip_prefix("__launch_bounds__(") {
            Some(bounded) => match bounded.find(')') {
                Some(close) => &bounded[close + 1..],
                None => return false,
            },
            None => rest,
        };
        let Some(open) = declaration.find('(') else {
            return false;
        };
        if declaration[..open].trim() != name {
            continue;
        }
        // Parameter lists hold no braces: the first one opens the body.
        return declaration[open..].find('{').is_some_and(|body| {
            let statements = declaration[open + body + 1..].trim_start();
            SAFE_OPENINGS
                .iter()
                .any(|opening| statements.starts_with(opening))
        });
    }
    false
}

#[cfg(test)]
mod tests {
    use super::begins_by_waiting;

    const SOURCE: &str = r#"
__device__ void helper(float* x) { x[0] = 1.0f; }
extern "C" __global__ void waits(float* x, u32 n) {
    wait_for_previous_kernel();
    helper(x);
}
extern "C" __global__ void __launch_bounds__(256, 2) bounded_waits(float* x) { wait_for_previous_kernel(); helper(x); }
extern "C" __global__ void writes_first(float* x) {
    x[0] = 0.0f;
    wait_for_previous_kernel();
}
extern "C" __global__ void never_waits(float* x) { helper(x); }
extern "C" __global__ void waits_later(float* x) {
    helper(x);
}
extern "C" __global__ void other(float* x) { wait_for_previous_kernel(); }
extern "C" __global__ void streams(const float* w, float* x) {
    reads_weights_before_waiting();
    helper(x);
}
extern "C" __global__ void lets_the_next_launch(float* x) {
    let_next_kernel_launch_then_wait();
    helper(x);
}
extern "C" __global__ void lets_the_next_launch_unwaited(float* x) {
    let_next_kernel_launch();
    helper(x);
}
"#;

    #[test]
    fn reads_the_first_statement_of_the_named_kernel() {
        assert!(begins_by_waiting(SOURCE, "waits"));
        assert!(begins_by_waiting(SOURCE, "bounded_waits"));
        assert!(
            begins_by_waiting(SOURCE, "streams"),
            "a kernel reading weights first"
        );
        assert!(
            begins_by_waiting(SOURCE, "lets_the_next_launch"),
            "a kernel letting the next launch, then waiting"
        );
        assert!(
            !begins_by_waiting(SOURCE, "lets_the_next_launch_unwaited"),
            "letting the next launch is no wait"
        );
        assert!(
            !begins_by_waiting(SOURCE, "writes_first"),
            "a write before the wait"
        );
        assert!(!begins_by_waiting(SOURCE, "never_waits"));
        assert!(
            !begins_by_waiting(SOURCE, "waits_later"),
            "the wait of the next kernel is not its own"
        );
        assert!(
            !begins_by_waiting(SOURCE, "wait"),
            "a prefix of another kernel's name"
        );
        assert!(!begins_by_waiting(SOURCE, "missing"));
        assert!(!begins_by_waiting(
            "extern \"C\" __global__ void broken(",
            "broken"
        ));
    }
}
