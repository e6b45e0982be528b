//! Eigendecomposition of small symmetric matrices in f64 (cyclic Jacobi).
//!
//! Used by the natural-gradient preconditioner on R×R matrices (R ≤ a few hundred). Jacobi is
//! chosen over tridiagonalisation because those matrices are nearly diagonal once the estimate
//! has settled, where Jacobi finishes in one or two cheap sweeps, and because its rotation
//! threshold relative to √(a_pp·a_qq) keeps small eigenvalues of positive definite matrices
//! accurate relative to themselves, not only relative to the largest one.

/// Eigenvalues and eigenvectors of a symmetric matrix: `A = V · diag(values) · Vᵀ`.
#[derive(Clone, Debug)]
pub struct SymmetricEigen {
    /// Eigenvalues, largest first.
    pub values: Vec<f64>,
    /// n×n row-major; column k is the unit eigenvector of `values[k]`.
    pub vectors: Vec<f64>,
}

/// Sweeps after which Jacobi gives up (it converges quadratically; 10 are typical for
/// random matrices of a hundred rows, one or two for nearly diagonal ones).
const MAX_SWEEPS: usize = 60;

/// Eigendecomposition of the symmetric n×n row-major matrix `a` (only its upper triangle is
/// read). Non-finite input gives non-finite output, never a panic or an endless loop.
///
/// # Panics
/// If `a.len() != n·n` (a programming error).
pub fn symmetric_eigen(a: &[f64], n: usize) -> SymmetricEigen {
    assert_eq!(
        a.len(),
        n * n,
        "symmetric_eigen: {} elements for {n}×{n}",
        a.len()
    );
    let mut m = vec![0.0f64; n * n];
    for i in 0..n {
        for j in i..n {
            m[i * n + j] = a[i * n + j];
            m[j * n + i] = a[i * n + j];
        }
    }
    // Eigenvectors as rows (vt = Vᵀ), so a rotation touches two contiguous rows.
    let mut vt = vec![0.0f64; n * n];
    for i in 0..n {
        vt[i * n + i] = 1.0;
    }
    for _ in 0..MAX_SWEEPS {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let apq = m[p * n + q];
                let (app, aqq) = (m[p * n + p], m[q * n + q]);
                // Relative to the diagonal, so tiny eigenvalues keep their relative accuracy.
                let threshold = 1e-15 * (app * aqq).abs().sqrt();
                // NaN fails the comparison, so non-finite input ends the sweeps instead of looping.
                let needed = apq.abs() > threshold && apq.abs() >= f64::MIN_POSITIVE;
                if !needed {
                    continue;
                }
                rotated = true;
                let theta = (aqq - app) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                rotate(&mut m, n, p, q, c, s);
                m[p * n + p] = app - t * apq;
                m[q * n + q] = aqq + t * apq;
                m[p * n + q] = 0.0;
                m[q * n + p] = 0.0;
                rotate_rows(&mut vt, n, p, q, c, s);
            }
        }
        if !rotated {
            break;
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| m[j * n + j].total_cmp(&m[i * n + i]));
    let values = order.iter().map(|&i| m[i * n + i]).collect();
    let mut vectors = vec![0.0f64; n * n];
    for (k, &i) in order.iter().enumerate() {
        for r in 0..n {
            vectors[r * n + k] = vt[i * n + r];
        }
    }
    SymmetricEigen { values, vectors }
}

/// Rows p and q of `a` (row length n) become c·a_p − s·a_q and s·a_p + c·a_q.
fn rotate_rows(a: &mut [f64], n: usize, p: usize, q: usize, c: f64, s: f64) {
    let (head, tail) = a.split_at_mut(q * n);
    let (row_p, row_q) = (&mut head[p * n..p * n + n], &mut tail[..n]);
    for (x, y) in row_p.iter_mut().zip(row_q.iter_mut()) {
        let (a, b) = (*x, *y);
        *x = c * a - s * b;
        *y = s * a + c * b;
    }
}

/// `m = Pᵀ·m·P` for the plane rotation P in (p < q) with cosine c and sine s, m symmetric:
/// rows p and q are rotated, then mirrored into columns p and q (the 2×2 block at their
/// crossing is set by the caller).
fn rotate(m: &mut [f64], n: usize, p: usize, q: usize, c: f64, s: f64) {
    rotate_rows(m, n, p, q, c, s);
    for k in 0..n {
        m[k * n + p] = m[p * n + k];
        m[k * n + q] = m[q * n + k];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_symmetric(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in i..n {
                let x: f64 = rng.random_range(-1.0..1.0);
                a[i * n + j] = x;
                a[j * n + i] = x;
            }
        }
        a
    }

    /// max |A·v_k − λ_k·v_k| and max |VᵀV − I|.
    fn residuals(a: &[f64], n: usize, e: &SymmetricEigen) -> (f64, f64) {
        let (mut eig_res, mut orth_res) = (0.0f64, 0.0f64);
        for k in 0..n {
            for i in 0..n {
                let av: f64 = (0..n).map(|j| a[i * n + j] * e.vectors[j * n + k]).sum();
                eig_res = eig_res.max((av - e.values[k] * e.vectors[i * n + k]).abs());
            }
            for l in 0..n {
                let d: f64 = (0..n)
                    .map(|r| e.vectors[r * n + k] * e.vectors[r * n + l])
                    .sum();
                orth_res = orth_res.max((d - if k == l { 1.0 } else { 0.0 }).abs());
            }
        }
        (eig_res, orth_res)
    }

    #[test]
    fn random_matrices_are_diagonalised() {
        for (n, seed) in [(1, 1), (2, 2), (5, 3), (17, 4), (40, 5)] {
            let a = random_symmetric(n, seed);
            let e = symmetric_eigen(&a, n);
            let (eig_res, orth_res) = residuals(&a, n, &e);
            assert!(
                eig_res < 1e-12 && orth_res < 1e-12,
                "n={n}: {eig_res} {orth_res}"
            );
            assert!(
                e.values.windows(2).all(|w| w[0] >= w[1]),
                "not sorted: {:?}",
                e.values
            );
            let trace: f64 = (0..n).map(|i| a[i * n + i]).sum();
            assert!((e.values.iter().sum::<f64>() - trace).abs() < 1e-12);
        }
    }

    #[test]
    fn known_spectrum_with_repeats_and_tiny_values() {
        // Q·diag(λ)·Qᵀ with a rotation Q; λ has a repeated value and one 1e-12 of the largest.
        let lambda = [5.0, 2.0, 2.0, 1e-12 * 5.0];
        let n = lambda.len();
        let (c, s) = (0.6f64, 0.8f64);
        let q = [
            c, -s, 0.0, 0.0, s, c, 0.0, 0.0, 0.0, 0.0, c, s, 0.0, 0.0, -s, c,
        ];
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n)
                    .map(|k| q[i * n + k] * lambda[k] * q[j * n + k])
                    .sum();
            }
        }
        let e = symmetric_eigen(&a, n);
        let mut want = lambda.to_vec();
        want.sort_by(|x, y| y.total_cmp(x));
        for (got, want) in e.values.iter().zip(&want) {
            // Entries of size 5 carry rounding of ~1e-15, which bounds any method's accuracy.
            assert!((got - want).abs() <= 1e-13, "{got} vs {want}");
        }
        let (eig_res, orth_res) = residuals(&a, n, &e);
        assert!(eig_res < 1e-14 && orth_res < 1e-14);
    }

    #[test]
    fn non_finite_input_terminates() {
        let a = [1.0, f64::NAN, f64::NAN, 2.0];
        let e = symmetric_eigen(&a, 2);
        assert_eq!(e.values.len(), 2);
        let a = [f64::INFINITY, 1.0, 1.0, 2.0];
        let _ = symmetric_eigen(&a, 2);
    }
}
