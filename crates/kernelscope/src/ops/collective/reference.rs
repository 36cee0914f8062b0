//! The collectives' reference: what every rank must end up with, computed
//! on the host from every rank's values, for tests.

/// The element-wise sum of `contributions` (all of one length), in rank order.
pub fn all_reduce_sum(contributions: &[Vec<f32>]) -> Vec<f32> {
    let mut sum = contributions.first().cloned().unwrap_or_default();
    for values in contributions.iter().skip(1) {
        sum.iter_mut()
            .zip(values)
            .for_each(|(total, value)| *total += value);
    }
    sum
}

/// `contributions` one after another, in rank order.
pub fn all_gather(contributions: &[Vec<f32>]) -> Vec<f32> {
    contributions.concat()
}
