//! Every kernel's declared format against its name: a kernel declares the
//! format it reads where it is registered, and profiles before schema 4
//! get theirs from the kernel's name (`profile/schema_3.rs`). The two must
//! never disagree, or an old profile and a new one of the same run would
//! group their time differently; and a kernel whose name names a format
//! but that forgot to declare it would silently fall under "other".

use crate::profile::format_of_kernel_name;
use crate::runtime::{Collective, DType, Device, DeviceOptions, Dispatch, KernelRegistry};

#[test]
fn every_registered_kernel_declares_the_format_its_name_names() {
    let registry = crate::probes::registry();
    let names = registry.names();
    let disagreeing: Vec<String> = names
        .iter()
        .filter(|name| registry.format(name) != format_of_kernel_name(name))
        .map(|name| {
            format!(
                "{name}: declares {:?}, its name says {:?}",
                registry.format(name),
                format_of_kernel_name(name)
            )
        })
        .collect();
    assert!(
        disagreeing.is_empty(),
        "kernels whose declared format is not the one their name says:\n{}",
        disagreeing.join("\n")
    );
    // The check covers what it is meant to: every block format's kernels
    // and the dense ones, and kernels of no format.
    for format in crate::quant::QuantFormat::ALL {
        assert!(
            names
                .iter()
                .any(|name| *name == format!("matvec_{}_q8", format.name())
                    && registry.format(name) == Some(format.name())),
            "{format:?}"
        );
    }
    assert_eq!(registry.format("matvec_bf16"), Some("bf16"));
    assert_eq!(registry.format("copy_bytes"), None);
    assert!(names.len() > 200, "{} kernels", names.len());
}

#[test]
fn collectives_declare_the_dtype_they_exchange() {
    for collective in [Collective::AllReduceSum, Collective::AllGather] {
        for dtype in crate::ops::WEIGHT_DTYPES {
            assert_eq!(
                format_of_kernel_name(&collective.kernel_name(dtype)),
                Some(dtype.name())
            );
        }
    }
}

/// The format travels from the registration through the handle into the
/// record the profiler keeps; a kernel that declares none records none.
#[test]
fn a_dispatch_records_the_format_its_kernel_declares() {
    let device = Device::cpu_with(DeviceOptions::new().profile(crate::profile::ProfileLevel::Dispatch));
    let mut registry = KernelRegistry::new();
    registry.register_cpu("touch_q6_k", |_| Ok(()));
    registry.register_cpu("touch", |_| Ok(()));
    registry.register_format("touch_q6_k", "q6_k");
    let declared = registry.kernel(&device, "touch_q6_k").unwrap();
    let undeclared = registry.kernel(&device, "touch").unwrap();
    assert_eq!((declared.format(), undeclared.format()), (Some("q6_k"), None));
    let buffer = device.alloc(DType::F32, &[4]).unwrap();
    let mut encoder = device.command_encoder();
    for kernel in [&declared, &undeclared] {
        encoder
            .dispatch(Dispatch::new(kernel).read_write(&buffer))
            .unwrap();
    }
    encoder.commit_and_wait_labeled("formats").unwrap();
    let records = device.profiler().dispatches_by_label();
    let formats: Vec<Option<&str>> = records
        .iter()
        .flat_map(|(_, records)| records.iter().map(|record| record.format.as_deref()))
        .collect();
    assert_eq!(formats, [Some("q6_k"), None]);
}
