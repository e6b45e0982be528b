//! Inference throughput of `compnet compute`'s chunked computation on the real-size networks
//! of tests/data/kaldi/perf (the workload of that directory's README: 4 utterances × 1,500
//! frames of random features, 40-dim, 30 for the x-vector net, plus a 100-dim online iVector
//! with period 10 where the net has an `ivector` input), with the sgemm peak of the same
//! binary (a 1024³ product through `compnet::matrix`, best of its two layouts) measured in
//! the same run.
//!
//! Usage: `cargo bench --bench inference -- [THREADS] [NET...]` (THREADS default 1; NET is a
//! label: wsj, xvector, xvector-whole, tdnnf, lstm; default all). The thread pools are sized
//! once per process, so run the binary once per thread count (scripts/bench_inference.sh).
//! Env: `INFER_BENCH_ROUNDS` (timed passes over the 4 utterances, default 3),
//! `PERF_CONFIG_DIR` (default tests/data/kaldi/perf in the repository).
//!
//! Per workload it prints: the first pass (includes compiling the chunk computations), the best
//! steady-state pass by wall clock and by process CPU time, frames/s, the FLOPs per input
//! frame (2·in·out per affine-like layer per row computed, context rows included, counted
//! from the compiled computations) and the achieved GFLOP/s as a fraction of the sgemm peak
//! and of the FMA units' peak (a loop of independent fused multiply-adds).

use compnet::compile::request::{ComputationRequest, IoSpecification};
use compnet::compile::{compile_computation, CompilerOptions, NnetComputation};
use compnet::matrix::{MatView, MatViewMut, Matrix, Trans, WeightMatrix};
use compnet::nnet::{Index, Nnet};
use compnet::run::chunked::{ChunkComputer, IvectorSource, NnetSimpleComputationOptions};
use compnet::run::set_threads;
use std::time::Instant;

const NUM_UTTS: usize = 4;
const UTT_FRAMES: usize = 1500;
const IVECTOR_DIM: usize = 100;
const IVECTOR_PERIOD: i32 = 10;

/// A workload: label, config file, the `compnet compute` options that differ from the
/// defaults (--frames-per-chunk, --frame-subsampling-factor), Kaldi's frames/s on one thread
/// (README), if known.
struct Workload {
    label: &'static str,
    config: &'static str,
    frames_per_chunk: i32,
    frame_subsampling_factor: i32,
    kaldi_fps: [Option<f64>; 2],
}

const WORKLOADS: &[Workload] = &[
    Workload {
        label: "wsj",
        config: "wsj_nnet3_tdnn_1a.config",
        frames_per_chunk: 50,
        frame_subsampling_factor: 1,
        kaldi_fps: [Some(5000.0), Some(6700.0)],
    },
    Workload {
        label: "xvector",
        config: "voxceleb_xvector_1a.config",
        frames_per_chunk: 50,
        frame_subsampling_factor: 1,
        kaldi_fps: [None, None],
    },
    Workload {
        label: "xvector-whole",
        config: "voxceleb_xvector_1a.config",
        frames_per_chunk: 1500,
        frame_subsampling_factor: 1,
        kaldi_fps: [Some(2090.0), None],
    },
    Workload {
        label: "tdnnf",
        config: "librispeech_chain_tdnnf_1d.config",
        frames_per_chunk: 50,
        frame_subsampling_factor: 3,
        kaldi_fps: [Some(1490.0), None],
    },
    Workload {
        label: "lstm",
        config: "swbd_chain_tdnn_lstm_1m.config",
        frames_per_chunk: 50,
        frame_subsampling_factor: 3,
        kaldi_fps: [Some(236.0), None],
    },
];

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
}

/// CPU seconds used by the whole process, all threads (Linux CLOCK_PROCESS_CPUTIME_ID).
fn process_cpu_seconds() -> f64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec (two 64-bit fields on x86-64 Linux).
    unsafe { clock_gettime(2, &mut t) };
    t.sec as f64 + 1e-9 * t.nsec as f64
}

/// Deterministic pseudo-random values in [-1, 1).
fn fill(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32) / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Best GFLOP/s of a 1024³ product C = A·Bᵀ (the forward form of an affine layer), the
/// better of the two ways compnet can run it: the plain product on row-major B, and the
/// `WeightMatrix` path that reads a column-major copy of B in place. This is the machine's
/// sgemm peak the "%peak" column refers to.
fn sgemm_peak() -> f64 {
    let n = 1024;
    let a = fill(n * n, 1);
    let b = fill(n * n, 2);
    let w = WeightMatrix::new(Matrix::from_vec(n, n, b.clone()));
    let mut c = vec![0f32; n * n];
    let mut best = f64::MAX;
    for round in 0..16 {
        let t0 = Instant::now();
        for _ in 0..4 {
            let mut cv = MatViewMut::from_slice(&mut c, n, n);
            if round % 2 == 0 {
                cv.add_mat_mat(
                    1.0,
                    MatView::from_slice(&a, n, n),
                    Trans::No,
                    MatView::from_slice(&b, n, n),
                    Trans::Yes,
                    0.0,
                );
            } else {
                w.forward(1.0, MatView::from_slice(&a, n, n), &mut cv, 0.0);
            }
        }
        best = best.min(t0.elapsed().as_secs_f64() / 4.0);
    }
    2.0 * (n * n * n) as f64 / best / 1e9
}

/// The FMA units' throughput on one thread: GFLOP/s of a loop of independent 16-lane
/// fused multiply-adds (AVX-512 when the CPU has it, else 8-lane AVX2, else 0). No GEMM can
/// beat it; it is what "%fma" refers to.
fn fma_peak() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        const ACC: usize = 12;
        #[target_feature(enable = "avx512f")]
        fn run512(iters: usize) -> f32 {
            let mut acc = [_mm512_set1_ps(0.0); ACC];
            let a = _mm512_set1_ps(0.999_999);
            let b = _mm512_set1_ps(1e-7);
            for _ in 0..iters {
                for x in acc.iter_mut() {
                    *x = _mm512_fmadd_ps(*x, a, b);
                }
            }
            acc.iter().map(|&x| _mm512_reduce_add_ps(x)).sum()
        }
        #[target_feature(enable = "avx2,fma")]
        fn run256(iters: usize) -> f32 {
            // SAFETY: only AVX2/FMA intrinsics on registers, called after detection.
            unsafe {
                let mut acc = [_mm256_set1_ps(0.0); ACC];
                let a = _mm256_set1_ps(0.999_999);
                let b = _mm256_set1_ps(1e-7);
                for _ in 0..iters {
                    for x in acc.iter_mut() {
                        *x = _mm256_fmadd_ps(*x, a, b);
                    }
                }
                let mut lanes = [0f32; 8];
                let mut s = 0.0;
                for x in acc {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), x);
                    s += lanes.iter().sum::<f32>();
                }
                s
            }
        }
        let (lanes, run): (usize, fn(usize) -> f32) = if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            (16, |n| unsafe { run512(n) })
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            (8, |n| unsafe { run256(n) })
        } else {
            return 0.0;
        };
        let iters = 20_000_000;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t0 = Instant::now();
            std::hint::black_box(run(std::hint::black_box(iters)));
            best = best.min(t0.elapsed().as_secs_f64());
        }
        (iters * ACC * lanes * 2) as f64 / best / 1e9
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0.0
    }
}

/// GFLOP/s of the affine forward product at a chunk's shape, M = rows, K = in, N = out, in
/// three layouts: C = X·Wᵀ (W is N×K, as stored), Cᵀ = W·Xᵀ, and C = X·V (V = Wᵀ stored K×N).
fn chunk_gemm_layouts(m: usize, k: usize, n: usize) -> [f64; 3] {
    let x = fill(m * k, 3);
    let w = fill(n * k, 4);
    let mut c = vec![0f32; m * n];
    let mut res = [0.0; 3];
    for (form, r) in res.iter_mut().enumerate() {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let reps = 50;
            let t0 = Instant::now();
            for _ in 0..reps {
                let xv = MatView::from_slice(&x, m, k);
                match form {
                    0 => MatViewMut::from_slice(&mut c, m, n).add_mat_mat(
                        1.0,
                        xv,
                        Trans::No,
                        MatView::from_slice(&w, n, k),
                        Trans::Yes,
                        0.0,
                    ),
                    1 => MatViewMut::from_slice(&mut c, n, m).add_mat_mat(
                        1.0,
                        MatView::from_slice(&w, n, k),
                        Trans::No,
                        xv,
                        Trans::Yes,
                        0.0,
                    ),
                    _ => MatViewMut::from_slice(&mut c, m, n).add_mat_mat(
                        1.0,
                        xv,
                        Trans::No,
                        MatView::from_slice(&w, k, n),
                        Trans::No,
                        0.0,
                    ),
                }
            }
            best = best.min(t0.elapsed().as_secs_f64() / reps as f64);
        }
        *r = 2.0 * (m * k * n) as f64 / best / 1e9;
    }
    res
}

/// FLOPs of one run of `comp`: 2·in·out per row of every affine-like Propagate (for
/// `TdnnComponent` the weight covers all time offsets, so its parameter count is used).
fn computation_flops(nnet: &Nnet, comp: &NnetComputation) -> f64 {
    use compnet::compile::computation::Command;
    let mut flops = 0.0;
    for cmd in &comp.commands {
        if let Command::Propagate(p) = cmd {
            let Some(c) = nnet.components.get(p.component) else {
                continue;
            };
            let Some(out) = comp.submatrices.get(p.output) else {
                continue;
            };
            let name = c.type_name();
            let weights = match name {
                "TdnnComponent" => c
                    .as_updatable()
                    .map_or(0, |u| u.num_parameters().saturating_sub(c.output_dim())),
                _ if name.contains("Affine") || name == "LinearComponent" => {
                    c.input_dim() * c.output_dim()
                }
                _ => 0,
            };
            flops += 2.0 * out.num_rows as f64 * weights as f64;
        }
    }
    flops
}

/// The request `compnet compute` makes for one chunk (see `ChunkComputer::chunk_request`).
fn chunk_request(t_lo: i32, t_hi: i32, num: i32, fsf: i32, ivector: bool) -> ComputationRequest {
    let mut req = ComputationRequest::default();
    req.inputs.push(IoSpecification {
        name: "input".into(),
        indexes: (t_lo..=t_hi).map(|t| Index::new(0, t, 0)).collect(),
        has_deriv: false,
    });
    if ivector {
        req.inputs.push(IoSpecification {
            name: "ivector".into(),
            indexes: vec![Index::new(0, 0, 0)],
            has_deriv: false,
        });
    }
    req.outputs.push(IoSpecification {
        name: "output".into(),
        indexes: (0..num).map(|i| Index::new(0, i * fsf, 0)).collect(),
        has_deriv: false,
    });
    req
}

/// FLOPs of one utterance of `frames` frames, chunked as `compnet compute` chunks it.
fn utterance_flops(nnet: &Nnet, cc: &ChunkComputer, fsf: i32, frames: i32, iv: bool) -> f64 {
    let ctx = cc.context();
    let num_sub = (frames + fsf - 1) / fsf;
    let per = cc.frames_per_chunk() / fsf;
    let mut total = 0.0;
    let mut start = 0;
    while start < num_sub {
        let n = per.min(num_sub - start);
        let last = (n - 1) * fsf;
        let req = chunk_request(-ctx.left, last + ctx.right, n, fsf, iv);
        match compile_computation(nnet, &req, &CompilerOptions::default()) {
            Ok(comp) => total += computation_flops(nnet, &comp),
            Err(e) => {
                eprintln!("flop count: {e}");
                return f64::NAN;
            }
        }
        start += n;
    }
    total
}

fn main() {
    let mut argv: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let threads = match argv.first().and_then(|s| s.parse::<usize>().ok()) {
        Some(t) => {
            argv.remove(0);
            t
        }
        None => 1,
    };
    set_threads(threads);
    let rounds: usize = std::env::var("INFER_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = std::env::var("PERF_CONFIG_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/perf").into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("# threads {threads}; rounds {rounds}; load {}", load.trim());
    let peak = sgemm_peak();
    println!("# sgemm peak, 1024^3 (compnet::matrix, {threads} thread(s)): {peak:.1} GFLOP/s");
    let fma = fma_peak() * threads as f64;
    println!("# FMA-loop peak ({threads} thread(s) x one core's loop): {fma:.1} GFLOP/s");
    if argv.iter().any(|a| a == "layouts") {
        for (m, k, n) in [
            (70, 1950, 650),
            (50, 650, 3000),
            (70, 300, 650),
            (1024, 1950, 650),
        ] {
            let [a, b, c] = chunk_gemm_layouts(m, k, n);
            println!("# gemm {m}x{k}->{n}: X*W^T {a:.1}, W*X^T {b:.1}, X*V {c:.1} GFLOP/s");
        }
    }
    println!(
        "# {:<14} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>7} {:>6} {:>8}",
        "workload",
        "first_s",
        "wall_s",
        "cpu_s",
        "frames/s",
        "cpu_fr/s",
        "MFLOP/fr",
        "GFLOP/s",
        "%peak",
        "%fma",
        "x_kaldi"
    );
    for w in WORKLOADS {
        if !argv.is_empty() && !argv.iter().any(|a| a == w.label) {
            continue;
        }
        let path = format!("{dir}/{}", w.config);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let nnet = match Nnet::from_config_text(&text, &path, &mut compnet::random::seeded_rng(0)) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let has_iv = nnet
            .node_index("ivector")
            .is_some_and(|i| nnet.is_input_node(i));
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: w.frames_per_chunk,
            frame_subsampling_factor: w.frame_subsampling_factor,
            ..Default::default()
        };
        let input_dim = nnet.node_index("input").map_or(40, |i| nnet.node_dim(i));
        let fsf = opts.frame_subsampling_factor;
        let mut cc = match ChunkComputer::new(nnet.clone(), &opts, "output", None) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{}: {e}", w.label);
                continue;
            }
        };
        let flops_utt = utterance_flops(&nnet, &cc, fsf, UTT_FRAMES as i32, has_iv);
        let feats: Vec<Matrix> = (0..NUM_UTTS)
            .map(|u| {
                Matrix::from_vec(
                    UTT_FRAMES,
                    input_dim,
                    fill(UTT_FRAMES * input_dim, 10 + u as u64),
                )
            })
            .collect();
        let iv_rows = UTT_FRAMES.div_ceil(IVECTOR_PERIOD as usize);
        let ivecs: Vec<Matrix> = (0..NUM_UTTS)
            .map(|u| {
                Matrix::from_vec(
                    iv_rows,
                    IVECTOR_DIM,
                    fill(iv_rows * IVECTOR_DIM, 100 + u as u64),
                )
            })
            .collect();
        let pass = |cc: &mut ChunkComputer| -> Result<(f64, f64), String> {
            let (t0, c0) = (Instant::now(), process_cpu_seconds());
            for (f, iv) in feats.iter().zip(&ivecs) {
                let src = if has_iv {
                    IvectorSource::Online(iv, IVECTOR_PERIOD)
                } else {
                    IvectorSource::None
                };
                let out = cc.compute(f, src).map_err(|e| e.to_string())?;
                std::hint::black_box(out);
            }
            Ok((t0.elapsed().as_secs_f64(), process_cpu_seconds() - c0))
        };
        let first = match pass(&mut cc) {
            Ok((w, _)) => w,
            Err(e) => {
                eprintln!("{}: {e}", w.label);
                continue;
            }
        };
        let (mut best_wall, mut best_cpu) = (f64::MAX, f64::MAX);
        for _ in 0..rounds {
            match pass(&mut cc) {
                Ok((wt, ct)) => {
                    best_wall = best_wall.min(wt);
                    best_cpu = best_cpu.min(ct);
                }
                Err(e) => eprintln!("{}: {e}", w.label),
            }
        }
        let frames = (NUM_UTTS * UTT_FRAMES) as f64;
        let fps = frames / best_wall;
        let gflops = flops_utt * NUM_UTTS as f64 / best_wall / 1e9;
        let kaldi = w.kaldi_fps[usize::from(threads > 1)]
            .map_or("-".to_string(), |k| format!("{:.2}", fps / k));
        println!(
            "{:<16} {:>8.3} {:>8.3} {:>8.3} {:>9.0} {:>9.0} {:>8.2} {:>8.1} {:>6.1}% {:>5.1}% {:>8}",
            w.label,
            first,
            best_wall,
            best_cpu,
            fps,
            frames / best_cpu,
            flops_utt / UTT_FRAMES as f64 / 1e6,
            gflops,
            100.0 * gflops / peak,
            100.0 * gflops / fma,
            kaldi
        );
    }
}
