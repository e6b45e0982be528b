//! Random masks for dropout and SpecAugment, drawn from a generator the caller passes in
//! (so a seeded run is reproducible). Elements are drawn in row-major order.

use super::{MatViewMut, Real};
use rand::Rng;

impl MatViewMut<'_> {
    /// Keeps each element when a uniform draw u in [0, 1) has `u − p > 0`, else zeroes it
    /// (Kaldi's dropout: Heaviside(u − p)).
    pub fn apply_dropout_rand<R: Rng + ?Sized>(&mut self, rng: &mut R, p: Real) {
        for r in 0..self.num_rows() {
            for x in self.row_mut(r) {
                if rng.random::<f32>() - p <= 0.0 {
                    *x = 0.0;
                }
            }
        }
    }
    /// Each element becomes `keep` when a uniform draw exceeds `p`, else 0.
    pub fn set_rand_dropout_mask<R: Rng + ?Sized>(&mut self, rng: &mut R, p: Real, keep: Real) {
        for r in 0..self.num_rows() {
            for v in self.row_mut(r) {
                *v = if rng.random::<f32>() > p { keep } else { 0.0 };
            }
        }
    }
    /// Each element becomes `1 + 4p (u − 0.5)` for a uniform draw u (continuous dropout).
    pub fn set_rand_continuous_dropout_mask<R: Rng + ?Sized>(&mut self, rng: &mut R, p: Real) {
        for r in 0..self.num_rows() {
            for v in self.row_mut(r) {
                let u: f32 = rng.random();
                *v = 1.0 + 4.0 * p * (u - 0.5);
            }
        }
    }
    /// Every row becomes ones with up to `max_zeroed` elements zeroed, in 1 to `max_regions`
    /// equal-width regions at random places (SpecAugment's frequency mask). Per row: the
    /// total, then the region count, then each region's start are drawn.
    pub fn set_rand_zeroed_regions_mask<R: Rng + ?Sized>(
        &mut self,
        rng: &mut R,
        max_zeroed: usize,
        max_regions: usize,
    ) {
        let width_all = self.num_cols();
        for r in 0..self.num_rows() {
            let row = self.row_mut(r);
            row.fill(1.0);
            let total = rng.random_range(0..=max_zeroed);
            let regions = rng.random_range(1..=max_regions);
            let width = total / regions;
            if width == 0 {
                continue;
            }
            for _ in 0..regions {
                let start = rng.random_range(0..=width_all - width);
                row[start..start + width].fill(0.0);
            }
        }
    }
}
