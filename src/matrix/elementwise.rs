//! Element-wise operations, nonlinearities with their derivatives, and reductions.
//! Each derivative sits next to its forward rule.

use super::on_device;
use super::parallel::for_row_blocks;
use super::{MatView, MatViewMut, Real, Trans, Vector, Vector64};

impl MatViewMut<'_> {
    /// `self[r, c] += alpha · v` for each element `(r, c, v)`, in order (Kaldi's
    /// AddElements; a repeated (r, c) adds again). Every (r, c) must lie inside the matrix.
    pub fn add_elements(&mut self, alpha: Real, elements: &[(usize, usize, Real)]) {
        assert_inside("add_elements", self.num_rows(), self.num_cols(), elements);
        // The kernel adds in no set order, which matters only where (r, c) repeats.
        on_device!(self.place.on_device() && !repeats_a_position(elements) => super::cuda_ops::add_elements(self, alpha, elements));
        for &(r, c, v) in elements {
            let x = self.get(r, c);
            self.set(r, c, x + alpha * v);
        }
    }
    /// Sets every element to zero (NaN in the old contents does not matter).
    pub fn set_zero(&mut self) {
        self.set_const(0.0);
    }
    /// Sets every element to `v`.
    pub fn set_const(&mut self, v: Real) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_set_const", self, &[], v, 0.0));
        for r in 0..self.num_rows() {
            self.row_mut(r).fill(v);
        }
    }
    /// `self *= alpha`; scaling by 0 clears NaN and infinity too (as Kaldi's components'
    /// `Scale(0)`: a delta network is reset this way after a non-finite minibatch).
    pub fn scale(&mut self, alpha: Real) {
        on_device!(self.place.on_device() => if alpha == 0.0 { super::cuda_ops::ew("k_set_const", self, &[], 0.0, 0.0) } else { super::cuda_ops::ew("k_scale", self, &[], alpha, 0.0) });
        if alpha == 0.0 {
            self.map_inplace(|_| 0.0);
        } else {
            self.map_inplace(|x| x * alpha);
        }
    }
    /// `self += c` element-wise.
    pub fn add_const(&mut self, c: Real) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_add_const", self, &[], c, 0.0));
        self.map_inplace(|x| x + c);
    }
    /// `self = a` (same shape).
    pub fn copy_from(&mut self, a: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() && (self.num_rows(), self.num_cols()) == (a.num_rows(), a.num_cols()) => super::cuda_ops::ew("k_copy", self, &[a], 0.0, 0.0));
        assert_eq!(
            (self.num_rows(), self.num_cols()),
            (a.num_rows(), a.num_cols()),
            "copy_from: shape"
        );
        for r in 0..self.num_rows() {
            self.row_mut(r).copy_from_slice(a.row(r));
        }
    }
    /// `self = aᵀ`.
    pub fn copy_from_trans(&mut self, a: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() && (self.num_rows(), self.num_cols()) == (a.num_cols(), a.num_rows()) => super::cuda_ops::ew("k_copy_t", self, &[a], 0.0, 0.0));
        super::ops::transpose_apply(self, a, |_, y| y);
    }
    /// `self += alpha · op(a)` (Kaldi's AddMat).
    pub fn add_mat(&mut self, alpha: Real, a: MatView<'_>, ta: Trans) {
        on_device!(self.place.on_device() && a.place.on_device() && (self.num_rows(), self.num_cols()) == if ta == Trans::No { (a.num_rows(), a.num_cols()) } else { (a.num_cols(), a.num_rows()) } => super::cuda_ops::ew(if ta == Trans::No { "k_add_mat" } else { "k_add_mat_t" }, self, &[a], alpha, 0.0));
        match ta {
            Trans::No => self.zip_apply(a, |x, y| x + alpha * y),
            Trans::Yes => super::ops::transpose_apply(self, a, |x, y| x + alpha * y),
        }
    }
    /// `self = alpha · a + beta · self`.
    pub fn add_mat_scaled(&mut self, alpha: Real, a: MatView<'_>, beta: Real) {
        on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ew("k_add_mat_scaled", self, &[a], alpha, beta));
        self.zip_apply(a, |x, y| alpha * y + beta * x);
    }
    /// `self *= a` element-wise.
    pub fn mul_elements(&mut self, a: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ew("k_mul", self, &[a], 0.0, 0.0));
        self.zip_apply(a, |x, y| x * y);
    }
    /// `self /= a` element-wise.
    pub fn div_elements(&mut self, a: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ew("k_div", self, &[a], 0.0, 0.0));
        self.zip_apply(a, |x, y| x / y);
    }
    /// `self += alpha · a ⊙ b` element-wise.
    pub fn add_mul_elements(&mut self, alpha: Real, a: MatView<'_>, b: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() && b.place.on_device() => super::cuda_ops::ew("k_add_mul", self, &[a, b], alpha, 0.0));
        self.zip2_apply(a, b, |x, y, z| x + alpha * y * z);
    }
    /// `self[r, :] = alpha · v + beta · self[r, :]` for every row (Kaldi's AddVecToRows).
    pub fn add_vec_to_rows(&mut self, alpha: Real, v: &Vector, beta: Real) {
        assert_eq!(v.dim(), self.num_cols(), "add_vec_to_rows: dim");
        on_device!(self.place.on_device() => super::cuda_ops::ewv("k_add_vec_to_rows", self, v, alpha, beta));
        assert_eq!(v.dim(), self.num_cols(), "add_vec_to_rows: dim");
        for r in 0..self.num_rows() {
            super::simd::axpby(self.row_mut(r), &v.data, alpha, beta);
        }
    }
    /// `self[:, c] = alpha · v + beta · self[:, c]` for every column (Kaldi's AddVecToCols).
    pub fn add_vec_to_cols(&mut self, alpha: Real, v: &Vector, beta: Real) {
        assert_eq!(v.dim(), self.num_rows(), "add_vec_to_cols: dim");
        on_device!(self.place.on_device() => super::cuda_ops::ewv("k_add_vec_to_cols", self, v, alpha, beta));
        assert_eq!(v.dim(), self.num_rows(), "add_vec_to_cols: dim");
        for (r, &vr) in v.data.iter().enumerate() {
            let a = alpha * vr;
            let row = self.row_mut(r);
            if beta == 0.0 {
                row.fill(a);
            } else {
                row.iter_mut().for_each(|x| *x = a + beta * *x);
            }
        }
    }
    /// Multiplies column c by `v[c]` (Kaldi's MulColsVec).
    pub fn mul_cols_vec(&mut self, v: &Vector) {
        assert_eq!(v.dim(), self.num_cols());
        on_device!(self.place.on_device() => super::cuda_ops::ewv("k_mul_cols_vec", self, v, 0.0, 0.0));
        assert_eq!(v.dim(), self.num_cols());
        for r in 0..self.num_rows() {
            for (x, &y) in self.row_mut(r).iter_mut().zip(&v.data) {
                *x *= y;
            }
        }
    }
    /// Multiplies row r by `v[r]` (Kaldi's MulRowsVec).
    pub fn mul_rows_vec(&mut self, v: &Vector) {
        assert_eq!(v.dim(), self.num_rows());
        on_device!(self.place.on_device() => super::cuda_ops::ewv("k_mul_rows_vec", self, v, 0.0, 0.0));
        assert_eq!(v.dim(), self.num_rows());
        for (r, &s) in v.data.iter().enumerate() {
            self.row_mut(r).iter_mut().for_each(|x| *x *= s);
        }
    }
    /// `self = max(self, floor)`.
    pub fn apply_floor(&mut self, floor: Real) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_floor", self, &[], floor, 0.0));
        for r in 0..self.num_rows() {
            super::simd::floor(self.row_mut(r), floor);
        }
    }
    /// `self = min(self, ceiling)`.
    pub fn apply_ceiling(&mut self, ceiling: Real) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_ceiling", self, &[], ceiling, 0.0));
        self.map_inplace(|x| if x > ceiling { ceiling } else { x });
    }
    /// `self = √self`.
    pub fn apply_sqrt(&mut self) {
        self.map_inplace(|x| x.sqrt());
    }
    /// `self /= c` element-wise (a division, not a multiplication by `1/c`).
    pub fn div_const(&mut self, c: Real) {
        self.map_inplace(|x| x / c);
    }
    /// `self = sign(self)`: 1 above 0, −1 below, 0 for ±0 (NaN stays NaN).
    pub fn apply_signum(&mut self) {
        self.map_inplace(|x| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else if x == 0.0 {
                0.0
            } else {
                x
            }
        });
    }
    /// `self = sign(self) · max(|self| − t, 0)`: each element moved toward 0 by `t`, stopping
    /// at 0 (the proximal step of an L1 penalty).
    pub fn shrink_toward_zero(&mut self, t: Real) {
        self.map_inplace(|x| x.signum() * (x.abs() - t).max(0.0));
    }
    /// Per element, by the sign of `agreement` (the product of the signs of two successive
    /// steps, CNTK's RMSProp step-size rule): above 0, `self = min(self · up, ceiling)`;
    /// below 0, `self = max(self · down, floor)`; at 0, unchanged.
    pub fn scale_by_sign_agreement(
        &mut self,
        agreement: MatView<'_>,
        up: Real,
        ceiling: Real,
        down: Real,
        floor: Real,
    ) {
        self.zip_apply(agreement, |x, a| {
            if a > 0.0 {
                (x * up).min(ceiling)
            } else if a < 0.0 {
                (x * down).max(floor)
            } else {
                x
            }
        });
    }
    /// `self = 1 if self > 0 else 0`.
    pub fn apply_heaviside(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_heaviside", self, &[], 0.0, 0.0));
        self.map_inplace(|x| if x > 0.0 { 1.0 } else { 0.0 });
    }
    /// `self = exp(self)`.
    pub fn apply_exp(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_exp", self, &[], 0.0, 0.0));
        self.map_inplace(|x| x.exp());
    }
    /// `self = ln(self)`.
    pub fn apply_log(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_log", self, &[], 0.0, 0.0));
        self.map_inplace(|x| x.ln());
    }
    /// `self = self^p` (for p = 0.5, the square root).
    pub fn apply_pow(&mut self, p: Real) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_pow", self, &[], p, 0.0));
        self.map_inplace(|x| x.powf(p));
    }
    /// `self = sigmoid(src)`.
    pub fn sigmoid_from(&mut self, src: MatView<'_>) {
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::ew("k_sigmoid_from", self, &[src], 0.0, 0.0));
        self.zip_apply(src, |_, x| 1.0 / (1.0 + (-x).exp()));
    }
    /// `self = out_deriv ⊙ y (1 − y)` with y = sigmoid output.
    pub fn diff_sigmoid(&mut self, value: MatView<'_>, out_deriv: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() && out_deriv.place.on_device() => super::cuda_ops::ew("k_diff_sigmoid", self, &[value, out_deriv], 0.0, 0.0));
        self.zip2_apply(value, out_deriv, |_, y, d| d * y * (1.0 - y));
    }
    /// `self = tanh(src)`.
    pub fn tanh_from(&mut self, src: MatView<'_>) {
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::ew("k_tanh_from", self, &[src], 0.0, 0.0));
        self.zip_apply(src, |_, x| x.tanh());
    }
    /// `self = out_deriv ⊙ (1 − y²)` with y = tanh output.
    pub fn diff_tanh(&mut self, value: MatView<'_>, out_deriv: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() && out_deriv.place.on_device() => super::cuda_ops::ew("k_diff_tanh", self, &[value, out_deriv], 0.0, 0.0));
        self.zip2_apply(value, out_deriv, |_, y, d| d * (1.0 - y * y));
    }
    /// `self = softmax(src)` row by row.
    pub fn softmax_per_row_from(&mut self, src: MatView<'_>) {
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::softmax_rows(self, Some(src), false));
        self.copy_from(src);
        for r in 0..self.num_rows() {
            let row = self.row_mut(r);
            let m = super::simd::max(row);
            let mut s = 0.0f32;
            for x in row.iter_mut() {
                *x = (*x - m).exp();
                s += *x;
            }
            for x in row.iter_mut() {
                *x /= s;
            }
        }
        super::check::check_finite("softmax_per_row_from", self.as_view());
    }
    /// `self = y ⊙ (d − (d·y))` per row, y = softmax output.
    pub fn diff_softmax_per_row(&mut self, value: MatView<'_>, out_deriv: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() && out_deriv.place.on_device() => super::cuda_ops::diff_softmax_rows(self, value, Some(out_deriv), false));
        for r in 0..self.num_rows() {
            let (y, d) = (value.row(r), out_deriv.row(r));
            let dot: Real = y.iter().zip(d).map(|(a, b)| a * b).sum();
            for ((x, &yy), &dd) in self.row_mut(r).iter_mut().zip(y).zip(d) {
                *x = yy * (dd - dot);
            }
        }
    }
    /// `self = log_softmax(src)` row by row.
    pub fn log_softmax_per_row_from(&mut self, src: MatView<'_>) {
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::softmax_rows(self, Some(src), true));
        assert!(
            self.num_rows() == src.num_rows() && self.num_cols() == src.num_cols(),
            "log_softmax_per_row_from: {}x{} from {}x{}",
            self.num_rows(),
            self.num_cols(),
            src.num_rows(),
            src.num_cols()
        );
        for r in 0..self.num_rows() {
            super::simd::log_softmax_from(self.row_mut(r), src.row(r));
        }
        super::check::check_finite("log_softmax_per_row_from", self.as_view());
    }
    /// `self = d − exp(y) · sum(d)` per row, y = log-softmax output.
    pub fn diff_log_softmax_per_row(&mut self, value: MatView<'_>, out_deriv: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() && out_deriv.place.on_device() => super::cuda_ops::diff_softmax_rows(self, value, Some(out_deriv), true));
        for_row_blocks(self.rb(), |first, mut dst| {
            for i in 0..dst.num_rows() {
                let (y, d) = (value.row(first + i), out_deriv.row(first + i));
                let sum = super::simd::sum(d);
                for ((x, &yy), &dd) in dst.row_mut(i).iter_mut().zip(y).zip(d) {
                    *x = dd - yy.exp() * sum;
                }
            }
        });
    }
}

/// In-place forms of the nonlinearities and their derivatives, for components that run in
/// place (the input buffer becomes the output, or the output derivative the input one).
impl MatViewMut<'_> {
    /// `self = sigmoid(self)`.
    pub fn apply_sigmoid(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_sigmoid", self, &[], 0.0, 0.0));
        self.map_inplace(|x| 1.0 / (1.0 + (-x).exp()));
    }
    /// `self = tanh(self)`.
    pub fn apply_tanh(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_tanh", self, &[], 0.0, 0.0));
        self.map_inplace(|x| x.tanh());
    }
    /// `self = y (1 − y)` with y = self, a sigmoid output: the derivative from the value.
    pub fn apply_sigmoid_deriv_from_output(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_sigmoid_deriv_from_output", self, &[], 0.0, 0.0));
        self.map_inplace(|y| y * (1.0 - y));
    }
    /// `self = 1 − y²` with y = self, a tanh output: the derivative from the value.
    pub fn apply_tanh_deriv_from_output(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_tanh_deriv_from_output", self, &[], 0.0, 0.0));
        self.map_inplace(|y| 1.0 - y * y);
    }
    /// `self = self ⊙ y (1 − y)`, self holding the output derivative, y = sigmoid output.
    pub fn diff_sigmoid_in_place(&mut self, value: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() => super::cuda_ops::ew("k_diff_sigmoid_in_place", self, &[value], 0.0, 0.0));
        self.zip_apply(value, |d, y| d * y * (1.0 - y));
    }
    /// `self = self ⊙ (1 − y²)`, self holding the output derivative, y = tanh output.
    pub fn diff_tanh_in_place(&mut self, value: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() => super::cuda_ops::ew("k_diff_tanh_in_place", self, &[value], 0.0, 0.0));
        self.zip_apply(value, |d, y| d * (1.0 - y * y));
    }
    /// `self = self ⊙ [y > 0]`, self holding the output derivative, y = ReLU output.
    pub fn diff_relu_in_place(&mut self, value: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() => super::cuda_ops::ew("k_diff_relu_in_place", self, &[value], 0.0, 0.0));
        self.zip_apply(value, |d, y| if y > 0.0 { d } else { 0.0 });
    }
    /// `self = y ⊙ (self − (self·y))` per row, self holding the output derivative,
    /// y = softmax output.
    pub fn diff_softmax_per_row_in_place(&mut self, value: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() => super::cuda_ops::diff_softmax_rows(self, value, None, false));
        for r in 0..self.num_rows() {
            let y = value.row(r);
            let row = self.row_mut(r);
            let dot: Real = y.iter().zip(row.iter()).map(|(a, b)| a * b).sum();
            for (d, &yy) in row.iter_mut().zip(y) {
                *d = yy * (*d - dot);
            }
        }
    }
    /// `self = self − exp(y) · sum(self)` per row, self holding the output derivative,
    /// y = log-softmax output.
    pub fn diff_log_softmax_per_row_in_place(&mut self, value: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() => super::cuda_ops::diff_softmax_rows(self, value, None, true));
        for r in 0..self.num_rows() {
            let y = value.row(r);
            let row = self.row_mut(r);
            let sum: Real = row.iter().sum();
            for (d, &yy) in row.iter_mut().zip(y) {
                *d -= yy.exp() * sum;
            }
        }
    }
    /// `self = max(softmax(self), floor)` row by row, with a plain sequential sum (Kaldi's
    /// SoftmaxComponent: ApplySoftMaxPerRow, then ApplyFloor).
    pub fn apply_softmax_per_row_floored(&mut self, floor: Real) {
        for r in 0..self.num_rows() {
            let row = self.row_mut(r);
            let m = row.iter().cloned().fold(Real::NEG_INFINITY, Real::max);
            let mut s = 0.0f32;
            for x in row.iter_mut() {
                *x = (*x - m).exp();
                s += *x;
            }
            for x in row.iter_mut() {
                *x /= s;
                if *x < floor {
                    *x = floor;
                }
            }
        }
    }
    /// `self = log_softmax(self)` row by row with the library `exp` and a sequential sum.
    /// Not the same rounding as [`log_softmax_per_row_from`](Self::log_softmax_per_row_from),
    /// which uses the vectorised exp.
    pub fn apply_log_softmax_per_row(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::softmax_rows(self, None, true));
        for r in 0..self.num_rows() {
            let row = self.row_mut(r);
            let m = row.iter().cloned().fold(Real::NEG_INFINITY, Real::max);
            let s: Real = row.iter().map(|&x| (x - m).exp()).sum();
            let lse = m + s.ln();
            for x in row.iter_mut() {
                *x -= lse;
            }
        }
    }
    /// `self = self ⊙ num / den` element-wise, unchanged where `den` is 0 (recovers a dropout
    /// mask from input and output; Kaldi's SetMatMatDivMat with self as the first operand).
    pub fn mul_mat_div_mat(&mut self, num: MatView<'_>, den: MatView<'_>) {
        self.zip2_apply(num, den, |d, n, x| if x == 0.0 { d } else { d * n / x });
    }
    /// `self = s · max(|self| − t, 0)` with s = +1 for positive elements and −1 otherwise
    /// (zero becomes −0): the part of each element beyond ±t.
    pub fn apply_soft_threshold(&mut self, t: Real) {
        self.map_inplace(|x| {
            let sign = if x > 0.0 { 1.0 } else { -1.0 };
            (x.abs() - t).max(0.0) * sign
        });
    }
    /// `self[i, j] += v[j] · (alpha · a[i, j] + beta)` (self-repair of saturating units).
    pub fn add_affine_mat_diag_vec(&mut self, v: &Vector, alpha: Real, a: MatView<'_>, beta: Real) {
        assert_eq!(v.dim(), self.num_cols(), "add_affine_mat_diag_vec: dim");
        assert_eq!(
            (a.num_rows(), a.num_cols()),
            (self.num_rows(), self.num_cols()),
            "add_affine_mat_diag_vec: shape"
        );
        on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ewmv("k_add_affine_mat_diag_vec", self, a, v, alpha, beta));
        let v = &v.data[..];
        for r in 0..self.num_rows() {
            let y = a.row(r);
            for ((d, &yy), &f) in self.row_mut(r).iter_mut().zip(y).zip(v) {
                *d += f * (alpha * yy + beta);
            }
        }
    }
    /// Adds `alpha · v` to `self` read as row-major (Kaldi's CopyRowsFromVec layout), each
    /// product rounded from f64 to f32 before the addition (parameter steps from f64
    /// gradients).
    pub fn add_row_major_f64(&mut self, alpha: f64, v: &Vector64) {
        assert_eq!(
            v.dim(),
            self.num_rows() * self.num_cols(),
            "add_row_major_f64: dim"
        );
        let cols = self.num_cols();
        for r in 0..self.num_rows() {
            let vr = &v.data[r * cols..(r + 1) * cols];
            for (p, d) in self.row_mut(r).iter_mut().zip(vr) {
                *p += (alpha * d) as f32;
            }
        }
    }
}

/// Panics (a programming error: callers check their indexes) when an element lies outside
/// a rows×cols matrix.
fn assert_inside(op: &str, rows: usize, cols: usize, elements: &[(usize, usize, Real)]) {
    if let Some(&(r, c, _)) = elements.iter().find(|&&(r, c, _)| r >= rows || c >= cols) {
        panic!("{op}: ({r}, {c}) outside {rows}x{cols}");
    }
}

/// True when some (r, c) appears twice in `elements`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn repeats_a_position(elements: &[(usize, usize, Real)]) -> bool {
    let mut at: Vec<(usize, usize)> = elements.iter().map(|&(r, c, _)| (r, c)).collect();
    at.sort_unstable();
    at.windows(2).any(|w| w[0] == w[1])
}

impl MatView<'_> {
    /// Σ v · self[r, c] over the elements `(r, c, v)`, in double, added in order (Kaldi's
    /// TraceMatSmat against a sparse matrix). Every (r, c) must lie inside the matrix.
    pub fn dot_elements(&self, elements: &[(usize, usize, Real)]) -> f64 {
        assert_inside("dot_elements", self.num_rows(), self.num_cols(), elements);
        on_device!(self.place.on_device() => super::cuda_ops::element_products(*self, elements).into_iter().sum());
        elements
            .iter()
            .map(|&(r, c, v)| v as f64 * self.get(r, c) as f64)
            .sum()
    }
    /// Sum of all elements.
    pub fn sum(&self) -> Real {
        on_device!(self.place.on_device() => super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Plain).iter().sum::<f64>() as Real);
        (0..self.num_rows())
            .map(|r| self.row(r).iter().sum::<Real>())
            .sum()
    }
    /// Largest absolute value (0 for an empty matrix).
    pub fn max_abs(&self) -> Real {
        (0..self.num_rows())
            .flat_map(|r| self.row(r).iter())
            .fold(0.0, |m, &x| m.max(x.abs()))
    }
    /// Frobenius norm.
    pub fn frobenius_norm(&self) -> Real {
        self.trace_mat_mat(*self).sqrt()
    }
    /// `Σ_ij self[i,j] · b[i,j]` (Kaldi's TraceMatMat(A, B, kTrans)); accumulated in f64.
    pub fn trace_mat_mat(&self, b: MatView<'_>) -> Real {
        on_device!(self.place.on_device() && b.place.on_device() && (self.num_rows(), self.num_cols()) == (b.num_rows(), b.num_cols()) => super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Dot(b)).iter().sum::<f64>() as Real);
        assert_eq!(
            (self.num_rows(), self.num_cols()),
            (b.num_rows(), b.num_cols())
        );
        let mut s = 0.0f64;
        for r in 0..self.num_rows() {
            for (&x, &y) in self.row(r).iter().zip(b.row(r)) {
                s += x as f64 * y as f64;
            }
        }
        s as Real
    }
    /// `v = alpha · (sum over rows) + beta · v`; v has dim = num_cols (Kaldi's AddRowSumMat).
    pub(in crate::matrix) fn add_row_sum_to(&self, v: &mut [Real], alpha: Real, beta: Real) {
        assert_eq!(v.len(), self.num_cols());
        let mut acc = vec![0.0f32; self.num_cols()];
        for r in 0..self.num_rows() {
            for (a, &x) in acc.iter_mut().zip(self.row(r)) {
                *a += x;
            }
        }
        for (y, a) in v.iter_mut().zip(acc) {
            *y = alpha * a + beta * *y;
        }
    }
    /// `v = alpha · (sum over columns) + beta · v`; v has dim = num_rows (Kaldi's AddColSumMat).
    pub(in crate::matrix) fn add_col_sum_to(&self, v: &mut [Real], alpha: Real, beta: Real) {
        assert_eq!(v.len(), self.num_rows());
        for (r, y) in v.iter_mut().enumerate() {
            let s: Real = self.row(r).iter().sum();
            *y = alpha * s + beta * *y;
        }
    }
    /// Per-row dot products `Σ_j self[i,j] · b[i,j]`.
    pub fn row_dot_products(&self, b: MatView<'_>) -> Vector {
        Vector::from_vec(
            (0..self.num_rows())
                .map(|r| self.row(r).iter().zip(b.row(r)).map(|(x, y)| x * y).sum())
                .collect(),
        )
    }
    /// `Σ_j self[i, j]²` for every row (a sequential f32 sum).
    pub fn row_sum_squares(&self) -> Vector {
        on_device!(self.place.on_device() => Vector::from_vec(super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Squares).iter().map(|&x| x as Real).collect()));
        Vector::from_vec(
            (0..self.num_rows())
                .map(|r| self.row(r).iter().map(|x| x * x).sum::<Real>())
                .collect(),
        )
    }
    /// Euclidean norm of every row: the square root of [`row_sum_squares`](Self::row_sum_squares).
    pub fn row_norms(&self) -> Vector {
        let mut n = self.row_sum_squares();
        n.data.iter_mut().for_each(|x| *x = x.sqrt());
        n
    }
    /// Euclidean norm of every column (squares summed row by row in f32).
    pub fn col_norms(&self) -> Vector {
        let mut acc = vec![0.0 as Real; self.num_cols()];
        for r in 0..self.num_rows() {
            for (a, &x) in acc.iter_mut().zip(self.row(r)) {
                *a += x * x;
            }
        }
        Vector::from_vec(acc.into_iter().map(Real::sqrt).collect())
    }
    /// True if `|self − b|_F ≤ tol · max(|self|_F, |b|_F)` (Kaldi's ApproxEqual).
    pub fn approx_equal(&self, b: MatView<'_>, tol: Real) -> bool {
        if (self.num_rows(), self.num_cols()) != (b.num_rows(), b.num_cols()) {
            return false;
        }
        let mut d = self.to_matrix();
        d.view_mut().add_mat(-1.0, b, Trans::No);
        d.view().frobenius_norm() <= tol * self.frobenius_norm().max(b.frobenius_norm())
    }
}

#[cfg(test)]
mod exp_tests {
    use super::*;
    use crate::matrix::Matrix;

    #[test]
    fn log_softmax_matches_the_plain_formula() {
        let mut src = Matrix::zeros(3, 37);
        for r in 0..3 {
            for (c, v) in src.row_mut(r).iter_mut().enumerate() {
                *v = ((r * 13 + c * 7) % 29) as Real * 0.9 - 12.0 - 30.0 * r as Real;
            }
        }
        let mut got = Matrix::zeros(3, 37);
        got.view_mut().log_softmax_per_row_from(src.view());
        for r in 0..3 {
            let row = src.row(r);
            let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
            let lse = m + row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
            for (c, &x) in row.iter().enumerate() {
                let want = x as f64 - lse;
                let g = got.row(r)[c] as f64;
                assert!(
                    (g - want).abs() < 2e-6 * (1.0 + want.abs()),
                    "({r},{c}) {g} vs {want}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::matrix::Matrix;

    #[test]
    fn elements_add_in_order_and_dot_in_double() {
        let mut m = Matrix::from_rows(&[vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
        let el = [(0, 2, 0.5), (1, 0, -1.0), (0, 2, 0.25)];
        m.view_mut().add_elements(2.0, &el);
        assert_eq!(m.to_vec(), vec![1.0, 2.0, 4.5, 2.0, 5.0, 6.0]);
        let dot = m.view().dot_elements(&el);
        assert_eq!(dot, 0.5 * 4.5 - 2.0 + 0.25 * 4.5);
        assert!(super::repeats_a_position(&el));
        assert!(!super::repeats_a_position(&el[..2]));
    }

    #[test]
    #[should_panic(expected = "outside 2x3")]
    fn an_element_outside_the_matrix_is_a_programming_error() {
        Matrix::zeros(2, 3)
            .view_mut()
            .add_elements(1.0, &[(2, 0, 1.0)]);
    }
}
