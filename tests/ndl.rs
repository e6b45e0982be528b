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
use compnet::testing::component::ParamCopies;
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
            u.copy_params_to(&mut theta);
            g.copy_params_to(&mut grad);
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
                .copy_params_from(&tp);
            minus.components[k]
                .as_updatable_mut()
                .expect("u")
                .copy_params_from(&tm);
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

/// Forward pass of `nnet` on `input` (t = 0..rows), returning output node `output`.
fn forward(nnet: &Nnet, input: &Matrix, output: &str) -> Matrix {
    let frames = input.num_rows() as i32;
    let indexes: Vec<Index> = (0..frames).map(|t| Index { n: 0, t, x: 0 }).collect();
    let dim = nnet.node_dim(nnet.node_index(output).expect("output"));
    let eg = NnetExample {
        io: vec![
            NnetIo {
                name: "input".into(),
                indexes: indexes.clone(),
                features: GeneralMatrix::Full(input.clone()),
            },
            NnetIo {
                name: output.into(),
                indexes,
                features: GeneralMatrix::Full(Matrix::zeros(frames as usize, dim)),
            },
        ],
    };
    let req = computation_request(nnet, &eg, false, false).expect("request");
    let mut comp = compile_computation(nnet, &req, &CompilerOptions::default()).expect("compile");
    optimize(nnet, &mut comp, &OptimizeOptions::default());
    let mut c = NnetComputer::new(&comp, nnet, None);
    c.accept_input("input", input.clone()).expect("accept");
    c.run_forward().expect("forward");
    c.take_output(output).expect("output")
}

fn params(nnet: &Nnet, name: &str) -> Vec<f32> {
    let c = nnet.components[nnet
        .component_index(name)
        .unwrap_or_else(|| panic!("no {name}"))]
    .as_updatable()
    .expect("updatable");
    let mut v = vec![0.0; c.num_parameters()];
    c.copy_params_to(&mut v);
    v
}

fn set_params(nnet: &mut Nnet, name: &str, v: &[f32]) {
    let k = nnet
        .component_index(name)
        .unwrap_or_else(|| panic!("no {name}"));
    let u = nnet.components[k].as_updatable_mut().expect("updatable");
    assert_eq!(u.num_parameters(), v.len(), "{name}");
    u.copy_params_from(v);
}

#[test]
fn ndl_lstm_equals_the_lstm_written_as_nnet3_primitives() {
    let ndl = load("lstm.ndl");
    // The same LSTM in Kaldi's config language: one affine per gate over [x, h(t-1)],
    // peepholes as per-element scales, products as ElementwiseProduct.
    let mut config = String::from("input-node name=input dim=10\n");
    let gate = |g: &str, nl: &str, peep: Option<&str>| {
        let mut s = format!(
            "component name={g}_aff type=AffineComponent input-dim=18 output-dim=8\n\
             component-node name={g}_aff component={g}_aff input=Append(input, IfDefined(Offset(h, -1)))\n"
        );
        let input = match peep {
            Some(c) => {
                s.push_str(&format!(
                    "component name={g}_peep type=PerElementScaleComponent dim=8\n\
                     component-node name={g}_peep component={g}_peep input={c}\n"
                ));
                format!("Sum({g}_aff, {g}_peep)")
            }
            None => format!("{g}_aff"),
        };
        s.push_str(&format!(
            "component name={g} type={nl}Component dim=8\ncomponent-node name={g} component={g} input={input}\n"
        ));
        s
    };
    config.push_str(&gate("i", "Sigmoid", Some("IfDefined(Offset(c, -1))")));
    config.push_str(&gate("f", "Sigmoid", Some("IfDefined(Offset(c, -1))")));
    config.push_str(&gate("g", "Tanh", None));
    config.push_str(&gate("o", "Sigmoid", Some("c")));
    config.push_str(
        "component name=ig type=ElementwiseProductComponent input-dim=16 output-dim=8\n\
         component-node name=ig component=ig input=Append(i, g)\n\
         component name=fc type=ElementwiseProductComponent input-dim=16 output-dim=8\n\
         component-node name=fc component=fc input=Append(f, IfDefined(Offset(c, -1)))\n\
         component name=c type=NoOpComponent dim=8\n\
         component-node name=c component=c input=Sum(fc, ig)\n\
         component name=tanh_c type=TanhComponent dim=8\n\
         component-node name=tanh_c component=tanh_c input=c\n\
         component name=h type=ElementwiseProductComponent input-dim=16 output-dim=8\n\
         component-node name=h component=h input=Append(o, tanh_c)\n\
         component name=out type=AffineComponent input-dim=8 output-dim=4\n\
         component-node name=out component=out input=h\n\
         component name=sm type=LogSoftmaxComponent dim=4\n\
         component-node name=sm component=sm input=out\n\
         output-node name=output input=sm\n",
    );
    let mut prim = Nnet::from_config_text(&config, "<lstm>", &mut seeded_rng(1)).expect("config");
    // The NDL network's weights, laid out as the affines hold them: [Wx | Wh] row by row,
    // then the bias.
    let affine = |wx: &[f32], wh: Option<&[f32]>, b: &[f32], rows: usize| -> Vec<f32> {
        let (cx, ch) = (wx.len() / rows, wh.map_or(0, |w| w.len() / rows));
        let mut v = Vec::new();
        for r in 0..rows {
            v.extend_from_slice(&wx[r * cx..(r + 1) * cx]);
            if let Some(wh) = wh {
                v.extend_from_slice(&wh[r * ch..(r + 1) * ch]);
            }
        }
        v.extend_from_slice(b);
        v
    };
    for (g, x, h, b, peep) in [
        ("i", "Wxi", "Whi", "bi", Some("Wci")),
        ("f", "Wxf", "Whf", "bf", Some("Wcf")),
        ("g", "Wxc", "Whc", "bc", None),
        ("o", "Wxo", "Who", "bo", Some("Wco")),
    ] {
        let p = |n: &str| params(&ndl, &format!("L1.{n}"));
        set_params(
            &mut prim,
            &format!("{g}_aff"),
            &affine(&p(x), Some(&p(h)), &p(b), 8),
        );
        if let Some(c) = peep {
            set_params(&mut prim, &format!("{g}_peep"), &p(c));
        }
    }
    set_params(
        &mut prim,
        "out",
        &affine(&params(&ndl, "Wout"), None, &params(&ndl, "bout"), 4),
    );
    let input = gauss_matrix(7, 10, &mut seeded_rng(9));
    let a = forward(&ndl, &input, "output").to_vec();
    let b = forward(&prim, &input, "output").to_vec();
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        diff < 1e-5,
        "NDL and primitive LSTM differ by {diff}:\n{a:?}\n{b:?}"
    );
    // And the recurrence matters: a later frame differs from the same input alone (by about
    // 1e-4 with these small initial weights, far above float rounding).
    let alone = forward(&ndl, &input.sub(6, 1, 0, 10).to_matrix(), "output").to_vec();
    assert!(alone
        .iter()
        .zip(&a[6 * 4..])
        .any(|(x, y)| (x - y).abs() > 2e-5));
}

#[test]
fn a_parameter_used_twice_is_one_component_with_summed_gradients() {
    let tied = "features=Input(3, tag=feature)\nW=Parameter(3, 3, init=gaussian)\n\
                a=Times(W, features)\nb=Times(W, Sigmoid(a))\n\
                MSE=SquareError(features, b, tag=criteria)\n";
    let untied = tied.replace("b=Times(W,", "W2=Parameter(3, 3)\nb=Times(W2,");
    let nnet = read_ndl(tied, "tied.ndl", &mut seeded_rng(1)).expect("tied");
    let w = nnet.component_index("W").expect("W");
    assert_eq!(nnet.components.len(), 2, "{:?}", nnet.component_names);
    let users = nnet
        .nodes
        .iter()
        .filter(
            |n| matches!(n, compnet::nnet::NetworkNode::Component { component } if *component == w),
        )
        .count();
    assert_eq!(users, 2);
    let mut two = read_ndl(&untied, "untied.ndl", &mut seeded_rng(1)).expect("untied");
    let wv = params(&nnet, "W");
    set_params(&mut two, "W", &wv);
    set_params(&mut two, "W2", &wv);
    let eg = example(&nnet, 4, &mut seeded_rng(2));
    let grad = |net: &Nnet| -> Nnet {
        let req = computation_request(net, &eg, true, false).expect("request");
        let comp = compile_computation(net, &req, &CompilerOptions::default()).expect("compile");
        let mut delta = net.clone();
        for c in delta.components.iter_mut() {
            if let Some(u) = c.as_updatable_mut() {
                u.set_zero(true);
            }
        }
        let mut c = NnetComputer::new(&comp, net, Some(&mut delta));
        for (n, m) in inputs_of(&eg, net) {
            c.accept_input(&n, m).expect("accept");
        }
        c.run_forward().expect("forward");
        c.accept_output_deriv("output", gauss_matrix(4, 3, &mut seeded_rng(3)))
            .expect("deriv");
        c.run_backward().expect("backward");
        drop(c);
        delta
    };
    let g_tied = params(&grad(&nnet), "W");
    let g_two = grad(&two);
    let (g1, g2) = (params(&g_two, "W"), params(&g_two, "W2"));
    assert!(g1.iter().any(|g| g.abs() > 1e-4) && g2.iter().any(|g| g.abs() > 1e-4));
    for k in 0..g_tied.len() {
        assert!(
            (g_tied[k] - (g1[k] + g2[k])).abs() < 1e-5,
            "gradient {k}: tied {} vs {} + {}",
            g_tied[k],
            g1[k],
            g2[k]
        );
    }
}

/// Line and column (1-based) of the `nth` occurrence of `needle` in `text`, plus `skip`
/// characters: how a person finds the spot the error must name.
fn position_of(text: &str, needle: &str, skip: usize) -> (usize, usize) {
    for (i, line) in text.lines().enumerate() {
        if let Some(c) = line.find(needle) {
            return (i + 1, line[..c].chars().count() + 1 + skip);
        }
    }
    panic!("'{needle}' not in the text");
}

#[test]
fn the_seed_lstm_verbatim_has_an_extra_parenthesis() {
    let text = data("lstm_seed.ndl");
    let (line, col) = position_of(&text, "WcidelayCI)))", "WcidelayCI))".len());
    let e = error_of(&text, "lstm_seed.ndl");
    assert!(
        e.starts_with(&format!("lstm_seed.ndl:{line}:{col}: expected a statement")),
        "{e}"
    );
}

#[test]
fn the_seed_timit_block_with_its_typo_names_the_typo() {
    let text = data("timit_simple_typo.ndl");
    let (line, col) = position_of(&text, ">ErrorPrediction", 0);
    let e = error_of(&text, "timit_simple_typo.ndl");
    assert!(
        e.starts_with(&format!(
            "timit_simple_typo.ndl:{line}:{col}: expected '=', found '>'"
        )),
        "{e}"
    );
}

#[test]
fn the_class_based_criterion_is_refused_with_a_reason() {
    let text = data("rnnlm.ndl");
    let (line, col) = position_of(&text, "ClassBasedCrossEntropyWithSoftmax", 0);
    let e = error_of(&text, "rnnlm.ndl");
    assert!(
        e.starts_with(&format!(
            "rnnlm.ndl:{line}:{col}: ClassBasedCrossEntropyWithSoftmax is not supported"
        )),
        "{e}"
    );
    assert!(e.contains("cannot express"), "{e}");
}

#[test]
fn errors_name_the_line_column_and_the_macro_calls() {
    let text = "M(x)\n{\n    W = Parameter(3, 5)\n    M = Times(W, x)\n}\n\
                N(z) = M(z)\n\
                features=Input(4, tag=feature)\n\
                y = N(features)\n\
                MSE=SquareError(features, y, tag=criteria)\n";
    let e = error_of(text, "t.ndl");
    let (l, c) = position_of(text, "Times(W, x)", 0);
    let (ml, mc) = position_of(text, "M(z)", 0);
    let (nl, nc) = position_of(text, "N(features)", 0);
    assert!(
        e.starts_with(&format!(
            "t.ndl:{l}:{c}: Times: the Parameter has 5 columns but its input has dim 4"
        )),
        "{e}"
    );
    let want_chain = format!(
        "\n  in macro 'M' called at t.ndl:{ml}:{mc}\n  in macro 'N' called at t.ndl:{nl}:{nc}"
    );
    assert!(e.contains(&want_chain), "{e}");

    let text = "features=Input(4, tag=feature)\ny = Sigmoid(featurs)\nMSE=SquareError(features, y, tag=criteria)\n";
    let (l, c) = position_of(text, "featurs)", 0);
    let e = error_of(text, "u.ndl");
    assert!(
        e.starts_with(&format!("u.ndl:{l}:{c}: ")) && e.contains("unknown name 'featurs'"),
        "{e}"
    );

    let text = "features=Input(4, tag=feature)\na = Sigmoid(b)\nb = Tanh(Plus(a, features))\nMSE=SquareError(features, a, tag=criteria)\n";
    let e = error_of(text, "loop.ndl");
    assert!(e.contains("depends on itself without a Delay"), "{e}");
    // With a Delay the same loop is a recurrent network.
    let ok = text.replace(
        "Tanh(Plus(a, features))",
        "Tanh(Plus(PastValue(4, a), features))",
    );
    read_ndl(&ok, "loop.ndl", &mut seeded_rng(1)).expect("recurrent loop");

    let text = "features=Input(4, tag=feature)\nW=Parameter(4, 4)\ny = Plus(Times(W, features), W)\nMSE=SquareError(features, y, tag=criteria)\n";
    let e = error_of(text, "two_roles.ndl");
    assert!(
        e.contains("only a vector (one column) can be used as a value"),
        "{e}"
    );
}

/// Random NDL expressions over the feature `x` (dim 4).
#[derive(Clone, Debug)]
enum E {
    X,
    Un(&'static str, Box<E>),
    Bin(&'static str, Box<E>, Box<E>),
    Scale(i32, Box<E>),
}

fn expr_strategy() -> impl Strategy<Value = E> {
    let leaf = Just(E::X);
    leaf.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            (
                prop::sample::select(vec![
                    "Sigmoid",
                    "Tanh",
                    "RectifiedLinear",
                    "Times",
                    "DiagTimes",
                    "Bias",
                    "Delay",
                    "FutureValue",
                ]),
                inner.clone()
            )
                .prop_map(|(op, a)| E::Un(op, Box::new(a))),
            (
                prop::sample::select(vec!["Plus", "Minus", "ElementTimes", "Slice"]),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(op, a, b)| E::Bin(op, Box::new(a), Box::new(b))),
            (-3i32..=3, inner).prop_map(|(c, a)| E::Scale(c, Box::new(a))),
        ]
    })
}

/// The NDL text of `e`; parameters are declared in `decls` and numbered in `names`.
fn render(e: &E, decls: &mut Vec<String>, names: &mut Vec<String>) -> String {
    match e {
        E::X => "features".into(),
        E::Scale(c, a) => format!("Scale({}, {})", *c as f64 * 0.5, render(a, decls, names)),
        E::Un(op, a) => {
            let a = render(a, decls, names);
            let k = names.len();
            match *op {
                "Times" => {
                    decls.push(format!(
                        "W{k}=Parameter(4, 4, init=gaussian, initValueScale=3)"
                    ));
                    names.push(format!("W{k}"));
                    format!("Times(W{k}, {a})")
                }
                "DiagTimes" => {
                    decls.push(format!(
                        "D{k}=Parameter(4, init=gaussian, initValueScale=3)"
                    ));
                    names.push(format!("D{k}"));
                    format!("DiagTimes(D{k}, {a})")
                }
                "Bias" => {
                    decls.push(format!(
                        "B{k}=Parameter(4, init=gaussian, initValueScale=3)"
                    ));
                    names.push(format!("B{k}"));
                    format!("Plus({a}, B{k})")
                }
                "Delay" => format!("Delay(4, {a}, delayTime=1)"),
                "FutureValue" => format!("FutureValue(4, {a}, timeStep=1)"),
                nl => format!("{nl}({a})"),
            }
        }
        E::Bin(op, a, b) => {
            let (a, b) = (render(a, decls, names), render(b, decls, names));
            match *op {
                "Slice" => format!("RowSlice(2, 4, RowStack({a}, {b}))"),
                op => format!("{op}({a}, {b})"),
            }
        }
    }
}

/// Direct evaluation at frame t (None where nnet3 would find it not computable: only
/// `Delay`/`FutureValue` read outside the input's frames, as zero). `k` numbers the
/// parameters in the order `render` declared them.
fn direct(e: &E, t: i32, x: &[Vec<f64>], nnet: &Nnet, k: &mut usize) -> Option<Vec<f64>> {
    let frames = x.len() as i32;
    match e {
        E::X => (0..frames).contains(&t).then(|| x[t as usize].clone()),
        E::Scale(c, a) => {
            direct(a, t, x, nnet, k).map(|v| v.iter().map(|y| y * *c as f64 * 0.5).collect())
        }
        E::Un(op, a) => {
            // Parameters are numbered after their argument's.
            let shift = match *op {
                "Delay" => -1,
                "FutureValue" => 1,
                _ => 0,
            };
            let mut k_after = *k;
            let v = direct(a, t + shift, x, nnet, &mut k_after);
            if shift != 0 {
                // Count the argument's parameters even when not evaluated at this t.
                let mut kk = *k;
                count_params(a, &mut kk);
                *k = kk;
                return Some(v.unwrap_or_else(|| vec![0.0; 4]));
            }
            *k = k_after;
            let name = |p: &str, k: usize| format!("{p}{k}");
            let out = match *op {
                "Sigmoid" => v.map(|v| v.iter().map(|y| 1.0 / (1.0 + (-y).exp())).collect()),
                "Tanh" => v.map(|v| v.iter().map(|y| y.tanh()).collect()),
                "RectifiedLinear" => v.map(|v| v.iter().map(|y| y.max(0.0)).collect()),
                "Times" => {
                    let w = params(nnet, &name("W", *k));
                    *k += 1;
                    v.map(|v| {
                        (0..4)
                            .map(|r| (0..4).map(|c| w[r * 4 + c] as f64 * v[c]).sum())
                            .collect()
                    })
                }
                "DiagTimes" => {
                    let d = params(nnet, &name("D", *k));
                    *k += 1;
                    v.map(|v| v.iter().zip(&d).map(|(y, s)| y * *s as f64).collect())
                }
                "Bias" => {
                    let b = params(nnet, &name("B", *k));
                    *k += 1;
                    // The bias node reads the features, so it exists only where they do.
                    v.filter(|_| (0..frames).contains(&t))
                        .map(|v| v.iter().zip(&b).map(|(y, s)| y + *s as f64).collect())
                }
                other => unreachable!("{other}"),
            };
            out
        }
        E::Bin(op, a, b) => {
            let va = direct(a, t, x, nnet, k);
            let vb = direct(b, t, x, nnet, k);
            let (va, vb) = (va?, vb?);
            Some(match *op {
                "Plus" => va.iter().zip(&vb).map(|(p, q)| p + q).collect(),
                "Minus" => va.iter().zip(&vb).map(|(p, q)| p - q).collect(),
                "ElementTimes" => va.iter().zip(&vb).map(|(p, q)| p * q).collect(),
                _ => va[2..].iter().chain(&vb[..2]).copied().collect(),
            })
        }
    }
}

fn count_params(e: &E, k: &mut usize) {
    match e {
        E::X => {}
        E::Scale(_, a) => count_params(a, k),
        E::Un(op, a) => {
            count_params(a, k);
            if matches!(*op, "Times" | "DiagTimes" | "Bias") {
                *k += 1;
            }
        }
        E::Bin(_, a, b) => {
            count_params(a, k);
            count_params(b, k);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn random_ndl_expressions_match_a_direct_evaluation(e in expr_strategy(), seed in 0u64..1000) {
        let (mut decls, mut names) = (Vec::new(), Vec::new());
        let body = render(&e, &mut decls, &mut names);
        let text = format!(
            "features=Input(4, tag=feature)\n{}\nout = {body}\nMSE=SquareError(features, out, tag=criteria)\n",
            decls.join("\n")
        );
        let nnet = read_ndl(&text, "random.ndl", &mut seeded_rng(seed))
            .unwrap_or_else(|err| panic!("{text}\n{err}"));
        let frames = 5;
        let input = gauss_matrix(frames, 4, &mut seeded_rng(seed + 1));
        let got = forward(&nnet, &input, "output").to_vec();
        let x: Vec<Vec<f64>> = (0..frames)
            .map(|r| input.row_to_vec(r).iter().map(|v| *v as f64).collect())
            .collect();
        for t in 0..frames {
            let want = direct(&e, t as i32, &x, &nnet, &mut 0).expect("computable");
            for c in 0..4 {
                let g = got[t * 4 + c] as f64;
                prop_assert!(
                    (g - want[c]).abs() <= 1e-4 * (1.0 + want[c].abs()),
                    "{text}\nframe {t} column {c}: network {g}, direct {}", want[c]
                );
            }
        }
    }
}

#[test]
fn deep_or_damaged_input_gives_errors_not_crashes() {
    let net = |body: &str| {
        format!("features=Input(4, tag=feature)\n{body}\nMSE=SquareError(features, out, tag=criteria)\n")
    };
    // 150 nested calls lower (a deep network); 300 are refused by the parser.
    let nest = |n: usize| format!("out = {}features{}", "Sigmoid(".repeat(n), ")".repeat(n));
    let nnet = read_ndl(&net(&nest(150)), "deep.ndl", &mut seeded_rng(1)).expect("150 deep");
    assert_eq!(nnet.components.len(), 150);
    let e = error_of(&net(&nest(300)), "deeper.ndl");
    assert!(e.contains("nest deeper than"), "{e}");
    // 600 statements each using the next one (defined later).
    let mut body = String::from("out = Sigmoid(a1)\n");
    for k in 1..600 {
        body.push_str(&format!("a{k} = Tanh(a{})\n", k + 1));
    }
    body.push_str("a600 = Sigmoid(features)\n");
    let e = error_of(&net(&body), "chain.ndl");
    assert!(e.contains("wait on names defined later"), "{e}");

    // Random damage to the seed examples: every result is a network or an error.
    let mut rng = seeded_rng(21);
    for file in [
        "lstm.ndl",
        "cnn.ndl",
        "rnnlm_full_softmax.ndl",
        "timit_simple.ndl",
    ] {
        let text: Vec<char> = data(file).chars().collect();
        for _ in 0..150 {
            let mut t = text.clone();
            for _ in 0..1 + (rand_gauss(&mut rng).abs() * 2.0) as usize {
                let at = (rand_gauss(&mut rng).abs() * 1e6) as usize % t.len();
                match (rand_gauss(&mut rng).abs() * 10.0) as usize % 3 {
                    0 => {
                        t.remove(at);
                    }
                    1 => t.insert(at, "()=,.[]{}9-xL"[at % 13..].chars().next().unwrap_or('x')),
                    _ => {
                        let other = (at * 7 + 1) % t.len();
                        t.swap(at, other)
                    }
                }
            }
            let damaged: String = t.into_iter().collect();
            let _ = read_ndl(&damaged, file, &mut seeded_rng(1));
        }
    }
}
