//! A model's bytes given to a real program's profile (`--model`): each
//! (token, layer, role) of projections gets exactly the model's bytes,
//! shared by time; where PM sampling measured the kernels' bytes, the
//! measured ones are kept beside and every other kernel keeps its own.

use std::collections::HashMap;
use std::path::Path;

use kernelscope::profile::{ModelCosts, Profile, Role, TensorCost, annotate, apply_model_costs, layer_of};
use kernelscope::rng::SplitMix64;

fn llama_cpp_profile() -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/programs/llamacpp-1b-q4_k_m.json");
    let mut profile = Profile::load(&path).unwrap();
    annotate(&mut profile);
    profile
}

/// Random per-tensor costs for the 16 layers' projections and the LM head.
fn random_costs(random: &mut SplitMix64) -> ModelCosts {
    let mut tensors = Vec::new();
    let roles = [
        Role::QkvProjection,
        Role::OutputProjection,
        Role::GateUp,
        Role::Down,
    ];
    for layer in 0..16 {
        for role in roles {
            tensors.push(TensorCost {
                name: format!("blk.{layer}.{role:?}"),
                layer: Some(layer),
                role,
                bytes: 1_000_000 + random.below(50_000_000),
                flops: 1_000_000 + random.below(100_000_000),
            });
        }
    }
    tensors.push(TensorCost {
        name: "output.weight".into(),
        layer: None,
        role: Role::LmHead,
        bytes: 100_000_000 + random.below(300_000_000),
        flops: 1,
    });
    ModelCosts {
        model: "random".into(),
        tensors,
    }
}

fn layer_number(scope: &str) -> Option<usize> {
    layer_of(scope).strip_prefix("layer.")?.parse().ok()
}

#[test]
fn measured_bytes_stay_beside_the_models_for_projections_and_alone_elsewhere() {
    let mut random = SplitMix64::new(0x006d_6f64_656c);
    for round in 0..4 {
        let costs = random_costs(&mut random);
        let mut profile = llama_cpp_profile();
        let measured = round % 2 == 1;
        if measured {
            profile.conditions.bytes_measured = Some("DRAM bytes by PM sampling".into());
            for dispatch in &mut profile.dispatches {
                dispatch.bytes = 1 + random.below(20_000_000);
            }
        }
        let before = profile.clone();
        let given = apply_model_costs(&mut profile, &costs);
        assert!(given.dispatches > 0, "round {round}");
        // Each (token, layer, role) of projections got the model's bytes.
        let mut sums: HashMap<(u32, Option<usize>, Role), u64> = HashMap::new();
        for (after, was) in profile.dispatches.iter().zip(&before.dispatches) {
            let projection = after.roles.iter().any(|role| role.is_projection());
            if let (true, Some(token)) = (projection, after.token) {
                let role = after.roles.iter().find(|role| role.is_projection()).unwrap();
                let layer = if role == Role::LmHead {
                    None
                } else {
                    layer_number(&after.scope)
                };
                *sums.entry((token, layer, role)).or_default() += after.bytes;
                assert_eq!(after.measured_bytes, if measured { was.bytes } else { 0 });
                assert!(after.flops > 0);
            } else {
                // Work that reads no weights keeps what it had.
                assert_eq!(
                    (after.bytes, after.measured_bytes),
                    (was.bytes, 0),
                    "{}",
                    after.kernel
                );
            }
        }
        for ((token, layer, role), sum) in sums {
            let model: u64 = costs
                .tensors
                .iter()
                .filter(|tensor| tensor.role == role && tensor.layer == layer)
                .map(|tensor| tensor.bytes)
                .sum();
            // Shares are rounded once per kernel.
            assert!(
                sum.abs_diff(model) <= 8,
                "token {token} {layer:?} {role}: {sum} of {model}"
            );
        }
        let measured_total: u64 = profile.dispatches.iter().map(|d| d.measured_bytes).sum();
        assert_eq!(given.measured_bytes, measured_total);
        // Given twice, nothing changes.
        let once = profile.clone();
        assert_eq!(apply_model_costs(&mut profile, &costs).dispatches, 0);
        assert_eq!(profile.dispatches, once.dispatches);
    }
}
