//! Share of restricted attention and the GRU nonlinearities in the inference time of a network
//! using them, against their share of its FLOPs: the `extras-attention-gru` golden network
//! scaled to real dimensions (TDNN 512, attention 8 heads × (key 32, value 64), 5 left and 2
//! right inputs at time-stride 3, GRU cell 512, output-GRU cell 512 with 256+256 projections,
//! 2000 outputs), one batch of 16 chunks × 150 frames. Every layer's propagate is timed on
//! the rows the compiled computation gives it: whole chunks for the feed-forward layers, one
//! time step (16 rows) at a time for the recurrent ones (150 calls).
//!
//! Usage: `cargo bench --bench attention_gru -- [THREADS [LAYER [ROUNDS]]]` (default 1 thread,
//! all layers, 9 rounds). Prints median times; with LAYER (a substring of the layer names)
//! only the matching layers run, e.g. to profile one under `perf record`.

use compnet::matrix::{set_num_threads, Matrix};
use compnet::nnet::component::{
    new_component_from_config, Backprop, Component, MiscComputationInfo, Propagate,
};
use compnet::nnet::config_line::ConfigLine;
use compnet::nnet::Index;
use std::time::Instant;

/// What `compnet compute` batches for a recurrent network (run::chunked, 16 chunks).
const SEQS: usize = 16;
const FRAMES: usize = 150;

fn random_matrix(rows: usize, cols: usize, seed: u32) -> Matrix {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    let data = (0..rows * cols)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect();
    Matrix::from_vec(rows, cols, data)
}

fn component(config: &str) -> Box<dyn Component> {
    new_component_from_config(
        &ConfigLine::parse_str(config).unwrap(),
        &mut compnet::random::seeded_rng(1),
    )
    .unwrap()
}

/// Median seconds of `rounds` runs of `f`.
fn median_secs(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// One layer: name, component, rows per call, calls, FLOPs per row.
struct Layer {
    name: &'static str,
    c: Box<dyn Component>,
    rows: usize,
    calls: usize,
    flops_per_row: f64,
    /// Input rows when they differ from the output rows (attention's context).
    rows_in: usize,
    pre: Option<Box<dyn compnet::nnet::component::PrecomputedIndexes>>,
}

fn affine(name: &'static str, i: usize, o: usize, rows: usize, calls: usize) -> Layer {
    Layer {
        name,
        c: component(&format!(
            "type=NaturalGradientAffineComponent input-dim={i} output-dim={o}"
        )),
        rows,
        calls,
        flops_per_row: 2.0 * (i * o) as f64,
        rows_in: rows,
        pre: None,
    }
}

fn main() {
    // Positional arguments only: `cargo bench` appends its own `--bench` flag.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let threads: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1);
    set_num_threads(threads);
    let only = args.get(1).cloned().unwrap_or_default();
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(9);
    let (heads, kd, vd, left, right, stride) = (8usize, 32usize, 64usize, 5i32, 2i32, 3i32);
    let cd = (left + 1 + right) as usize;
    let chunk = SEQS * FRAMES;
    // Attention's rows as the compiler lays them out: t-major over the padded window.
    let att = component(&format!(
        "type=RestrictedAttentionComponent num-heads={heads} key-dim={kd} value-dim={vd} \
         num-left-inputs={left} num-right-inputs={right} time-stride={stride}"
    ));
    let ctx = (left + right) * stride;
    let mut input: Vec<Index> = Vec::new();
    let mut output: Vec<Index> = Vec::new();
    for n in 0..SEQS as i32 {
        for t in -left * stride..FRAMES as i32 + right * stride {
            input.push(Index::new(n, t, 0));
        }
        for t in 0..FRAMES as i32 {
            output.push(Index::new(n, t, 0));
        }
    }
    att.reorder_indexes(&mut input, &mut output);
    let pre = att.precompute_indexes(&MiscComputationInfo::default(), &input, &output, false);
    let att_rows_in = input.len();
    assert_eq!(att_rows_in, (FRAMES + ctx as usize) * SEQS);
    let att_flops = (heads * (2 * kd * cd + 2 * vd * cd + 5 * cd)) as f64;
    let (cell, rec, proj) = (512usize, 512usize, 256usize);
    let att_out = heads * (vd + cd);
    let att_in = heads * (2 * kd + vd + cd);
    let layers = vec![
        affine("tdnn1.affine", 120, 512, att_rows_in, 1),
        affine("att1.affine", 512, att_in, att_rows_in, 1),
        Layer {
            name: "att1.attention",
            c: att,
            rows: chunk,
            calls: 1,
            flops_per_row: att_flops,
            rows_in: att_rows_in,
            pre,
        },
        affine("gru1.W_z.xh", att_out + rec, cell, SEQS, FRAMES),
        affine("gru1.W_r.xh", att_out + rec, rec, SEQS, FRAMES),
        affine("gru1.W_hpart.x", att_out, cell, chunk, 1),
        Layer {
            name: "gru1.gru_nonlin",
            c: component(&format!(
                "type=GruNonlinearityComponent cell-dim={cell} recurrent-dim={rec}"
            )),
            rows: SEQS,
            calls: FRAMES,
            flops_per_row: (2 * cell * rec + 10 * cell) as f64,
            rows_in: SEQS,
            pre: None,
        },
        affine("opgru1.W_z.xs", cell + proj, cell, SEQS, FRAMES),
        affine("opgru1.W_o.xs", cell + proj, cell, SEQS, FRAMES),
        affine("opgru1.W_hpart.x", cell, cell, chunk, 1),
        Layer {
            name: "opgru1.gru_nonlin",
            c: component(&format!(
                "type=OutputGruNonlinearityComponent cell-dim={cell}"
            )),
            rows: SEQS,
            calls: FRAMES,
            flops_per_row: (12 * cell) as f64,
            rows_in: SEQS,
            pre: None,
        },
        affine("opgru1.W_y.cdoto", cell, 2 * proj, SEQS, FRAMES),
        affine("output.affine", 2 * proj, 2000, chunk, 1),
    ];
    let mut total_t = 0.0;
    let mut total_f = 0.0;
    let mut rows_out = Vec::new();
    for l in layers.iter().filter(|l| l.name.contains(only.as_str())) {
        let x = random_matrix(l.rows_in, l.c.input_dim(), 7);
        let mut y = Matrix::zeros(l.rows, l.c.output_dim());
        let secs = median_secs(rounds, || {
            for _ in 0..l.calls {
                let mut rng = compnet::random::seeded_rng(0);
                l.c.propagate(Propagate {
                    input: x.view(),
                    output: y.view_mut(),
                    indexes: l.pre.as_deref(),
                    rng: &mut rng,
                });
            }
        });
        let flops = l.flops_per_row * (l.rows * l.calls) as f64;
        total_t += secs;
        total_f += flops;
        rows_out.push((l.name, secs, flops));
    }
    println!(
        "{SEQS} sequences x {FRAMES} frames, {threads} thread(s); total {:.2} ms, {:.2} GFLOP",
        total_t * 1e3,
        total_f * 1e-9
    );
    println!(
        "{:<20} {:>9} {:>8} {:>8} {:>9}",
        "layer", "ms", "time %", "FLOP %", "GFLOP/s"
    );
    for (name, secs, flops) in rows_out {
        println!(
            "{name:<20} {:>9.3} {:>8.2} {:>8.2} {:>9.1}",
            secs * 1e3,
            100.0 * secs / total_t,
            100.0 * flops / total_f,
            flops / secs * 1e-9
        );
    }
    // Training's side of attention (not part of the inference table): its backprop.
    if let Some(l) = layers.iter().find(|l| l.name == "att1.attention") {
        if l.name.contains(only.as_str()) {
            let x = random_matrix(l.rows_in, l.c.input_dim(), 7);
            let dy = random_matrix(l.rows, l.c.output_dim(), 8);
            let mut y = Matrix::zeros(l.rows, l.c.output_dim());
            let mut rng = compnet::random::seeded_rng(0);
            let memo = l.c.propagate(Propagate {
                input: x.view(),
                output: y.view_mut(),
                indexes: l.pre.as_deref(),
                rng: &mut rng,
            });
            let mut dx = Matrix::zeros(l.rows_in, l.c.input_dim());
            let secs = median_secs(rounds, || {
                let mut b = Backprop::new(dy.view(), Some(dx.view_mut()), &mut rng);
                b.indexes = l.pre.as_deref();
                b.in_value = x.view();
                b.memo = memo.as_ref();
                l.c.backprop(b);
            });
            println!(
                "{:<20} {:>9.3} (backprop, not in the table)",
                l.name,
                secs * 1e3
            );
            // The memory floor of its propagate at this machine's streaming rate: read the
            // input once, read and write the output once (the bench's data stays in L3).
            let input = vec![1.0f32; l.rows_in * l.c.input_dim()];
            let mut output = vec![0.0f32; l.rows * l.c.output_dim()];
            let secs = median_secs(rounds, || {
                let mut lanes = [0.0f32; 16];
                for c in input.chunks_exact(16) {
                    for (a, &v) in lanes.iter_mut().zip(c) {
                        *a += v;
                    }
                }
                std::hint::black_box(lanes);
                for v in output.iter_mut() {
                    *v += 1.0;
                }
                std::hint::black_box(&mut output);
            });
            let bytes = 4.0 * (input.len() + 2 * output.len()) as f64;
            println!(
                "{:<20} {:>9.3} (memory floor: {:.1} MB read or written at {:.1} GB/s)",
                l.name,
                secs * 1e3,
                bytes * 1e-6,
                bytes / secs * 1e-9
            );
        }
    }
}
