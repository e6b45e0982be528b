//! 8-bit integer products for inference: `Y = alpha · X·Wᵀ + beta · Y` with W quantized per
//! output row and X per row, products accumulated in 32-bit integers and scaled back to
//! floats in the same pass.
//!
//! **Quantization.** Row j of W is scaled by `s_j = max|W[j, ·]| / 63` and rounded to
//! `q ∈ [−63, 63]`, stored as the unsigned byte `q + 64 ∈ [1, 127]`. Row r of X is scaled by
//! `t_r = max|X[r, ·]| / 127` and rounded to a signed byte in `[−127, 127]`. The integer dot
//! product of the stored bytes is `Σ (q_w + 64)·q_x = Σ q_w·q_x + 64·Σ q_x`, so subtracting
//! `64·Σ_k q_x[r, k]` (known when X is quantized) leaves the signed product exactly.
//!
//! **Why 7 bits for the weights.** x86's byte products multiply an unsigned byte by a signed
//! one. AVX-512 VNNI (`vpdpbusd`) adds four such products straight into 32 bits, but AVX2's
//! `vpmaddubsw` first adds pairs into 16 bits with saturation: two products of 255 × 127
//! overflow. With the unsigned operand in `[1, 127]` a pair is at most 2 · 127 · 127 = 32258,
//! so no path ever saturates and all of them (VNNI, AVX2, portable) compute the same
//! integers, hence the same floats. The 8th bit goes to the activations, whose rows have
//! heavier tails than weight rows; the cost is the weights' rounding step (max/63 instead
//! of max/127), measured in docs/PERFORMANCE.md ("int8 inference").
//!
//! **Activations ≥ 0.** Where no quantized activation of a product is negative (the input of
//! every layer after a ReLU), the AVX2 kernel takes the activations as the unsigned operand
//! and the weights, less their offset, as the signed one: a product is then at most
//! 127 · 63, so two groups' four products per lane add up in 16 bits (≤ 32004) before they
//! are widened, one widening multiply-add for every two byte-product instructions instead
//! of one for each. The integers, and so the floats, are the other paths' exactly.
//!
//! **Layout.** W is packed in panels of 16 output rows; within a panel, groups of 4 input
//! columns, each group 64 bytes: row j's 4 bytes at `4·j`. One group is one 512-bit VNNI
//! operand (16 lanes of 4 products) or two 256-bit AVX2 ones; X's 4 bytes of the same group
//! are broadcast to every lane. Columns are padded with zero activations to a multiple of 4.
//!
//! **Scaling back.** `y = ((acc − 64·Σq_x) as f32 · (alpha · t_r)) · s_j (+ beta · y)`, the
//! same float operations in every path (no fused multiply-add), so the paths agree to the
//! bit, which the tests check.

use super::{MatView, MatViewMut, Real};

/// Largest weight level: weights are quantized to [−63, 63] (see the module doc).
pub(crate) const WEIGHT_LEVELS: i32 = 63;
/// Added to a weight level to store it as an unsigned byte in [1, 127].
const WEIGHT_OFFSET: i32 = 64;
/// Largest activation level: activations are quantized to [−127, 127].
pub(crate) const ACT_LEVELS: i32 = 127;
/// Output rows per packed panel (one 512-bit register of 32-bit sums).
const PANEL: usize = 16;
/// Input columns per group (one 32-bit lane of bytes).
const GROUP: usize = 4;
/// Rows of X per micro-tile.
const MR: usize = 4;
/// Panels per micro-tile of the AVX-512 path (64 output columns, 16 accumulators).
const NP_VNNI: usize = 4;
/// Most input columns a product may have: |acc| ≤ K · 127 · 127 must fit in an i32.
pub(crate) const MAX_COLS: usize = 131_072;

/// W (out × in) quantized per row and packed for the kernels (see the module doc).
#[derive(Debug, Clone)]
pub struct PackedWeights {
    out: usize,
    inp: usize,
    groups: usize,
    data: Vec<u8>,
    /// Per output row `s_j`, padded with zeros to whole panels.
    scales: Vec<Real>,
}

impl PackedWeights {
    /// Quantizes and packs `w` (out × in). Needs `in ≤ MAX_COLS`.
    pub fn new(w: MatView<'_>) -> Self {
        let (out, inp) = (w.num_rows(), w.num_cols());
        assert!(inp <= MAX_COLS, "PackedWeights: {inp} columns");
        let groups = inp.div_ceil(GROUP);
        let panels = out.div_ceil(PANEL);
        let mut data = vec![WEIGHT_OFFSET as u8; panels * groups * PANEL * GROUP];
        let mut scales = vec![0.0; panels * PANEL];
        let mut q = vec![0i8; inp];
        for (j, scale) in scales.iter_mut().enumerate().take(out) {
            *scale = quantize_row_fastest(w.row(j), WEIGHT_LEVELS, &mut q).0;
            let (p, jj) = (j / PANEL, j % PANEL);
            let panel = &mut data[p * groups * PANEL * GROUP..(p + 1) * groups * PANEL * GROUP];
            // Row j's 4 bytes of each group, one group every PANEL · GROUP bytes.
            for (d, qs) in panel[jj * GROUP..]
                .chunks_mut(PANEL * GROUP)
                .zip(q.chunks(GROUP))
            {
                for (b, &v) in d.iter_mut().zip(qs) {
                    *b = (v as i32 + WEIGHT_OFFSET) as u8;
                }
            }
        }
        PackedWeights {
            out,
            inp,
            groups,
            data,
            scales,
        }
    }

    /// Output rows.
    pub fn num_rows(&self) -> usize {
        self.out
    }

    /// Input columns.
    pub fn num_cols(&self) -> usize {
        self.inp
    }

    /// W as the kernels see it: `s_j · q` per element (for error bounds in tests).
    pub fn dequantized(&self) -> Vec<Vec<Real>> {
        (0..self.out)
            .map(|j| {
                let (p, jj) = (j / PANEL, j % PANEL);
                let panel = &self.data[p * self.groups * PANEL * GROUP..];
                (0..self.inp)
                    .map(|k| {
                        let b = panel[(k / GROUP) * PANEL * GROUP + jj * GROUP + k % GROUP];
                        (b as i32 - WEIGHT_OFFSET) as Real * self.scales[j]
                    })
                    .collect()
            })
            .collect()
    }

    fn panel(&self, p: usize) -> &[u8] {
        let len = self.groups * PANEL * GROUP;
        &self.data[p * len..(p + 1) * len]
    }

    fn num_panels(&self) -> usize {
        self.out.div_ceil(PANEL)
    }
}

/// Rounds `x / s` into `q` with `s = max|x| / levels`; returns `(s, Σ q)`. A row of zeros
/// (or of magnitudes too small for `levels / max` to be finite) has `s = 0`; a row with a
/// non-finite element has `s = NaN` and `q = 0`, so its products come out NaN as a float
/// product would.
fn quantize_row(x: &[Real], levels: i32, q: &mut [i8]) -> (Real, i32) {
    quantize_row_by(x, levels, q, simd_max_abs, simd_round_bytes)
}

/// [`quantize_row`] on the AVX2 passes where the CPU has them (the same results).
fn quantize_row_fastest(x: &[Real], levels: i32, q: &mut [i8]) -> (Real, i32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 checked.
        return unsafe { x86::quantize_row_avx2(x, levels, q) };
    }
    quantize_row(x, levels, q)
}

/// [`quantize_row`] with the two passes given: `max_abs` (max |x|, all finite) and `round`
/// (`q = round(x · inv)` clamped to ±levels, returning Σ q). Every implementation of the
/// passes computes the same values (the tests compare them).
#[inline(always)]
fn quantize_row_by(
    x: &[Real],
    levels: i32,
    q: &mut [i8],
    max_abs: impl FnOnce(&[Real]) -> (Real, bool),
    round: impl FnOnce(&[Real], Real, Real, &mut [i8]) -> i32,
) -> (Real, i32) {
    let (m, finite) = max_abs(x);
    if !finite {
        q[..x.len()].fill(0);
        return (Real::NAN, 0);
    }
    if m == 0.0 {
        q[..x.len()].fill(0);
        return (0.0, 0);
    }
    let lv = levels as Real;
    let inv = lv / m;
    if !inv.is_finite() {
        // max|x| below 127 / f32::MAX: far below anything a product could show.
        q[..x.len()].fill(0);
        return (0.0, 0);
    }
    (m / lv, round(x, inv, lv, &mut q[..x.len()]))
}

super::simd::multiversion! {
    /// max |x| (exact: a maximum does not round) and whether every element is finite.
    fn simd_max_abs(x: &[Real]) -> (Real, bool) {
        let mut lanes = [0.0 as Real; 16];
        let mut bad = [false; 16];
        let chunks = x.chunks_exact(16);
        let rest = chunks.remainder();
        for c in chunks {
            for i in 0..16 {
                let a = c[i].abs();
                bad[i] |= a.is_nan() || a > Real::MAX;
                lanes[i] = if a > lanes[i] { a } else { lanes[i] };
            }
        }
        let mut m: Real = 0.0;
        let mut b = false;
        for i in 0..16 {
            m = if lanes[i] > m { lanes[i] } else { m };
            b |= bad[i];
        }
        for &v in rest {
            let a = v.abs();
            b |= a.is_nan() || a > Real::MAX;
            m = if a > m { a } else { m };
        }
        (m, !b)
    }
}

super::simd::multiversion! {
    /// `q = round(x · inv)` (ties to even) clamped to ±levels; returns Σ q. The input is
    /// finite, so the clamped value converts exactly (16 lanes of partial sums).
    fn simd_round_bytes(x: &[Real], inv: Real, levels: Real, q: &mut [i8]) -> i32 {
        let n = x.len().min(q.len());
        let (x, q) = (&x[..n], &mut q[..n]);
        let mut lanes = [0i32; 16];
        let mut qc = q.chunks_exact_mut(16);
        let mut xc = x.chunks_exact(16);
        for (d, c) in (&mut qc).zip(&mut xc) {
            for i in 0..16 {
                let r = (c[i] * inv).round_ties_even().clamp(-levels, levels);
                // SAFETY: r is an integer in [-127, 127] (finite input, clamped).
                let v = unsafe { r.to_int_unchecked::<i32>() };
                d[i] = v as i8;
                lanes[i] += v;
            }
        }
        let mut sum: i32 = lanes.iter().sum();
        for (d, &v) in qc.into_remainder().iter_mut().zip(xc.remainder()) {
            let r = (v * inv).round_ties_even().clamp(-levels, levels) as i32;
            *d = r as i8;
            sum += r;
        }
        sum
    }
}

/// X (rows × in) quantized per row: bytes padded to whole groups (with zeros, which add
/// nothing), `alpha · t_r` and the offset correction `64 · Σ q_x` per row. One per thread is
/// kept and refilled ([`ACTIVATIONS`]), so a product allocates (and faults in) nothing once
/// the buffers have grown to the largest product's size.
struct QuantizedRows {
    stride: usize,
    data: Vec<i8>,
    row_scale: Vec<Real>,
    correction: Vec<i32>,
    /// No quantized activation is negative (rows after a ReLU): the AVX2 kernel then takes
    /// them as the unsigned operand (module doc).
    non_negative: bool,
}

thread_local! {
    /// Each thread's quantized activations, reused by every product it computes.
    static ACTIVATIONS: std::cell::RefCell<QuantizedRows> =
        const { std::cell::RefCell::new(QuantizedRows::empty()) };
}

impl QuantizedRows {
    const fn empty() -> Self {
        QuantizedRows {
            stride: 0,
            data: Vec::new(),
            row_scale: Vec::new(),
            correction: Vec::new(),
            non_negative: false,
        }
    }

    /// Quantizes `x`, the row passes chosen for `kernel` (AVX2 ones where the kernel runs,
    /// which compute the same bytes as the portable ones).
    fn fill(&mut self, x: MatView<'_>, alpha: Real, kernel: Int8Kernel) {
        let (rows, cols) = (x.num_rows(), x.num_cols());
        let stride = cols.div_ceil(GROUP) * GROUP;
        // Rows padded to whole micro-tiles; padding rows are zeros and never stored.
        let padded = rows.div_ceil(MR) * MR;
        self.stride = stride;
        if self.data.len() < padded * stride {
            self.data.resize(padded * stride, 0);
        }
        if self.row_scale.len() < padded {
            self.row_scale.resize(padded, 0.0);
            self.correction.resize(padded, 0);
        }
        self.data[rows * stride..padded * stride].fill(0);
        let mut signs = 0u8;
        for r in 0..rows {
            let q = &mut self.data[r * stride..(r + 1) * stride];
            q[cols..].fill(0);
            let (s, sum) = match kernel {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the AVX2 and VNNI kernels run only where `available()` found
                // AVX2 (every AVX-512 VNNI CPU has it too; `forward_with` checks).
                Int8Kernel::Avx2 | Int8Kernel::Vnni => unsafe {
                    x86::quantize_row_avx2(x.row(r), ACT_LEVELS, q)
                },
                _ => quantize_row(x.row(r), ACT_LEVELS, q),
            };
            self.row_scale[r] = alpha * s;
            self.correction[r] = WEIGHT_OFFSET * sum;
            signs = q.iter().fold(signs, |m, &b| m | b as u8);
        }
        self.non_negative = signs & 0x80 == 0;
    }

    /// The 4 bytes of group `g` of row `r` as one little-endian i32 (the broadcast operand).
    #[inline(always)]
    fn group(&self, r: usize, g: usize) -> i32 {
        let o = r * self.stride + g * GROUP;
        i32::from_le_bytes([
            self.data[o] as u8,
            self.data[o + 1] as u8,
            self.data[o + 2] as u8,
            self.data[o + 3] as u8,
        ])
    }
}

/// Which instructions compute the integer products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Kernel {
    /// AVX-512 VNNI (`vpdpbusd`).
    Vnni,
    /// AVX2 (`vpmaddubsw`, `vpmaddwd`).
    Avx2,
    /// Plain Rust (any CPU).
    Portable,
}

impl Int8Kernel {
    /// The fastest kernel this CPU runs.
    pub fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                return Int8Kernel::Vnni;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Int8Kernel::Avx2;
            }
        }
        Int8Kernel::Portable
    }

    /// Every kernel this CPU runs, fastest first.
    pub fn available() -> Vec<Self> {
        let all = [Int8Kernel::Vnni, Int8Kernel::Avx2, Int8Kernel::Portable];
        let best = all.iter().position(|&k| k == Self::best()).unwrap_or(2);
        all[best..].to_vec()
    }

    /// The name printed in logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Int8Kernel::Vnni => "avx512-vnni",
            Int8Kernel::Avx2 => "avx2",
            Int8Kernel::Portable => "portable",
        }
    }
}

/// `y = alpha · x · Wᵀ + beta · y` with W packed (x: rows × in, y: rows × out; with
/// `beta == 0` the old `y` is never read), on the fastest kernel this CPU has.
///
/// # Panics
/// If the shapes do not agree (a programming error).
pub fn forward(w: &PackedWeights, alpha: Real, x: MatView<'_>, y: &mut MatViewMut<'_>, beta: Real) {
    forward_with(Int8Kernel::best(), w, alpha, x, y, beta);
}

/// As [`forward`] on a chosen kernel (which must be one of [`Int8Kernel::available`]).
///
/// # Panics
/// If the shapes do not agree or the CPU lacks the kernel's instructions.
pub fn forward_with(
    kernel: Int8Kernel,
    w: &PackedWeights,
    alpha: Real,
    x: MatView<'_>,
    y: &mut MatViewMut<'_>,
    beta: Real,
) {
    product(kernel, w, alpha, x, y, beta, None, false);
}

/// `y = x · Wᵀ + bias` (the bias added to every row): an affine layer's product; with `relu`,
/// followed by a ReLU (`y = if y < 0 { 0 } else { y }`, the floor of
/// `RectifiedLinearComponent`: NaN and −0 stay). The bias and the floor are applied in the
/// pass that scales the sums back: the floats of running the steps one after the other, with
/// fewer passes over the output.
///
/// # Panics
/// If the shapes do not agree (a programming error).
pub fn forward_bias(
    w: &PackedWeights,
    x: MatView<'_>,
    y: &mut MatViewMut<'_>,
    bias: &[Real],
    relu: bool,
) {
    forward_bias_with(Int8Kernel::best(), w, x, y, bias, relu);
}

/// As [`forward_bias`] on a chosen kernel (which must be one of [`Int8Kernel::available`]).
///
/// # Panics
/// If the shapes do not agree or the CPU lacks the kernel's instructions.
pub fn forward_bias_with(
    kernel: Int8Kernel,
    w: &PackedWeights,
    x: MatView<'_>,
    y: &mut MatViewMut<'_>,
    bias: &[Real],
    relu: bool,
) {
    assert_eq!(bias.len(), w.out, "int8::forward_bias: bias dimension");
    product(kernel, w, 1.0, x, y, 0.0, Some(bias), relu);
}

#[allow(clippy::too_many_arguments)]
fn product(
    kernel: Int8Kernel,
    w: &PackedWeights,
    alpha: Real,
    x: MatView<'_>,
    y: &mut MatViewMut<'_>,
    beta: Real,
    bias: Option<&[Real]>,
    relu: bool,
) {
    assert!(
        x.num_cols() == w.inp && y.num_rows() == x.num_rows() && y.num_cols() == w.out,
        "int8::forward: {}x{} · ({}x{})ᵀ into {}x{}",
        x.num_rows(),
        x.num_cols(),
        w.out,
        w.inp,
        y.num_rows(),
        y.num_cols()
    );
    assert!(
        Int8Kernel::available().contains(&kernel),
        "int8 kernel {} not available",
        kernel.name()
    );
    if x.num_rows() == 0 || w.out == 0 {
        return;
    }
    let out = Out { beta, bias, relu };
    // Blocks of rows on the allowed threads; each row is quantized and multiplied by the
    // same code in any block, so the results do not depend on the thread count.
    super::parallel::for_row_blocks(y.rb(), |first, mut yb| {
        let rows = yb.num_rows();
        ACTIVATIONS.with(|cell| {
            let a = &mut *cell.borrow_mut();
            a.fill(x.rows_range(first, rows), alpha, kernel);
            match kernel {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `available()` checked the CPU features the kernel is compiled for.
                Int8Kernel::Vnni => unsafe { x86::product_vnni(w, a, rows, &mut yb, out) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                Int8Kernel::Avx2 => unsafe { x86::product_avx2(w, a, rows, &mut yb, out) },
                _ => product_portable(w, a, rows, &mut yb, out),
            }
        });
    });
}

/// What is done with the scaled sums: `y = sum + beta · y`, plus the bias where there is one
/// (only with `beta == 0`), then the ReLU floor with `relu` (only with a bias).
#[derive(Clone, Copy)]
struct Out<'a> {
    beta: Real,
    bias: Option<&'a [Real]>,
    relu: bool,
}

/// Scales one row of a tile back to floats into `y` (`acc` holds 16 sums per panel);
/// `bias` is the bias of these columns, if any, and `relu` floors the result at 0 after it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn store_row(
    y: &mut [Real],
    acc: &[i32],
    correction: i32,
    row_scale: Real,
    scales: &[Real],
    beta: Real,
    bias: Option<&[Real]>,
    relu: bool,
) {
    match bias {
        Some(b) if relu => {
            for (((d, &a), &s), &b) in y.iter_mut().zip(acc).zip(scales).zip(b) {
                let v = ((a - correction) as Real * row_scale) * s + b;
                // The floor of `RectifiedLinearComponent` (simd::floor at 0).
                *d = if v < 0.0 { 0.0 } else { v };
            }
        }
        Some(b) => {
            for (((d, &a), &s), &b) in y.iter_mut().zip(acc).zip(scales).zip(b) {
                *d = ((a - correction) as Real * row_scale) * s + b;
            }
        }
        None if beta == 0.0 => {
            for ((d, &a), &s) in y.iter_mut().zip(acc).zip(scales) {
                *d = ((a - correction) as Real * row_scale) * s;
            }
        }
        None => {
            for ((d, &a), &s) in y.iter_mut().zip(acc).zip(scales) {
                *d = ((a - correction) as Real * row_scale) * s + beta * *d;
            }
        }
    }
}

/// Stores the MR × (np · 16) tile of sums for rows `r0..` and panels `p0..`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn store_tile(
    w: &PackedWeights,
    a: &QuantizedRows,
    rows: usize,
    y: &mut MatViewMut<'_>,
    out: Out<'_>,
    r0: usize,
    p0: usize,
    acc: &[i32],
    width: usize,
) {
    let c0 = p0 * PANEL;
    let cols = width.min(w.out - c0);
    let bias = out.bias.map(|b| &b[c0..c0 + cols]);
    for r in 0..MR.min(rows - r0) {
        store_row(
            &mut y.row_mut(r0 + r)[c0..c0 + cols],
            &acc[r * width..r * width + cols],
            a.correction[r0 + r],
            a.row_scale[r0 + r],
            &w.scales[c0..c0 + cols],
            out.beta,
            bias,
            out.relu,
        );
    }
}

fn product_portable(
    w: &PackedWeights,
    a: &QuantizedRows,
    rows: usize,
    y: &mut MatViewMut<'_>,
    out: Out<'_>,
) {
    let mut acc = [0i32; MR * PANEL];
    for p in 0..w.num_panels() {
        let panel = w.panel(p);
        for r0 in (0..rows).step_by(MR) {
            acc.fill(0);
            for g in 0..w.groups {
                let wg = &panel[g * PANEL * GROUP..(g + 1) * PANEL * GROUP];
                for r in 0..MR {
                    let xb = a.group(r0 + r, g).to_le_bytes();
                    for j in 0..PANEL {
                        let mut s = 0i32;
                        for k in 0..GROUP {
                            s += wg[j * GROUP + k] as i32 * xb[k] as i8 as i32;
                        }
                        acc[r * PANEL + j] += s;
                    }
                }
            }
            store_tile(w, a, rows, y, out, r0, p, &acc, PANEL);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`quantize_row`] with AVX2 passes: the same bytes, sum and scale (the rounding is
    /// `vcvtps2dq` under the default round-to-nearest-even mode, as `round_ties_even`).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_row_avx2(x: &[Real], levels: i32, q: &mut [i8]) -> (Real, i32) {
        // SAFETY (both closures): the caller guarantees AVX2.
        quantize_row_by(
            x,
            levels,
            q,
            |x| unsafe { max_abs_avx2(x) },
            |x, inv, lv, q| unsafe { round_bytes_avx2(x, inv, lv, q) },
        )
    }

    /// max |x| and whether every element is finite, 16 lanes at a time.
    #[target_feature(enable = "avx2")]
    unsafe fn max_abs_avx2(x: &[Real]) -> (Real, bool) {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let largest = _mm256_set1_ps(Real::MAX);
        let (mut m0, mut m1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut bad = _mm256_setzero_ps();
        let chunks = x.chunks_exact(16);
        let rest = chunks.remainder();
        for c in chunks {
            // SAFETY: `c` holds 16 floats.
            let (a0, a1) = unsafe {
                (
                    _mm256_and_ps(_mm256_loadu_ps(c.as_ptr()), abs_mask),
                    _mm256_and_ps(_mm256_loadu_ps(c.as_ptr().add(8)), abs_mask),
                )
            };
            // Not (a ≤ MAX), unordered: NaN or infinite.
            bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_NLE_UQ>(a0, largest));
            bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_NLE_UQ>(a1, largest));
            m0 = _mm256_max_ps(a0, m0);
            m1 = _mm256_max_ps(a1, m1);
        }
        let mut lanes = [0.0 as Real; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_max_ps(m0, m1)) };
        let mut m: Real = 0.0;
        for v in lanes {
            m = if v > m { v } else { m };
        }
        let mut b = _mm256_movemask_ps(bad) != 0;
        for &v in rest {
            let a = v.abs();
            b |= a.is_nan() || a > Real::MAX;
            m = if a > m { a } else { m };
        }
        (m, !b)
    }

    /// The 8 floats at `p` times `inv`, rounded and clamped to `[lo, hi]`.
    ///
    /// # Safety
    /// AVX2, and 8 floats readable at `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn round8(p: *const Real, inv: __m256, hi: __m256i, lo: __m256i) -> __m256i {
        // SAFETY: the caller's guarantee.
        let v = _mm256_cvtps_epi32(_mm256_mul_ps(unsafe { _mm256_loadu_ps(p) }, inv));
        _mm256_max_epi32(_mm256_min_epi32(v, hi), lo)
    }

    /// `q = round(x · inv)` clamped to ±levels, 32 at a time; returns Σ q. The input is
    /// finite and |x · inv| ≤ levels up to rounding, so every value fits the packs.
    #[target_feature(enable = "avx2")]
    unsafe fn round_bytes_avx2(x: &[Real], inv: Real, levels: Real, q: &mut [i8]) -> i32 {
        let n = x.len().min(q.len());
        let (x, q) = (&x[..n], &mut q[..n]);
        let vinv = _mm256_set1_ps(inv);
        let hi = _mm256_set1_epi32(levels as i32);
        let lo = _mm256_set1_epi32(-(levels as i32));
        // The packs interleave 128-bit lanes: dword k of the result holds bytes of source
        // quarter `ORDER[k]`.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let mut sum = _mm256_setzero_si256();
        let mut qc = q.chunks_exact_mut(32);
        let mut xc = x.chunks_exact(32);
        for (d, c) in (&mut qc).zip(&mut xc) {
            let p = c.as_ptr();
            // SAFETY: `c` holds 32 floats and `d` 32 bytes.
            unsafe {
                let (a, b, e, f) = (
                    round8(p, vinv, hi, lo),
                    round8(p.add(8), vinv, hi, lo),
                    round8(p.add(16), vinv, hi, lo),
                    round8(p.add(24), vinv, hi, lo),
                );
                sum = _mm256_add_epi32(
                    sum,
                    _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(e, f)),
                );
                let bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(e, f));
                _mm256_storeu_si256(
                    d.as_mut_ptr() as *mut __m256i,
                    _mm256_permutevar8x32_epi32(bytes, order),
                );
            }
        }
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` holds 8 i32s.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, sum) };
        let mut total: i32 = lanes.iter().sum();
        for (d, &v) in qc.into_remainder().iter_mut().zip(xc.remainder()) {
            let r = (v * inv).round_ties_even().clamp(-levels, levels) as i32;
            *d = r as i8;
            total += r;
        }
        total
    }

    /// The VNNI micro-kernel: MR rows × NP panels, 4 bytes per lane per instruction.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    fn tile_vnni<const NP: usize>(
        w: &PackedWeights,
        a: &QuantizedRows,
        p0: usize,
        r0: usize,
        out: &mut [i32; MR * NP_VNNI * PANEL],
    ) {
        let stride = w.groups * PANEL * GROUP;
        let wp = w.data.as_ptr();
        let mut acc = [[_mm512_setzero_si512(); NP]; MR];
        let xrow: [*const i8; MR] = std::array::from_fn(|r| a.data[(r0 + r) * a.stride..].as_ptr());
        for g in 0..w.groups {
            // SAFETY: panels p0..p0+NP exist (the caller passes NP ≤ panels left), group g
            // of each is 64 bytes inside `w.data`; rows r0..r0+MR exist in the padded
            // activations and group g's 4 bytes are inside the row's stride.
            unsafe {
                let mut wv = [_mm512_setzero_si512(); NP];
                for (p, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_loadu_si512(
                        wp.add((p0 + p) * stride + g * PANEL * GROUP) as *const __m512i
                    );
                }
                for r in 0..MR {
                    let xb =
                        _mm512_set1_epi32((xrow[r].add(g * GROUP) as *const i32).read_unaligned());
                    for p in 0..NP {
                        acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], wv[p], xb);
                    }
                }
            }
        }
        let width = NP * PANEL;
        for (r, row) in acc.iter().enumerate() {
            for (p, v) in row.iter().enumerate() {
                // SAFETY: out holds MR rows of `width` i32s; this store is 16 of row r.
                unsafe {
                    _mm512_storeu_si512(
                        out.as_mut_ptr().add(r * width + p * PANEL) as *mut __m512i,
                        *v,
                    )
                };
            }
        }
    }

    /// # Safety
    /// The CPU must have AVX-512F, AVX-512BW and AVX-512 VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn product_vnni(
        w: &PackedWeights,
        a: &QuantizedRows,
        rows: usize,
        y: &mut MatViewMut<'_>,
        out: Out<'_>,
    ) {
        let mut acc = [0i32; MR * NP_VNNI * PANEL];
        let panels = w.num_panels();
        let mut p0 = 0;
        while p0 < panels {
            let np = NP_VNNI.min(panels - p0);
            for r0 in (0..rows).step_by(MR) {
                match np {
                    4 => tile_vnni::<4>(w, a, p0, r0, &mut acc),
                    3 => tile_vnni::<3>(w, a, p0, r0, &mut acc),
                    2 => tile_vnni::<2>(w, a, p0, r0, &mut acc),
                    _ => tile_vnni::<1>(w, a, p0, r0, &mut acc),
                }
                store_tile(w, a, rows, y, out, r0, p0, &acc, np * PANEL);
            }
            p0 += np;
        }
    }

    /// The AVX2 micro-kernel on signed activations: MR rows × one panel; pairs of u8·s8
    /// products (weights unsigned) into i16, then pairs of those into i32.
    ///
    /// # Safety
    /// The CPU must have AVX2; `wp` must point at a packed panel of `groups` groups, and
    /// every `xrow[r]` at a row of at least `groups · GROUP` activation bytes.
    #[target_feature(enable = "avx2")]
    unsafe fn tile_avx2(
        wp: *const u8,
        groups: usize,
        xrow: &[*const i8; MR],
    ) -> [[__m256i; 2]; MR] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_si256(); 2]; MR];
        for g in 0..groups {
            // SAFETY: group g of the panel is 64 bytes inside it and inside every row
            // (the caller's promise).
            unsafe {
                let w0 = _mm256_loadu_si256(wp.add(g * PANEL * GROUP) as *const __m256i);
                let w1 = _mm256_loadu_si256(wp.add(g * PANEL * GROUP + 32) as *const __m256i);
                for r in 0..MR {
                    let xb =
                        _mm256_set1_epi32((xrow[r].add(g * GROUP) as *const i32).read_unaligned());
                    // At most 2·127·127 per pair: no saturation (module doc).
                    let s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, xb), ones);
                    let s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w1, xb), ones);
                    acc[r][0] = _mm256_add_epi32(acc[r][0], s0);
                    acc[r][1] = _mm256_add_epi32(acc[r][1], s1);
                }
            }
        }
        acc
    }

    /// The AVX2 micro-kernel on activations that are all ≥ 0: they are the unsigned operand
    /// and the weights (less their offset) the signed one, so a product is at most
    /// 127·63 and two groups' four products per lane add up in i16 (≤ 32004) before one
    /// widening multiply-add: three multiplying instructions per 32 products instead of
    /// four. The sums are the signed products `Σ q_w·q_x`, to which the offset's share
    /// (`64·Σ q_x`, the row's correction) is added back so that the tile holds what
    /// [`tile_avx2`] computes, to the bit.
    ///
    /// # Safety
    /// As [`tile_avx2`]'s; and no activation byte of the rows may be negative.
    #[target_feature(enable = "avx2")]
    unsafe fn tile_avx2_non_negative(
        wp: *const u8,
        groups: usize,
        xrow: &[*const i8; MR],
        correction: &[i32; MR],
    ) -> [[__m256i; 2]; MR] {
        let ones = _mm256_set1_epi16(1);
        let offset = _mm256_set1_epi8(WEIGHT_OFFSET as i8);
        let mut acc = [[_mm256_setzero_si256(); 2]; MR];
        let load = |g: usize, half: usize| {
            // SAFETY: group g < groups of the panel is 64 bytes inside it (the caller's
            // promise).
            unsafe {
                _mm256_sub_epi8(
                    _mm256_loadu_si256(wp.add(g * PANEL * GROUP + 32 * half) as *const __m256i),
                    offset,
                )
            }
        };
        let bcast = |r: usize, g: usize| {
            // SAFETY: group g < groups is inside row r (the caller's promise).
            unsafe { _mm256_set1_epi32((xrow[r].add(g * GROUP) as *const i32).read_unaligned()) }
        };
        let mut g = 0;
        while g + 1 < groups {
            let (w0, w1, w2, w3) = (load(g, 0), load(g, 1), load(g + 1, 0), load(g + 1, 1));
            for (r, [lo, hi]) in acc.iter_mut().enumerate() {
                let (xa, xb) = (bcast(r, g), bcast(r, g + 1));
                let p0 =
                    _mm256_add_epi16(_mm256_maddubs_epi16(xa, w0), _mm256_maddubs_epi16(xb, w2));
                let p1 =
                    _mm256_add_epi16(_mm256_maddubs_epi16(xa, w1), _mm256_maddubs_epi16(xb, w3));
                *lo = _mm256_add_epi32(*lo, _mm256_madd_epi16(p0, ones));
                *hi = _mm256_add_epi32(*hi, _mm256_madd_epi16(p1, ones));
            }
            g += 2;
        }
        if g < groups {
            let (w0, w1) = (load(g, 0), load(g, 1));
            for (r, [lo, hi]) in acc.iter_mut().enumerate() {
                let xa = bcast(r, g);
                *lo = _mm256_add_epi32(*lo, _mm256_madd_epi16(_mm256_maddubs_epi16(xa, w0), ones));
                *hi = _mm256_add_epi32(*hi, _mm256_madd_epi16(_mm256_maddubs_epi16(xa, w1), ones));
            }
        }
        for ([lo, hi], &c) in acc.iter_mut().zip(correction) {
            let c = _mm256_set1_epi32(c);
            *lo = _mm256_add_epi32(*lo, c);
            *hi = _mm256_add_epi32(*hi, c);
        }
        acc
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn product_avx2(
        w: &PackedWeights,
        a: &QuantizedRows,
        rows: usize,
        y: &mut MatViewMut<'_>,
        out: Out<'_>,
    ) {
        let mut sums = [0i32; MR * PANEL];
        for p in 0..w.num_panels() {
            let wp = w.panel(p).as_ptr();
            for r0 in (0..rows).step_by(MR) {
                let xrow: [*const i8; MR] =
                    std::array::from_fn(|r| a.data[(r0 + r) * a.stride..].as_ptr());
                // SAFETY: AVX2 (the caller's promise); panel p holds `w.groups` groups and
                // the padded activation rows r0..r0 + MR hold them too (`fill`); every
                // byte is ≥ 0 where `non_negative` says so.
                let acc = unsafe {
                    if a.non_negative {
                        // Padding rows (past `rows`) are computed but never stored.
                        let correction: [i32; MR] = std::array::from_fn(|r| a.correction[r0 + r]);
                        tile_avx2_non_negative(wp, w.groups, &xrow, &correction)
                    } else {
                        tile_avx2(wp, w.groups, &xrow)
                    }
                };
                for (r, [lo, hi]) in acc.iter().enumerate() {
                    // SAFETY: `sums` holds MR rows of 16 i32s.
                    unsafe {
                        let o = sums.as_mut_ptr().add(r * PANEL);
                        _mm256_storeu_si256(o as *mut __m256i, *lo);
                        _mm256_storeu_si256(o.add(8) as *mut __m256i, *hi);
                    }
                }
                store_tile(w, a, rows, y, out, r0, p, &sums, PANEL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    /// Deterministic values in [−1, 1) with a few larger ones (heavy rows).
    fn pseudo(rows: usize, cols: usize, seed: u64) -> Matrix {
        let mut m = Matrix::zeros(rows, cols);
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        for r in 0..rows {
            for v in m.row_mut(r).iter_mut() {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = ((s >> 40) as f64 / (1u64 << 24) as f64) as Real * 2.0 - 1.0;
                *v = if (s >> 20).is_multiple_of(37) {
                    u * 6.0
                } else {
                    u
                };
            }
        }
        m
    }

    /// The product from first principles: the quantized operands as signed levels, their
    /// integer dot products in i64, scaled back with the same float operations.
    fn reference(w: &PackedWeights, alpha: Real, x: &Matrix, y0: &Matrix, beta: Real) -> Matrix {
        let wq = w.dequantized();
        let mut y = y0.clone();
        for r in 0..x.num_rows() {
            let mut q = vec![0i8; x.num_cols()];
            let (t, _) = quantize_row(x.row(r), ACT_LEVELS, &mut q);
            for (j, wj) in wq.iter().enumerate() {
                let sj = w.scales[j];
                let mut acc = 0i64;
                for (k, &qx) in q.iter().enumerate() {
                    let lw = if sj == 0.0 {
                        0
                    } else {
                        (wj[k] / sj).round() as i64
                    };
                    assert!(lw.abs() <= WEIGHT_LEVELS as i64);
                    acc += lw * qx as i64;
                }
                let v = (acc as i32 as Real * (alpha * t)) * sj;
                let d = &mut y.row_mut(r)[j];
                *d = if beta == 0.0 { v } else { v + beta * *d };
            }
        }
        y
    }

    fn bits(m: &Matrix) -> Vec<u32> {
        m.to_vec().iter().map(|v| v.to_bits()).collect()
    }

    /// Every kernel the CPU has gives the first-principles result to the bit, for shapes
    /// off every block size (rows vs MR, outputs vs panels, inputs vs groups) and the
    /// extreme operands (a pair of 127·127 products, which saturates vpmaddubsw's 16 bits
    /// unless the weights are 7-bit).
    #[test]
    fn kernels_are_bit_identical_to_the_integer_reference() {
        let kernels = Int8Kernel::available();
        assert!(kernels.contains(&Int8Kernel::Portable));
        let shapes = [
            (1, 1, 1),
            (3, 5, 7),
            (4, 4, 16),
            (5, 17, 17),
            (9, 64, 70),
            (8, 130, 33),
            (13, 7, 65),
        ];
        // Signed activations, and activations ≥ 0 (after a ReLU), which the AVX2 kernel
        // multiplies the other way round, two groups at a time.
        for (&(rows, inp, out), non_negative) in shapes.iter().flat_map(|s| [(s, false), (s, true)])
        {
            for (case, (alpha, beta)) in [(1.0, 0.0), (0.5, 1.0), (2.0, -0.25)].iter().enumerate() {
                let mut x = pseudo(rows, inp, 1 + case as u64);
                if non_negative {
                    x.data.iter_mut().for_each(|v| *v = v.abs());
                }
                let w = PackedWeights::new(pseudo(out, inp, 100 + case as u64).view());
                let y0 = pseudo(rows, out, 7);
                let want = reference(&w, *alpha, &x, &y0, *beta);
                for &k in &kernels {
                    let mut y = y0.clone();
                    forward_with(k, &w, *alpha, x.view(), &mut y.view_mut(), *beta);
                    assert_eq!(
                        bits(&y),
                        bits(&want),
                        "{} {rows}x{inp}->{out} alpha {alpha} beta {beta} x ≥ 0 {non_negative}",
                        k.name()
                    );
                }
            }
        }
        // Extremes: every weight at ±max and activations at ±max (the largest pair sums; with
        // activations ≥ 0, the largest sums of two pairs).
        for (wsign, sign) in [(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0)] {
            let (rows, inp, out) = (5, 36, 20);
            let mut w = Matrix::zeros(out, inp);
            for j in 0..out {
                w.row_mut(j).fill(wsign * 0.75);
            }
            let mut x = Matrix::zeros(rows, inp);
            for r in 0..rows {
                x.row_mut(r).fill(sign * 3.0);
            }
            let w = PackedWeights::new(w.view());
            let want = reference(&w, 1.0, &x, &Matrix::zeros(rows, out), 0.0);
            for &k in &kernels {
                let mut y = Matrix::zeros(rows, out);
                forward_with(k, &w, 1.0, x.view(), &mut y.view_mut(), 0.0);
                assert_eq!(
                    bits(&y),
                    bits(&want),
                    "{} extremes {wsign} {sign}",
                    k.name()
                );
                // 36 · 0.75 · 3 exactly: both operands are at their top level.
                assert_eq!(y.row(0)[0], wsign * sign * 81.0);
            }
        }
    }

    /// Rounding to the nearest level: each element within half a step of the input, the
    /// step being max|row| / levels.
    #[test]
    fn quantization_error_is_within_half_a_step() {
        let w = pseudo(37, 101, 3);
        let p = PackedWeights::new(w.view());
        let d = p.dequantized();
        for (j, row) in d.iter().enumerate() {
            let m = w.row(j).iter().fold(0.0 as Real, |a, v| a.max(v.abs()));
            let step = m / WEIGHT_LEVELS as Real;
            for (k, v) in row.iter().enumerate() {
                let e = (v - w.row(j)[k]).abs();
                assert!(
                    e <= step * 0.5 * (1.0 + 1e-5),
                    "weight ({j},{k}): {e} vs {step}"
                );
            }
        }
        let x = pseudo(9, 101, 4);
        for r in 0..9 {
            let mut q = vec![0i8; 101];
            let (t, sum) = quantize_row(x.row(r), ACT_LEVELS, &mut q);
            assert_eq!(sum, q.iter().map(|&v| v as i32).sum::<i32>());
            for (k, &v) in q.iter().enumerate() {
                let e = (v as Real * t - x.row(r)[k]).abs();
                assert!(
                    e <= t * 0.5 * (1.0 + 1e-5),
                    "activation ({r},{k}): {e} vs {t}"
                );
            }
        }
    }

    /// The product's error is within what the two rounding steps allow:
    /// |Δy| ≤ Σ_k (|w|·t/2 + |x|·s/2 + s·t/4), plus float rounding.
    #[test]
    fn product_error_is_within_the_rounding_bound() {
        let (rows, inp, out) = (11, 300, 40);
        let x = pseudo(rows, inp, 5);
        let wm = pseudo(out, inp, 6);
        let w = PackedWeights::new(wm.view());
        let mut y = Matrix::zeros(rows, out);
        forward(&w, 1.0, x.view(), &mut y.view_mut(), 0.0);
        let mut worst: Real = 0.0;
        for r in 0..rows {
            let t = x.row(r).iter().fold(0.0 as Real, |a, v| a.max(v.abs())) / ACT_LEVELS as Real;
            for j in 0..out {
                let s = w.scales[j];
                let (mut exact, mut bound) = (0.0f64, 0.0f64);
                for k in 0..inp {
                    let (a, b) = (x.row(r)[k] as f64, wm.row(j)[k] as f64);
                    exact += a * b;
                    bound += b.abs() * t as f64 / 2.0 + a.abs() * s as f64 / 2.0;
                    bound += (s * t) as f64 / 4.0;
                }
                let e = (y.row(r)[j] as f64 - exact).abs();
                assert!(e <= bound * 1.001 + 1e-4, "({r},{j}): {e} > {bound}");
                worst = worst.max((e / bound) as Real);
            }
        }
        // The bound is loose (errors partly cancel) but not vacuous.
        assert!(worst > 0.001, "{worst}");
    }

    /// Zero rows give zeros; a row with a NaN or an infinity gives NaN, as floats would
    /// (in the vectorised part of a row and in its tail).
    #[test]
    fn zero_and_non_finite_rows() {
        for (cols, at) in [(8, 3), (40, 3), (40, 37), (70, 20)] {
            let w = PackedWeights::new(pseudo(5, cols, 9).view());
            let mut x = pseudo(4, cols, 10);
            x.row_mut(0).fill(0.0);
            x.row_mut(2)[at] = Real::INFINITY;
            x.row_mut(3)[cols - 1 - at] = Real::NAN;
            for k in Int8Kernel::available() {
                let mut y = Matrix::zeros(4, 5);
                forward_with(k, &w, 1.0, x.view(), &mut y.view_mut(), 0.0);
                assert!(y.row(0).iter().all(|&v| v == 0.0), "{} {cols}", k.name());
                assert!(
                    y.row(1).iter().all(|v| v.is_finite()),
                    "{} {cols}",
                    k.name()
                );
                assert!(y.row(2).iter().all(|v| v.is_nan()), "{} {cols}", k.name());
                assert!(y.row(3).iter().all(|v| v.is_nan()), "{} {cols}", k.name());
            }
        }
    }

    /// The AVX2 row quantizer gives the portable one's bytes, sum and scale, for every
    /// length around its 16- and 32-element steps, ties, extremes and non-finite elements.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_quantizer_matches_the_portable_one() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let base = pseudo(1, 200, 11);
        let mut rows: Vec<Vec<Real>> = Vec::new();
        for len in (0..=70).chain([127, 128, 129, 200]) {
            rows.push(base.row(0)[..len].to_vec());
        }
        // Ties at half a step (x · 127 / max lands on k + 0.5) and the extremes.
        rows.push((0..64).map(|k| (k as Real - 31.5) * 4.0).collect());
        rows.push(
            (0..64)
                .map(|k| if k % 2 == 0 { 3.0 } else { -3.0 })
                .collect(),
        );
        rows.push(vec![1e-30; 48]);
        rows.push(vec![-0.0; 40]);
        for (at, bad) in [
            (5, Real::INFINITY),
            (33, Real::NAN),
            (60, Real::NEG_INFINITY),
        ] {
            let mut r = base.row(0)[..64].to_vec();
            r[at] = bad;
            rows.push(r);
        }
        for levels in [ACT_LEVELS, WEIGHT_LEVELS] {
            for x in &rows {
                let (mut q1, mut q2) = (vec![7i8; x.len()], vec![-7i8; x.len()]);
                let want = quantize_row(x, levels, &mut q1);
                // SAFETY: AVX2 checked above.
                let got = unsafe { x86::quantize_row_avx2(x, levels, &mut q2) };
                assert_eq!(q1, q2, "bytes, {} elements", x.len());
                assert_eq!(want.1, got.1, "sum, {} elements", x.len());
                assert_eq!(
                    want.0.to_bits(),
                    got.0.to_bits(),
                    "scale, {} elements",
                    x.len()
                );
            }
        }
    }

    /// The ReLU applied in the scaling pass gives the floats of the ReLU component's pass
    /// afterwards (`apply_floor(0.0)`: negatives to 0, NaN kept), on every kernel, for rows
    /// with negative, zero and non-finite results.
    #[test]
    fn relu_in_the_scaling_pass_equals_flooring_after() {
        for &(rows, inp, out) in &[(300, 70, 40), (9, 64, 70), (3, 5, 7), (13, 130, 33)] {
            let mut x = pseudo(rows, inp, 31);
            x.row_mut(0).fill(0.0);
            x.row_mut(rows - 1)[inp / 2] = Real::NAN;
            let w = PackedWeights::new(pseudo(out, inp, 32).view());
            let mut bias = pseudo(1, out, 33);
            bias.row_mut(0)[0] = -0.0;
            for k in Int8Kernel::available() {
                let mut want = Matrix::zeros(rows, out);
                forward_bias_with(k, &w, x.view(), &mut want.view_mut(), bias.row(0), false);
                want.view_mut().apply_floor(0.0);
                let mut y = pseudo(rows, out, 34);
                forward_bias_with(k, &w, x.view(), &mut y.view_mut(), bias.row(0), true);
                assert_eq!(bits(&y), bits(&want), "{} {rows}x{inp}->{out}", k.name());
                assert!(y.row(rows - 1).iter().all(|v| v.is_nan()));
                assert!(y.to_vec().contains(&0.0), "no negative result floored");
            }
        }
    }

    /// The bias added in the scaling pass gives the floats of adding it afterwards (what
    /// an affine layer did before), on every kernel, and a product after a larger one
    /// (reusing the thread's buffers) is unaffected by it.
    #[test]
    fn bias_in_the_scaling_pass_equals_adding_it_after() {
        for &(rows, inp, out) in &[(300, 70, 40), (9, 64, 70), (3, 5, 7), (13, 130, 33)] {
            let x = pseudo(rows, inp, 21);
            let w = PackedWeights::new(pseudo(out, inp, 22).view());
            let bias = pseudo(1, out, 23);
            for k in Int8Kernel::available() {
                let mut want = Matrix::zeros(rows, out);
                forward_with(k, &w, 1.0, x.view(), &mut want.view_mut(), 0.0);
                for r in 0..rows {
                    for (d, &b) in want.row_mut(r).iter_mut().zip(bias.row(0)) {
                        *d += b;
                    }
                }
                let mut y = pseudo(rows, out, 24);
                forward_bias_with(k, &w, x.view(), &mut y.view_mut(), bias.row(0), false);
                assert_eq!(bits(&y), bits(&want), "{} {rows}x{inp}->{out}", k.name());
            }
        }
    }
}
