//! CPU reference of copy: the source words into the destination words,
//! split across threads for large copies (one thread cannot saturate memory).

use rayon::prelude::*;

use crate::error::Result;
use crate::runtime::KernelArgs;

use super::{DESTINATION, SOURCE, WORDS};

/// Below this many words a copy stays on one thread.
const PARALLEL_WORDS: usize = 1 << 18;

/// `destination = source`, both u32 words of length `words`.
pub(super) fn copy_bytes(args: &KernelArgs<'_>) -> Result<()> {
    let source = args.input::<u32>(SOURCE)?;
    let destination = args.output::<u32>(DESTINATION)?;
    let words = args.u64(WORDS)?;
    if words != source.len() as u64 || words != destination.len() as u64 {
        return Err(crate::error::Error::KernelFailed {
            kernel: super::KERNEL_NAME.to_string(),
            message: format!(
                "word count {words} does not match the buffers ({} and {})",
                source.len(),
                destination.len()
            ),
        });
    }
    if source.len() < PARALLEL_WORDS {
        destination.copy_from_slice(source);
    } else {
        destination
            .par_chunks_mut(PARALLEL_WORDS)
            .zip(source.par_chunks(PARALLEL_WORDS))
            .for_each(|(to, from)| to.copy_from_slice(from));
    }
    Ok(())
}
