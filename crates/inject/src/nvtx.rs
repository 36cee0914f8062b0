//! NVTX ranges. The program's NVTX library, given `NVTX_INJECTION64_PATH`, calls
//! `InitializeInjectionNvtx2` (lib.rs) on its first call, which opens the record file (`startup`)
//! and has [`attach`] write our handlers into its tables
//! (each NVTX copy in the process does, once: torch, NCCL and the program may each carry one).
//! Push/pop ranges nest on one stack per thread, shared by every domain; start/end ranges may end
//! on any thread. Each closed range is queued for the sink; a range still open when its thread or
//! the process ends is never written. Marks and the rest of NVTX stay unhandled, so no-ops.
//!
//! Uses `window` (a step range opens or closes the window) and `collection` (which then follows
//! it), `sink`, `clock`, `threads` (the thread's innermost range, which `callbacks` reads) and
//! `locking`; used only by the entry point, through `startup`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::mem::offset_of;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use kernelscope_trace::NvtxRange;

use crate::locking::lock;
use crate::threads::set_current_range;

/// `NvtxGetExportTableFunc_t` (nvtxTypes.h).
pub(crate) type GetExportTable = unsafe extern "C" fn(export_table_id: u32) -> *const c_void;
/// `NvtxFunctionTable` (nvtxTypes.h): an array of pointers to the slots NVTX calls through.
type FunctionTable = *const *mut *const c_void;

/// `NVTX_CB_MODULE_CORE` (nvtxTypes.h).
const MODULE_CORE: c_int = 1;
/// `NVTX_CB_MODULE_CORE2` (nvtxTypes.h): the domain calls.
const MODULE_CORE2: c_int = 5;
/// `NVTX_MESSAGE_TYPE_ASCII` (nvToolsExt.h).
const MESSAGE_ASCII: i32 = 1;
/// `NVTX_MESSAGE_TYPE_UNICODE` (nvToolsExt.h): `wchar_t`, UTF-32 on Linux.
const MESSAGE_UNICODE: i32 = 2;
/// `NVTX_MESSAGE_TYPE_REGISTERED` (nvToolsExt.h): a handle from `nvtxDomainRegisterString`.
const MESSAGE_REGISTERED: i32 = 3;

/// `NvtxExportTableCallbacks` (nvtxTypes.h), field for field.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<unsafe extern "C" fn(c_int, *mut FunctionTable, *mut c_uint) -> c_int>,
}

/// `nvtxEventAttributes_v2` (nvToolsExt.h): `size` is the bytes the caller
/// filled in, `message` a union of pointers chosen by `message_type`.
#[repr(C)]
#[allow(dead_code, reason = "only the size and the message are read")]
struct EventAttributes {
    version: u16,
    size: u16,
    /// category, colorType, color, payloadType, reserved0 and the 8-byte payload union.
    category_color_payload: [u32; 7],
    message_type: i32,
    message: *const c_void,
}

// The layout on 64-bit Linux; a mistake here would read the wrong field.
const _: () = assert!(size_of::<EventAttributes>() == 48 && offset_of!(EventAttributes, message) == 40);

/// A range begun and not yet ended.
struct OpenRange {
    /// All but its end and depth, known when it ends (`parent` is 0 for start/end ranges).
    range: NvtxRange,
    /// Borrowed when registered, so that ranges named by registered strings allocate nothing.
    message: Cow<'static, str>,
    /// Its domain's name, "" for the default domain; names are interned, so borrowed.
    domain: &'static str,
}

impl OpenRange {
    /// A range beginning now on the calling thread.
    fn begin(parent: u64, message: Cow<'static, str>, domain: &'static str) -> OpenRange {
        if crate::window::range_began(&message) {
            crate::collection::follow_window();
        }
        OpenRange {
            range: NvtxRange {
                start_ns: crate::clock::now_ns(),
                thread: crate::threads::thread_id(),
                id: RANGES.next_id.fetch_add(1, Ordering::Relaxed),
                parent,
                ..NvtxRange::default()
            },
            message,
            domain,
        }
    }

    /// Queues it for the sink, ended at `end_ns` with `depth` ranges open around it.
    fn close(mut self, end_ns: u64, depth: usize) {
        (self.range.end_ns, self.range.depth) = (end_ns, depth as u32);
        if crate::window::range_ended(&self.message, end_ns) {
            crate::collection::follow_window();
        }
        if !crate::window::keeps_range(self.range.start_ns) {
            return;
        }
        #[cfg(test)]
        tests::capture(self.range, &self.message, self.domain);
        crate::sink::push_range(self.range, &self.message, self.domain);
    }
}

/// The ranges of the process: NVTX's handlers are called on any thread with
/// no pointer of ours, and a start/end range may end on another thread.
#[derive(Default)]
struct Ranges {
    /// The next range id.
    next_id: AtomicU64,
    /// Start/end ranges open anywhere in the process, by id.
    started: Mutex<HashMap<u64, OpenRange>>,
    /// Interned texts (domains, registered strings): the one leaked copy of each ([`intern`]).
    texts: Mutex<HashMap<String, &'static String>>,
}

static RANGES: LazyLock<Ranges> = LazyLock::new(|| Ranges {
    next_id: AtomicU64::new(1),
    ..Ranges::default()
});

thread_local! {
    /// The thread's push/pop ranges, innermost last (the innermost's id is
    /// also `threads::current_range`, one load per kernel launch).
    static STACK: RefCell<Vec<OpenRange>> = const { RefCell::new(Vec::new()) };
}

/// Writes our handlers into the calling NVTX copy's tables; None when it offered none.
/// Safety: `get_export_table` is None or NVTX's `nvtxGetExportTable`.
pub(crate) unsafe fn attach(get_export_table: Option<GetExportTable>) -> Option<()> {
    // SAFETY: NVTX's getter takes any id (1: NVTX_ETID_CALLBACKS), answering null for those it lacks.
    let callbacks = unsafe { get_export_table?(1) }.cast::<ExportTableCallbacks>();
    // SAFETY: non-null, it is NVTX's static table of both fields, the first its size.
    let callbacks = unsafe { callbacks.as_ref() }?;
    let whole = callbacks.struct_size >= size_of::<ExportTableCallbacks>();
    let get_module = callbacks.get_module_function_table.filter(|_| whole)?;
    let mut attached = None;
    for module in [MODULE_CORE, MODULE_CORE2] {
        let (mut table, mut size): (FunctionTable, c_uint) = (std::ptr::null(), 0);
        // SAFETY: two out-parameters, both valid for writes.
        if unsafe { get_module(module, &mut table, &mut size) } == 0 || table.is_null() {
            continue;
        }
        attached = Some(());
        let offered = |entry: &&(c_int, u32, *const c_void)| entry.0 == module && entry.1 < size;
        for &(_, id, handler) in HANDLERS.iter().filter(offered) {
            // SAFETY: NVTX's table holds `size` + 1 entries (it reports one
            // fewer than it holds), so an `id` below `size` is inside it.
            let slot = unsafe { *table.add(id as usize) };
            if !slot.is_null() {
                // SAFETY: NVTX's slot for `id`, whose type the handler has; no
                // thread calls through it until NVTX marks its initialisation done.
                unsafe { *slot = handler };
            }
        }
    }
    attached
}

/// Runs a handler's body, answering `neutral` if it panics: unwinding into C is undefined.
pub(crate) fn guarded<T>(neutral: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(neutral)
}

/// Defines NVTX's handlers, `unsafe extern "C"` (NVTX calls them with the program's pointers) and
/// run under [`guarded`], and [`HANDLERS`]. Push answers the new range's 0-based level, pop the
/// ended one's (negative if none), start the new id (0 on failure), register and create the
/// interned text's handle (so `nvtxDomainDestroy` is left a no-op).
macro_rules! handlers {
    ($($module:ident $id:literal $nvtx:ident fn $name:ident($($argument:ident: $type:ty),*)
        $(-> $answer:ty)? { $neutral:expr, $body:expr })*) => {
        $(#[doc = concat!("`", stringify!($nvtx), "`.")]
        #[allow(unused_unsafe, reason = "pop and end take no pointer")]
        unsafe extern "C" fn $name($($argument: $type),*) $(-> $answer)? {
            // SAFETY: NVTX passes the program's arguments as its header types them: strings
            // null or terminated, attributes null or as `EventAttributes` lays them out, domain
            // and string handles null or from `intern` (the only handles NVTX gets from us).
            guarded($neutral, || unsafe { $body })
        })*
        /// (module, callback id, handler): NvtxCallbackIdCore and NvtxCallbackIdCore2 in nvtxTypes.h.
        const HANDLERS: &[(c_int, u32, *const c_void)] = &[$(($module, $id, $name as *const c_void)),*];
    };
}

handlers! {
    MODULE_CORE 4 nvtxRangeStartEx fn range_start_ex(attributes: *const EventAttributes) -> u64
        { 0, start(message_of(attributes), "") }
    MODULE_CORE 5 nvtxRangeStartA fn range_start_a(message: *const c_char) -> u64
        { 0, start(ascii(message), "") }
    MODULE_CORE 6 nvtxRangeStartW fn range_start_w(message: *const libc::wchar_t) -> u64
        { 0, start(wide(message), "") }
    MODULE_CORE 7 nvtxRangeEnd fn range_end(id: u64) { (), end(id) }
    MODULE_CORE 8 nvtxRangePushEx fn range_push_ex(attributes: *const EventAttributes) -> c_int
        { -1, push(message_of(attributes), "") }
    MODULE_CORE 9 nvtxRangePushA fn range_push_a(message: *const c_char) -> c_int
        { -1, push(ascii(message), "") }
    MODULE_CORE 10 nvtxRangePushW fn range_push_w(message: *const libc::wchar_t) -> c_int
        { -1, push(wide(message), "") }
    MODULE_CORE 11 nvtxRangePop fn range_pop() -> c_int { -1, pop() }
    MODULE_CORE2 2 nvtxDomainRangeStartEx
        fn domain_range_start_ex(domain: *const c_void, attributes: *const EventAttributes) -> u64
        { 0, start(message_of(attributes), interned(domain)) }
    MODULE_CORE2 3 nvtxDomainRangeEnd fn domain_range_end(_domain: *const c_void, id: u64) { (), end(id) }
    MODULE_CORE2 4 nvtxDomainRangePushEx
        fn domain_range_push_ex(domain: *const c_void, attributes: *const EventAttributes) -> c_int
        { -1, push(message_of(attributes), interned(domain)) }
    MODULE_CORE2 5 nvtxDomainRangePop fn domain_range_pop(_domain: *const c_void) -> c_int { -1, pop() }
    MODULE_CORE2 10 nvtxDomainRegisterStringA
        fn domain_register_string_a(_domain: *const c_void, text: *const c_char) -> *const c_void
        { std::ptr::null(), intern(ascii(text)) }
    MODULE_CORE2 11 nvtxDomainRegisterStringW
        fn domain_register_string_w(_domain: *const c_void, text: *const libc::wchar_t) -> *const c_void
        { std::ptr::null(), intern(wide(text)) }
    MODULE_CORE2 12 nvtxDomainCreateA fn domain_create_a(name: *const c_char) -> *const c_void
        { std::ptr::null(), intern(ascii(name)) }
    MODULE_CORE2 13 nvtxDomainCreateW fn domain_create_w(name: *const libc::wchar_t) -> *const c_void
        { std::ptr::null(), intern(wide(name)) }
}

/// Opens a push/pop range on the calling thread; its 0-based level.
fn push(message: Cow<'static, str>, domain: &'static str) -> c_int {
    let level = STACK.try_with(|stack| {
        let mut stack = stack.try_borrow_mut().ok()?;
        let mut range = OpenRange::begin(stack.last().map_or(0, |below| below.range.id), message, domain);
        range.range.stacked = 1;
        set_current_range(range.range.id);
        stack.push(range);
        Some(stack.len() as c_int - 1)
    });
    level.ok().flatten().unwrap_or(-1)
}

/// Closes the calling thread's innermost push/pop range; its level, -1 when none was open.
fn pop() -> c_int {
    let end_ns = crate::clock::now_ns();
    let level = STACK.try_with(|stack| {
        let mut stack = stack.try_borrow_mut().ok()?;
        let range = stack.pop()?;
        set_current_range(stack.last().map_or(0, |below| below.range.id));
        range.close(end_ns, stack.len());
        Some(stack.len() as c_int)
    });
    level.ok().flatten().unwrap_or(-1)
}

/// Opens a start/end range; its id.
fn start(message: Cow<'static, str>, domain: &'static str) -> u64 {
    let range = OpenRange::begin(0, message, domain);
    let id = range.range.id;
    lock(&RANGES.started).insert(id, range);
    id
}

/// Closes start/end range `id` on any thread; an unknown id (0, or already ended) is ignored.
fn end(id: u64) {
    let end_ns = crate::clock::now_ns();
    let range = lock(&RANGES.started).remove(&id);
    range.into_iter().for_each(|range| range.close(end_ns, 0));
}

/// The message of an `nvtxEventAttributes_t`, "" when absent or of another type. Safety:
/// `attributes` is null or readable for its stated `size`, its message what its type says.
unsafe fn message_of(attributes: *const EventAttributes) -> Cow<'static, str> {
    // SAFETY: non-null, every version of the struct begins with version and size.
    if attributes.is_null() || usize::from(unsafe { (*attributes).size }) < size_of::<EventAttributes>() {
        return Cow::Borrowed("");
    }
    // SAFETY: the size says the whole struct is there; the type says which member is set.
    unsafe {
        let attributes = &*attributes;
        match attributes.message_type {
            MESSAGE_ASCII => ascii(attributes.message.cast()),
            MESSAGE_UNICODE => wide(attributes.message.cast()),
            MESSAGE_REGISTERED => Cow::Borrowed(interned(attributes.message)),
            _ => Cow::Borrowed(""),
        }
    }
}

/// A C string's text, invalid UTF-8 replaced; "" for null. Safety: null or NUL-terminated.
unsafe fn ascii(text: *const c_char) -> Cow<'static, str> {
    // SAFETY: non-null and NUL-terminated, by the caller's promise.
    let decoded = (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned());
    decoded.map_or(Cow::Borrowed(""), Cow::Owned)
}

/// A wide (UTF-32) string's text, invalid code points replaced; "" for null. Safety: null or 0-terminated.
unsafe fn wide(text: *const libc::wchar_t) -> Cow<'static, str> {
    // SAFETY: read only when non-null, and only up to the terminator, by the caller's promise.
    let units = (0..).map(|index| unsafe { *text.add(index) });
    let decode = |unit| char::from_u32(unit as u32).unwrap_or(char::REPLACEMENT_CHARACTER);
    let decoded = (!text.is_null()).then(|| units.take_while(|&unit| unit != 0).map(decode).collect());
    decoded.map_or(Cow::Borrowed(""), Cow::Owned)
}

/// A handle for `text`: the address of its one leaked copy, which [`interned`] reads without a
/// lock. Domains and registered strings are made once and used often: the leak stays small.
fn intern(text: Cow<'_, str>) -> *const c_void {
    let leak = |text: &String| &*Box::leak(Box::new(text.clone()));
    let text = *lock(&RANGES.texts)
        .entry(text.into_owned())
        .or_insert_with_key(leak);
    std::ptr::from_ref(text).cast()
}

/// The text of a handle from [`intern`], "" for null (the default domain). Safety: null or from it.
unsafe fn interned(handle: *const c_void) -> &'static str {
    // SAFETY: interned texts are leaked, so they live as long as the process.
    unsafe { handle.cast::<String>().as_ref() }.map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::current_range;
    use std::ffi::CString;
    use std::hash::{BuildHasher, RandomState};

    /// Every range the tests closed, with its message and domain; each test finds its own ids.
    static CAPTURED: Mutex<Vec<(NvtxRange, String, String)>> = Mutex::new(Vec::new());

    /// Called by [`OpenRange::close`].
    pub(super) fn capture(range: NvtxRange, message: &str, domain: &str) {
        lock(&CAPTURED).push((range, message.into(), domain.into()));
    }

    /// The ranges closed with id `id`, with their messages and domains.
    fn captured(id: u64) -> Vec<(NvtxRange, String, String)> {
        let mut captured = lock(&CAPTURED).clone();
        captured.retain(|(range, _, _)| range.id == id);
        captured
    }

    /// Closed range `id`'s parent, depth, message and domain.
    fn shape(id: u64) -> (u64, u32, String, String) {
        let (range, message, domain) = captured(id).remove(0);
        (range.parent, range.depth, message, domain)
    }

    /// A different text each call, some of it multi-byte or past the BMP.
    fn random_text() -> String {
        format!("ré漢🚀 {:x}", RandomState::new().hash_one(crate::clock::now_ns()))
    }

    /// `text` as a C caller's 0-terminated `wchar_t` string.
    fn wide_of(text: &str) -> Vec<libc::wchar_t> {
        text.chars().chain(['\0']).map(|unit| unit as _).collect()
    }

    /// Attributes as a C caller fills them: zeroed, then version, size and message.
    fn attributes(message_type: i32, message: *const c_void) -> EventAttributes {
        // SAFETY: all zeros is a valid EventAttributes, its message null.
        let mut attributes: EventAttributes = unsafe { std::mem::zeroed() };
        (attributes.version, attributes.size) = (3, size_of::<EventAttributes>() as u16);
        (attributes.message_type, attributes.message) = (message_type, message);
        attributes
    }

    /// ASCII, wide and registered messages decode; anything else is "".
    #[test]
    fn messages_decode() {
        let text = random_text();
        let (ascii_text, wide_text) = (CString::new(text.clone()).unwrap(), wide_of(&text));
        let (ascii_pointer, wide_pointer) = (ascii_text.as_ptr(), wide_text.as_ptr());
        // SAFETY (this test): the strings and attributes live to its end.
        let decode = |kind, message| unsafe { message_of(&attributes(kind, message)) }.into_owned();
        let registered = unsafe { domain_register_string_a(std::ptr::null(), ascii_pointer) };
        let registered_again = unsafe { domain_register_string_w(registered, wide_pointer) };
        assert_eq!(registered, registered_again, "one text, one handle");
        assert_eq!(decode(MESSAGE_ASCII, ascii_pointer.cast()), text);
        assert_eq!(decode(MESSAGE_UNICODE, wide_pointer.cast()), text);
        assert_eq!(decode(MESSAGE_REGISTERED, registered), text);
        for kind in [MESSAGE_ASCII, MESSAGE_UNICODE, MESSAGE_REGISTERED] {
            assert_eq!(decode(kind, std::ptr::null()), "");
        }
        assert_eq!(decode(7, ascii_pointer.cast()), "");
        let mut short = attributes(MESSAGE_ASCII, ascii_pointer.cast());
        short.size = 40;
        assert_eq!(unsafe { message_of(&short) }, "", "too short to hold a message");
        assert_eq!(unsafe { message_of(std::ptr::null()) }, "");
        assert_eq!(unsafe { wide([0x41, 0xD800, 0].as_ptr()) }, "A\u{FFFD}");
    }

    /// Pushes of any domain share the thread's stack; levels, parents and `current_range` follow it.
    #[test]
    fn push_and_pop_nest() {
        let texts = [random_text(), random_text(), random_text()];
        let outer_text = CString::new(texts[0].clone()).unwrap();
        let outer_attributes = attributes(MESSAGE_ASCII, outer_text.as_ptr().cast());
        // SAFETY (this test): the strings and attributes live to its end.
        assert!(unsafe { range_pop() } < 0 && current_range() == 0);
        assert_eq!(unsafe { range_push_a(outer_text.as_ptr()) }, 0);
        let outer = current_range();
        assert_eq!(unsafe { range_push_w(wide_of(&texts[1]).as_ptr()) }, 1);
        let inner = current_range();
        let domain = unsafe { domain_create_w(wide_of(&texts[2]).as_ptr()) };
        assert_eq!(unsafe { domain_range_push_ex(domain, &outer_attributes) }, 2);
        let innermost = current_range();
        assert_eq!((unsafe { range_pop() }, current_range()), (2, inner));
        assert_eq!((unsafe { domain_range_pop(domain) }, current_range()), (1, outer));
        assert_eq!((unsafe { range_pop() }, current_range()), (0, 0));
        assert_eq!(shape(outer), (0, 0, texts[0].clone(), String::new()));
        assert_eq!(shape(inner), (outer, 1, texts[1].clone(), String::new()));
        assert_eq!(shape(innermost), (inner, 2, texts[0].clone(), texts[2].clone()));
        let [outer, inner, innermost] = [outer, inner, innermost].map(|id| captured(id)[0].0);
        assert!(outer.start_ns <= inner.start_ns && innermost.end_ns <= inner.end_ns);
        assert!(inner.end_ns <= outer.end_ns && outer.thread == crate::threads::thread_id());
    }

    /// A start/end range may end on another thread, once, and keeps the thread it started on.
    #[test]
    fn start_and_end_on_different_threads() {
        let (text, domain_text) = (random_text(), random_text());
        let [message, domain_name] = [&text, &domain_text].map(|text| CString::new(text.as_str()).unwrap());
        let message_attributes = attributes(MESSAGE_ASCII, message.as_ptr().cast());
        // SAFETY (this test): the strings and attributes live to its end.
        let domain = unsafe { domain_create_a(domain_name.as_ptr()) };
        let plain = unsafe { range_start_a(message.as_ptr()) };
        let in_domain = unsafe { domain_range_start_ex(domain, &message_attributes) };
        assert!(plain != 0 && in_domain != plain && current_range() == 0);
        let ender = std::thread::spawn(move || unsafe {
            [plain, plain, 0].into_iter().for_each(|id| range_end(id));
            domain_range_end(std::ptr::null(), in_domain);
            crate::threads::thread_id()
        });
        assert_ne!(ender.join().unwrap(), crate::threads::thread_id());
        assert_eq!((captured(plain).len(), captured(0).len()), (1, 0));
        assert_eq!(shape(plain), (0, 0, text.clone(), String::new()));
        assert_eq!(shape(in_domain), (0, 0, text, domain_text));
        assert_eq!(captured(in_domain)[0].0.thread, crate::threads::thread_id());
    }
}
