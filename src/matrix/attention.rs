//! The three products of Kaldi's restricted self-attention (`nnet3/attention.h`), each over a
//! whole head at once. Output row i attends to the input rows `i + o·row_shift` for context
//! positions o = 0..C (the input has `(C − 1)·row_shift` more rows than the output: the left
//! and right context). The component composes them with the row softmax and its derivative.

use super::{simd, MatView, MatViewMut, Real};

/// Checks the shared shape rule: `a` has the output rows, `b` the input rows, `c` C columns.
fn check_window(op: &str, out_rows: usize, in_rows: usize, c_cols: usize, row_shift: usize) {
    assert!(
        c_cols >= 1 && in_rows == out_rows + (c_cols - 1) * row_shift,
        "{op}: {in_rows} input rows do not cover {out_rows} output rows with {c_cols} \
         context positions {row_shift} rows apart"
    );
}

impl MatViewMut<'_> {
    /// `self[i, o] = alpha · a_i · b_{i + o·row_shift}` (self: N × C, a: N × D, b: M × D;
    /// Kaldi's `GetAttentionDotProducts`): scaled key·query products over the window.
    pub fn set_attention_dot_products(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        b: MatView<'_>,
        row_shift: usize,
    ) {
        let (n, c) = (self.num_rows(), self.num_cols());
        assert!(
            a.num_rows() == n && a.num_cols() == b.num_cols(),
            "set_attention_dot_products: dims"
        );
        check_window("set_attention_dot_products", n, b.num_rows(), c, row_shift);
        for i in 0..n {
            let ai = a.row(i);
            let out = self.row_mut(i);
            for (o, y) in out.iter_mut().enumerate() {
                *y = alpha * simd::dot(ai, b.row(i + o * row_shift));
            }
        }
    }

    /// `self_i += alpha · Σ_o c[i, o] · b_{i + o·row_shift}` (self: N × D, b: M × D, c: N × C;
    /// Kaldi's `ApplyScalesToOutput`): the attention-weighted sum of the window's rows.
    pub fn add_attention_weighted_rows(
        &mut self,
        alpha: Real,
        b: MatView<'_>,
        c: MatView<'_>,
        row_shift: usize,
    ) {
        let n = self.num_rows();
        assert!(
            c.num_rows() == n && b.num_cols() == self.num_cols(),
            "add_attention_weighted_rows: dims"
        );
        check_window(
            "add_attention_weighted_rows",
            n,
            b.num_rows(),
            c.num_cols(),
            row_shift,
        );
        for i in 0..n {
            let ci = c.row(i);
            let out = self.row_mut(i);
            for (o, &w) in ci.iter().enumerate() {
                let s = alpha * w;
                for (y, &x) in out.iter_mut().zip(b.row(i + o * row_shift)) {
                    *y += s * x;
                }
            }
        }
    }

    /// `self_{i + o·row_shift} += alpha · c[i, o] · a_i` (self: M × D, a: N × D, c: N × C;
    /// Kaldi's `ApplyScalesToInput`): spreads output-side rows back over the window.
    pub fn add_attention_scaled_to_input(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        c: MatView<'_>,
        row_shift: usize,
    ) {
        let n = a.num_rows();
        assert!(
            c.num_rows() == n && a.num_cols() == self.num_cols(),
            "add_attention_scaled_to_input: dims"
        );
        check_window(
            "add_attention_scaled_to_input",
            n,
            self.num_rows(),
            c.num_cols(),
            row_shift,
        );
        for i in 0..n {
            let ai = a.row(i);
            for (o, &w) in c.row(i).iter().enumerate() {
                let s = alpha * w;
                for (y, &x) in self.row_mut(i + o * row_shift).iter_mut().zip(ai) {
                    *y += s * x;
                }
            }
        }
    }
}

impl MatViewMut<'_> {
    /// One head of restricted attention forward, fused per output row (what the three
    /// products above and a row softmax compute in five passes). For output row i, with window
    /// rows r_o = i + o·row_shift of `input` (N + (C − 1)·row_shift rows: the head's key
    /// columns `0..key_dim`, then its value columns):
    /// b_o = key_scale · q_i[..key_dim] · key(r_o) + q_i[key_dim + o], c_i = softmax(b),
    /// `weights_i = c_i`, `self_i[..value_dim] += Σ_o c_io · value(r_o)`, and when `self` has
    /// C more columns (Kaldi's output-context), `self_i[value_dim..] += c_i`. `queries` is
    /// N × (key_dim + C), `weights` N × C. The window's rows stay in cache across the row, and
    /// the softmax uses the vectorised exp (within 3e-7 of libm's).
    pub fn add_restricted_attention(
        &mut self,
        weights: &mut MatViewMut<'_>,
        input: MatView<'_>,
        queries: MatView<'_>,
        key_dim: usize,
        key_scale: Real,
        row_shift: usize,
    ) {
        let (n, c) = (weights.num_rows(), weights.num_cols());
        assert!(
            key_dim <= input.num_cols(),
            "add_restricted_attention: key dim"
        );
        let value_dim = input.num_cols() - key_dim;
        assert!(
            self.num_rows() == n
                && queries.num_rows() == n
                && queries.num_cols() == key_dim + c
                && (self.num_cols() == value_dim || self.num_cols() == value_dim + c),
            "add_restricted_attention: dims"
        );
        check_window(
            "add_restricted_attention",
            n,
            input.num_rows(),
            c,
            row_shift,
        );
        if n == 0 {
            return;
        }
        let (data, stride) = (input.as_slice(), input.stride());
        for i in 0..n {
            simd::attention_row(
                self.row_mut(i),
                weights.row_mut(i),
                queries.row(i),
                &data[i * stride..],
                stride * row_shift,
                (key_dim, value_dim),
                key_scale,
            );
        }
        super::check::check_finite("add_restricted_attention", self.as_view());
    }
}

#[cfg(test)]
mod tests {
    use crate::matrix::Matrix;

    use crate::matrix::pseudo_random as m;

    /// The fused head equals the five-pass composition (dot products, positional term,
    /// softmax, weighted sum, weights appended), with and without output-context.
    #[test]
    fn fused_head_equals_the_composition() {
        for (n, kd, vd, c, shift, ctx) in [
            (5, 32, 64, 8, 3, true),
            (7, 3, 5, 3, 2, false),
            (1, 17, 20, 1, 1, true),
        ] {
            let rows_in = n + (c - 1) * shift;
            let input = m(rows_in, kd + vd, 11);
            let queries = m(n, kd + c, 12);
            let out_cols = if ctx { vd + c } else { vd };
            let start = m(n, out_cols, 13);
            // Composition.
            let mut b = Matrix::zeros(n, c);
            b.view_mut().set_attention_dot_products(
                0.25,
                queries.view().cols_range(0, kd),
                input.view().cols_range(0, kd),
                shift,
            );
            b.view_mut().add_mat(
                1.0,
                queries.view().cols_range(kd, c),
                crate::matrix::Trans::No,
            );
            let mut w_want = Matrix::zeros(n, c);
            w_want.view_mut().softmax_per_row_from(b.view());
            let mut want = start.clone();
            want.view_mut()
                .sub_mut(0, n, 0, vd)
                .add_attention_weighted_rows(
                    1.0,
                    input.view().cols_range(kd, vd),
                    w_want.view(),
                    shift,
                );
            if ctx {
                want.view_mut().sub_mut(0, n, vd, c).add_mat(
                    1.0,
                    w_want.view(),
                    crate::matrix::Trans::No,
                );
            }
            // Fused.
            let mut got = start.clone();
            let mut w_got = Matrix::from_vec(n, c, vec![f32::NAN; n * c]);
            got.view_mut().add_restricted_attention(
                &mut w_got.view_mut(),
                input.view(),
                queries.view(),
                kd,
                0.25,
                shift,
            );
            for i in 0..n {
                for o in 0..c {
                    let (g, w) = (w_got.get(i, o), w_want.get(i, o));
                    assert!(
                        (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "weights ({i},{o}): {g} vs {w}"
                    );
                }
                for j in 0..out_cols {
                    let (g, w) = (got.get(i, j), want.get(i, j));
                    assert!(
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "out ({i},{j}): {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_three_products_agree_with_their_definitions() {
        let (n, d, c, shift) = (4, 3, 3, 2);
        let rows_in = n + (c - 1) * shift;
        let a = m(n, d, 1);
        let b = m(rows_in, d, 2);
        let w = m(n, c, 3);
        let mut dots = Matrix::zeros(n, c);
        dots.view_mut()
            .set_attention_dot_products(0.5, a.view(), b.view(), shift);
        let mut out = Matrix::zeros(n, d);
        out.view_mut()
            .add_attention_weighted_rows(2.0, b.view(), w.view(), shift);
        let mut back = Matrix::zeros(rows_in, d);
        back.view_mut()
            .add_attention_scaled_to_input(1.5, a.view(), w.view(), shift);
        let mut want_back = vec![0.0f64; rows_in * d];
        for i in 0..n {
            for o in 0..c {
                let r = i + o * shift;
                let dot: f64 = (0..d).map(|k| (a.get(i, k) * b.get(r, k)) as f64).sum();
                assert!((dots.get(i, o) as f64 - 0.5 * dot).abs() < 1e-5);
                for k in 0..d {
                    want_back[r * d + k] += 1.5 * (w.get(i, o) * a.get(i, k)) as f64;
                }
            }
            for k in 0..d {
                let s: f64 = (0..c)
                    .map(|o| (w.get(i, o) * b.get(i + o * shift, k)) as f64)
                    .sum();
                assert!((out.get(i, k) as f64 - 2.0 * s).abs() < 1e-4);
            }
        }
        for (x, y) in back.to_vec().iter().zip(&want_back) {
            assert!((*x as f64 - y).abs() < 1e-4);
        }
    }
}
