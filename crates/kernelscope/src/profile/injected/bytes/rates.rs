//! Each kind's rate (bytes a ns) from the samples, by non-negative least
//! squares: a sample's bytes are modelled as the sum, over the kinds that
//! ran in it, of the kind's rate times its time in the sample, and the
//! rates that fit every sample best are found at once (sparse normal
//! equations, conjugate gradients, kinds whose fit goes negative dropped).
//! Kinds that always run next to each other are still told apart, because
//! the samples' edges fall at a different place in each repetition; the
//! split (`split_by_rates`) uses the rates only to tell slow kinds from
//! those that stream memory.

/// A kind's time in each sample it ran in, and the normal equations of the
/// least-squares fit, kept sparse: each sample touches a few kinds.
pub(super) struct Design {
    /// Per sample, (kind, ns of that kind inside the sample).
    times: Vec<Vec<(usize, f64)>>,
    /// Row k of the normal matrix: (kind j, Σ over samples of t_k·t_j).
    normal: Vec<Vec<(usize, f64)>>,
    /// Σ over samples of t_k², the normal matrix's diagonal.
    diagonal: Vec<f64>,
}

/// How far the fit is pulled towards the run's average rate, relative to
/// each kind's own weight: enough to settle kinds the samples cannot tell
/// apart (they then share by time), too little to move a kind the samples
/// do determine (its rate shifts by about this fraction of its distance
/// from the average).
const RIDGE: f64 = 1e-6;

/// Conjugate-gradient steps allowed per solve, per kind solved for.
const STEPS_PER_KIND: usize = 8;

/// Rounds of dropping kinds whose fitted rate is negative (and taking back
/// those that would rise) before the fit is accepted.
const ACTIVE_SET_ROUNDS: usize = 30;

impl Design {
    /// The design of `samples`, each a list of (kind, ns inside the sample)
    /// that may name a kind more than once, over `kinds` kinds.
    pub(super) fn new(samples: impl Iterator<Item = Vec<(usize, f64)>>, kinds: usize) -> Design {
        let mut rows: Vec<std::collections::HashMap<usize, f64>> = vec![Default::default(); kinds];
        let mut times = Vec::new();
        for mut sample in samples {
            sample.sort_by_key(|&(kind, _)| kind);
            let mut merged: Vec<(usize, f64)> = Vec::with_capacity(sample.len());
            for (kind, time) in sample {
                match merged.last_mut() {
                    Some(last) if last.0 == kind => last.1 += time,
                    _ => merged.push((kind, time)),
                }
            }
            for &(kind, time) in &merged {
                for &(other, other_time) in &merged {
                    *rows[kind].entry(other).or_insert(0.0) += time * other_time;
                }
            }
            times.push(merged);
        }
        let diagonal = rows
            .iter()
            .enumerate()
            .map(|(kind, row)| row.get(&kind).copied().unwrap_or(0.0))
            .collect();
        let normal = rows
            .into_iter()
            .map(|row| {
                let mut row: Vec<(usize, f64)> = row.into_iter().collect();
                row.sort_by_key(|&(kind, _)| kind);
                row
            })
            .collect();
        Design {
            times,
            normal,
            diagonal,
        }
    }

    /// The non-negative rates that fit `bytes` (one figure per sample, in
    /// the order given to [`Design::new`]) best, pulled by [`RIDGE`]
    /// towards the average rate; 0 for a kind in no sample.
    pub(super) fn rates(&self, bytes: &[f64]) -> Vec<f64> {
        let kinds = self.diagonal.len();
        let mut right = vec![0f64; kinds];
        let (mut total_bytes, mut total_time) = (0f64, 0f64);
        for (sample, &bytes) in self.times.iter().zip(bytes) {
            total_bytes += bytes;
            for &(kind, time) in sample {
                right[kind] += time * bytes;
                total_time += time;
            }
        }
        if total_time <= 0.0 {
            return vec![0.0; kinds];
        }
        let average = total_bytes / total_time;
        let ridge: Vec<f64> = self.diagonal.iter().map(|&weight| RIDGE * weight).collect();
        let target: Vec<f64> = (0..kinds)
            .map(|kind| right[kind] + ridge[kind] * average)
            .collect();
        let mut active: Vec<bool> = self.diagonal.iter().map(|&weight| weight > 0.0).collect();
        let mut rates = vec![0f64; kinds];
        for _ in 0..ACTIVE_SET_ROUNDS {
            self.solve(&target, &ridge, &active, &mut rates);
            let mut changed = false;
            for kind in 0..kinds {
                if active[kind] && rates[kind] < 0.0 {
                    active[kind] = false;
                    rates[kind] = 0.0;
                    changed = true;
                }
            }
            if !changed {
                // Take back a dropped kind the fit would now raise.
                let product = self.product(&rates, &ridge);
                for kind in 0..kinds {
                    if !active[kind] && self.diagonal[kind] > 0.0 && target[kind] - product[kind] > 0.0 {
                        active[kind] = true;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        rates.iter().map(|&rate| rate.max(0.0)).collect()
    }

    /// (normal matrix + ridge) · x.
    fn product(&self, x: &[f64], ridge: &[f64]) -> Vec<f64> {
        self.normal
            .iter()
            .enumerate()
            .map(|(kind, row)| {
                row.iter().map(|&(other, weight)| weight * x[other]).sum::<f64>() + ridge[kind] * x[kind]
            })
            .collect()
    }

    /// Solves the normal equations for the `active` kinds, the others held
    /// at 0, by conjugate gradients preconditioned by the diagonal,
    /// starting from `rates`.
    fn solve(&self, target: &[f64], ridge: &[f64], active: &[bool], rates: &mut [f64]) {
        let kinds = rates.len();
        let masked = |vector: &mut [f64]| {
            for (value, &on) in vector.iter_mut().zip(active) {
                if !on {
                    *value = 0.0;
                }
            }
        };
        masked(rates);
        let mut residual: Vec<f64> = self
            .product(rates, ridge)
            .iter()
            .zip(target)
            .map(|(&product, &target)| target - product)
            .collect();
        masked(&mut residual);
        let scale: Vec<f64> = (0..kinds)
            .map(|kind| {
                let weight = self.diagonal[kind] + ridge[kind];
                if active[kind] && weight > 0.0 {
                    1.0 / weight
                } else {
                    0.0
                }
            })
            .collect();
        let target_norm = target
            .iter()
            .zip(active)
            .filter(|(_, on)| **on)
            .map(|(&value, _)| value * value)
            .sum::<f64>()
            .sqrt();
        if target_norm == 0.0 {
            rates.fill(0.0);
            return;
        }
        let mut preconditioned: Vec<f64> = residual.iter().zip(&scale).map(|(&r, &s)| r * s).collect();
        let mut direction = preconditioned.clone();
        let mut agreement: f64 = residual.iter().zip(&preconditioned).map(|(&r, &z)| r * z).sum();
        let active_kinds = active.iter().filter(|&&on| on).count();
        for _ in 0..STEPS_PER_KIND * active_kinds + 16 {
            let residual_norm = residual.iter().map(|&r| r * r).sum::<f64>().sqrt();
            if residual_norm <= 1e-12 * target_norm {
                break;
            }
            let mut image = self.product(&direction, ridge);
            masked(&mut image);
            let curvature: f64 = direction.iter().zip(&image).map(|(&d, &a)| d * a).sum();
            if curvature <= 0.0 {
                break;
            }
            let step = agreement / curvature;
            for kind in 0..kinds {
                rates[kind] += step * direction[kind];
                residual[kind] -= step * image[kind];
            }
            for kind in 0..kinds {
                preconditioned[kind] = residual[kind] * scale[kind];
            }
            let next: f64 = residual.iter().zip(&preconditioned).map(|(&r, &z)| r * z).sum();
            let keep = next / agreement;
            agreement = next;
            for kind in 0..kinds {
                direction[kind] = preconditioned[kind] + keep * direction[kind];
            }
        }
    }
}
