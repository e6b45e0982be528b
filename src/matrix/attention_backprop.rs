//! Restricted attention's backward pass for one head, fused into one walk over the output
//! rows (what the windowed products of `attention.rs`, `add_mat` and
//! `diff_softmax_per_row` compute in five passes over the whole head). Output row i visits
//! each of its window rows `i + o·row_shift` once per pass and does all the work on it
//! while it is in L1; the derivative rows of a window row are shared by C output rows, which
//! run one after the other, so they stay in cache between them. Nothing is allocated per
//! row: the C scores of a row live in two small buffers reused across rows.

use super::{MatView, MatViewMut, Real};

/// Lanes of the partial sums (one AVX-512 vector, two AVX2 ones).
const LANES: usize = 16;

impl MatViewMut<'_> {
    /// One head of `RestrictedAttentionComponent`'s backprop, added to `self` (Kaldi has no
    /// single name for it). `input` and `self` are the head's input rows and their
    /// derivative, columns `key (K), value (V), query key (K), query context (C)`; the
    /// queries of output row i are in input row `rows_left + i`, its window rows are
    /// `r_o = i + o·row_shift` for o = 0..C. `weights` (N × C) are the softmax weights c the
    /// forward pass kept, `out_deriv` (N × V, or N × (V + C) with output-context) the
    /// output's derivative. Per output row:
    ///
    /// ```text
    /// dc_o = out_deriv_i[..V] · value(r_o)  (+ out_deriv_i[V + o] with output-context)
    /// db_o = c_o · (dc_o − Σ_p c_p · dc_p)                  (the softmax's backprop)
    /// query context_i[o] += db_o        query key_i += key_scale · Σ_o db_o · key(r_o)
    /// key(r_o) += key_scale · db_o · query key_i      value(r_o) += c_o · out_deriv_i[..V]
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn add_restricted_attention_backprop(
        &mut self,
        input: MatView<'_>,
        weights: MatView<'_>,
        out_deriv: MatView<'_>,
        rows_left: usize,
        key_dim: usize,
        key_scale: Real,
        row_shift: usize,
    ) {
        let (n, c) = (weights.num_rows(), weights.num_cols());
        let rows_in = input.num_rows();
        assert!(
            c >= 1 && input.num_cols() >= 2 * key_dim + c,
            "add_restricted_attention_backprop: input columns"
        );
        let value_dim = input.num_cols() - 2 * key_dim - c;
        assert!(
            self.num_rows() == rows_in
                && self.num_cols() == input.num_cols()
                && out_deriv.num_rows() == n
                && (out_deriv.num_cols() == value_dim || out_deriv.num_cols() == value_dim + c)
                && rows_in == n + (c - 1) * row_shift
                && rows_left + n <= rows_in,
            "add_restricted_attention_backprop: {rows_in} input rows, {n} output rows, \
             {c} context positions {row_shift} rows apart, {rows_left} rows on the left"
        );
        if n == 0 {
            return;
        }
        let deriv_stride = self.stride();
        head_backprop(HeadBackprop {
            deriv: self.as_mut_slice(),
            deriv_stride,
            input: input.as_slice(),
            input_stride: input.stride(),
            weights: weights.as_slice(),
            weights_stride: weights.stride(),
            out_deriv: out_deriv.as_slice(),
            out_deriv_stride: out_deriv.stride(),
            output_context: out_deriv.num_cols() > value_dim,
            rows: n,
            rows_left,
            row_shift,
            context: c,
            key_dim,
            value_dim,
            key_scale,
        });
        super::check::check_finite("add_restricted_attention_backprop", self.as_view());
    }
}

/// One head's operands as slices with their row strides (in elements).
struct HeadBackprop<'a> {
    deriv: &'a mut [Real],
    deriv_stride: usize,
    input: &'a [Real],
    input_stride: usize,
    weights: &'a [Real],
    weights_stride: usize,
    out_deriv: &'a [Real],
    out_deriv_stride: usize,
    output_context: bool,
    rows: usize,
    rows_left: usize,
    row_shift: usize,
    context: usize,
    key_dim: usize,
    value_dim: usize,
    key_scale: Real,
}

/// The two inner loops, portable or with intrinsics; both round every sum the same way, so
/// the results are equal bit for bit.
trait Kernels {
    /// Returns `a · b` (16 lanes over the 16-column blocks, summed by [`lane_sum`], plus the
    /// remaining columns in order) and adds `scale · a` to `y`. All three have one length.
    ///
    /// # Safety
    /// The CPU must have the instruction set of the implementation.
    unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real;

    /// Output row i's keys and query key part: `key_deriv(r_o) += s_o · query_i` and
    /// `query_deriv_i += Σ_o s_o · key(r_o)`, the sum in position order per column.
    ///
    /// # Safety
    /// As above, and `h` must have passed [`check_extents`].
    unsafe fn keys_and_query(h: &mut HeadBackprop<'_>, i: usize, s: &[Real]);

    /// Asks for the cache lines output row i will be the first to touch: the head's part of
    /// the window's last row (input and derivative), its out_deriv and weights rows. The
    /// window's rows are a page or more apart, which the hardware prefetchers do not follow.
    ///
    /// # Safety
    /// As [`Kernels::keys_and_query`]; i < h.rows.
    #[inline(always)]
    unsafe fn prefetch(_h: &HeadBackprop<'_>, _i: usize) {}
}

/// How many output rows ahead [`Kernels::prefetch`] asks for the lines.
const AHEAD: usize = 8;

/// The extents every access stays within (so that the kernels may use raw pointers).
fn check_extents(h: &HeadBackprop<'_>) {
    let (c, last) = (h.context, h.rows.saturating_sub(1));
    let last_in = last + (c - 1) * h.row_shift;
    let cols = 2 * h.key_dim + h.value_dim + c;
    let od_cols = h.value_dim + if h.output_context { c } else { 0 };
    assert!(
        h.rows == 0
            || h.rows_left + last <= last_in
                && last_in * h.input_stride + cols <= h.input.len()
                && last_in * h.deriv_stride + cols <= h.deriv.len()
                && last * h.weights_stride + c <= h.weights.len()
                && last * h.out_deriv_stride + od_cols <= h.out_deriv.len(),
        "restricted attention backprop: extents"
    );
}

/// All output rows of one head: with AVX2 through the intrinsics, else portably.
fn head_backprop(mut h: HeadBackprop<'_>) {
    check_extents(&h);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 and the extents were checked.
        unsafe { x86::head_rows(&mut h) };
        return;
    }
    // SAFETY: the portable kernels need nothing, and the extents were checked.
    unsafe { rows::<Portable>(&mut h) };
}

/// [`head_backprop`] without the intrinsics (the path of other CPUs; the tests compare the
/// two).
#[cfg(test)]
fn head_backprop_portable(mut h: HeadBackprop<'_>) {
    check_extents(&h);
    // SAFETY: as above.
    unsafe { rows::<Portable>(&mut h) };
}

/// The output rows in order.
///
/// # Safety
/// As [`Kernels::keys_and_query`].
#[inline(always)]
unsafe fn rows<K: Kernels>(h: &mut HeadBackprop<'_>) {
    let (c, kd, vd) = (h.context, h.key_dim, h.value_dim);
    // Column offsets within a row of the head.
    let (value_col, context_col) = (kd, 2 * kd + vd);
    let mut dc = vec![0.0 as Real; c];
    let mut db = vec![0.0 as Real; c];
    for i in 0..h.rows {
        if i + AHEAD < h.rows {
            K::prefetch(h, i + AHEAD);
        }
        let od = &h.out_deriv[i * h.out_deriv_stride..][..vd];
        let w = &h.weights[i * h.weights_stride..][..c];
        // Through the weighted sum: dc, and the values' derivative (it needs only c).
        for o in 0..c {
            let r = i + o * h.row_shift;
            let value = &h.input[r * h.input_stride + value_col..][..vd];
            let value_deriv = &mut h.deriv[r * h.deriv_stride + value_col..][..vd];
            dc[o] = K::dot_and_add_scaled(od, value, value_deriv, w[o]);
        }
        if h.output_context {
            let od_context = &h.out_deriv[i * h.out_deriv_stride + vd..][..c];
            for (d, &x) in dc.iter_mut().zip(od_context) {
                *d += x;
            }
        }
        // Through the softmax: db = c ⊙ (dc − c·dc), into the query's context part.
        let mut cdc = 0.0 as Real;
        for (&wo, &d) in w.iter().zip(dc.iter()) {
            cdc += wo * d;
        }
        let q_row = (h.rows_left + i) * h.deriv_stride;
        let context_deriv = &mut h.deriv[q_row + context_col..][..c];
        for ((b, (&wo, &d)), y) in db.iter_mut().zip(w.iter().zip(&dc)).zip(context_deriv) {
            *b = wo * (d - cdc);
            *y += *b;
            *b *= h.key_scale;
        }
        // Through the key·query products.
        K::keys_and_query(h, i, &db);
    }
}

/// The kernels in plain Rust.
struct Portable;

impl Kernels for Portable {
    #[inline(always)]
    unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real {
        let n = a.len() / LANES * LANES;
        let mut lanes = [0.0 as Real; LANES];
        for j in (0..n).step_by(LANES) {
            for l in 0..LANES {
                lanes[l] += a[j + l] * b[j + l];
                y[j + l] += scale * a[j + l];
            }
        }
        let mut tail = 0.0 as Real;
        for ((&a, &b), y) in a[n..].iter().zip(&b[n..]).zip(&mut y[n..]) {
            tail += a * b;
            *y += scale * a;
        }
        lane_sum(&lanes) + tail
    }

    #[inline(always)]
    unsafe fn keys_and_query(h: &mut HeadBackprop<'_>, i: usize, s: &[Real]) {
        let query_col = h.key_dim + h.value_dim;
        let q_in = (h.rows_left + i) * h.input_stride + query_col;
        let q_deriv = (h.rows_left + i) * h.deriv_stride + query_col;
        for j in 0..h.key_dim {
            let q = h.input[q_in + j];
            let mut acc = 0.0 as Real;
            for (o, &s) in s.iter().enumerate() {
                let r = i + o * h.row_shift;
                acc += s * h.input[r * h.input_stride + j];
                h.deriv[r * h.deriv_stride + j] += s * q;
            }
            h.deriv[q_deriv + j] += acc;
        }
    }
}

/// The sum of the lanes by pairwise halving (l + l+8, then l + l+4, then (0+2) + (1+3)).
#[inline(always)]
fn lane_sum(lanes: &[Real; LANES]) -> Real {
    let mut s8 = [0.0 as Real; 8];
    for l in 0..8 {
        s8[l] = lanes[l] + lanes[l + 8];
    }
    let mut s4 = [0.0 as Real; 4];
    for l in 0..4 {
        s4[l] = s8[l] + s8[l + 4];
    }
    (s4[0] + s4[2]) + (s4[1] + s4[3])
}

/// The kernels with AVX2 intrinsics (the compiler turned the portable loops into 2-lane
/// code with scalar stores here). No fused multiply-add, so they round as the portable ones.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{rows, HeadBackprop, Kernels, Real, LANES};
    use std::arch::x86_64::*;

    /// [`rows`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, and `h` must have passed `check_extents`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn head_rows(h: &mut HeadBackprop<'_>) {
        rows::<Avx2>(h)
    }

    struct Avx2;

    impl Kernels for Avx2 {
        #[inline(always)]
        unsafe fn dot_and_add_scaled(a: &[Real], b: &[Real], y: &mut [Real], scale: Real) -> Real {
            let len = a.len().min(b.len()).min(y.len());
            let n = len / LANES * LANES;
            let (pa, pb, py) = (a.as_ptr(), b.as_ptr(), y.as_mut_ptr());
            let sv = _mm256_set1_ps(scale);
            let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut j = 0;
            while j < n {
                let (a0, a1) = (_mm256_loadu_ps(pa.add(j)), _mm256_loadu_ps(pa.add(j + 8)));
                let (b0, b1) = (_mm256_loadu_ps(pb.add(j)), _mm256_loadu_ps(pb.add(j + 8)));
                lo = _mm256_add_ps(lo, _mm256_mul_ps(a0, b0));
                hi = _mm256_add_ps(hi, _mm256_mul_ps(a1, b1));
                let y0 = _mm256_add_ps(_mm256_loadu_ps(py.add(j)), _mm256_mul_ps(sv, a0));
                let y1 = _mm256_add_ps(_mm256_loadu_ps(py.add(j + 8)), _mm256_mul_ps(sv, a1));
                _mm256_storeu_ps(py.add(j), y0);
                _mm256_storeu_ps(py.add(j + 8), y1);
                j += LANES;
            }
            let mut tail = 0.0 as Real;
            for j in n..len {
                tail += a[j] * b[j];
                y[j] += scale * a[j];
            }
            // The halving sum of `lane_sum`: l + l+8, l + l+4, then (0+2) + (1+3).
            let s8 = _mm256_add_ps(lo, hi);
            let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
            let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
            _mm_cvtss_f32(s1) + tail
        }

        #[inline(always)]
        unsafe fn keys_and_query(h: &mut HeadBackprop<'_>, i: usize, s: &[Real]) {
            let (kd, shift) = (h.key_dim, h.row_shift);
            let query_col = kd + h.value_dim;
            let input = h.input.as_ptr().add(i * h.input_stride);
            let deriv = h.deriv.as_mut_ptr().add(i * h.deriv_stride);
            let q = h
                .input
                .as_ptr()
                .add((h.rows_left + i) * h.input_stride + query_col);
            let qd = h
                .deriv
                .as_mut_ptr()
                .add((h.rows_left + i) * h.deriv_stride + query_col);
            let (in_step, d_step) = (shift * h.input_stride, shift * h.deriv_stride);
            // Every column is independent here, so 8-wide blocks round as the scalar loop.
            let n = kd / 8 * 8;
            let mut j = 0;
            while j < n {
                let qv = _mm256_loadu_ps(q.add(j));
                let mut acc = _mm256_setzero_ps();
                for (o, &so) in s.iter().enumerate() {
                    let sv = _mm256_set1_ps(so);
                    let key = _mm256_loadu_ps(input.add(o * in_step + j));
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(sv, key));
                    let kp = deriv.add(o * d_step + j);
                    _mm256_storeu_ps(
                        kp,
                        _mm256_add_ps(_mm256_loadu_ps(kp), _mm256_mul_ps(sv, qv)),
                    );
                }
                _mm256_storeu_ps(qd.add(j), _mm256_add_ps(_mm256_loadu_ps(qd.add(j)), acc));
                j += 8;
            }
            for j in n..kd {
                let qj = *q.add(j);
                let mut acc = 0.0 as Real;
                for (o, &so) in s.iter().enumerate() {
                    acc += so * *input.add(o * in_step + j);
                    *deriv.add(o * d_step + j) += so * qj;
                }
                *qd.add(j) += acc;
            }
        }

        #[inline(always)]
        unsafe fn prefetch(h: &HeadBackprop<'_>, i: usize) {
            let c = h.context;
            let r = i + (c - 1) * h.row_shift;
            let cols = 2 * h.key_dim + h.value_dim + c;
            let od_cols = h.value_dim + if h.output_context { c } else { 0 };
            lines(h.input.as_ptr().add(r * h.input_stride), cols);
            lines(h.deriv.as_ptr().add(r * h.deriv_stride), cols);
            lines(h.out_deriv.as_ptr().add(i * h.out_deriv_stride), od_cols);
            lines(h.weights.as_ptr().add(i * h.weights_stride), c);
        }
    }

    /// Prefetches the cache lines of `n` elements from `p`.
    #[inline(always)]
    unsafe fn lines(p: *const Real, n: usize) {
        // 16 elements to a 64-byte line; the last element covers the last line.
        let mut k = 0;
        while k < n {
            _mm_prefetch::<_MM_HINT_T0>(p.add(k) as *const i8);
            k += 16;
        }
        _mm_prefetch::<_MM_HINT_T0>(p.add(n - 1) as *const i8);
    }
}

#[cfg(test)]
mod tests {
    use super::{head_backprop_portable, HeadBackprop};
    use crate::matrix::{pseudo_random as m, MatView, MatViewMut, Matrix, Real, Trans};

    /// The five passes the component made before the fused kernel (kept as the reference):
    /// dc from the windowed dot products (plus the context columns of out_deriv), the
    /// softmax's backprop, then the query context, query key, key and value derivatives.
    #[allow(clippy::too_many_arguments)]
    fn five_passes(
        deriv: &mut MatViewMut<'_>,
        input: MatView<'_>,
        weights: MatView<'_>,
        out_deriv: MatView<'_>,
        rows_left: usize,
        kd: usize,
        key_scale: Real,
        shift: usize,
    ) {
        let (n, c, rows_in) = (weights.num_rows(), weights.num_cols(), input.num_rows());
        let vd = input.num_cols() - 2 * kd - c;
        let od_values = out_deriv.cols_range(0, vd);
        let mut c_deriv = Matrix::zeros(n, c);
        c_deriv.view_mut().set_attention_dot_products(
            1.0,
            od_values,
            input.cols_range(kd, vd),
            shift,
        );
        if out_deriv.num_cols() > vd {
            c_deriv
                .view_mut()
                .add_mat(1.0, out_deriv.cols_range(vd, c), Trans::No);
        }
        let mut b_deriv = Matrix::zeros(n, c);
        b_deriv
            .view_mut()
            .diff_softmax_per_row(weights, c_deriv.view());
        deriv
            .sub_mut(rows_left, n, 2 * kd + vd, c)
            .add_mat(1.0, b_deriv.view(), Trans::No);
        deriv
            .sub_mut(rows_left, n, kd + vd, kd)
            .add_attention_weighted_rows(key_scale, input.cols_range(0, kd), b_deriv.view(), shift);
        deriv
            .sub_mut(0, rows_in, 0, kd)
            .add_attention_scaled_to_input(
                key_scale,
                input.sub(rows_left, n, kd + vd, kd),
                b_deriv.view(),
                shift,
            );
        deriv
            .sub_mut(0, rows_in, kd, vd)
            .add_attention_scaled_to_input(1.0, od_values, weights, shift);
    }

    /// One test case: the operands, each a view with two spare columns on the left and
    /// three on the right (so every view is strided), and the starting derivative.
    struct Case {
        n: usize,
        kd: usize,
        c: usize,
        shift: usize,
        rows_left: usize,
        cols: usize,
        od_cols: usize,
        input: Matrix,
        weights: Matrix,
        out_deriv: Matrix,
        deriv: Matrix,
    }

    fn case(n: usize, kd: usize, vd: usize, c: usize, shift: usize, ctx: bool) -> Case {
        let rows_in = n + (c - 1) * shift;
        let cols = 2 * kd + vd + c;
        let od_cols = vd + if ctx { c } else { 0 };
        let scores = m(n, c, 31);
        let mut weights = m(n, c + 5, 32);
        if n > 0 {
            weights
                .sub_mut(0, n, 2, c)
                .softmax_per_row_from(scores.view());
        }
        Case {
            n,
            kd,
            c,
            shift,
            // Queries anywhere in the window, not only at num-left-inputs · shift.
            rows_left: (n + kd) % ((c - 1) * shift + 1),
            cols,
            od_cols,
            input: m(rows_in, cols + 5, 33),
            weights,
            out_deriv: m(n, od_cols + 5, 34),
            deriv: m(rows_in, cols + 5, 35),
        }
    }

    impl Case {
        fn rows_in(&self) -> usize {
            self.input.num_rows()
        }
        fn input(&self) -> MatView<'_> {
            self.input.sub(0, self.rows_in(), 2, self.cols)
        }
        fn weights(&self) -> MatView<'_> {
            self.weights.sub(0, self.n, 2, self.c)
        }
        fn out_deriv(&self) -> MatView<'_> {
            self.out_deriv.sub(0, self.n, 2, self.od_cols)
        }
        /// The derivative after the fused kernel (`portable`: its portable path).
        fn fused(&self, portable: bool) -> Matrix {
            let mut deriv = self.deriv.clone();
            let rows_in = self.rows_in();
            let mut view = deriv.sub_mut(0, rows_in, 2, self.cols);
            if portable {
                let deriv_stride = view.stride();
                head_backprop_portable(HeadBackprop {
                    deriv: view.as_mut_slice(),
                    deriv_stride,
                    input: self.input().as_slice(),
                    input_stride: self.input().stride(),
                    weights: self.weights().as_slice(),
                    weights_stride: self.weights().stride(),
                    out_deriv: self.out_deriv().as_slice(),
                    out_deriv_stride: self.out_deriv().stride(),
                    output_context: self.od_cols > self.cols - 2 * self.kd - self.c,
                    rows: self.n,
                    rows_left: self.rows_left,
                    row_shift: self.shift,
                    context: self.c,
                    key_dim: self.kd,
                    value_dim: self.cols - 2 * self.kd - self.c,
                    key_scale: 0.3,
                });
            } else {
                view.add_restricted_attention_backprop(
                    self.input(),
                    self.weights(),
                    self.out_deriv(),
                    self.rows_left,
                    self.kd,
                    0.3,
                    self.shift,
                );
            }
            deriv
        }
    }

    /// Key and value dims below, at and off multiples of 8 and 16, C = 1, 3, 8, 9, 17,
    /// row shifts 1 to 3, with and without output-context.
    const SHAPES: [(usize, usize, usize, usize, usize, bool); 9] = [
        (9, 32, 64, 8, 3, true),
        (7, 3, 5, 1, 1, false),
        (6, 17, 20, 3, 2, true),
        (5, 20, 70, 9, 1, false),
        (4, 33, 19, 17, 2, true),
        (11, 8, 16, 8, 3, false),
        (13, 40, 80, 3, 1, true),
        (3, 7, 9, 17, 3, false),
        (21, 16, 48, 9, 2, true),
    ];

    /// The fused kernel adds what the five passes add, within float rounding (the sums are
    /// grouped differently), and leaves the columns around the views alone.
    #[test]
    fn fused_backprop_equals_the_five_passes() {
        for (n, kd, vd, c, shift, ctx) in SHAPES {
            let t = case(n, kd, vd, c, shift, ctx);
            let mut want = t.deriv.clone();
            five_passes(
                &mut want.sub_mut(0, t.rows_in(), 2, t.cols),
                t.input(),
                t.weights(),
                t.out_deriv(),
                t.rows_left,
                kd,
                0.3,
                shift,
            );
            let got = t.fused(false);
            let (start, got, want) = (t.deriv.to_vec(), got.to_vec(), want.to_vec());
            let mut changed = 0;
            for (k, ((&g, &w), &s)) in got.iter().zip(&want).zip(&start).enumerate() {
                let tol = 2e-6 * (1.0 + w.abs());
                assert!(
                    (g - w).abs() <= tol,
                    "element {k} (row {}, column {}) of n={n} kd={kd} vd={vd} c={c} \
                     shift={shift} ctx={ctx}: fused {g}, five passes {w}",
                    k / (t.cols + 5),
                    k % (t.cols + 5)
                );
                changed += usize::from(w != s);
            }
            // Every query, key and value column of the head receives something.
            assert!(
                changed > t.cols,
                "the reference changed only {changed} elements"
            );
        }
    }

    /// The intrinsics (where the CPU has them) and the portable path agree bit for bit, and
    /// a second run gives the same bits.
    #[test]
    fn both_paths_round_the_same() {
        for (n, kd, vd, c, shift, ctx) in SHAPES {
            let t = case(n, kd, vd, c, shift, ctx);
            let (fast, portable, again) = (t.fused(false), t.fused(true), t.fused(false));
            for (k, (f, p)) in fast.to_vec().iter().zip(portable.to_vec()).enumerate() {
                assert_eq!(
                    f.to_bits(),
                    p.to_bits(),
                    "element {k} of n={n} kd={kd} vd={vd} c={c} shift={shift}: {f} vs {p}"
                );
            }
            assert_eq!(fast.to_vec(), again.to_vec());
        }
    }

    /// No output rows: nothing changes (the input has just the window's extra rows).
    #[test]
    fn no_output_rows_changes_nothing() {
        let t = case(0, 32, 64, 8, 3, true);
        assert_eq!(t.fused(false).to_vec(), t.deriv.to_vec());
    }

    /// Shapes that do not fit are refused before any access.
    #[test]
    #[should_panic(expected = "add_restricted_attention_backprop")]
    fn mismatched_rows_are_refused() {
        let t = case(4, 8, 8, 3, 2, true);
        let mut deriv = t.deriv.clone();
        let rows_in = t.rows_in();
        deriv
            .sub_mut(0, rows_in - 1, 2, t.cols)
            .add_restricted_attention_backprop(
                t.input.sub(0, rows_in - 1, 2, t.cols),
                t.weights(),
                t.out_deriv(),
                0,
                8,
                0.3,
                2,
            );
    }
}
