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

use super::{simd, MatView, MatViewMut, Vector};

impl MatViewMut<'_> {
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
/// derivatives of z and c_prev to its columns `z_col` and `c_prev_col`.
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
    match in_deriv {
        Some((d, z_col, c_prev_col)) => {
            assert!(
                d.num_rows() == n
                    && z_col + c <= d.num_cols()
                    && c_prev_col + c <= d.num_cols()
                    && (z_col + c <= c_prev_col || c_prev_col + c <= z_col),
                "backprop_gru_cell: input-derivative columns"
            );
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
