//! Vector operations (Kaldi's VectorBase / CuVector subset nnet3 uses). `Vector` lends no
//! host slice outside `src/matrix/`: operands given as `&[Real]` are host elements, and
//! [`Vector::as_row`] / [`Vector::as_row_mut`] give the matrix-view forms.

use super::on_device;
use super::{MatView, Real, Trans, Vector};

impl Vector {
    /// Sets every element to zero.
    pub fn set_zero(&mut self) {
        self.as_mut_slice().fill(0.0);
    }
    /// Sets every element to `v`.
    pub fn set_const(&mut self, v: Real) {
        self.as_mut_slice().fill(v);
    }
    /// `self = x` (same dimension).
    pub fn copy_from_slice(&mut self, x: &[Real]) {
        self.as_mut_slice().copy_from_slice(x);
    }
    /// `self *= alpha`; scaling by 0 clears NaN and infinity too.
    pub fn scale(&mut self, alpha: Real) {
        if alpha == 0.0 {
            self.data.iter_mut().for_each(|x| *x = 0.0);
        } else {
            self.data.iter_mut().for_each(|x| *x *= alpha);
        }
    }
    /// `self += c` element-wise.
    pub fn add_const(&mut self, c: Real) {
        self.data.iter_mut().for_each(|x| *x += c);
    }
    /// `self += alpha · x` (Kaldi's AddVec).
    pub fn add_vec(&mut self, alpha: Real, x: &[Real]) {
        assert_eq!(x.len(), self.dim(), "add_vec: dim");
        super::ops::axpy(self.as_mut_slice(), alpha, x);
    }
    /// `self = alpha · a ⊙ b + beta · self` element-wise (Kaldi's VectorBase::AddVecVec).
    pub fn add_vec_vec(&mut self, alpha: Real, a: &[Real], b: &[Real], beta: Real) {
        assert_eq!(
            (a.len(), b.len()),
            (self.dim(), self.dim()),
            "add_vec_vec: dim"
        );
        for ((y, &x), &z) in self.data.iter_mut().zip(a).zip(b) {
            *y = if beta == 0.0 {
                alpha * x * z
            } else {
                alpha * x * z + beta * *y
            };
        }
    }
    /// `self = alpha · op(m) · x + beta · self` (Kaldi's AddMatVec).
    pub fn add_mat_vec(&mut self, alpha: Real, m: MatView<'_>, t: Trans, x: &[Real], beta: Real) {
        m.add_mat_vec_to(self.as_mut_slice(), alpha, t, x, beta);
    }
    /// `self = alpha · (sum of m's rows) + beta · self` (Kaldi's AddRowSumMat).
    pub fn add_row_sum_mat(&mut self, alpha: Real, m: MatView<'_>, beta: Real) {
        on_device!(self.data.is_device() && m.place.on_device() && m.num_cols() == self.dim() => super::cuda_ops::add_sums(self, alpha, m, beta, true));
        m.add_row_sum_to(self.as_mut_slice(), alpha, beta);
    }
    /// `self = alpha · (sum of m's columns) + beta · self` (Kaldi's AddColSumMat).
    pub fn add_col_sum_mat(&mut self, alpha: Real, m: MatView<'_>, beta: Real) {
        on_device!(self.data.is_device() && m.place.on_device() && m.num_rows() == self.dim() => super::cuda_ops::add_sums(self, alpha, m, beta, false));
        m.add_col_sum_to(self.as_mut_slice(), alpha, beta);
    }
    /// `self = alpha · diag(op(a) · op(b)) + beta · self` (Kaldi's AddDiagMatMat).
    pub fn add_diag_mat_mat(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        ta: Trans,
        b: MatView<'_>,
        tb: Trans,
        beta: Real,
    ) {
        a.add_diag_mat_mat_to(&mut self.data, alpha, ta, b, tb, beta);
    }
    /// `self = alpha · diag(op(m) op(m)ᵀ) + beta · self` (Kaldi's AddDiagMat2).
    pub fn add_diag_mat2(&mut self, alpha: Real, m: MatView<'_>, t: Trans, beta: Real) {
        on_device!(t == Trans::Yes && self.data.is_device() && m.place.on_device() && m.num_cols() == self.dim() => super::cuda_ops::add_col_sumsq(self, alpha, m, beta));
        m.add_diag_mat2_to(self.as_mut_slice(), alpha, t, beta);
    }
    /// `self *= x` element-wise.
    pub fn mul_elements(&mut self, x: &[Real]) {
        assert_eq!(x.len(), self.dim(), "mul_elements: dim");
        self.data.iter_mut().zip(x).for_each(|(y, &a)| *y *= a);
    }
    /// `self /= x` element-wise.
    pub fn div_elements(&mut self, x: &[Real]) {
        assert_eq!(x.len(), self.dim(), "div_elements: dim");
        self.data.iter_mut().zip(x).for_each(|(y, &a)| *y /= a);
    }
    /// `self = 1 / self`.
    pub fn invert_elements(&mut self) {
        self.data.iter_mut().for_each(|x| *x = 1.0 / *x);
    }
    /// `self = max(self, floor)`; returns how many elements were raised (Kaldi's ApplyFloor).
    pub fn apply_floor(&mut self, floor: Real) -> usize {
        let mut n = 0;
        for x in self.data.iter_mut() {
            if *x < floor {
                *x = floor;
                n += 1;
            }
        }
        n
    }
    /// `self = min(self, ceiling)`; returns how many elements were lowered.
    pub fn apply_ceiling(&mut self, ceiling: Real) -> usize {
        let mut n = 0;
        for x in self.data.iter_mut() {
            if *x > ceiling {
                *x = ceiling;
                n += 1;
            }
        }
        n
    }
    /// `self = self^p`.
    pub fn apply_pow(&mut self, p: Real) {
        self.data.iter_mut().for_each(|x| *x = x.powf(p));
    }
    /// `self = exp(self)`.
    pub fn apply_exp(&mut self) {
        self.data.iter_mut().for_each(|x| *x = x.exp());
    }
    /// `self = ln(self)`.
    pub fn apply_log(&mut self) {
        self.data.iter_mut().for_each(|x| *x = x.ln());
    }
    /// Sum of the elements, accumulated in f64.
    pub fn sum(&self) -> Real {
        self.data.iter().map(|&x| f64::from(x)).sum::<f64>() as Real
    }
    /// Largest element (−∞ when empty).
    pub fn max(&self) -> Real {
        self.data
            .iter()
            .copied()
            .fold(Real::NEG_INFINITY, Real::max)
    }
    /// Smallest element (+∞ when empty).
    pub fn min(&self) -> Real {
        self.data.iter().copied().fold(Real::INFINITY, Real::min)
    }
    /// The p-norm `(Σ |x|^p)^(1/p)`; p = ∞ gives max |x|, p = 0 counts non-zeros (Kaldi's Norm).
    pub fn norm(&self, p: Real) -> Real {
        if p == 0.0 {
            self.data.iter().filter(|&&x| x != 0.0).count() as Real
        } else if p == Real::INFINITY {
            self.data.iter().fold(0.0, |m, x| m.max(x.abs()))
        } else if p == 1.0 {
            self.data.iter().map(|x| f64::from(x.abs())).sum::<f64>() as Real
        } else if p == 2.0 {
            self.data
                .iter()
                .map(|&x| f64::from(x) * f64::from(x))
                .sum::<f64>()
                .sqrt() as Real
        } else {
            let s: f64 = self
                .data
                .iter()
                .map(|x| f64::from(x.abs()).powf(f64::from(p)))
                .sum();
            s.powf(1.0 / f64::from(p)) as Real
        }
    }
    /// `Σ self[i] · x[i]` (Kaldi's VecVec).
    pub fn dot(&self, x: &[Real]) -> Real {
        assert_eq!(x.len(), self.dim(), "dot: dim");
        super::dot(&self.data, x)
    }
}
