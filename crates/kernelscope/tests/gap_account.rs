//! Layers and roles found in real programs' profiles, and the gap account
//! between them, without a GPU: the fixtures are profiles recorded on an
//! H200 (tools/gpu/gap_capture.sh: llama.cpp's llama-bench, PyTorch eager
//! and compiled with CUDA graphs, kscope's engine from inside and from
//! outside), trimmed to one or two decode tokens.

use std::collections::BTreeSet;
use std::path::Path;

use kernelscope::profile::{
    DispatchRecord, LayersFrom, Profile, Role, Roles, annotate, gap_account, layer_of,
};

fn fixture(name: &str) -> Profile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/programs")
        .join(name);
    Profile::load(&path).unwrap_or_else(|error| panic!("{name}: {error}"))
}

/// A token's dispatches, in the order they ran.
fn token(profile: &Profile, index: u32) -> Vec<&DispatchRecord> {
    let mut dispatches: Vec<&DispatchRecord> = profile
        .dispatches
        .iter()
        .filter(|dispatch| dispatch.token == Some(index))
        .collect();
    dispatches.sort_by_key(|dispatch| dispatch.start_ns);
    dispatches
}

fn layer_number(dispatch: &DispatchRecord) -> Option<usize> {
    layer_of(&dispatch.scope).strip_prefix("layer.")?.parse().ok()
}

/// The roles every layer must show, however the engine fuses.
const LAYER_ROLES: [Role; 6] = [
    Role::AttentionNorm,
    Role::QkvProjection,
    Role::RopeKvWrite,
    Role::Attention,
    Role::OutputProjection,
    Role::MlpNorm,
];

/// A dense MLP's roles.
const DENSE: [Role; 2] = [Role::GateUp, Role::Down];

/// A mixture of experts' roles.
const MIXTURE: [Role; 2] = [Role::Router, Role::Experts];

/// Checks the found layers of every token: `layers` of them, numbered in
/// order, each holding every role and one attention anchor, nothing but
/// the LM head's and sampling's work after the last.
fn check_layers(profile: &Profile, layers: usize, first_kernel: &str) {
    check_layers_with(profile, layers, first_kernel, DENSE)
}

/// [`check_layers`] for layers whose MLP has the roles `mlp`.
fn check_layers_with(profile: &Profile, layers: usize, first_kernel: &str, mlp: [Role; 2]) {
    for record in &profile.tokens {
        let dispatches = token(profile, record.index);
        let numbers: Vec<Option<usize>> = dispatches.iter().map(|d| layer_number(d)).collect();
        let found: BTreeSet<usize> = numbers.iter().flatten().copied().collect();
        assert_eq!(found.len(), layers, "token {}: layers {found:?}", record.index);
        assert_eq!(found.iter().max(), Some(&(layers - 1)));
        // In order, never going back.
        let order: Vec<usize> = numbers.iter().flatten().copied().collect();
        assert!(
            order.windows(2).all(|pair| pair[0] <= pair[1]),
            "layers out of order"
        );
        for layer in 0..layers {
            let members: Vec<&&DispatchRecord> = dispatches
                .iter()
                .filter(|dispatch| layer_number(dispatch) == Some(layer))
                .collect();
            assert!(
                members[0].kernel.starts_with(first_kernel),
                "layer {layer} begins with {} rather than {first_kernel}",
                members[0].kernel
            );
            let roles = members
                .iter()
                .fold(Roles::NONE, |roles, dispatch| roles.union(dispatch.roles));
            for role in LAYER_ROLES.into_iter().chain(mlp) {
                assert!(
                    roles.contains(role),
                    "layer {layer} has no {role}: {}",
                    roles.describe()
                );
            }
        }
        let last = dispatches
            .iter()
            .rposition(|dispatch| layer_number(dispatch).is_some())
            .expect("layers");
        let after: Roles = dispatches[last + 1..]
            .iter()
            .fold(Roles::NONE, |roles, dispatch| roles.union(dispatch.roles));
        assert!(
            after.contains(Role::LmHead),
            "after the layers: {}",
            after.describe()
        );
        assert!(
            after
                .iter()
                .all(|role| !role.in_layer() || role == Role::ActivationQuantization),
            "layer work after the last layer: {}",
            after.describe()
        );
    }
}

#[test]
fn llama_cpp_layers_are_found_by_their_period_without_nvtx() {
    let mut profile = fixture("llamacpp-1b-q4_k_m.json");
    assert!(
        profile
            .dispatches
            .iter()
            .all(|d| d.roles.is_empty() && d.scope.is_empty())
    );
    let anatomy = annotate(&mut profile);
    assert_eq!(anatomy.layers_from, LayersFrom::Period { period: 19 });
    assert_eq!(anatomy.layers, 16);
    check_layers(&profile, 16, "rms_norm_f32");
    // Its activation quantization is a role of its own, 6 a layer.
    let first = token(&profile, 0);
    let quantized = first
        .iter()
        .filter(|d| layer_number(d) == Some(3) && d.roles.contains(Role::ActivationQuantization))
        .count();
    assert_eq!(quantized, 6);
    // The LM head is the last mat-vec, after the final norm.
    let head = first.last().expect("dispatches");
    assert_eq!(head.roles, Roles::one(Role::LmHead));
    assert_eq!(head.scope.as_ref(), "lm_head");

    let mut eight = fixture("llamacpp-8b-bf16.json");
    assert_eq!(annotate(&mut eight).layers, 32);
    check_layers(&eight, 32, "rms_norm_f32");
}

#[test]
fn llama_cpp_mixture_of_experts_shows_its_router_and_experts() {
    let mut profile = fixture("llamacpp-30b-a3b-q4_k_m.json");
    let anatomy = annotate(&mut profile);
    assert_eq!(anatomy.layers, 48);
    assert!(matches!(anatomy.layers_from, LayersFrom::Period { .. }));
    check_layers_with(&profile, 48, "rms_norm_f32", MIXTURE);
    let only = |kernel: &str| -> BTreeSet<String> {
        token(&profile, 0)
            .iter()
            .filter(|d| layer_number(d).is_some() && d.kernel.starts_with(kernel))
            .map(|d| d.roles.describe())
            .collect()
    };
    // Its top-k choice is the router's, the experts' weighted sum theirs,
    // and Qwen3's per-head norms, fused with rope, are rope's.
    assert_eq!(only("topk_moe"), BTreeSet::from(["router".to_string()]));
    assert_eq!(
        only("moe_weighted_reduction"),
        BTreeSet::from(["experts".to_string()])
    );
    assert_eq!(
        only("rms_norm_mul_rope"),
        BTreeSet::from(["rope + KV write".to_string()])
    );
    // The quantize before the LM head is in its scope.
    let first = token(&profile, 0);
    let last_layer = first.iter().rposition(|d| layer_number(d).is_some()).unwrap();
    assert!(first[last_layer + 1..].iter().all(|d| !d.scope.is_empty()));
}

#[test]
fn pytorch_layers_come_from_nvtx_eager_and_from_the_period_compiled() {
    let mut eager = fixture("torch-eager-1b.json");
    let anatomy = annotate(&mut eager);
    assert_eq!((anatomy.layers_from, anatomy.layers), (LayersFrom::Nvtx, 16));
    // The program's marks, renamed as kscope names layers.
    assert!(eager.dispatches.iter().any(|d| d.scope.as_ref() == "layer.15"));
    check_layers(&eager, 16, "at::native::");

    let mut compiled = fixture("torch-graph-1b.json");
    let anatomy = annotate(&mut compiled);
    assert_eq!(anatomy.layers, 16);
    assert!(matches!(anatomy.layers_from, LayersFrom::Period { .. }));
    // Inductor numbers each fused norm apart; the layers still line up.
    check_layers(&compiled, 16, "triton_red_fused");
}

#[test]
fn kscope_seen_from_outside_splits_into_the_layers_its_engine_named() {
    let inside = fixture("kscope-1b-q4_k_m.json");
    let mut outside = fixture("kscope-outside-1b-q4_k_m.json");
    let anatomy = annotate(&mut outside);
    assert_eq!(anatomy.layers, 16);
    for index in 0..2 {
        let (engine, found) = (token(&inside, index), token(&outside, index));
        assert_eq!(engine.len(), found.len());
        for (engine, found) in engine.iter().zip(&found) {
            assert_eq!(engine.kernel, found.kernel);
            assert_eq!(
                layer_number(engine),
                layer_number(found),
                "{} in {} but found in {}",
                engine.kernel,
                engine.scope,
                found.scope
            );
        }
    }
}

/// The account's rows add up to each side's measured token, and to the
/// measured difference; every role row is present; its biggest row is
/// the role whose kernels' time differs most.
fn check_account(base: &Profile, new: &Profile) -> kernelscope::profile::GapAccount {
    let account = gap_account(base, new);
    let (base_sum, new_sum) = account.sums();
    for (sum, total) in [
        (base_sum, account.total.base_us_per_token),
        (new_sum, account.total.new_us_per_token),
    ] {
        assert!(total > 0.0);
        assert!(
            (sum - total).abs() <= 0.02 * total,
            "rows {sum} of measured {total}"
        );
    }
    // Measured independently: the mean span of each token's dispatches.
    for (profile, total) in [
        (base, account.total.base_us_per_token),
        (new, account.total.new_us_per_token),
    ] {
        let spans: Vec<f64> = profile
            .repetition_tokens()
            .iter()
            .map(|&index| {
                let dispatches = token(profile, index);
                let start = dispatches.iter().map(|d| d.start_ns).min().unwrap();
                let end = dispatches.iter().map(|d| d.end_ns).max().unwrap();
                (end - start) as f64 / 1e3
            })
            .collect();
        let mean = spans.iter().sum::<f64>() / spans.len() as f64;
        assert!((mean - total).abs() < 1e-6 * total.max(1.0), "{mean} vs {total}");
    }
    for role in LAYER_ROLES.into_iter().chain([Role::LmHead]) {
        assert!(
            account.roles.iter().any(|row| row.roles.contains(role)),
            "no row for {role}"
        );
    }
    let biggest = account.biggest().expect("rows");
    assert!(
        account
            .roles
            .iter()
            .all(|row| row.difference().abs() <= biggest.difference().abs())
    );
    account
}

#[test]
fn a_fused_engine_against_an_unfused_one_merges_the_roles_it_fuses() {
    let mut kscope = fixture("kscope-1b-bf16.json");
    let mut llama = fixture("llamacpp-1b-bf16.json");
    annotate(&mut kscope);
    annotate(&mut llama);
    let account = check_account(&kscope, &llama);
    let merged = |a: Role, b: Role| {
        account
            .roles
            .iter()
            .find(|row| row.roles.contains(a))
            .is_some_and(|row| row.roles.contains(b) && row.merged_from.len() >= 2)
    };
    // kscope's norm_matvec_bf16 does the attention norm and q/k/v together.
    assert!(merged(Role::AttentionNorm, Role::QkvProjection));
    assert!(merged(Role::MlpNorm, Role::GateUp));
    // Neither engine fuses attention with anything.
    let attention = account
        .roles
        .iter()
        .find(|row| row.roles.contains(Role::Attention))
        .unwrap();
    assert!(attention.merged_from.is_empty());
    assert_eq!(account.layers.base, 16);
    assert_eq!(account.layers.new, 16);
    let json: serde_json::Value = serde_json::from_str(&account.to_json()).unwrap();
    for key in ["base", "new", "layers", "roles", "total"] {
        assert!(json.get(key).is_some(), "JSON has no {key}");
    }
    assert!(json["roles"][0]["merged_from"].is_array());
}

#[test]
fn accounts_of_quantized_and_compiled_engines_add_up() {
    let mut kscope = fixture("kscope-1b-q4_k_m.json");
    let mut llama = fixture("llamacpp-1b-q4_k_m.json");
    let mut torch = fixture("torch-graph-1b.json");
    for profile in [&mut kscope, &mut llama, &mut torch] {
        annotate(profile);
    }
    let account = check_account(&kscope, &llama);
    // llama.cpp's slowest role is its gate/up mat-vec; kscope's too.
    let slowest = |us: fn(&kernelscope::profile::GapRow) -> f64| {
        account
            .roles
            .iter()
            .max_by(|a, b| us(a).total_cmp(&us(b)))
            .map(|row| row.role.clone())
    };
    assert_eq!(
        slowest(|row| row.new_us_per_token).as_deref(),
        Some("gate/up (+ activation)")
    );
    check_account(&kscope, &torch);
}
