//! NumPy `.npy` files of 2-D little-endian f32 arrays: the format of
//! `--logits-out` and of the reference logits, readable by `numpy.load`.
//! The format is a magic string, a version, a small Python-dict header and
//! the raw data (<https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>);
//! writing it takes a few lines, so no crate is pulled in for it.

use std::path::Path;

use crate::error::{ModelError, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// Writes `rows` (all of one length) as a `<f4` C-order array `[rows, columns]`.
pub fn write_f32_2d(path: &Path, rows: &[Vec<f32>]) -> Result<()> {
    std::fs::write(path, encode_f32_2d(rows)?).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The bytes of the `.npy` file [`write_f32_2d`] writes.
pub fn encode_f32_2d(rows: &[Vec<f32>]) -> Result<Vec<u8>> {
    let columns = rows.first().map_or(0, Vec::len);
    if rows.iter().any(|row| row.len() != columns) {
        return Err(ModelError::InvalidInput(
            "npy rows must all have the same length".into(),
        ));
    }
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {columns}), }}",
        rows.len()
    );
    // Pad so the data starts on a 64-byte boundary, ending with a newline.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut bytes = Vec::with_capacity(unpadded + 64 + rows.len() * columns * 4);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&[1, 0]);
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for row in rows {
        for value in row {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    Ok(bytes)
}

/// Reads a 2-D `<f4` C-order `.npy` file as rows.
pub fn read_f32_2d(path: &Path) -> Result<Vec<Vec<f32>>> {
    let invalid = |problem: &str| ModelError::InvalidInput(format!("{}: {problem}", path.display()));
    let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(invalid("not a .npy file"));
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize,
            12,
        ),
        _ => return Err(invalid("unsupported .npy version")),
    };
    let header = std::str::from_utf8(
        bytes
            .get(header_start..header_start + header_len)
            .ok_or_else(|| invalid("truncated header"))?,
    )
    .map_err(|_| invalid("header is not text"))?;
    if !header.contains("'descr': '<f4'") || header.contains("'fortran_order': True") {
        return Err(invalid("expected little-endian f32 ('<f4') in C order"));
    }
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .ok_or_else(|| invalid("no shape in header"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| part.parse().map_err(|_| invalid("bad shape")))
        .collect::<Result<_>>()?;
    let [rows, columns] = shape[..] else {
        return Err(invalid("expected a 2-D array"));
    };
    let data = &bytes[header_start + header_len..];
    if data.len() != rows * columns * 4 {
        return Err(invalid("data length does not match the shape"));
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok(values
        .chunks(columns.max(1))
        .take(rows)
        .map(<[f32]>::to_vec)
        .collect())
}
