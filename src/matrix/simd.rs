//! Element-wise kernels compiled for the CPU they run on.
//!
//! The crate is built for the baseline x86-64 target (SSE2), so one binary runs everywhere;
//! GEMM picks AVX-512 or AVX2 at run time inside the `gemm` crate. The element-wise loops
//! (log-softmax, normalisation, ReLU, bias rows) are ours, and built for SSE2 they use a
//! quarter of the vector width the machines we target have. Each kernel here is written
//! once, as plain Rust over slices, and [`multiversion!`] compiles it three times (AVX-512,
//! AVX2+FMA, baseline) and calls the best one the CPU supports (detected once and cached by
//! the standard library). No fused multiply-add is introduced that the source does not ask
//! for, so every version rounds the same way.
//!
//! The loops keep independent partial sums/maxima in lanes: a single running sum is one
//! long dependency chain, which no compiler may reorder into vector operations.

use super::Real;

/// Defines `pub(crate) fn $name(args) -> ret` whose body is compiled for AVX-512, for
/// AVX2+FMA and for the baseline, with the widest one this CPU supports chosen per call.
macro_rules! multiversion {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn imp($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                fn v4($($arg: $ty),*) $(-> $ret)? {
                    imp($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn v3($($arg: $ty),*) $(-> $ret)? {
                    imp($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU has the features v4 is compiled for.
                    return unsafe { v4($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has the features v3 is compiled for.
                    return unsafe { v3($($arg),*) };
                }
            }
            imp($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// Whether this CPU runs the AVX2 + FMA kernels (x86-64 only): the native GEMM, the few-row
/// product, the `v3` arm of [`multiversion!`].
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

multiversion! {
    /// Σ x² (16 lanes).
    fn sum_squares(x: &[Real]) -> Real {
        let mut lanes = [0.0 as Real; 16];
        let chunks = x.chunks_exact(16);
        let rest = chunks.remainder();
        for c in chunks {
            for i in 0..16 {
                lanes[i] += c[i] * c[i];
            }
        }
        let mut s: Real = lanes.iter().sum();
        for &v in rest {
            s += v * v;
        }
        s
    }
}

multiversion! {
    /// Σ x², squares and sums in f64 (8 lanes; exact squares, so no overflow for finite
    /// f32 input and a non-finite result exactly when some element is not finite).
    fn sum_squares_f64(x: &[Real]) -> f64 {
        let mut lanes = [0.0f64; 8];
        let chunks = x.chunks_exact(8);
        let rest = chunks.remainder();
        for c in chunks {
            for i in 0..8 {
                let v = c[i] as f64;
                lanes[i] += v * v;
            }
        }
        let mut s = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
            + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
        for &v in rest {
            s += (v as f64) * (v as f64);
        }
        s
    }
}

multiversion! {
    /// Σ x·y over the common length (16 lanes).
    fn dot(x: &[Real], y: &[Real]) -> Real {
        let n = x.len().min(y.len());
        let (cx, cy) = (x[..n].chunks_exact(16), y[..n].chunks_exact(16));
        let (rx, ry) = (cx.remainder(), cy.remainder());
        let mut lanes = [0.0 as Real; 16];
        for (a, b) in cx.zip(cy) {
            for i in 0..16 {
                lanes[i] += a[i] * b[i];
            }
        }
        let mut s: Real = lanes.iter().sum();
        for (&a, &b) in rx.iter().zip(ry) {
            s += a * b;
        }
        s
    }
}

multiversion! {
    /// Σ x (16 lanes).
    fn sum(x: &[Real]) -> Real {
        let chunks = x.chunks_exact(16);
        let rest = chunks.remainder();
        let mut lanes = [0.0 as Real; 16];
        for c in chunks {
            for i in 0..16 {
                lanes[i] += c[i];
            }
        }
        let mut s: Real = lanes.iter().sum();
        for &v in rest {
            s += v;
        }
        s
    }
}

multiversion! {
    /// x ← x · f.
    fn scale(x: &mut [Real], f: Real) {
        for v in x.iter_mut() {
            *v *= f;
        }
    }
}

multiversion! {
    /// y ← x · f.
    fn scale_into(y: &mut [Real], x: &[Real], f: Real) {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = v * f;
        }
    }
}

multiversion! {
    /// x ← x · s + o, element by element (BatchNorm in test mode).
    fn mul_add_elements(x: &mut [Real], s: &[Real], o: &[Real]) {
        for ((v, &a), &b) in x.iter_mut().zip(s).zip(o) {
            *v = *v * a + b;
        }
    }
}

multiversion! {
    /// x ← max(x, floor) (NaN stays NaN).
    fn floor(x: &mut [Real], floor: Real) {
        for v in x.iter_mut() {
            *v = if *v < floor { floor } else { *v };
        }
    }
}

multiversion! {
    /// x ← alpha · v + beta · x (with beta = 0, x is not read).
    fn axpby(x: &mut [Real], v: &[Real], alpha: Real, beta: Real) {
        if beta == 0.0 {
            for (a, &b) in x.iter_mut().zip(v) {
                *a = alpha * b;
            }
        } else {
            for (a, &b) in x.iter_mut().zip(v) {
                *a = alpha * b + beta * *a;
            }
        }
    }
}

multiversion! {
    /// y ← log-softmax(x) = x − max − log Σ exp(x − max).
    fn log_softmax_from(y: &mut [Real], x: &[Real]) {
        let lse = log_sum_exp_lanes(x);
        for (d, &v) in y.iter_mut().zip(x) {
            *d = v - lse;
        }
    }
}

/// max + log Σ exp(x − max), the sum in 16 lanes.
#[inline(always)]
fn log_sum_exp_lanes(x: &[Real]) -> Real {
    let m = max_lanes(x);
    let mut lanes = [0.0 as Real; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            lanes[i] += exp_fast(c[i] - m);
        }
    }
    let mut s: Real = lanes.iter().sum();
    for &v in rest {
        s += exp_fast(v - m);
    }
    m + s.ln()
}

multiversion! {
    /// Largest element (−∞ for an empty slice; NaN-free input assumed).
    fn max(x: &[Real]) -> Real {
        max_lanes(x)
    }
}

/// Largest element (−∞ for an empty slice; NaN-free input assumed), in 16 lanes.
#[inline(always)]
fn max_lanes(x: &[Real]) -> Real {
    let mut lanes = [Real::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            lanes[i] = if c[i] > lanes[i] { c[i] } else { lanes[i] };
        }
    }
    let mut m = lanes.iter().fold(Real::NEG_INFINITY, |a, &b| a.max(b));
    for &v in rest {
        m = m.max(v);
    }
    m
}

/// exp(x) with a relative error below 3e-7 (tested against f64), branch-free so that it
/// vectorises: x = k·ln 2 + r with |r| ≤ ln 2 / 2, exp(r) by its degree-7 Taylor
/// polynomial, 2^k put straight into the exponent bits. Arguments are clamped to [−87, 88]
/// (exp(−87) ≈ 1.6e-38). NaN gives NaN.
#[inline(always)]
pub(crate) fn exp_fast(x: Real) -> Real {
    const LOG2E: Real = std::f32::consts::LOG2_E;
    const LN2_HI: Real = 0.693_145_75;
    const LN2_LO: Real = 1.428_606_8e-6;
    // Adding 1.5·2^23 rounds to an integer that then sits in the low mantissa bits.
    const ROUND: Real = 12_582_912.0;
    // Comparisons (not f32::clamp, whose NaN handling does not vectorise).
    let x = if x < -87.0 { -87.0 } else { x };
    let x = if x > 88.0 { 88.0 } else { x };
    let t = x * LOG2E + ROUND;
    let k = t - ROUND;
    // k as an integer without a (saturating, slow) float-to-int conversion.
    let ki = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = Real::from_bits((ki.wrapping_add(127) as u32) << 23);
    p * scale
}

/// tanh(x) with a relative error of a few ulp (tested against f64), branch-free so that it
/// vectorises: the odd Taylor series through x¹⁹ for |x| < 0.55 (the next term is below
/// 1e-9 relative), else 1 − 2 / (exp(2|x|) + 1) with [`exp_fast`]; the sign restored last.
/// |x| is clamped to 10, where tanh rounds to 1. NaN gives NaN. Used by the fused GRU and
/// LSTM cells (the Tanh component keeps libm's `tanhf`).
#[inline(always)]
pub(crate) fn tanh_fast(x: Real) -> Real {
    const T3: Real = (-1.0 / 3.0) as Real;
    const T5: Real = (2.0 / 15.0) as Real;
    const T7: Real = (-17.0 / 315.0) as Real;
    const T9: Real = (62.0 / 2835.0) as Real;
    const T11: Real = (-1382.0 / 155925.0) as Real;
    const T13: Real = (21844.0 / 6081075.0) as Real;
    const T15: Real = (-929569.0 / 638512875.0) as Real;
    const T17: Real = (6404582.0 / 10854718875.0) as Real;
    const T19: Real = (-443861162.0 / 1856156927625.0) as Real;
    let a = x.abs();
    let a2 = a * a;
    let small = a + a
        * a2
        * (T3
            + a2 * (T5
                + a2 * (T7
                    + a2 * (T9 + a2 * (T11 + a2 * (T13 + a2 * (T15 + a2 * (T17 + a2 * T19))))))));
    let y = if a > 10.0 { 10.0 } else { a };
    let large = 1.0 - 2.0 / (exp_fast(2.0 * y) + 1.0);
    let t = if a < 0.55 { small } else { large };
    t.copysign(x)
}

multiversion! {
    /// One output row of one restricted-attention head (see
    /// `MatViewMut::add_restricted_attention`). `window` starts at the row's first window row
    /// (keys, then values); window row o starts `o · shift_stride` elements later. `out` has
    /// `value_dim` columns, or `value_dim` + C with the weights added after them.
    fn attention_row(
        out: &mut [Real],
        weights: &mut [Real],
        query: &[Real],
        window: &[Real],
        shift_stride: usize,
        key_value_dims: (usize, usize),
        key_scale: Real,
    ) {
        let (key_dim, value_dim) = key_value_dims;
        let full = key_dim / 16 * 16;
        let (q16, q_tail) = query[..key_dim].split_at(full);
        let positional = &query[key_dim..key_dim + weights.len()];
        for (o, (w, &pos)) in weights.iter_mut().zip(positional).enumerate() {
            let (k16, k_tail) = window[o * shift_stride..][..key_dim].split_at(full);
            // 16 lanes, each summing its columns in order (fixed-size chunks, so that the
            // lanes are one vector and no bounds check is left in the loop).
            let mut lanes = [0.0 as Real; 16];
            for (a, b) in q16.chunks_exact(16).zip(k16.chunks_exact(16)) {
                let (a, b): (&[Real; 16], &[Real; 16]) =
                    (a.try_into().unwrap(), b.try_into().unwrap());
                for l in 0..16 {
                    lanes[l] += a[l] * b[l];
                }
            }
            let mut dot = 0.0 as Real;
            for (&a, &b) in q_tail.iter().zip(k_tail) {
                dot += a * b;
            }
            *w = key_scale * (halving_sum(&lanes) + dot) + pos;
        }
        let mut max = Real::NEG_INFINITY;
        for &w in weights.iter() {
            max = if w > max { w } else { max };
        }
        // The exps in one vectorised pass, then their sum in order.
        for w in weights.iter_mut() {
            *w = exp_fast(*w - max);
        }
        let mut sum = 0.0 as Real;
        for &w in weights.iter() {
            sum += w;
        }
        for w in weights.iter_mut() {
            *w /= sum;
        }
        let (values, context) = out.split_at_mut(value_dim);
        // 16 output columns at a time, summed over the window in registers (a row-at-a-time
        // axpy would load and store the output once per window position).
        let vfull = value_dim / 16 * 16;
        let (v16, v_tail) = values.split_at_mut(vfull);
        for (k, y) in v16.chunks_exact_mut(16).enumerate() {
            let y: &mut [Real; 16] = y.try_into().unwrap();
            let mut acc = *y;
            let col = key_dim + 16 * k;
            for (o, &w) in weights.iter().enumerate() {
                let v: &[Real; 16] = window[o * shift_stride + col..][..16].try_into().unwrap();
                for l in 0..16 {
                    acc[l] += w * v[l];
                }
            }
            *y = acc;
        }
        for (o, &w) in weights.iter().enumerate() {
            let v = &window[o * shift_stride + key_dim + vfull..][..v_tail.len()];
            for (y, &x) in v_tail.iter_mut().zip(v) {
                *y += w * x;
            }
        }
        for (y, &w) in context.iter_mut().zip(weights.iter()) {
            *y += w;
        }
    }
}

/// The sum of 16 lanes by pairwise halving (l + l+8, then l + l+4, then (0+2) + (1+3)),
/// written over separate arrays so that it compiles to vector shuffles.
#[inline(always)]
pub(crate) fn halving_sum(lanes: &[Real; 16]) -> Real {
    let mut s8 = [0.0 as Real; 8];
    for l in 0..8 {
        s8[l] = lanes[l] + lanes[l + 8];
    }
    let mut s4 = [0.0 as Real; 4];
    for l in 0..4 {
        s4[l] = s8[l] + s8[l + 4];
    }
    (s4[0] + s4[2]) + (s4[1] + s4[3])
}

/// One restricted-attention head over all its output rows (see
/// `MatViewMut::add_restricted_attention`): slices with their row strides, in elements.
pub(crate) struct AttentionHead<'a> {
    /// Output rows: `value_dim` columns, or `value_dim` + C with the weights added after them.
    pub out: &'a mut [Real],
    pub out_stride: usize,
    pub out_cols: usize,
    /// The softmax weights (C columns, overwritten).
    pub weights: &'a mut [Real],
    pub weights_stride: usize,
    /// Per output row the query's key part (`key_dim`), then its positional term (C).
    pub queries: &'a [Real],
    pub queries_stride: usize,
    /// Input rows (keys, then values); output row i's window is rows i + o·row_shift.
    pub input: &'a [Real],
    pub input_stride: usize,
    pub rows: usize,
    pub row_shift: usize,
    /// C, the number of context positions.
    pub context: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    pub key_scale: Real,
}

/// Restricted attention forward for one head. With AVX2 and C ≤ 32 the rows go through
/// `attention_x86` (the window's positions in the vector lanes), otherwise row by row
/// through [`attention_row`]; both round every sum the same way, so the results are equal
/// bit for bit.
pub(crate) fn attention_head(h: AttentionHead<'_>) {
    check_attention_head(&h);
    #[cfg(target_arch = "x86_64")]
    if h.rows > 0 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, and the extents were checked above.
        unsafe {
            match h.context.div_ceil(8) {
                1 => return attention_x86::attention_rows::<8>(&h),
                2 => return attention_x86::attention_rows::<16>(&h),
                3 => return attention_x86::attention_rows::<24>(&h),
                4 => return attention_x86::attention_rows::<32>(&h),
                _ => {}
            }
        }
    }
    attention_head_by_rows(h);
}

/// [`attention_head`] one row at a time through [`attention_row`] (also the reference the
/// vectorised kernel is tested against).
pub(crate) fn attention_head_by_rows(h: AttentionHead<'_>) {
    check_attention_head(&h);
    let (c, n) = (h.context, h.rows);
    let AttentionHead {
        out,
        weights,
        queries,
        input,
        ..
    } = h;
    for i in 0..n {
        attention_row(
            &mut out[i * h.out_stride..][..h.out_cols],
            &mut weights[i * h.weights_stride..][..c],
            &queries[i * h.queries_stride..][..h.key_dim + c],
            &input[i * h.input_stride..],
            h.input_stride * h.row_shift,
            (h.key_dim, h.value_dim),
            h.key_scale,
        );
    }
}

/// The extents every access of the attention kernels stays within.
fn check_attention_head(h: &AttentionHead<'_>) {
    let c = h.context;
    let last = h.rows.saturating_sub(1);
    assert!(
        c >= 1
            && (h.out_cols == h.value_dim || h.out_cols == h.value_dim + c)
            && (h.rows == 0
                || last * h.out_stride + h.out_cols <= h.out.len()
                    && last * h.weights_stride + c <= h.weights.len()
                    && last * h.queries_stride + h.key_dim + c <= h.queries.len()
                    && (last + (c - 1) * h.row_shift) * h.input_stride + h.key_dim + h.value_dim
                        <= h.input.len()),
        "attention_head: dimensions"
    );
}

/// Asks for the cache lines of `p .. p + n` (n ≥ 1): one address per 64-byte line, and the
/// last element (the run need not be aligned). Used where rows are a page or more apart, so
/// that the hardware's stream detection does not follow them.
///
/// # Safety
/// `p .. p + n` must be inside one allocation (a prefetch never faults, but the pointer
/// arithmetic must stay in bounds).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn prefetch_lines(p: *const Real, n: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let mut j = 0;
    while j < n {
        _mm_prefetch::<_MM_HINT_T0>(p.add(j) as *const i8);
        j += 16;
    }
    _mm_prefetch::<_MM_HINT_T0>(p.add(n - 1) as *const i8);
}

/// The AVX2 restricted-attention kernel: what [`attention_row`] computes, every sum in the
/// same order (so bit for bit), but with the window's positions in the vector lanes: the
/// key·query products of eight positions at once, their 16-lane halving sums done across
/// positions with shuffles, the softmax on whole vectors, several rows per batch so that
/// their latency chains (exp, the ordered sum, the division) overlap. Written with
/// intrinsics because the compiler turns the portable form into 2-lane code here.
#[cfg(target_arch = "x86_64")]
mod attention_x86 {
    use super::{exp_fast, prefetch_lines, AttentionHead, Real};
    use std::arch::x86_64::*;

    /// Positions per vector of scores.
    const P: usize = 8;
    /// Rows per batch.
    const ROWS: usize = 4;
    /// How many rows ahead [`prefetch`] asks for the lines.
    const AHEAD: usize = 8;

    /// All rows of `h`, for C ≤ N (N a multiple of 8).
    ///
    /// # Safety
    /// The CPU must have AVX2, and `h` must have passed `check_attention_head`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn attention_rows<const N: usize>(h: &AttentionHead<'_>) {
        let mut i = 0;
        while i + ROWS <= h.rows {
            prefetch(h, i + AHEAD, ROWS);
            batch::<N, ROWS>(h, i);
            i += ROWS;
        }
        while i < h.rows {
            batch::<N, 1>(h, i);
            i += 1;
        }
    }

    /// Asks for the lines rows `i0 .. i0 + n` read first: the window's last input row (the
    /// others were last rows before), the query and the output row. Consecutive input rows
    /// are usually more than a 4 KiB page apart, where the hardware's stream detection stops.
    #[inline(always)]
    unsafe fn prefetch(h: &AttentionHead<'_>, i0: usize, n: usize) {
        for i in i0..h.rows.min(i0 + n) {
            let last = i + (h.context - 1) * h.row_shift;
            prefetch_lines(
                h.input.as_ptr().add(last * h.input_stride),
                h.key_dim + h.value_dim,
            );
            prefetch_lines(
                h.queries.as_ptr().add(i * h.queries_stride),
                h.key_dim + h.context,
            );
            prefetch_lines(h.out.as_ptr().add(i * h.out_stride), h.out_cols);
        }
    }

    /// Rows `i0 .. i0 + R`.
    #[inline(always)]
    unsafe fn batch<const N: usize, const R: usize>(h: &AttentionHead<'_>, i0: usize) {
        // C as a constant when it fills the vectors, so that its loops unroll.
        let c = if h.context == N { N } else { h.context };
        let (kd, vd) = (h.key_dim, h.value_dim);
        let shift = h.row_shift * h.input_stride;
        let full = kd / 16 * 16;
        let base = h.input.as_ptr();
        let mut scores = [[Real::NEG_INFINITY; N]; R];
        for (r, sc) in scores.iter_mut().enumerate() {
            let win = base.add((i0 + r) * h.input_stride);
            let q = h.queries.as_ptr().add((i0 + r) * h.queries_stride);
            for o0 in (0..c.div_ceil(P)).map(|b| b * P) {
                // Positions past C repeat position o0 (in bounds; their scores are dropped).
                let key: [*const Real; P] =
                    std::array::from_fn(|p| win.add(if o0 + p < c { o0 + p } else { o0 } * shift));
                let mut lo = [_mm256_setzero_ps(); P];
                let mut hi = [_mm256_setzero_ps(); P];
                // `attention_row` starts each lane at 0 + q·k; starting at q·k changes at
                // most the sign of a zero lane, which the `+ tail` below (never −0) absorbs.
                if full > 0 {
                    let (q0, q1) = (_mm256_loadu_ps(q), _mm256_loadu_ps(q.add(8)));
                    for p in 0..P {
                        lo[p] = _mm256_mul_ps(q0, _mm256_loadu_ps(key[p]));
                        hi[p] = _mm256_mul_ps(q1, _mm256_loadu_ps(key[p].add(8)));
                    }
                }
                for j in (1..full / 16).map(|b| b * 16) {
                    let (q0, q1) = (_mm256_loadu_ps(q.add(j)), _mm256_loadu_ps(q.add(j + 8)));
                    for p in 0..P {
                        let k = key[p].add(j);
                        lo[p] = _mm256_add_ps(lo[p], _mm256_mul_ps(q0, _mm256_loadu_ps(k)));
                        hi[p] = _mm256_add_ps(hi[p], _mm256_mul_ps(q1, _mm256_loadu_ps(k.add(8))));
                    }
                }
                let mut tail = [0.0 as Real; P];
                for (t, k) in tail.iter_mut().zip(&key) {
                    for j in full..kd {
                        *t += *q.add(j) * *k.add(j);
                    }
                }
                let mask = lane_mask((c - o0).min(P));
                let s = _mm256_add_ps(
                    _mm256_mul_ps(
                        _mm256_set1_ps(h.key_scale),
                        _mm256_add_ps(halving_sums(&lo, &hi), _mm256_loadu_ps(tail.as_ptr())),
                    ),
                    _mm256_maskload_ps(q.add(kd + o0), mask),
                );
                let s = _mm256_blendv_ps(
                    _mm256_set1_ps(Real::NEG_INFINITY),
                    s,
                    _mm256_castsi256_ps(mask),
                );
                _mm256_storeu_ps(sc.as_mut_ptr().add(o0), s);
            }
        }
        // The softmax: max and exps on whole vectors (the −∞ past C drop out), each sum in
        // position order as in `attention_row`.
        let mut e = [[0.0 as Real; N]; R];
        for (e, sc) in e.iter_mut().zip(&scores) {
            let mut max = Real::NEG_INFINITY;
            for &s in sc.iter() {
                max = if s > max { s } else { max };
            }
            for (e, &s) in e.iter_mut().zip(sc) {
                *e = exp_fast(s - max);
            }
        }
        for (r, e) in e.iter_mut().enumerate() {
            let mut sum = 0.0 as Real;
            for &v in &e[..c] {
                sum += v;
            }
            for v in e.iter_mut() {
                *v /= sum;
            }
            let w = h.weights.as_ptr().add((i0 + r) * h.weights_stride) as *mut Real;
            for o0 in (0..c.div_ceil(P)).map(|b| b * P) {
                let mask = lane_mask((c - o0).min(P));
                _mm256_maskstore_ps(w.add(o0), mask, _mm256_loadu_ps(e.as_ptr().add(o0)));
            }
        }
        for (r, e) in e.iter().enumerate() {
            let y = h.out.as_ptr().add((i0 + r) * h.out_stride) as *mut Real;
            weighted_sum(
                y,
                base.add((i0 + r) * h.input_stride + kd),
                shift,
                &e[..c],
                vd,
            );
            if h.out_cols > vd {
                for (o, &w) in e[..c].iter().enumerate() {
                    *y.add(vd + o) += w;
                }
            }
        }
    }

    /// `y[j] += Σ_o w[o] · v[o·shift + j]` for j < n, each sum from y in position order.
    #[inline(always)]
    unsafe fn weighted_sum(y: *mut Real, v: *const Real, shift: usize, w: &[Real], n: usize) {
        let mut j = 0;
        while j + 64 <= n {
            weighted_block::<8>(y.add(j), v.add(j), shift, w);
            j += 64;
        }
        while j + 8 <= n {
            weighted_block::<1>(y.add(j), v.add(j), shift, w);
            j += 8;
        }
        for (o, &wo) in w.iter().enumerate() {
            for jj in j..n {
                *y.add(jj) += wo * *v.add(o * shift + jj);
            }
        }
    }

    /// [`weighted_sum`] on 8·K columns, in K registers.
    #[inline(always)]
    unsafe fn weighted_block<const K: usize>(
        y: *mut Real,
        v: *const Real,
        shift: usize,
        w: &[Real],
    ) {
        let mut acc: [__m256; K] = std::array::from_fn(|k| _mm256_loadu_ps(y.add(8 * k)));
        for (o, &wo) in w.iter().enumerate() {
            let (wo, vo) = (_mm256_set1_ps(wo), v.add(o * shift));
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(wo, _mm256_loadu_ps(vo.add(8 * k))));
            }
        }
        for (k, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(y.add(8 * k), *a);
        }
    }

    /// All ones in the first `n` (≤ 8) lanes.
    #[inline(always)]
    unsafe fn lane_mask(n: usize) -> __m256i {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(n as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }

    /// The 16-lane halving sums of `halving_sum` ((l + l+8), then + l+4, then
    /// (0+2) + (1+3)) of eight positions whose lanes 0..8 are in `lo` and 8..16 in `hi`,
    /// done across positions with shuffles; position p ends in element p.
    #[inline(always)]
    unsafe fn halving_sums(lo: &[__m256; P], hi: &[__m256; P]) -> __m256 {
        let s8: [__m256; P] = std::array::from_fn(|p| _mm256_add_ps(lo[p], hi[p]));
        // [a0..4 | b0..4] + [a4..8 | b4..8] for the pairs (0,1) (2,3) (4,5) (6,7).
        let s4: [__m256; 4] = std::array::from_fn(|k| {
            let (a, b) = (s8[2 * k], s8[2 * k + 1]);
            _mm256_add_ps(
                _mm256_permute2f128_ps(a, b, 0x20),
                _mm256_permute2f128_ps(a, b, 0x31),
            )
        });
        // [a0+a2 a1+a3 c0+c2 c1+c3 | b.. d..] from [a | b] and [c | d].
        let s2: [__m256; 2] = std::array::from_fn(|k| {
            let (u, v) = (s4[2 * k], s4[2 * k + 1]);
            _mm256_add_ps(_mm256_shuffle_ps(u, v, 0x44), _mm256_shuffle_ps(u, v, 0xEE))
        });
        // Positions [0 2 4 6 | 1 3 5 7], then in order.
        let t = _mm256_add_ps(
            _mm256_shuffle_ps(s2[0], s2[1], 0x88),
            _mm256_shuffle_ps(s2[0], s2[1], 0xDD),
        );
        _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

multiversion! {
    /// y = a ⊙ b (the GRU's reset-gated recurrent input r ⊙ s).
    fn mul_elements_into(y: &mut [Real], a: &[Real], b: &[Real]) {
        for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
            *y = a * b;
        }
    }
}

multiversion! {
    /// The GRU cell on one row, fused: h ← tanh(h) (h holds the pre-activation),
    /// c ← (1 − z) h + z c_prev, rounded as `h − z·h + z·c_prev`.
    fn gru_cell_row(h: &mut [Real], c: &mut [Real], z: &[Real], c_prev: &[Real]) {
        let n = h.len();
        let (c, z, c_prev) = (&mut c[..n], &z[..n], &c_prev[..n]);
        for j in 0..n {
            let t = tanh_fast(h[j]);
            h[j] = t;
            c[j] = (t + -z[j] * t) + z[j] * c_prev[j];
        }
    }
}

/// The logistic sigmoid 1 / (1 + exp(−x)) with [`exp_fast`] (relative error below 5e-7),
/// branch-free so that it vectorises. NaN gives NaN.
#[inline(always)]
pub(crate) fn sigmoid_fast(x: Real) -> Real {
    1.0 / (1.0 + exp_fast(-x))
}

/// One row of an LSTM cell's input, split into its parts (C each) with the peephole weights
/// and the three dropout scales (1 without dropout); see `matrix::lstm`.
#[derive(Clone, Copy)]
pub(crate) struct LstmRow<'a> {
    pub i_part: &'a [Real],
    pub f_part: &'a [Real],
    pub c_part: &'a [Real],
    pub o_part: &'a [Real],
    pub c_prev: &'a [Real],
    pub w_ic: &'a [Real],
    pub w_fc: &'a [Real],
    pub w_oc: &'a [Real],
    pub scales: [Real; 3],
}

/// Where [`lstm_cell_backprop_row`] writes: the input derivative (5C, overwritten), the
/// peephole derivative (3C, f64, added), the value and derivative sums of the five
/// nonlinearities (5C each, f64, added), and per unit the three dropout-scale derivative
/// terms (3C, overwritten; the caller sums them in unit order).
pub(crate) struct LstmRowGrads<'a> {
    pub in_deriv: &'a mut [Real],
    pub params_deriv: &'a mut [f64],
    pub value_sum: &'a mut [f64],
    pub deriv_sum: &'a mut [f64],
    pub scale_terms: &'a mut [Real],
}

multiversion! {
    /// The LSTM cell on one row: c_t into `c_out`, m_t into `m_out` (C each).
    fn lstm_cell_row(x: LstmRow<'_>, c_out: &mut [Real], m_out: &mut [Real]) {
        let n = c_out.len();
        let (ip, fp, cp, op, cprev) =
            (&x.i_part[..n], &x.f_part[..n], &x.c_part[..n], &x.o_part[..n], &x.c_prev[..n]);
        let (wi, wf, wo, m_out) = (&x.w_ic[..n], &x.w_fc[..n], &x.w_oc[..n], &mut m_out[..n]);
        let [i_s, f_s, o_s] = x.scales;
        for j in 0..n {
            let c_prev = cprev[j];
            let i_t = sigmoid_fast(ip[j] + wi[j] * c_prev);
            let f_t = sigmoid_fast(fp[j] + wf[j] * c_prev);
            let c_t = f_t * f_s * c_prev + i_t * i_s * tanh_fast(cp[j]);
            let o_t = sigmoid_fast(op[j] + wo[j] * c_t);
            c_out[j] = c_t;
            m_out[j] = o_t * o_s * tanh_fast(c_t);
        }
    }
}

/// Units per block of [`lstm_cell_backprop_row`].
const LSTM_BLOCK: usize = 16;

multiversion! {
    /// The LSTM cell's backward pass on one row (the forward recomputed from `x`), from the
    /// output derivative `od` = [dc_t, dm_t] (2C) and the self-repair terms `repair` (5C).
    /// Works in blocks of 16 units whose results go to local arrays first: with a dozen
    /// output slices, a plain loop over the units does not vectorise (the compiler cannot
    /// rule out that they overlap).
    fn lstm_cell_backprop_row(x: LstmRow<'_>, od: &[Real], repair: &[Real], g: LstmRowGrads<'_>) {
        let n = x.c_prev.len();
        let mut g = g;
        let mut j0 = 0;
        while j0 < n {
            if n - j0 >= LSTM_BLOCK {
                lstm_backprop_block(&x, od, repair, &mut g, j0, LSTM_BLOCK);
                j0 += LSTM_BLOCK;
            } else {
                lstm_backprop_block(&x, od, repair, &mut g, j0, n - j0);
                j0 = n;
            }
        }
    }
}

/// Units `j0 .. j0 + len` of part `k` of a row made of parts `n` long.
#[inline(always)]
fn block_part(v: &[Real], n: usize, k: usize, j0: usize, len: usize) -> &[Real] {
    &v[k * n + j0..k * n + j0 + len]
}

/// Units `j0 .. j0 + len` (len ≤ [`LSTM_BLOCK`]) of [`lstm_cell_backprop_row`].
#[inline(always)]
fn lstm_backprop_block(
    x: &LstmRow<'_>,
    od: &[Real],
    repair: &[Real],
    g: &mut LstmRowGrads<'_>,
    j0: usize,
    len: usize,
) {
    let n = x.c_prev.len();
    let (ip, fp, cp, op, cprev) = (
        &x.i_part[j0..j0 + len],
        &x.f_part[j0..j0 + len],
        &x.c_part[j0..j0 + len],
        &x.o_part[j0..j0 + len],
        &x.c_prev[j0..j0 + len],
    );
    let (wi, wf, wo) = (
        &x.w_ic[j0..j0 + len],
        &x.w_fc[j0..j0 + len],
        &x.w_oc[j0..j0 + len],
    );
    let (od_c, od_m) = (block_part(od, n, 0, j0, len), block_part(od, n, 1, j0, len));
    let (sr0, sr1, sr2, sr3, sr4) = (
        block_part(repair, n, 0, j0, len),
        block_part(repair, n, 1, j0, len),
        block_part(repair, n, 2, j0, len),
        block_part(repair, n, 3, j0, len),
        block_part(repair, n, 4, j0, len),
    );
    let [i_s, f_s, o_s] = x.scales;
    // Per unit: the five nonlinearities' values and derivatives, the five input
    // derivatives, the three peephole-derivative terms and the three dropout-scale terms.
    let mut vals = [[0.0 as Real; LSTM_BLOCK]; 5];
    let mut ders = [[0.0 as Real; LSTM_BLOCK]; 5];
    let mut ind = [[0.0 as Real; LSTM_BLOCK]; 5];
    let mut pd = [[0.0 as Real; LSTM_BLOCK]; 3];
    let mut sc = [[0.0 as Real; LSTM_BLOCK]; 3];
    for l in 0..len {
        let c_prev = cprev[l];
        let i_t = sigmoid_fast(ip[l] + wi[l] * c_prev);
        let f_t = sigmoid_fast(fp[l] + wf[l] * c_prev);
        let tanh_c_part = tanh_fast(cp[l]);
        let c_t = f_t * f_s * c_prev + i_t * i_s * tanh_c_part;
        let o_t = sigmoid_fast(op[l] + wo[l] * c_t);
        let tanh_c_t = tanh_fast(c_t);
        vals[0][l] = i_t;
        vals[1][l] = f_t;
        vals[2][l] = tanh_c_part;
        vals[3][l] = o_t;
        vals[4][l] = tanh_c_t;
        ders[0][l] = i_t * (1.0 - i_t);
        ders[1][l] = f_t * (1.0 - f_t);
        ders[2][l] = 1.0 - tanh_c_part * tanh_c_part;
        ders[3][l] = o_t * (1.0 - o_t);
        ders[4][l] = 1.0 - tanh_c_t * tanh_c_t;
        let (dc_out, dm) = (od_c[l], od_m[l]);
        let do_t = dm * o_s * tanh_c_t;
        let dtanh_c_t = dm * o_t * o_s;
        let do_in = o_t * (1.0 - o_t) * do_t - (2.0 * o_t - 1.0) * sr3[l];
        let dc = dc_out + (1.0 - tanh_c_t * tanh_c_t) * dtanh_c_t - 2.0 * tanh_c_t * sr4[l]
            + do_in * wo[l];
        let df_t = dc * f_s * c_prev;
        let di_t = dc * i_s * tanh_c_part;
        let dtanh_c_part = dc * i_t * i_s;
        let df_in = f_t * (1.0 - f_t) * df_t - (2.0 * f_t - 1.0) * sr1[l];
        let di_in = i_t * (1.0 - i_t) * di_t - (2.0 * i_t - 1.0) * sr0[l];
        let dc_part = (1.0 - tanh_c_part * tanh_c_part) * dtanh_c_part - 2.0 * tanh_c_part * sr2[l];
        ind[0][l] = di_in;
        ind[1][l] = df_in;
        ind[2][l] = dc_part;
        ind[3][l] = do_in;
        ind[4][l] = dc * f_t * f_s + di_in * wi[l] + df_in * wf[l];
        pd[0][l] = di_in * c_prev;
        pd[1][l] = df_in * c_prev;
        pd[2][l] = do_in * c_t;
        sc[0][l] = dc * i_t * tanh_c_part;
        sc[1][l] = dc * f_t * c_prev;
        sc[2][l] = dm * o_t * tanh_c_t;
    }
    for k in 0..5 {
        let at = k * n + j0..k * n + j0 + len;
        for (d, &v) in g.value_sum[at.clone()].iter_mut().zip(&vals[k][..len]) {
            *d += v as f64;
        }
        for (d, &v) in g.deriv_sum[at.clone()].iter_mut().zip(&ders[k][..len]) {
            *d += v as f64;
        }
        g.in_deriv[at].copy_from_slice(&ind[k][..len]);
    }
    for k in 0..3 {
        let at = k * n + j0..k * n + j0 + len;
        for (d, &v) in g.params_deriv[at.clone()].iter_mut().zip(&pd[k][..len]) {
            *d += v as f64;
        }
        g.scale_terms[at].copy_from_slice(&sc[k][..len]);
    }
}

multiversion! {
    /// The output-GRU cell on one row: h ← tanh(c_prev·w + hpart), c as in [`gru_cell_row`].
    fn output_gru_cell_row(
        h: &mut [Real],
        c: &mut [Real],
        z: &[Real],
        hpart: &[Real],
        c_prev: &[Real],
        w: &[Real],
    ) {
        let n = h.len();
        let (c, z, hpart, c_prev, w) = (&mut c[..n], &z[..n], &hpart[..n], &c_prev[..n], &w[..n]);
        for j in 0..n {
            let t = tanh_fast(c_prev[j] * w[j] + hpart[j]);
            h[j] = t;
            c[j] = (t + -z[j] * t) + z[j] * c_prev[j];
        }
    }
}

multiversion! {
    /// Backprop of one GRU-cell row through the interpolation and the tanh, `x` being
    /// `[h, h_out_deriv, c_deriv, z, c_prev]`: hd ← (h_out_deriv + c_deriv − c_deriv·z)(1 − h²);
    /// with `add_inputs`, z_deriv += c_deriv (c_prev − h) (as −c_deriv·h + c_deriv·c_prev) and
    /// c_prev_deriv += c_deriv·z.
    fn gru_cell_backprop_row(
        hd: &mut [Real],
        z_deriv: &mut [Real],
        c_prev_deriv: &mut [Real],
        add_inputs: bool,
        x: [&[Real]; 5],
    ) {
        let n = hd.len();
        let [h, hod, cd, z, cp] = x;
        let (h, hod, cd, z, cp) = (&h[..n], &hod[..n], &cd[..n], &z[..n], &cp[..n]);
        if add_inputs {
            let (zd, cpd) = (&mut z_deriv[..n], &mut c_prev_deriv[..n]);
            for j in 0..n {
                zd[j] = (-cd[j] * h[j] + zd[j]) + cd[j] * cp[j];
                cpd[j] += cd[j] * z[j];
            }
        }
        for j in 0..n {
            let d = (hod[j] + cd[j]) + -cd[j] * z[j];
            hd[j] = d * (1.0 - h[j] * h[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<Real> {
        (0..n)
            .map(|i| ((i * 37 % 101) as Real - 50.0) / 13.0)
            .collect()
    }

    #[test]
    fn sum_squares_matches_f64() {
        for n in [0usize, 1, 15, 16, 17, 650, 1537] {
            let x = data(n);
            let want: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
            let got = sum_squares(&x) as f64;
            assert!(
                (got - want).abs() <= 1e-5 * want.max(1.0),
                "n {n}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn sum_squares_f64_matches_a_running_sum() {
        for n in [0usize, 1, 7, 8, 9, 650, 1951] {
            let x = data(n);
            let want: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
            let got = sum_squares_f64(&x);
            assert!(
                (got - want).abs() <= 1e-14 * want.max(1.0),
                "n {n}: {got} vs {want}"
            );
        }
        assert!(sum_squares_f64(&[1.0, Real::NAN, 2.0]).is_nan());
        assert_eq!(
            sum_squares_f64(&[Real::MAX; 9]),
            9.0 * (Real::MAX as f64).powi(2)
        );
    }

    #[test]
    fn dot_and_sum_match_f64() {
        for n in [0usize, 1, 15, 16, 17, 650, 1537] {
            let x = data(n);
            let y: Vec<Real> = x.iter().rev().map(|v| v * 0.5 + 0.25).collect();
            let want_dot: f64 = x.iter().zip(&y).map(|(&a, &b)| a as f64 * b as f64).sum();
            let want_sum: f64 = x.iter().map(|&a| a as f64).sum();
            let got = (dot(&x, &y) as f64, sum(&x) as f64);
            let scale = x.iter().map(|&a| (a as f64).abs()).sum::<f64>().max(1.0);
            assert!(
                (got.0 - want_dot).abs() <= 1e-5 * scale * 2.0,
                "n {n}: dot {got:?}"
            );
            assert!(
                (got.1 - want_sum).abs() <= 1e-5 * scale,
                "n {n}: sum {got:?}"
            );
        }
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0]), 14.0);
    }

    #[test]
    fn exp_fast_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let want = (x as f64).exp();
            let got = exp_fast(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x += 0.000_731;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp_fast(0.0), 1.0);
        assert!(exp_fast(Real::NAN).is_nan());
        assert_eq!(exp_fast(-1000.0), exp_fast(-87.0));
    }

    #[test]
    fn small_kernels_match_their_definitions() {
        for n in [0usize, 3, 16, 33, 650] {
            let x = data(n);
            let s: Vec<Real> = x.iter().map(|v| v * 0.5 + 1.0).collect();
            let mut a = x.clone();
            scale(&mut a, 3.0);
            assert!(a.iter().zip(&x).all(|(a, x)| *a == x * 3.0));
            let mut b = vec![7.0; n];
            scale_into(&mut b, &x, -2.0);
            assert!(b.iter().zip(&x).all(|(b, x)| *b == x * -2.0));
            let mut c = x.clone();
            mul_add_elements(&mut c, &s, &x);
            assert!(c.iter().zip(&x).zip(&s).all(|((c, x), s)| *c == x * s + x));
            let mut d = x.clone();
            floor(&mut d, 0.5);
            assert!(d.iter().zip(&x).all(|(d, x)| *d == x.max(0.5)));
            let mut e = s.clone();
            axpby(&mut e, &x, 2.0, 0.0);
            assert!(e.iter().zip(&x).all(|(e, x)| *e == 2.0 * x));
            let mut f = s.clone();
            axpby(&mut f, &x, 2.0, -1.0);
            assert!(f
                .iter()
                .zip(&x)
                .zip(&s)
                .all(|((f, x), s)| *f == 2.0 * x + -1.0 * s));
        }
    }

    #[test]
    fn log_softmax_matches_f64() {
        for n in [1usize, 15, 16, 37, 3000] {
            let x: Vec<Real> = data(n).iter().map(|v| v * 7.0 - 20.0).collect();
            let mut y = vec![0.0; n];
            log_softmax_from(&mut y, &x);
            let m = x.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
            let lse = m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
            for (&v, &got) in x.iter().zip(&y) {
                let want = v as f64 - lse;
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn tanh_fast_is_accurate() {
        let mut worst = 0.0f64;
        let mut worst_abs = 0.0f64;
        let mut x = -12.0f32;
        while x <= 12.0 {
            let want = (x as f64).tanh();
            let got = tanh_fast(x) as f64;
            if want != 0.0 {
                worst = worst.max(((got - want) / want).abs());
            }
            worst_abs = worst_abs.max((got - want).abs());
            assert!(got.abs() <= 1.0, "tanh_fast({x}) = {got}");
            x += 0.000_373;
        }
        for x in [1e-30f32, 1e-8, 1e-4, 0.3, 0.549_999, 0.55, 0.550_001] {
            let want = (x as f64).tanh();
            worst = worst.max(((tanh_fast(x) as f64 - want) / want).abs());
            worst = worst.max(((tanh_fast(-x) as f64 + want) / want).abs());
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert!(worst_abs < 1.5e-7, "worst absolute error {worst_abs}");
        assert_eq!(tanh_fast(0.0), 0.0);
        assert_eq!(tanh_fast(100.0), 1.0);
        assert_eq!(tanh_fast(Real::NEG_INFINITY), -1.0);
        assert!(tanh_fast(Real::NAN).is_nan());
    }

    #[test]
    fn sigmoid_fast_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -90.0f32;
        while x <= 90.0 {
            let want = 1.0 / (1.0 + (-(x as f64)).exp());
            let got = sigmoid_fast(x) as f64;
            assert!((0.0..=1.0).contains(&got), "sigmoid_fast({x}) = {got}");
            if want > 1e-30 {
                worst = worst.max(((got - want) / want).abs());
            }
            x += 0.000_731;
        }
        assert!(worst < 6e-7, "worst relative error {worst}");
        assert_eq!(sigmoid_fast(0.0), 0.5);
        assert_eq!(sigmoid_fast(Real::INFINITY), 1.0);
        assert!(sigmoid_fast(Real::NEG_INFINITY) < 1e-37);
        assert!(sigmoid_fast(Real::NAN).is_nan());
    }

    /// The blocked LSTM backward kernel equals a plain per-unit evaluation of the same
    /// formulas, for widths that are and are not multiples of the block.
    #[test]
    fn lstm_backprop_blocks_cover_every_unit() {
        for n in [1usize, 15, 16, 17, 40] {
            let v = |k: usize, i: usize| ((k * 131 + i * 17) % 97) as Real / 48.0 - 1.0;
            let x: Vec<Real> = (0..5 * n).map(|i| v(1, i)).collect();
            let w: Vec<Real> = (0..3 * n).map(|i| v(2, i) * 0.5).collect();
            let od: Vec<Real> = (0..2 * n).map(|i| v(3, i)).collect();
            let repair: Vec<Real> = (0..5 * n).map(|i| v(4, i) * 0.01).collect();
            let row = LstmRow {
                i_part: &x[..n],
                f_part: &x[n..2 * n],
                c_part: &x[2 * n..3 * n],
                o_part: &x[3 * n..4 * n],
                c_prev: &x[4 * n..],
                w_ic: &w[..n],
                w_fc: &w[n..2 * n],
                w_oc: &w[2 * n..],
                scales: [0.9, 1.1, 0.8],
            };
            let (mut ind, mut pd, mut vs, mut ds, mut sc) = (
                vec![Real::NAN; 5 * n],
                vec![1.0f64; 3 * n],
                vec![2.0f64; 5 * n],
                vec![3.0f64; 5 * n],
                vec![Real::NAN; 3 * n],
            );
            lstm_cell_backprop_row(
                row,
                &od,
                &repair,
                LstmRowGrads {
                    in_deriv: &mut ind,
                    params_deriv: &mut pd,
                    value_sum: &mut vs,
                    deriv_sum: &mut ds,
                    scale_terms: &mut sc,
                },
            );
            for j in 0..n {
                // The formulas once more, unit by unit.
                let [i_s, f_s, o_s] = [0.9 as Real, 1.1, 0.8];
                let sr = |k: usize| repair[k * n + j];
                let c_prev = x[4 * n + j];
                let i_t = sigmoid_fast(x[j] + w[j] * c_prev);
                let f_t = sigmoid_fast(x[n + j] + w[n + j] * c_prev);
                let tc = tanh_fast(x[2 * n + j]);
                let c_t = f_t * f_s * c_prev + i_t * i_s * tc;
                let o_t = sigmoid_fast(x[3 * n + j] + w[2 * n + j] * c_t);
                let tct = tanh_fast(c_t);
                let (dc_out, dm) = (od[j], od[n + j]);
                let do_in = o_t * (1.0 - o_t) * (dm * o_s * tct) - (2.0 * o_t - 1.0) * sr(3);
                let dc = dc_out + (1.0 - tct * tct) * (dm * o_t * o_s) - 2.0 * tct * sr(4)
                    + do_in * w[2 * n + j];
                let df_in = f_t * (1.0 - f_t) * (dc * f_s * c_prev) - (2.0 * f_t - 1.0) * sr(1);
                let di_in = i_t * (1.0 - i_t) * (dc * i_s * tc) - (2.0 * i_t - 1.0) * sr(0);
                let dcp = (1.0 - tc * tc) * (dc * i_t * i_s) - 2.0 * tc * sr(2);
                let want_in = [
                    di_in,
                    df_in,
                    dcp,
                    do_in,
                    dc * f_t * f_s + di_in * w[j] + df_in * w[n + j],
                ];
                let want_vals = [i_t, f_t, tc, o_t, tct];
                let want_ders = [
                    i_t * (1.0 - i_t),
                    f_t * (1.0 - f_t),
                    1.0 - tc * tc,
                    o_t * (1.0 - o_t),
                    1.0 - tct * tct,
                ];
                for k in 0..5 {
                    assert_eq!(ind[k * n + j], want_in[k], "n {n} unit {j} part {k}");
                    assert_eq!(vs[k * n + j], 2.0 + want_vals[k] as f64, "n {n} unit {j}");
                    assert_eq!(ds[k * n + j], 3.0 + want_ders[k] as f64, "n {n} unit {j}");
                }
                let want_pd = [di_in * c_prev, df_in * c_prev, do_in * c_t];
                let want_sc = [dc * i_t * tc, dc * f_t * c_prev, dm * o_t * tct];
                for k in 0..3 {
                    assert_eq!(pd[k * n + j], 1.0 + want_pd[k] as f64, "n {n} unit {j}");
                    assert_eq!(sc[k * n + j], want_sc[k], "n {n} unit {j}");
                }
            }
        }
    }
}
