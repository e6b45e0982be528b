//! Random masks for dropout and SpecAugment, drawn as Kaldi draws them on the CPU from the
//! generator the caller passes in (Kaldi's `rand()` stream in training, so that the masks
//! are `nnet3-train`'s): a uniform fill is one [`RandomState`] taken from the stream
//! (`CuRand::RandUniform` → `SetRandUniform`), one `RandUniform` per element in row-major
//! order; SpecAugment's frequency mask draws `RandInt` from the stream itself. On the GPU
//! the draws are the same: the mask is drawn into host memory and copied over in one
//! transfer (written element by element through managed memory, its pages would migrate).

#[cfg(feature = "cuda")]
use super::Matrix;
use super::{on_device, MatViewMut, Real};
use crate::kaldi_rand::{kaldi_rand_int, RandomState};
use rand::RngCore;

/// Kaldi's `Scale(p·4)` then `Add(1 − 2p)` of a continuous-dropout mask: both factors
/// computed in double and stored as float.
fn continuous_factors(p: Real) -> (Real, Real) {
    ((p as f64 * 4.0) as f32, (1.0 - 2.0 * p as f64) as f32)
}

impl MatViewMut<'_> {
    /// For a device matrix: `draw` fills a host matrix of the same shape (the host code of
    /// the same method), which then lands here by `land` (a copy, or a product for a mask
    /// that is applied).
    #[cfg(feature = "cuda")]
    fn drawn_on_host(
        &mut self,
        draw: impl FnOnce(&mut MatViewMut<'_>),
        land: impl FnOnce(&mut MatViewMut<'_>, super::MatView<'_>),
    ) {
        let (rows, cols) = (self.num_rows(), self.num_cols());
        let mut host = vec![0.0; rows * cols];
        draw(&mut MatViewMut::from_slice(&mut host, rows, cols));
        let mask = Matrix::from_vec(rows, cols, host);
        land(self, mask.view());
    }
    /// Kaldi's DropoutComponent: a uniform fill u of the same shape, `Heaviside(u − p)`
    /// multiplied into every element.
    pub fn apply_dropout_rand(&mut self, rng: &mut dyn RngCore, p: Real) {
        on_device!(self.place.on_device() => self.drawn_on_host(|m| m.set_rand_dropout_mask(rng, p, 1.0), |y, m| y.mul_elements(m)));
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
        on_device!(self.place.on_device() => self.drawn_on_host(|m| m.set_rand_dropout_mask(rng, p, keep), |y, m| y.copy_from(m)));
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
        on_device!(self.place.on_device() => self.drawn_on_host(|m| m.set_rand_continuous_dropout_mask(rng, p), |y, m| y.copy_from(m)));
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
        on_device!(self.place.on_device() => self.drawn_on_host(|m| m.set_rand_zeroed_regions_mask(rng, max_zeroed, max_regions), |y, m| y.copy_from(m)));
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
