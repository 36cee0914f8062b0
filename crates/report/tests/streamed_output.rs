//! Traces and profiles of long runs are written as they go: the memory a
//! write holds must not grow with the file. A trace built as one JSON tree
//! took about 3.6 KB an event, so `kscope profile --from-records --trace`
//! of a million kernels aborted under `ulimit -v` 4 GB. An allocator that
//! counts live bytes measures the peak of each write here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kernelscope::profile::Profile;
use kernelscope::testing::synthetic_profile;
use kernelscope_report::{chrome_trace_of_tokens, write_chrome_trace};

/// The system allocator, counting the bytes live now and the most since
/// the last [`reset_peak`].
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Tests of this file measure one at a time.
static MEASURING: Mutex<()> = Mutex::new(());

// SAFETY: every call goes to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout goes to `System` as given.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` came from `alloc` with this layout.
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes the most live at once during `work`, above what was live before.
fn peak_growth(work: impl FnOnce()) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    work();
    PEAK.load(Ordering::Relaxed).saturating_sub(before)
}

/// Counts what is written, holding none of it.
#[derive(Default)]
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        self.0 += buffer.len();
        Ok(buffer.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A run of `tokens` decode tokens (six dispatches each), seeded.
fn long_run(tokens: u32, seed: u64) -> Profile {
    synthetic_profile(tokens, 1.0, seed)
}

#[test]
fn a_trace_is_written_in_memory_that_does_not_grow_with_it() {
    let _one_at_a_time = MEASURING.lock().unwrap();
    let seed = 0x5eed ^ u64::from(std::process::id());
    let profile = long_run(4_000, seed);
    let mut counted = Counted::default();
    let growth = peak_growth(|| write_chrome_trace(&profile, None, &mut counted).unwrap());
    assert!(
        counted.0 > 4 << 20,
        "a trace of {} bytes is too small to tell",
        counted.0
    );
    assert!(
        growth < 512 << 10,
        "writing a {}-byte trace held {growth} bytes at its peak",
        counted.0
    );
    // The allocator sees what the tree of events held (the old way).
    let tree = peak_growth(|| drop(serde_json::to_vec(&chrome_trace_of_tokens(&profile, None)).unwrap()));
    assert!(
        tree > 8 * growth,
        "the tree held {tree} bytes, the stream {growth}"
    );
    // What is streamed is the trace, event for event.
    let mut text = Vec::new();
    write_chrome_trace(&profile, Some(100..300), &mut text).unwrap();
    let streamed: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(streamed, chrome_trace_of_tokens(&profile, Some(100..300)));
    let mut whole = Vec::new();
    write_chrome_trace(&profile, None, &mut whole).unwrap();
    assert_eq!(whole.len(), counted.0);
}

#[test]
fn a_profile_is_written_in_memory_that_does_not_grow_with_it() {
    let _one_at_a_time = MEASURING.lock().unwrap();
    let seed = 0xfeed ^ u64::from(std::process::id());
    let profile = long_run(4_000, seed);
    let mut counted = Counted::default();
    let growth = peak_growth(|| profile.write_json(&mut counted).unwrap());
    assert!(
        counted.0 > 4 << 20,
        "a profile of {} bytes is too small to tell",
        counted.0
    );
    assert!(
        growth < 512 << 10,
        "writing a {}-byte profile held {growth} bytes at its peak",
        counted.0
    );
    let mut text = Vec::new();
    profile.write_json(&mut text).unwrap();
    assert_eq!(String::from_utf8(text).unwrap(), profile.to_json());
}
