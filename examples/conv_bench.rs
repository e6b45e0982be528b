//! Speed of TimeHeightConvolutionComponent's propagate against the sgemm peak, measured in
//! the same run (docs/PERFORMANCE.md, "Convolution").
//!
//! The layers are those of tests/data/kaldi/perf/mini_librispeech_cnn_tdnn_1a.config with the
//! row counts one 50-frame chunk of `compnet compute` gives each of them (the TDNN-F layers
//! above need 24 frames of context on each side; each conv layer needs one more). The peak is
//! a 1024×1024×1024 product through the same GEMM. Best of several timed repetitions
//! (wall clock), so a busy machine shows less in the figures than in the mean.
//!
//! Usage: cargo run --release --example conv_bench -- [THREADS]

use compnet::matrix::{set_num_threads, Matrix, Trans};
use compnet::nnet::component::{new_component_from_config, Propagate};
use compnet::nnet::config_line::ConfigLine;
use std::time::Instant;

/// (filters in, filters out, height in, height out, subsampling, output rows per chunk).
const LAYERS: &[(usize, usize, usize, usize, usize, usize)] = &[
    (1, 48, 40, 40, 1, 108),
    (48, 48, 40, 40, 1, 106),
    (48, 64, 40, 20, 2, 104),
    (64, 64, 20, 20, 1, 102),
    (64, 128, 20, 10, 2, 100),
    (128, 128, 10, 10, 1, 98),
];

/// Best seconds per call of `f` over `trials` timed runs of at least 0.2 s each.
fn best_time(trials: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::MAX;
    for _ in 0..trials {
        let t0 = Instant::now();
        let mut reps = 0u32;
        while reps == 0 || t0.elapsed().as_secs_f64() < 0.2 {
            f();
            reps += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() / f64::from(reps));
    }
    best
}

fn filled(rows: usize, cols: usize) -> Matrix {
    let v = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Matrix::from_vec(rows, cols, v)
}

fn main() {
    let threads: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1)
        .max(1);
    set_num_threads(threads);
    let trials = 7;
    let n = 1024;
    let (a, b) = (filled(n, n), filled(n, n));
    let mut c = Matrix::zeros(n, n);
    let t = best_time(trials, || {
        c.view_mut()
            .add_mat_mat(1.0, a.view(), Trans::No, b.view(), Trans::No, 0.0)
    });
    let peak = 2.0 * (n * n * n) as f64 / t / 1e9;
    println!("threads {threads}: sgemm 1024^3 peak {peak:.1} GFLOP/s");
    println!("layer  rows  M x K x N (unfolded GEMM)   ms/chunk  GFLOP/s  % of peak");
    let (mut total_flops, mut total_t) = (0.0, 0.0);
    for (i, &(fin, fout, hin, hout, s, rows)) in LAYERS.iter().enumerate() {
        let cfg = format!(
            "type=TimeHeightConvolutionComponent num-filters-in={fin} num-filters-out={fout} \
             height-in={hin} height-out={hout} height-subsample-out={s} \
             height-offsets=-1,0,1 time-offsets=-1,0,1"
        );
        let comp = new_component_from_config(
            &ConfigLine::parse_str(&cfg).expect("config"),
            &mut compnet::random::seeded_rng(i as u64),
        )
        .expect("component");
        // Without precomputed indexes the input is one sequence starting one frame early.
        let x = filled(rows + 2, hin * fin);
        let mut y = Matrix::zeros(rows, hout * fout);
        let mut rng = compnet::random::seeded_rng(0);
        let t = best_time(trials, || {
            comp.propagate(Propagate::new(x.view(), y.view_mut(), &mut rng));
        });
        let k = 9 * fin;
        let flops = 2.0 * (rows * hout * k * fout) as f64;
        total_flops += flops;
        total_t += t;
        println!(
            "cnn{}  {rows:4}  {:5} x {:4} x {:4}          {:7.3}  {:7.1}  {:5.1}",
            i + 1,
            rows * hout,
            k,
            fout,
            t * 1e3,
            flops / t / 1e9,
            100.0 * flops / t / 1e9 / peak
        );
    }
    println!(
        "all    {:.1} MFLOP per chunk        {:7.3}  {:7.1}  {:5.1}",
        total_flops / 1e6,
        total_t * 1e3,
        total_flops / total_t / 1e9,
        100.0 * total_flops / total_t / 1e9 / peak
    );
}
