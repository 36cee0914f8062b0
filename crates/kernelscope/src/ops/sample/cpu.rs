//! CPU reference of temperature + top-p sampling.

use crate::error::Result;
use crate::ops::argmax::cpu::first_max_index;
use crate::runtime::KernelArgs;

use super::{LOGITS, OUT, TEMPERATURE, TOP_P, UNIFORM};

/// `out[0]` (u32) is the token [`choose`] draws from the f32 `logits`.
pub(super) fn sample(args: &KernelArgs<'_>) -> Result<()> {
    let logits = args.input::<f32>(LOGITS)?;
    let out = args.output::<u32>(OUT)?;
    let (temperature, top_p, uniform) = (args.f32(TEMPERATURE)?, args.f32(TOP_P)?, args.f32(UNIFORM)?);
    out[0] = choose(logits, temperature, top_p, uniform) as u32;
    Ok(())
}

/// The token drawn from the nucleus of `softmax(logits / temperature)`.
pub(crate) fn choose(logits: &[f32], temperature: f32, top_p: f32, uniform: f32) -> usize {
    if temperature <= 0.0 {
        return first_max_index(logits);
    }
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    // NaN logits get probability 0 (as in greedy mode, NaN never wins).
    let mut candidates: Vec<(usize, f64)> = logits
        .iter()
        .enumerate()
        .map(|(i, l)| {
            (
                i,
                if l.is_nan() {
                    0.0
                } else {
                    (((l - max) / temperature) as f64).exp()
                },
            )
        })
        .collect();
    let total: f64 = candidates.iter().map(|(_, p)| p).sum();
    // Largest first; equal probabilities keep index order so the draw is deterministic.
    candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept = 0;
    let mut mass = 0.0;
    for (_, probability) in &candidates {
        mass += probability / total;
        kept += 1;
        if mass >= f64::from(top_p) {
            break;
        }
    }
    let nucleus = &candidates[..kept];
    let nucleus_total: f64 = nucleus.iter().map(|(_, p)| p).sum();
    let target = f64::from(uniform.clamp(0.0, 1.0)) * nucleus_total;
    let mut running = 0.0;
    for (index, probability) in nucleus {
        running += probability;
        if target < running {
            return *index;
        }
    }
    nucleus[nucleus.len() - 1].0
}

#[cfg(test)]
mod tests {
    use super::choose;

    #[test]
    fn nan_logits_are_never_drawn() {
        for uniform in [0.0, 0.5, 0.999] {
            assert_eq!(
                choose(&[f32::NAN, 5.0, 1.0, -3.0], 1.0, 1.0, uniform).min(3),
                choose(&[f32::NEG_INFINITY, 5.0, 1.0, -3.0], 1.0, 1.0, uniform)
            );
        }
        assert_eq!(choose(&[f32::NAN, 5.0, 1.0, -3.0], 1.0, 1.0, 0.0), 1);
    }
}
