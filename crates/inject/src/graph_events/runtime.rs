//! The CUDA runtime's own functions, as the program links them: the next
//! definitions after this library's (which stands in for `cudaGraphLaunch`),
//! or those of a runtime loaded privately by a library of the program.

use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

use super::{Event, Stream};

/// The CUDA runtime's functions the timing needs, from the library the
/// program itself links (`RTLD_NEXT`: the next definition after ours).
pub(super) struct Runtime {
    pub(super) event_create: unsafe extern "C" fn(*mut Event) -> c_int,
    pub(super) event_record: unsafe extern "C" fn(Event, Stream) -> c_int,
    pub(super) event_query: unsafe extern "C" fn(Event) -> c_int,
    pub(super) event_synchronize: unsafe extern "C" fn(Event) -> c_int,
    pub(super) elapsed: unsafe extern "C" fn(*mut f32, Event, Event) -> c_int,
    pub(super) is_capturing: unsafe extern "C" fn(Stream, *mut c_int) -> c_int,
    pub(super) get_device: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub(super) set_device: unsafe extern "C" fn(c_int) -> c_int,
    pub(super) stream_create: unsafe extern "C" fn(*mut Stream, u32) -> c_int,
    pub(super) peek_at_last_error: unsafe extern "C" fn() -> c_int,
    pub(super) get_last_error: unsafe extern "C" fn() -> c_int,
}

/// The CUDA runtime's own `name`: the next definition after this
/// library's, or, where the runtime is not in the global scope (loaded
/// privately by a library of the program), the loaded runtime's.
pub(super) fn next_definition(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks the symbol up.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !found.is_null() {
        return Some(found);
    }
    loaded_runtimes().into_iter().find_map(|path| {
        // SAFETY: RTLD_NOLOAD only hands back a library already loaded (adding a
        // reference, kept: the runtime stays loaded); dlsym looks the name up in it.
        unsafe {
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            let found = if handle.is_null() {
                std::ptr::null_mut()
            } else {
                libc::dlsym(handle, name.as_ptr())
            };
            (!found.is_null()).then_some(found)
        }
    })
}

/// The paths of the loaded CUDA runtimes (`libcudart.so*`, or a wheel's
/// `libcudart-HASH.so*`).
fn loaded_runtimes() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, found: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid entry whose name, when not null, is NUL-terminated;
        // `found` is the vector below.
        unsafe {
            let name = (*info).dlpi_name;
            if !name.is_null() {
                let name = CStr::from_ptr(name);
                if name.to_bytes().windows(9).any(|window| window == b"libcudart") {
                    (*found.cast::<Vec<std::ffi::CString>>()).push(name.to_owned());
                }
            }
        }
        0
    }
    let mut found: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: `visit` only reads each entry and pushes to `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut found).cast()) };
    found
}

pub(super) fn runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            macro_rules! function {
                ($name:literal as $signature:ty) => {
                    // SAFETY: the CUDA runtime's function of that name, of that C signature.
                    unsafe { std::mem::transmute::<*mut c_void, $signature>(next_definition($name)?) }
                };
            }
            Some(Runtime {
                event_create: function!(c"cudaEventCreate" as unsafe extern "C" fn(*mut Event) -> c_int),
                event_record: function!(c"cudaEventRecord" as unsafe extern "C" fn(Event, Stream) -> c_int),
                event_query: function!(c"cudaEventQuery" as unsafe extern "C" fn(Event) -> c_int),
                event_synchronize: function!(c"cudaEventSynchronize" as unsafe extern "C" fn(Event) -> c_int),
                elapsed: function!(
                    c"cudaEventElapsedTime" as unsafe extern "C" fn(*mut f32, Event, Event) -> c_int
                ),
                is_capturing: function!(
                    c"cudaStreamIsCapturing" as unsafe extern "C" fn(Stream, *mut c_int) -> c_int
                ),
                get_device: function!(c"cudaGetDevice" as unsafe extern "C" fn(*mut c_int) -> c_int),
                set_device: function!(c"cudaSetDevice" as unsafe extern "C" fn(c_int) -> c_int),
                stream_create: function!(
                    c"cudaStreamCreateWithFlags" as unsafe extern "C" fn(*mut Stream, u32) -> c_int
                ),
                peek_at_last_error: function!(c"cudaPeekAtLastError" as unsafe extern "C" fn() -> c_int),
                get_last_error: function!(c"cudaGetLastError" as unsafe extern "C" fn() -> c_int),
            })
        })
        .as_ref()
}
