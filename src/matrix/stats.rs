//! Whole-vector operations on the statistics components keep (Kaldi keeps them as
//! `CuVector`s): reductions to f64, the clipping scales of gradient clipping, block sums, and
//! BatchNorm's per-column arithmetic. Each op is one pass over whole operands; the ones that
//! fuse several primitive steps say which steps they stand for.

use super::{MatView, MatViewMut, Real, Vector, Vector64};

impl Vector {
    /// `Σ self[i]` accumulated in f64, in index order, returned as f64.
    pub fn sum_f64(&self) -> f64 {
        self.data.iter().map(|&x| x as f64).sum()
    }
    /// `self = sqrt(max(self, 0))` (negative values and NaN become 0).
    pub fn apply_sqrt_floored(&mut self) {
        self.data.iter_mut().for_each(|x| *x = x.max(0.0).sqrt());
    }
    /// The vector read as a `rows × cols` row-major matrix (dim = rows·cols).
    pub fn as_mat(&self, rows: usize, cols: usize) -> MatView<'_> {
        assert_eq!(rows * cols, self.dim(), "Vector::as_mat: shape");
        MatView::from_slice(&self.data, rows, cols)
    }
    /// Row scales of norm clipping from row norms: `t / x` where `x > t`, else 1; returns
    /// how many elements exceeded `t` (fused: compare, divide, select and count).
    pub fn clip_scales_from_norms(&mut self, t: Real) -> usize {
        let mut n = 0;
        for x in self.data.iter_mut() {
            *x = if *x > t {
                n += 1;
                t / *x
            } else {
                1.0
            };
        }
        n
    }
    /// Row scales of norm clipping from squared row norms: with `q = x / t²`, `q^(-1/2)`
    /// where `q > 1`, else 1; returns how many (fused: divide, compare, power, select and
    /// count).
    pub fn clip_scales_from_sum_squares(&mut self, t: Real) -> usize {
        let mut n = 0;
        for x in self.data.iter_mut() {
            let q = *x / (t * t);
            *x = if q > 1.0 {
                n += 1;
                q.powf(-0.5)
            } else {
                1.0
            };
        }
        n
    }
}

impl Vector64 {
    /// `out[j] = Σ_b self[b·block_dim + j]` over the blocks, in block order (dim must be a
    /// multiple of `block_dim`).
    pub fn sum_blocks(&self, block_dim: usize) -> Vector64 {
        assert!(
            block_dim > 0 && self.dim().is_multiple_of(block_dim),
            "Vector64::sum_blocks: dim"
        );
        let nb = self.dim() / block_dim;
        Vector64::from_vec(
            (0..block_dim)
                .map(|j| (0..nb).map(|b| self.data[b * block_dim + j]).sum())
                .collect(),
        )
    }
}

impl MatViewMut<'_> {
    /// Zeroes the rows `i` with `which[i]` whose 2-norm exceeds `t`; returns how many (fused:
    /// row norms, compare, zero rows).
    pub fn zero_rows_with_norm_above(&mut self, which: &[bool], t: Real) -> usize {
        let norms = self.as_view().row_norms();
        let zero: Vec<bool> = which
            .iter()
            .zip(&norms.data)
            .map(|(&z, &norm)| z && norm > t)
            .collect();
        self.zero_rows(&zero);
        zero.iter().filter(|&&z| z).count()
    }
}

/// BatchNorm's training scale per column, `(max(uvar·v − mean²·v, 0) + v·ε)^(−1/2)` with
/// `v = 1/target_rms²` (fused element-wise).
pub fn batch_norm_scale(mean: &Vector, uvar: &Vector, target_rms: Real, epsilon: Real) -> Vector {
    assert_eq!(mean.dim(), uvar.dim(), "batch_norm_scale: dim");
    let var_scale = 1.0 / (target_rms * target_rms);
    Vector::from_vec(
        mean.data
            .iter()
            .zip(&uvar.data)
            .map(|(&m, &u)| {
                let v = (u * var_scale - m * m * var_scale).max(0.0);
                (v + var_scale * epsilon).powf(-0.5)
            })
            .collect(),
    )
}

/// BatchNorm's backward coefficients from the per-column `Σ z·z'` and `Σ z'` over `n` frames:
/// `(−Σz' / n, Σzz' · coeff · scale)` (fused element-wise).
pub fn batch_norm_backprop_coefficients(
    zz: &Vector,
    zsum: &Vector,
    scale: &Vector,
    coeff: Real,
    n: Real,
) -> (Vector, Vector) {
    let var_deriv_mod = zz
        .data
        .iter()
        .zip(&scale.data)
        .map(|(&a, &s)| a * coeff * s)
        .collect();
    let temp = zsum.data.iter().map(|&s| -s / n).collect();
    (Vector::from_vec(temp), Vector::from_vec(var_deriv_mod))
}

/// BatchNorm's mean and centred variance from its double sums as Kaldi writes them: each sum
/// rounded to float, times the float `1/count`, variance `sumsq·inv − mean²` (the sums
/// themselves, rounded, when the count is 0).
pub fn batch_norm_mean_var(sum: &Vector64, sumsq: &Vector64, count: f64) -> (Vector, Vector) {
    if count == 0.0 {
        return (Vector::from_f64(sum), Vector::from_f64(sumsq));
    }
    let inv = (1.0 / count) as f32;
    let (m, v) = sum
        .data
        .iter()
        .zip(&sumsq.data)
        .map(|(&s, &q)| {
            let m = s as f32 * inv;
            (m, q as f32 * inv - m * m)
        })
        .unzip();
    (Vector::from_vec(m), Vector::from_vec(v))
}

/// BatchNorm's test-mode transform `y = x·scale + offset` from its double sums:
/// offset = −mean, var = max(sumsq·inv − mean², 0), scale = (var + ε)^(−1/2)·target_rms,
/// offset ·= scale (Kaldi's ComputeDerived). Returns `(scale, offset)`.
pub fn batch_norm_test_transform(
    sum: &Vector64,
    sumsq: &Vector64,
    count: f64,
    epsilon: Real,
    target_rms: Real,
) -> (Vector, Vector) {
    let inv = (1.0 / count) as f32;
    let mut offset: Vec<f32> = sum.data.iter().map(|&x| x as f32 * -inv).collect();
    let mut scale: Vec<f32> = sumsq.data.iter().map(|&x| x as f32 * inv).collect();
    for (s, o) in scale.iter_mut().zip(offset.iter_mut()) {
        let var = (*s - *o * *o).max(0.0);
        *s = (var + epsilon).powf(-0.5) * target_rms;
        *o *= *s;
    }
    (Vector::from_vec(scale), Vector::from_vec(offset))
}

/// Random BatchNorm statistics of count 1 (Kaldi's test mode without statistics): per column
/// two Gaussian draws `a`, `b` in that order, sum = a and sum of squares = b + a².
pub fn batch_norm_invented_stats(dim: usize, rng: &mut dyn rand::RngCore) -> (Vector64, Vector64) {
    let (mut s, mut q) = (Vec::with_capacity(dim), Vec::with_capacity(dim));
    for _ in 0..dim {
        let a = crate::random::rand_gauss(rng) as f64;
        let b = crate::random::rand_gauss(rng) as f64;
        s.push(a);
        q.push(b + a * a);
    }
    (Vector64::from_vec(s), Vector64::from_vec(q))
}
