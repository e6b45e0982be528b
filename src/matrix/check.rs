//! The "debug backend": with `COMPNET_CHECK_FINITE=1` in the environment, kernels check that
//! what they wrote is finite and panic naming the kernel at the first NaN/inf, so a numeric
//! bug is caught where it starts rather than where it is noticed. Off by default (one relaxed
//! atomic load per kernel call).

use super::MatView;
use std::sync::OnceLock;

static ENABLED: OnceLock<bool> = OnceLock::new();

/// True if `COMPNET_CHECK_FINITE` is set to something other than empty or `0`.
pub fn check_finite_enabled() -> bool {
    *ENABLED.get_or_init(|| {
        std::env::var("COMPNET_CHECK_FINITE").is_ok_and(|v| !v.is_empty() && v != "0")
    })
}

/// In debug-backend mode, panics if `m` holds a non-finite value (a deliberate, opt-in
/// diagnostic: the panic message names the kernel, row and column).
#[inline]
pub fn check_finite(kernel: &str, m: MatView<'_>) {
    if check_finite_enabled() {
        check_finite_slow(kernel, m);
    }
}

#[cold]
fn check_finite_slow(kernel: &str, m: MatView<'_>) {
    for r in 0..m.num_rows() {
        if let Some(c) = m.row(r).iter().position(|x| !x.is_finite()) {
            panic!(
                "COMPNET_CHECK_FINITE: {kernel} produced {} at row {r}, column {c} of a {}x{} matrix",
                m.row(r)[c],
                m.num_rows(),
                m.num_cols()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_finite_slow;
    use crate::matrix::Matrix;

    #[test]
    fn finite_matrix_passes() {
        check_finite_slow(
            "test",
            Matrix::from_vec(2, 2, vec![1.0, -2.0, 0.0, 3.5]).view(),
        );
    }

    #[test]
    #[should_panic(expected = "row 1, column 0")]
    fn nan_is_reported_with_its_position() {
        check_finite_slow(
            "test",
            Matrix::from_vec(2, 2, vec![1.0, 2.0, f32::NAN, 0.0]).view(),
        );
    }

    #[test]
    #[should_panic(expected = "inf")]
    fn infinity_is_reported() {
        check_finite_slow(
            "test",
            Matrix::from_vec(1, 2, vec![1.0, f32::INFINITY]).view(),
        );
    }
}
