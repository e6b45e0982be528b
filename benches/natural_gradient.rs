//! Cost of the natural-gradient preconditioner on the shapes of a 650→1024 NG-affine layer
//! with a 256-row minibatch (Kaldi's defaults: rank 20 on the input side, 80 on the output
//! side, update period 4), next to the 256×650×1024 product whose gradient it preconditions.
//!
//! Usage: `cargo bench --bench natural_gradient -- [THREADS]` (default 1). Prints median
//! wall-clock times per call.

use compnet::gradient::natural_gradient::OnlineNaturalGradient;
use compnet::matrix::{set_num_threads, Matrix, Trans};
use std::time::Instant;

fn random_matrix(rows: usize, cols: usize, seed: u32) -> Matrix {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    let data = (0..rows * cols)
        .map(|i| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            // A few dominant columns, so the estimate has structure to find.
            let scale = 1.0 + 5.0 * ((i % cols) < 8) as u32 as f32;
            scale * ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5)
        })
        .collect();
    Matrix::from_vec(rows, cols, data)
}

/// Median of a list of seconds.
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Median seconds of `rounds` runs of `f`.
fn median_secs(rounds: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Median seconds of a call that updates the estimate and of one that only applies it,
/// timed past the first eleven calls (which always update), with update period 4.
fn precondition_times(rows: usize, dim: usize, rank: usize) -> (f64, f64) {
    const PERIOD: usize = 4;
    let inputs: Vec<Matrix> = (0..8).map(|i| random_matrix(rows, dim, i)).collect();
    let mut ng = OnlineNaturalGradient::new(rank, PERIOD, 2000.0, 4.0);
    let mut work = inputs[0].clone();
    let (mut updating, mut applying) = (Vec::new(), Vec::new());
    for call in 0..12 + 31 * PERIOD {
        work.view_mut()
            .copy_from(inputs[call % inputs.len()].view());
        let start = Instant::now();
        std::hint::black_box(ng.precondition_directions(work.view_mut()));
        let secs = start.elapsed().as_secs_f64();
        if call >= 12 {
            if (call - 10) % PERIOD == 0 {
                updating.push(secs);
            } else {
                applying.push(secs);
            }
        }
    }
    (median(updating), median(applying))
}

fn main() {
    let threads = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(1);
    set_num_threads(threads);
    println!("threads {threads}");

    let x = random_matrix(256, 650, 1);
    let w = random_matrix(1024, 650, 2);
    let mut y = Matrix::zeros(256, 1024);
    let gemm = median_secs(31, || {
        y.view_mut()
            .add_mat_mat(1.0, x.view(), Trans::No, w.view(), Trans::Yes, 0.0);
    });
    println!("gemm 256x650x1024 (X·Wᵀ): {:.3} ms", gemm * 1e3);

    for (rows, dim, rank) in [(256, 651, 20), (256, 1025, 80)] {
        let (update, apply) = precondition_times(rows, dim, rank);
        let mean = (update + 3.0 * apply) / 4.0;
        println!(
            "precondition {rows}x{dim} rank {rank}: updating call {:.3} ms, other calls {:.3} ms, \
             mean with update period 4 {:.3} ms ({:.3}× the gemm)",
            update * 1e3,
            apply * 1e3,
            mean * 1e3,
            mean / gemm
        );
    }
}
