//! Matrix products. Placeholder naive kernel; the matrix-backend work replaces it with a
//! measured pure-Rust GEMM crate (see docs/PERFORMANCE.md).

use super::{MatView, MatViewMut, Real, Trans};

/// Which GEMM implementation is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmBackend {
    Naive,
}

/// Name of the GEMM backend in use (for `info` and benchmarks).
pub fn gemm_backend_name() -> &'static str {
    "naive"
}

/// Bounds the number of threads used by the numeric kernels (0 = all cores).
pub fn set_num_threads(_n: usize) {}

impl MatViewMut<'_> {
    /// `self = alpha · op(a) · op(b) + beta · self` (Kaldi's AddMatMat).
    pub fn add_mat_mat(
        &mut self,
        alpha: Real,
        a: MatView<'_>,
        ta: Trans,
        b: MatView<'_>,
        tb: Trans,
        beta: Real,
    ) {
        let (m, k) = match ta {
            Trans::No => (a.num_rows(), a.num_cols()),
            Trans::Yes => (a.num_cols(), a.num_rows()),
        };
        let (k2, n) = match tb {
            Trans::No => (b.num_rows(), b.num_cols()),
            Trans::Yes => (b.num_cols(), b.num_rows()),
        };
        assert!(
            k == k2 && m == self.num_rows() && n == self.num_cols(),
            "add_mat_mat: shapes"
        );
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f32;
                for l in 0..k {
                    let x = if ta == Trans::No { a.get(i, l) } else { a.get(l, i) };
                    let y = if tb == Trans::No { b.get(l, j) } else { b.get(j, l) };
                    s += x * y;
                }
                let old = if beta == 0.0 { 0.0 } else { beta * self.get(i, j) };
                self.set(i, j, alpha * s + old);
            }
        }
    }
}
