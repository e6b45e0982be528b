//! The 8-bit integer products (`compute --quantize=int8`) on the wsj TDNN's shapes, against
//! what the CPU's multiply units allow: one line per (kernel, shape) with the best rate of
//! several timed runs in giga multiply-adds per second (GMAC/s), and the peaks of
//!
//! - the AVX2 byte-product step (`vpmaddubsw` + `vpmaddwd` + `vpaddd`, 32 multiply-adds, two
//!   instructions on the multiply units) in independent chains: the AVX2 kernel's bound;
//! - the 8-lane float FMA (8 multiply-adds per instruction): what fp32 products are held to.
//!
//! Each shape runs on signed activations and on activations ≥ 0 (a layer after a ReLU),
//! for which the AVX2 kernel needs a quarter fewer instructions on the multiply units.
//!
//! Usage: `cargo bench --bench int8` (1 thread, timed by the thread's CPU time, so other
//! programs on the machine matter less).

use compnet::matrix::int8::{self, Int8Kernel, PackedWeights};
use compnet::matrix::{Matrix, Real};

/// (label, rows, inputs, outputs): a 4-chunk wsj batch's hidden and output products.
const SHAPES: &[(&str, usize, usize, usize)] = &[
    ("wsj-hidden", 256, 1950, 650),
    ("wsj-output", 200, 650, 3000),
    ("wsj-lda", 264, 300, 650),
];

fn cpu_seconds() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; CLOCK_THREAD_CPUTIME_ID is 3 on Linux.
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// Best time of `runs` calls of `f`, in CPU seconds.
fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..runs)
        .map(|_| {
            let t0 = cpu_seconds();
            f();
            cpu_seconds() - t0
        })
        .fold(f64::INFINITY, f64::min)
}

fn pseudo(rows: usize, cols: usize, seed: u64) -> Matrix {
    Matrix::from_vec(rows, cols, pseudo_data(rows * cols, seed))
}

/// `n` values in [−1, 1) from a xorshift generator.
fn pseudo_data(n: usize, seed: u64) -> Vec<Real> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as Real
        })
        .collect()
}

#[cfg(target_arch = "x86_64")]
mod peaks {
    use std::arch::x86_64::*;
    const CHAINS: usize = 12;

    /// `iters` steps of CHAINS independent byte-product chains; returns a sum (kept live).
    #[target_feature(enable = "avx2")]
    pub fn madd(iters: usize) -> i32 {
        let w = _mm256_set1_epi8(3);
        let ones = _mm256_set1_epi16(1);
        let mut acc: [__m256i; CHAINS] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
        for _ in 0..iters {
            for a in acc.iter_mut() {
                // The chain's own value is the signed operand, so nothing can be hoisted.
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, *a), ones));
            }
        }
        acc.iter()
            .map(|&a| _mm256_extract_epi32::<0>(a))
            .fold(0, i32::wrapping_add)
    }

    /// `iters` steps of CHAINS independent 8-lane FMAs.
    #[target_feature(enable = "avx2,fma")]
    pub fn fma(iters: usize) -> f32 {
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(1e-7);
        let mut acc = [_mm256_set1_ps(0.0); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        acc.iter().map(|&x| _mm256_cvtss_f32(x)).sum()
    }

    pub const MACS_PER_STEP_MADD: f64 = (CHAINS * 32) as f64;
    pub const MACS_PER_STEP_FMA: f64 = (CHAINS * 8) as f64;
}

fn main() {
    compnet::matrix::set_num_threads(1);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        let iters = 20_000_000;
        let mut sink = 0i64;
        // SAFETY: AVX2 and FMA detected above.
        let t = best_of(3, || sink += unsafe { peaks::madd(iters) } as i64);
        println!(
            "peak avx2 byte products (vpmaddubsw+vpmaddwd): {:.1} GMAC/s",
            iters as f64 * peaks::MACS_PER_STEP_MADD / t / 1e9
        );
        let mut fsink = 0.0f32;
        // SAFETY: as above.
        let t = best_of(3, || fsink += unsafe { peaks::fma(iters) });
        println!(
            "peak fp32 fma (8 lanes): {:.1} GMAC/s ({sink} {fsink})",
            iters as f64 * peaks::MACS_PER_STEP_FMA / t / 1e9
        );
    }
    for &(label, rows, inp, out) in SHAPES {
        let w = PackedWeights::new(pseudo(out, inp, 1).view());
        let signed = pseudo(rows, inp, 2);
        // The input of a layer after a ReLU: no negative activation, which the AVX2 kernel
        // multiplies two groups at a time.
        let abs = pseudo_data(rows * inp, 2).iter().map(|v| v.abs()).collect();
        let non_negative = Matrix::from_vec(rows, inp, abs);
        let mut y = Matrix::zeros(rows, out);
        let macs = (rows * inp * out) as f64;
        for kernel in Int8Kernel::available() {
            for (x, which) in [(&signed, "x signed"), (&non_negative, "x >= 0")] {
                if kernel == Int8Kernel::Portable && which != "x signed" {
                    continue; // the same loop either way
                }
                let reps = 20;
                let t = best_of(5, || {
                    for _ in 0..reps {
                        int8::forward_with(kernel, &w, 1.0, x.view(), &mut y.view_mut(), 0.0);
                    }
                });
                println!(
                    "{label:<11} {rows:>4}x{inp:>4}->{out:>4} {:<9} {which:<9} {:7.1} GMAC/s",
                    kernel.name(),
                    macs * reps as f64 / t / 1e9
                );
            }
        }
    }
}
