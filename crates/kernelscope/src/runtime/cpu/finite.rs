//! `DeviceOptions::check_finite` on the CPU's queue: after a dispatch, each
//! float buffer it wrote is read for NaN or +infinity (minus infinity is a
//! value kernels write on purpose: an empty split's maximum), so the first
//! kernel whose output stopped being numbers is named with its scope.

use half::{bf16, f16};

use super::KernelArgs;
use crate::error::{Error, Result};
use crate::runtime::{Arg, DType};

/// Refuses the first float output of `args` holding NaN or +infinity.
pub(super) fn check_outputs(kernel: &str, scope: &str, args: &[Arg]) -> Result<()> {
    let views = KernelArgs::new(kernel, args);
    for (argument, arg) in args.iter().enumerate() {
        let Arg::Buffer { buffer, access } = arg else {
            continue;
        };
        if !access.writes() {
            continue;
        }
        let values: Vec<f32> = match buffer.dtype() {
            DType::F32 => views.output::<f32>(argument)?.to_vec(),
            DType::BF16 => views
                .output::<bf16>(argument)?
                .iter()
                .map(|value| value.to_f32())
                .collect(),
            DType::F16 => views
                .output::<f16>(argument)?
                .iter()
                .map(|value| value.to_f32())
                .collect(),
            _ => continue,
        };
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
