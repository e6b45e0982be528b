//! CNTK's NDL front end (`frontend::ndl`): the seed's examples lower, compile, pass the
//! whole-network derivative check and train; an NDL LSTM equals the same LSTM written as
//! nnet3 primitives; a shared Parameter is one component with summed gradients; random NDL
//! expressions match a direct evaluation; errors point at exact line:column.

use compnet::compile::context::nnet_context;
use compnet::compile::{compile_computation, optimize, CompilerOptions, OptimizeOptions};
use compnet::frontend::ndl::read_ndl;
use compnet::index::Index;
use compnet::io::egs::{NnetExample, NnetIo};
use compnet::io::sparse::GeneralMatrix;
use compnet::matrix::{Matrix, Trans};
use compnet::nnet::{Nnet, ObjectiveType};
use compnet::random::{rand_gauss, seeded_rng};
use compnet::run::NnetComputer;
use compnet::train::example::computation_request;
use compnet::train::fit::data::DataSet;
use compnet::train::fit::stepper::StepperKind;
use compnet::train::fit::{fit, FitOptions};
use proptest::prelude::*;
use rand::rngs::StdRng;
use std::sync::Arc;

fn data(file: &str) -> String {
    let path = format!("{}/tests/data/ndl/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn load(file: &str) -> Nnet {
    read_ndl(&data(file), file, &mut seeded_rng(5)).unwrap_or_else(|e| panic!("{e}"))
}

fn error_of(text: &str, file: &str) -> String {
    match read_ndl(text, file, &mut seeded_rng(5)) {
        Ok(_) => panic!("{file}: expected an error"),
        Err(e) => e.to_string(),
    }
}

fn gauss_matrix(rows: usize, cols: usize, rng: &mut StdRng) -> Matrix {
    Matrix::from_vec(
        rows,
        cols,
        (0..rows * cols).map(|_| rand_gauss(rng)).collect(),
    )
}

fn dot(a: &Matrix, b: &Matrix) -> f64 {
    a.to_vec()
        .iter()
        .zip(b.to_vec())
        .map(|(x, y)| *x as f64 * y as f64)
        .sum()
}

/// One sequence of `frames` output frames: every input node over the network's context,
/// and supervision for `output` (one-hot for a linear objective, Gaussian for quadratic).
fn example(nnet: &Nnet, frames: i32, rng: &mut StdRng) -> NnetExample {
    let ctx = nnet_context(nnet).expect("context");
    let mut io = Vec::new();
    for name in nnet.input_names() {
        let dim = nnet.node_dim(nnet.node_index(name).expect("input"));
        let indexes: Vec<Index> = (-ctx.left..frames + ctx.right)
            .map(|t| Index { n: 0, t, x: 0 })
            .collect();
        io.push(NnetIo {
            name: name.into(),
            features: GeneralMatrix::Full(gauss_matrix(indexes.len(), dim, rng)),
            indexes,
        });
    }
    let dim = nnet.node_dim(nnet.node_index("output").expect("output node"));
    let indexes: Vec<Index> = (0..frames).map(|t| Index { n: 0, t, x: 0 }).collect();
    let target = match nnet.objective_type("output") {
        Some(ObjectiveType::Quadratic) => gauss_matrix(frames as usize, dim, rng),
        _ => {
            let mut v = vec![0.0; frames as usize * dim];
            for r in 0..frames as usize {
                v[r * dim + (rand_gauss(rng).abs() * 1000.0) as usize % dim] = 1.0;
            }
            Matrix::from_vec(frames as usize, dim, v)
        }
    };
    io.push(NnetIo {
        name: "output".into(),
        indexes,
        features: GeneralMatrix::Full(target),
    });
    NnetExample { io }
}

fn inputs_of(eg: &NnetExample, nnet: &Nnet) -> Vec<(String, Matrix)> {
    eg.io
        .iter()
        .filter(|io| nnet.is_input_node(nnet.node_index(&io.name).expect("node")))
        .map(|io| match &io.features {
            GeneralMatrix::Full(m) => (io.name.clone(), m.clone()),
            _ => unreachable!("full matrices only"),
        })
        .collect()
}

/// Relative error of the backward pass's input derivatives and parameter gradient against
/// central differences of f = ⟨output, D⟩ along 3 random directions each.
fn derivative_errors(nnet: &Nnet, eg: &NnetExample, seed: u64) -> (f64, f64) {
    let mut req = computation_request(nnet, eg, true, false).expect("request");
    for i in req.inputs.iter_mut() {
        i.has_deriv = true;
    }
    let mut comp = compile_computation(nnet, &req, &CompilerOptions::default()).expect("compile");
    optimize(nnet, &mut comp, &OptimizeOptions::default());
    let mut rng = seeded_rng(seed);
    let inputs = inputs_of(eg, nnet);
    let out_dim = nnet.node_dim(nnet.node_index("output").expect("output"));
    let d = gauss_matrix(req.outputs[0].indexes.len(), out_dim, &mut rng);
    let f = |net: &Nnet, xs: &[(String, Matrix)]| -> (f64, f64) {
        let mut c = NnetComputer::new(&comp, net, None);
        for (n, m) in xs {
            c.accept_input(n, m.clone()).expect("accept");
        }
        c.run_forward().expect("forward");
        let out = c.output("output").expect("output");
        let scale: f64 = out
            .to_vec()
            .iter()
            .zip(d.to_vec())
            .map(|(x, y)| (*x as f64 * y as f64).abs())
            .sum();
        (dot(out, &d), scale)
    };
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        if let Some(u) = c.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let mut input_derivs = Vec::new();
    {
        let mut c = NnetComputer::new(&comp, nnet, Some(&mut delta));
        for (n, m) in &inputs {
            c.accept_input(n, m.clone()).expect("accept");
        }
        c.run_forward().expect("forward");
        c.accept_output_deriv("output", d.clone()).expect("deriv");
        c.run_backward().expect("backward");
        for (n, _) in &inputs {
            input_derivs.push(c.take_input_deriv(n).expect("input deriv"));
        }
    }
    let noise = 1e-5 * f(nnet, &inputs).1;
    let rel = |pred: &[f64], meas: &[f64]| -> f64 {
        let num: f64 = pred.iter().zip(meas).map(|(p, m)| (p - m).abs()).sum();
        let den = (pred.iter().chain(meas).map(|x| x.abs()).sum::<f64>() / 2.0)
            .max(noise * pred.len() as f64);
        num / den
    };
    let eps = 1e-3f32;
    let (mut pred, mut meas) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let dirs: Vec<Matrix> = inputs
            .iter()
            .map(|(_, m)| {
                let mut d = gauss_matrix(m.num_rows(), m.num_cols(), &mut rng);
                d.view_mut().scale(eps);
                d
            })
            .collect();
        let shifted = |sign: f32| -> Vec<(String, Matrix)> {
            inputs
                .iter()
                .zip(&dirs)
                .map(|((n, m), d)| {
                    let mut x = m.clone();
                    x.view_mut().add_mat(sign, d.view(), Trans::No);
                    (n.clone(), x)
                })
                .collect()
        };
        pred.push(input_derivs.iter().zip(&dirs).map(|(g, d)| dot(g, d)).sum());
        meas.push((f(nnet, &shifted(1.0)).0 - f(nnet, &shifted(-1.0)).0) / 2.0);
    }
    let input_err = rel(&pred, &meas);
    let (mut pred, mut meas) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let mut plus = nnet.clone();
        let mut minus = nnet.clone();
        let mut p = 0.0f64;
        for (k, c) in nnet.components.iter().enumerate() {
            let (Some(u), Some(g)) = (c.as_updatable(), delta.components[k].as_updatable()) else {
                continue;
            };
            let n = u.num_parameters();
            let (mut theta, mut grad) = (vec![0.0f32; n], vec![0.0f32; n]);
            u.vectorize(&mut theta);
            g.vectorize(&mut grad);
            let dir: Vec<f32> = (0..n).map(|_| eps * rand_gauss(&mut rng)).collect();
            p += dir
                .iter()
                .zip(&grad)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>();
            let tp: Vec<f32> = theta.iter().zip(&dir).map(|(t, d)| t + d).collect();
            let tm: Vec<f32> = theta.iter().zip(&dir).map(|(t, d)| t - d).collect();
            plus.components[k]
                .as_updatable_mut()
                .expect("u")
                .unvectorize(&tp);
            minus.components[k]
                .as_updatable_mut()
                .expect("u")
                .unvectorize(&tm);
        }
        pred.push(p);
        meas.push((f(&plus, &inputs).0 - f(&minus, &inputs).0) / 2.0);
    }
    (input_err, rel(&pred, &meas))
}

/// Trains with `fit` (Adam) and returns the per-epoch training objectives.
fn train(nnet: Nnet, frames: i32, num_egs: usize, epochs: usize) -> Vec<f64> {
    let mut rng = seeded_rng(11);
    let egs: Vec<NnetExample> = (0..num_egs)
        .map(|_| example(&nnet, frames, &mut rng))
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut opts = FitOptions {
        out_dir: dir.path().to_str().expect("utf-8").to_string(),
        num_epochs: epochs,
        print_interval: 1000,
        ..Default::default()
    };
    opts.stepper.kind = StepperKind::Adam;
    opts.learning_rate.items = vec![(0.003, 1)];
    opts.minibatch_size.items = vec![(4.0, 1)];
    let train = DataSet {
        source: "<ndl test>".into(),
        examples: Arc::new(egs),
    };
    let summary = fit(&opts, nnet, &train, None).expect("fit");
    summary.records.iter().map(|r| r.train_objective).collect()
}

/// Lowers, compiles, checks derivatives and trains one example file.
fn check_example(file: &str, frames: i32, train_frames: i32) {
    let nnet = load(file);
    let eg = example(&nnet, frames, &mut seeded_rng(3));
    let (ie, pe) = derivative_errors(&nnet, &eg, 7);
    assert!(
        ie < 0.02 && pe < 0.02,
        "{file}: input err {ie}, param err {pe}"
    );
    let objf = train(nnet, train_frames, 8, 4);
    assert!(
        objf.last() > objf.first(),
        "{file}: the training objective did not rise: {objf:?}"
    );
}

#[test]
fn autoencoder_seed_example() {
    let nnet = load("autoencoder.ndl");
    let lines = nnet.config_lines();
    assert!(
        lines.contains(&"input-node name=input dim=1000".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"output-node name=output input=Po objective=quadratic".to_string()),
        "{lines:?}"
    );
    check_example("autoencoder.ndl", 3, 2);
}

#[test]
fn autoencoder_with_macros_seed_example() {
    let nnet = load("autoencoder_macros.ndl");
    // Dot access names: L1.BFF.W is the weight Parameter inside the macros.
    assert!(
        nnet.component_index("L1.BFF.W").is_some(),
        "{:?}",
        nnet.component_names
    );
    check_example("autoencoder_macros.ndl", 3, 2);
}

#[test]
fn lstm_seed_example() {
    let nnet = load("lstm.ndl");
    let lines = nnet.config_lines().join("\n");
    assert!(
        lines.contains("IfDefined(Offset(L1.output, -1))"),
        "{lines}"
    );
    check_example("lstm.ndl", 6, 6);
}

#[test]
fn cnn_seed_example() {
    let nnet = load("cnn.ndl");
    assert!(
        nnet.output_names().contains(&"CE.BFF"),
        "{:?}",
        nnet.output_names()
    );
    check_example("cnn.ndl", 2, 2);
}

#[test]
fn rnnlm_seed_example_full_softmax() {
    check_example("rnnlm_full_softmax.ndl", 6, 6);
}

#[test]
fn simple_network_builder_seed_example() {
    let nnet = load("timit_simple.ndl");
    assert_eq!(nnet.node_dim(nnet.node_index("input").unwrap()), 792);
    assert_eq!(nnet.node_dim(nnet.node_index("output").unwrap()), 183);
    // 792:512*3:183 is three hidden layers.
    assert!(nnet.component_index("L3").is_some() && nnet.component_index("L4").is_none());
    check_example("timit_simple.ndl", 2, 1);
}
