//! CPU reference of embedding.

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

/// args: table `[vocab, hidden]` (read), token slot u32 (read), out f32 `[hidden]` (write), vocab, hidden.
pub(super) fn embedding<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let table = args.input::<W>(0)?;
    let token = args.input::<u32>(1)?[0] as usize;
    let out = args.output::<f32>(2)?;
    let (vocab, hidden) = (args.u32(3)? as usize, args.u32(4)? as usize);
    if token >= vocab {
        return Err(Error::KernelFailed {
            kernel: "embedding".into(),
            message: format!("token id {token} is not below the vocabulary size {vocab}"),
        });
    }
    let row = &table[token * hidden..(token + 1) * hidden];
    out.iter_mut().zip(row).for_each(|(o, w)| *o = w.to_f32());
    Ok(())
}
