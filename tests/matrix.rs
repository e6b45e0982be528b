//! The matrix backend against straightforward references (f64 loops written here, independent
//! of the kernels), on random shapes and on strided sub-views of larger matrices whose
//! untouched parts are checked unchanged.

use compnet::matrix::{
    dot, gemm_backend_name, num_threads, set_num_threads, GemmBackend, MatView, MatViewMut, Matrix,
    Trans, Vector, Vector64,
};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

fn rand_mat(r: usize, c: usize, g: &mut StdRng) -> Matrix {
    Matrix::from_vec(
        r,
        c,
        (0..r * c).map(|_| g.random_range(-1.0f32..1.0)).collect(),
    )
}

fn rand_vec(n: usize, g: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| g.random_range(-1.0f32..1.0)).collect()
}

/// A (r+3)×(c+5) random matrix; the operand is its r×c block at (1, 2).
#[derive(Clone)]
struct Embedded {
    big: Matrix,
    orig: Matrix,
    r: usize,
    c: usize,
}

const R0: usize = 1;
const C0: usize = 2;

impl Embedded {
    fn new(r: usize, c: usize, g: &mut StdRng) -> Self {
        let big = rand_mat(r + 3, c + 5, g);
        Embedded {
            orig: big.clone(),
            big,
            r,
            c,
        }
    }
    fn view(&self) -> MatView<'_> {
        self.big.sub(R0, self.r, C0, self.c)
    }
    fn view_mut(&mut self) -> MatViewMut<'_> {
        self.big.sub_mut(R0, self.r, C0, self.c)
    }
    /// The original contents of the inner block.
    fn inner_orig(&self) -> Matrix {
        self.orig.sub(R0, self.r, C0, self.c).to_matrix()
    }
    /// Panics if anything outside the inner block changed.
    fn check_border(&self) {
        for i in 0..self.big.num_rows() {
            for j in 0..self.big.num_cols() {
                let inside = (R0..R0 + self.r).contains(&i) && (C0..C0 + self.c).contains(&j);
                if !inside {
                    assert_eq!(
                        self.big.get(i, j).to_bits(),
                        self.orig.get(i, j).to_bits(),
                        "element ({i}, {j}) outside the view changed"
                    );
                }
            }
        }
    }
}

fn assert_close(got: MatView<'_>, want: &[Vec<f64>], tol: f64, what: &str) {
    assert_eq!(got.num_rows(), want.len(), "{what}: rows");
    for (i, row) in want.iter().enumerate() {
        assert_eq!(got.num_cols(), row.len(), "{what}: cols");
        for (j, &w) in row.iter().enumerate() {
            let x = f64::from(got.get(i, j));
            let ok = (x - w).abs() <= tol * (1.0 + w.abs()) || (x.is_nan() && w.is_nan()) || x == w;
            assert!(ok, "{what}: ({i}, {j}) = {x}, want {w}");
        }
    }
}

fn assert_vec_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&x, &w)) in got.iter().zip(want).enumerate() {
        let x = f64::from(x);
        assert!(
            (x - w).abs() <= tol * (1.0 + w.abs()) || x == w,
            "{what}: [{i}] = {x}, want {w}"
        );
    }
}

fn to64(m: MatView<'_>) -> Vec<Vec<f64>> {
    (0..m.num_rows())
        .map(|i| (0..m.num_cols()).map(|j| f64::from(m.get(i, j))).collect())
        .collect()
}

fn op_get(m: MatView<'_>, t: Trans, i: usize, j: usize) -> f64 {
    f64::from(match t {
        Trans::No => m.get(i, j),
        Trans::Yes => m.get(j, i),
    })
}

/// Reference `alpha · op(a) · op(b) + beta · c` in f64 (beta = 0 ignores c).
fn ref_gemm(
    alpha: f32,
    a: MatView<'_>,
    ta: Trans,
    b: MatView<'_>,
    tb: Trans,
    beta: f32,
    c: MatView<'_>,
) -> Vec<Vec<f64>> {
    let k = if ta == Trans::No {
        a.num_cols()
    } else {
        a.num_rows()
    };
    (0..c.num_rows())
        .map(|i| {
            (0..c.num_cols())
                .map(|j| {
                    let s: f64 = (0..k)
                        .map(|l| op_get(a, ta, i, l) * op_get(b, tb, l, j))
                        .sum();
                    let old = if beta == 0.0 {
                        0.0
                    } else {
                        f64::from(beta) * f64::from(c.get(i, j))
                    };
                    f64::from(alpha) * s + old
                })
                .collect()
        })
        .collect()
}

#[allow(clippy::too_many_arguments)] // the parameters are the GEMM problem itself
fn check_gemm(
    m: usize,
    n: usize,
    k: usize,
    ta: Trans,
    tb: Trans,
    alpha: f32,
    beta: f32,
    seed: u64,
) {
    let mut g = rng(seed);
    let (ar, ac) = if ta == Trans::No { (m, k) } else { (k, m) };
    let (br, bc) = if tb == Trans::No { (k, n) } else { (n, k) };
    let a = Embedded::new(ar, ac, &mut g);
    let b = Embedded::new(br, bc, &mut g);
    let c0 = Embedded::new(m, n, &mut g);
    let want = ref_gemm(
        alpha,
        a.view(),
        ta,
        b.view(),
        tb,
        beta,
        c0.inner_orig().view(),
    );
    // The process's backend (what add_mat_mat uses), then every backend of this build.
    let mut c = c0.clone();
    c.view_mut()
        .add_mat_mat(alpha, a.view(), ta, b.view(), tb, beta);
    assert_close(
        c.view(),
        &want,
        1e-4 * (k as f64).sqrt().max(1.0),
        &format!("gemm {m}x{n}x{k} {ta:?}{tb:?}"),
    );
    c.check_border();
    for backend in GemmBackend::available() {
        let mut c = c0.clone();
        c.view_mut()
            .add_mat_mat_on(backend, alpha, a.view(), ta, b.view(), tb, beta);
        assert_close(
            c.view(),
            &want,
            1e-4 * (k as f64).sqrt().max(1.0),
            &format!("gemm {m}x{n}x{k} {ta:?}{tb:?} on {}", backend.name()),
        );
        c.check_border();
    }
}

const TRANS: [Trans; 2] = [Trans::No, Trans::Yes];

#[test]
fn gemm_all_transposes_alpha_beta() {
    let mut seed = 0;
    for ta in TRANS {
        for tb in TRANS {
            for &(alpha, beta) in &[(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25), (1.0, -1.0)] {
                for &(m, n, k) in &[
                    (1, 1, 1),
                    (7, 5, 3),
                    (33, 17, 65),
                    (64, 64, 64),
                    (3, 100, 2),
                    // Few rows into a wide output: the transposed-product path.
                    (50, 300, 70),
                    (128, 256, 64),
                ] {
                    seed += 1;
                    check_gemm(m, n, k, ta, tb, alpha, beta, seed);
                }
            }
        }
    }
}

#[test]
fn gemm_tall_skinny_and_empty() {
    let mut seed = 100;
    for ta in TRANS {
        for tb in TRANS {
            for &(m, n, k) in &[
                (300, 1, 7),
                (1, 300, 7),
                (200, 3, 1),
                (0, 5, 4),
                (5, 0, 4),
                (4, 5, 0),
                (0, 0, 0),
            ] {
                seed += 1;
                check_gemm(m, n, k, ta, tb, 1.5, 0.5, seed);
                check_gemm(m, n, k, ta, tb, 1.0, 0.0, seed);
            }
        }
    }
}

#[test]
fn gemm_beta_zero_overwrites_nan() {
    let mut g = rng(7);
    for ta in TRANS {
        for tb in TRANS {
            for &(m, n, k) in &[(5, 6, 7), (40, 30, 0), (130, 140, 150)] {
                let a = rand_mat(
                    if ta == Trans::No { m } else { k },
                    if ta == Trans::No { k } else { m },
                    &mut g,
                );
                let b = rand_mat(
                    if tb == Trans::No { k } else { n },
                    if tb == Trans::No { n } else { k },
                    &mut g,
                );
                let zero = Matrix::zeros(m, n);
                let want = ref_gemm(1.0, a.view(), ta, b.view(), tb, 0.0, zero.view());
                for backend in GemmBackend::available() {
                    let what = format!("beta = 0 over NaN on {}", backend.name());
                    let mut c = Matrix::from_vec(m, n, vec![f32::NAN; m * n]);
                    c.view_mut()
                        .add_mat_mat_on(backend, 1.0, a.view(), ta, b.view(), tb, 0.0);
                    assert_close(c.view(), &want, 1e-3, &what);
                    // alpha = 0 and beta = 0 must also give zeros, not NaN.
                    let mut c = Matrix::from_vec(m, n, vec![f32::NAN; m * n]);
                    c.view_mut()
                        .add_mat_mat_on(backend, 0.0, a.view(), ta, b.view(), tb, 0.0);
                    assert!(c.to_vec().iter().all(|&x| x == 0.0), "alpha = 0, {what}");
                }
            }
        }
    }
}

#[test]
fn gemm_one_and_two_threads_agree_with_reference() {
    assert!(!gemm_backend_name().is_empty());
    for threads in [1, 2, 0] {
        set_num_threads(threads);
        assert!(num_threads() >= 1);
        if threads > 0 {
            assert_eq!(num_threads(), threads);
        }
        for ta in TRANS {
            for tb in TRANS {
                // 192³ is above the single-thread cut-off, so this exercises the parallel path;
                // the other two are cut into several OpenBLAS blocks (by rows, by columns).
                check_gemm(192, 160, 200, ta, tb, 1.0, 0.5, 900 + threads as u64);
                check_gemm(1100, 70, 40, ta, tb, 1.0, 0.5, 910 + threads as u64);
                check_gemm(60, 1500, 30, ta, tb, -0.5, 0.0, 920 + threads as u64);
            }
        }
    }
    set_num_threads(0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn gemm_random_shapes(m in 0usize..40, n in 0usize..40, k in 0usize..40, ta in any::<bool>(), tb in any::<bool>(),
                          alpha in -2.0f32..2.0, beta in prop_oneof![Just(0.0f32), Just(1.0f32), -2.0f32..2.0], seed in any::<u64>()) {
        let t = |b: bool| if b { Trans::Yes } else { Trans::No };
        check_gemm(m, n, k, t(ta), t(tb), alpha, beta, seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Shapes past the kernel's tiles and blocks (6×16 tiles, k-blocks of 256, 168-row A
    /// blocks): sizes off every multiple, one dimension up to 400.
    #[test]
    fn gemm_random_shapes_past_the_blocks(m in 1usize..200, n in 1usize..120, k in 1usize..400,
                                          ta in any::<bool>(), tb in any::<bool>(),
                                          beta in prop_oneof![Just(0.0f32), Just(1.0f32), -2.0f32..2.0], seed in any::<u64>()) {
        let t = |b: bool| if b { Trans::Yes } else { Trans::No };
        check_gemm(m, n, k, t(ta), t(tb), 0.75, beta, seed);
    }
}

/// The same product on 1, 2 and 3 threads gives the same bits (every output element is
/// summed in the same order whatever the split), in all four transpose forms, on every
/// backend of this build. The shapes reach past one OpenBLAS block (512) in either
/// direction and cross the 64-aligned block edges.
#[test]
fn gemm_threads_give_identical_bits() {
    let mut g = rng(4242);
    let shapes = [
        (211, 97, 300),
        (97, 211, 300),
        (130, 140, 150),
        (1100, 70, 40),
        (60, 1500, 30),
        (2100, 40, 30),
    ];
    for backend in GemmBackend::available() {
        for &(m, n, k) in &shapes {
            threads_give_identical_bits(backend, m, n, k, &mut g);
        }
    }
    set_num_threads(0);
}

fn threads_give_identical_bits(backend: GemmBackend, m: usize, n: usize, k: usize, g: &mut StdRng) {
    for ta in TRANS {
        for tb in TRANS {
            let (ar, ac) = if ta == Trans::No { (m, k) } else { (k, m) };
            let (br, bc) = if tb == Trans::No { (k, n) } else { (n, k) };
            let a = Embedded::new(ar, ac, g);
            let b = Embedded::new(br, bc, g);
            let c0 = Embedded::new(m, n, g);
            let run = |threads: usize| {
                set_num_threads(threads);
                let mut c = c0.clone();
                c.view_mut()
                    .add_mat_mat_on(backend, 0.5, a.view(), ta, b.view(), tb, -1.5);
                c.check_border();
                c.view().to_vec()
            };
            let one = run(1);
            for threads in [2, 3] {
                let many = run(threads);
                let differ = one
                    .iter()
                    .zip(&many)
                    .position(|(x, y)| x.to_bits() != y.to_bits());
                assert!(
                    differ.is_none(),
                    "{m}x{n}x{k} {ta:?}{tb:?} on {threads} threads on {}: element {differ:?} differs",
                    backend.name()
                );
            }
        }
    }
}

/// Runs `op` on an embedded view and compares with `reference` applied to the original
/// block, element by element.
fn check_unary(
    name: &str,
    r: usize,
    c: usize,
    seed: u64,
    tol: f64,
    op: impl Fn(&mut MatViewMut<'_>),
    reference: impl Fn(f64) -> f64,
) {
    let mut g = rng(seed);
    let mut e = Embedded::new(r, c, &mut g);
    let orig = e.inner_orig();
    op(&mut e.view_mut());
    let want: Vec<Vec<f64>> = to64(orig.view())
        .into_iter()
        .map(|row| row.into_iter().map(&reference).collect())
        .collect();
    assert_close(e.view(), &want, tol, name);
    e.check_border();
}

#[test]
fn elementwise_unary_ops() {
    let shapes = [(1, 1), (4, 9), (17, 33), (0, 3), (3, 0)];
    for (s, &(r, c)) in shapes.iter().enumerate() {
        let seed = s as u64;
        check_unary("set_zero", r, c, seed, 0.0, |m| m.set_zero(), |_| 0.0);
        check_unary("set_const", r, c, seed, 0.0, |m| m.set_const(2.5), |_| 2.5);
        check_unary("scale", r, c, seed, 1e-6, |m| m.scale(-3.0), |x| -3.0 * x);
        check_unary(
            "add_const",
            r,
            c,
            seed,
            1e-6,
            |m| m.add_const(0.5),
            |x| x + 0.5,
        );
        check_unary(
            "apply_floor",
            r,
            c,
            seed,
            0.0,
            |m| m.apply_floor(0.1),
            |x| x.max(f64::from(0.1f32)),
        );
        check_unary(
            "apply_ceiling",
            r,
            c,
            seed,
            0.0,
            |m| m.apply_ceiling(0.1),
            |x| x.min(f64::from(0.1f32)),
        );
        check_unary(
            "apply_heaviside",
            r,
            c,
            seed,
            0.0,
            |m| m.apply_heaviside(),
            |x| if x > 0.0 { 1.0 } else { 0.0 },
        );
        check_unary("apply_exp", r, c, seed, 1e-6, |m| m.apply_exp(), f64::exp);
        check_unary("apply_abs", r, c, seed, 0.0, |m| m.apply_abs(), f64::abs);
        check_unary(
            "apply_pow_abs",
            r,
            c,
            seed,
            1e-5,
            |m| m.apply_pow_abs(1.5, false),
            |x| x.abs().powf(1.5),
        );
        check_unary(
            "apply_pow_abs signed",
            r,
            c,
            seed,
            1e-5,
            |m| m.apply_pow_abs(3.0, true),
            |x| x.signum() * x.abs().powi(3),
        );
        check_unary(
            "invert_elements",
            r,
            c,
            seed,
            1e-5,
            |m| m.invert_elements(),
            |x| 1.0 / x,
        );
    }
    // log and pow need positive inputs: shift into (1, 3).
    check_unary(
        "apply_log",
        5,
        7,
        1,
        1e-6,
        |m| {
            m.add_const(2.0);
            m.apply_log()
        },
        |x| (x + 2.0).ln(),
    );
    check_unary(
        "apply_pow",
        5,
        7,
        1,
        1e-5,
        |m| {
            m.add_const(2.0);
            m.apply_pow(0.5)
        },
        |x| (x + 2.0).sqrt(),
    );
}

/// Runs `op(dst, src)` with dst and src embedded views of the same shape.
fn check_from(
    name: &str,
    r: usize,
    c: usize,
    seed: u64,
    tol: f64,
    op: impl Fn(&mut MatViewMut<'_>, MatView<'_>),
    reference: impl Fn(f64, f64) -> f64,
) {
    let mut g = rng(seed);
    let src = Embedded::new(r, c, &mut g);
    let mut dst = Embedded::new(r, c, &mut g);
    let old = dst.inner_orig();
    op(&mut dst.view_mut(), src.view());
    let want: Vec<Vec<f64>> = to64(old.view())
        .into_iter()
        .zip(to64(src.view()))
        .map(|(d, s)| d.into_iter().zip(s).map(|(d, s)| reference(d, s)).collect())
        .collect();
    assert_close(dst.view(), &want, tol, name);
    dst.check_border();
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn elementwise_binary_ops() {
    for (s, &(r, c)) in [(1, 1), (6, 11), (20, 40), (0, 4)].iter().enumerate() {
        let seed = 10 + s as u64;
        check_from(
            "copy_from",
            r,
            c,
            seed,
            0.0,
            |d, s| d.copy_from(s),
            |_, s| s,
        );
        check_from(
            "add_mat",
            r,
            c,
            seed,
            1e-6,
            |d, s| d.add_mat(0.5, s, Trans::No),
            |d, s| d + 0.5 * s,
        );
        check_from(
            "add_mat_scaled",
            r,
            c,
            seed,
            1e-6,
            |d, s| d.add_mat_scaled(2.0, s, -1.0),
            |d, s| 2.0 * s - d,
        );
        check_from(
            "mul_elements",
            r,
            c,
            seed,
            1e-6,
            |d, s| d.mul_elements(s),
            |d, s| d * s,
        );
        check_from("max_with", r, c, seed, 0.0, |d, s| d.max_with(s), f64::max);
        check_from("min_with", r, c, seed, 0.0, |d, s| d.min_with(s), f64::min);
        check_from(
            "relu_from",
            r,
            c,
            seed,
            0.0,
            |d, s| d.relu_from(s),
            |_, s| s.max(0.0),
        );
        check_from(
            "sigmoid_from",
            r,
            c,
            seed,
            1e-6,
            |d, s| d.sigmoid_from(s),
            |_, s| sigmoid(s),
        );
        check_from(
            "tanh_from",
            r,
            c,
            seed,
            1e-6,
            |d, s| d.tanh_from(s),
            |_, s| s.tanh(),
        );
        check_from(
            "soft_hinge_from",
            r,
            c,
            seed,
            1e-6,
            |d, s| d.soft_hinge_from(s),
            |_, s| s.exp().ln_1p(),
        );
        check_from(
            "equal_element_mask",
            r,
            c,
            seed,
            0.0,
            |d, s| d.equal_element_mask(s, s),
            |_, _| 1.0,
        );
    }
}

#[test]
fn soft_hinge_is_stable_for_large_inputs() {
    let src = Matrix::from_vec(1, 4, vec![100.0, -100.0, 30.0, 0.0]);
    let mut d = Matrix::zeros(1, 4);
    d.view_mut().soft_hinge_from(src.view());
    assert_vec_close(
        &d.to_vec(),
        &[
            100.0,
            (-100f64).exp().ln_1p(),
            30.0 + (-30f64).exp().ln_1p(),
            2f64.ln(),
        ],
        1e-6,
        "soft_hinge",
    );
}

/// Three-operand ops: (dst, a, b) all the same shape.
fn check_ternary(
    name: &str,
    r: usize,
    c: usize,
    seed: u64,
    tol: f64,
    op: impl Fn(&mut MatViewMut<'_>, MatView<'_>, MatView<'_>),
    reference: impl Fn(f64, f64, f64) -> f64,
) {
    let mut g = rng(seed);
    let a = Embedded::new(r, c, &mut g);
    let b = Embedded::new(r, c, &mut g);
    let mut dst = Embedded::new(r, c, &mut g);
    let old = to64(dst.inner_orig().view());
    op(&mut dst.view_mut(), a.view(), b.view());
    let (av, bv) = (to64(a.view()), to64(b.view()));
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| reference(old[i][j], av[i][j], bv[i][j]))
                .collect()
        })
        .collect();
    assert_close(dst.view(), &want, tol, name);
    dst.check_border();
}

#[test]
fn elementwise_ternary_ops_and_derivatives() {
    for (s, &(r, c)) in [(1, 1), (5, 13), (16, 31)].iter().enumerate() {
        let seed = 20 + s as u64;
        check_ternary(
            "add_mul_elements",
            r,
            c,
            seed,
            1e-6,
            |d, a, b| d.add_mul_elements(0.5, a, b),
            |d, a, b| d + 0.5 * a * b,
        );
        check_ternary(
            "add_mat_mat_elements",
            r,
            c,
            seed,
            1e-6,
            |d, a, b| d.add_mat_mat_elements(2.0, a, b, 0.5),
            |d, a, b| 2.0 * a * b + 0.5 * d,
        );
        check_ternary(
            "add_mat_mat_elements beta 0",
            r,
            c,
            seed,
            1e-6,
            |d, a, b| d.add_mat_mat_elements(2.0, a, b, 0.0),
            |_, a, b| 2.0 * a * b,
        );
        check_ternary(
            "diff_sigmoid",
            r,
            c,
            seed,
            1e-6,
            |d, y, od| d.diff_sigmoid(y, od),
            |_, y, od| od * y * (1.0 - y),
        );
        check_ternary(
            "diff_tanh",
            r,
            c,
            seed,
            1e-6,
            |d, y, od| d.diff_tanh(y, od),
            |_, y, od| od * (1.0 - y * y),
        );
        check_ternary(
            "diff_relu",
            r,
            c,
            seed,
            0.0,
            |d, y, od| d.diff_relu(y, od),
            |_, y, od| if y > 0.0 { od } else { 0.0 },
        );
    }
}

#[test]
fn softmax_and_log_softmax_and_their_derivatives() {
    let mut g = rng(30);
    for &(r, c) in &[(1, 1), (3, 10), (9, 200)] {
        let mut src = Embedded::new(r, c, &mut g);
        src.view_mut().scale(20.0); // large values: the max subtraction matters
        let s64 = to64(src.view());
        let soft: Vec<Vec<f64>> = s64
            .iter()
            .map(|row| {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
                row.iter().map(|x| (x - m).exp() / z).collect()
            })
            .collect();
        let mut out = Embedded::new(r, c, &mut g);
        out.view_mut().softmax_per_row_from(src.view());
        assert_close(out.view(), &soft, 1e-5, "softmax");
        out.check_border();
        let logsoft: Vec<Vec<f64>> = soft
            .iter()
            .map(|row| row.iter().map(|x| x.ln()).collect())
            .collect();
        let mut lout = Embedded::new(r, c, &mut g);
        lout.view_mut().log_softmax_per_row_from(src.view());
        assert_close(lout.view(), &logsoft, 1e-4, "log_softmax");
        lout.check_border();
        // derivatives: J^T d, written out per definition
        let od = Embedded::new(r, c, &mut g);
        let d64 = to64(od.view());
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                let dot: f64 = (0..c).map(|j| soft[i][j] * d64[i][j]).sum();
                (0..c).map(|j| soft[i][j] * (d64[i][j] - dot)).collect()
            })
            .collect();
        let mut din = Embedded::new(r, c, &mut g);
        din.view_mut().diff_softmax_per_row(out.view(), od.view());
        assert_close(din.view(), &want, 1e-5, "diff_softmax");
        din.check_border();
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                let sum: f64 = d64[i].iter().sum();
                (0..c).map(|j| d64[i][j] - soft[i][j] * sum).collect()
            })
            .collect();
        let mut din = Embedded::new(r, c, &mut g);
        din.view_mut()
            .diff_log_softmax_per_row(lout.view(), od.view());
        assert_close(din.view(), &want, 1e-4, "diff_log_softmax");
        din.check_border();
    }
}

#[test]
fn transposes_and_add_mat_trans() {
    let mut g = rng(40);
    for &(r, c) in &[(1, 1), (3, 70), (65, 33), (100, 100)] {
        let src = Embedded::new(c, r, &mut g);
        let mut dst = Embedded::new(r, c, &mut g);
        let old = to64(dst.inner_orig().view());
        dst.view_mut().add_mat(-0.5, src.view(), Trans::Yes);
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                (0..c)
                    .map(|j| old[i][j] - 0.5 * f64::from(src.view().get(j, i)))
                    .collect()
            })
            .collect();
        assert_close(dst.view(), &want, 1e-6, "add_mat trans");
        dst.check_border();
        dst.view_mut().copy_from_trans(src.view());
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| (0..c).map(|j| f64::from(src.view().get(j, i))).collect())
            .collect();
        assert_close(dst.view(), &want, 0.0, "copy_from_trans");
        dst.check_border();
        assert_eq!(
            src.view().to_matrix().transposed().to_vec(),
            dst.view().to_vec()
        );
    }
}

#[test]
fn vector_broadcasts_and_diagonal_scalings() {
    let mut g = rng(50);
    for &(r, c) in &[(1, 1), (4, 7), (19, 23)] {
        let vr = rand_vec(r, &mut g);
        let vc = rand_vec(c, &mut g);
        let a = Embedded::new(r, c, &mut g);
        let at = Embedded::new(c, r, &mut g);
        let a64 = to64(a.view());
        let mut d = Embedded::new(r, c, &mut g);
        let old = to64(d.inner_orig().view());
        let run = |d: &mut Embedded,
                   name: &str,
                   f: &dyn Fn(&mut MatViewMut<'_>),
                   want: &dyn Fn(usize, usize) -> f64| {
            d.big = d.orig.clone();
            f(&mut d.view_mut());
            let w: Vec<Vec<f64>> = (0..r)
                .map(|i| (0..c).map(|j| want(i, j)).collect())
                .collect();
            assert_close(d.view(), &w, 1e-5, name);
            d.check_border();
        };
        let (vr64, vc64): (Vec<f64>, Vec<f64>) = (
            vr.iter().map(|&x| x.into()).collect(),
            vc.iter().map(|&x| x.into()).collect(),
        );
        run(
            &mut d,
            "add_vec_to_rows",
            &|m| m.add_vec_to_rows(2.0, &Vector::from_vec(vc.clone()), 0.5),
            &|i, j| 2.0 * vc64[j] + 0.5 * old[i][j],
        );
        run(
            &mut d,
            "add_vec_to_cols",
            &|m| m.add_vec_to_cols(2.0, &Vector::from_vec(vr.clone()), 0.5),
            &|i, j| 2.0 * vr64[i] + 0.5 * old[i][j],
        );
        run(
            &mut d,
            "mul_cols_vec",
            &|m| m.mul_cols_vec(&Vector::from_vec(vc.clone())),
            &|i, j| old[i][j] * vc64[j],
        );
        run(
            &mut d,
            "mul_rows_vec",
            &|m| m.mul_rows_vec(&Vector::from_vec(vr.clone())),
            &|i, j| old[i][j] * vr64[i],
        );
        run(
            &mut d,
            "copy_from_vec_rows",
            &|m| m.copy_from_vec_rows(&Vector::from_vec(vc.clone())),
            &|_, j| vc64[j],
        );
        run(
            &mut d,
            "copy_from_vec_cols",
            &|m| m.copy_from_vec_cols(&Vector::from_vec(vr.clone())),
            &|i, _| vr64[i],
        );
        run(
            &mut d,
            "add_vec_vec",
            &|m| m.add_vec_vec(1.5, &vr, &vc, -1.0),
            &|i, j| 1.5 * vr64[i] * vc64[j] - old[i][j],
        );
        run(
            &mut d,
            "add_diag_vec_mat",
            &|m| m.add_diag_vec_mat(2.0, &Vector::from_vec(vr.clone()), a.view(), Trans::No, 0.5),
            &|i, j| 2.0 * vr64[i] * a64[i][j] + 0.5 * old[i][j],
        );
        run(
            &mut d,
            "add_diag_vec_mat T",
            &|m| {
                m.add_diag_vec_mat(
                    2.0,
                    &Vector::from_vec(vr.clone()),
                    at.view(),
                    Trans::Yes,
                    0.0,
                )
            },
            &|i, j| 2.0 * vr64[i] * f64::from(at.view().get(j, i)),
        );
        run(
            &mut d,
            "add_mat_diag_vec",
            &|m| m.add_mat_diag_vec(2.0, a.view(), Trans::No, &Vector::from_vec(vc.clone()), 0.5),
            &|i, j| 2.0 * a64[i][j] * vc64[j] + 0.5 * old[i][j],
        );
        run(
            &mut d,
            "add_mat_diag_vec T",
            &|m| {
                m.add_mat_diag_vec(
                    -1.0,
                    at.view(),
                    Trans::Yes,
                    &Vector::from_vec(vc.clone()),
                    1.0,
                )
            },
            &|i, j| -f64::from(at.view().get(j, i)) * vc64[j] + old[i][j],
        );
        let flat = rand_vec(r * c, &mut g);
        run(
            &mut d,
            "copy_from_row_major",
            &|m| m.copy_from_row_major(&flat),
            &|i, j| f64::from(flat[i * c + j]),
        );
        let cols: Vec<i32> = (0..r)
            .map(|i| if i % 3 == 2 { -1 } else { (i % c) as i32 })
            .collect();
        run(
            &mut d,
            "add_to_elements",
            &|m| m.add_to_elements(0.25, &cols),
            &|i, j| old[i][j] + if cols[i] == j as i32 { 0.25 } else { 0.0 },
        );
    }
}

#[test]
fn reductions() {
    let mut g = rng(60);
    for &(r, c) in &[(1, 1), (5, 9), (30, 17)] {
        let a = Embedded::new(r, c, &mut g);
        let b = Embedded::new(r, c, &mut g);
        let (a64, b64) = (to64(a.view()), to64(b.view()));
        let av = a.view();
        let all: Vec<f64> = a64.iter().flatten().copied().collect();
        let tol = 1e-5;
        assert_vec_close(&[av.sum()], &[all.iter().sum()], tol, "sum");
        assert_vec_close(
            &[av.max_abs()],
            &[all.iter().fold(0.0, |m, x| m.max(x.abs()))],
            0.0,
            "max_abs",
        );
        assert_vec_close(
            &[av.max()],
            &[all.iter().cloned().fold(f64::NEG_INFINITY, f64::max)],
            0.0,
            "max",
        );
        assert_vec_close(
            &[av.min()],
            &[all.iter().cloned().fold(f64::INFINITY, f64::min)],
            0.0,
            "min",
        );
        assert_vec_close(
            &[av.frobenius_norm()],
            &[all.iter().map(|x| x * x).sum::<f64>().sqrt()],
            tol,
            "frobenius",
        );
        let tr: f64 = (0..r)
            .flat_map(|i| (0..c).map(move |j| (i, j)))
            .map(|(i, j)| a64[i][j] * b64[i][j])
            .sum();
        assert_vec_close(&[av.trace_mat_mat(b.view())], &[tr], tol, "trace_mat_mat");
        let rows_sq: Vec<f64> = a64
            .iter()
            .map(|row| row.iter().map(|x| x * x).sum())
            .collect();
        let cols_sq: Vec<f64> = (0..c)
            .map(|j| (0..r).map(|i| a64[i][j] * a64[i][j]).sum())
            .collect();
        let row_sum: Vec<f64> = (0..c).map(|j| (0..r).map(|i| a64[i][j]).sum()).collect();
        let col_sum: Vec<f64> = a64.iter().map(|row| row.iter().sum()).collect();
        let mut v = Vector::from_vec(vec![1.0f32; r]);
        v.add_diag_mat2(2.0, av, Trans::No, 0.5);
        assert_vec_close(
            &v.to_vec(),
            &rows_sq.iter().map(|x| 2.0 * x + 0.5).collect::<Vec<_>>(),
            tol,
            "add_diag_mat2 No",
        );
        let mut v = Vector::from_vec(vec![f32::NAN; c]);
        v.add_diag_mat2(1.0, av, Trans::Yes, 0.0);
        assert_vec_close(&v.to_vec(), &cols_sq, tol, "add_diag_mat2 Yes");
        let mut v = Vector::from_vec(vec![1.0f32; c]);
        v.add_row_sum_mat(1.0, av, 1.0);
        assert_vec_close(
            &v.to_vec(),
            &row_sum.iter().map(|x| x + 1.0).collect::<Vec<_>>(),
            tol,
            "add_row_sum",
        );
        let mut v = Vector::zeros(r);
        v.add_col_sum_mat(-1.0, av, 0.0);
        assert_vec_close(
            &v.to_vec(),
            &col_sum.iter().map(|x| -x).collect::<Vec<_>>(),
            tol,
            "add_col_sum",
        );
        let dots: Vec<f64> = (0..r)
            .map(|i| (0..c).map(|j| a64[i][j] * b64[i][j]).sum())
            .collect();
        assert_vec_close(
            &av.row_dot_products(b.view()).to_vec(),
            &dots,
            tol,
            "row_dot_products",
        );
        let mut v = Vector::from_vec(vec![3.0f32; r]);
        v.add_diag_mat_mat(1.0, av, Trans::No, b.view(), Trans::Yes, 1.0);
        assert_vec_close(
            &v.to_vec(),
            &dots.iter().map(|x| x + 3.0).collect::<Vec<_>>(),
            tol,
            "add_diag_mat_mat NT",
        );
        let cdots: Vec<f64> = (0..c)
            .map(|j| (0..r).map(|i| a64[i][j] * b64[i][j]).sum())
            .collect();
        let mut v = Vector::zeros(c);
        v.add_diag_mat_mat(1.0, av, Trans::Yes, b.view(), Trans::No, 0.0);
        assert_vec_close(&v.to_vec(), &cdots, tol, "add_diag_mat_mat TN");
        // (No, No) and (Yes, Yes) need b with the transposed shape.
        let bt = b.view().to_matrix().transposed();
        let mut v = Vector::zeros(r);
        v.add_diag_mat_mat(1.0, av, Trans::No, bt.view(), Trans::No, 0.0);
        assert_vec_close(&v.to_vec(), &dots, tol, "add_diag_mat_mat NN");
        let mut v = Vector::zeros(c);
        v.add_diag_mat_mat(1.0, av, Trans::Yes, bt.view(), Trans::Yes, 0.0);
        assert_vec_close(&v.to_vec(), &cdots, tol, "add_diag_mat_mat TT");
        let maxes: Vec<f64> = a64
            .iter()
            .map(|row| row.iter().cloned().fold(f64::NEG_INFINITY, f64::max))
            .collect();
        assert_vec_close(&av.row_max().to_vec(), &maxes, 0.0, "row_max");
        let idx = av.row_max_index();
        for i in 0..r {
            assert_eq!(a64[i][idx[i] as usize], maxes[i], "row_max_index");
        }
        let x = rand_vec(c, &mut g);
        let mut y = vec![1.0f32; r];
        av.add_mat_vec_to(&mut y, 2.0, Trans::No, &x, -1.0);
        let want: Vec<f64> = (0..r)
            .map(|i| 2.0 * (0..c).map(|j| a64[i][j] * f64::from(x[j])).sum::<f64>() - 1.0)
            .collect();
        assert_vec_close(&y, &want, tol, "add_mat_vec No");
        let x = rand_vec(r, &mut g);
        let mut y = vec![f32::NAN; c];
        av.add_mat_vec_to(&mut y, 1.0, Trans::Yes, &x, 0.0);
        let want: Vec<f64> = (0..c)
            .map(|j| (0..r).map(|i| a64[i][j] * f64::from(x[i])).sum())
            .collect();
        assert_vec_close(&y, &want, tol, "add_mat_vec Yes");
    }
    assert!(Matrix::zeros(0, 3).view().max().is_infinite());
    assert!(Matrix::zeros(2, 0)
        .view()
        .row_max_index()
        .iter()
        .all(|&i| i == -1));
}

#[test]
fn grouped_reductions() {
    let mut g = rng(70);
    for &(r, groups, gs) in &[(1, 1, 1), (4, 3, 5), (7, 10, 2)] {
        let c = groups * gs;
        let src = Embedded::new(r, c, &mut g);
        let s64 = to64(src.view());
        for p in [1.0f32, 2.0, 3.0, f32::INFINITY] {
            let pf = f64::from(p);
            let mut out = Embedded::new(r, groups, &mut g);
            out.view_mut().group_pnorm_from(src.view(), p);
            let want: Vec<Vec<f64>> = s64
                .iter()
                .map(|row| {
                    row.chunks(gs)
                        .map(|grp| {
                            if p.is_infinite() {
                                grp.iter().fold(0.0f64, |m, x| m.max(x.abs()))
                            } else {
                                grp.iter()
                                    .map(|x| x.abs().powf(pf))
                                    .sum::<f64>()
                                    .powf(1.0 / pf)
                            }
                        })
                        .collect()
                })
                .collect();
            assert_close(out.view(), &want, 1e-5, &format!("group_pnorm p={p}"));
            out.check_border();
            // derivative against a central finite difference of Σ od · pnorm(x)
            let od = rand_mat(r, groups, &mut g);
            let mut din = Embedded::new(r, c, &mut g);
            din.view_mut()
                .diff_group_pnorm(src.view(), out.view(), od.view(), p);
            din.check_border();
            let h = 1e-3;
            for (i, srow) in s64.iter().enumerate() {
                for k in 0..c {
                    let grp = k / gs;
                    let norm = |x: &[f64]| {
                        if p.is_infinite() {
                            x.iter().fold(0.0f64, |m, v| m.max(v.abs()))
                        } else {
                            x.iter()
                                .map(|v| v.abs().powf(pf))
                                .sum::<f64>()
                                .powf(1.0 / pf)
                        }
                    };
                    let mut xp = srow[grp * gs..(grp + 1) * gs].to_vec();
                    let mut xm = xp.clone();
                    xp[k % gs] += h;
                    xm[k % gs] -= h;
                    let fd = f64::from(od.get(i, grp)) * (norm(&xp) - norm(&xm)) / (2.0 * h);
                    let got = f64::from(din.view().get(i, k));
                    assert!(
                        (got - fd).abs() < 2e-3 * (1.0 + fd.abs()),
                        "diff_group_pnorm p={p} ({i},{k}): {got} vs {fd}"
                    );
                }
            }
        }
        let mut out = Embedded::new(r, groups, &mut g);
        out.view_mut().group_max_from(src.view());
        let want: Vec<Vec<f64>> = s64
            .iter()
            .map(|row| {
                row.chunks(gs)
                    .map(|grp| grp.iter().cloned().fold(f64::NEG_INFINITY, f64::max))
                    .collect()
            })
            .collect();
        assert_close(out.view(), &want, 0.0, "group_max");
        out.check_border();
        let mut mask = Embedded::new(r, c, &mut g);
        mask.view_mut().group_max_deriv(src.view(), out.view());
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                (0..c)
                    .map(|k| {
                        if s64[i][k] == want[i][k / gs] {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        assert_close(mask.view(), &want, 0.0, "group_max_deriv");
        mask.check_border();
        // sum_column_ranges: each output column sums a (possibly empty) range
        let ranges: Vec<(i32, i32)> = (0..groups)
            .map(|j| {
                if j == 1 {
                    (-1, -1)
                } else {
                    ((j * gs) as i32, ((j + 1) * gs) as i32)
                }
            })
            .collect();
        let mut out = Embedded::new(r, groups, &mut g);
        out.view_mut().sum_column_ranges(src.view(), &ranges);
        let want: Vec<Vec<f64>> = s64
            .iter()
            .map(|row| {
                ranges
                    .iter()
                    .map(|&(s, e)| {
                        if s < 0 {
                            0.0
                        } else {
                            row[s as usize..e as usize].iter().sum()
                        }
                    })
                    .collect()
            })
            .collect();
        assert_close(out.view(), &want, 1e-6, "sum_column_ranges");
        out.check_border();
    }
}

#[test]
fn add_mat_blocks_sums_blocks() {
    let mut g = rng(80);
    let (r, c, p, q) = (3, 4, 2, 3);
    let src = Embedded::new(r * p, c * q, &mut g);
    let s64 = to64(src.view());
    let mut d = Embedded::new(r, c, &mut g);
    let old = to64(d.inner_orig().view());
    d.view_mut().add_mat_blocks(0.5, src.view(), 2.0);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| {
                    2.0 * old[i][j]
                        + 0.5
                            * (0..p)
                                .flat_map(|bi| (0..q).map(move |bj| (bi, bj)))
                                .map(|(bi, bj)| s64[bi * r + i][bj * c + j])
                                .sum::<f64>()
                })
                .collect()
        })
        .collect();
    assert_close(d.view(), &want, 1e-6, "add_mat_blocks");
    d.check_border();
}

#[test]
fn set_mat_mat_div_mat_keeps_a_where_c_is_zero() {
    let a = Matrix::from_vec(1, 3, vec![1.0, 2.0, 3.0]);
    let b = Matrix::from_vec(1, 3, vec![4.0, 5.0, 6.0]);
    let c = Matrix::from_vec(1, 3, vec![2.0, 0.0, -3.0]);
    let mut d = Matrix::zeros(1, 3);
    d.view_mut()
        .set_mat_mat_div_mat(a.view(), b.view(), c.view());
    assert_eq!(d.to_vec(), vec![2.0, 2.0, -6.0]);
}

#[test]
fn random_fills_have_the_right_moments() {
    let mut g = rng(90);
    let mut m = Matrix::zeros(200, 101);
    m.view_mut().set_rand_uniform(&mut g);
    let v = m.to_vec();
    assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)));
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
    assert!((mean - 0.5).abs() < 0.01, "uniform mean {mean}");
    m.view_mut().set_randn(&mut g);
    let v = m.to_vec();
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    assert!(
        mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
        "randn mean {mean} var {var}"
    );
}

#[test]
fn row_gather_and_scatter() {
    let mut g = rng(100);
    let (r, c, sr) = (9, 6, 5);
    let src = Embedded::new(sr, c, &mut g);
    let s64 = to64(src.view());
    let idx: Vec<i32> = (0..r)
        .map(|i| {
            if i % 4 == 3 {
                -1
            } else {
                ((i * 7) % sr) as i32
            }
        })
        .collect();
    let mut d = Embedded::new(r, c, &mut g);
    let old = to64(d.inner_orig().view());
    d.view_mut().copy_rows(src.view(), &idx);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            if idx[i] < 0 {
                vec![0.0; c]
            } else {
                s64[idx[i] as usize].clone()
            }
        })
        .collect();
    assert_close(d.view(), &want, 0.0, "copy_rows");
    d.check_border();
    d.big = d.orig.clone();
    d.view_mut().add_rows(0.5, src.view(), &idx);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| {
                    old[i][j]
                        + if idx[i] < 0 {
                            0.0
                        } else {
                            0.5 * s64[idx[i] as usize][j]
                        }
                })
                .collect()
        })
        .collect();
    assert_close(d.view(), &want, 1e-6, "add_rows");
    d.check_border();
    // multi forms: row pointers
    let ptrs: Vec<Option<(MatView<'_>, usize)>> = idx
        .iter()
        .map(|&i| {
            if i < 0 {
                None
            } else {
                Some((src.view(), i as usize))
            }
        })
        .collect();
    d.big = d.orig.clone();
    d.view_mut().copy_rows_multi(&ptrs);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            if idx[i] < 0 {
                vec![0.0; c]
            } else {
                s64[idx[i] as usize].clone()
            }
        })
        .collect();
    assert_close(d.view(), &want, 0.0, "copy_rows_multi");
    d.check_border();
    d.big = d.orig.clone();
    d.view_mut().add_rows_multi(-1.0, &ptrs);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| {
                    old[i][j]
                        - if idx[i] < 0 {
                            0.0
                        } else {
                            s64[idx[i] as usize][j]
                        }
                })
                .collect()
        })
        .collect();
    assert_close(d.view(), &want, 1e-6, "add_rows_multi");
    d.check_border();
    // scatter: rows of a short src into distinct rows of d
    let to: Vec<i32> = vec![4, -1, 0, 8, 2];
    let mut d = Embedded::new(r, c, &mut g);
    let old = to64(d.inner_orig().view());
    d.view_mut().copy_to_rows_from(src.view(), &to);
    let mut want = old.clone();
    for (i, &t) in to.iter().enumerate() {
        if t >= 0 {
            want[t as usize] = s64[i].clone();
        }
    }
    assert_close(d.view(), &want, 0.0, "copy_to_rows_from");
    d.check_border();
    d.big = d.orig.clone();
    d.view_mut().add_to_rows_from(2.0, src.view(), &to);
    let mut want = old.clone();
    for (i, &t) in to.iter().enumerate() {
        if t >= 0 {
            for j in 0..c {
                want[t as usize][j] += 2.0 * s64[i][j];
            }
        }
    }
    assert_close(d.view(), &want, 1e-6, "add_to_rows_from");
    d.check_border();
    // row ranges
    let ranges: Vec<(i32, i32)> = (0..r)
        .map(|i| {
            if i % 3 == 0 {
                (-1, -1)
            } else {
                ((i % sr) as i32 / 2, (i % sr) as i32)
            }
        })
        .collect();
    d.big = d.orig.clone();
    d.view_mut().add_row_ranges(src.view(), &ranges);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| {
                    old[i][j]
                        + (ranges[i].0.max(0)..ranges[i].1)
                            .map(|k| s64[k as usize][j])
                            .sum::<f64>()
                })
                .collect()
        })
        .collect();
    assert_close(d.view(), &want, 1e-6, "add_row_ranges");
    d.check_border();
}

#[test]
fn column_gather() {
    let mut g = rng(110);
    let (r, c, sc) = (5, 8, 6);
    let src = Embedded::new(r, sc, &mut g);
    let s64 = to64(src.view());
    let idx: Vec<i32> = (0..c)
        .map(|j| {
            if j % 3 == 1 {
                -1
            } else {
                ((j * 5) % sc) as i32
            }
        })
        .collect();
    let mut d = Embedded::new(r, c, &mut g);
    let old = to64(d.inner_orig().view());
    d.view_mut().copy_cols(src.view(), &idx);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| {
                    if idx[j] < 0 {
                        0.0
                    } else {
                        s64[i][idx[j] as usize]
                    }
                })
                .collect()
        })
        .collect();
    assert_close(d.view(), &want, 0.0, "copy_cols");
    d.check_border();
    d.big = d.orig.clone();
    d.view_mut().add_cols(src.view(), &idx);
    let want: Vec<Vec<f64>> = (0..r)
        .map(|i| {
            (0..c)
                .map(|j| {
                    old[i][j]
                        + if idx[j] < 0 {
                            0.0
                        } else {
                            s64[i][idx[j] as usize]
                        }
                })
                .collect()
        })
        .collect();
    assert_close(d.view(), &want, 1e-6, "add_cols");
    d.check_border();
}

#[test]
fn vector_ops() {
    let mut g = rng(120);
    let n = 37;
    let a = rand_vec(n, &mut g);
    let b = rand_vec(n, &mut g);
    let a64: Vec<f64> = a.iter().map(|&x| x.into()).collect();
    let b64: Vec<f64> = b.iter().map(|&x| x.into()).collect();
    let tol = 1e-5;
    assert_vec_close(
        &[dot(&a, &b)],
        &[a64.iter().zip(&b64).map(|(x, y)| x * y).sum()],
        tol,
        "dot",
    );
    let mut v = Vector::from_vec(a.clone());
    v.add_vec(2.0, &b);
    assert_vec_close(
        &v.to_vec(),
        &a64.iter()
            .zip(&b64)
            .map(|(x, y)| x + 2.0 * y)
            .collect::<Vec<_>>(),
        tol,
        "add_vec",
    );
    let mut v = Vector::from_vec(a.clone());
    v.add_vec_vec(0.5, &a, &b, -1.0);
    assert_vec_close(
        &v.to_vec(),
        &a64.iter()
            .zip(&b64)
            .map(|(x, y)| 0.5 * x * y - x)
            .collect::<Vec<_>>(),
        tol,
        "add_vec_vec",
    );
    let mut v = Vector::from_vec(a.clone());
    let n_floored = v.apply_floor(0.0);
    assert_eq!(n_floored, a.iter().filter(|&&x| x < 0.0).count());
    assert!(v.to_vec().iter().all(|&x| x >= 0.0));
    let v = Vector::from_vec(a.clone());
    assert_vec_close(&[v.sum()], &[a64.iter().sum()], tol, "sum");
    assert_vec_close(
        &[v.norm(2.0)],
        &[a64.iter().map(|x| x * x).sum::<f64>().sqrt()],
        tol,
        "norm2",
    );
    assert_vec_close(
        &[v.norm(1.0)],
        &[a64.iter().map(|x| x.abs()).sum()],
        tol,
        "norm1",
    );
    assert_vec_close(
        &[v.norm(3.0)],
        &[a64.iter().map(|x| x.abs().powi(3)).sum::<f64>().cbrt()],
        tol,
        "norm3",
    );
    assert_vec_close(
        &[v.norm(f32::INFINITY)],
        &[a64.iter().fold(0.0, |m, x| m.max(x.abs()))],
        0.0,
        "norm inf",
    );
    assert_vec_close(
        &[v.max(), v.min()],
        &[
            a64.iter().cloned().fold(f64::MIN, f64::max),
            a64.iter().cloned().fold(f64::MAX, f64::min),
        ],
        0.0,
        "max/min",
    );
    assert_vec_close(
        &[v.dot(&b)],
        &[a64.iter().zip(&b64).map(|(x, y)| x * y).sum()],
        tol,
        "Vector::dot",
    );
    let m = rand_mat(n, 5, &mut g);
    let mut y = Vector::zeros(5);
    y.add_row_sum_mat(1.0, m.view(), 0.0);
    let want: Vec<f64> = (0..5)
        .map(|j| (0..n).map(|i| f64::from(m.get(i, j))).sum())
        .collect();
    assert_vec_close(&y.to_vec(), &want, tol, "add_row_sum_mat");
    let mut y = Vector::zeros(n);
    y.add_mat_vec(1.0, m.view(), Trans::No, &[1.0, 0.0, 0.0, 0.0, 2.0], 0.0);
    let want: Vec<f64> = (0..n)
        .map(|i| f64::from(m.get(i, 0)) + 2.0 * f64::from(m.get(i, 4)))
        .collect();
    assert_vec_close(&y.to_vec(), &want, tol, "add_mat_vec");
}

#[test]
fn approx_equal_and_split_rows() {
    let mut g = rng(130);
    let a = rand_mat(6, 5, &mut g);
    let mut b = a.clone();
    assert!(a.view().approx_equal(b.view(), 1e-6));
    b.set(2, 3, b.get(2, 3) + 1.0);
    assert!(!a.view().approx_equal(b.view(), 1e-3));
    let mut c = a.clone();
    let (mut top, mut bottom) = c.view_mut().split_rows_at(2);
    top.scale(2.0);
    bottom.set_zero();
    for i in 0..6 {
        for j in 0..5 {
            let want = if i < 2 { 2.0 * a.get(i, j) } else { 0.0 };
            assert_eq!(c.get(i, j), want);
        }
    }
}

/// The kernels components used to write by hand, each against a plain f64 reference.
mod component_kernels {
    use super::*;
    use compnet::matrix::{
        backprop_lstm_nonlinearity, LstmBackpropInput, LstmStatsSums, PoolingOptions,
        NORMALIZE_SQUARED_NORM_FLOOR,
    };

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// `f` applied to every element of `m`, in f64.
    fn map64(m: MatView<'_>, f: impl Fn(usize, usize, f64) -> f64) -> Vec<Vec<f64>> {
        (0..m.num_rows())
            .map(|i| {
                (0..m.num_cols())
                    .map(|j| f(i, j, f64::from(m.get(i, j))))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn in_place_nonlinearities_and_derivatives() {
        let (r, c) = (5, 19);
        let mut g = rng(71);
        let x = Embedded::new(r, c, &mut g);
        let d = Embedded::new(r, c, &mut g);
        let y = {
            let mut m = x.inner_orig();
            m.view_mut().scale(3.0);
            m
        };
        let (x64, y64, d64) = (to64(x.view()), to64(y.view()), to64(d.view()));
        type Op = fn(&mut MatViewMut<'_>, MatView<'_>);
        type Reference = fn(f64, f64, f64) -> f64;
        let cases: [(&str, Op, Reference); 9] = [
            ("apply_sigmoid", |m, _| m.apply_sigmoid(), |x, _, _| sig(x)),
            ("apply_tanh", |m, _| m.apply_tanh(), |x, _, _| x.tanh()),
            (
                "apply_sigmoid_deriv_from_output",
                |m, _| m.apply_sigmoid_deriv_from_output(),
                |x, _, _| x * (1.0 - x),
            ),
            (
                "apply_tanh_deriv_from_output",
                |m, _| m.apply_tanh_deriv_from_output(),
                |x, _, _| 1.0 - x * x,
            ),
            (
                "diff_sigmoid_in_place",
                |m, v| m.diff_sigmoid_in_place(v),
                |d, y, _| d * y * (1.0 - y),
            ),
            (
                "diff_tanh_in_place",
                |m, v| m.diff_tanh_in_place(v),
                |d, y, _| d * (1.0 - y * y),
            ),
            (
                "diff_relu_in_place",
                |m, v| m.diff_relu_in_place(v),
                |d, y, _| if y > 0.0 { d } else { 0.0 },
            ),
            (
                "apply_soft_threshold",
                |m, _| m.apply_soft_threshold(0.25),
                |x, _, _| x.signum() * (x.abs() - 0.25).max(0.0),
            ),
            (
                "mul_mat_div_mat",
                |m, v| {
                    let mut den = v.to_matrix();
                    den.view_mut().scale(2.0);
                    den.set(1, 2, 0.0);
                    m.mul_mat_div_mat(v, den.view())
                },
                |d, y, _| d * y / (2.0 * y),
            ),
        ];
        for (name, op, reference) in cases {
            let mut dst = Embedded::new(r, c, &mut g);
            dst.big.sub_mut(R0, r, C0, c).copy_from(d.view());
            let src = if name.starts_with("apply_") {
                x.view()
            } else {
                y.view()
            };
            let start = to64(src);
            if name.starts_with("apply_") {
                dst.big.sub_mut(R0, r, C0, c).copy_from(src);
            }
            op(&mut dst.view_mut(), y.view());
            let mut want: Vec<Vec<f64>> = (0..r)
                .map(|i| {
                    (0..c)
                        .map(|j| {
                            let first = if name.starts_with("apply_") {
                                start[i][j]
                            } else {
                                d64[i][j]
                            };
                            reference(first, y64[i][j], x64[i][j])
                        })
                        .collect()
                })
                .collect();
            if name == "mul_mat_div_mat" {
                want[1][2] = d64[1][2]; // a zero denominator leaves the element alone
            }
            assert_close(dst.view(), &want, 1e-5, name);
            dst.check_border();
        }
    }

    #[test]
    fn softmax_family_in_place() {
        let (r, c) = (4, 23);
        let mut g = rng(72);
        let mut x = rand_mat(r, c, &mut g);
        x.view_mut().scale(8.0);
        x.set(2, 3, -200.0); // far below the floor after the softmax
        let x64 = to64(x.view());
        let lse: Vec<f64> = x64
            .iter()
            .map(|row| {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
            })
            .collect();
        let mut sm = x.clone();
        sm.view_mut().apply_softmax_per_row_floored(1e-20);
        let want = map64(x.view(), |i, _, v| (v - lse[i]).exp().max(1e-20));
        assert_close(sm.view(), &want, 1e-5, "apply_softmax_per_row_floored");
        assert_eq!(sm.get(2, 3), 1e-20);
        let mut ls = x.clone();
        ls.view_mut().apply_log_softmax_per_row();
        let want = map64(x.view(), |i, _, v| v - lse[i]);
        assert_close(ls.view(), &want, 1e-5, "apply_log_softmax_per_row");

        let d = rand_mat(r, c, &mut g);
        let d64 = to64(d.view());
        let y64 = to64(sm.view());
        let mut got = d.clone();
        got.view_mut().diff_softmax_per_row_in_place(sm.view());
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                let dot: f64 = (0..c).map(|j| y64[i][j] * d64[i][j]).sum();
                (0..c).map(|j| y64[i][j] * (d64[i][j] - dot)).collect()
            })
            .collect();
        assert_close(got.view(), &want, 1e-5, "diff_softmax_per_row_in_place");
        let ly64 = to64(ls.view());
        let mut got = d.clone();
        got.view_mut().diff_log_softmax_per_row_in_place(ls.view());
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                let sum: f64 = d64[i].iter().sum();
                (0..c).map(|j| d64[i][j] - ly64[i][j].exp() * sum).collect()
            })
            .collect();
        assert_close(got.view(), &want, 1e-5, "diff_log_softmax_per_row_in_place");
    }

    #[test]
    fn self_repair_terms_norms_and_f64_steps() {
        let (r, c) = (6, 7);
        let mut g = rng(73);
        let a = rand_mat(r, c, &mut g);
        let v = rand_vec(c, &mut g);
        let mut d = Embedded::new(r, c, &mut g);
        let old = to64(d.inner_orig().view());
        d.view_mut()
            .add_affine_mat_diag_vec(&Vector::from_vec(v.clone()), -2.0, a.view(), 0.5);
        let want = map64(a.view(), |i, j, x| {
            old[i][j] + f64::from(v[j]) * (-2.0 * x + 0.5)
        });
        assert_close(d.view(), &want, 1e-5, "add_affine_mat_diag_vec");
        d.check_border();

        let a64 = to64(a.view());
        let sq: Vec<f64> = a64
            .iter()
            .map(|row| row.iter().map(|x| x * x).sum())
            .collect();
        assert_vec_close(
            &a.view().row_sum_squares().to_vec(),
            &sq,
            1e-5,
            "row_sum_squares",
        );
        let norms: Vec<f64> = sq.iter().map(|s| s.sqrt()).collect();
        assert_vec_close(&a.view().row_norms().to_vec(), &norms, 1e-5, "row_norms");
        let cols: Vec<f64> = (0..c)
            .map(|j| (0..r).map(|i| a64[i][j] * a64[i][j]).sum::<f64>().sqrt())
            .collect();
        assert_vec_close(&a.view().col_norms().to_vec(), &cols, 1e-5, "col_norms");

        let step: Vec<f64> = (0..r * c).map(|k| k as f64 * 0.125 - 3.0).collect();
        let mut p = Embedded::new(r, c, &mut g);
        let old = to64(p.inner_orig().view());
        p.view_mut()
            .add_row_major_f64(0.5, &Vector64::from_vec(step.clone()));
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| (0..c).map(|j| old[i][j] + 0.5 * step[i * c + j]).collect())
            .collect();
        assert_close(p.view(), &want, 1e-6, "add_row_major_f64");
        p.check_border();
    }

    #[test]
    fn per_block_ops() {
        let (r, bd, nb) = (5, 4, 3);
        let c = bd * nb;
        let mut g = rng(74);
        let (u, w) = (rand_vec(bd, &mut g), rand_vec(bd, &mut g));
        let (uv, wv) = (Vector::from_vec(u.clone()), Vector::from_vec(w.clone()));
        let a = rand_mat(r, c, &mut g);
        let a64 = to64(a.view());
        let (u64_, w64): (Vec<f64>, Vec<f64>) = (
            u.iter().map(|&x| f64::from(x)).collect(),
            w.iter().map(|&x| f64::from(x)).collect(),
        );
        type Op<'v> = Box<dyn Fn(&mut MatViewMut<'_>) + 'v>;
        type Reference<'v> = Box<dyn Fn(f64, usize, usize, usize) -> f64 + 'v>;
        let cases: Vec<(&str, Op, Reference)> = vec![
            (
                "add_vec_per_block",
                Box::new(|m| m.add_vec_per_block(&uv)),
                Box::new(|x, _, _, j| x + u64_[j]),
            ),
            (
                "mul_vec_per_block",
                Box::new(|m| m.mul_vec_per_block(&uv)),
                Box::new(|x, _, _, j| x * u64_[j]),
            ),
            (
                "mul_add_vec_per_block",
                Box::new(|m| m.mul_add_vec_per_block(&uv, &wv)),
                Box::new(|x, _, _, j| x * u64_[j] + w64[j]),
            ),
            (
                "sub_vec_mul_vec_per_block",
                Box::new(|m| m.sub_vec_mul_vec_per_block(&uv, &wv)),
                Box::new(|x, _, _, j| (x - u64_[j]) * w64[j]),
            ),
            (
                "add_vec_mul_vec_add_mat_vec_per_block",
                Box::new(|m| m.add_vec_mul_vec_add_mat_vec_per_block(&uv, &wv, a.view(), &uv)),
                Box::new(|x, i, k, j| (x + u64_[j]) * w64[j] + a64[i][k] * u64_[j]),
            ),
        ];
        for (name, op, reference) in cases {
            let mut m = Embedded::new(r, c, &mut g);
            let old = to64(m.inner_orig().view());
            op(&mut m.view_mut());
            let want: Vec<Vec<f64>> = (0..r)
                .map(|i| (0..c).map(|k| reference(old[i][k], i, k, k % bd)).collect())
                .collect();
            assert_close(m.view(), &want, 1e-5, name);
            m.check_border();
        }

        // Mask rows per data row, repeated over the blocks; unmapped rows untouched.
        let mask = rand_mat(2, bd, &mut g);
        let mut m = Embedded::new(r, c, &mut g);
        let old = to64(m.inner_orig().view());
        let row_map = [1usize, 0, 7, 1];
        m.view_mut().mul_blocks_by_mask_rows(mask.view(), &row_map);
        let want: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                (0..c)
                    .map(|k| match row_map.get(i) {
                        Some(&q) if q < 2 => old[i][k] * f64::from(mask.get(q, k % bd)),
                        _ => old[i][k],
                    })
                    .collect()
            })
            .collect();
        assert_close(m.view(), &want, 1e-6, "mul_blocks_by_mask_rows");
        m.check_border();

        let b = rand_mat(r, c, &mut g);
        let (s, sq) = a.view().block_col_sum_and_sum_squares(bd);
        let (s, sq) = (s.to_vec(), sq.to_vec());
        let (dot, bsum) = a.view().block_col_dot_and_sum(b.view(), bd);
        let (dot, bsum) = (dot.to_vec(), bsum.to_vec());
        let sum_over = |f: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
            (0..bd)
                .map(|j| {
                    (0..r)
                        .flat_map(|i| (0..nb).map(move |q| (i, q * bd + j)))
                        .map(|(i, k)| f(i, k))
                        .sum()
                })
                .collect()
        };
        assert_vec_close(&s, &sum_over(&|i, k| a64[i][k]), 1e-5, "block sums");
        assert_vec_close(
            &sq,
            &sum_over(&|i, k| a64[i][k] * a64[i][k]),
            1e-5,
            "block squares",
        );
        let b64 = to64(b.view());
        assert_vec_close(
            &dot,
            &sum_over(&|i, k| a64[i][k] * b64[i][k]),
            1e-5,
            "block dots",
        );
        assert_vec_close(&bsum, &sum_over(&|i, k| b64[i][k]), 1e-5, "block sums of b");
    }

    /// Forward of one normalised block in f64: (y, log rms term).
    fn normalize_block(x: &[f64], target: f64) -> (Vec<f64>, f64) {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / (x.len() as f64 * target * target);
        let f = ms.max(f64::from(NORMALIZE_SQUARED_NORM_FLOOR)).powf(-0.5);
        (x.iter().map(|v| v * f).collect(), -f.ln() + target.ln())
    }

    #[test]
    fn normalize_per_row_and_its_derivative() {
        let (r, bd, nb, t) = (4, 6, 2, 0.5f32);
        let mut g = rng(75);
        let mut x = rand_mat(r, bd * nb, &mut g);
        for j in 0..bd {
            x.set(3, j, 0.0); // an all-zero block sits at the floor
        }
        let x64 = to64(x.view());
        for add_log in [false, true] {
            let obd = bd + usize::from(add_log);
            let mut y = Matrix::zeros(r, obd * nb);
            y.view_mut().normalize_per_row(x.view(), bd, t, add_log);
            let want: Vec<Vec<f64>> = x64
                .iter()
                .map(|row| {
                    row.chunks(bd)
                        .flat_map(|b| {
                            let (mut v, l) = normalize_block(b, f64::from(t));
                            if add_log {
                                v.push(l);
                            }
                            v
                        })
                        .collect()
                })
                .collect();
            assert_close(y.view(), &want, 1e-5, "normalize_per_row");

            // The derivative against central differences of the f64 forward (off the floor).
            let od = rand_mat(r, obd * nb, &mut g);
            let mut dx = Embedded::new(r, bd * nb, &mut g);
            let old = to64(dx.inner_orig().view());
            dx.view_mut()
                .diff_normalize_per_row(x.view(), Some(od.view()), bd, t, add_log);
            let od64 = to64(od.view());
            let objective = |row: &[f64], i: usize| -> f64 {
                row.chunks(bd)
                    .enumerate()
                    .map(|(b, blk)| {
                        let (v, l) = normalize_block(blk, f64::from(t));
                        let o = &od64[i][b * obd..(b + 1) * obd];
                        let mut s: f64 = v.iter().zip(o).map(|(a, b)| a * b).sum();
                        if add_log {
                            s += l * o[bd];
                        }
                        s
                    })
                    .sum()
            };
            for i in 0..3 {
                for k in 0..bd * nb {
                    let mut p = x64[i].clone();
                    p[k] += 1e-6;
                    let mut m = x64[i].clone();
                    m[k] -= 1e-6;
                    let num = (objective(&p, i) - objective(&m, i)) / 2e-6;
                    let got = f64::from(dx.view().get(i, k)) - old[i][k];
                    assert!(
                        (got - num).abs() < 1e-3 * (1.0 + num.abs()),
                        "diff_normalize_per_row (add_log {add_log}) ({i}, {k}): {got} vs {num}"
                    );
                }
            }
            // At the floor the scale is constant: the derivative is od · f.
            let f = f64::from(NORMALIZE_SQUARED_NORM_FLOOR).powf(-0.5);
            for k in 0..bd {
                let got = f64::from(dx.view().get(3, k)) - old[3][k];
                let want = od64[3][k] * f;
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs(),
                    "floor: {got} vs {want}"
                );
            }
            dx.check_border();
        }
        // In place (no log column) equals out of place; the in-place derivative overwrites.
        let mut y = Matrix::zeros(r, bd * nb);
        y.view_mut().normalize_per_row(x.view(), bd, t, false);
        let mut z = x.clone();
        z.view_mut().apply_normalize_per_row(bd, t);
        assert_eq!(z, y);
        let od = rand_mat(r, bd * nb, &mut g);
        let mut want = Matrix::zeros(r, bd * nb);
        want.view_mut()
            .diff_normalize_per_row(x.view(), Some(od.view()), bd, t, false);
        let mut got = od.clone();
        got.view_mut()
            .diff_normalize_per_row(x.view(), None, bd, t, false);
        assert_eq!(got, want);
    }

    /// One LSTM frame in f64: the output [c_t, m_t].
    fn lstm_frame(x: &[f64], w: &[Vec<f64>], c: usize, dropout: bool) -> Vec<f64> {
        let (si, sf, so) = if dropout {
            (x[5 * c], x[5 * c + 1], x[5 * c + 2])
        } else {
            (1.0, 1.0, 1.0)
        };
        let mut out = vec![0.0; 2 * c];
        for j in 0..c {
            let cp = x[4 * c + j];
            let i = sig(x[j] + w[0][j] * cp);
            let f = sig(x[c + j] + w[1][j] * cp);
            let ct = f * sf * cp + i * si * x[2 * c + j].tanh();
            let o = sig(x[3 * c + j] + w[2][j] * ct);
            out[j] = ct;
            out[c + j] = o * so * ct.tanh();
        }
        out
    }

    #[test]
    fn lstm_nonlinearity_forward_backward_and_stats() {
        let (r, c) = (3, 4);
        let mut g = rng(76);
        let w = rand_mat(3, c, &mut g);
        let w64 = to64(w.view());
        for dropout in [false, true] {
            let cols = 5 * c + if dropout { 3 } else { 0 };
            let x = rand_mat(r, cols, &mut g);
            let x64 = to64(x.view());
            let mut y = Matrix::zeros(r, 2 * c);
            y.view_mut()
                .compute_lstm_nonlinearity(x.view(), w.view(), dropout);
            let want: Vec<Vec<f64>> = x64
                .iter()
                .map(|row| lstm_frame(row, &w64, c, dropout))
                .collect();
            assert_close(y.view(), &want, 1e-5, "compute_lstm_nonlinearity");

            let od = rand_mat(r, 2 * c, &mut g);
            let od64 = to64(od.view());
            let mut dx = Matrix::zeros(r, cols);
            let mut pd = Vector64::zeros(3 * c);
            let (mut vs, mut ds) = (Vector64::zeros(5 * c), Vector64::zeros(5 * c));
            let no_repair = Vector::zeros(5 * c);
            backprop_lstm_nonlinearity(
                LstmBackpropInput {
                    in_value: x.view(),
                    params: w.view(),
                    out_deriv: od.view(),
                    use_dropout: dropout,
                    self_repair: &no_repair,
                },
                Some(&mut dx.view_mut()),
                Some(&mut pd),
                Some(LstmStatsSums {
                    value_sum: &mut vs,
                    deriv_sum: &mut ds,
                }),
            );
            let (pd, vs, ds) = (pd.to_vec(), vs.to_vec(), ds.to_vec());
            let objective = |row: &[f64], w: &[Vec<f64>], i: usize| -> f64 {
                lstm_frame(row, w, c, dropout)
                    .iter()
                    .zip(&od64[i])
                    .map(|(a, b)| a * b)
                    .sum()
            };
            let h = 1e-6;
            for (i, row) in x64.iter().enumerate() {
                for k in 0..cols {
                    let (mut p, mut m) = (row.clone(), row.clone());
                    p[k] += h;
                    m[k] -= h;
                    let num = (objective(&p, &w64, i) - objective(&m, &w64, i)) / (2.0 * h);
                    let got = f64::from(dx.get(i, k));
                    assert!(
                        (got - num).abs() < 1e-4 * (1.0 + num.abs()),
                        "lstm input derivative ({i}, {k}), dropout {dropout}: {got} vs {num}"
                    );
                }
            }
            for q in 0..3 {
                for j in 0..c {
                    let (mut wp, mut wm) = (w64.clone(), w64.clone());
                    wp[q][j] += h;
                    wm[q][j] -= h;
                    let num: f64 = (0..r)
                        .map(|i| {
                            (objective(&x64[i], &wp, i) - objective(&x64[i], &wm, i)) / (2.0 * h)
                        })
                        .sum();
                    assert!(
                        (pd[q * c + j] - num).abs() < 1e-4 * (1.0 + num.abs()),
                        "lstm params derivative ({q}, {j}): {} vs {num}",
                        pd[q * c + j]
                    );
                }
            }
            // Value sums: i, f, tanh(c_part), o, tanh(c_t) over the frames.
            for j in 0..c {
                let mut want = [0.0f64; 5];
                for row in &x64 {
                    let cp = row[4 * c + j];
                    let i = sig(row[j] + w64[0][j] * cp);
                    let f = sig(row[c + j] + w64[1][j] * cp);
                    let ct = lstm_frame(row, &w64, c, dropout)[j];
                    let o = sig(row[3 * c + j] + w64[2][j] * ct);
                    for (k, v) in [i, f, row[2 * c + j].tanh(), o, ct.tanh()]
                        .iter()
                        .enumerate()
                    {
                        want[k] += v;
                    }
                }
                for k in 0..5 {
                    assert!((vs[k * c + j] - want[k]).abs() < 1e-5, "value sum {k}, {j}");
                }
                let d_i: f64 = x64
                    .iter()
                    .map(|row| {
                        let i = sig(row[j] + w64[0][j] * row[4 * c + j]);
                        i * (1.0 - i)
                    })
                    .sum();
                assert!((ds[j] - d_i).abs() < 1e-5, "derivative sum of i, {j}");
            }
            // Self-repair adds −(2σ − 1)·s to a sigmoid input's derivative and −2 tanh · s to
            // c_part's; each term alone, for unit 1 of gates i, f, c_part and o.
            for k in 0..4 {
                let mut repair = vec![0.0f32; 5 * c];
                repair[k * c + 1] = 0.5;
                let mut dx2 = Matrix::zeros(r, cols);
                backprop_lstm_nonlinearity(
                    LstmBackpropInput {
                        in_value: x.view(),
                        params: w.view(),
                        out_deriv: od.view(),
                        use_dropout: dropout,
                        self_repair: &Vector::from_vec(repair.clone()),
                    },
                    Some(&mut dx2.view_mut()),
                    None,
                    None,
                );
                for (i, row) in x64.iter().enumerate() {
                    let cp = row[4 * c + 1];
                    let want = match k {
                        0 => -(2.0 * sig(row[1] + w64[0][1] * cp) - 1.0) * 0.5,
                        1 => -(2.0 * sig(row[c + 1] + w64[1][1] * cp) - 1.0) * 0.5,
                        2 => -2.0 * row[2 * c + 1].tanh() * 0.5,
                        _ => {
                            let ct = lstm_frame(row, &w64, c, dropout)[1];
                            -(2.0 * sig(row[3 * c + 1] + w64[2][1] * ct) - 1.0) * 0.5
                        }
                    };
                    let col = k * c + 1;
                    let got = f64::from(dx2.get(i, col)) - f64::from(dx.get(i, col));
                    assert!(
                        (got - want).abs() < 1e-5,
                        "self-repair {k}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// Input rows [count, x…] as the extraction writes them, and their ranges.
    fn stats_input(g: &mut StdRng, rows: usize, d: usize) -> Matrix {
        let mut m = rand_mat(rows, d, g);
        for i in 0..rows {
            m.set(i, 0, 1.0 + (i % 3) as f32);
        }
        m
    }

    #[test]
    fn row_range_statistics() {
        let mut g = rng(77);
        let (n_in, d) = (9, 3);
        let x = rand_mat(n_in, d, &mut g);
        let x64 = to64(x.view());
        let ranges = [(0usize, 3usize), (2, 7), (7, 9)];
        for var in [false, true] {
            let oc = 1 + d + if var { d } else { 0 };
            let mut y = Embedded::new(3, oc, &mut g);
            let old = to64(y.inner_orig().view());
            y.view_mut().add_row_range_stats(x.view(), &ranges, var);
            let want: Vec<Vec<f64>> = ranges
                .iter()
                .enumerate()
                .map(|(o, &(s, e))| {
                    let mut w = vec![(e - s) as f64];
                    w.extend((0..d).map(|j| (s..e).map(|i| x64[i][j]).sum::<f64>()));
                    if var {
                        w.extend(
                            (0..d).map(|j| (s..e).map(|i| x64[i][j] * x64[i][j]).sum::<f64>()),
                        );
                    }
                    w.iter().zip(&old[o]).map(|(a, b)| a + b).collect()
                })
                .collect();
            assert_close(y.view(), &want, 1e-5, "add_row_range_stats");
            y.check_border();

            let disjoint = [(0usize, 3usize), (3, 7), (7, 9)];
            let od = rand_mat(3, oc, &mut g);
            let od64 = to64(od.view());
            let mut gx = Matrix::zeros(n_in, d);
            gx.view_mut()
                .backprop_row_range_stats(od.view(), &disjoint, var.then(|| x.view()));
            let want: Vec<Vec<f64>> = (0..n_in)
                .map(|i| {
                    let o = disjoint
                        .iter()
                        .position(|&(s, e)| (s..e).contains(&i))
                        .unwrap();
                    (0..d)
                        .map(|j| {
                            od64[o][1 + j]
                                + if var {
                                    2.0 * x64[i][j] * od64[o][1 + d + j]
                                } else {
                                    0.0
                                }
                        })
                        .collect()
                })
                .collect();
            assert_close(gx.view(), &want, 1e-5, "backprop_row_range_stats");
        }
    }

    /// Pooled output of input rows [s, e) in f64.
    fn pool64(x: &[Vec<f64>], s: usize, e: usize, o: PoolingOptions) -> Vec<f64> {
        let cols = x[0].len();
        let sum: Vec<f64> = (0..cols).map(|j| (s..e).map(|i| x[i][j]).sum()).collect();
        let n = sum[0];
        let mut stats: Vec<f64> = sum[1..].iter().map(|v| v / n).collect();
        if o.output_stddevs {
            let fd = stats.len() / 2;
            for j in 0..fd {
                let var = stats[fd + j] - stats[j] * stats[j];
                stats[fd + j] = var.max(f64::from(o.variance_floor)).sqrt();
            }
        }
        let mut out = vec![n.ln(); o.num_log_count_features];
        out.extend(stats);
        out
    }

    #[test]
    fn row_range_pooling_and_its_derivative() {
        let mut g = rng(78);
        let fd = 2;
        let x = stats_input(&mut g, 40, 1 + 2 * fd);
        // Second-moment columns must exceed the squared means for a real variance.
        let mut x = x;
        for i in 0..40 {
            for j in 0..fd {
                x.set(i, 1 + fd + j, 2.0 + x.get(i, 1 + j).abs());
            }
        }
        let x64 = to64(x.view());
        let short = vec![(0usize, 4usize), (3, 9), (9, 9), (20, 22)];
        // Windows over nearly everything take the f64 prefix-sum path.
        let long: Vec<(usize, usize)> = (0..40).map(|o| (0, 40 - o % 3)).collect();
        for stddev in [false, true] {
            for nl in [0usize, 1] {
                let opts = PoolingOptions {
                    num_log_count_features: nl,
                    output_stddevs: stddev,
                    variance_floor: 1e-10,
                };
                for ranges in [&short, &long] {
                    let mut y = Matrix::zeros(ranges.len(), nl + 2 * fd);
                    y.set(2, 0, 7.0); // an empty window gives a zero row
                    y.view_mut().pool_row_range_stats(x.view(), ranges, opts);
                    let want: Vec<Vec<f64>> = ranges
                        .iter()
                        .map(|&(s, e)| {
                            if s == e {
                                vec![0.0; nl + 2 * fd]
                            } else {
                                pool64(&x64, s, e, opts)
                            }
                        })
                        .collect();
                    assert_close(y.view(), &want, 1e-5, "pool_row_range_stats");
                }
                // Derivative against central differences (the count column held fixed).
                let ranges = [(0usize, 4usize), (4, 9)];
                let mut y = Matrix::zeros(2, nl + 2 * fd);
                y.view_mut().pool_row_range_stats(x.view(), &ranges, opts);
                let od = rand_mat(2, nl + 2 * fd, &mut g);
                let od64 = to64(od.view());
                let mut gx = Matrix::zeros(40, 1 + 2 * fd);
                gx.view_mut().backprop_pool_row_range_stats(
                    x.view(),
                    y.view(),
                    od.view(),
                    &ranges,
                    opts,
                );
                let objective = |x: &[Vec<f64>]| -> f64 {
                    ranges
                        .iter()
                        .enumerate()
                        .map(|(o, &(s, e))| {
                            pool64(x, s, e, opts)
                                .iter()
                                .zip(&od64[o])
                                .skip(nl)
                                .map(|(a, b)| a * b)
                                .sum::<f64>()
                        })
                        .sum()
                };
                for i in 0..9 {
                    for k in 1..1 + 2 * fd {
                        let (mut p, mut m) = (x64.clone(), x64.clone());
                        p[i][k] += 1e-6;
                        m[i][k] -= 1e-6;
                        let num = (objective(&p) - objective(&m)) / 2e-6;
                        let got = f64::from(gx.get(i, k));
                        assert!(
                            (got - num).abs() < 1e-3 * (1.0 + num.abs()),
                            "pooling derivative ({i}, {k}), stddev {stddev}, nl {nl}: {got} vs {num}"
                        );
                    }
                    assert_eq!(gx.get(i, 0), 0.0, "the count column gets no derivative");
                }
            }
        }
    }

    #[test]
    fn dropout_masks_are_seeded_and_well_formed() {
        let (r, c) = (40, 30);
        let draw = |seed: u64, f: &dyn Fn(&mut MatViewMut<'_>, &mut StdRng)| -> Matrix {
            let mut m = Matrix::from_vec(r, c, vec![5.0; r * c]);
            f(&mut m.view_mut(), &mut rng(seed));
            m
        };
        type Fill = fn(&mut MatViewMut<'_>, &mut StdRng);
        let fills: [(&str, Fill); 4] = [
            ("dropout", |m, g| m.apply_dropout_rand(g, 0.3)),
            ("mask", |m, g| m.set_rand_dropout_mask(g, 0.3, 2.0)),
            ("continuous", |m, g| {
                m.set_rand_continuous_dropout_mask(g, 0.3)
            }),
            ("regions", |m, g| m.set_rand_zeroed_regions_mask(g, 12, 3)),
        ];
        for (name, f) in fills {
            let a = draw(1, &f);
            assert_eq!(a, draw(1, &f), "{name}: the same seed gives the same mask");
            assert_ne!(a, draw(2, &f), "{name}: another seed gives another mask");
            let v = a.to_vec();
            let zeros = v.iter().filter(|&&x| x == 0.0).count() as f64 / v.len() as f64;
            match name {
                "dropout" | "mask" => {
                    let keep = if name == "dropout" { 5.0 } else { 2.0 };
                    assert!(v.iter().all(|&x| x == 0.0 || x == keep), "{name}: values");
                    assert!((zeros - 0.3).abs() < 0.06, "{name}: {zeros} dropped");
                }
                "continuous" => {
                    assert!(v.iter().all(|&x| (0.4..=1.6).contains(&x)), "{name}: range");
                    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
                    assert!((mean - 1.0).abs() < 0.03, "{name}: mean {mean}");
                }
                _ => {
                    for i in 0..r {
                        let row = a.row_to_vec(i);
                        assert!(row.iter().all(|&x| x == 0.0 || x == 1.0), "{name}: values");
                        let z = row.iter().filter(|&&x| x == 0.0).count();
                        assert!(z <= 12, "{name}: {z} zeroed in row {i}");
                    }
                    assert!(zeros > 0.0, "{name}: something is zeroed");
                }
            }
        }
    }

    #[test]
    fn single_row_ops_and_host_copies() {
        let (r, c) = (5, 6);
        let mut g = rng(79);
        let src = Embedded::new(4, c, &mut g);
        let s64 = to64(src.view());
        let mut d = Embedded::new(r, c, &mut g);
        let mut want = to64(d.inner_orig().view());
        let mut v = d.view_mut();
        v.copy_row_from(0, src.view(), 3);
        v.copy_row_scaled_from(1, -2.0, src.view(), 1);
        v.add_row_from(2, 0.5, src.view(), 0);
        v.zero_row(3);
        v.zero_rows(&[false, false, false, false, true]);
        want[0] = s64[3].clone();
        want[1] = s64[1].iter().map(|x| -2.0 * x).collect();
        want[2] = want[2]
            .iter()
            .zip(&s64[0])
            .map(|(a, b)| a + 0.5 * b)
            .collect();
        want[3] = vec![0.0; c];
        want[4] = vec![0.0; c];
        assert_close(d.view(), &want, 1e-6, "single-row ops");
        d.check_border();

        let mut m = rand_mat(3, c, &mut g);
        let row: Vec<f32> = (0..c).map(|j| j as f32).collect();
        m.copy_row_from_slice(1, &row);
        assert_eq!(m.row_to_vec(1), row);
        assert_eq!(m.view().row_to_vec(1), row);
        assert_eq!(m.to_vec()[c..2 * c], row[..]);

        let ranges = [(0i32, 3i32), (-1, -1), (2, 4), (1, 1), (0, 4)];
        let mut d = Embedded::new(r, c, &mut g);
        let old = to64(d.inner_orig().view());
        d.view_mut()
            .add_row_ranges_scaled(-0.5, src.view(), &ranges);
        let want: Vec<Vec<f64>> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| {
                (0..c)
                    .map(|j| {
                        old[i][j] - 0.5 * (a.max(0)..b).map(|k| s64[k as usize][j]).sum::<f64>()
                    })
                    .collect()
            })
            .collect();
        assert_close(d.view(), &want, 1e-6, "add_row_ranges_scaled");
        d.check_border();
    }

    #[test]
    fn group_2norm_and_its_derivative() {
        let (r, groups, gsize) = (4, 3, 5);
        let mut g = rng(80);
        let mut x = rand_mat(r, groups * gsize, &mut g);
        for k in 0..gsize {
            x.set(2, gsize + k, 0.0); // a zero group: the derivative is zero there
        }
        let x64 = to64(x.view());
        let mut y = Matrix::zeros(r, groups);
        y.view_mut().group_2norm_from(x.view());
        let want: Vec<Vec<f64>> = x64
            .iter()
            .map(|row| {
                row.chunks(gsize)
                    .map(|b| b.iter().map(|v| v * v).sum::<f64>().sqrt())
                    .collect()
            })
            .collect();
        assert_close(y.view(), &want, 1e-5, "group_2norm_from");
        let dy = rand_mat(r, groups, &mut g);
        let mut dx = Matrix::zeros(r, groups * gsize);
        dx.view_mut()
            .diff_group_2norm(x.view(), y.view(), dy.view());
        let dxw: Vec<Vec<f64>> = (0..r)
            .map(|i| {
                (0..groups * gsize)
                    .map(|k| {
                        let n = want[i][k / gsize];
                        if n == 0.0 {
                            0.0
                        } else {
                            x64[i][k] / n * f64::from(dy.get(i, k / gsize))
                        }
                    })
                    .collect()
            })
            .collect();
        assert_close(dx.view(), &dxw, 1e-5, "diff_group_2norm");
    }
}

/// Σ x² in f64 on a strided view (the natural-gradient code reads a non-finite result as
/// "some element is not finite", so that must hold too).
#[test]
fn sum_squares_f64_matches_a_reference_and_flags_non_finite() {
    let mut g = rng(41);
    for (r, c) in [(0, 5), (1, 1), (3, 7), (17, 33), (64, 1951)] {
        let mut e = Embedded::new(r, c, &mut g);
        let want: f64 = (0..r)
            .flat_map(|i| (0..c).map(move |j| (i, j)))
            .map(|(i, j)| f64::from(e.view().get(i, j)).powi(2))
            .sum();
        let got = e.view().sum_squares_f64();
        assert!(
            (got - want).abs() <= 1e-10 * want.max(1.0),
            "{r}x{c}: {got} vs {want}"
        );
        if r > 0 {
            e.view_mut().set(r - 1, c - 1, f32::INFINITY);
            assert!(!e.view().sum_squares_f64().is_finite());
            e.view_mut().set(0, 0, f32::NAN);
            assert!(e.view().sum_squares_f64().is_nan());
        }
    }
    let big = Matrix::from_vec(3, 3, vec![f32::MAX; 9]);
    assert!(big.view().sum_squares_f64().is_finite());
}

/// The row kernels that split their rows over threads (copy_rows, add_rows, the row
/// normalisation and its derivative, diff_log_softmax_per_row, the element-wise kernels,
/// sum_squares_f64), on strided views above the
/// parallel cut-off: one and two threads give the same bits, nothing outside the view
/// changes, and the gathers match the reference.
#[test]
fn row_parallel_kernels_do_not_depend_on_the_thread_count() {
    let (r, c) = (301, 520); // 156520 elements, above the cut-off
    let mut g = rng(97);
    let src = rand_mat(r + 10, c, &mut g);
    let x = rand_mat(r, c, &mut g);
    let od = rand_mat(r, c + 4, &mut g);
    let idx: Vec<i32> = (0..r)
        .map(|i| {
            if i % 11 == 3 {
                -1
            } else {
                ((i * 13) % (r + 10)) as i32
            }
        })
        .collect();
    let run = |threads: usize| -> Vec<Matrix> {
        set_num_threads(threads);
        let mut outs = Vec::new();
        let mut d = Embedded::new(r, c, &mut rng(5));
        d.view_mut().copy_rows(src.view(), &idx);
        d.check_border();
        outs.push(d.view().to_matrix());
        d.view_mut().add_rows(-0.5, src.view(), &idx);
        d.check_border();
        outs.push(d.view().to_matrix());
        for add_log in [false, true] {
            let (bd, obd) = (130, 130 + usize::from(add_log));
            let mut y = Embedded::new(r, 4 * obd, &mut rng(6));
            y.view_mut().normalize_per_row(x.view(), bd, 0.7, add_log);
            y.check_border();
            outs.push(y.view().to_matrix());
            let mut dx = Embedded::new(r, c, &mut rng(7));
            let odv = od.sub(0, r, 0, 4 * obd);
            dx.view_mut()
                .diff_normalize_per_row(x.view(), Some(odv), bd, 0.7, add_log);
            dx.check_border();
            outs.push(dx.view().to_matrix());
        }
        let mut dx = Embedded::new(r, c, &mut rng(8));
        let mut ls = x.clone();
        ls.view_mut().apply_log_softmax_per_row();
        dx.view_mut()
            .diff_log_softmax_per_row(ls.view(), od.sub(0, r, 0, c));
        dx.check_border();
        outs.push(dx.view().to_matrix());
        // An element-wise kernel (zip2_apply underneath) and the f64 sum of squares.
        let mut dr = Embedded::new(r, c, &mut rng(9));
        dr.view_mut().diff_relu(x.view(), od.sub(0, r, 0, c));
        dr.check_border();
        outs.push(dr.view().to_matrix());
        let ss = x.view().sum_squares_f64();
        outs.push(Matrix::from_vec(
            1,
            2,
            vec![ss as f32, (ss - ss as f32 as f64) as f32],
        ));
        set_num_threads(0);
        outs
    };
    let (one, two) = (run(1), run(2));
    for (k, (a, b)) in one.iter().zip(&two).enumerate() {
        assert_eq!(a.view().to_vec(), b.view().to_vec(), "kernel {k}");
    }
    let s64 = to64(src.view());
    let want: Vec<Vec<f64>> = idx
        .iter()
        .map(|&j| {
            if j < 0 {
                vec![0.0; c]
            } else {
                s64[j as usize].clone()
            }
        })
        .collect();
    assert_close(one[0].view(), &want, 0.0, "copy_rows");
}

/// A build with the `openblas` feature offers the OpenBLAS backend (and only such a build);
/// `COMPNET_GEMM=openblas` makes it the process's backend.
#[test]
fn openblas_backend_comes_with_its_feature() {
    let offered = GemmBackend::available().contains(&GemmBackend::OpenBlas);
    assert_eq!(offered, cfg!(feature = "openblas"));
    if offered && std::env::var("COMPNET_GEMM").is_ok_and(|v| v == "openblas") {
        assert_eq!(gemm_backend_name(), "openblas");
    }
}
