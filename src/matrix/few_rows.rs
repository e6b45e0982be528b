//! Products of a few rows by a weight matrix kept transposed: `Y = alpha·X·Wᵀ + beta·Y` with X
//! of at most [`MAX_ROWS`] rows, reading Wᵀ (row-major, `t[c·stride + j] = W[j, c]`, the copy
//! `WeightMatrix` keeps) in place.
//!
//! A looped recurrent network multiplies one row per stream and time step by its recurrent
//! weights (4 rows × 256 → 4096 in the Switchboard TDNN-LSTM with 4 streams). A packing GEMM
//! copies W into its own layout on every such call, reading and writing the 4 MB that the
//! product itself reads once; here every element of Wᵀ is loaded once per group of up to 4
//! rows and multiplied into all of them, 16 output columns at a time, with a fused
//! multiply-add per element, summing over c in order.

use super::Real;

/// The most rows [`few_rows_product`] takes.
pub(crate) const MAX_ROWS: usize = 8;

/// Whether [`few_rows_product`] runs with fused multiply-adds in vectors here (AVX2 and FMA);
/// elsewhere `mul_add` is a library call and the GEMM is faster.
pub(crate) fn available() -> bool {
    super::simd::has_avx2_fma()
}

/// Output columns per block: one AVX-512 register, two AVX2 ones.
const LANES: usize = 16;

/// Rows multiplied together per pass over Wᵀ (their accumulators stay in registers).
const GROUP: usize = 4;

/// The operands of [`few_rows_product`].
pub(crate) struct FewRows<'a> {
    /// Y, `rows` × `out` at row stride `y_stride`.
    pub y: &'a mut [Real],
    pub y_stride: usize,
    /// X, `rows` × `k` at row stride `x_stride`.
    pub x: &'a [Real],
    pub x_stride: usize,
    pub rows: usize,
    pub k: usize,
    pub out: usize,
    /// Wᵀ, `k` × `t_stride`, `t_stride` a multiple of 16 and ≥ `out`.
    pub t: &'a [Real],
    pub t_stride: usize,
    pub alpha: Real,
    pub beta: Real,
}

impl FewRows<'_> {
    /// Whether the slices hold the shapes the fields give (a programming error otherwise).
    fn shapes_agree(&self) -> bool {
        let need = |rows: usize, stride: usize, cols: usize| {
            if rows == 0 || cols == 0 {
                0
            } else {
                (rows - 1) * stride + cols
            }
        };
        self.rows <= MAX_ROWS
            && self.t_stride.is_multiple_of(LANES)
            && self.out <= self.t_stride
            && self.y.len() >= need(self.rows, self.y_stride, self.out)
            && self.x.len() >= need(self.rows, self.x_stride, self.k)
            && self.t.len() >= self.k * self.t_stride
    }
}

/// Rows `r0..r0 + R` of the product, 16 output columns at a time.
///
/// # Safety
/// The CPU must have AVX2 and FMA, and `p` must pass [`FewRows::shapes_agree`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group<const R: usize>(p: &mut FewRows<'_>, r0: usize) {
    use std::arch::x86_64::{
        _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let (k, ts) = (p.k, p.t_stride);
    let mut j0 = 0;
    while j0 < p.out {
        let mut lo = [_mm256_setzero_ps(); R];
        let mut hi = [_mm256_setzero_ps(); R];
        for c in 0..k {
            // SAFETY: j0 + 16 ≤ t_stride (out ≤ t_stride, a multiple of 16) and c < k, so
            // the 16 floats lie inside t (length ≥ k·t_stride).
            let w = p.t.as_ptr().add(c * ts + j0);
            let (w0, w1) = (_mm256_loadu_ps(w), _mm256_loadu_ps(w.add(8)));
            for r in 0..R {
                let xv = _mm256_broadcast_ss(&p.x[(r0 + r) * p.x_stride + c]);
                lo[r] = _mm256_fmadd_ps(xv, w0, lo[r]);
                hi[r] = _mm256_fmadd_ps(xv, w1, hi[r]);
            }
        }
        let width = LANES.min(p.out - j0);
        for r in 0..R {
            let mut a = [0.0 as Real; LANES];
            // SAFETY: a holds 16 floats.
            _mm256_storeu_ps(a.as_mut_ptr(), lo[r]);
            _mm256_storeu_ps(a.as_mut_ptr().add(8), hi[r]);
            let y = &mut p.y[(r0 + r) * p.y_stride + j0..][..width];
            if p.beta == 0.0 {
                for (d, &v) in y.iter_mut().zip(&a) {
                    *d = p.alpha * v;
                }
            } else {
                for (d, &v) in y.iter_mut().zip(&a) {
                    *d = p.alpha * v + p.beta * *d;
                }
            }
        }
        j0 += LANES;
    }
}

/// `Y = alpha·X·Wᵀ + beta·Y` for the operands of `p` (with beta 0, Y is not read). Call it
/// only where [`available`] says so.
///
/// # Panics
/// If the slices are shorter than the shapes need, there are more than [`MAX_ROWS`] rows, or
/// the CPU lacks AVX2 or FMA (programming errors).
pub(crate) fn few_rows_product(p: &mut FewRows<'_>) {
    assert!(
        p.shapes_agree() && available(),
        "few_rows_product: shapes or CPU"
    );
    #[cfg(target_arch = "x86_64")]
    {
        let mut r0 = 0;
        while r0 < p.rows {
            // SAFETY: available() checked AVX2 and FMA, shapes_agree() the slices.
            unsafe {
                match (p.rows - r0).min(GROUP) {
                    1 => group::<1>(p, r0),
                    2 => group::<2>(p, r0),
                    3 => group::<3>(p, r0),
                    _ => group::<GROUP>(p, r0),
                }
            }
            r0 += GROUP;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row count, output widths off the 16-column blocks, beta 0 and not: the product
    /// against a plain triple loop in f64.
    #[test]
    fn few_rows_product_matches_the_definition() {
        if !available() {
            return;
        }
        let (k, out, stride) = (37, 41, 48);
        let val = |i: usize| ((i * 7919 % 101) as Real - 50.0) / 64.0;
        let t: Vec<Real> = (0..k * stride).map(val).collect();
        for rows in 0..=MAX_ROWS {
            for beta in [0.0, 0.5] {
                let x: Vec<Real> = (0..rows * k).map(|i| val(i + 13)).collect();
                let y0: Vec<Real> = (0..rows * out).map(|i| val(i + 29)).collect();
                let mut y = y0.clone();
                few_rows_product(&mut FewRows {
                    y: &mut y,
                    y_stride: out,
                    x: &x,
                    x_stride: k,
                    rows,
                    k,
                    out,
                    t: &t,
                    t_stride: stride,
                    alpha: 2.0,
                    beta,
                });
                for r in 0..rows {
                    for j in 0..out {
                        let dot: f64 = (0..k)
                            .map(|c| f64::from(x[r * k + c]) * f64::from(t[c * stride + j]))
                            .sum();
                        let want = 2.0 * dot + f64::from(beta) * f64::from(y0[r * out + j]);
                        let got = f64::from(y[r * out + j]);
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "rows {rows} beta {beta} ({r}, {j}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
