//! Every CUDA kernel source compiles with NVRTC, on a machine without a GPU:
//! each registry's sources exactly as the runtime assembles them (the
//! prelude, the per-format instantiations, as registered) are compiled
//! through the runtime's own NVRTC call (the same options) for sm_90, the
//! H100/H200 the GPU suite runs on, and each kernel must be an entry of its
//! PTX. NVRTC needs only libnvrtc on the loader's path (CI installs the
//! `nvidia-cuda-nvrtc` wheel, see `.ci/run`); without it the compile test
//! skips loudly, or fails under `KSCOPE_REQUIRE_NVRTC=1`.
//!
//! So that no kernel file escapes the check, every `.cu`/`.cuh` file under
//! `crates/` must be part of a registered source; this needs no NVRTC and
//! runs in every build.

use std::path::{Path, PathBuf};

use kernelscope::KernelRegistry;

/// The architecture the GPU suite's devices have (H100, H200).
#[cfg(feature = "cuda")]
const ARCH: &str = "sm_90";

/// Every registry whose kernels the runtime compiles, by how it is made
/// (`probes::registry()` holds the ops' and the probes' kernels; a source
/// in several is compiled once). The test-only registries of `tests/` hold
/// inline sources, no files.
fn registries() -> Vec<(&'static str, KernelRegistry)> {
    vec![
        ("ops::registry()", kernelscope::ops::registry()),
        ("probes::registry()", kernelscope::probes::registry()),
        (
            "testing::inc_one_registry()",
            kernelscope::testing::inc_one_registry(),
        ),
    ]
}

/// `.cu` files that are not kernels for NVRTC but whole programs, host code
/// included, built by nvcc in the GPU suite; each with the test that builds it.
const NVCC_PROGRAMS: [(&str, &str); 1] = [(
    "crates/kscope/tests/programs/nvtx_steps.cu",
    "crates/kscope/tests/profile_program.rs",
)];

#[cfg(feature = "cuda")]
#[test]
fn every_registered_cuda_source_compiles_with_nvrtc() {
    use std::io::Write;

    use kernelscope::testing::nvrtc;
    let Some((major, minor)) = nvrtc::nvrtc_version() else {
        let why = "no libnvrtc: pip install nvidia-cuda-nvrtc==13.0.* and put its nvidia/cu13/lib on LD_LIBRARY_PATH";
        assert!(
            !nvrtc::nvrtc_required(),
            "{why} ({} is 1)",
            nvrtc::REQUIRE_NVRTC_ENV_VAR
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED every_registered_cuda_source_compiles_with_nvrtc ({why}; set {}=1 to fail instead)",
            nvrtc::REQUIRE_NVRTC_ENV_VAR
        );
        return;
    };
    let start = std::time::Instant::now();
    let registries = registries();
    for (registry_name, registry) in &registries {
        assert!(
            !registry.cuda_sources().is_empty(),
            "{registry_name} holds no CUDA source"
        );
    }
    let compiled = nvrtc::compile_cuda_sources(
        registries
            .iter()
            .flat_map(|(_, registry)| registry.cuda_sources()),
        ARCH,
    );
    let kernels: usize = compiled.iter().map(|source| source.kernels.len()).sum();
    let sources = compiled.len();
    let mut failures = Vec::new();
    for source in &compiled {
        let first = &source.kernels[0];
        let which = match source.kernels.len() - 1 {
            0 => format!("`{first}` does not compile"),
            1 => format!("`{first}` and the other kernel of its source do not compile"),
            n => format!("`{first}` and the {n} other kernels of its source do not compile"),
        };
        match &source.ptx {
            Err(log) => failures.push(format!("{which}:\n{}", first_lines(log, 40))),
            Ok(_) => {
                let missing = source.missing_entries();
                if !missing.is_empty() {
                    failures.push(format!(
                        "the source of `{first}` defines no `extern \"C\" __global__` {missing:?}"
                    ));
                }
            }
        }
    }
    // KSCOPE_PTX_DUMP=DIR keeps each source's PTX as DIR/<first kernel>.ptx,
    // for `ptxas -v` (registers, spills) where there is no GPU.
    if let Some(folder) = std::env::var_os("KSCOPE_PTX_DUMP") {
        let folder = std::path::PathBuf::from(folder);
        std::fs::create_dir_all(&folder).expect("the PTX folder");
        for source in &compiled {
            if let Ok(ptx) = &source.ptx {
                let path = folder.join(format!("{}.ptx", source.kernels[0]));
                std::fs::write(&path, ptx).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert!(
        failures.is_empty(),
        "{} of {sources} CUDA sources fail with NVRTC {major}.{minor} for {ARCH}:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    // Straight to stderr, so the harness's capture cannot hide it from CI's log.
    let _ = writeln!(
        std::io::stderr(),
        "NVRTC {major}.{minor} compiled {sources} distinct CUDA sources ({kernels} kernels) for {ARCH} in {elapsed:.1} s"
    );
}

/// A format's CUDA struct must agree with its Rust file: every quantized
/// source asserts the struct's block size and element count against the
/// Rust format's, so a struct edited out of step fails to compile, naming
/// both files.
#[cfg(feature = "cuda")]
#[test]
fn a_cuda_format_struct_that_disagrees_with_its_rust_file_does_not_compile() {
    use kernelscope::quant::QuantFormat;
    use kernelscope::testing::nvrtc;
    let Some(_) = nvrtc::nvrtc_version() else {
        assert!(!nvrtc::nvrtc_required(), "no libnvrtc");
        eprintln!(
            "SKIPPED a_cuda_format_struct_that_disagrees_with_its_rust_file_does_not_compile (no libnvrtc)"
        );
        return;
    };
    let registry = kernelscope::ops::registry();
    for format in [QuantFormat::Q4_0, QuantFormat::Q6_K] {
        let name = format!("matvec_{}_q8", format.name());
        let source = registry
            .cuda_source(&name)
            .expect("a registered quantized mat-vec");
        let declared = format!(
            "BLOCK = {}, BYTES = {},",
            format.block_elements(),
            format.block_bytes()
        );
        assert_eq!(
            source.matches(&declared).count(),
            1,
            "{format}: one struct declares `{declared}`"
        );
        let drifted = source.replace(
            &declared,
            &format!(
                "BLOCK = {}, BYTES = {},",
                format.block_elements(),
                format.block_bytes() + 2
            ),
        );
        let compiled =
            nvrtc::compile_cuda_sources([(name.as_str(), source), (name.as_str(), drifted.as_str())], ARCH);
        assert!(
            compiled[0].ptx.is_ok(),
            "{format}: the registered source compiles"
        );
        let log = compiled[1]
            .ptx
            .as_ref()
            .expect_err("a drifted struct must not compile");
        let expected = format!("disagrees with quant/formats/{}.rs", format.name());
        assert!(
            log.contains(&expected),
            "{format}: the error names the files: {log}"
        );
    }
}

/// The first `count` lines of `log`, saying how many more there are (a
/// broken shared header repeats its errors in every source).
#[cfg(feature = "cuda")]
fn first_lines(log: &str, count: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    match lines.len().checked_sub(count) {
        Some(more) if more > 0 => format!("{}\n({more} more lines)", lines[..count].join("\n")),
        _ => log.to_string(),
    }
}

#[test]
fn every_cu_file_is_part_of_a_registered_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    cuda_files(&root.join("crates"), &mut files);
    files.sort();
    let registries = registries();
    let sources: Vec<&str> = registries
        .iter()
        .flat_map(|(_, registry)| registry.cuda_sources())
        .map(|(_, source)| source)
        .collect();
    let mut programs = 0;
    let mut orphans = Vec::new();
    for path in &files {
        let relative = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if NVCC_PROGRAMS.iter().any(|(program, _)| *program == relative) {
            programs += 1;
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        if !sources.iter().any(|source| holds(source, &text)) {
            orphans.push(relative);
        }
    }
    assert!(
        orphans.is_empty(),
        "CUDA files no registered kernel source includes, so no NVRTC check compiles them \
         (register them, or list an nvcc-built program in NVCC_PROGRAMS):\n{}",
        orphans.join("\n")
    );
    assert_eq!(
        programs,
        NVCC_PROGRAMS.len(),
        "a file of NVCC_PROGRAMS is gone: {NVCC_PROGRAMS:?}"
    );
    // The walk sees the files it is meant to: the prelude every source starts with.
    assert!(
        files.iter().any(|file| file.ends_with("prelude.cuh")),
        "no prelude.cuh found under {root:?}/crates"
    );
}

/// Whether `source` holds `file`'s text, a `{name}` in the file standing for
/// whatever the registration put there (`kernels.cu`'s `{format}`): the
/// pieces between such placeholders must appear in `source` in order.
fn holds(source: &str, file: &str) -> bool {
    let mut from = 0;
    for piece in pieces(file) {
        match source[from..].find(piece) {
            Some(at) => from += at + piece.len(),
            None => return false,
        }
    }
    true
}

/// `text` split at placeholders: `{` identifier `}`.
fn pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let (bytes, mut start, mut at) = (text.as_bytes(), 0, 0);
    while at < bytes.len() {
        if bytes[at] == b'{' {
            let name = bytes[at + 1..]
                .iter()
                .take_while(|byte| byte.is_ascii_alphanumeric() || **byte == b'_')
                .count();
            if name > 0 && bytes.get(at + 1 + name) == Some(&b'}') {
                pieces.push(&text[start..at]);
                at += name + 2;
                start = at;
                continue;
            }
        }
        at += 1;
    }
    pieces.push(&text[start..]);
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

/// The `.cu` and `.cuh` files under `folder`, build outputs and hidden
/// folders left out.
fn cuda_files(folder: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                cuda_files(&path, found);
            }
        } else if path.extension().is_some_and(|ext| ext == "cu" || ext == "cuh") {
            found.push(path);
        }
    }
}

#[test]
fn a_file_with_placeholders_is_found_in_its_instantiation() {
    let file = "struct {Format} { int x[2] = {0, 1}; };\nvoid f_{format}() {}\n";
    let source = "prelude\nstruct Q4_K { int x[2] = {0, 1}; };\nvoid f_q4_k() {}\n";
    assert!(holds(source, file));
    assert!(!holds(source, "void g_{format}() {}"));
    assert!(holds("first second", "first{x}second"));
    assert!(
        !holds("second first", "first{x}second"),
        "pieces must appear in order"
    );
}
