//! Parsers for numeric flags with messages that say what is expected. clap
//! would read `-5` after a flag as another flag ("unexpected argument"); the
//! subcommands allow negative numbers, so the value reaches these parsers,
//! which name it and the range.

/// A count (`--max-tokens`, `-p`, `-r`, ...): a whole number >= 0.
pub fn count(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("`{text}` is not a count: expected a whole number >= 0"))
}

/// A positive count (`--prefill-chunk`): a whole number >= 1.
pub fn positive_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(value) if value >= 1 => Ok(value),
        _ => Err(format!(
            "`{text}` is not a positive count: expected a whole number >= 1"
        )),
    }
}

/// A seed: a whole number in 0..=2^64-1.
pub fn seed(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("`{text}` is not a seed: expected a whole number in 0..=18446744073709551615"))
}

/// A token id: a whole number in 0..2^32.
pub fn token_id(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("`{text}` is not a token id: expected a whole number in 0..=4294967295"))
}

/// A finite number (range checks are the caller's, which knows the flag).
pub fn finite(text: &str) -> Result<f32, String> {
    match text.trim().parse::<f32>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(format!("`{text}` is not a finite number")),
    }
}

/// A selection of tokens to profile (`--profile-tokens`): `all`, `A..B`,
/// `A..` or `..B`, optionally with `:STEP`.
pub fn token_selection(text: &str) -> Result<kernelscope::profile::TokenSelection, String> {
    text.parse()
        .map_err(|error: kernelscope::Error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_and_fractional_counts_are_named() {
        assert_eq!(count("12"), Ok(12));
        for bad in ["-5", "1.5", "", "ten", "99999999999999999999999"] {
            let error = count(bad).unwrap_err();
            assert!(
                error.contains(&format!("`{bad}`")) && error.contains(">= 0"),
                "{error}"
            );
        }
        assert!(seed("-1").unwrap_err().contains("`-1` is not a seed"));
        assert_eq!(positive_count("3"), Ok(3));
        for bad in ["0", "-1", "x"] {
            assert!(positive_count(bad).unwrap_err().contains(">= 1"), "{bad}");
        }
        assert!(token_id("4294967296").unwrap_err().contains("token id"));
        assert_eq!(finite("-0.5"), Ok(-0.5));
        assert!(finite("inf").is_err() && finite("NaN").is_err());
    }
}
