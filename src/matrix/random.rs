//! Random masks for dropout and SpecAugment, drawn as Kaldi draws them on the CPU from the
//! generator the caller passes in (Kaldi's `rand()` stream in training, so that the masks
//! are `nnet3-train`'s): a uniform fill is one [`RandomState`] taken from the stream
//! (`CuRand::RandUniform` → `SetRandUniform`), one `RandUniform` per element in row-major
//! order; SpecAugment's frequency mask draws `RandInt` from the stream itself.

use super::{MatViewMut, Real};
use crate::kaldi_rand::{kaldi_rand_int, RandomState};
use rand::RngCore;

/// Kaldi's `Scale(p·4)` then `Add(1 − 2p)` of a continuous-dropout mask: both factors
/// computed in double and stored as float.
fn continuous_factors(p: Real) -> (Real, Real) {
    ((p as f64 * 4.0) as f32, (1.0 - 2.0 * p as f64) as f32)
}

impl MatViewMut<'_> {
    /// Kaldi's DropoutComponent: a uniform fill u of the same shape, `Heaviside(u − p)`
    /// multiplied into every element.
    pub fn apply_dropout_rand(&mut self, rng: &mut dyn RngCore, p: Real) {
        let mut state = RandomState::from_stream(rng);
        for r in 0..self.num_rows() {
            for x in self.row_mut(r) {
                let keep = if state.uniform() + -p > 0.0 { 1.0 } else { 0.0 };
                *x *= keep;
            }
        }
    }
    /// Each element becomes `keep` when a uniform draw u has `u − p > 0`, else 0 (Kaldi's
    /// `RandUniform`, `Add(−p)`, `ApplyHeaviside`, `Scale(keep)`).
    pub fn set_rand_dropout_mask(&mut self, rng: &mut dyn RngCore, p: Real, keep: Real) {
        let mut state = RandomState::from_stream(rng);
        for r in 0..self.num_rows() {
            for v in self.row_mut(r) {
                *v = if state.uniform() + -p > 0.0 {
                    keep
                } else {
                    0.0
                };
            }
        }
    }
    /// Each element becomes `u·4p + (1 − 2p)` for a uniform draw u (continuous dropout,
    /// expected value 1).
    pub fn set_rand_continuous_dropout_mask(&mut self, rng: &mut dyn RngCore, p: Real) {
        let (scale, offset) = continuous_factors(p);
        let mut state = RandomState::from_stream(rng);
        for r in 0..self.num_rows() {
            for v in self.row_mut(r) {
                *v = state.uniform() * scale + offset;
            }
        }
    }
    /// SpecAugment's frequency mask (Kaldi's GeneralDropoutComponent): every row starts as
    /// ones; `RandInt(0, max_zeroed)` bins are zeroed from `RandInt(0, bins − 1)` on,
    /// wrapping around; then, for each further region, a random half of the bins (seen as a
    /// circle) is turned over by swapping its first quarter with the mirrored one. A row with
    /// no zeroed bins draws nothing more.
    pub fn set_rand_zeroed_regions_mask(
        &mut self,
        rng: &mut dyn RngCore,
        max_zeroed: usize,
        max_regions: usize,
    ) {
        let bins = self.num_cols();
        for r in 0..self.num_rows() {
            let row = self.row_mut(r);
            row.fill(1.0);
            if bins == 0 {
                continue;
            }
            let zeroed = kaldi_rand_int(rng, 0, max_zeroed as i32) as usize;
            if zeroed == 0 {
                continue;
            }
            let start = kaldi_rand_int(rng, 0, bins as i32 - 1) as usize;
            for i in start..start + zeroed {
                row[i % bins] = 0.0;
            }
            let half = bins / 2;
            for _ in 1..max_regions {
                let start = kaldi_rand_int(rng, 0, bins as i32 - 1) as usize;
                let end = start + half;
                for i in 0..half / 2 {
                    row.swap((start + i) % bins, (end - i) % bins);
                }
            }
        }
    }
}
