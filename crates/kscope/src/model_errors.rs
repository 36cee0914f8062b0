//! The model library's errors in the words of kscope's command line. The
//! library speaks of ranks and counts, since it cannot know which flag set
//! them (a program calling it has no flags); kscope does, so the one line it
//! prints names the flag the user typed (`--tp 3`, not "3 ranks").

use kernelscope_model::{MemoryRemedy, ModelError};

/// The flags that set the counts the library names in
/// [`ModelError::InvalidCount`], by the library's name for each.
const FLAG_OF_COUNT: [(&str, &str); 3] = [
    ("ranks", "--tp"),
    ("prefill chunk positions", "--prefill-chunk"),
    ("tokens to generate", "--max-tokens"),
];

/// One cause of an error as kscope prints it: a model error in the flags'
/// words, anything else as it says itself.
pub fn cause_message(cause: &(dyn std::error::Error + 'static)) -> String {
    match cause.downcast_ref::<ModelError>() {
        Some(error) => model_error_message(error),
        None => cause.to_string(),
    }
}

/// `error` with the counts it names given as the flags that set them.
pub fn model_error_message(error: &ModelError) -> String {
    match error {
        ModelError::TensorParallel {
            ranks,
            problem,
            working_splits,
            largest_split_tried,
        } => format!(
            "cannot split the model over {ranks} ranks (--tp {ranks}): {problem}; splits that work up to --tp {largest_split_tried}: --tp {}",
            working_splits
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ModelError::InvalidCount {
            field,
            value,
            minimum,
        } => match FLAG_OF_COUNT.iter().find(|(count, _)| count == field) {
            Some((_, flag)) => format!("{flag} must be at least {minimum}, got {value}"),
            None => error.to_string(),
        },
        ModelError::OutOfMemory {
            what,
            needed_mib,
            available_mib,
            device,
            remedy,
        } => {
            let advice = match remedy {
                MemoryRemedy::None => "",
                MemoryRemedy::FewerPositions => "; ask for fewer tokens (--max-tokens, -p, -n, -d)",
                MemoryRemedy::FewerPositionsOrNarrowerCache => {
                    "; ask for fewer tokens (--max-tokens, -p, -n, -d), or drop --kv-dtype f32"
                }
            };
            format!("{what} needs {needed_mib} MiB but {device} has {available_mib} MiB free{advice}")
        }
        ModelError::SamplingUnavailable { source } => {
            format!("sampling with --temperature above 0 is unavailable here ({source}); use --temperature 0")
        }
        ModelError::UnsupportedKvDtype { dtype } => {
            format!("--kv-dtype {dtype}: the KV cache holds f32, f16 or bf16")
        }
        other => other.to_string(),
    }
}

/// Where a run's logits came out non-finite and the model is a GGUF file,
/// names the first weight holding a NaN or an infinity (or says every
/// weight is finite, so an op's arithmetic overflowed); any other error
/// as it was.
pub fn locate_non_finite(error: anyhow::Error, gguf: Option<&std::path::Path>) -> anyhow::Error {
    let (Some(ModelError::NonFiniteLogits { .. }), Some(path)) = (error.downcast_ref::<ModelError>(), gguf)
    else {
        return error;
    };
    let found = kernelscope_model::gguf_model::GgufModel::open(path)
        .and_then(|model| model.first_non_finite_weight());
    match found {
        Ok(Some(weight)) => error.context(format!(
            "{}: tensor `{}` holds {} non-finite values, the first at element {} ({})",
            path.display(),
            weight.tensor,
            weight.count,
            weight.element,
            weight.value
        )),
        Ok(None) => error.context(format!(
            "{}: every weight is finite, so an op's arithmetic overflowed (`--device cpu --check-finite` names the first kernel whose output is not finite)",
            path.display()
        )),
        Err(_) => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn impossible_split() -> ModelError {
        ModelError::TensorParallel {
            ranks: 4,
            problem: "intermediate_size (9) leaves the last rank nothing in shares of 3".into(),
            working_splits: vec![1, 2, 3, 5],
            largest_split_tried: 8,
        }
    }

    #[test]
    fn a_split_names_the_tp_values_that_work() {
        assert_eq!(
            model_error_message(&impossible_split()),
            "cannot split the model over 4 ranks (--tp 4): intermediate_size (9) leaves the last rank nothing in shares of 3; splits that work up to --tp 8: --tp 1, 2, 3, 5"
        );
    }

    #[test]
    fn counts_are_named_by_their_flag_where_kscope_has_one() {
        let ranks = ModelError::InvalidCount {
            field: "ranks",
            value: 0,
            minimum: 1,
        };
        assert_eq!(model_error_message(&ranks), "--tp must be at least 1, got 0");
        let unknown = ModelError::InvalidCount {
            field: "experts",
            value: 0,
            minimum: 1,
        };
        assert_eq!(model_error_message(&unknown), unknown.to_string());
    }

    #[test]
    fn causes_are_mapped_through_anyhow_and_context() {
        let error = anyhow::Error::new(impossible_split()).context("building preset tiny");
        let causes: Vec<String> = error.chain().map(cause_message).collect();
        assert_eq!(causes[0], "building preset tiny");
        assert!(causes[1].contains("(--tp 4)"), "{}", causes[1]);
        let other = anyhow::anyhow!("--top-p must be in (0, 1], got 2");
        assert_eq!(
            other.chain().map(cause_message).collect::<Vec<_>>(),
            ["--top-p must be in (0, 1], got 2"]
        );
    }

    #[test]
    fn engine_errors_name_the_flags_that_change_them() {
        let chunk = ModelError::InvalidCount {
            field: "prefill chunk positions",
            value: 0,
            minimum: 1,
        };
        assert_eq!(
            model_error_message(&chunk),
            "--prefill-chunk must be at least 1, got 0"
        );
        let out_of_memory = |remedy| ModelError::OutOfMemory {
            what: "a KV cache of 9 positions".into(),
            needed_mib: 17,
            available_mib: 3,
            device: "cuda:0".into(),
            remedy,
        };
        let library = out_of_memory(MemoryRemedy::FewerPositionsOrNarrowerCache).to_string();
        assert!(!library.contains("--"), "the library names no flag: {library}");
        assert_eq!(
            model_error_message(&out_of_memory(MemoryRemedy::FewerPositionsOrNarrowerCache)),
            "a KV cache of 9 positions needs 17 MiB but cuda:0 has 3 MiB free; ask for fewer tokens (--max-tokens, -p, -n, -d), or drop --kv-dtype f32"
        );
        assert_eq!(
            model_error_message(&out_of_memory(MemoryRemedy::None)),
            "a KV cache of 9 positions needs 17 MiB but cuda:0 has 3 MiB free"
        );
        let kv = ModelError::UnsupportedKvDtype {
            dtype: kernelscope::DType::U32,
        };
        assert!(!kv.to_string().contains("--"));
        assert_eq!(
            model_error_message(&kv),
            "--kv-dtype u32: the KV cache holds f32, f16 or bf16"
        );
    }
}
