//! The three products of Kaldi's restricted self-attention (`nnet3/attention.h`), each over a
//! whole head at once. Output row i attends to the input rows `i + o·row_shift` for context
//! positions o = 0..C (the input has `(C − 1)·row_shift` more rows than the output: the left
//! and right context). The component composes them with the row softmax and its derivative.

use super::buf::on_device;
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
    /// the softmax uses the vectorised exp (within 3e-7 of libm's). With every operand on the
    /// GPU, the kernel `k_attention_head` computes it (one block per output row; its sums are
    /// grouped otherwise, so the result agrees within rounding, not to the bit).
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
        on_device!(self.place.on_device()
        && weights.place.on_device()
        && input.place.on_device()
        && queries.place.on_device()
        => super::cuda_ops::restricted_attention(
            self, weights, input, queries, key_dim, key_scale, row_shift
        ));
        let (out_stride, out_cols) = (self.stride(), self.num_cols());
        let weights_stride = weights.stride();
        simd::attention_head(simd::AttentionHead {
            out: self.as_mut_slice(),
            out_stride,
            out_cols,
            weights: weights.as_mut_slice(),
            weights_stride,
            queries: queries.as_slice(),
            queries_stride: queries.stride(),
            input: input.as_slice(),
            input_stride: input.stride(),
            rows: n,
            row_shift,
            context: c,
            key_dim,
            value_dim,
            key_scale,
        });
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

    /// Restricted attention for one head in plain scalar code, every sum in the order the
    /// kernels promise (`simd::attention_row`): per position 16 lanes summed over the key's
    /// 16-column chunks, halved (l + l+8, + l+4, (0+2) + (1+3)), plus the remaining columns
    /// summed in order; the softmax sum in position order; each output column summed over
    /// the positions in order, starting from its old value.
    #[allow(clippy::too_many_arguments)]
    fn reference_head(
        out: &mut Matrix,
        weights: &mut Matrix,
        input: &Matrix,
        queries: &Matrix,
        kd: usize,
        vd: usize,
        key_scale: f32,
        shift: usize,
    ) {
        let c = weights.num_cols();
        for i in 0..out.num_rows() {
            let mut scores = vec![0.0f32; c];
            for (o, score) in scores.iter_mut().enumerate() {
                let r = i + o * shift;
                let mut lanes = [0.0f32; 16];
                for chunk in 0..kd / 16 {
                    for (l, lane) in lanes.iter_mut().enumerate() {
                        let j = 16 * chunk + l;
                        *lane += queries.get(i, j) * input.get(r, j);
                    }
                }
                let mut tail = 0.0f32;
                for j in kd / 16 * 16..kd {
                    tail += queries.get(i, j) * input.get(r, j);
                }
                let s8: Vec<f32> = (0..8).map(|l| lanes[l] + lanes[l + 8]).collect();
                let s4: Vec<f32> = (0..4).map(|l| s8[l] + s8[l + 4]).collect();
                let total = (s4[0] + s4[2]) + (s4[1] + s4[3]);
                *score = key_scale * (total + tail) + queries.get(i, kd + o);
            }
            let mut max = f32::NEG_INFINITY;
            for &s in &scores {
                max = if s > max { s } else { max };
            }
            let e: Vec<f32> = scores
                .iter()
                .map(|&s| crate::matrix::simd::exp_fast(s - max))
                .collect();
            let mut sum = 0.0f32;
            for &v in &e {
                sum += v;
            }
            for (o, &v) in e.iter().enumerate() {
                weights.set(i, o, v / sum);
            }
            for j in 0..vd {
                let mut y = out.get(i, j);
                for o in 0..c {
                    y += weights.get(i, o) * input.get(i + o * shift, kd + j);
                }
                out.set(i, j, y);
            }
            if out.num_cols() > vd {
                for o in 0..c {
                    out.set(i, vd + o, out.get(i, vd + o) + weights.get(i, o));
                }
            }
        }
    }

    /// Both kernels (the vectorised one where the CPU has it, and the row-by-row one) equal
    /// the scalar reference bit for bit: shapes with and without key and value tails,
    /// C below, at and above a vector of positions (and above 32, where only the row path
    /// runs), row counts that leave partial batches, strided views, signed zeros and ties.
    #[test]
    fn fused_head_rounds_as_documented() {
        for (n, kd, vd, c, shift, ctx) in [
            (9, 32, 64, 8, 3, true),
            (13, 40, 80, 8, 2, true),
            (6, 3, 5, 5, 1, false),
            (5, 16, 8, 9, 2, true),
            (7, 17, 20, 16, 1, false),
            (4, 32, 70, 17, 1, true),
            (3, 8, 64, 32, 1, true),
            (3, 8, 16, 33, 1, false),
            (1, 64, 128, 1, 1, true),
            (0, 32, 64, 8, 3, true),
        ] {
            let rows_in = n + (c - 1) * shift;
            // Two spare columns on each side, so that every view is strided.
            let mut wide = m(rows_in, kd + vd + 4, 21);
            for r in 0..rows_in {
                wide.set(r, 2 + r % (kd + vd), 0.0);
                wide.set(r, 2 + (3 * r + 1) % (kd + vd), -0.0);
            }
            let input = Matrix::from_rows(
                &(0..rows_in)
                    .map(|r| (0..kd + vd).map(|j| wide.get(r, j + 2)).collect())
                    .collect::<Vec<_>>(),
            );
            let mut queries = m(n, kd + c + 3, 22);
            if n > 1 {
                // A row of equal scores (zero query) and one with a signed-zero query.
                for j in 0..kd + c + 3 {
                    queries.set(0, j, 0.0);
                    queries.set(1, j, -0.0);
                }
            }
            let out_cols = if ctx { vd + c } else { vd };
            let start = m(n, out_cols + 5, 23);
            let (mut want, mut want_w) = (start.clone(), Matrix::zeros(n, c));
            let mut want_out = Matrix::zeros(n, out_cols);
            want_out
                .view_mut()
                .copy_from(start.view().cols_range(1, out_cols));
            let q_view = queries.view().cols_range(1, kd + c);
            let q_copy = Matrix::from_rows(
                &(0..n)
                    .map(|i| (0..kd + c).map(|j| q_view.get(i, j)).collect())
                    .collect::<Vec<_>>(),
            );
            if n > 0 {
                reference_head(
                    &mut want_out,
                    &mut want_w,
                    &input,
                    &q_copy,
                    kd,
                    vd,
                    0.3,
                    shift,
                );
            }
            want.view_mut()
                .sub_mut(0, n, 1, out_cols)
                .copy_from(want_out.view());
            for by_rows in [false, true] {
                let mut got = start.clone();
                let mut w_got = Matrix::from_vec(n, c + 2, vec![f32::NAN; n * (c + 2)]);
                let mut w_view = w_got.sub_mut(0, n, 1, c);
                let mut out_view = got.sub_mut(0, n, 1, out_cols);
                let in_view = wide.view().cols_range(2, kd + vd);
                if by_rows {
                    crate::matrix::simd::attention_head_by_rows(
                        crate::matrix::simd::AttentionHead {
                            out_stride: out_view.stride(),
                            out_cols,
                            out: out_view.as_mut_slice(),
                            weights_stride: w_view.stride(),
                            weights: w_view.as_mut_slice(),
                            queries: q_view.as_slice(),
                            queries_stride: q_view.stride(),
                            input: in_view.as_slice(),
                            input_stride: in_view.stride(),
                            rows: n,
                            row_shift: shift,
                            context: c,
                            key_dim: kd,
                            value_dim: vd,
                            key_scale: 0.3,
                        },
                    );
                } else {
                    out_view.add_restricted_attention(&mut w_view, in_view, q_view, kd, 0.3, shift);
                }
                for i in 0..n {
                    for o in 0..c {
                        let (g, w) = (w_got.get(i, o + 1), want_w.get(i, o));
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "weights ({i},{o}) of n={n} kd={kd} vd={vd} c={c} rows={by_rows}: \
                             {g} vs {w}"
                        );
                    }
                }
                for (k, (g, w)) in got.to_vec().iter().zip(want.to_vec()).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "output element {k} of n={n} kd={kd} vd={vd} c={c} rows={by_rows}: \
                         {g} vs {w}"
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
