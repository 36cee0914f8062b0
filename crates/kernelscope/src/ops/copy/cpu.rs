//! CPU reference of copy: the source words into the destination words.

use crate::error::Result;
use crate::runtime::KernelArgs;

/// `args`: source (u32, read), destination (u32, write), same length.
pub(super) fn copy_bytes(args: &KernelArgs<'_>) -> Result<()> {
    let source = args.input::<u32>(0)?;
    let destination = args.output::<u32>(1)?;
    destination.copy_from_slice(source);
    Ok(())
}
