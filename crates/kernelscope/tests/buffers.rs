//! Buffers: typed round trips for every dtype, slice views that keep their
//! offset when bound (binding a view at its allocation's start is an easy bug
//! to write), and clear errors for misuse: wrong dtype, out-of-bounds views,
//! aliasing writes, a buffer of another device, a kernel missing on the
//! backend.

use half::{bf16, f16};
use kernelscope::rng::SplitMix64;
use kernelscope::testing::random_f32;
use kernelscope::{DType, Device, Dispatch, Error, KernelRegistry, Remedy};

#[test]
fn every_dtype_round_trips() {
    let device = Device::cpu();
    let floats = random_f32(30, 37);
    let as_f16: Vec<f16> = floats.iter().map(|&x| f16::from_f32(x)).collect();
    let as_bf16: Vec<bf16> = floats.iter().map(|&x| bf16::from_f32(x)).collect();
    let mut rng = SplitMix64::new(31);
    let as_u32: Vec<u32> = (0..37).map(|_| rng.next_u64() as u32).collect();
    let as_i32: Vec<i32> = (0..37).map(|_| rng.next_u64() as i32).collect();
    assert_eq!(
        device
            .buffer_from_slice(&floats, &[37])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        floats
    );
    assert_eq!(
        device
            .buffer_from_slice(&as_f16, &[37])
            .unwrap()
            .to_vec::<f16>()
            .unwrap(),
        as_f16
    );
    assert_eq!(
        device
            .buffer_from_slice(&as_bf16, &[37])
            .unwrap()
            .to_vec::<bf16>()
            .unwrap(),
        as_bf16
    );
    assert_eq!(
        device
            .buffer_from_slice(&as_u32, &[37])
            .unwrap()
            .to_vec::<u32>()
            .unwrap(),
        as_u32
    );
    assert_eq!(
        device
            .buffer_from_slice(&as_i32, &[37])
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        as_i32
    );
    let shaped = device.buffer_from_slice(&floats[..36], &[6, 6]).unwrap();
    assert_eq!(
        (shaped.len(), shaped.byte_len(), shaped.dtype()),
        (36, 144, DType::F32)
    );
    assert!(matches!(
        device.buffer_from_slice(&floats, &[6, 6]),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn wrong_dtype_and_out_of_bounds_are_errors() {
    let device = Device::cpu();
    let buffer = device.buffer_from_slice(&random_f32(32, 10), &[10]).unwrap();
    let error = buffer.to_vec::<u32>().unwrap_err();
    assert!(
        matches!(
            error,
            Error::DTypeMismatch {
                expected: DType::F32,
                found: DType::U32,
                ..
            }
        ),
        "{error}"
    );
    let error = buffer.slice(8, 3).unwrap_err().to_string();
    assert!(error.contains("8..11") && error.contains("0..10"), "{error}");
    assert!(buffer.reshape(&[3, 3]).is_err());
    assert_eq!(buffer.reshape(&[2, 5]).unwrap().shape(), [2, 5]);
}

fn registry() -> KernelRegistry {
    let mut registry = KernelRegistry::new();
    registry.register_cpu("negate", |args| {
        let input = args.input::<f32>(0)?;
        let output = args.output::<f32>(1)?;
        output.iter_mut().zip(input).for_each(|(o, i)| *o = -i);
        Ok(())
    });
    registry.register_cpu("double_output", |args| {
        args.output::<f32>(0)?;
        args.output::<f32>(0)?;
        Ok(())
    });
    registry.register_cpu("reads_as_u32", |args| args.input::<u32>(0).map(|_| ()));
    registry.register_cuda_source("gpu_only", "extern \"C\" __global__ void gpu_only() {}");
    registry
}

/// A slice view bound to a kernel exposes exactly its elements, not the
/// whole allocation.
#[test]
fn slice_views_keep_their_offset_when_bound() {
    let device = Device::cpu();
    let kernel = registry().kernel(&device, "negate").unwrap();
    let data = random_f32(33, 64);
    let source = device.buffer_from_slice(&data, &[64]).unwrap();
    let destination = device.alloc(DType::F32, &[64]).unwrap();
    let mut encoder = device.command_encoder();
    let from = source.slice(16, 8).unwrap();
    let to = destination.slice(40, 8).unwrap();
    encoder
        .dispatch(Dispatch::new(&kernel).read(&from).write(&to))
        .unwrap();
    encoder.commit_and_wait().unwrap();
    let result = destination.to_vec::<f32>().unwrap();
    for (i, value) in result.iter().enumerate() {
        let expected = if (40..48).contains(&i) { -data[i - 24] } else { 0.0 };
        assert_eq!(*value, expected, "element {i}");
    }
    assert_eq!(
        to.to_vec::<f32>().unwrap(),
        data[16..24].iter().map(|x| -x).collect::<Vec<_>>()
    );
}

#[test]
fn misuse_is_reported_not_executed() {
    let device = Device::cpu();
    let registry = registry();
    let negate = registry.kernel(&device, "negate").unwrap();
    let buffer = device.buffer_from_slice(&random_f32(34, 16), &[16]).unwrap();
    let mut encoder = device.command_encoder();

    // Writing a range another argument of the same dispatch covers.
    let error = encoder
        .dispatch(
            Dispatch::new(&negate)
                .read(&buffer.slice(0, 8).unwrap())
                .write(&buffer.slice(4, 8).unwrap()),
        )
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Aliasing {
                written: 1,
                other: 0,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("read_write"), "names the fix: {error}");

    // A buffer of another device.
    let other_device = Device::cpu();
    let foreign = other_device.alloc(DType::F32, &[16]).unwrap();
    let error = encoder
        .dispatch(Dispatch::new(&negate).read(&buffer).write(&foreign))
        .unwrap_err();
    assert!(matches!(error, Error::DeviceMismatch { .. }), "{error}");

    // Kernel-side misuse surfaces at commit, naming kernel and argument.
    let reads_as_u32 = registry.kernel(&device, "reads_as_u32").unwrap();
    encoder
        .dispatch(Dispatch::new(&reads_as_u32).read(&buffer))
        .unwrap();
    let error = encoder.commit().unwrap_err().to_string();
    assert!(
        error.contains("reads_as_u32") && error.contains("argument 0") && error.contains("u32"),
        "{error}"
    );

    let double = registry.kernel(&device, "double_output").unwrap();
    encoder.dispatch(Dispatch::new(&double).write(&buffer)).unwrap();
    let error = encoder.commit().unwrap_err().to_string();
    assert!(error.contains("already taken"), "{error}");

    encoder.dispatch(Dispatch::new(&negate).read(&buffer)).unwrap();
    let error = encoder.commit().unwrap_err().to_string();
    assert!(
        error.contains("argument 1") && error.contains("missing"),
        "{error}"
    );
}

#[test]
fn missing_kernels_name_the_workaround() {
    let device = Device::cpu();
    let error = registry().kernel(&device, "gpu_only").unwrap_err();
    assert!(
        matches!(error, Error::KernelMissing { backend: "cpu", .. }),
        "{error}"
    );
    // The way out is named in the library's terms, for a front end to word.
    assert_eq!(error.remedies(), [Remedy::OtherDevice { device: "cuda" }]);
    assert!(
        error.to_string().ends_with("; open device `cuda` instead"),
        "{error}"
    );
    let error = registry().kernel(&device, "nope").unwrap_err().to_string();
    assert!(
        error.contains("nope") && error.contains("negate"),
        "lists what is registered: {error}"
    );
}

#[test]
fn device_specs_pick_or_refuse_clearly() {
    // No machine has a 100th GPU: refused by name, with the workaround.
    let error = Device::open("cuda:99", Default::default()).unwrap_err();
    assert!(
        matches!(error, Error::BackendUnavailable { backend: "cuda", .. }),
        "{error}"
    );
    assert!(error.to_string().contains("cuda:99"), "{error}");
    // `auto` takes the GPU when one can be opened, else says why it did not.
    let (device, why) = Device::open("auto", Default::default()).unwrap();
    match Device::cuda_device_count() {
        Ok(_) => assert_eq!(device.backend(), "cuda", "{why}"),
        Err(_) => {
            assert_eq!(device.backend(), "cpu");
            assert!(why.contains("CPU") && why.contains("cuda:0: "), "{why}");
            let error = Device::open("cuda:0", Default::default()).unwrap_err();
            assert!(
                error.remedies().contains(&Remedy::OtherDevice { device: "cpu" }),
                "{error}"
            );
            assert!(
                std::error::Error::source(&error).is_some(),
                "the reason is kept: {error}"
            );
        }
    }
    for bad in ["gpu", "cuda:x", "cuda:-1"] {
        let error = Device::open(bad, Default::default()).unwrap_err();
        assert!(matches!(error, Error::InvalidDevice { .. }), "{bad}: {error}");
    }
}
