//! Errors as the command line prints them. kernelscope's errors name their
//! remedies in the library's terms (open another device, use weights of
//! another dtype, set `force`); here each becomes the flag a kscope user
//! passes, and a failure becomes the one line `kscope` prints.

use kernelscope::Remedy;
use kernelscope::error::Remedies;
use kernelscope_model::ModelError;

/// The flag (or build) that carries out `remedy` on this command line.
pub fn flag_for(remedy: Remedy) -> String {
    match remedy {
        Remedy::OtherDevice { device } => format!("use --device {device}"),
        Remedy::OtherDtype => "use a checkpoint of another dtype (gen-model --dtype)".into(),
        Remedy::RebuildWithCuda => "rebuild with `--features cuda`".into(),
        Remedy::Force => "pass --force to compare anyway".into(),
        Remedy::OneDevice => "run with --tp 1".into(),
    }
}

/// `remedies` in flags, as the library would join them: `a, or b`.
pub fn flags_for(remedies: &[Remedy]) -> String {
    remedies
        .iter()
        .map(|remedy| flag_for(*remedy))
        .collect::<Vec<_>>()
        .join(", or ")
}

/// The runtime's error among `error`'s causes, where there is one (the
/// model's errors carry it transparently).
fn runtime_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a kernelscope::Error> {
    error
        .downcast_ref::<kernelscope::Error>()
        .or_else(|| match error.downcast_ref::<ModelError>() {
            Some(ModelError::Runtime(inner)) => Some(inner),
            _ => None,
        })
}

/// `message` with the library's wording of the remedies of the runtime
/// error among `causes` replaced by this command line's flags.
fn with_flags<'a>(
    message: String,
    causes: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let Some(error) = causes.into_iter().find_map(runtime_error) else {
        return message;
    };
    let remedies = error.remedies();
    if remedies.is_empty() {
        return message;
    }
    let library = Remedies(remedies).to_string();
    let flags = flags_for(remedies);
    if message.contains(&library) {
        message.replacen(&library, &flags, 1)
    } else {
        format!("{message}; {flags}")
    }
}

/// The error as one line: the chain of causes joined, never a backtrace,
/// causes a message already quotes not repeated, newlines flattened, and
/// remedies and the model's counts named by flag.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain().map(crate::model_errors::cause_message) {
        if message.is_empty() {
            message = cause;
        } else if !message.contains(&cause) {
            message = format!("{message}: {cause}");
        }
    }
    with_flags(message, error.chain()).replace('\n', " ")
}

/// A runtime error on its own (not a failure of the command), with its
/// remedies named by flag.
pub fn describe(error: &kernelscope::Error) -> String {
    with_flags(
        error.to_string(),
        std::iter::once(error as &(dyn std::error::Error + 'static)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernelscope::error::CudaUnavailable;

    fn unavailable() -> kernelscope::Error {
        kernelscope::Error::BackendUnavailable {
            backend: "cuda",
            ordinal: Some(3),
            source: CudaUnavailable::NotBuilt,
            remedies: &[Remedy::RebuildWithCuda, Remedy::OtherDevice { device: "cpu" }],
        }
    }

    #[test]
    fn remedies_are_named_by_their_flags() {
        assert_eq!(
            describe(&unavailable()),
            "cuda backend unavailable: cuda:3: this build has no CUDA support; rebuild with `--features cuda`, or use --device cpu"
        );
        let missing = kernelscope::Error::KernelMissing {
            name: "matmul_u32".into(),
            backend: "cuda",
            workaround: "matmul has no u32 kernel on cuda".into(),
            remedies: &[Remedy::OtherDevice { device: "cpu" }, Remedy::OtherDtype],
        };
        assert!(
            describe(&missing)
                .ends_with("; use --device cpu, or use a checkpoint of another dtype (gen-model --dtype)"),
            "{}",
            describe(&missing)
        );
        let nccl = kernelscope::Error::NcclNotFound {
            tried: vec!["libnccl.so".into()],
        };
        assert!(
            describe(&nccl).ends_with("; run with --tp 1"),
            "{}",
            describe(&nccl)
        );
    }

    #[test]
    fn a_wrapped_runtime_error_keeps_its_flags() {
        let wrapped = anyhow::Error::new(ModelError::Runtime(unavailable())).context("--devices: cuda:3");
        let line = one_line(&wrapped);
        assert!(
            line.starts_with("--devices: cuda:3: cuda backend unavailable"),
            "{line}"
        );
        assert!(
            line.ends_with("rebuild with `--features cuda`, or use --device cpu"),
            "{line}"
        );
        assert!(!line.contains("open device"), "{line}");
        let plain = anyhow::anyhow!("--out x: already there\nsecond line");
        assert_eq!(one_line(&plain), "--out x: already there second line");
    }
}
