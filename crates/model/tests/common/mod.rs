//! What the model's tests share: how far two runs' logits are apart.

/// The worst row's relative error: max |a - b| over a row divided by the
/// row's largest |b|.
pub fn worst_relative_error(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len(), "rows");
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            assert_eq!(x.len(), y.len(), "logits per row");
            let scale = y.iter().fold(0f32, |m, v| m.max(v.abs()));
            x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs())) / scale
        })
        .fold(0f32, f32::max)
}
