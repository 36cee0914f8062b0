//! `DeviceOptions::check_finite`: after a dispatch, each float buffer it
//! wrote is read for NaN or +infinity (minus infinity is a value kernels
//! write on purpose: an empty split's maximum), so the first kernel whose
//! output stopped being numbers is named with its scope. Each backend says
//! how it reads an output; the CPU reads its memory in place, CUDA copies
//! the buffer to the host after the kernel (a sync per dispatch: slow, for
//! finding a fault).

use crate::error::{Error, Result};
use crate::runtime::{Arg, Buffer, DType};

/// Refuses the first float output of `args` holding NaN or +infinity.
/// `read(argument, buffer)` gives a written float buffer's values as f32.
pub(crate) fn check_outputs(
    kernel: &str,
    scope: &str,
    args: &[Arg],
    mut read: impl FnMut(usize, &Buffer) -> Result<Vec<f32>>,
) -> Result<()> {
    for (argument, arg) in args.iter().enumerate() {
        let Arg::Buffer { buffer, access } = arg else {
            continue;
        };
        if !access.writes() || !matches!(buffer.dtype(), DType::F32 | DType::BF16 | DType::F16) {
            continue;
        }
        let values = read(argument, buffer)?;
        let bad = |value: &f32| value.is_nan() || *value == f32::INFINITY;
        if let Some(index) = values.iter().position(bad) {
            return Err(Error::NonFiniteOutput {
                kernel: kernel.to_string(),
                scope: if scope.is_empty() {
                    "(unscoped)".into()
                } else {
                    scope.to_string()
                },
                argument,
                count: values.iter().filter(|value| bad(value)).count(),
                len: values.len(),
                index,
                value: values[index],
            });
        }
    }
    Ok(())
}

/// A float buffer's values as f32, copied to the host (the device waits
/// for its queue first).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn read_to_host(buffer: &Buffer) -> Result<Vec<f32>> {
    Ok(match buffer.dtype() {
        DType::BF16 => buffer
            .to_vec::<half::bf16>()?
            .into_iter()
            .map(half::bf16::to_f32)
            .collect(),
        DType::F16 => buffer
            .to_vec::<half::f16>()?
            .into_iter()
            .map(half::f16::to_f32)
            .collect(),
        _ => buffer.to_vec::<f32>()?,
    })
}
