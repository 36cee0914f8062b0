//! A tiny deterministic pseudo-random generator (SplitMix64) defined here so
//! that seeded data (synthetic weights, test inputs) is bit-identical across
//! versions of kernelscope and of its dependencies.

/// SplitMix64: 64 bits of state, passes BigCrush, trivially reproducible.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The step the state advances by per value (the golden ratio in 64 bits).
    pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// SplitMix64's output function of a state.
    pub const fn mix(state: u64) -> u64 {
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        Self::mix(self.state)
    }

    /// The `index`-th value (from 0) of the sequence of `seed`, without
    /// generating the ones before it: the generator is a counter, so any
    /// slice of a sequence (one rank's share of a tensor, or one GPU
    /// thread's element) is made on its own.
    pub const fn u64_at(seed: u64, index: u64) -> u64 {
        Self::mix(seed.wrapping_add(index.wrapping_add(1).wrapping_mul(Self::GAMMA)))
    }

    /// The top 24 bits of `bits` as a float in `[0, 1)` (exact in f32).
    pub fn unit_f32(bits: u64) -> f32 {
        (bits >> 40) as f32 / (1u64 << 24) as f32
    }

    /// `unit` (in `[0, 1)`) scaled to `[low, high)`: one multiply and one
    /// add, each rounded (no fused multiply-add), as the GPU generator does.
    pub fn scale(unit: f32, low: f32, high: f32) -> f32 {
        low + (high - low) * unit
    }

    /// Uniform in `[0, 1)` with 24 bits of precision (exact in f32).
    pub fn next_f32(&mut self) -> f32 {
        Self::unit_f32(self.next_u64())
    }

    /// Uniform in `[low, high)`.
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        Self::scale(self.next_f32(), low, high)
    }

    /// Uniform integer in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        // Multiply-shift keeps it unbiased enough for test data and cheap.
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    /// `count` values uniform in `[low, high)`.
    pub fn vec_f32(&mut self, count: usize, low: f32, high: f32) -> Vec<f32> {
        (0..count).map(|_| self.uniform(low, high)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_is_fixed_by_seed() {
        // Reference values of SplitMix64 for seed 1234567 (from the published
        // reference implementation); a change here would change every
        // synthetic checkpoint.
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
    }

    #[test]
    fn any_value_is_made_on_its_own() {
        let mut rng = SplitMix64::new(987_654_321);
        for index in 0..1000u64 {
            assert_eq!(rng.next_u64(), SplitMix64::u64_at(987_654_321, index));
        }
    }

    #[test]
    fn floats_stay_in_range() {
        let mut rng = SplitMix64::new(7);
        for _ in 0..10_000 {
            let x = rng.uniform(-2.0, 3.0);
            assert!((-2.0..3.0).contains(&x));
            assert!(rng.below(5) < 5);
        }
    }
}
