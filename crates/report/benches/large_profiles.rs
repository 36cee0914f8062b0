//! How long a large profile takes to compare and to report: 2,000 decode
//! tokens whose every dispatch stands in a scope of its own (12,000
//! scopes). Per-layer totals and token lines once grew with the square of
//! such a profile; tests check what these produce, this checks how fast.
//!
//! `cargo bench -p kernelscope-report --bench large_profiles`

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use kernelscope::profile::{Profile, compare};
use kernelscope::testing::synthetic_profile;
use kernelscope_report::render_report;

/// The profile, loaded back from its JSON as a user's would be.
fn many_scopes() -> Profile {
    let mut many = synthetic_profile(2_000, 1.0, 13);
    for (position, dispatch) in many.dispatches.iter_mut().enumerate() {
        dispatch.scope = format!("layer.{position}.attn").into();
    }
    Profile::from_json(&many.to_json(), Path::new("many.json")).unwrap()
}

fn bench_large(criterion: &mut Criterion) {
    let profile = many_scopes();
    let mut group = criterion.benchmark_group("large_profiles");
    group.sample_size(10);
    group.bench_function("compare", |bench| {
        bench.iter(|| compare(&profile, &profile, 0.05, false).unwrap())
    });
    group.bench_function("render_report", |bench| bench.iter(|| render_report(&profile)));
    group.finish();
}

criterion_group!(benches, bench_large);
criterion_main!(benches);
