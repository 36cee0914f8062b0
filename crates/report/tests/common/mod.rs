//! Helpers shared by the rendering tests: a profile recorded on the CPU
//! backend, and reading a row back out of the text report's tables.
#![allow(dead_code)]

use kernelscope::profile::{Phase, Profile, ProfileLevel};
use kernelscope::testing::{inc_one_registry, random_f32};
use kernelscope::{DType, Device, DeviceOptions, Dispatch, OpKind};

/// A real profile from the CPU backend: 3 tokens of 2 scoped dispatches.
pub fn recorded_profile() -> Profile {
    let device = Device::cpu_with(DeviceOptions::new().profile(ProfileLevel::Dispatch));
    let kernel = inc_one_registry().kernel(&device, "inc_one").unwrap();
    let n = 4096;
    let a = device.buffer_from_slice(&random_f32(40, n), &[n]).unwrap();
    let b = device.alloc(DType::F32, &[n]).unwrap();
    let mut encoder = device.command_encoder();
    for _ in 0..3 {
        device.profiler().begin_token(Phase::Decode);
        encoder.set_scope("layer.0.attn");
        let rope = Dispatch::new(&kernel).read(&a).write(&b);
        encoder
            .dispatch(
                rope.cost(4 * n as u64, 4 * n as u64, n as u64)
                    .op_kind(OpKind::Rope),
            )
            .unwrap();
        encoder.set_scope("lm_head");
        let head = Dispatch::new(&kernel).read(&b).write(&a);
        encoder
            .dispatch(
                head.cost(4 * n as u64, 4 * n as u64, n as u64)
                    .op_kind(OpKind::MatVec),
            )
            .unwrap();
        encoder.commit_and_wait_labeled("token").unwrap();
        device.profiler().end_token();
    }
    device.profile(device.conditions("eager", Some("test".into())).with_ceilings(
        kernelscope::profile::Ceilings {
            read: Some(kernelscope::profile::Ceiling::new(50.0, "test")),
            ..Default::default()
        },
    ))
}

/// The report's row for `key` in the table that follows `section`, as cells.
pub fn table_row(report: &str, section: &str, key: &str) -> Vec<String> {
    let table = &report[report
        .find(section)
        .unwrap_or_else(|| panic!("no `{section}` in:\n{report}"))..];
    let line = table
        .lines()
        .find(|line| line.split('|').nth(1).is_some_and(|cell| cell.trim() == key))
        .unwrap_or_else(|| panic!("no row `{key}` after `{section}` in:\n{report}"));
    line.split('|')
        .map(|cell| cell.trim().to_string())
        .filter(|cell| !cell.is_empty())
        .collect()
}

/// The first cells of the rows of the table under `section` (up to the
/// next line that is not a row).
pub fn row_keys(report: &str, section: &str) -> Vec<String> {
    let start = report
        .find(section)
        .unwrap_or_else(|| panic!("no {section:?} in:\n{report}"));
    report[start..]
        .lines()
        .skip(3) // the heading, the header and its rule
        .take_while(|line| line.starts_with('|'))
        .map(|line| line.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect()
}
