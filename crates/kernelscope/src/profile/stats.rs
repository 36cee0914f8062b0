//! Small statistics: the per-label submission table and the spread of
//! repeated measurements used when comparing runs.

use serde::{Deserialize, Serialize};

/// One row of the per-label submission table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmissionStats {
    /// The submission label.
    pub label: String,
    /// How many submissions carried it.
    pub count: u64,
    /// Sum of their durations.
    pub total_ns: u64,
    /// Shortest.
    pub min_ns: u64,
    /// Longest.
    pub max_ns: u64,
    /// Median (nearest rank).
    pub p50_ns: u64,
    /// 95th percentile (nearest rank).
    pub p95_ns: u64,
    /// Host time spent enqueueing them, summed (0 where not measured).
    pub host_enqueue_ns: u64,
}

impl SubmissionStats {
    /// Builds the row from every duration recorded under `label`.
    /// `durations` must not be empty.
    pub fn from_durations(label: &str, durations: &mut [u64]) -> Self {
        durations.sort_unstable();
        SubmissionStats {
            label: label.to_string(),
            count: durations.len() as u64,
            // Saturating: a loaded profile's durations were checked to add
            // up within u64, and live ones cannot come near it.
            total_ns: durations
                .iter()
                .fold(0u64, |total, &duration| total.saturating_add(duration)),
            min_ns: durations[0],
            max_ns: durations[durations.len() - 1],
            p50_ns: nearest_rank(durations, 50.0),
            p95_ns: nearest_rank(durations, 95.0),
            host_enqueue_ns: 0,
        }
    }
}

/// The nearest-rank percentile of sorted, non-empty `values`.
pub(crate) fn nearest_rank(sorted: &[u64], percentile: f64) -> u64 {
    let rank = ((percentile / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean and spread of repeated measurements of one quantity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// How many repetitions.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (0 with one repetition).
    pub stddev: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        Self::with_zeros(values, 0)
    }

    /// The spread of `values` plus `zeros` more repetitions that measured 0,
    /// without making a list of the zeros (a key that ran in a few of many
    /// repetitions costs memory for those few); `None` when there are none.
    pub fn with_zeros(values: &[f64], zeros: usize) -> Option<Spread> {
        let count = values.len().checked_add(zeros)?;
        if count == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / count as f64;
        let stddev = if count > 1 {
            let squares: f64 =
                values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() + zeros as f64 * mean.powi(2);
            (squares / (count - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Spread { count, mean, stddev })
    }

    /// Standard error of the mean.
    pub fn standard_error(&self) -> f64 {
        self.stddev / (self.count as f64).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_row_from_durations() {
        let mut durations: Vec<u64> = (1..=20).rev().map(|v| v * 10).collect();
        let row = SubmissionStats::from_durations("x", &mut durations);
        assert_eq!(row.count, 20);
        assert_eq!(row.total_ns, 2100);
        assert_eq!(row.min_ns, 10);
        assert_eq!(row.max_ns, 200);
        assert_eq!(row.p50_ns, 100);
        assert_eq!(row.p95_ns, 190);
    }

    #[test]
    fn spread_of_known_values() {
        let spread = Spread::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(spread.mean, 5.0);
        assert!((spread.stddev - 2.138_089_935).abs() < 1e-6);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(Spread::of(&[3.0]).unwrap().stddev, 0.0);
    }

    #[test]
    fn zeros_left_out_count_as_measured_zeros() {
        let mut rng = crate::rng::SplitMix64::new(17);
        let values: Vec<f64> = (0..9).map(|_| f64::from(rng.uniform(1.0, 50.0))).collect();
        let mut dense = values.clone();
        dense.extend([0.0; 4]);
        let expected = Spread::of(&dense).unwrap();
        let sparse = Spread::with_zeros(&values, 4).unwrap();
        assert_eq!(sparse.count, 13);
        assert!((sparse.mean - expected.mean).abs() < 1e-9 * expected.mean);
        assert!((sparse.stddev - expected.stddev).abs() < 1e-9 * expected.stddev);
        assert_eq!(Spread::with_zeros(&[], 3).unwrap().mean, 0.0);
        assert!(Spread::with_zeros(&[], 0).is_none());
    }

    #[test]
    fn table_totals_saturate_instead_of_wrapping() {
        let mut durations = vec![u64::MAX - 5, 10, 20];
        assert_eq!(
            SubmissionStats::from_durations("x", &mut durations).total_ns,
            u64::MAX
        );
    }
}
