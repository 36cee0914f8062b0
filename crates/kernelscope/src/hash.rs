//! FNV-1a (64 bits), the one stable hash the project uses wherever a value
//! must not change between versions or builds: synthetic weights are seeded
//! by their tensor's name, compiled kernels are cached by their source, and
//! `gen-model` prints a digest of the file it wrote. (The standard library's
//! hasher is randomised per process and may change between releases.)

/// FNV-1a's starting state, exposed so a long input can be hashed in pieces
/// with [`Fnv1a64::update`].
const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// An FNV-1a hash being computed over input given in pieces.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a64 {
    /// The hash of no bytes.
    pub fn new() -> Self {
        Fnv1a64(OFFSET_BASIS)
    }

    /// Feeds `bytes`; feeding `ab` equals feeding `a` then `b`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0 = bytes
            .iter()
            .fold(self.0, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME));
    }

    /// The hash of everything fed so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// The FNV-1a hash of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a64::new();
    hash.update(bytes);
    hash.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors_and_pieces_agree() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let mut pieces = Fnv1a64::new();
        pieces.update(b"foo");
        pieces.update(b"bar");
        assert_eq!(pieces.finish(), fnv1a64(b"foobar"));
    }
}
