//! Products accumulated in f64, for the small ill-conditioned problems where f32 rounding of
//! the sums would matter (the natural-gradient preconditioner orthonormalises rows whose
//! squared norms span many orders of magnitude). The big products stay in f32.

use super::on_device;
use super::{MatView, MatViewMut, Real};

/// `dst (m×n) = lhs (m×k) · rhs (k×n)`, all row-major f64, on the `gemm` crate.
fn gemm_f64(dst: &mut [f64], lhs: &[f64], rhs: &[f64], m: usize, k: usize, n: usize) {
    assert!(dst.len() == m * n && lhs.len() == m * k && rhs.len() == k * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst.fill(0.0);
        return;
    }
    // SAFETY: the three slices hold exactly m×n, m×k and k×n row-major elements (checked
    // above), `dst` is a unique borrow so it overlaps neither operand, and with
    // read_dst = false the destination is only written.
    unsafe {
        super::gemm::strided_gemm(
            [m, n, k],
            super::gemm::Operand::new(dst.as_mut_ptr(), 1, n as isize),
            super::gemm::Operand::new(lhs.as_ptr(), 1, k as isize),
            super::gemm::Operand::new(rhs.as_ptr(), 1, n as isize),
            1.0,
            0.0,
            gemm::Parallelism::None,
        );
    }
}

impl MatView<'_> {
    /// `Σ_ij self[i,j] · b[i,j]` in f64 (objective sums: their differences must not drown
    /// in float32 rounding of the total).
    pub fn trace_mat_mat_f64(&self, b: MatView<'_>) -> f64 {
        on_device!(self.place.on_device() && b.place.on_device() && (self.num_rows(), self.num_cols()) == (b.num_rows(), b.num_cols()) => super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Dot(b)).iter().sum());
        assert_eq!(
            (self.num_rows(), self.num_cols()),
            (b.num_rows(), b.num_cols())
        );
        (0..self.num_rows())
            .map(|r| {
                self.row(r)
                    .iter()
                    .zip(b.row(r))
                    .map(|(&x, &y)| x as f64 * y as f64)
                    .sum::<f64>()
            })
            .sum()
    }

    /// `Σ_ij self[i,j]` in f64.
    pub fn sum_f64(&self) -> f64 {
        on_device!(self.place.on_device() => super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Plain).iter().sum());
        (0..self.num_rows())
            .map(|r| self.row(r).iter().map(|&x| x as f64).sum::<f64>())
            .sum()
    }

    /// `Σ_ij self[i,j]²`, squares and sum in f64 (no overflow for any finite f32 input).
    /// Infinite or NaN exactly when some element is (finite squares cannot overflow f64).
    pub fn sum_squares_f64(&self) -> f64 {
        on_device!(self.place.on_device() => super::cuda_ops::row_reduce(*self, super::cuda_ops::RowSum::Squares).iter().sum());
        // Row sums (in parallel for big matrices), then added in row order: the same result
        // on any number of threads.
        let mut rows = vec![0.0f64; self.num_rows()];
        let work = self.num_rows() * self.num_cols();
        super::parallel::for_chunks(&mut rows, work, |first, sums| {
            for (i, s) in sums.iter_mut().enumerate() {
                *s = super::simd::sum_squares_f64(self.row(first + i));
            }
        });
        rows.iter().sum()
    }
}

/// `y · yᵀ` (rows × rows, row-major) of the row-major rows×cols `y`, products and sums in
/// f64: the exact Gram matrix of the f32 rows up to f64 rounding.
///
/// # Panics
/// If `y.len() != rows·cols` (a programming error).
pub fn gram_f64_of(y: &[Real], rows: usize, cols: usize) -> Vec<f64> {
    assert_eq!(y.len(), rows * cols, "gram_f64_of: shape");
    let (r, d) = (rows, cols);
    let y: Vec<f64> = y.iter().map(|&x| x as f64).collect();
    let mut yt = vec![0.0f64; d * r];
    for i in 0..r {
        for j in 0..d {
            yt[j * r + i] = y[i * d + j];
        }
    }
    let mut g = vec![0.0f64; r * r];
    gemm_f64(&mut g, &y, &yt, r, d, r);
    g
}

/// `coeffs (m×k, f64) · rows (k×n, row-major f32)`, products and sums in f64, rounded once
/// to f32 (row-major m×n).
///
/// # Panics
/// If the shapes do not agree (a programming error).
pub fn row_combination_f64_of(coeffs: &[f64], m: usize, rows: &[Real], k: usize) -> Vec<Real> {
    let n = rows.len().checked_div(k).unwrap_or(0);
    assert!(
        coeffs.len() == m * k && rows.len() == k * n,
        "row_combination_f64_of: shapes"
    );
    let rows: Vec<f64> = rows.iter().map(|&x| x as f64).collect();
    let mut out = vec![0.0f64; m * n];
    gemm_f64(&mut out, coeffs, &rows, m, k, n);
    out.into_iter().map(|y| y as Real).collect()
}

impl MatViewMut<'_> {
    /// Rows `[0, first)` must be orthonormal; rows `[first, rows)` are replaced by unit
    /// vectors orthogonal to every earlier row (f64 Gram–Schmidt, twice for accuracy), each
    /// built from the coordinate axis least covered by the rows so far. Needs rows < cols.
    ///
    /// # Panics
    /// If `self.num_rows() >= self.num_cols()` (no room for orthonormal rows).
    pub fn complete_orthonormal_rows(&mut self, first: usize) {
        let (r, d) = (self.num_rows(), self.num_cols());
        assert!(r < d, "complete_orthonormal_rows: {r} rows of dim {d}");
        let mut q: Vec<f64> = Vec::with_capacity(r * d);
        for i in 0..first.min(r) {
            q.extend(self.row(i).iter().map(|&x| x as f64));
        }
        // covered[j] = Σ_rows q[row][j]²: how much of axis j the rows already span.
        let mut covered = vec![0.0f64; d];
        for row in q.chunks_exact(d) {
            for (c, &x) in covered.iter_mut().zip(row) {
                *c += x * x;
            }
        }
        for i in first..r {
            let axis = (0..d)
                .min_by(|&a, &b| covered[a].total_cmp(&covered[b]))
                .unwrap_or(0);
            let mut v = vec![0.0f64; d];
            v[axis] = 1.0;
            for _ in 0..2 {
                for row in q.chunks_exact(d) {
                    let proj: f64 = row.iter().zip(&v).map(|(a, b)| a * b).sum();
                    for (x, &y) in v.iter_mut().zip(row) {
                        *x -= proj * y;
                    }
                }
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
            }
            for (c, &x) in covered.iter_mut().zip(&v) {
                *c += x * x;
            }
            for (dst, &x) in self.row_mut(i).iter_mut().zip(&v) {
                *dst = x as Real;
            }
            q.extend_from_slice(&v);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::matrix::Matrix;

    #[test]
    fn gram_and_row_combination_match_direct_sums() {
        let y = Matrix::from_rows(&[vec![1.0, 2.0, 3.0], vec![-1.0, 0.5, 1e-4]]);
        let g = super::gram_f64_of(&y.to_vec(), 2, 3);
        let direct = |a: usize, b: usize| -> f64 {
            (0..3)
                .map(|j| y.get(a, j) as f64 * y.get(b, j) as f64)
                .sum()
        };
        for a in 0..2 {
            for b in 0..2 {
                assert_eq!(g[a * 2 + b], direct(a, b));
            }
        }
        let coeffs = [0.5, -2.0, 1.0, 0.0, 3.0, 1.0];
        let out = super::row_combination_f64_of(&coeffs, 3, &y.to_vec(), 2);
        for i in 0..3 {
            for j in 0..3 {
                let want =
                    coeffs[i * 2] * y.get(0, j) as f64 + coeffs[i * 2 + 1] * y.get(1, j) as f64;
                assert_eq!(out[i * 3 + j], want as f32);
            }
        }
    }

    #[test]
    fn completed_rows_are_orthonormal() {
        // One given row along (1,1,0,0)/√2; three more must be filled in.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let mut m = Matrix::from_rows(&[
            vec![h, h, 0.0, 0.0, 0.0],
            vec![9.0; 5],
            vec![9.0; 5],
            vec![9.0; 5],
        ]);
        m.view_mut().complete_orthonormal_rows(1);
        assert_eq!(m.row(0), &[h, h, 0.0, 0.0, 0.0]);
        let g = super::gram_f64_of(&m.to_vec(), 4, 5);
        for a in 0..4 {
            for b in 0..4 {
                let want = if a == b { 1.0 } else { 0.0 };
                assert!(
                    (g[a * 4 + b] - want).abs() < 1e-6,
                    "({a},{b}) = {}",
                    g[a * 4 + b]
                );
            }
        }
    }
}
