//! GEMM throughput on nnet3-typical shapes: the `gemm` crate, `matrixmultiply`, and compnet's
//! own `MatViewMut::add_mat_mat` (`compnet`: whatever backend it wraps, as chosen for this
//! CPU or by `COMPNET_GEMM=native|openblas|gemm-crate`), and `add_mat_mat_on` each backend
//! of this build by name (`compnet-native`, `compnet-openblas`, the latter with
//! `--features openblas`). Prints one line per (backend, shape, form) with the best GFLOP/s
//! of several timed runs.
//!
//! `weights` (in GEMM_BENCH_BACKENDS) is the forward product through `WeightMatrix`, with
//! the product layout of W it keeps for inference.
//!
//! Usage: `cargo bench --bench gemm -- [THREADS]` (default 1). `matrixmultiply` reads its
//! thread count once from `MATMUL_NUM_THREADS`, so this sets that variable from THREADS
//! before the first product; run the binary once per thread count (scripts/bench_gemm.sh).
//! With THREADS = 1 runs are timed by the thread's CPU time (set GEMM_BENCH_WALL=1 for
//! wall-clock time), with more threads by wall-clock time.
//! `GEMM_BENCH_SHAPES=train-tdnn,infer-16` limits the run to those shapes.
//! The companion C program scripts/openblas_gemm.c prints the same lines for OpenBLAS.

use compnet::matrix::{
    gemm_backend_name, set_num_threads, GemmBackend, MatView, MatViewMut, Matrix, Trans,
    WeightMatrix,
};
use std::time::Instant;

/// The shapes: (label, M = rows, K = input dim, N = output dim).
const SHAPES: &[(&str, usize, usize, usize)] = &[
    ("square", 1024, 1024, 1024),
    ("small", 256, 200, 512),
    ("mid", 512, 1536, 1536),
    ("big", 512, 1536, 3000),
    ("train-tdnn", 5632, 1950, 650),
    ("train-out", 2048, 650, 3000),
    // Chunked inference: a batch of a few chunks through a wide layer.
    ("infer-50", 50, 650, 3000),
    ("infer-16", 16, 1950, 650),
];

/// The three products of an affine layer, as (name, C shape, which operands are transposed).
/// fwd: Y[M×N] = X[M×K]·W[N×K]ᵀ; bwd-in: dX[M×K] = dY[M×N]·W[N×K];
/// bwd-w: dW[N×K] = dY[M×N]ᵀ·X[M×K].
#[derive(Clone, Copy)]
enum Form {
    Fwd,
    BwdIn,
    BwdW,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Fwd => "fwd",
            Form::BwdIn => "bwd-in",
            Form::BwdW => "bwd-w",
        }
    }
}

/// Operands of one product in row-major storage: op(A) is m×k, op(B) is k×n.
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<f32>,
    a_rows: usize,
    a_cols: usize,
    ta: Trans,
    b: Vec<f32>,
    b_rows: usize,
    b_cols: usize,
    tb: Trans,
    c: Vec<f32>,
}

fn fill(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn problem(form: Form, rows: usize, in_dim: usize, out_dim: usize) -> Problem {
    let (m, k, n) = (rows, in_dim, out_dim);
    let x = (rows, in_dim);
    let w = (out_dim, in_dim);
    let dy = (rows, out_dim);
    let (mm, kk, nn, a, ta, b, tb) = match form {
        Form::Fwd => (m, k, n, x, Trans::No, w, Trans::Yes),
        Form::BwdIn => (m, n, k, dy, Trans::No, w, Trans::No),
        Form::BwdW => (n, m, k, dy, Trans::Yes, x, Trans::No),
    };
    Problem {
        m: mm,
        n: nn,
        k: kk,
        a: fill(a.0 * a.1, 1),
        a_rows: a.0,
        a_cols: a.1,
        ta,
        b: fill(b.0 * b.1, 2),
        b_rows: b.0,
        b_cols: b.1,
        tb,
        c: vec![0.0; mm * nn],
    }
}

/// Row and column strides of a row-major r×c matrix read as op(·).
fn strides(cols: usize, t: Trans) -> (isize, isize) {
    match t {
        Trans::No => (cols as isize, 1),
        Trans::Yes => (1, cols as isize),
    }
}

fn run_gemm_crate(p: &mut Problem, threads: usize) {
    let (ars, acs) = strides(p.a_cols, p.ta);
    let (brs, bcs) = strides(p.b_cols, p.tb);
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the pointers and strides describe the live, correctly sized buffers of `p`.
    unsafe {
        gemm::gemm(
            p.m,
            p.n,
            p.k,
            p.c.as_mut_ptr(),
            1,
            p.n as isize,
            false,
            p.a.as_ptr(),
            acs,
            ars,
            p.b.as_ptr(),
            bcs,
            brs,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    }
}

fn run_matrixmultiply(p: &mut Problem) {
    let (ars, acs) = strides(p.a_cols, p.ta);
    let (brs, bcs) = strides(p.b_cols, p.tb);
    // SAFETY: as above.
    unsafe {
        matrixmultiply::sgemm(
            p.m,
            p.k,
            p.n,
            1.0,
            p.a.as_ptr(),
            ars,
            acs,
            p.b.as_ptr(),
            brs,
            bcs,
            0.0,
            p.c.as_mut_ptr(),
            p.n as isize,
            1,
        );
    }
}

/// The forward product through `WeightMatrix` (its product layout of W built beforehand).
fn run_weights(p: &mut Problem, w: &WeightMatrix) {
    let x = MatView::from_slice(&p.a, p.a_rows, p.a_cols);
    let mut y = MatViewMut::from_slice(&mut p.c, p.m, p.n);
    w.forward(1.0, x, &mut y, 0.0);
}

fn run_compnet(p: &mut Problem) {
    let a = MatView::from_slice(&p.a, p.a_rows, p.a_cols);
    let b = MatView::from_slice(&p.b, p.b_rows, p.b_cols);
    let mut c = MatViewMut::from_slice(&mut p.c, p.m, p.n);
    c.add_mat_mat(1.0, a, p.ta, b, p.tb, 0.0);
}

/// `add_mat_mat_on` a named backend.
fn run_compnet_on(p: &mut Problem, backend: GemmBackend) {
    let a = MatView::from_slice(&p.a, p.a_rows, p.a_cols);
    let b = MatView::from_slice(&p.b, p.b_rows, p.b_cols);
    let mut c = MatViewMut::from_slice(&mut p.c, p.m, p.n);
    c.add_mat_mat_on(backend, 1.0, a, p.ta, b, p.tb, 0.0);
}

/// The backend a `compnet-NAME` bench entry names, when this build and CPU have it.
fn named_backend(be: &str) -> Option<GemmBackend> {
    let backend = match be {
        "compnet-native" => GemmBackend::NativeAvx2,
        "compnet-openblas" => GemmBackend::OpenBlas,
        "compnet-gemm-crate" => GemmBackend::GemmCrate,
        _ => return None,
    };
    backend.is_available().then_some(backend)
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
}

/// CPU seconds used by the calling thread (Linux CLOCK_THREAD_CPUTIME_ID). On a shared,
/// loaded machine this leaves out the time the thread waited for a core.
fn thread_cpu_seconds() -> f64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec (two 64-bit fields on x86-64 Linux).
    unsafe { clock_gettime(3, &mut t) };
    t.sec as f64 + 1e-9 * t.nsec as f64
}

/// Which clock times a run.
#[derive(Clone, Copy)]
enum Clock {
    Wall,
    ThreadCpu,
}

fn now(clock: Clock, wall0: Instant) -> f64 {
    match clock {
        Clock::Wall => wall0.elapsed().as_secs_f64(),
        Clock::ThreadCpu => thread_cpu_seconds(),
    }
}

/// Best GFLOP/s over `trials` runs of ≥ `min_s` seconds each.
fn measure(
    p: &mut Problem,
    trials: usize,
    min_s: f64,
    clock: Clock,
    f: &mut dyn FnMut(&mut Problem),
) -> f64 {
    f(p); // warm-up: packing buffers, thread pool start
    let flops = 2.0 * (p.m * p.n * p.k) as f64;
    let wall0 = Instant::now();
    let mut best = f64::MAX;
    for _ in 0..trials {
        let t0 = now(clock, wall0);
        let mut reps = 0u32;
        while reps == 0 || now(clock, wall0) - t0 < min_s {
            f(p);
            reps += 1;
        }
        best = best.min((now(clock, wall0) - t0) / f64::from(reps));
    }
    flops / best / 1e9
}

fn main() {
    // `cargo bench` passes `--bench`; take the first numeric argument as the thread count.
    let threads: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1)
        .max(1);
    let trials: usize = std::env::var("GEMM_BENCH_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    std::env::set_var("MATMUL_NUM_THREADS", threads.to_string());
    set_num_threads(threads);
    let backends: Vec<String> = std::env::var("GEMM_BENCH_BACKENDS")
        .unwrap_or_else(|_| {
            "gemm,matrixmultiply,compnet,weights,compnet-native,compnet-openblas".into()
        })
        .split(',')
        .map(str::to_string)
        .collect();
    // One thread: CPU time of the calling thread (robust on a loaded machine); more threads:
    // wall-clock time (CPU time would hide poor scaling).
    let clock = if threads == 1 && std::env::var_os("GEMM_BENCH_WALL").is_none() {
        Clock::ThreadCpu
    } else {
        Clock::Wall
    };
    println!(
        "# backend threads shape MxKxN form GFLOP/s (compnet = add_mat_mat on {})",
        gemm_backend_name()
    );
    // GEMM_BENCH_SHAPES=label,label... measures only those shapes.
    let only: Option<Vec<String>> = std::env::var("GEMM_BENCH_SHAPES")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    for &(label, rows, in_dim, out_dim) in SHAPES {
        if only.as_ref().is_some_and(|o| !o.iter().any(|l| l == label)) {
            continue;
        }
        for form in [Form::Fwd, Form::BwdIn, Form::BwdW] {
            let mut p = problem(form, rows, in_dim, out_dim);
            for be in &backends {
                let g = match be.as_str() {
                    "gemm" => measure(&mut p, trials, 0.2, clock, &mut |p| {
                        run_gemm_crate(p, threads)
                    }),
                    "matrixmultiply" => {
                        measure(&mut p, trials, 0.2, clock, &mut run_matrixmultiply)
                    }
                    "compnet" => measure(&mut p, trials, 0.2, clock, &mut run_compnet),
                    name if named_backend(name).is_some() => {
                        let backend = named_backend(name).expect("checked");
                        measure(&mut p, trials, 0.2, clock, &mut |p| {
                            run_compnet_on(p, backend)
                        })
                    }
                    "weights" if matches!(form, Form::Fwd) => {
                        let w = Matrix::from_vec(p.b_rows, p.b_cols, p.b.clone());
                        let w = WeightMatrix::new(w);
                        run_weights(&mut p, &w); // the second product builds the layout
                        measure(&mut p, trials, 0.2, clock, &mut |p| run_weights(p, &w))
                    }
                    _ => continue,
                };
                println!(
                    "{be} {threads} {label} {rows}x{in_dim}x{out_dim} {} {g:.1}",
                    form.name()
                );
            }
        }
    }
}
