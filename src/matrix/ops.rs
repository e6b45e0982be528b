//! The rest of the CuMatrix-style op set nnet3 components need: diagonal scalings, grouped
//! reductions (p-norm, max, column ranges, blocks), ReLU helpers, masks, random fills and
//! diagonal reductions. One line of documentation each states the exact semantics.

use super::on_device;
use super::{MatView, MatViewMut, Matrix, Real, Trans, Vector};
use rand::Rng;

/// Transpose in 32×32 tiles so both sides stay in cache.
const TILE: usize = 32;

impl MatViewMut<'_> {
    /// `self[i, j] = alpha · v[i] · op(a)[i, j] + beta · self[i, j]` (Kaldi's AddDiagVecMat).
    pub fn add_diag_vec_mat(
        &mut self,
        alpha: Real,
        v: &Vector,
        a: MatView<'_>,
        ta: Trans,
        beta: Real,
    ) {
        assert_eq!(v.dim(), self.num_rows(), "add_diag_vec_mat: dim");
        match ta {
            Trans::No => {
                assert_eq!(
                    (a.num_rows(), a.num_cols()),
                    (self.num_rows(), self.num_cols())
                );
                for (r, &vr) in v.data.iter().enumerate() {
                    let s = alpha * vr;
                    let src = a.row(r);
                    axpby(self.row_mut(r), s, src, beta);
                }
            }
            Trans::Yes => {
                let at = a_transposed(a);
                self.add_diag_vec_mat(alpha, v, at.view(), Trans::No, beta);
            }
        }
    }
    /// `self[i, j] = alpha · op(a)[i, j] · v[j] + beta · self[i, j]` (Kaldi's AddMatDiagVec).
    pub fn add_mat_diag_vec(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        ta: Trans,
        v: &Vector,
        beta: Real,
    ) {
        assert_eq!(v.dim(), self.num_cols(), "add_mat_diag_vec: dim");
        match ta {
            Trans::No => {
                assert_eq!(
                    (a.num_rows(), a.num_cols()),
                    (self.num_rows(), self.num_cols())
                );
                on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ewmv("k_add_mat_diag_vec", self, a, v, alpha, beta));
                let v = &v.data[..];
                for r in 0..self.num_rows() {
                    let src = a.row(r);
                    let dst = self.row_mut(r);
                    if beta == 0.0 {
                        for ((d, &x), &w) in dst.iter_mut().zip(src).zip(v) {
                            *d = alpha * x * w;
                        }
                    } else {
                        for ((d, &x), &w) in dst.iter_mut().zip(src).zip(v) {
                            *d = alpha * x * w + beta * *d;
                        }
                    }
                }
            }
            Trans::Yes => {
                let at = a_transposed(a);
                self.add_mat_diag_vec(alpha, at.view(), Trans::No, v, beta);
            }
        }
    }
    /// `self = alpha · a ⊙ b + beta · self` element-wise (Kaldi's AddMatMatElements).
    pub fn add_mat_mat_elements(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        b: MatView<'_>,
        beta: Real,
    ) {
        if beta == 0.0 {
            self.zip2_apply(a, b, |_, y, z| alpha * y * z);
        } else {
            self.zip2_apply(a, b, |x, y, z| alpha * y * z + beta * x);
        }
    }
    /// `self = alpha · a + beta · self`, where `a`'s shape is (p·rows) × (q·cols) and the
    /// sum runs over its p × q blocks of self's shape (Kaldi's AddMatBlocks, no transpose).
    pub fn add_mat_blocks(&mut self, alpha: Real, a: MatView<'_>, beta: Real) {
        let (r, c) = (self.num_rows(), self.num_cols());
        assert!(
            r > 0 && c > 0 && a.num_rows().is_multiple_of(r) && a.num_cols().is_multiple_of(c),
            "add_mat_blocks: {}x{} is not a multiple of {r}x{c}",
            a.num_rows(),
            a.num_cols()
        );
        if beta != 1.0 {
            if beta == 0.0 {
                self.set_zero();
            } else {
                self.scale(beta);
            }
        }
        for br in 0..a.num_rows() / r {
            for i in 0..r {
                let src = a.row(br * r + i);
                let dst = self.row_mut(i);
                for block in src.chunks_exact(c) {
                    axpy(dst, alpha, block);
                }
            }
        }
    }
    /// `self[:, c] = Σ_{j ∈ [s, e)} src[:, j]` with `ranges[c] = (s, e)`; an empty range gives
    /// zero (Kaldi's SumColumnRanges).
    pub fn sum_column_ranges(&mut self, src: MatView<'_>, ranges: &[(i32, i32)]) {
        assert_eq!(ranges.len(), self.num_cols(), "sum_column_ranges: dim");
        assert_eq!(src.num_rows(), self.num_rows(), "sum_column_ranges: rows");
        let ranges: Vec<(usize, usize)> = ranges
            .iter()
            .map(|&(s, e)| {
                let (s, e) = (s.max(0) as usize, e.max(0) as usize);
                if e <= s {
                    return (0, 0);
                }
                assert!(
                    e <= src.num_cols(),
                    "sum_column_ranges: range end {e} out of range"
                );
                (s, e)
            })
            .collect();
        for r in 0..self.num_rows() {
            let s = src.row(r);
            for (d, &(a, b)) in self.row_mut(r).iter_mut().zip(&ranges) {
                *d = s[a..b].iter().sum();
            }
        }
    }
    /// `self[i, j] = (Σ_{k in group j} |src[i, k]|^p)^(1/p)` over consecutive groups of
    /// `src.cols / self.cols` columns; `p = ∞` gives the largest |x|, `p = 0` counts non-zeros
    /// (Kaldi's GroupPnorm).
    pub fn group_pnorm_from(&mut self, src: MatView<'_>, p: Real) {
        let g = group_size(self.num_cols(), src, self.num_rows());
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::grouped("k_group_pnorm", self, src, p));
        for r in 0..self.num_rows() {
            let s = src.row(r);
            for (d, grp) in self.row_mut(r).iter_mut().zip(s.chunks_exact(g)) {
                *d = if p == 2.0 {
                    grp.iter().map(|x| x * x).sum::<Real>().sqrt()
                } else if p == 1.0 {
                    grp.iter().map(|x| x.abs()).sum()
                } else if p == Real::INFINITY {
                    grp.iter().fold(0.0, |m, x| m.max(x.abs()))
                } else if p == 0.0 {
                    grp.iter().filter(|&&x| x != 0.0).count() as Real
                } else {
                    grp.iter()
                        .map(|x| x.abs().powf(p))
                        .sum::<Real>()
                        .powf(1.0 / p)
                };
            }
        }
    }
    /// Input derivative of [`group_pnorm_from`](Self::group_pnorm_from):
    /// `self[i, k] = out_deriv[i, j] · sign(x) · |x|^(p−1) · y^(1−p)` with x = in_value[i, k],
    /// y = out_value[i, j] of k's group; zero where y = 0. For p = ∞ the derivative is sign(x)
    /// where |x| = y, else 0 (Kaldi's DiffGroupPnorm).
    pub fn diff_group_pnorm(
        &mut self,
        in_value: MatView<'_>,
        out_value: MatView<'_>,
        out_deriv: MatView<'_>,
        p: Real,
    ) {
        assert_eq!(
            (in_value.num_rows(), in_value.num_cols()),
            (self.num_rows(), self.num_cols())
        );
        assert_eq!(
            (out_value.num_rows(), out_value.num_cols()),
            (out_deriv.num_rows(), out_deriv.num_cols())
        );
        let g = group_size(out_value.num_cols(), in_value, self.num_rows());
        on_device!(self.place.on_device() && in_value.place.on_device() && out_value.place.on_device() && out_deriv.place.on_device() && out_value.num_rows() == self.num_rows() => super::cuda_ops::group_deriv(self, in_value, out_value, out_deriv, super::cuda_ops::GroupDeriv::Pnorm(p)));
        for r in 0..self.num_rows() {
            let (xs, ys, ds) = (in_value.row(r), out_value.row(r), out_deriv.row(r));
            for ((dst, x), (&y, &od)) in self
                .row_mut(r)
                .chunks_exact_mut(g)
                .zip(xs.chunks_exact(g))
                .zip(ys.iter().zip(ds))
            {
                for (d, &x) in dst.iter_mut().zip(x) {
                    *d = if y == 0.0 {
                        0.0
                    } else if p == 2.0 {
                        od * x / y
                    } else if p == 1.0 {
                        od * sign(x)
                    } else if p == Real::INFINITY {
                        if x.abs() == y {
                            od * sign(x)
                        } else {
                            0.0
                        }
                    } else {
                        od * sign(x) * x.abs().powf(p - 1.0) * y.powf(1.0 - p)
                    };
                }
            }
        }
    }
    /// `self[i, j] = ‖src[i, j·g .. (j+1)·g]‖₂` with g = src.cols / self.cols, a sequential
    /// f32 sum of squares (the p = 2 case of [`group_pnorm_from`](Self::group_pnorm_from),
    /// without its general power).
    pub fn group_2norm_from(&mut self, src: MatView<'_>) {
        let g = src.num_cols() / self.num_cols().max(1);
        on_device!(self.place.on_device() && src.place.on_device() && g > 0 && src.num_rows() == self.num_rows() => super::cuda_ops::grouped("k_group_pnorm", self, src, 2.0));
        for r in 0..self.num_rows() {
            let s = src.row(r);
            for (x, grp) in self.row_mut(r).iter_mut().zip(s.chunks(g)) {
                *x = grp.iter().map(|v| v * v).sum::<Real>().sqrt();
            }
        }
    }
    /// Input derivative of [`group_2norm_from`](Self::group_2norm_from):
    /// `self[i, k] = x[i, k] · dy[i, j] / y[i, j]` for k in group j, 0 where y = 0.
    pub fn diff_group_2norm(&mut self, x: MatView<'_>, y: MatView<'_>, dy: MatView<'_>) {
        let g = self.num_cols() / y.num_cols().max(1);
        on_device!(self.place.on_device() && x.place.on_device() && y.place.on_device() && dy.place.on_device() && g > 0 && (x.num_rows(), x.num_cols()) == (self.num_rows(), self.num_cols()) && y.num_rows() == self.num_rows() && dy.num_rows() == self.num_rows() && dy.num_cols() == y.num_cols() => super::cuda_ops::group_deriv(self, x, y, dy, super::cuda_ops::GroupDeriv::TwoNorm));
        for r in 0..self.num_rows() {
            let (xr, yr, dr) = (x.row(r), y.row(r), dy.row(r));
            for (j, (out, xin)) in self.row_mut(r).chunks_mut(g).zip(xr.chunks(g)).enumerate() {
                let f = if yr[j] != 0.0 { dr[j] / yr[j] } else { 0.0 };
                for (o, &xv) in out.iter_mut().zip(xin) {
                    *o = xv * f;
                }
            }
        }
    }
    /// `self[i, j] = max_{k in group j} src[i, k]` over consecutive groups (Kaldi's GroupMax).
    pub fn group_max_from(&mut self, src: MatView<'_>) {
        let g = group_size(self.num_cols(), src, self.num_rows());
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::grouped("k_group_max", self, src, 0.0));
        for r in 0..self.num_rows() {
            let s = src.row(r);
            for (d, grp) in self.row_mut(r).iter_mut().zip(s.chunks_exact(g)) {
                *d = grp.iter().copied().fold(Real::NEG_INFINITY, Real::max);
            }
        }
    }
    /// `self[i, k] = 1` where `in_value[i, k]` equals its group's max `out_value[i, j]`, else 0
    /// (Kaldi's GroupMaxDeriv; multiply by the output derivative afterwards).
    pub fn group_max_deriv(&mut self, in_value: MatView<'_>, out_value: MatView<'_>) {
        assert_eq!(
            (in_value.num_rows(), in_value.num_cols()),
            (self.num_rows(), self.num_cols())
        );
        let g = group_size(out_value.num_cols(), in_value, self.num_rows());
        on_device!(self.place.on_device() && in_value.place.on_device() && out_value.place.on_device() && out_value.num_rows() == self.num_rows() => super::cuda_ops::group_deriv(self, in_value, out_value, out_value, super::cuda_ops::GroupDeriv::MaxMask));
        for r in 0..self.num_rows() {
            let (xs, ys) = (in_value.row(r), out_value.row(r));
            for ((dst, x), &y) in self
                .row_mut(r)
                .chunks_exact_mut(g)
                .zip(xs.chunks_exact(g))
                .zip(ys)
            {
                for (d, &x) in dst.iter_mut().zip(x) {
                    *d = if x == y { 1.0 } else { 0.0 };
                }
            }
        }
    }
    /// `self = sign(self) · |self|^p` if `include_sign`, else `|self|^p` (Kaldi's ApplyPowAbs).
    pub fn apply_pow_abs(&mut self, p: Real, include_sign: bool) {
        if include_sign {
            self.map_inplace(|x| sign(x) * x.abs().powf(p));
        } else {
            self.map_inplace(|x| x.abs().powf(p));
        }
    }
    /// `self = |self|`.
    pub fn apply_abs(&mut self) {
        on_device!(self.place.on_device() => super::cuda_ops::ew("k_abs", self, &[], 0.0, 0.0));
        self.map_inplace(Real::abs);
    }
    /// `self = 1 / self`.
    pub fn invert_elements(&mut self) {
        self.map_inplace(|x| 1.0 / x);
    }
    /// `self = max(self, a)` element-wise (Kaldi's Max(A)).
    pub fn max_with(&mut self, a: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ew("k_max_with", self, &[a], 0.0, 0.0));
        self.zip_apply(a, |x, y| if y > x { y } else { x });
    }
    /// `self = min(self, a)` element-wise (Kaldi's Min(A)).
    pub fn min_with(&mut self, a: MatView<'_>) {
        on_device!(self.place.on_device() && a.place.on_device() => super::cuda_ops::ew("k_min_with", self, &[a], 0.0, 0.0));
        self.zip_apply(a, |x, y| if y < x { y } else { x });
    }
    /// `self = max(src, 0)` (the ReLU forward).
    pub fn relu_from(&mut self, src: MatView<'_>) {
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::ew("k_relu_from", self, &[src], 0.0, 0.0));
        self.zip_apply(src, |_, x| if x > 0.0 { x } else { 0.0 });
    }
    /// `self = out_deriv ⊙ [value > 0]` (the ReLU backward; value = ReLU output).
    pub fn diff_relu(&mut self, value: MatView<'_>, out_deriv: MatView<'_>) {
        on_device!(self.place.on_device() && value.place.on_device() && out_deriv.place.on_device() => super::cuda_ops::ew("k_diff_relu", self, &[value, out_deriv], 0.0, 0.0));
        self.zip2_apply(value, out_deriv, |_, y, d| if y > 0.0 { d } else { 0.0 });
    }
    /// `self = log(1 + exp(src))`, computed stably (Kaldi's SoftHinge).
    pub fn soft_hinge_from(&mut self, src: MatView<'_>) {
        self.zip_apply(src, |_, x| {
            if x > 10.0 {
                x + (-x).exp().ln_1p()
            } else {
                x.exp().ln_1p()
            }
        });
    }
    /// `self = 1` where `a == b` element-wise, else 0 (Kaldi's EqualElementMask).
    pub fn equal_element_mask(&mut self, a: MatView<'_>, b: MatView<'_>) {
        self.zip2_apply(a, b, |_, x, y| if x == y { 1.0 } else { 0.0 });
    }
    /// `self = a ⊙ b / c`, except `self = a` where `c == 0` (Kaldi's SetMatMatDivMat).
    pub fn set_mat_mat_div_mat(&mut self, a: MatView<'_>, b: MatView<'_>, c: MatView<'_>) {
        self.zip2_apply(a, b, |_, x, y| x * y);
        assert_eq!(
            (c.num_rows(), c.num_cols()),
            (self.num_rows(), self.num_cols())
        );
        for r in 0..self.num_rows() {
            let (ra, rc) = (a.row(r), c.row(r));
            for ((d, &x), &z) in self.row_mut(r).iter_mut().zip(ra).zip(rc) {
                *d = if z == 0.0 { x } else { *d / z };
            }
        }
    }
    /// `self[i, cols[i]] += alpha` where `cols[i] ≥ 0` (Kaldi's AddToElements).
    pub fn add_to_elements(&mut self, alpha: Real, cols: &[i32]) {
        assert_eq!(cols.len(), self.num_rows(), "add_to_elements: dim");
        for (r, &c) in cols.iter().enumerate() {
            if c >= 0 {
                self.row_mut(r)[c as usize] += alpha;
            }
        }
    }
    /// Every row becomes `v` (Kaldi's CopyRowsFromVec with a vector of dimension num_cols).
    pub fn copy_from_vec_rows(&mut self, v: &Vector) {
        assert_eq!(v.dim(), self.num_cols(), "copy_from_vec_rows: dim");
        for r in 0..self.num_rows() {
            self.row_mut(r).copy_from_slice(&v.data);
        }
    }
    /// Every column becomes `v` (Kaldi's CopyColsFromVec with a vector of dimension num_rows).
    pub fn copy_from_vec_cols(&mut self, v: &Vector) {
        assert_eq!(v.dim(), self.num_rows(), "copy_from_vec_cols: dim");
        for (r, &x) in v.data.iter().enumerate() {
            self.row_mut(r).fill(x);
        }
    }
    /// Fills the matrix row by row from a row-major slice of length rows × cols (Kaldi's
    /// CopyRowsFromVec with a vector of dimension rows · cols).
    pub fn copy_from_row_major(&mut self, v: &[Real]) {
        let c = self.num_cols();
        assert_eq!(v.len(), self.num_rows() * c, "copy_from_row_major: length");
        if c == 0 {
            return;
        }
        for (r, src) in v.chunks_exact(c).enumerate() {
            self.row_mut(r).copy_from_slice(src);
        }
    }
    /// Fills with uniform random numbers in [0, 1) (Kaldi's SetRandUniform).
    pub fn set_rand_uniform<R: Rng + ?Sized>(&mut self, rng: &mut R) {
        for r in 0..self.num_rows() {
            for x in self.row_mut(r) {
                *x = rng.random::<Real>();
            }
        }
    }
    /// Fills with standard normal random numbers (Box–Muller; Kaldi's SetRandn).
    pub fn set_randn<R: Rng + ?Sized>(&mut self, rng: &mut R) {
        self.set_zero();
        self.add_randn(1.0, rng);
    }
    /// `self += stddev · N(0, 1)` element-wise (Kaldi's AddRandn-style perturbation).
    pub fn add_randn<R: Rng + ?Sized>(&mut self, stddev: Real, rng: &mut R) {
        for r in 0..self.num_rows() {
            for pair in self.row_mut(r).chunks_mut(2) {
                let (a, b) = gauss_pair(rng);
                pair[0] += stddev * a;
                if let Some(y) = pair.get_mut(1) {
                    *y += stddev * b;
                }
            }
        }
    }
}

impl MatView<'_> {
    /// `v = alpha · diag(op(self) · op(self)ᵀ) + beta · v`: per-row sums of squares for
    /// `Trans::No` (v has num_rows entries), per-column for `Trans::Yes` (Kaldi's AddDiagMat2).
    pub(in crate::matrix) fn add_diag_mat2_to(
        &self,
        v: &mut [Real],
        alpha: Real,
        t: Trans,
        beta: Real,
    ) {
        match t {
            Trans::No => {
                assert_eq!(v.len(), self.num_rows(), "add_diag_mat2: dim");
                for (r, y) in v.iter_mut().enumerate() {
                    let row = self.row(r);
                    let s = super::dot(row, row);
                    *y = if beta == 0.0 {
                        alpha * s
                    } else {
                        alpha * s + beta * *y
                    };
                }
            }
            Trans::Yes => {
                assert_eq!(v.len(), self.num_cols(), "add_diag_mat2: dim");
                let mut acc = vec![0.0 as Real; self.num_cols()];
                for r in 0..self.num_rows() {
                    for (a, &x) in acc.iter_mut().zip(self.row(r)) {
                        *a += x * x;
                    }
                }
                blend(v, alpha, &acc, beta);
            }
        }
    }
    /// `v = alpha · diag(op(self) · op(b)) + beta · v` (Kaldi's AddDiagMatMat): for
    /// (No, Yes) the per-row dot products of self and b, for (Yes, No) the per-column ones.
    pub(in crate::matrix) fn add_diag_mat_mat_to(
        &self,
        v: &mut [Real],
        alpha: Real,
        ta: Trans,
        b: MatView<'_>,
        tb: Trans,
        beta: Real,
    ) {
        let (m, k) = match ta {
            Trans::No => (self.num_rows(), self.num_cols()),
            Trans::Yes => (self.num_cols(), self.num_rows()),
        };
        let (k2, n) = match tb {
            Trans::No => (b.num_rows(), b.num_cols()),
            Trans::Yes => (b.num_cols(), b.num_rows()),
        };
        assert!(
            k == k2 && m == n && v.len() == m,
            "add_diag_mat_mat: shapes"
        );
        let mut acc = vec![0.0 as Real; m];
        match (ta, tb) {
            (Trans::No, Trans::Yes) => {
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = super::dot(self.row(i), b.row(i));
                }
            }
            (Trans::Yes, Trans::No) => {
                for l in 0..k {
                    for ((a, &x), &y) in acc.iter_mut().zip(self.row(l)).zip(b.row(l)) {
                        *a += x * y;
                    }
                }
            }
            (Trans::No, Trans::No) => {
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = self
                        .row(i)
                        .iter()
                        .enumerate()
                        .map(|(l, &x)| x * b.get(l, i))
                        .sum();
                }
            }
            (Trans::Yes, Trans::Yes) => {
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = b
                        .row(i)
                        .iter()
                        .enumerate()
                        .map(|(l, &y)| self.get(l, i) * y)
                        .sum();
                }
            }
        }
        blend(v, alpha, &acc, beta);
    }
    /// Largest element of each row (−∞ for an empty row).
    pub fn row_max(&self) -> Vector {
        Vector::from_vec(
            (0..self.num_rows())
                .map(|r| {
                    self.row(r)
                        .iter()
                        .copied()
                        .fold(Real::NEG_INFINITY, Real::max)
                })
                .collect(),
        )
    }
    /// Column of the largest element of each row, first on ties; −1 for an empty row
    /// (Kaldi's FindRowMaxId).
    pub fn row_max_index(&self) -> Vec<i32> {
        (0..self.num_rows())
            .map(|r| {
                let mut best = (-1i32, Real::NEG_INFINITY);
                for (c, &x) in self.row(r).iter().enumerate() {
                    if best.0 < 0 || x > best.1 {
                        best = (c as i32, x);
                    }
                }
                best.0
            })
            .collect()
    }
    /// Largest element (−∞ for an empty matrix).
    pub fn max(&self) -> Real {
        self.row_max()
            .data
            .iter()
            .copied()
            .fold(Real::NEG_INFINITY, Real::max)
    }
    /// Smallest element (+∞ for an empty matrix).
    pub fn min(&self) -> Real {
        (0..self.num_rows())
            .flat_map(|r| self.row(r).iter().copied())
            .fold(Real::INFINITY, Real::min)
    }
    /// True if every element is finite.
    pub fn is_finite(&self) -> bool {
        // Squares of finite floats summed in double stay finite; NaN and ∞ carry through.
        on_device!(self.place.on_device() => super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Squares).iter().all(|s| s.is_finite()));
        (0..self.num_rows()).all(|r| self.row(r).iter().all(|x| x.is_finite()))
    }
    /// How many elements are NaN or infinite.
    pub fn count_non_finite(&self) -> usize {
        (0..self.num_rows())
            .map(|r| self.row(r).iter().filter(|x| !x.is_finite()).count())
            .sum()
    }
}

/// `dst = s · src + beta · dst` (beta = 0: dst is not read).
#[inline]
fn axpby(dst: &mut [Real], s: Real, src: &[Real], beta: Real) {
    if beta == 0.0 {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = s * x;
        }
    } else {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = s * x + beta * *d;
        }
    }
}

/// `dst += s · src`.
#[inline]
pub(crate) fn axpy(dst: &mut [Real], s: Real, src: &[Real]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d += s * x;
    }
}

/// `v = alpha · acc + beta · v` (beta = 0: v is not read).
fn blend(v: &mut [Real], alpha: Real, acc: &[Real], beta: Real) {
    for (y, &a) in v.iter_mut().zip(acc) {
        *y = if beta == 0.0 {
            alpha * a
        } else {
            alpha * a + beta * *y
        };
    }
}

/// Sign as Kaldi uses it in derivatives: −1, 0 or +1.
#[inline]
fn sign(x: Real) -> Real {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

/// The group size for a grouped reduction of `src` into `out_cols` columns.
fn group_size(out_cols: usize, src: MatView<'_>, rows: usize) -> usize {
    assert_eq!(src.num_rows(), rows, "grouped op: rows");
    assert!(
        out_cols > 0 && src.num_cols().is_multiple_of(out_cols),
        "grouped op: {} input columns do not divide into {out_cols} groups",
        src.num_cols()
    );
    src.num_cols() / out_cols
}

fn a_transposed(a: MatView<'_>) -> Matrix {
    let mut t = Matrix::zeros(a.num_cols(), a.num_rows());
    t.view_mut().copy_from_trans(a);
    t
}

/// Two independent N(0, 1) samples (Box–Muller).
fn gauss_pair<R: Rng + ?Sized>(rng: &mut R) -> (Real, Real) {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: log is finite
    let u2: f64 = rng.random::<f64>();
    let r = (-2.0 * u1.ln()).sqrt();
    let th = 2.0 * std::f64::consts::PI * u2;
    ((r * th.cos()) as Real, (r * th.sin()) as Real)
}

/// Tiled transpose kernel shared by `copy_from_trans` and `add_mat(Trans::Yes)`:
/// `dst[r, c] = f(dst[r, c], src[c, r])`.
pub(crate) fn transpose_apply(
    dst: &mut MatViewMut<'_>,
    src: MatView<'_>,
    f: impl Fn(Real, Real) -> Real,
) {
    assert_eq!(
        (dst.num_rows(), dst.num_cols()),
        (src.num_cols(), src.num_rows()),
        "transpose: shape"
    );
    let (rows, cols) = (dst.num_rows(), dst.num_cols());
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        for c0 in (0..cols).step_by(TILE) {
            let c1 = (c0 + TILE).min(cols);
            // The tile's source rows, sliced once (not once per element).
            let mut tile: [&[Real]; TILE] = [&[]; TILE];
            for (t, c) in tile.iter_mut().zip(c0..c1) {
                *t = &src.row(c)[r0..r1];
            }
            let tile = &tile[..c1 - c0];
            for r in r0..r1 {
                let d = &mut dst.row_mut(r)[c0..c1];
                for (x, s) in d.iter_mut().zip(tile) {
                    *x = f(*x, s[r - r0]);
                }
            }
        }
    }
}

impl MatView<'_> {
    /// Sum of the diagonal elements (Kaldi's Trace), accumulated in f64.
    pub fn trace(&self) -> Real {
        let n = self.num_rows().min(self.num_cols());
        (0..n).map(|i| self.get(i, i) as f64).sum::<f64>() as Real
    }
}

impl MatViewMut<'_> {
    /// Adds `alpha` to every diagonal element (Kaldi's AddToDiag).
    pub fn add_to_diag(&mut self, alpha: Real) {
        let n = self.num_rows().min(self.num_cols());
        for i in 0..n {
            let v = self.get(i, i);
            self.set(i, i, v + alpha);
        }
    }
}
