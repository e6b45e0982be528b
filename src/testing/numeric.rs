//! Small numeric helpers the component tests share: seeded Gaussian matrices, the inner
//! product of two matrices in double precision (for directional derivatives) and the largest
//! element-wise difference.

use crate::matrix::Matrix;

/// A `rows` × `cols` matrix of standard Gaussian values from generator `seed`.
pub fn gauss(rows: usize, cols: usize, seed: u64) -> Matrix {
    let mut rng = crate::random::seeded_rng(seed);
    let v = (0..rows * cols)
        .map(|_| crate::random::rand_gauss(&mut rng))
        .collect();
    Matrix::from_vec(rows, cols, v)
}

/// Σ a·b over all elements, accumulated in f64.
pub fn dot(a: &Matrix, b: &Matrix) -> f64 {
    assert_eq!((a.num_rows(), a.num_cols()), (b.num_rows(), b.num_cols()));
    a.to_vec()
        .iter()
        .zip(b.to_vec())
        .map(|(&x, y)| x as f64 * y as f64)
        .sum()
}

/// max |a − b| over all elements (the shapes must agree).
pub fn max_abs_diff(a: &Matrix, b: &Matrix) -> f32 {
    assert_eq!((a.num_rows(), a.num_cols()), (b.num_rows(), b.num_cols()));
    a.to_vec()
        .iter()
        .zip(b.to_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Asserts `|a − b| ≤ atol + rtol·|b|` element-wise, with atol = rtol·max(1, max |b|) (`b` is
/// the reference: Kaldi's output, or another computation's), after checking the shapes agree;
/// returns the largest difference. `what` names the pair in the panic message.
pub fn assert_close_to_reference(what: &str, a: &Matrix, b: &Matrix, rtol: f32) -> f32 {
    assert_eq!(
        (a.num_rows(), a.num_cols()),
        (b.num_rows(), b.num_cols()),
        "{what}: shape"
    );
    let atol = rtol * b.view().max_abs().max(1.0);
    let mut worst = 0.0f32;
    for r in 0..a.num_rows() {
        for c in 0..a.num_cols() {
            let (x, y) = (a.get(r, c), b.get(r, c));
            let d = (x - y).abs();
            worst = worst.max(d);
            assert!(
                d <= atol + rtol * y.abs(),
                "{what}: row {r} col {c}: {x} vs reference {y} (diff {d})"
            );
        }
    }
    worst
}
