//! GGUF metadata values: the thirteen value types (`gguf_type` in gguf.h)
//! and the typed arrays, which hold one element type each and never another
//! array (llama.cpp reads no nested arrays, so neither does this).

use std::fmt;

/// A metadata value's type, by its id in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// u8 (id 0).
    U8,
    /// i8 (id 1).
    I8,
    /// u16 (id 2).
    U16,
    /// i16 (id 3).
    I16,
    /// u32 (id 4).
    U32,
    /// i32 (id 5).
    I32,
    /// f32 (id 6).
    F32,
    /// bool, one byte (id 7).
    Bool,
    /// UTF-8 string with a u64 length (id 8).
    String,
    /// Array: element type, u64 count, elements (id 9).
    Array,
    /// u64 (id 10).
    U64,
    /// i64 (id 11).
    I64,
    /// f64 (id 12).
    F64,
}

impl ValueType {
    /// The type of id `id`, if it is one.
    pub fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// The id the file stores.
    pub const fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    /// gguf.cpp's name for it (`u32`, `str`, `arr`).
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "str",
            ValueType::Array => "arr",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// The fewest bytes one value of this type takes in a file (a string's
    /// length prefix; an array's element type and count): what bounds a
    /// count before anything is allocated for it.
    pub(crate) const fn min_encoded_bytes(self) -> usize {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32.
    U32(u32),
    /// i32.
    I32(i32),
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f32.
    F32(f32),
    /// f64.
    F64(f64),
    /// bool.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// An array of one element type.
    Array(Array),
}

/// An array value: elements of one type, never arrays.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// u8 elements.
    U8(Vec<u8>),
    /// i8 elements.
    I8(Vec<i8>),
    /// u16 elements.
    U16(Vec<u16>),
    /// i16 elements.
    I16(Vec<i16>),
    /// u32 elements.
    U32(Vec<u32>),
    /// i32 elements.
    I32(Vec<i32>),
    /// u64 elements.
    U64(Vec<u64>),
    /// i64 elements.
    I64(Vec<i64>),
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// bool elements.
    Bool(Vec<bool>),
    /// String elements (a tokenizer's vocabulary).
    String(Vec<String>),
}

impl Value {
    /// The value's type ([`ValueType::Array`] for arrays).
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// The value of an integer type, widened (`None` for other types: a
    /// bool is not an integer here).
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(value) => value.into(),
            Value::I8(value) => value.into(),
            Value::U16(value) => value.into(),
            Value::I16(value) => value.into(),
            Value::U32(value) => value.into(),
            Value::I32(value) => value.into(),
            Value::U64(value) => value.into(),
            Value::I64(value) => value.into(),
            _ => return None,
        })
    }

    /// `u32`, `str`, `array of str`: the type as messages name it.
    pub fn describe_type(&self) -> String {
        match self {
            Value::Array(array) => format!("array of {}", array.element_type()),
            other => other.value_type().name().to_string(),
        }
    }
}

impl Array {
    /// The elements' type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F32(_) => ValueType::F32,
            Array::F64(_) => ValueType::F64,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(values) => values.len(),
            Array::I8(values) => values.len(),
            Array::U16(values) => values.len(),
            Array::I16(values) => values.len(),
            Array::U32(values) => values.len(),
            Array::I32(values) => values.len(),
            Array::U64(values) => values.len(),
            Array::I64(values) => values.len(),
            Array::F32(values) => values.len(),
            Array::F64(values) => values.len(),
            Array::Bool(values) => values.len(),
            Array::String(values) => values.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements of an integer array, widened (`None` for other types).
    pub fn integers(&self) -> Option<Vec<i128>> {
        fn widen<T: Copy + Into<i128>>(values: &[T]) -> Vec<i128> {
            values.iter().map(|&value| value.into()).collect()
        }
        Some(match self {
            Array::U8(values) => widen(values),
            Array::I8(values) => widen(values),
            Array::U16(values) => widen(values),
            Array::I16(values) => widen(values),
            Array::U32(values) => widen(values),
            Array::I32(values) => widen(values),
            Array::U64(values) => widen(values),
            Array::I64(values) => widen(values),
            _ => return None,
        })
    }
}

macro_rules! from_scalar {
    ($($rust:ty => $variant:ident),* $(,)?) => {$(
        impl From<$rust> for Value {
            fn from(value: $rust) -> Value {
                Value::$variant(value)
            }
        }
        impl From<Vec<$rust>> for Array {
            fn from(values: Vec<$rust>) -> Array {
                Array::$variant(values)
            }
        }
        impl From<Vec<$rust>> for Value {
            fn from(values: Vec<$rust>) -> Value {
                Value::Array(Array::$variant(values))
            }
        }
    )*};
}

from_scalar!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String,
);

impl From<&str> for Value {
    fn from(value: &str) -> Value {
        Value::String(value.to_string())
    }
}

impl From<&[&str]> for Value {
    fn from(values: &[&str]) -> Value {
        Value::Array(Array::String(
            values.iter().map(|value| value.to_string()).collect(),
        ))
    }
}

impl From<Array> for Value {
    fn from(array: Array) -> Value {
        Value::Array(array)
    }
}
