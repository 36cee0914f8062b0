//! Made-up stamps of a persistent kernel and a profile of runs of one: a
//! decoder whose every layer is an attention dispatch and one launch of a
//! feed-forward kernel that runs four phases (RMSNorm, gate/up, activation
//! quantization, down) between grid barriers, each launch split into its
//! phases from stamps simulated block by block, as the GPU would write them.

use std::sync::Arc;

use crate::profile::{
    CounterSnapshot, DispatchRecord, LaunchStamps, OpKind, PhaseMeta, Profile, Role, Roles, split_into_phases,
};
use crate::rng::SplitMix64;

/// The feed-forward kernel's name in [`synthetic_in_kernel_profile`].
pub const FEED_FORWARD_KERNEL: &str = "feed_forward_q4_k_q6_k";

/// The feed-forward kernel's phases: norm, gate/up and quantize end at a
/// grid barrier, down (the last) at none.
pub fn feed_forward_phases() -> Vec<PhaseMeta> {
    let phase = |name: &str, op_kind: OpKind, role: Role, bytes: u64, barrier: bool| PhaseMeta {
        name: Arc::from(name),
        op_kind,
        roles: Roles::one(role),
        bytes,
        bytes_written: bytes / 64,
        flops: bytes / 2,
        ends_at_grid_barrier: barrier,
    };
    vec![
        phase("norm", OpKind::RmsNorm, Role::MlpNorm, 1 << 14, true),
        phase("gate/up", OpKind::MatVec, Role::GateUp, 1 << 22, true),
        phase(
            "quantize",
            OpKind::Other,
            Role::ActivationQuantization,
            1 << 15,
            true,
        ),
        phase("down", OpKind::MatVec, Role::Down, 1 << 21, false),
    ]
}

/// Stamps of one launch of `blocks` blocks running `phases`, as the GPU's
/// global timer would read them from `clock_ns` on: each block starts a
/// little late, works for its own random time per phase, and where a phase
/// ends at a grid barrier every block waits there for the last. Returns
/// the stamps (per block: start, then the end of each phase) and the time
/// the last block finished.
pub fn simulated_stamps(
    rng: &mut SplitMix64,
    phases: &[PhaseMeta],
    blocks: u32,
    clock_ns: u64,
    phase_ns: &[u64],
) -> (Vec<u64>, u64) {
    let per_block = phases.len() + 1;
    let mut stamps = vec![0u64; blocks as usize * per_block];
    let mut now: Vec<u64> = (0..blocks).map(|_| clock_ns + rng.below(2_000)).collect();
    for (block, start) in now.iter().enumerate() {
        stamps[block * per_block] = *start;
    }
    for (position, phase) in phases.iter().enumerate() {
        let typical = phase_ns.get(position).copied().unwrap_or(1_000).max(2);
        for (block, time) in now.iter_mut().enumerate() {
            // Blocks vary by up to half the typical time: the bubble a
            // barrier makes of the slowest.
            *time += typical / 2 + rng.below(typical);
            stamps[block * per_block + position + 1] = *time;
        }
        if phase.ends_at_grid_barrier {
            let release = now.iter().copied().max().unwrap_or(clock_ns) + 50;
            now.iter_mut().for_each(|time| *time = release);
        }
    }
    let finished = now.iter().copied().max().unwrap_or(clock_ns);
    (stamps, finished)
}

/// A decode run of `tokens` tokens over `layers` layers whose feed-forward
/// is one launch of [`FEED_FORWARD_KERNEL`] per layer, split into its four
/// phases from [`simulated_stamps`] of 16 blocks: one submission per token,
/// the attention and the feed-forward of each layer its dispatches.
pub fn synthetic_in_kernel_profile(tokens: u32, layers: usize, seed: u64) -> Profile {
    let mut rng = SplitMix64::new(seed);
    let label: Arc<str> = Arc::from("decode");
    let phases = feed_forward_phases();
    let dispatches = 2 * layers as u64;
    let per_token = CounterSnapshot {
        dispatches,
        submissions: 1,
        syncs: 1,
        ..Default::default()
    };
    let mut profile = super::empty_synthetic_profile();
    profile.conditions.weight_format = Some("Q4_K_M".into());
    let mut now = 1_000u64;
    // The GPU's timer runs on its own epoch: only differences say anything.
    let gpu_offset = 7_000_000_000 + rng.below(1 << 30);
    for token in 0..tokens {
        let token_start = now;
        let mut index = 0;
        for layer in 0..layers {
            let attention = 20_000 + rng.below(1_000);
            let mut record = DispatchRecord {
                label: label.clone(),
                submission: u64::from(token),
                index,
                kernel: Arc::from("attention_f32"),
                format: Some(Arc::from("f32")),
                op_kind: OpKind::Attention,
                scope: Arc::from(format!("layer.{layer}.attn")),
                stream: 0,
                token: Some(token),
                start_ns: now,
                end_ns: now + attention,
                bytes: 1 << 18,
                bytes_written: 1 << 10,
                flops: 1 << 17,
                roles: Roles::one(Role::Attention),
                measured_bytes: 0,
                in_kernel: None,
            };
            profile.dispatches.push(record.clone());
            index += 1;
            now += attention + 400;
            let (stamps, finished) = simulated_stamps(
                &mut rng,
                &phases,
                16,
                now + gpu_offset,
                &[3_000, 40_000, 2_000, 25_000],
            );
            record.index = index;
            record.kernel = Arc::from(FEED_FORWARD_KERNEL);
            record.format = Some(Arc::from("q4_k"));
            record.op_kind = OpKind::MatVec;
            record.scope = Arc::from(format!("layer.{layer}.mlp"));
            record.start_ns = now;
            record.end_ns = finished - gpu_offset + 300;
            let reduced =
                LaunchStamps::of_blocks(&stamps, phases.len()).expect("simulated stamps are a launch's");
            let split = split_into_phases(&record, &phases, &reduced, 16);
            profile
                .dispatches
                .extend(split.expect("simulated stamps are a launch's"));
            index += 1;
            now = record.end_ns + 400;
        }
        now = super::close_synthetic_token(&mut profile, &label, token, token_start, now, index, per_token);
    }
    profile.with_idle()
}
