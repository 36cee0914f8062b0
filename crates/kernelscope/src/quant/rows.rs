//! A row of blocks at a time, lengths checked: dequantize, quantize and the
//! f32 dot product, the entry points ops and the GGUF loader use. A length
//! that does not fit the format is a [`QuantError`], never a panic, so a
//! truncated tensor in a hostile file is an error.

use super::error::QuantError;
use super::formats::QuantFormat;

impl QuantFormat {
    /// Dequantizes a row: `blocks` holds `out.len()` elements in this
    /// format. Each value is bit-identical to llama.cpp's and gguf-py's.
    ///
    /// # Errors
    ///
    /// [`QuantError`] when `out.len()` is not a whole number of blocks or
    /// `blocks.len()` is not `self.row_bytes(out.len())`; `out` is then
    /// left untouched.
    // Inlined, so that a caller compiled for wider vectors (the CPU's bf16
    // tiles) vectorises the format's loops that wide.
    #[inline(always)]
    pub fn dequantize_row(self, blocks: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        self.check_lengths(out.len(), blocks.len())?;
        self.dequantize_checked(blocks, out);
        Ok(())
    }

    /// Quantizes a row with llama.cpp's reference quantizer
    /// (`quantize_row_*_ref`, which `llama-quantize` uses when given no
    /// importance matrix, and always for Q8_0): the bytes are identical to llama.cpp's,
    /// and to gguf-py's where gguf-py quantizes (but see the note on
    /// signed zeros below). `out` takes `self.row_bytes(values.len())`
    /// bytes.
    ///
    /// Values are taken as they come: NaN or infinite inputs, or values so
    /// small that a scale's reciprocal overflows, give what llama.cpp's
    /// x86-64 build gives (C leaves some of these conversions undefined).
    ///
    /// gguf-py agrees byte for byte except for the sign of a zero scale or
    /// minimum: an all-zero Q4_0 or Q5_0 block stores d = −0.0 here and in C
    /// (0 / −8), and a Q4_1 or Q5_1 block whose minimum is zero stores the
    /// first zero met, −0.0 or +0.0, where gguf-py's choice differs; the
    /// values those blocks dequantize to are equal.
    ///
    /// # Errors
    ///
    /// [`QuantError`] when `values.len()` is not a whole number of blocks or
    /// `out.len()` is not `self.row_bytes(values.len())`; `out` is then left
    /// untouched.
    pub fn quantize_row(self, values: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
        self.check_lengths(values.len(), out.len())?;
        self.quantize_checked(values, out);
        Ok(())
    }

    /// The dot product of a quantized row (`blocks`, holding `x.len()`
    /// elements) with `x`, computed block by block without allocating.
    /// Equal to the dot product of [`dequantize_row`](Self::dequantize_row)'s
    /// output with `x` up to f32 rounding: the sum is kept in eight lanes,
    /// so its rounding differs from a sequential sum's.
    ///
    /// # Errors
    ///
    /// [`QuantError`] when `x.len()` is not a whole number of blocks or
    /// `blocks.len()` is not `self.row_bytes(x.len())`.
    pub fn dot_row(self, blocks: &[u8], x: &[f32]) -> Result<f32, QuantError> {
        self.check_lengths(x.len(), blocks.len())?;
        Ok(self.dot_checked(blocks, x))
    }

    /// Checks that `elements` values take exactly `bytes` bytes here.
    fn check_lengths(self, elements: usize, bytes: usize) -> Result<(), QuantError> {
        // `row_bytes` fails only on a partial block: a slice is too short
        // for the multiplication to overflow.
        let expected = self.row_bytes(elements).ok_or(QuantError::PartialBlock {
            format: self,
            elements,
        })?;
        if bytes != expected {
            return Err(QuantError::ByteLength {
                format: self,
                elements,
                expected,
                actual: bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_before_anything_is_written() {
        let format = QuantFormat::Q4_0;
        let mut out = [7.0f32; 64];
        assert_eq!(
            format.dequantize_row(&[0u8; 35], &mut out),
            Err(QuantError::ByteLength {
                format,
                elements: 64,
                expected: 36,
                actual: 35
            })
        );
        assert_eq!(out, [7.0f32; 64]);
        assert_eq!(
            format.dequantize_row(&[0u8; 18], &mut out[..31]),
            Err(QuantError::PartialBlock { format, elements: 31 })
        );
    }
}
