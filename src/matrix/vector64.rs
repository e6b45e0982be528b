//! `Vector64`, a double-precision vector for the statistics Kaldi keeps as `CuVector<double>`
//! (nonlinearity value/derivative sums, BatchNorm sums, LSTM/GRU/attention statistics), and
//! the conversions between it and the f32 [`Vector`]. Like `Vector` it lends no host slice
//! outside `src/matrix/`: `from_vec`/`to_vec` are the explicit copies for files and tests.

use super::{Matrix, Real, Vector};

/// An owned f64 vector (Kaldi's `CuVector<double>`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vector64 {
    pub(in crate::matrix) data: Vec<f64>,
}

impl Vector64 {
    /// A zero vector.
    pub fn zeros(dim: usize) -> Self {
        Vector64 {
            data: vec![0.0; dim],
        }
    }
    /// A vector owning `data` (host copy in: the I/O and test boundary).
    pub fn from_vec(data: Vec<f64>) -> Self {
        Vector64 { data }
    }
    /// A copy of the elements (host copy out: the I/O and test boundary).
    pub fn to_vec(&self) -> Vec<f64> {
        self.data.clone()
    }
    /// The elements, by value (host copy out, without a copy on the host).
    pub fn into_vec(self) -> Vec<f64> {
        self.data
    }
    /// Number of elements.
    pub fn dim(&self) -> usize {
        self.data.len()
    }
    /// Whether the vector has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Changes the dimension; contents become zero.
    pub fn resize(&mut self, dim: usize) {
        self.data.clear();
        self.data.resize(dim, 0.0);
    }
    /// Sets every element to zero.
    pub fn set_zero(&mut self) {
        self.data.fill(0.0);
    }
    /// `self *= alpha` (a plain product: scaling by 0 keeps NaN, as Kaldi's `Scale`).
    pub fn scale(&mut self, alpha: f64) {
        self.data.iter_mut().for_each(|x| *x *= alpha);
    }
    /// `self += alpha · x` (Kaldi's AddVec; each element `self + alpha · x`).
    pub fn add_vec(&mut self, alpha: f64, x: &Vector64) {
        assert_eq!(x.dim(), self.dim(), "Vector64::add_vec: dim");
        for (d, &s) in self.data.iter_mut().zip(&x.data) {
            *d += alpha * s;
        }
    }
    /// `self += alpha · x` with `x` a float vector widened to double first (Kaldi's
    /// `CuVector<double>::AddVec` of a `CuVector<float>`).
    pub fn add_vec_f32(&mut self, alpha: f64, x: &Vector) {
        assert_eq!(x.dim(), self.dim(), "Vector64::add_vec_f32: dim");
        // A copy (from the GPU, when x lives there) rather than reads through its pages.
        for (d, &s) in self.data.iter_mut().zip(&x.to_vec()) {
            *d += alpha * s as f64;
        }
    }
    /// `self ⊙= x` element-wise.
    pub fn mul_elements(&mut self, x: &Vector64) {
        assert_eq!(x.dim(), self.dim(), "Vector64::mul_elements: dim");
        self.data
            .iter_mut()
            .zip(&x.data)
            .for_each(|(d, &s)| *d *= s);
    }
    /// The float vector `x` widened to double (Kaldi's CopyFromVec across precisions).
    pub fn from_f32(x: &Vector) -> Vector64 {
        Vector64 {
            data: x.data.iter().map(|&v| v as f64).collect(),
        }
    }
    /// The elements of a float matrix in row-major order, widened to double.
    pub fn from_f32_matrix(m: &Matrix) -> Vector64 {
        let v = m.view();
        let mut data = Vec::with_capacity(v.num_rows() * v.num_cols());
        for r in 0..v.num_rows() {
            data.extend(v.row(r).iter().map(|&x| x as f64));
        }
        Vector64 { data }
    }
    /// The elements rounded to float, as a `rows × cols` row-major matrix (dim = rows·cols).
    pub fn to_matrix(&self, rows: usize, cols: usize) -> Matrix {
        assert_eq!(rows * cols, self.dim(), "Vector64::to_matrix: shape");
        Matrix::from_vec(rows, cols, self.data.iter().map(|&v| v as Real).collect())
    }
    /// `self[i] / d` for every element (a division, not a product with 1/d), rounded to
    /// float.
    pub fn div_to_f32(&self, d: f64) -> Vector {
        Vector::from_vec(self.data.iter().map(|&v| (v / d) as Real).collect())
    }
    /// Appends a copy of `self`'s elements to `out` (how exact statistics are laid end to
    /// end for a checkpoint).
    pub fn append_to(&self, out: &mut Vector64) {
        out.data.extend_from_slice(&self.data);
    }
    /// Appends one element.
    pub fn push(&mut self, x: f64) {
        self.data.push(x);
    }
    /// Element `i` (a host read of one statistic: counts and headers of exact statistics).
    pub fn get(&self, i: usize) -> f64 {
        self.data[i]
    }
    /// Sets element `i` (a host write of one statistic).
    pub fn set(&mut self, i: usize, x: f64) {
        self.data[i] = x;
    }
    /// A copy of elements `start..start + len`.
    pub fn range(&self, start: usize, len: usize) -> Vector64 {
        Vector64::from_vec(self.data[start..start + len].to_vec())
    }
    /// `self[i] / d` for every element (a division, not a product with 1/d).
    pub fn divide(&mut self, d: f64) {
        self.data.iter_mut().for_each(|x| *x /= d);
    }
    /// `(self[..n], self[n..])`, or `None` when `n > dim`.
    pub fn split_at(&self, n: usize) -> Option<(Vector64, Vector64)> {
        let (a, b) = self.data.split_at_checked(n)?;
        Some((
            Vector64::from_vec(a.to_vec()),
            Vector64::from_vec(b.to_vec()),
        ))
    }
}

impl Vector {
    /// The double vector `x` rounded to float (Kaldi's CopyFromVec across precisions).
    pub fn from_f64(x: &Vector64) -> Vector {
        // Statistics stay on the host whatever the device: what is computed from them there
        // is small, and the matrix operations copy a host vector to the GPU when they meet one.
        Vector {
            data: super::buf::host(x.data.iter().map(|&v| v as Real).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_accumulation_and_rounding() {
        let mut s = Vector64::zeros(3);
        let x = Vector::from_vec(vec![0.1, -2.5, 1e-8]);
        s.add_vec_f32(2.0, &x);
        assert_eq!(
            s.to_vec(),
            vec![0.1f32 as f64 * 2.0, -5.0, 1e-8f32 as f64 * 2.0]
        );
        let back = Vector::from_f64(&s);
        assert_eq!(
            back.to_vec(),
            vec![(0.1f32 as f64 * 2.0) as f32, -5.0, 2e-8]
        );
        let mut t = Vector64::from_vec(vec![1.0, 2.0, 3.0]);
        t.add_vec(0.5, &s);
        t.mul_elements(&Vector64::from_vec(vec![2.0, 1.0, 0.0]));
        assert_eq!(t.get(1), -0.5);
        assert_eq!(t.get(2), 0.0);
        assert_eq!(
            t.div_to_f32(3.0).to_vec(),
            vec![
                ((1.0 + 0.1f32 as f64) * 2.0 / 3.0) as f32,
                (-0.5f64 / 3.0) as f32,
                0.0
            ]
        );
        let (a, b) = t.split_at(1).expect("split");
        assert_eq!((a.dim(), b.dim()), (1, 2));
        assert!(t.split_at(4).is_none());
    }
}
