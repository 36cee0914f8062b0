//! CPU reference of embedding.

use crate::error::{Error, Result};
use crate::ops::WeightElement;
use crate::runtime::KernelArgs;

use super::{HIDDEN, OUT, TABLE, TOKEN_SLOT, VOCAB};

/// `out` f32 `[hidden]` is row `token_slot[0]` of `table` `[vocab, hidden]`.
pub(super) fn embedding<W: WeightElement>(args: &KernelArgs<'_>) -> Result<()> {
    let table = args.input::<W>(TABLE)?;
    let token = args.input::<u32>(TOKEN_SLOT)?[0] as usize;
    let out = args.output::<f32>(OUT)?;
    let (vocab, hidden) = (args.u32(VOCAB)? as usize, args.u32(HIDDEN)? as usize);
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
