//! Every CUDA source of the ops and the probes against its Rust side: each
//! `.cu` signature against its op's declared argument list, the
//! collectives' dispatches against theirs (they have no `.cu`: the runtime
//! reads their arguments by the same list), and the ops' shared helpers.

mod declared;

use crate::ops::Argument;
use crate::probes::registry;
use crate::runtime::arguments::ArgumentKind;
use declared::{DECLARED, DECLARED_PER_KERNEL, DECLARED_WITHOUT_SOURCE};

/// The registered names of a kernel of a `.cu` file: itself, or, for a
/// per-format kernel, its name for every quantized format.
fn registered_names(kernel: &str) -> Vec<String> {
    use crate::quant::QuantFormat;
    if kernel.contains("{gate}") {
        // The feed-forward kernels of every pair; the streamed ones only
        // where down's rows stream (Q4_K, Q6_K).
        let downs: Vec<QuantFormat> = if kernel.contains("_held") {
            vec![QuantFormat::Q4_K, QuantFormat::Q6_K]
        } else {
            QuantFormat::ALL.to_vec()
        };
        QuantFormat::ALL
            .iter()
            .flat_map(|gate| {
                downs.iter().map(move |down| {
                    kernel
                        .replace("{gate}", gate.name())
                        .replace("{down}", down.name())
                })
            })
            .collect()
    } else if kernel.contains("{format}") {
        crate::quant::QuantFormat::ALL
            .iter()
            .map(|format| kernel.replace("{format}", format.name()))
            .collect()
    } else {
        vec![kernel.to_string()]
    }
}

fn kernel_signatures(source: &str) -> Vec<(String, Vec<(String, String)>)> {
    const OPENING: &str = "extern \"C\" __global__ void ";
    let mut kernels = Vec::new();
    let mut rest = source;
    while let Some(start) = rest.find(OPENING) {
        rest = &rest[start + OPENING.len()..];
        // Launch bounds stand between the return type and the name.
        if let Some(bounded) = rest.strip_prefix("__launch_bounds__(") {
            let close = bounded.find(')').expect("the end of the launch bounds");
            rest = &bounded[close + 1..];
        }
        let open = rest.find('(').expect("a kernel's parameter list");
        let close = rest.find(')').expect("the end of a kernel's parameter list");
        let name = rest[..open].trim().to_string();
        let parameters = rest[open + 1..close]
            .split(',')
            .map(|parameter| {
                let parameter = parameter.split_whitespace().collect::<Vec<_>>().join(" ");
                let split = parameter
                    .rfind(|character: char| !(character.is_alphanumeric() || character == '_'))
                    .expect("a parameter with a type and a name");
                (
                    parameter[..=split].trim().to_string(),
                    parameter[split + 1..].to_string(),
                )
            })
            .collect();
        kernels.push((name, parameters));
        rest = &rest[close..];
    }
    kernels
}

/// Every `<op>/<stem>.cu` under `src/ops` and `src/probes`, in folders at
/// any depth (a family's ops sit one deeper): (op, stem, path, source),
/// the op being the file's folder under `src` (`ops/moe/route`).
fn kernel_files() -> Vec<(String, String, std::path::PathBuf, String)> {
    fn walk(
        root: &std::path::Path,
        folder: &std::path::Path,
        files: &mut Vec<(String, String, std::path::PathBuf, String)>,
    ) {
        let mut entries: Vec<_> = std::fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, files);
            } else if path.extension().is_some_and(|extension| extension == "cu") {
                let op = folder.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
                let source = std::fs::read_to_string(&path).unwrap();
                files.push((op, stem, path, source));
            }
        }
    }
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&source, &source.join("ops"), &mut files);
    walk(&source, &source.join("probes"), &mut files);
    files
}

/// Kernels launched normally, never early: the calibration spin, whose
/// measured time must hold only its own work.
const LAUNCHED_NORMALLY: [&str; 1] = ["spin_u32"];

/// Every other kernel, as registered (prelude included), begins by waiting
/// for the previous kernel, so that graphs may launch it early: a kernel
/// added without the wait would run normally and quietly lose the overlap.
#[test]
fn every_kernel_but_the_calibration_spin_may_launch_early() {
    let registry = registry();
    let mut kernels = 0;
    for (_, _, file, source) in kernel_files() {
        for (kernel, _) in kernel_signatures(&source) {
            for kernel in registered_names(&kernel) {
                let registered = registry.cuda_source(&kernel).expect("registered");
                assert_eq!(
                    crate::runtime::early_launch::begins_by_waiting(registered, &kernel),
                    !LAUNCHED_NORMALLY.contains(&kernel.as_str()),
                    "{kernel} in {}: its first statement must be `wait_for_previous_kernel();` (see ops/prelude.cuh)",
                    file.display()
                );
                kernels += 1;
            }
        }
    }
    assert!(kernels > 80, "only {kernels} kernels found");
}

/// The one `.cu` file whose kernels read weights before they wait
/// (`reads_weights_before_waiting`): its loops issue their bulk copies,
/// then call the wait themselves (streamed.cuh).
const READS_WEIGHTS_FIRST: &str = "ops/quantized/linear/streamed_kernels.cu";

/// A kernel may open by reading weights only where its loop waits after
/// its copies: no other file's kernel says so, and every kernel of that
/// file does, each reaching a wait of its own (streamed_rows, under the
/// gate/up and q/k/v loops, streamed_add_split or o_proj's
/// streamed_add_norm_staged, each calling `wait_for_previous_kernel`).
#[test]
fn only_the_streamed_kernels_read_weights_before_waiting() {
    const OPENING: &str = "reads_weights_before_waiting();";
    let mut streamed = 0;
    for (_, _, file, source) in kernel_files() {
        let is_streamed = file.ends_with(READS_WEIGHTS_FIRST);
        for (kernel, _) in kernel_signatures(&source) {
            let body_start = source
                .find(&format!("{kernel}("))
                .expect("the kernel's definition");
            // Past the name, which may hold `{format}`.
            let body = &source[body_start + kernel.len()..];
            let body = body[body.find('{').expect("a body") + 1..].trim_start();
            let opens_so = body.starts_with(OPENING);
            assert_eq!(opens_so, is_streamed, "{kernel} in {}", file.display());
            if is_streamed {
                let call = body.lines().nth(1).expect("a call after the opening").trim();
                assert!(
                    [
                        "streamed_silu_held_x<",
                        "streamed_matvecs_rope_held_x<",
                        "streamed_add_split<",
                        "streamed_add_norm_staged<"
                    ]
                    .iter()
                    .any(|streaming| call.starts_with(streaming)),
                    "{kernel}: {call} is not a loop that waits after its copies"
                );
                streamed += 1;
            }
        }
    }
    assert_eq!(streamed, 12, "the streamed kernels");
    let helpers = include_str!("ops/quantized/linear/streamed.cuh");
    for loop_body in [
        "void streamed_rows(",
        "void streamed_add_split(",
        "void streamed_add_norm_staged(",
    ] {
        let body = &helpers[helpers.find(loop_body).expect("the loop")..];
        let body = &body[..body.find("\n}\n").expect("its end")];
        assert!(body.contains("wait_for_previous_kernel();"), "{loop_body} waits");
    }
}

/// Whether a CUDA parameter type takes an argument of `kind`.
fn spells(cuda_type: &str, kind: ArgumentKind) -> bool {
    match kind {
        ArgumentKind::Read => cuda_type.starts_with("const ") && cuda_type.ends_with('*'),
        ArgumentKind::Write | ArgumentKind::ReadWrite => {
            !cuda_type.starts_with("const ") && cuda_type.ends_with('*')
        }
        ArgumentKind::U32 => cuda_type == "u32" || cuda_type == "unsigned int",
        ArgumentKind::F32 => cuda_type == "float",
        ArgumentKind::U64 => cuda_type == "unsigned long long",
    }
}

/// Every kernel in `ops/<op>/*.cu` takes the arguments its op declares,
/// by name, in order, with a matching constness or scalar type, and is
/// registered under its own name; every op has at least one kernel.
#[test]
fn every_cuda_signature_matches_its_declared_arguments() {
    let registry = registry();
    let mut checked_ops = Vec::new();
    for (op, stem, file, source) in kernel_files() {
        let file_list = DECLARED
            .iter()
            .find(|(name, file, _)| *name == op && *file == stem)
            .map(|entry| entry.2);
        let kernels = kernel_signatures(&source);
        assert!(!kernels.is_empty(), "{} declares no kernel", file.display());
        for (kernel, parameters) in kernels {
            let declared = DECLARED_PER_KERNEL
                .iter()
                .find(|(name, _)| *name == kernel)
                .map(|entry| entry.1)
                .or(file_list)
                .unwrap_or_else(|| panic!("{kernel} of {op}/{stem}.cu is not in this test's lists"));
            for name in registered_names(&kernel) {
                assert!(
                    registry.cuda_source(&name).is_some(),
                    "{name} in {} is not registered under that name",
                    file.display()
                );
            }
            let names: Vec<&str> = parameters.iter().map(|(_, name)| name.as_str()).collect();
            let declared_names: Vec<&str> = declared.iter().map(|argument| argument.name).collect();
            assert_eq!(
                names, declared_names,
                "{kernel}'s parameters against {op}'s ARGUMENTS"
            );
            for ((cuda_type, name), argument) in parameters.iter().zip(declared) {
                assert!(
                    spells(cuda_type, argument.kind),
                    "{kernel}: `{cuda_type} {name}` does not take a {:?} argument",
                    argument.kind
                );
            }
        }
        checked_ops.push(op.clone());
    }
    for op in DECLARED.iter().map(|entry| entry.0) {
        assert!(
            checked_ops.iter().any(|checked| checked == op),
            "{op} has no .cu kernel"
        );
    }
}

#[test]
fn the_signature_reader_reads_names_types_and_every_kernel() {
    let source = "// a comment\nextern \"C\" __global__ void first(const float* x,\n    u32 n) { }\n\
                  extern \"C\" __global__ void second(unsigned long long words) {}\n\
                  extern \"C\" __global__ void __launch_bounds__(256, 2) third(u32 n) {}";
    assert_eq!(
        kernel_signatures(source),
        vec![
            (
                "first".to_string(),
                vec![
                    ("const float*".to_string(), "x".to_string()),
                    ("u32".to_string(), "n".to_string())
                ]
            ),
            (
                "second".to_string(),
                vec![("unsigned long long".to_string(), "words".to_string())]
            ),
            ("third".to_string(), vec![("u32".to_string(), "n".to_string())]),
        ]
    );
}

/// Whether `dispatch` carries, in order, an argument of each declared kind.
fn follows(dispatch: &crate::runtime::Dispatch, declared: &[Argument]) -> bool {
    use crate::runtime::{Access, Arg, Param};
    dispatch.args().len() == declared.len()
        && dispatch.args().iter().zip(declared).all(|(arg, argument)| {
            matches!(
                (arg, argument.kind),
                (
                    Arg::Buffer {
                        access: Access::Read,
                        ..
                    },
                    ArgumentKind::Read
                ) | (
                    Arg::Buffer {
                        access: Access::Write,
                        ..
                    },
                    ArgumentKind::Write
                ) | (
                    Arg::Buffer {
                        access: Access::ReadWrite,
                        ..
                    },
                    ArgumentKind::ReadWrite
                ) | (Arg::Scalar(Param::U32(_)), ArgumentKind::U32)
                    | (Arg::Scalar(Param::F32(_)), ArgumentKind::F32)
                    | (Arg::Scalar(Param::U64(_)), ArgumentKind::U64)
            )
        })
}

/// Every declared list names each argument once.
#[test]
fn every_declared_list_names_each_argument_once() {
    let lists = DECLARED
        .iter()
        .map(|(op, stem, declared)| (format!("{op}/{stem}.cu"), *declared))
        .chain(
            DECLARED_WITHOUT_SOURCE
                .iter()
                .chain(&DECLARED_PER_KERNEL)
                .map(|(name, declared)| (name.to_string(), *declared)),
        );
    for (name, declared) in lists {
        let mut names: Vec<&str> = declared.iter().map(|argument| argument.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), declared.len(), "{name}: {declared:?}");
    }
}

/// The collectives' dispatches carry their declared arguments, as the
/// runtime's in-process exchange and NCCL launch read them.
#[test]
fn collective_dispatches_follow_their_declared_arguments() {
    use crate::ops::collective::{AllGather, AllReduce};
    use crate::runtime::{Communicator, DType, Device};
    let device = Device::cpu();
    let communicators = Communicator::group(std::slice::from_ref(&device)).unwrap();
    let buffer = device.alloc(DType::F32, &[4]).unwrap();
    let output = device.alloc(DType::F32, &[4]).unwrap();
    let reduce = AllReduce::new(&communicators[0])
        .unwrap()
        .dispatch(&buffer)
        .unwrap();
    let gather = AllGather::new(&communicators[0])
        .unwrap()
        .dispatch(&buffer, &output)
        .unwrap();
    for ((name, declared), dispatch) in DECLARED_WITHOUT_SOURCE.iter().zip([reduce, gather]) {
        assert!(
            dispatch.kernel().name().starts_with(name),
            "{}",
            dispatch.kernel().name()
        );
        assert!(
            follows(&dispatch, declared),
            "{name}: {:?} against {declared:?}",
            dispatch.args()
        );
    }
}
