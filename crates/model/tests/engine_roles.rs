//! What kscope's engine says each dispatch does for the model: the roles a
//! gap account charges time to. A decode token of a dense and of a
//! mixture-of-experts preset must show every role of its kind of layer,
//! each dispatch at least one, and the router apart from the experts even
//! where one fused group encodes them together.

use std::collections::BTreeSet;

use kernelscope::profile::{Phase, ProfileLevel, Role};
use kernelscope::testing::Backend;
use kernelscope::{DType, DeviceOptions};
use kernelscope_model::{GenerationRequest, Model, SyntheticOptions};

fn every_decode_dispatch_says_what_it_does(backend: Backend) {
    let shared = [
        Role::Embedding,
        Role::AttentionNorm,
        Role::QkvProjection,
        Role::RopeKvWrite,
        Role::Attention,
        Role::OutputProjection,
        Role::MlpNorm,
        Role::FinalNorm,
        Role::LmHead,
    ];
    for (name, mlp) in [
        ("tiny-llama3", [Role::GateUp, Role::Down]),
        ("tiny-qwen3-moe", [Role::Router, Role::Experts]),
    ] {
        let Some(device) = backend.device(DeviceOptions::new().profile(ProfileLevel::Dispatch)) else {
            return;
        };
        let options = SyntheticOptions {
            dtype: DType::BF16,
            seed: 11,
            quiet: true,
        };
        let mut model = Model::from_preset(name, &device, options).unwrap();
        let prompt: Vec<u32> = (0..7).map(|i| (i * 173 + 29) % 1000).collect();
        model
            .generate(&GenerationRequest {
                stop_at_eos: false,
                ..GenerationRequest::new(&prompt, 6)
            })
            .unwrap();
        let mode = model.execution_mode().name();
        let profile = model.profile(device.conditions(mode, None));
        let decode: BTreeSet<u32> = profile
            .tokens
            .iter()
            .filter(|token| token.phase == Phase::Decode && token.timed)
            .map(|token| token.index)
            .collect();
        assert!(!decode.is_empty(), "{name} ({mode}): decode tokens were timed");
        for &token in &decode {
            let dispatches: Vec<_> = profile
                .dispatches
                .iter()
                .filter(|dispatch| dispatch.token == Some(token))
                .collect();
            let mut seen = BTreeSet::new();
            for dispatch in &dispatches {
                assert!(
                    !dispatch.roles.is_empty(),
                    "{name} ({mode}) token {token}: {} in {} has no role",
                    dispatch.kernel,
                    dispatch.scope
                );
                assert!(
                    !(dispatch.roles.contains(Role::Router) && dispatch.roles.contains(Role::Experts)),
                    "{name} ({mode}): {} is both the router and the experts",
                    dispatch.kernel
                );
                if dispatch.kernel.contains("moe_route") {
                    assert_eq!(dispatch.roles.iter().collect::<Vec<_>>(), vec![Role::Router]);
                }
                if dispatch.kernel.contains("moe_gate_up") || dispatch.kernel.contains("moe_down") {
                    assert!(dispatch.roles.contains(Role::Experts), "{}", dispatch.kernel);
                }
                seen.extend(dispatch.roles.iter());
            }
            for role in shared.iter().chain(&mlp) {
                assert!(
                    seen.contains(role),
                    "{name} ({mode}) token {token}: no dispatch is {role}; seen {seen:?}"
                );
            }
            // (The MoE preset keeps a dense MLP in some layers, as Qwen3's may.)
            if mlp[0] == Role::GateUp {
                for role in [Role::Router, Role::Experts] {
                    assert!(!seen.contains(&role), "{name} ({mode}): {role} in a dense model");
                }
            }
        }
    }
}

kernelscope::device_tests!(every_decode_dispatch_says_what_it_does);
