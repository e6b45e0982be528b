//! The online natural-gradient preconditioner (`gradient::natural_gradient`) against a
//! straightforward dense reference, plus the invariants any preconditioner of this kind has.
//!
//! The reference builds the same estimate F = Rᵀ·diag(d)·R + ρ·I as full D×D matrices in f64:
//! it forms F, the smoothed G = F + α/D·tr(F)·I and the target T = η·XᵀX/N + (1−η)·F
//! explicitly, takes traces of those matrices, and applies G⁻¹ by Gaussian elimination. It
//! shares no code with the implementation (which never forms a D×D matrix and uses the
//! closed-form inverse and traces) except the eigensolver, tested on its own in src/matrix.

use compnet::gradient::natural_gradient::OnlineNaturalGradient;
use compnet::matrix::{symmetric_eigen, Matrix};
use rand::{Rng, SeedableRng};

const EPSILON: f64 = 1e-10;
const DELTA: f64 = 5e-4;

/// Row-major dense f64 matrix helpers.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for l in 0..k {
            let x = a[i * k + l];
            for j in 0..n {
                c[i * n + j] += x * b[l * n + j];
            }
        }
    }
    c
}

fn transpose(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut t = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            t[j * m + i] = a[i * n + j];
        }
    }
    t
}

/// Solves G·V = B for V (G: n×n, B: n×m), Gaussian elimination with partial pivoting.
fn solve(g: &[f64], b: &[f64], n: usize, m: usize) -> Vec<f64> {
    let (mut g, mut b) = (g.to_vec(), b.to_vec());
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&x, &y| g[x * n + col].abs().total_cmp(&g[y * n + col].abs()))
            .unwrap();
        for j in 0..n {
            g.swap(col * n + j, piv * n + j);
        }
        for j in 0..m {
            b.swap(col * m + j, piv * m + j);
        }
        for row in col + 1..n {
            let f = g[row * n + col] / g[col * n + col];
            for j in col..n {
                g[row * n + j] -= f * g[col * n + j];
            }
            for j in 0..m {
                b[row * m + j] -= f * b[col * m + j];
            }
        }
    }
    let mut v = vec![0.0; n * m];
    for row in (0..n).rev() {
        for j in 0..m {
            let s: f64 = (row + 1..n).map(|l| g[row * n + l] * v[l * m + j]).sum();
            v[row * m + j] = (b[row * m + j] - s) / g[row * n + row];
        }
    }
    v
}

struct DenseReference {
    rank: usize,
    update_period: usize,
    num_samples_history: f64,
    alpha: f64,
    calls: usize,
    /// (R rank×D, d, ρ)
    state: Option<(Vec<f64>, Vec<f64>, f64)>,
}

impl DenseReference {
    fn new(rank: usize, update_period: usize, num_samples_history: f64, alpha: f64) -> Self {
        DenseReference {
            rank,
            update_period,
            num_samples_history,
            alpha,
            calls: 0,
            state: None,
        }
    }

    fn eta(&self, n: usize) -> f64 {
        (1.0 - (-(n as f64) / self.num_samples_history).exp()).min(0.9)
    }

    /// Full D×D F = Rᵀ·diag(d)·R + ρ·I.
    fn fisher(r: &[f64], d: &[f64], rho: f64, rank: usize, dim: usize) -> Vec<f64> {
        let mut dr = r.to_vec();
        for i in 0..rank {
            for j in 0..dim {
                dr[i * dim + j] *= d[i];
            }
        }
        let mut f = matmul(&transpose(r, rank, dim), &dr, dim, rank, dim);
        for i in 0..dim {
            f[i * dim + i] += rho;
        }
        f
    }

    fn update(&mut self, x: &[f64], n: usize, dim: usize) {
        let rank = self.rank;
        let eta = self.eta(n);
        let (r, d, rho) = self.state.clone().unwrap();
        let f = Self::fisher(&r, &d, rho, rank, dim);
        let s = matmul(&transpose(x, n, dim), x, dim, n, dim);
        let t: Vec<f64> = s
            .iter()
            .zip(&f)
            .map(|(s, f)| eta * s / n as f64 + (1.0 - eta) * f)
            .collect();
        let trace_t: f64 = (0..dim).map(|i| t[i * dim + i]).sum();
        let y = matmul(&r, &t, rank, dim, dim);
        let z = matmul(&y, &transpose(&y, rank, dim), rank, dim, rank);
        let eig = symmetric_eigen(&z, rank);
        let c_floor = ((1.0 - eta) * rho).powi(2);
        let sqrt_c: Vec<f64> = eig.values.iter().map(|c| c.max(c_floor).sqrt()).collect();
        let new_rho = ((trace_t - sqrt_c.iter().sum::<f64>()) / (dim - rank) as f64).max(EPSILON);
        let d_floor = EPSILON.max(DELTA * sqrt_c.iter().cloned().fold(0.0, f64::max));
        let new_d: Vec<f64> = sqrt_c.iter().map(|s| (s - new_rho).max(d_floor)).collect();
        // R' = C^-½·Uᵀ·Y.
        let mut coeffs = transpose(&eig.vectors, rank, rank);
        for k in 0..rank {
            for j in 0..rank {
                coeffs[k * rank + j] /= eig.values[k].sqrt();
            }
        }
        let new_r = matmul(&coeffs, &y, rank, rank, dim);
        self.state = Some((new_r, new_d, new_rho));
    }

    fn precondition(&mut self, x: &[f64], n: usize, dim: usize) -> (Vec<f64>, f64) {
        let rank = self.rank;
        if self.state.is_none() {
            let mut r = vec![0.0; rank * dim];
            for i in 0..rank {
                let cols: Vec<usize> = (i..dim).step_by(rank).collect();
                let norm = (1.21 + (cols.len() - 1) as f64).sqrt();
                for &j in &cols {
                    r[i * dim + j] = if j == i { 1.1 } else { 1.0 } / norm;
                }
            }
            self.state = Some((r, vec![EPSILON; rank], EPSILON));
            for _ in 0..if n <= rank { 1 } else { 3 } {
                self.update(x, n, dim);
            }
        }
        let (r, d, rho) = self.state.clone().unwrap();
        let mut g = Self::fisher(&r, &d, rho, rank, dim);
        let trace_f: f64 = (0..dim).map(|i| g[i * dim + i]).sum();
        let smooth = self.alpha / dim as f64 * trace_f;
        for i in 0..dim {
            g[i * dim + i] += smooth;
        }
        let beta = rho + smooth;
        let v = solve(&g, &transpose(x, n, dim), dim, n);
        let x_hat: Vec<f64> = transpose(&v, dim, n).iter().map(|v| beta * v).collect();
        let gamma = (x.iter().map(|v| v * v).sum::<f64>()
            / x_hat.iter().map(|v| v * v).sum::<f64>())
        .sqrt();
        if self.calls <= 10 || (self.calls - 10).is_multiple_of(self.update_period) {
            self.update(x, n, dim);
        }
        self.calls += 1;
        (x_hat, gamma)
    }
}

/// Rows z·M with a fixed mixing M whose column scales decay, so the scatter has structure.
struct Source {
    mix: Vec<f64>,
    dim: usize,
    rng: rand::rngs::StdRng,
}

impl Source {
    fn new(dim: usize, seed: u64) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut mix = vec![0.0; dim * dim];
        for i in 0..dim {
            let scale = 3.0 / (1.0 + i as f64);
            for j in 0..dim {
                mix[i * dim + j] = scale * rng.random_range(-1.0..1.0);
            }
        }
        Source { mix, dim, rng }
    }

    fn minibatch(&mut self, n: usize) -> Matrix {
        let z: Vec<f64> = (0..n * self.dim)
            .map(|_| self.rng.random_range(-1.0..1.0))
            .collect();
        let x = matmul(&z, &self.mix, n, self.dim, self.dim);
        Matrix::from_vec(n, self.dim, x.iter().map(|&v| v as f32).collect())
    }
}

fn to_f64(m: &Matrix) -> Vec<f64> {
    m.to_vec().iter().map(|&v| v as f64).collect()
}

fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| y * y).sum();
    (diff / norm).sqrt()
}

/// Runs both on the same minibatches; returns the largest relative disagreement seen.
fn compare(dim: usize, rank: usize, period: usize, history: f32, alpha: f32, seed: u64) -> f64 {
    let mut ours = OnlineNaturalGradient::new(rank, period, history, alpha);
    let mut reference = DenseReference::new(rank, period, history as f64, alpha as f64);
    let mut source = Source::new(dim, seed);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed + 1000);
    let mut worst = 0.0f64;
    for step in 0..40 {
        let n = rng.random_range(rank + 1..=3 * dim);
        let mut x = source.minibatch(n);
        let x64 = to_f64(&x);
        let gamma = ours.precondition_directions(x.view_mut()) as f64;
        let (want, want_gamma) = reference.precondition(&x64, n, dim);
        let dir = rel_diff(&to_f64(&x), &want);
        let scale = (gamma - want_gamma).abs() / want_gamma;
        assert!(
            dir <= 1e-4 && scale <= 1e-4,
            "D={dim} R={rank} period={period} history={history} alpha={alpha} step {step}: \
             direction differs by {dir:e}, γ {gamma} vs {want_gamma}"
        );
        worst = worst.max(dir).max(scale);
    }
    worst
}

#[test]
fn agrees_with_dense_reference() {
    // (D, rank, update period, samples of history, alpha): small histories make η large so
    // the estimate moves a lot; periods > 1 exercise the skipped updates after call 10.
    let cases = [
        (6, 2, 1, 20.0, 4.0),
        (8, 3, 3, 50.0, 4.0),
        (12, 4, 4, 2000.0, 4.0),
        (10, 4, 2, 30.0, 0.5),
        (9, 2, 5, 15.0, 1.0),
        (12, 3, 1, 100.0, 4.0),
    ];
    for (i, &(dim, rank, period, history, alpha)) in cases.iter().enumerate() {
        let worst = compare(dim, rank, period, history, alpha, 7 + i as u64);
        eprintln!("D={dim} R={rank} period={period}: worst relative difference {worst:e}");
    }
}

#[test]
fn the_preconditioner_changes_the_direction() {
    // Guards the comparison above against passing trivially: the output is not a multiple of
    // the input, and differs between update periods once the estimate has moved.
    let mut ng = OnlineNaturalGradient::new(3, 1, 20.0, 4.0);
    let mut source = Source::new(8, 3);
    for _ in 0..5 {
        let x = source.minibatch(16);
        let mut y = x.clone();
        let gamma = ng.precondition_directions(y.view_mut()) as f64;
        let scaled: Vec<f64> = to_f64(&y).iter().map(|v| v * gamma).collect();
        assert!(
            rel_diff(&scaled, &to_f64(&x)) > 0.05,
            "output is nearly the input"
        );
    }
}

#[test]
fn norm_times_gamma_is_the_input_norm_and_direction_is_a_descent_direction() {
    for (dim, rank, n) in [(7, 3, 12), (20, 5, 4), (30, 10, 64)] {
        let mut ng = OnlineNaturalGradient::new(rank, 2, 100.0, 4.0);
        let mut source = Source::new(dim, dim as u64);
        for _ in 0..25 {
            let x = source.minibatch(n);
            let mut y = x.clone();
            let gamma = ng.precondition_directions(y.view_mut()) as f64;
            let (xv, yv) = (to_f64(&x), to_f64(&y));
            let norm_x = xv.iter().map(|v| v * v).sum::<f64>().sqrt();
            let norm_y = yv.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!(
                (norm_y * gamma - norm_x).abs() <= 1e-5 * norm_x,
                "{norm_y}·{gamma} vs {norm_x}"
            );
            // Every row keeps a positive inner product with its input (I − Rᵀ·E·R ≻ 0).
            for r in 0..n {
                let dot: f64 = (0..dim).map(|j| xv[r * dim + j] * yv[r * dim + j]).sum();
                assert!(dot > 0.0, "row {r}: inner product {dot}");
            }
        }
    }
}

#[test]
fn large_alpha_tends_to_the_identity() {
    let mut ng = OnlineNaturalGradient::new(4, 1, 50.0, 1e7);
    let mut source = Source::new(10, 11);
    for _ in 0..15 {
        let x = source.minibatch(20);
        let mut y = x.clone();
        let gamma = ng.precondition_directions(y.view_mut());
        assert!(rel_diff(&to_f64(&y), &to_f64(&x)) < 1e-5);
        assert!((gamma - 1.0).abs() < 1e-5, "γ = {gamma}");
    }
}

#[test]
fn non_finite_input_is_left_alone_and_does_not_touch_the_estimate() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut with_bad = OnlineNaturalGradient::new(3, 1, 30.0, 4.0);
        let mut without = OnlineNaturalGradient::new(3, 1, 30.0, 4.0);
        let mut source = Source::new(8, 5);
        for step in 0..12 {
            if step == 4 || step == 0 {
                let mut x = source.minibatch(10);
                x.set(3, 2, bad);
                let before = x.clone();
                let gamma = with_bad.precondition_directions(x.view_mut());
                assert_eq!(gamma, 1.0);
                let same = x
                    .to_vec()
                    .iter()
                    .zip(before.to_vec())
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "x was modified");
            }
            let x = source.minibatch(10);
            let (mut a, mut b) = (x.clone(), x);
            let ga = with_bad.precondition_directions(a.view_mut());
            let gb = without.precondition_directions(b.view_mut());
            assert_eq!(ga, gb, "step {step}");
            assert_eq!(a, b, "step {step}");
        }
    }
}

#[test]
fn frozen_calls_use_but_do_not_change_the_estimate() {
    let mut frozen_twice = OnlineNaturalGradient::new(3, 1, 30.0, 4.0);
    let mut plain = OnlineNaturalGradient::new(3, 1, 30.0, 4.0);
    let mut source = Source::new(9, 8);
    let first = source.minibatch(12);
    frozen_twice.precondition_directions(first.clone().view_mut());
    plain.precondition_directions(first.clone().view_mut());
    frozen_twice.freeze(true);
    let mut probe = source.minibatch(12);
    let gamma_frozen = frozen_twice.precondition_directions(probe.view_mut());
    let mut probe_again = source.minibatch(12);
    frozen_twice.precondition_directions(probe_again.view_mut());
    frozen_twice.freeze(false);
    assert!(gamma_frozen.is_finite() && gamma_frozen > 0.0);
    let x = source.minibatch(12);
    let (mut a, mut b) = (x.clone(), x);
    assert_eq!(
        frozen_twice.precondition_directions(a.view_mut()),
        plain.precondition_directions(b.view_mut())
    );
    assert_eq!(a, b);
}

#[test]
fn small_minibatches_and_tiny_dimensions() {
    // N < rank at initialisation: directions X₀ cannot determine get orthonormal fill-ins.
    let mut ng = OnlineNaturalGradient::new(8, 1, 200.0, 4.0);
    let mut source = Source::new(16, 21);
    for n in [2, 1, 3, 40, 5] {
        let x = source.minibatch(n);
        let mut y = x.clone();
        let gamma = ng.precondition_directions(y.view_mut());
        assert!(gamma.is_finite() && gamma >= 1.0 - 1e-5, "γ = {gamma}");
        assert!(y.view().is_finite());
        let dot: f64 = to_f64(&x).iter().zip(to_f64(&y)).map(|(a, b)| a * b).sum();
        assert!(dot > 0.0);
    }
    // D = 1 leaves no room for ρ: identity.
    let mut ng = OnlineNaturalGradient::new(4, 1, 200.0, 4.0);
    let mut x = Matrix::from_vec(3, 1, vec![1.0, -2.0, 0.5]);
    assert_eq!(ng.precondition_directions(x.view_mut()), 1.0);
    assert_eq!(x.to_vec(), vec![1.0, -2.0, 0.5]);
    // Zero rows and all-zero input.
    let mut ng = OnlineNaturalGradient::new(2, 1, 200.0, 4.0);
    assert_eq!(
        ng.precondition_directions(Matrix::zeros(0, 5).view_mut()),
        1.0
    );
    let mut z = Matrix::zeros(4, 5);
    assert_eq!(ng.precondition_directions(z.view_mut()), 1.0);
    assert_eq!(z, Matrix::zeros(4, 5));
}

/// With more than one thread allowed the estimate's update runs on a thread of its own and
/// is joined by the next call; with one it runs in line. Both give the same bits, and a
/// snapshot taken while an update runs waits for it.
#[test]
fn the_update_beside_the_step_gives_the_same_bits_as_in_line() {
    let run = |threads: usize| {
        compnet::matrix::set_num_threads(threads);
        let mut ng = OnlineNaturalGradient::new(6, 2, 200.0, 4.0);
        let mut source = Source::new(40, 7);
        let mut outputs = Vec::new();
        for step in 0..20 {
            let mut x = source.minibatch(30 + step);
            let gamma = ng.precondition_directions(x.view_mut());
            outputs.push((x.to_vec(), gamma));
        }
        (outputs, ng.snapshot())
    };
    let inline = run(1);
    let beside = run(2);
    compnet::matrix::set_num_threads(0);
    assert_eq!(inline.0.len(), beside.0.len());
    for (step, (a, b)) in inline.0.iter().zip(&beside.0).enumerate() {
        assert!(
            a.0.iter()
                .zip(&b.0)
                .all(|(x, y)| x.to_bits() == y.to_bits())
                && a.1 == b.1,
            "step {step} differs"
        );
    }
    assert_eq!(inline.1, beside.1, "the final estimates differ");
}
