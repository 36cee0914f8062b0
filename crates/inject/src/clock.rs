//! The one clock every record of the process is on: CLOCK_MONOTONIC, which
//! CUPTI is told to use too (`cuptiActivityRegisterTimestampCallback`), so
//! that NVTX ranges taken before CUDA starts, API calls and the device's
//! records line up without conversion, and processes of one host share it.
//!
//! A foundation: uses no other module of the library.

/// Now, ns on CLOCK_MONOTONIC.
pub(crate) fn now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one out-parameter; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// What CUPTI calls for its timestamps.
pub(crate) unsafe extern "C" fn cupti_timestamp() -> u64 {
    now_ns()
}
