//! The progress bar of every long job over weights (loading, generating,
//! writing a checkpoint or a GGUF file): a file of its own, so that the
//! writers use it without importing the loaders.

use indicatif::{ProgressBar, ProgressStyle};

/// Show a progress bar when the weights are bigger than this.
const PROGRESS_BAR_BYTES: usize = 300 << 20;

/// A byte-count progress bar on stderr, hidden when quiet or small.
pub(crate) fn progress_bar(total_bytes: usize, quiet: bool, message: &'static str) -> ProgressBar {
    if quiet || total_bytes < PROGRESS_BAR_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total_bytes as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}
