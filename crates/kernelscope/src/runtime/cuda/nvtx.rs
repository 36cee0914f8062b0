//! NVTX ranges for submission labels and dispatch scopes, so the names
//! kernelscope reports also show in Nsight Systems. Only where an NVTX
//! library is on the loader path: cudarc's bindings panic on first use
//! without one, so presence is checked once and, when absent, nothing
//! happens (and `kscope info` says NVTX is inactive).

use std::ffi::CString;
use std::sync::OnceLock;

/// Whether an NVTX library (libnvToolsExt) can be loaded.
pub(crate) fn active() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to load the library by its known names.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvtx::sys::is_culib_present() })
}

/// A pushed range, popped on drop; inert when NVTX is inactive.
pub(crate) struct Range(bool);

impl Range {
    pub(crate) fn push(name: &str) -> Range {
        if !active() {
            return Range(false);
        }
        let Ok(text) = CString::new(name) else {
            return Range(false);
        };
        // SAFETY: the library is present (checked) and `text` is a valid C string for the call.
        unsafe { cudarc::nvtx::sys::nvtxRangePushA(text.as_ptr()) };
        Range(true)
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: pops the range this value pushed.
            unsafe { cudarc::nvtx::sys::nvtxRangePop() };
        }
    }
}
