//! Matrices held in compressed form between the forward and the backward pass (Kaldi's
//! `CuCompressedMatrix`, which the optimizer's memory compression uses). Unrelated to the
//! on-disk compressed matrices of `io::compressed`.

use super::{Matrix, Real};

/// How a matrix is compressed (Kaldi's `CuCompressedMatrixType` with its range argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressionKind {
    /// Kaldi's `kCompressedMatrixUint8` with range 0: one byte per element, 1 where the
    /// value is > 0 and 0 elsewhere; decompressed as 1.0 / 0.0. Exact for a consumer that
    /// reads only whether each value is positive (a ReLU's backprop).
    SignUint8,
}

impl CompressionKind {
    /// Bytes per element in compressed form.
    pub fn bytes_per_element(self) -> u64 {
        match self {
            CompressionKind::SignUint8 => 1,
        }
    }
}

/// A matrix in compressed form.
#[derive(Clone, Debug, Default)]
pub struct CuCompressedMatrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl CuCompressedMatrix {
    /// `src` compressed as `kind` says (Kaldi's `CopyFromMat`).
    pub fn from_matrix(src: &Matrix, kind: CompressionKind) -> Self {
        let v = src.view();
        let mut data = Vec::with_capacity(v.num_rows() * v.num_cols());
        match kind {
            CompressionKind::SignUint8 => {
                for r in 0..v.num_rows() {
                    data.extend(v.row(r).iter().map(|&x| u8::from(x > 0.0)));
                }
            }
        }
        CuCompressedMatrix {
            rows: v.num_rows(),
            cols: v.num_cols(),
            data,
        }
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn num_cols(&self) -> usize {
        self.cols
    }

    /// Writes the decompressed values into `dst`, which is resized to this matrix's shape
    /// (its old contents do not matter; Kaldi's `CopyToMat`).
    pub fn copy_to_matrix(&self, dst: &mut Matrix) {
        dst.resize_undefined(self.rows, self.cols);
        let mut v = dst.view_mut();
        for r in 0..self.rows {
            let row = &self.data[r * self.cols..(r + 1) * self.cols];
            for (d, &b) in v.row_mut(r).iter_mut().zip(row) {
                *d = Real::from(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_uint8_keeps_only_positivity() {
        let m = Matrix::from_rows(&[vec![1.5, 0.0, -0.0], vec![-2.0, 1e-30, Real::NAN]]);
        let c = CuCompressedMatrix::from_matrix(&m, CompressionKind::SignUint8);
        let mut back = Matrix::from_rows(&vec![vec![9.0; 4]; 5]);
        c.copy_to_matrix(&mut back);
        assert_eq!(
            back,
            Matrix::from_rows(&[vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0]])
        );
    }
}
