//! The GRU cells' element-wise work (the tanh and the interpolation with the previous
//! cell), fused into one pass per row, for `GruNonlinearityComponent` and
//! `OutputGruNonlinearityComponent`: in a recurrent layer each call sees only a few rows, so
//! separate passes with temporaries cost more than the arithmetic.
//!
//! ```text
//! h = tanh(pre)      c = (1 − z) ⊙ h + z ⊙ c_prev
//! ```
//!
//! The tanh is [`simd::tanh_fast`](super::simd::tanh_fast) (a few ulp from libm's).

use super::buf::on_device;
use super::{simd, MatView, MatViewMut, Vector};

impl MatViewMut<'_> {
    /// `self = r ⊙ s` (n × R; the GRU's reset-gated recurrent input, the operand of its W_h
    /// product), row by row with the vectorised kernel.
    pub fn set_gru_reset_product(&mut self, r: MatView<'_>, s: MatView<'_>) {
        let (n, d) = (self.num_rows(), self.num_cols());
        assert!(
            r.num_rows() == n && s.num_rows() == n && r.num_cols() == d && s.num_cols() == d,
            "set_gru_reset_product: dimensions"
        );
        on_device!(self.place.on_device() && r.place.on_device() && s.place.on_device() => super::cuda_ops::ew("k_mul_into", self, &[r, s], 0.0, 0.0));
        for i in 0..n {
            simd::mul_elements_into(self.row_mut(i), r.row(i), s.row(i));
        }
    }

    /// `self = [h, c]` (n × 2C) where the first C columns hold the pre-activation on entry:
    /// h = tanh(pre), c = (1 − z) ⊙ h + z ⊙ c_prev (`z`, `c_prev`: n × C).
    pub fn gru_cell_from_preactivation(&mut self, z: MatView<'_>, c_prev: MatView<'_>) {
        let c = z.num_cols();
        assert!(
            self.num_cols() == 2 * c
                && c_prev.num_cols() == c
                && z.num_rows() == self.num_rows()
                && c_prev.num_rows() == self.num_rows(),
            "gru_cell_from_preactivation: dimensions"
        );
        on_device!(self.place.on_device() && z.place.on_device() && c_prev.place.on_device() => super::cuda_ops::gru_cell(self, z, c_prev));
        for r in 0..self.num_rows() {
            let (h, cell) = self.row_mut(r).split_at_mut(c);
            simd::gru_cell_row(h, cell, z.row(r), c_prev.row(r));
        }
    }

    /// `self = [h, c]` of the output-GRU cell (n × 2C) from `input = [z, hpart, c_prev]`
    /// (n × 3C) and the per-cell weights `w`: h = tanh(hpart + w ⊙ c_prev), c as above.
    pub fn compute_output_gru_cell(&mut self, input: MatView<'_>, w: &Vector) {
        let c = w.dim();
        assert!(
            self.num_cols() == 2 * c
                && input.num_cols() == 3 * c
                && input.num_rows() == self.num_rows(),
            "compute_output_gru_cell: dimensions"
        );
        on_device!(self.place.on_device() && input.place.on_device() => super::cuda_ops::output_gru_cell(self, input, w));
        for r in 0..self.num_rows() {
            let x = input.row(r);
            let (h, cell) = self.row_mut(r).split_at_mut(c);
            simd::output_gru_cell_row(h, cell, &x[..c], &x[c..2 * c], &x[2 * c..], &w.data);
        }
    }
}

/// The GRU cells' backward pass through the interpolation and the tanh: writes the
/// derivative before the tanh into `h_deriv` (n × C), from `h` (the forward h, n × C) and
/// `out_deriv` (n × 2C, the derivatives of [h, c]); when `in_deriv` is given, adds the
/// derivatives of z and c_prev to its columns `z_col` and `c_prev_col`. With every matrix on
/// the GPU it runs as one kernel (`cuda_ops::gru_backprop`).
pub fn backprop_gru_cell(
    z: MatView<'_>,
    c_prev: MatView<'_>,
    h: MatView<'_>,
    out_deriv: MatView<'_>,
    h_deriv: &mut MatViewMut<'_>,
    in_deriv: Option<(&mut MatViewMut<'_>, usize, usize)>,
) {
    let (n, c) = (h.num_rows(), h.num_cols());
    assert!(
        z.num_rows() == n
            && c_prev.num_rows() == n
            && out_deriv.num_rows() == n
            && h_deriv.num_rows() == n
            && z.num_cols() == c
            && c_prev.num_cols() == c
            && out_deriv.num_cols() == 2 * c
            && h_deriv.num_cols() == c,
        "backprop_gru_cell: dimensions"
    );
    if let Some((d, z_col, c_prev_col)) = &in_deriv {
        assert!(
            d.num_rows() == n
                && z_col + c <= d.num_cols()
                && c_prev_col + c <= d.num_cols()
                && (z_col + c <= *c_prev_col || c_prev_col + c <= *z_col),
            "backprop_gru_cell: input-derivative columns"
        );
    }
    on_device!(z.place.on_device()
        && c_prev.place.on_device()
        && h.place.on_device()
        && out_deriv.place.on_device()
        && h_deriv.place.on_device()
        && in_deriv.as_ref().is_none_or(|(d, _, _)| d.place.on_device())
        => super::cuda_ops::gru_backprop(h_deriv, in_deriv, [h, out_deriv, z, c_prev]));
    match in_deriv {
        Some((d, z_col, c_prev_col)) => {
            for r in 0..n {
                let od = out_deriv.row(r);
                let row = d.row_mut(r);
                // The two column blocks are disjoint (checked above).
                let (zd, cpd) = if z_col < c_prev_col {
                    let (a, b) = row.split_at_mut(c_prev_col);
                    (&mut a[z_col..z_col + c], &mut b[..c])
                } else {
                    let (a, b) = row.split_at_mut(z_col);
                    (&mut b[..c], &mut a[c_prev_col..c_prev_col + c])
                };
                simd::gru_cell_backprop_row(
                    h_deriv.row_mut(r),
                    zd,
                    cpd,
                    true,
                    [h.row(r), &od[..c], &od[c..], z.row(r), c_prev.row(r)],
                );
            }
        }
        None => {
            for r in 0..n {
                let od = out_deriv.row(r);
                simd::gru_cell_backprop_row(
                    h_deriv.row_mut(r),
                    &mut [],
                    &mut [],
                    false,
                    [h.row(r), &od[..c], &od[c..], z.row(r), c_prev.row(r)],
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    use crate::matrix::pseudo_random as m;

    /// r ⊙ s on column ranges of one input (as the GRU takes them), every element exact.
    #[test]
    fn reset_product_is_the_element_product() {
        let (n, d) = (5, 37);
        let input = m(n, 3 * d + 2, 5);
        let mut y = Matrix::zeros(n, d);
        y.view_mut().set_gru_reset_product(
            input.view().cols_range(1, d),
            input.view().cols_range(2 * d + 1, d),
        );
        for i in 0..n {
            for j in 0..d {
                let want = input.get(i, 1 + j) * input.get(i, 2 * d + 1 + j);
                assert_eq!(y.get(i, j).to_bits(), want.to_bits(), "({i},{j})");
            }
        }
    }

    /// Both cells and the backward pass against their definitions in f64 (libm tanh).
    #[test]
    fn fused_cells_agree_with_their_definitions() {
        let (n, c) = (3, 37);
        let input = m(n, 3 * c, 7);
        let w = Vector::from_vec(m(1, c, 9).to_vec());
        let g = |r: usize, j: usize| input.get(r, j) as f64;
        let mut out = Matrix::zeros(n, 2 * c);
        out.view_mut().compute_output_gru_cell(input.view(), &w);
        let mut pre = Matrix::zeros(n, 2 * c);
        pre.sub_mut(0, n, 0, c)
            .copy_from(input.view().cols_range(c, c));
        pre.view_mut().gru_cell_from_preactivation(
            input.view().cols_range(0, c),
            input.view().cols_range(2 * c, c),
        );
        let out_deriv = m(n, 2 * c, 11);
        let mut hd = Matrix::zeros(n, c);
        let mut in_deriv = m(n, 3 * c, 13);
        let before = in_deriv.clone();
        backprop_gru_cell(
            input.view().cols_range(0, c),
            input.view().cols_range(2 * c, c),
            pre.view().cols_range(0, c),
            out_deriv.view(),
            &mut hd.view_mut(),
            Some((&mut in_deriv.view_mut(), 0, 2 * c)),
        );
        for r in 0..n {
            for j in 0..c {
                let (z, hp, cp) = (g(r, j), g(r, c + j), g(r, 2 * c + j));
                let close =
                    |got: f32, want: f64| (got as f64 - want).abs() < 1e-6 * (1.0 + want.abs());
                let h = (cp * w.data[j] as f64 + hp).tanh();
                assert!(
                    close(out.get(r, j), h) && close(out.get(r, c + j), (1.0 - z) * h + z * cp)
                );
                let h = hp.tanh();
                assert!(
                    close(pre.get(r, j), h) && close(pre.get(r, c + j), (1.0 - z) * h + z * cp)
                );
                let h = pre.get(r, j) as f64;
                let (dh, dc) = (out_deriv.get(r, j) as f64, out_deriv.get(r, c + j) as f64);
                assert!(close(hd.get(r, j), (dh + dc * (1.0 - z)) * (1.0 - h * h)));
                let dz = in_deriv.get(r, j) as f64 - before.get(r, j) as f64;
                assert!(close(dz as f32, dc * (cp - h)));
                let dcp = in_deriv.get(r, 2 * c + j) as f64 - before.get(r, 2 * c + j) as f64;
                assert!(close(dcp as f32, dc * z));
                assert_eq!(in_deriv.get(r, c + j), before.get(r, c + j));
            }
        }
    }
}
