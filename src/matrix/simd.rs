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
    /// x ← log-softmax(x) = x − max − log Σ exp(x − max).
    fn log_softmax(x: &mut [Real]) {
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
        let lse = m + s.ln();
        for v in x.iter_mut() {
            *v -= lse;
        }
    }
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
/// |x| is clamped to 10, where tanh rounds to 1. NaN gives NaN. Used by the fused GRU cells
/// only (Tanh and the LSTM keep libm's `tanhf`, so their goldens keep their last bits).
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
        let q = &query[..key_dim];
        let full = key_dim / 16 * 16;
        for (o, w) in weights.iter_mut().enumerate() {
            let key = &window[o * shift_stride..][..key_dim];
            let mut lanes = [0.0 as Real; 16];
            for j0 in (0..full).step_by(16) {
                for l in 0..16 {
                    lanes[l] += q[j0 + l] * key[j0 + l];
                }
            }
            let mut dot = 0.0 as Real;
            for j in full..key_dim {
                dot += q[j] * key[j];
            }
            // Pairwise halving in separate arrays, which compiles to vector shuffles.
            let mut s8 = [0.0 as Real; 8];
            for l in 0..8 {
                s8[l] = lanes[l] + lanes[l + 8];
            }
            let mut s4 = [0.0 as Real; 4];
            for l in 0..4 {
                s4[l] = s8[l] + s8[l + 4];
            }
            let total = (s4[0] + s4[2]) + (s4[1] + s4[3]);
            *w = key_scale * (total + dot) + query[key_dim + o];
        }
        let mut max = Real::NEG_INFINITY;
        for &w in weights.iter() {
            max = if w > max { w } else { max };
        }
        let mut sum = 0.0 as Real;
        for w in weights.iter_mut() {
            *w = exp_fast(*w - max);
            sum += *w;
        }
        for w in weights.iter_mut() {
            *w /= sum;
        }
        let (values, context) = out.split_at_mut(value_dim);
        // 16 output columns at a time, summed over the window in registers (a row-at-a-time
        // axpy would load and store the output once per window position).
        let vfull = value_dim / 16 * 16;
        for j0 in (0..vfull).step_by(16) {
            let mut acc = [0.0 as Real; 16];
            acc.copy_from_slice(&values[j0..j0 + 16]);
            for (o, &w) in weights.iter().enumerate() {
                let v = &window[o * shift_stride + key_dim + j0..][..16];
                for l in 0..16 {
                    acc[l] += w * v[l];
                }
            }
            values[j0..j0 + 16].copy_from_slice(&acc);
        }
        for (o, &w) in weights.iter().enumerate() {
            let v = &window[o * shift_stride + key_dim..][..value_dim];
            for (y, &x) in values[vfull..].iter_mut().zip(&v[vfull..]) {
                *y += w * x;
            }
        }
        for (y, &w) in context.iter_mut().zip(weights.iter()) {
            *y += w;
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
            let mut y = x.clone();
            log_softmax(&mut y);
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
}
