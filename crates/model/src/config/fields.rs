//! Typed reads of `config.json`'s fields, with errors that name the field
//! and quote its value briefly.

use std::path::Path;

use serde_json::{Map, Value};

use super::limits::MAX_DIMENSION;
use crate::error::{ModelError, Result};

/// Typed reads of one JSON object's fields, with errors that name the
/// field (as `prefix` + name, e.g. `rope_parameters.factor`).
pub(super) struct Fields<'a> {
    pub map: &'a Map<String, Value>,
    pub prefix: &'a str,
    pub path: &'a Path,
}

impl Fields<'_> {
    pub(super) fn invalid(&self, problem: String) -> ModelError {
        ModelError::ConfigInvalid {
            path: self.path.to_path_buf(),
            problem,
        }
    }

    pub(super) fn name(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }

    /// The field's value; `null` counts as absent, as in transformers.
    pub(super) fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|value| !value.is_null())
    }

    pub(super) fn whole(&self, field: &str) -> Result<Option<u64>> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => value.as_u64().map(Some).ok_or_else(|| {
                self.invalid(format!(
                    "`{}` must be a whole number >= 0, found {}",
                    self.name(field),
                    short(value)
                ))
            }),
        }
    }

    /// A dimension: a whole number in 1..=2^31-1.
    pub(super) fn dimension(&self, field: &str) -> Result<Option<usize>> {
        match self.whole(field)? {
            None => Ok(None),
            Some(value) if value == 0 || value > MAX_DIMENSION => Err(self.invalid(format!(
                "`{}` must be in 1..={MAX_DIMENSION}, found {value}",
                self.name(field)
            ))),
            Some(value) => Ok(Some(value as usize)),
        }
    }

    pub(super) fn required_dimension(&self, field: &str) -> Result<usize> {
        self.dimension(field)?
            .ok_or_else(|| self.invalid(format!("`{}` is missing", self.name(field))))
    }

    pub(super) fn number(&self, field: &str) -> Result<Option<f64>> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => match value.as_f64() {
                Some(number) if number.is_finite() => Ok(Some(number)),
                _ => Err(self.invalid(format!(
                    "`{}` must be a finite number, found {}",
                    self.name(field),
                    short(value)
                ))),
            },
        }
    }

    /// A number > 0 that stays finite and non-zero in f32.
    pub(super) fn positive(&self, field: &str) -> Result<Option<f32>> {
        match self.number(field)? {
            None => Ok(None),
            Some(number) => {
                let single = number as f32;
                if number > 0.0 && single.is_finite() && single > 0.0 {
                    Ok(Some(single))
                } else {
                    Err(self.invalid(format!(
                        "`{}` must be a positive number within f32 range, found {number}",
                        self.name(field)
                    )))
                }
            }
        }
    }

    pub(super) fn required_positive(&self, field: &str) -> Result<f32> {
        self.positive(field)?
            .ok_or_else(|| self.invalid(format!("`{}` is missing", self.name(field))))
    }

    pub(super) fn boolean(&self, field: &str) -> Result<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(value) => Err(self.invalid(format!(
                "`{}` must be true or false, found {}",
                self.name(field),
                short(value)
            ))),
        }
    }

    pub(super) fn string(&self, field: &str) -> Result<Option<&str>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(value) => Err(self.invalid(format!(
                "`{}` must be a string, found {}",
                self.name(field),
                short(value)
            ))),
        }
    }
}

/// A JSON value cut to a length that fits in a one-line error.
pub(super) fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}...", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}
