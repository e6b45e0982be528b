//! Products of a few rows by a weight matrix kept in the native GEMM's packed layout:
//! `Y = alpha·X·Wᵀ + beta·Y` with X of at most [`MAX_ROWS`] rows, reading Wᵀ where
//! `sgemm::PackedB` put it, in place.
//!
//! A looped recurrent network multiplies one row per stream and time step by its recurrent
//! weights (4 rows × 256 → 4096 in the Switchboard TDNN-LSTM with 4 streams). A packing GEMM
//! copies W into its own layout on every such call, reading and writing the 4 MB that the
//! product itself reads once; here every element of Wᵀ is loaded once per group of up to 4
//! rows and multiplied into all of them, 16 output columns at a time, with a fused
//! multiply-add per element, summing over c in order (one accumulator per output element,
//! so the bits depend neither on the layout nor on the thread count).
//!
//! The layout ([`Panels`]) is the GEMM's packed right operand: Wᵀ (k × n) cut into k-blocks
//! of `kb` rows (the last may be shorter), each k-block cut into panels of 16 columns, each
//! panel stored row after row (16 floats per row of Wᵀ). A 16-column block of the output
//! thus reads one contiguous run of `kb × 16` floats per k-block: the hardware prefetchers
//! stream it. Row-major Wᵀ, read 16 columns at a time, put every row of such a block on
//! another 4 KiB page (16 KiB apart for 4096 outputs), where the prefetchers stop, and the
//! product waited on memory latency.

use super::Real;

/// The most rows [`few_rows_product`] takes.
pub(crate) const MAX_ROWS: usize = 8;

/// Whether [`few_rows_product`] runs with fused multiply-adds in vectors here (AVX2 and FMA);
/// elsewhere `mul_add` is a library call and the GEMM is faster.
pub(crate) fn available() -> bool {
    super::simd::has_avx2_fma()
}

/// Output columns per block (panel width): two AVX2 registers.
pub(crate) const LANES: usize = 16;

/// Rows multiplied together per pass over Wᵀ (their accumulators stay in registers).
const GROUP: usize = 4;

/// Wᵀ (k × n) in panels: element (c, j), with `c0 = c - c % kb` and `kc = min(kb, k - c0)`,
/// at `data[c0·n_pad + (j - j % 16)·kc + (c - c0)·16 + j % 16]`.
#[derive(Clone, Copy)]
pub(crate) struct Panels<'a> {
    pub data: &'a [Real],
    /// Rows of Wᵀ per k-block (≥ 1).
    pub kb: usize,
    /// n rounded up to a multiple of 16: the floats per row of Wᵀ, padding included.
    pub n_pad: usize,
}

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
    /// Wᵀ, `k` × `out` (`out` ≤ `n_pad`).
    pub w: Panels<'a>,
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
            && self.w.kb > 0
            && self.w.n_pad.is_multiple_of(LANES)
            && self.out <= self.w.n_pad
            && self.y.len() >= need(self.rows, self.y_stride, self.out)
            && self.x.len() >= need(self.rows, self.x_stride, self.k)
            && self
                .k
                .checked_mul(self.w.n_pad)
                .is_some_and(|n| self.w.data.len() >= n)
    }
}

/// Rows `r0..r0 + R` of the product, 16 output columns at a time.
///
/// # Safety
/// The CPU must have AVX2 and FMA, `p` must pass [`FewRows::shapes_agree`], and
/// `r0 + R ≤ p.rows`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group<const R: usize>(p: &mut FewRows<'_>, r0: usize) {
    use std::arch::x86_64::{
        _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let (k, kb, n_pad) = (p.k, p.w.kb, p.w.n_pad);
    let wp = p.w.data.as_ptr();
    // Row r of this group of X.
    let xrow = |r: usize| p.x.as_ptr().wrapping_add((r0 + r) * p.x_stride);
    let mut j0 = 0;
    while j0 < p.out {
        let mut lo = [_mm256_setzero_ps(); R];
        let mut hi = [_mm256_setzero_ps(); R];
        let mut c0 = 0;
        while c0 < k {
            let kc = kb.min(k - c0);
            // SAFETY: the panel of columns j0..j0 + 16 (j0 < out ≤ n_pad, a multiple of 16)
            // in k-block c0 spans floats c0·n_pad + j0·kc .. + 16·kc ≤ (c0 + kc)·n_pad ≤
            // k·n_pad ≤ data.len(); X's rows r0..r0 + R < rows have k floats each.
            unsafe {
                let w = wp.add(c0 * n_pad + j0 * kc);
                for c in 0..kc {
                    let (w0, w1) = (
                        _mm256_loadu_ps(w.add(16 * c)),
                        _mm256_loadu_ps(w.add(16 * c + 8)),
                    );
                    for r in 0..R {
                        let xv = _mm256_broadcast_ss(&*xrow(r).add(c0 + c));
                        lo[r] = _mm256_fmadd_ps(xv, w0, lo[r]);
                        hi[r] = _mm256_fmadd_ps(xv, w1, hi[r]);
                    }
                }
            }
            c0 += kc;
        }
        let width = LANES.min(p.out - j0);
        for r in 0..R {
            let mut a = [0.0 as Real; LANES];
            // SAFETY: a holds 16 floats.
            unsafe {
                _mm256_storeu_ps(a.as_mut_ptr(), lo[r]);
                _mm256_storeu_ps(a.as_mut_ptr().add(8), hi[r]);
            }
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
            // SAFETY: available() checked AVX2 and FMA, shapes_agree() the slices, and each
            // group's rows lie below p.rows.
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
pub(crate) mod tests {
    use super::*;

    /// Wᵀ of the row-major `out` × `k` matrix `w`, in panels of k-blocks of `kb` rows (the
    /// layout [`Panels`] documents), padding zero.
    pub(crate) fn panels_of(w: &[Real], out: usize, k: usize, kb: usize) -> (Vec<Real>, usize) {
        let n_pad = out.next_multiple_of(LANES);
        let mut data = vec![0.0; k * n_pad];
        for c in 0..k {
            let c0 = c - c % kb;
            let kc = kb.min(k - c0);
            for j in 0..out {
                data[c0 * n_pad + (j - j % LANES) * kc + (c - c0) * LANES + j % LANES] =
                    w[j * k + c];
            }
        }
        (data, n_pad)
    }

    /// The definition, in the kernel's order: per output, one fused multiply-add per c in
    /// order, then `alpha·acc + beta·y` (`alpha·acc` with beta 0).
    pub(crate) fn reference(
        x: &[Real],
        w: &[Real],
        y: &mut [Real],
        [rows, k, out]: [usize; 3],
        alpha: Real,
        beta: Real,
    ) {
        for r in 0..rows {
            for j in 0..out {
                let mut acc: Real = 0.0;
                for c in 0..k {
                    acc = x[r * k + c].mul_add(w[j * k + c], acc);
                }
                let d = &mut y[r * out + j];
                *d = if beta == 0.0 {
                    alpha * acc
                } else {
                    alpha * acc + beta * *d
                };
            }
        }
    }

    /// Every row count, output widths off the 16-column blocks, one and several k-blocks (a
    /// short last one too), alpha and beta, NaN in Y with beta 0: the same bits as the
    /// definition summed in the same order, and within rounding of a sum in f64.
    #[test]
    fn few_rows_product_matches_the_definition() {
        if !available() {
            return;
        }
        let val = |i: usize| ((i * 7919 % 101) as Real - 50.0) / 64.0;
        for &(k, out, kb) in &[
            (37, 41, 256),
            (37, 16, 10),
            (50, 33, 16),
            (1, 5, 1),
            (20, 48, 20),
        ] {
            let w: Vec<Real> = (0..out * k).map(|i| val(i + 5)).collect();
            let (data, n_pad) = panels_of(&w, out, k, kb);
            for rows in 0..=MAX_ROWS {
                for (alpha, beta) in [(1.0, 0.0), (2.0, 0.0), (2.0, 0.5), (-0.5, 1.0)] {
                    let x: Vec<Real> = (0..rows * k).map(|i| val(i + 13)).collect();
                    let y0: Vec<Real> = (0..rows * out)
                        .map(|i| if beta == 0.0 { Real::NAN } else { val(i + 29) })
                        .collect();
                    let mut want = y0.clone();
                    reference(&x, &w, &mut want, [rows, k, out], alpha, beta);
                    let mut y = y0.clone();
                    few_rows_product(&mut FewRows {
                        y: &mut y,
                        y_stride: out,
                        x: &x,
                        x_stride: k,
                        rows,
                        k,
                        out,
                        w: Panels {
                            data: &data,
                            kb,
                            n_pad,
                        },
                        alpha,
                        beta,
                    });
                    for r in 0..rows {
                        for j in 0..out {
                            let (got, bits) = (y[r * out + j], want[r * out + j]);
                            let at = format!(
                                "k {k} out {out} kb {kb} rows {rows} α {alpha} β {beta} ({r}, {j})"
                            );
                            assert_eq!(got.to_bits(), bits.to_bits(), "{at}: {got} vs {bits}");
                            let dot: f64 = (0..k)
                                .map(|c| f64::from(x[r * k + c]) * f64::from(w[j * k + c]))
                                .sum();
                            let old = if beta == 0.0 {
                                0.0
                            } else {
                                f64::from(y0[r * out + j])
                            };
                            let exact = f64::from(alpha) * dot + f64::from(beta) * old;
                            assert!(
                                (f64::from(got) - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                                "{at}: {got} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Rows of X and Y inside bigger matrices (strides past the widths): only the views are
    /// read and written.
    #[test]
    fn few_rows_product_keeps_to_its_views() {
        if !available() {
            return;
        }
        let (rows, k, out, kb) = (5, 24, 20, 8);
        let (xs, ys) = (k + 3, out + 7);
        let val = |i: usize| ((i * 31 % 17) as Real - 8.0) / 8.0;
        let w: Vec<Real> = (0..out * k).map(val).collect();
        let (data, n_pad) = panels_of(&w, out, k, kb);
        let xb: Vec<Real> = (0..rows * xs).map(|i| val(i + 3)).collect();
        let mut yb = vec![7.0; rows * ys];
        few_rows_product(&mut FewRows {
            y: &mut yb,
            y_stride: ys,
            x: &xb,
            x_stride: xs,
            rows,
            k,
            out,
            w: Panels {
                data: &data,
                kb,
                n_pad,
            },
            alpha: 1.0,
            beta: 0.0,
        });
        let x: Vec<Real> = (0..rows).flat_map(|r| xb[r * xs..][..k].to_vec()).collect();
        let mut want = vec![0.0; rows * out];
        reference(&x, &w, &mut want, [rows, k, out], 1.0, 0.0);
        for r in 0..rows {
            assert_eq!(&yb[r * ys..][..out], &want[r * out..][..out], "row {r}");
            assert!(
                yb[r * ys + out..][..ys - out].iter().all(|&v| v == 7.0),
                "row {r}"
            );
        }
    }
}
