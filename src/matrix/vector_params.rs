//! Vector operations that parameter code of components needs beyond Kaldi's VectorBase set.

use super::{Real, Vector};

impl Vector {
    /// `1 / x` per element, with `x` first moved away from zero to `±epsilon` (keeping its
    /// sign) where `|x| < epsilon`; used to invert learned scales safely.
    pub fn reciprocal_away_from_zero(&self, epsilon: Real) -> Vector {
        Vector::from_vec(
            self.data
                .iter()
                .map(|&s| {
                    1.0 / if s.abs() < epsilon {
                        epsilon.copysign(s)
                    } else {
                        s
                    }
                })
                .collect(),
        )
    }
    /// `(min, max)` of the elements (`(+∞, −∞)` when empty).
    pub fn min_max(&self) -> (Real, Real) {
        self.data
            .iter()
            .fold((Real::INFINITY, Real::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reciprocal_keeps_sign_and_floors_magnitude() {
        let v = Vector::from_vec(vec![2.0, -0.5, 1e-9, -1e-9, 0.0]);
        let r = v.reciprocal_away_from_zero(1e-3);
        // 1/1e-3 in f32 (999.99994), with the sign of the input; +0 counts as positive.
        let big = 1.0 / 1e-3f32;
        assert_eq!(r.to_vec(), vec![0.5, -2.0, big, -big, big]);
    }

    #[test]
    fn min_max_of_elements() {
        let v = Vector::from_vec(vec![3.0, -1.0, 7.5, 0.0]);
        assert_eq!(v.min_max(), (-1.0, 7.5));
        assert_eq!(
            Vector::from_vec(vec![]).min_max(),
            (Real::INFINITY, Real::NEG_INFINITY)
        );
    }
}
