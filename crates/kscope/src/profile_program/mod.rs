//! `kscope profile [flags] -- CMD ARGS...`: profiles any CUDA program. CMD
//! runs with kscope's injection library (`libkscope_inject.so`, crate
//! kernelscope-inject) named in `CUDA_INJECTION64_PATH` and
//! `NVTX_INJECTION64_PATH`, so every process of it that starts CUDA writes
//! its kernels, copies, API calls and NVTX ranges to a record file; once it
//! has ended, the files become one profile (each process with device work a
//! rank), reported as `kscope run --profile` reports, and saved as the same
//! JSON, HTML and trace. With `--graphs events` the library is preloaded
//! too (`LD_PRELOAD`) and CUPTI never attached: its `cudaGraphLaunch` times
//! each graph launch by two CUDA events, and nothing else is recorded.
//!
//! kscope makes itself the subreaper of CMD's descendants (a launcher's
//! workers whose parent died are reaped here, after their records are
//! written), forwards SIGTERM, SIGHUP and SIGQUIT to CMD (a terminal's
//! Ctrl-C reaches CMD by itself), and ends with CMD's exit status (128 +
//! the signal for a child killed by one), whatever the profile's fate.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use kernelscope::profile::{ProcessTrace, Profile, profile_of_program};
use kernelscope_report::render_report_with;
use kernelscope_trace::injection_settings::CUDA_INJECTION_VARIABLE;

use crate::output::OutputFile;
use crate::report::{ReportFlags, write_trace_and_page};

mod args;
mod child;

use args::Graphs;
pub use args::ProfileArgs;
use child::run_child;

/// The library's file name, looked for beside the kscope executable.
const INJECTION_LIBRARY: &str = "libkscope_inject.so";

pub fn run(args: ProfileArgs) -> Result<ExitCode> {
    let check = |path: &Option<PathBuf>, flag| {
        path.as_deref()
            .map(|path| OutputFile::check(path, flag, args.force, None))
            .transpose()
    };
    let json = check(&args.profile_json, "--profile-json")?;
    let html = check(&args.html, "--html")?;
    let trace = check(&args.trace, "--trace")?;
    let outputs = Outputs { json, html, trace };
    if !args.from_records.is_empty() {
        let mut profile = profile_from_records(&args.from_records, args.step.as_deref())?;
        describe_model(&mut profile, args.model.as_deref())?;
        show(&profile, &outputs, &args.shape)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(existing) = std::env::var_os(CUDA_INJECTION_VARIABLE) {
        bail!(
            "{CUDA_INJECTION_VARIABLE} is already set (to {}): another profiler (Nsight?) injects into this program; unset it to run kscope profile. The program was not started",
            existing.to_string_lossy()
        );
    }
    let events = args.graphs == Graphs::Events;
    if events && args.dram_bytes_interval.is_some_and(|interval| interval > 0) {
        bail!(
            "--dram-bytes-interval samples through CUPTI, which --graphs events leaves out; use --graphs whole. The program was not started"
        );
    }
    if events && args.steps.is_some() {
        bail!(
            "--steps attaches CUPTI for the window, which --graphs events leaves out; use --graphs whole. The program was not started"
        );
    }
    require_library(&["libcuda.so.1", "libcuda.so"], "the CUDA driver (libcuda.so.1)")?;
    if !events {
        require_library(
            &["libcupti.so", "libcupti.so.13", "libcupti.so.12"],
            "CUPTI (libcupti.so, from the CUDA toolkit or the nvidia-cuda-cupti wheel; add its folder to LD_LIBRARY_PATH)",
        )?;
    }
    let library = injection_library(args.injection.as_deref())?;
    let records = RecordFolder::new(args.keep_records.as_deref())?;

    let ended = run_child(&args, &library, records.path())?;
    let code = ended.exit_code();
    eprintln!("kscope profile: {} {}", args.command.join(" "), ended.describe());

    let processes = records.read()?;
    let profile = match profile_of_program(
        &processes,
        args.step.as_deref(),
        args.command.clone(),
        ended.describe(),
        TOOL,
    ) {
        Ok(profile) => profile,
        Err(error) if code != 0 => {
            eprintln!("error: {error}");
            return Ok(ExitCode::from(code));
        }
        Err(error) if events => {
            return Err(anyhow::Error::from(error).context(
                "--graphs events saw no graph launch: it sees only cudaGraphLaunch through a dynamically linked CUDA runtime (not nvcc's default static one, nor the driver API's cuGraphLaunch); try --graphs whole",
            ));
        }
        Err(error) => {
            let error = anyhow::Error::from(error);
            return Err(match (&args.steps, &args.step) {
                (Some(window), Some(step)) => error.context(format!(
                    "--steps {}..{}: did the program open {} ranges named \"{step}\"?",
                    window.start, window.end, window.end
                )),
                _ => error,
            });
        }
    };
    let mut profile = profile;
    if let (Some(window), Some(program)) = (&args.steps, profile.conditions.program.as_mut()) {
        program.steps = format!(
            "{}, only steps {}..{} of the program (--steps; the tokens here count from the first)",
            program.steps, window.start, window.end
        );
    }
    measure_ceilings(&mut profile);
    describe_model(&mut profile, args.model.as_deref())?;
    show(&profile, &outputs, &args.shape)?;
    if let Some(kept) = &args.keep_records {
        println!("record files kept in {}", kept.display());
    }
    Ok(ExitCode::from(code))
}

/// Puts the ceilings of the program's (rank 0's) GPU into `profile`,
/// measured now that the program has ended, as `kscope run` measures its
/// own; where they cannot be (kscope built without CUDA), says so.
fn measure_ceilings(profile: &mut Profile) {
    let device = &profile.conditions.device;
    let Some(ordinal) = device
        .strip_prefix("cuda:")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|number| number.parse::<u32>().ok())
    else {
        return;
    };
    if profile.conditions.driver.is_none()
        && let Ok((device, _)) = kernelscope::Device::open(&format!("cuda:{ordinal}"), Default::default())
    {
        profile.conditions.driver = device.conditions("eager", None).driver;
    }
    match crate::ceilings::measure(&format!("cuda:{ordinal}"), None, None) {
        Ok(measured) => profile.conditions.ceilings = measured.ceilings,
        Err(error) => profile.warnings.push(format!(
            "no roofline ceilings: measuring cuda:{ordinal} after the program failed ({})",
            crate::errors::one_line(&error)
        )),
    }
}

/// Gives the profile the model's bytes and flops per role (`--model`, or
/// the one `.gguf` file the command names), its name, format and shape.
pub fn describe_model(profile: &mut Profile, model: Option<&Path>) -> Result<()> {
    let named = profile.conditions.program.as_ref().and_then(|program| {
        let files: Vec<&String> = program
            .command
            .iter()
            .filter(|argument| argument.ends_with(".gguf") && Path::new(argument).is_file())
            .collect();
        (files.len() == 1).then(|| PathBuf::from(files[0]))
    });
    let (path, guessed) = match (model, named) {
        (Some(path), _) => (path.to_path_buf(), false),
        (None, Some(path)) => (path, true),
        (None, None) => return Ok(()),
    };
    let (costs, config, format) = kernelscope_model::model_costs(&path)
        .with_context(|| format!("--model {}: reading its tensors", path.display()))?;
    let given = kernelscope::profile::apply_model_costs(profile, &costs);
    let conditions = &mut profile.conditions;
    conditions.model = Some(path.display().to_string());
    conditions.weight_format = Some(format);
    conditions.model_shape = Some(crate::model_shape::model_shape(&config));
    let source = format!(
        "{}{}",
        path.display(),
        if guessed {
            ", the .gguf file the command names"
        } else {
            ""
        }
    );
    conditions.bytes_measured = Some(match conditions.bytes_measured.take() {
        None => format!(
            "bytes and flops of the model's tensors ({source}), each role's shared among its kernels by time"
        ),
        Some(measured) => format!(
            "projections and the embedding: the model's tensors ({source}; the DRAM traffic measured for the same kernels is {:.1} % of them, kept as each kernel's measured_bytes); the other kernels: {measured}",
            100.0 * given.measured_bytes as f64 / given.bytes.max(1) as f64,
        ),
    });
    let layers = costs.layers();
    let found = profile.conditions.anatomy.clone().unwrap_or_default();
    if !found.starts_with(&format!("{layers} layers")) {
        profile.warnings.push(format!(
            "the model has {layers} layers, the profile's anatomy says: {found}"
        ));
    }
    if given.dispatches == 0 {
        profile.warnings.push(format!(
            "--model {}: no kernel of the profile was given bytes (no projection role found)",
            path.display()
        ));
    }
    Ok(())
}

/// The tool named in profiles.
const TOOL: &str = concat!("kscope ", env!("CARGO_PKG_VERSION"));

/// The files asked for.
struct Outputs {
    json: Option<OutputFile>,
    html: Option<OutputFile>,
    trace: Option<OutputFile>,
}

/// Prints the report (its warnings last), and writes the files asked for.
fn show(profile: &Profile, outputs: &Outputs, shape: &ReportFlags) -> Result<()> {
    print!("{}", render_report_with(profile, shape.options()));
    if let Some(file) = &outputs.json {
        file.write_with(|writer| profile.write_json(writer))?;
        println!("profile written to {}", file.path().display());
    }
    write_trace_and_page(profile, outputs.trace.as_ref(), outputs.html.as_ref(), shape)
}

/// Fails, before the program starts, when none of `names` loads.
fn require_library(names: &[&str], what: &str) -> Result<()> {
    for name in names {
        let name = CString::new(*name).expect("no NUL in a library name");
        // SAFETY: dlopen with a NUL-terminated name; the handle, when one
        // comes back, is closed at once (the library only had to be found).
        unsafe {
            let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
            if !handle.is_null() {
                libc::dlclose(handle);
                return Ok(());
            }
        }
    }
    bail!("kscope profile needs {what}, which this machine lacks: the program was not started")
}

/// The injection library to use, as an absolute path.
fn injection_library(given: Option<&Path>) -> Result<PathBuf> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .context("finding the kscope executable")?
            .with_file_name(INJECTION_LIBRARY),
    };
    if !path.is_file() {
        bail!(
            "the injection library {} is not there; build it with `cargo build --release -p kernelscope-inject` (or name one with --injection): the program was not started",
            path.display()
        );
    }
    Ok(std::path::absolute(&path)?)
}

/// Where the processes write their records: a fresh temporary folder, or
/// the user's `--keep-records` folder.
struct RecordFolder {
    path: PathBuf,
    keep: bool,
}

impl RecordFolder {
    fn new(keep: Option<&Path>) -> Result<RecordFolder> {
        if let Some(path) = keep {
            if path.exists() && std::fs::read_dir(path)?.next().is_some() {
                bail!("--keep-records {}: the folder is not empty", path.display());
            }
            std::fs::create_dir_all(path).with_context(|| format!("--keep-records {}", path.display()))?;
            return Ok(RecordFolder {
                path: std::path::absolute(path)?,
                keep: true,
            });
        }
        // The time too: a folder a killed kscope of the same pid left behind
        // must not stop this one.
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let path = std::env::temp_dir().join(format!("kscope-profile-{}-{since_epoch}", std::process::id()));
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(RecordFolder { path, keep: false })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Every process's file, read, in name order.
    fn read(&self) -> Result<Vec<ProcessTrace>> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&self.path)
            .with_context(|| format!("reading {}", self.path.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|extension| extension == "kst"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|path| {
                // Reading a FIFO would wait for a writer.
                let metadata =
                    std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
                if !metadata.is_file() {
                    bail!(
                        "{}: not a regular file ({})",
                        path.display(),
                        kernelscope::profile::file_kind(&metadata.file_type())
                    );
                }
                let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                Ok(ProcessTrace {
                    trace: kernelscope_trace::read(&bytes),
                    path,
                })
            })
            .collect()
    }
}

impl Drop for RecordFolder {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The profile of the processes whose record files `folders` hold (the
/// folders of one run's hosts, or of one run), each folder checked: a
/// folder, holding record files, each of them whole from its first frame.
fn profile_from_records(
    folders: &[std::path::PathBuf],
    step: Option<&str>,
) -> Result<kernelscope::profile::Profile> {
    let mut processes = Vec::new();
    for folder in folders {
        if !folder.is_dir() {
            bail!("--from-records {}: not a folder", folder.display());
        }
        let records = RecordFolder {
            path: folder.clone(),
            keep: true,
        };
        let folder_processes = records.read()?;
        // Files a user hands over must be record files; a live run's
        // process that died before its first frame is only said.
        for process in &folder_processes {
            if let (Some(_), kernelscope_trace::Ending::Garbled { at, problem }) =
                (&process.trace.header, &process.trace.ending)
            {
                bail!(
                    "{}: a record file garbled at byte {at}: {problem}",
                    process.path.display()
                );
            }
            if process.trace.header.is_none() {
                let problem = match &process.trace.ending {
                    kernelscope_trace::Ending::Garbled { at, problem } => format!("at byte {at}, {problem}"),
                    kernelscope_trace::Ending::Cut { at } => {
                        format!("it ends at byte {at}, before a whole first frame")
                    }
                    kernelscope_trace::Ending::Ended(_) => "its first frame is not a header".into(),
                };
                bail!(
                    "{}: not a kscope record file (its first frame should be the process's header: {problem})",
                    process.path.display()
                );
            }
        }
        if folder_processes.is_empty() {
            bail!(
                "--from-records {}: no record files (*.kst) there",
                folder.display()
            );
        }
        processes.extend(folder_processes);
    }
    let command = processes
        .iter()
        .find_map(|process| process.trace.header.as_ref())
        .map(|header| header.command.clone())
        .unwrap_or_default();
    let read_from: Vec<String> = folders
        .iter()
        .map(|folder| folder.display().to_string())
        .collect();
    let ended = format!("recorded earlier, read from {}", read_from.join(", "));
    Ok(profile_of_program(&processes, step, command, ended, TOOL)?)
}
