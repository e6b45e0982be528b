//! Patch gathering for the old convolution and max-pooling components: a row's patches are
//! gathered into one wide row with [`MatViewMut::copy_cols`], the wide matrix is re-read as
//! one patch per row ([`Matrix::into_reshaped`]) so that a single GEMM serves every patch,
//! and patch derivatives are scattered back onto the input columns ([`MatViewMut::add_to_cols`]).

use super::on_device;
use super::{MatView, MatViewMut, Matrix};

impl Matrix {
    /// The same row-major data read as `rows × cols` (a contiguous matrix of R rows and
    /// P·D columns is R·P rows of D columns). Panics if the element counts differ.
    pub fn into_reshaped(self, rows: usize, cols: usize) -> Matrix {
        assert_eq!(
            rows * cols,
            self.rows * self.cols,
            "Matrix::into_reshaped: {}x{} cannot be read as {rows}x{cols}",
            self.rows,
            self.cols
        );
        assert_eq!(
            self.data.len(),
            rows * cols,
            "Matrix::into_reshaped: strided matrix"
        );
        Matrix {
            data: self.data,
            rows,
            cols,
            stride: cols,
            filled: self.filled,
        }
    }
}

impl MatViewMut<'_> {
    /// `self[:, idx[j]] += src[:, j]` for every j with `idx[j] ≠ −1`: the column form of
    /// Kaldi's AddToRows, i.e. the transpose of [`copy_cols`](Self::copy_cols). Several j may
    /// name the same column; their contributions add up.
    pub fn add_to_cols(&mut self, src: MatView<'_>, idx: &[i32]) {
        assert_eq!(idx.len(), src.num_cols(), "add_to_cols: index length");
        assert_eq!(src.num_rows(), self.num_rows(), "add_to_cols: row counts");
        let cols = self.num_cols();
        assert!(
            idx.iter().all(|&c| c < cols as i32),
            "add_to_cols: column index out of range"
        );
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::add_to_cols(self, src, idx));
        for r in 0..self.num_rows() {
            let s = src.row(r);
            let d = self.row_mut(r);
            for (&v, &c) in s.iter().zip(idx) {
                if c >= 0 {
                    d[c as usize] += v;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_to_cols_is_the_transpose_of_copy_cols() {
        // <copy_cols(x), y> == <x, add_to_cols(y)> for any x, y.
        let idx = [2, -1, 0, 2, 1];
        let x = Matrix::from_rows(&[vec![1.0, 2.0, 3.0], vec![-1.0, 0.5, 4.0]]);
        let y = Matrix::from_rows(&[
            vec![0.5, 1.0, -2.0, 3.0, 1.5],
            vec![2.0, -1.0, 1.0, 0.25, -3.0],
        ]);
        let mut gathered = Matrix::zeros(2, 5);
        gathered.view_mut().copy_cols(x.view(), &idx);
        let mut scattered = Matrix::zeros(2, 3);
        scattered.view_mut().add_to_cols(y.view(), &idx);
        let lhs = gathered.view().trace_mat_mat(y.view());
        let rhs = x.view().trace_mat_mat(scattered.view());
        assert!((lhs - rhs).abs() < 1e-5, "{lhs} vs {rhs}");
        // Column 2 of the input received two contributions.
        assert_eq!(scattered.get(0, 2), 0.5 + 3.0);
    }

    #[test]
    fn reshape_keeps_row_major_order() {
        let m = Matrix::from_rows(&[vec![1.0, 2.0, 3.0, 4.0], vec![5.0, 6.0, 7.0, 8.0]]);
        let r = m.into_reshaped(4, 2);
        assert_eq!(r.to_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!((r.num_rows(), r.num_cols(), r.get(2, 1)), (4, 2, 6.0));
    }
}
