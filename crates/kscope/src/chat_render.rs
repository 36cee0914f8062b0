//! Chat templates rendered in a child process with a memory limit. A
//! template comes from the model's files, and Jinja can grow a string
//! without writing it (`{% set ns.s = ns.s ~ ns.s %}` in a loop doubles it
//! thirty times in a few hundred instructions): the render's fuel and
//! output bound cannot see that, and a failed allocation aborts a Rust
//! process. So `kscope` renders in a copy of itself whose address space is
//! limited, and reads a failed allocation there as a template error naming
//! the file, never an abort of its own.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kernelscope_model::{ChatMessage, ChatTemplate, GenerationPrompt};
use serde_json::{Value, json};

/// The first argument that makes `kscope` the renderer rather than the CLI.
pub(crate) const CHILD_ARGUMENT: &str = "__render-chat-template";
/// Memory a render may take beyond what the renderer holds when it starts,
/// before counting the messages; real templates need a few MiB.
const BASE_MEMORY_BYTES: u64 = 512 << 20;
/// Extra memory per byte of the messages, which the template copies a few
/// times (escaped, joined, trimmed).
const MEMORY_PER_MESSAGE_BYTE: u64 = 16;
/// Bytes of the error a failed render prints, kept for the message.
const MAX_ERROR_BYTES: u64 = 64 << 10;
/// A render runs a bounded number of instructions (its fuel); this bounds
/// the few that take long each (a join of a large list).
const TIME_LIMIT: Duration = Duration::from_secs(60);

/// Where the template comes from, as the renderer rebuilds it.
pub(crate) enum TemplateOrigin<'a> {
    /// `tokenizer.chat_template` of a GGUF file, with its BOS and EOS text.
    Gguf {
        source: &'a str,
        path: &'a Path,
        bos: Option<&'a str>,
        eos: Option<&'a str>,
    },
    /// A model directory's `chat_template.jinja` or `tokenizer_config.json`.
    Directory(&'a Path),
}

impl TemplateOrigin<'_> {
    fn to_json(&self) -> Value {
        match self {
            TemplateOrigin::Gguf {
                source,
                path,
                bos,
                eos,
            } => {
                json!({"gguf": {"source": source, "path": path, "bos": bos, "eos": eos}})
            }
            TemplateOrigin::Directory(directory) => json!({"directory": directory}),
        }
    }

    /// The file named in errors.
    fn file(&self) -> PathBuf {
        match self {
            TemplateOrigin::Gguf { path, .. } => path.to_path_buf(),
            TemplateOrigin::Directory(directory) => {
                let jinja = directory.join("chat_template.jinja");
                if jinja.exists() {
                    jinja
                } else {
                    directory.join("tokenizer_config.json")
                }
            }
        }
    }
}

/// `messages` rendered with the template of `origin` (ending with the
/// assistant's turn header), in a child process whose memory is limited.
/// Every error the template causes names its file.
pub(crate) fn render(origin: &TemplateOrigin<'_>, messages: &[ChatMessage]) -> Result<String> {
    let message_bytes: u64 = messages
        .iter()
        .map(|message| (message.role.len() + message.content.len()) as u64)
        .sum();
    let memory_limit =
        BASE_MEMORY_BYTES.saturating_add(message_bytes.saturating_mul(MEMORY_PER_MESSAGE_BYTE));
    let request = json!({
        "template": origin.to_json(),
        "messages": messages
            .iter()
            .map(|message| json!({"role": message.role, "content": message.content}))
            .collect::<Vec<_>>(),
        "memory_limit_bytes": memory_limit,
    })
    .to_string();
    let executable =
        std::env::current_exe().context("cannot find kscope's own executable to render the chat template")?;
    let mut child = Command::new(&executable)
        .arg(CHILD_ARGUMENT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "cannot start {} to render the chat template",
                executable.display()
            )
        })?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let writer = std::thread::spawn(move || stdin.write_all(request.as_bytes()));
    let mut stdout = child.stdout.take().expect("stdout was piped");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).map(|_| bytes)
    });
    let stderr = child.stderr.take().expect("stderr was piped");
    let error_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.take(MAX_ERROR_BYTES).read_to_end(&mut bytes);
        bytes
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the chat template of {} ran longer than {} s while rendering (a runaway template?); pass --prompt instead",
                origin.file().display(),
                TIME_LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // The renderer may exit before reading all of a request it refused.
    let _ = writer.join();
    let output = reader
        .join()
        .map_err(|_| anyhow!("the chat template's reader panicked"))??;
    let error_text = String::from_utf8_lossy(&error_reader.join().unwrap_or_default())
        .trim()
        .to_string();
    if status.success() {
        return String::from_utf8(output).map_err(|_| anyhow!("the rendered prompt is not UTF-8"));
    }
    if ran_out_of_memory(&status, &error_text) {
        bail!(
            "the chat template of {} needed more than {} MiB while rendering (a runaway template?); pass --prompt instead",
            origin.file().display(),
            memory_limit >> 20
        );
    }
    if error_text.is_empty() {
        bail!(
            "rendering the chat template of {} failed ({status})",
            origin.file().display()
        );
    }
    // The renderer's own one-line error, which names the file already.
    Err(anyhow!(error_text.trim_start_matches("error: ").to_string()))
}

/// Whether the renderer stopped on a failed allocation: Rust prints
/// "memory allocation of N bytes failed" and aborts.
fn ran_out_of_memory(status: &std::process::ExitStatus, error_text: &str) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(libc::SIGABRT) || status.signal() == Some(libc::SIGKILL) {
            return true;
        }
    }
    error_text.contains("memory allocation of")
}

/// The renderer: reads one request on stdin, limits its own memory, renders,
/// and writes the prompt on stdout (or one error line on stderr, exit 2).
pub(crate) fn serve_child() -> ExitCode {
    match render_request() {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            if stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {}", crate::errors::one_line(&error));
            ExitCode::from(2)
        }
    }
}

fn render_request() -> Result<String> {
    let mut request = String::new();
    std::io::stdin().read_to_string(&mut request)?;
    let request: Value = serde_json::from_str(&request).context("the render request is not JSON")?;
    let memory_limit = request["memory_limit_bytes"]
        .as_u64()
        .context("the render request has no memory_limit_bytes")?;
    limit_memory(memory_limit)?;
    let text = |value: &Value| value.as_str().map(str::to_string);
    let template = if let Some(gguf) = request["template"].get("gguf") {
        let source = text(&gguf["source"]).context("the render request has no template source")?;
        let path = PathBuf::from(text(&gguf["path"]).context("the render request has no template path")?);
        ChatTemplate::from_source(
            &source,
            &path,
            text(&gguf["bos"]).as_deref(),
            text(&gguf["eos"]).as_deref(),
        )?
    } else {
        let directory = PathBuf::from(
            text(&request["template"]["directory"]).context("the render request names no template")?,
        );
        ChatTemplate::from_directory(&directory)?
            .with_context(|| format!("{} has no chat template", directory.display()))?
    };
    let messages = request["messages"]
        .as_array()
        .context("the render request has no messages")?
        .iter()
        .map(
            |message| match (text(&message["role"]), text(&message["content"])) {
                (Some(role), Some(content)) => Ok(ChatMessage::new(role, content)),
                _ => bail!("a message of the render request has no role or content"),
            },
        )
        .collect::<Result<Vec<_>>>()?;
    Ok(template.render(&messages, GenerationPrompt::Add)?)
}

/// Limits this process's address space to what it maps now plus `bytes`,
/// so that a runaway render fails an allocation rather than filling memory.
#[cfg(target_os = "linux")]
fn limit_memory(bytes: u64) -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").context("cannot read /proc/self/status")?;
    let mapped_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmSize:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("/proc/self/status has no VmSize")?;
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `current` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut current) } != 0 {
        bail!("getrlimit failed: {}", std::io::Error::last_os_error());
    }
    let wanted = (mapped_kib << 10).saturating_add(bytes);
    // A lower limit the user set already (ulimit -v) stays.
    let limit = libc::rlimit {
        rlim_cur: wanted.min(current.rlim_cur),
        rlim_max: current.rlim_max,
    };
    // SAFETY: `limit` is a valid rlimit whose soft limit is at most its hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } != 0 {
        bail!("setrlimit failed: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Elsewhere the render's fuel and output bound are the only limits.
#[cfg(not(target_os = "linux"))]
fn limit_memory(_bytes: u64) -> Result<()> {
    Ok(())
}
