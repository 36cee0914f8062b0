//! The bytes of a GGUF header as the format lays them out: magic,
//! version and counts, each metadata entry (typed values, typed arrays),
//! each tensor info, then the padding to the data section.

use super::constants::{MAGIC, VERSION};
use super::output::{PlannedTensor, Sink};
use super::value::{Array, Value, ValueType};

/// Magic, version, counts, metadata, tensor infos and the padding before
/// the data.
pub(super) fn write_header_to(
    sink: &mut Sink,
    metadata: &[(String, Value)],
    tensors: &[PlannedTensor],
    offsets: &[u64],
    alignment: u64,
) -> std::io::Result<()> {
    sink.put(&MAGIC)?;
    sink.put(&VERSION.to_le_bytes())?;
    sink.put(&(tensors.len() as u64).to_le_bytes())?;
    sink.put(&(metadata.len() as u64).to_le_bytes())?;
    for (key, value) in metadata {
        put_string(sink, key)?;
        put_value(sink, value)?;
    }
    for (tensor, offset) in tensors.iter().zip(offsets) {
        put_string(sink, &tensor.name)?;
        sink.put(&(tensor.dims.len() as u32).to_le_bytes())?;
        for dim in &tensor.dims {
            sink.put(&dim.to_le_bytes())?;
        }
        sink.put(&tensor.tensor_type.ggml_type().to_le_bytes())?;
        sink.put(&offset.to_le_bytes())?;
    }
    sink.pad(alignment)
}

fn put_string(sink: &mut Sink, text: &str) -> std::io::Result<()> {
    sink.put(&(text.len() as u64).to_le_bytes())?;
    sink.put(text.as_bytes())
}

fn put_value(sink: &mut Sink, value: &Value) -> std::io::Result<()> {
    sink.put(&value.value_type().id().to_le_bytes())?;
    match value {
        Value::U8(value) => sink.put(&value.to_le_bytes()),
        Value::I8(value) => sink.put(&value.to_le_bytes()),
        Value::U16(value) => sink.put(&value.to_le_bytes()),
        Value::I16(value) => sink.put(&value.to_le_bytes()),
        Value::U32(value) => sink.put(&value.to_le_bytes()),
        Value::I32(value) => sink.put(&value.to_le_bytes()),
        Value::U64(value) => sink.put(&value.to_le_bytes()),
        Value::I64(value) => sink.put(&value.to_le_bytes()),
        Value::F32(value) => sink.put(&value.to_le_bytes()),
        Value::F64(value) => sink.put(&value.to_le_bytes()),
        Value::Bool(value) => sink.put(&[u8::from(*value)]),
        Value::String(value) => put_string(sink, value),
        Value::Array(array) => put_array(sink, array),
    }
}

fn put_array(sink: &mut Sink, array: &Array) -> std::io::Result<()> {
    fn each<T>(
        sink: &mut Sink,
        values: &[T],
        put: impl Fn(&mut Sink, &T) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        values.iter().try_for_each(|value| put(sink, value))
    }
    let element_type: ValueType = array.element_type();
    sink.put(&element_type.id().to_le_bytes())?;
    sink.put(&(array.len() as u64).to_le_bytes())?;
    match array {
        Array::U8(values) => sink.put(values),
        Array::I8(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::U16(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::I16(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::U32(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::I32(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::U64(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::I64(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::F32(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::F64(values) => each(sink, values, |sink, value| sink.put(&value.to_le_bytes())),
        Array::Bool(values) => each(sink, values, |sink, value| sink.put(&[u8::from(*value)])),
        Array::String(values) => each(sink, values, |sink, value| put_string(sink, value)),
    }
}
