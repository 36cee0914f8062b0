//! A GGUF file's metadata: its keys in file order, and typed getters whose
//! errors name the file and the key, accepting the types llama.cpp's
//! converters actually write (an integer key may come as u32, i32 or u64
//! depending on the tool, a float as f32 or f64).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{ModelError, Result, shown};

use super::value::{Array, Value};

/// The key-value pairs of one GGUF file, in the order the file lists them.
#[derive(Clone, Debug)]
pub struct Metadata {
    path: PathBuf,
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    lossy: Vec<String>,
}

impl Metadata {
    /// An empty map for the file at `path` (named in the getters' errors).
    pub(crate) fn new(path: &Path) -> Metadata {
        Metadata {
            path: path.to_path_buf(),
            entries: Vec::new(),
            index: HashMap::new(),
            lossy: Vec::new(),
        }
    }

    /// Records that an element of a string array was not UTF-8 and is held
    /// with U+FFFD in place of its invalid bytes (`what`: which, where).
    pub(crate) fn note_lossy(&mut self, what: String) {
        self.lossy.push(what);
    }

    /// The string-array elements that were not UTF-8 (a vocabulary's byte
    /// tokens, say), each held with U+FFFD in place of its invalid bytes,
    /// as llama.cpp loads such a file: for its reader to say.
    pub fn lossy_strings(&self) -> &[String] {
        &self.lossy
    }

    /// Adds `key`; `false` (and nothing added) when it is already there.
    pub(crate) fn insert(&mut self, key: String, value: Value) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    /// The file the metadata was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&position| &self.entries[position].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Every key and value, in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(key, value)| (key.as_str(), value))
    }

    /// Every key, in file order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.entries.iter().map(|(key, _)| key.as_str())
    }

    fn key_error(&self, key: &str, problem: String) -> ModelError {
        ModelError::GgufKey {
            path: self.path.clone(),
            key: shown(key),
            problem,
        }
    }

    fn wrong_type(&self, key: &str, value: &Value, expected: &str) -> ModelError {
        self.key_error(key, format!("is {}, expected {expected}", value.describe_type()))
    }

    fn required<T>(&self, key: &str, value: Result<Option<T>>) -> Result<T> {
        value?.ok_or_else(|| self.key_error(key, "is missing".into()))
    }

    /// The integer at `key` converted to `T` (named `type_name`), whatever
    /// integer type the file used, or an error when it does not fit.
    fn integer<T: TryFrom<i128>>(&self, key: &str, type_name: &str) -> Result<Option<T>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let integer = value
            .as_integer()
            .ok_or_else(|| self.wrong_type(key, value, &format!("an integer (as {type_name})")))?;
        T::try_from(integer)
            .map(Some)
            .map_err(|_| self.key_error(key, format!("is {integer}, out of range for {type_name}")))
    }

    /// An f64 narrowed to f32, refused where a finite value would become
    /// infinite.
    fn narrow(&self, key: &str, value: f64) -> Result<f32> {
        let narrow = value as f32;
        if value.is_finite() && !narrow.is_finite() {
            return Err(self.key_error(key, format!("is {value}, out of range for f32")));
        }
        Ok(narrow)
    }

    /// `key` as a u32: any integer type whose value fits.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.required(key, self.get_u32_opt(key))
    }

    /// [`Metadata::get_u32`], `None` when the key is absent.
    pub fn get_u32_opt(&self, key: &str) -> Result<Option<u32>> {
        self.integer(key, "u32")
    }

    /// `key` as a u64: any integer type whose value fits.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.required(key, self.get_u64_opt(key))
    }

    /// [`Metadata::get_u64`], `None` when the key is absent.
    pub fn get_u64_opt(&self, key: &str) -> Result<Option<u64>> {
        self.integer(key, "u64")
    }

    /// `key` as an i32: any integer type whose value fits.
    pub fn get_i32(&self, key: &str) -> Result<i32> {
        self.required(key, self.get_i32_opt(key))
    }

    /// [`Metadata::get_i32`], `None` when the key is absent.
    pub fn get_i32_opt(&self, key: &str) -> Result<Option<i32>> {
        self.integer(key, "i32")
    }

    /// `key` as an i64: any integer type whose value fits.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.required(key, self.get_i64_opt(key))
    }

    /// [`Metadata::get_i64`], `None` when the key is absent.
    pub fn get_i64_opt(&self, key: &str) -> Result<Option<i64>> {
        self.integer(key, "i64")
    }

    /// `key` as an f32: an f32, or an f64 within f32's range.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.required(key, self.get_f32_opt(key))
    }

    /// [`Metadata::get_f32`], `None` when the key is absent.
    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(value)) => Ok(Some(*value)),
            Some(Value::F64(value)) => self.narrow(key, *value).map(Some),
            Some(other) => Err(self.wrong_type(key, other, "f32 or f64")),
        }
    }

    /// `key` as an f64: an f64 or an f32.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.required(key, self.get_f64_opt(key))
    }

    /// [`Metadata::get_f64`], `None` when the key is absent.
    pub fn get_f64_opt(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(value)) => Ok(Some(f64::from(*value))),
            Some(Value::F64(value)) => Ok(Some(*value)),
            Some(other) => Err(self.wrong_type(key, other, "f32 or f64")),
        }
    }

    /// `key` as a string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.required(key, self.get_str_opt(key))
    }

    /// [`Metadata::get_str`], `None` when the key is absent.
    pub fn get_str_opt(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(value)) => Ok(Some(value)),
            Some(other) => Err(self.wrong_type(key, other, "str")),
        }
    }

    /// `key` as a bool.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.required(key, self.get_bool_opt(key))
    }

    /// [`Metadata::get_bool`], `None` when the key is absent.
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(other) => Err(self.wrong_type(key, other, "bool")),
        }
    }

    /// `key` as an array of strings.
    pub fn get_string_array(&self, key: &str) -> Result<&[String]> {
        self.required(key, self.get_string_array_opt(key))
    }

    /// [`Metadata::get_string_array`], `None` when the key is absent.
    pub fn get_string_array_opt(&self, key: &str) -> Result<Option<&[String]>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(Array::String(values))) => Ok(Some(values)),
            Some(other) => Err(self.wrong_type(key, other, "array of str")),
        }
    }

    /// `key` as an array of f32: f32 elements, or f64 ones within f32's range.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.required(key, self.get_f32_array_opt(key))
    }

    /// [`Metadata::get_f32_array`], `None` when the key is absent.
    pub fn get_f32_array_opt(&self, key: &str) -> Result<Option<Vec<f32>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(Array::F32(values))) => Ok(Some(values.clone())),
            Some(Value::Array(Array::F64(values))) => values
                .iter()
                .map(|&value| self.narrow(key, value))
                .collect::<Result<Vec<f32>>>()
                .map(Some),
            Some(other) => Err(self.wrong_type(key, other, "array of f32 or f64")),
        }
    }

    /// `key` as an array of i32: elements of any integer type whose values fit.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        self.required(key, self.get_i32_array_opt(key))
    }

    /// [`Metadata::get_i32_array`], `None` when the key is absent.
    pub fn get_i32_array_opt(&self, key: &str) -> Result<Option<Vec<i32>>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        if let Value::Array(Array::I32(values)) = value {
            return Ok(Some(values.clone()));
        }
        let integers = match value {
            Value::Array(array) => array.integers(),
            _ => None,
        }
        .ok_or_else(|| self.wrong_type(key, value, "array of integers (as i32)"))?;
        integers
            .iter()
            .enumerate()
            .map(|(position, &integer)| {
                i32::try_from(integer).map_err(|_| {
                    self.key_error(
                        key,
                        format!("element {position} is {integer}, out of range for i32"),
                    )
                })
            })
            .collect::<Result<Vec<i32>>>()
            .map(Some)
    }
}
