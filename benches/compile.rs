//! Compile time of `compnet::compile::compile_computation` (alone, and followed by the
//! optimizer) on two real-size requests:
//! a 128-sequence × 8-frame training request on the WSJ TDNN (inputs with the network's
//! context, output derivatives and model derivatives wanted), and a 1000-frame inference
//! request on the Switchboard TDNN-LSTM (1000 sequential LSTM steps per layer).
//!
//! Usage: `cargo bench --bench compile` (criterion; `PERF_CONFIG_DIR` overrides
//! tests/data/kaldi/perf in the repository).

use compnet::compile::context::nnet_context;
use compnet::compile::request::{ComputationRequest, IoSpecification};
use compnet::compile::{compile_computation, optimize, CompilerOptions, OptimizeOptions};
use compnet::nnet::{Index, Nnet};
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;

/// Reads and initialises one of the perf networks, or says why not.
fn load(config: &str) -> Result<Nnet, String> {
    let dir = std::env::var("PERF_CONFIG_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/perf").into());
    let path = format!("{dir}/{config}");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    Nnet::from_config_text(&text, &path, &mut compnet::random::seeded_rng(0))
        .map_err(|e| e.to_string())
}

/// A request over `seqs` sequences: input frames `[-left, frames-1+right]`, output frames
/// `0, step, ..` below `frames`, one iVector per sequence if the net has an `ivector` input.
fn request(
    nnet: &Nnet,
    seqs: i32,
    frames: i32,
    step: i32,
    train: bool,
) -> Result<ComputationRequest, String> {
    let ctx = nnet_context(nnet).map_err(|e| e.to_string())?;
    let mut req = ComputationRequest::default();
    req.inputs.push(IoSpecification {
        name: "input".into(),
        indexes: (0..seqs)
            .flat_map(|n| (-ctx.left..frames + ctx.right).map(move |t| Index::new(n, t, 0)))
            .collect(),
        has_deriv: false,
    });
    if nnet
        .node_index("ivector")
        .is_some_and(|i| nnet.is_input_node(i))
    {
        req.inputs.push(IoSpecification {
            name: "ivector".into(),
            indexes: (0..seqs).map(|n| Index::new(n, 0, 0)).collect(),
            has_deriv: false,
        });
    }
    req.outputs.push(IoSpecification {
        name: "output".into(),
        indexes: (0..seqs)
            .flat_map(|n| {
                (0..frames)
                    .step_by(step as usize)
                    .map(move |t| Index::new(n, t, 0))
            })
            .collect(),
        has_deriv: train,
    });
    req.need_model_derivative = train;
    Ok(req)
}

fn bench(c: &mut Criterion) {
    let cases: [(&str, &str, i32, i32, i32, bool); 2] = [
        (
            "wsj_tdnn_train_128x8",
            "wsj_nnet3_tdnn_1a.config",
            128,
            8,
            1,
            true,
        ),
        (
            "swbd_tdnn_lstm_1000_frames",
            "swbd_chain_tdnn_lstm_1m.config",
            1,
            1000,
            1,
            false,
        ),
    ];
    let mut g = c.benchmark_group("compile");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for (label, config, seqs, frames, step, train) in cases {
        let prepared =
            load(config).and_then(|n| request(&n, seqs, frames, step, train).map(|r| (n, r)));
        let (nnet, req) = match prepared {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{label}: skipped: {e}");
                continue;
            }
        };
        let opts = CompilerOptions::default();
        if let Err(e) = compile_computation(&nnet, &req, &opts) {
            eprintln!("{label}: skipped: compile failed: {e}");
            continue;
        }
        g.bench_function(label, |b| {
            b.iter(|| compile_computation(&nnet, &req, &opts).map(|c| c.commands.len()))
        });
        // What the tools pay: compilation plus the optimizer.
        let opt = OptimizeOptions::default();
        g.bench_function(format!("{label} + optimize"), |b| {
            b.iter(|| {
                compile_computation(&nnet, &req, &opts).map(|mut c| {
                    optimize(&nnet, &mut c, &opt);
                    c.commands.len()
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
