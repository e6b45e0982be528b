//! Whole-network derivative checks (in the spirit of Kaldi's nnet-derivative-test): with the
//! objective f = Σ_outputs ⟨output, D⟩ for random D, the input derivatives and parameter
//! gradients computed by the backward pass must predict the change of f under small random
//! perturbations of the inputs and of the parameters (measured by central differences with
//! the forward pass).
//!
//! `COMPNET_RANDOM_NETS=N` sets the number of networks (default 150).

use compnet::compile::context::nnet_context;
use compnet::compile::request::ComputationRequest;
use compnet::compile::{
    compile_computation, optimize, CompilerOptions, NnetComputation, OptimizeOptions,
};
use compnet::matrix::Matrix;
use compnet::nnet::Nnet;
use compnet::random::seeded_rng;
use compnet::run::NnetComputer;
use compnet::testing::component::ParamCopies;
use compnet::testing::numeric::dot;
use compnet::testing::{random_matrix, random_nnet_config, random_request};

fn num_nets() -> u64 {
    std::env::var("COMPNET_RANDOM_NETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(|n: u64| (n * 2 / 3).max(1))
        .unwrap_or(150)
}

/// f = Σ ⟨output_o, D_o⟩ for the forward pass of `comp` on `inputs`.
fn objective(
    comp: &NnetComputation,
    nnet: &Nnet,
    req: &ComputationRequest,
    inputs: &[Matrix],
    derivs: &[Matrix],
) -> f64 {
    let mut c = NnetComputer::new(comp, nnet, None);
    for (s, m) in req.inputs.iter().zip(inputs) {
        c.accept_input(&s.name, m.clone()).expect("accept");
    }
    c.run_forward().expect("forward");
    req.outputs
        .iter()
        .zip(derivs)
        .map(|(o, d)| dot(c.output(&o.name).expect("output"), d))
        .sum()
}

/// Σ |output ⊙ D|: the scale of float32 rounding noise in the objective.
fn objective_scale(
    comp: &NnetComputation,
    nnet: &Nnet,
    req: &ComputationRequest,
    inputs: &[Matrix],
    derivs: &[Matrix],
) -> f64 {
    let mut c = NnetComputer::new(comp, nnet, None);
    for (s, m) in req.inputs.iter().zip(inputs) {
        c.accept_input(&s.name, m.clone()).expect("accept");
    }
    c.run_forward().expect("forward");
    let mut s = 0.0;
    for (o, d) in req.outputs.iter().zip(derivs) {
        let out = c.output(&o.name).expect("output");
        for r in 0..out.num_rows() {
            for (x, y) in out.row_to_vec(r).iter().zip(&d.row_to_vec(r)) {
                s += (*x as f64 * *y as f64).abs();
            }
        }
    }
    s
}

/// Relative error of predicted vs measured changes; `noise` is the absolute float32 noise
/// level of one measurement, below which differences do not count.
fn rel_err(pred: &[f64], meas: &[f64], noise: f64) -> f64 {
    let num: f64 = pred.iter().zip(meas).map(|(p, m)| (p - m).abs()).sum();
    let den: f64 = pred.iter().chain(meas).map(|x| x.abs()).sum::<f64>() / 2.0;
    let den = den.max(noise * pred.len() as f64);
    if den <= 0.0 {
        0.0
    } else {
        num / den
    }
}

fn check_one(seed: u64) -> Option<(f64, f64, &'static str)> {
    let net = random_nnet_config(seed, true);
    // The network's parameters depend only on its seed.
    let nnet = Nnet::from_config_text(
        &net.config,
        "<random>",
        &mut compnet::random::seeded_rng(seed),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: config rejected: {e}"));
    let (left, right) = nnet_context(&nnet).map_or((4, 4), |c| (c.left, c.right));
    let mut rr = random_request(&nnet, &net, left, right, seed, true).expect("request");
    rr.request.need_model_derivative = true;
    for i in rr.request.inputs.iter_mut() {
        i.has_deriv = true;
    }
    for o in rr.request.outputs.iter_mut() {
        o.has_deriv = true;
    }
    let req = &rr.request;
    // Optimized, as the tools run it (tests/reference_eval.rs checks it against the plain one).
    let mut comp = compile_computation(&nnet, req, &CompilerOptions::default()).ok()?;
    optimize(&nnet, &mut comp, &OptimizeOptions::default());
    let mut rng = seeded_rng(seed + 77);
    let out_derivs: Vec<Matrix> = req
        .outputs
        .iter()
        .map(|o| {
            let dim = nnet.node_dim(nnet.node_index(&o.name).expect("node"));
            random_matrix(o.indexes.len(), dim, &mut rng)
        })
        .collect();

    // Backward pass: input derivatives and the parameter gradient.
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        if let Some(u) = c.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let mut input_derivs = Vec::new();
    {
        let mut c = NnetComputer::new(&comp, &nnet, Some(&mut delta));
        for (s, m) in req.inputs.iter().zip(&rr.input_values) {
            c.accept_input(&s.name, m.clone()).expect("accept");
        }
        c.run_forward().expect("forward");
        for (o, d) in req.outputs.iter().zip(&out_derivs) {
            c.accept_output_deriv(&o.name, d.clone()).expect("deriv");
        }
        c.run_backward().expect("backward");
        for s in &req.inputs {
            input_derivs.push(c.take_input_deriv(&s.name).expect("input deriv"));
        }
    }

    // Inputs: 3 random directions.
    let eps: f32 = std::env::var("COMPNET_DERIV_EPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1e-4);
    let (mut pred, mut meas) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let dirs: Vec<Matrix> = rr
            .input_values
            .iter()
            .map(|m| {
                let mut d = random_matrix(m.num_rows(), m.num_cols(), &mut rng);
                d.view_mut().scale(eps);
                d
            })
            .collect();
        let plus: Vec<Matrix> = rr
            .input_values
            .iter()
            .zip(&dirs)
            .map(|(m, d)| {
                let mut x = m.clone();
                x.view_mut()
                    .add_mat(1.0, d.view(), compnet::matrix::Trans::No);
                x
            })
            .collect();
        let minus: Vec<Matrix> = rr
            .input_values
            .iter()
            .zip(&dirs)
            .map(|(m, d)| {
                let mut x = m.clone();
                x.view_mut()
                    .add_mat(-1.0, d.view(), compnet::matrix::Trans::No);
                x
            })
            .collect();
        pred.push(input_derivs.iter().zip(&dirs).map(|(g, d)| dot(g, d)).sum());
        meas.push(
            (objective(&comp, &nnet, req, &plus, &out_derivs)
                - objective(&comp, &nnet, req, &minus, &out_derivs))
                / 2.0,
        );
    }
    let noise = 1e-5 * objective_scale(&comp, &nnet, req, &rr.input_values, &out_derivs);
    let input_err = rel_err(&pred, &meas, noise);

    // Parameters: 3 random directions over all updatable components.
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
            let mut theta = vec![0.0f32; n];
            let mut grad = vec![0.0f32; n];
            u.copy_params_to(&mut theta);
            g.copy_params_to(&mut grad);
            let dir: Vec<f32> = (0..n)
                .map(|_| eps * compnet::random::rand_gauss(&mut rng))
                .collect();
            p += dir
                .iter()
                .zip(&grad)
                .map(|(d, g)| *d as f64 * *g as f64)
                .sum::<f64>();
            let tp: Vec<f32> = theta.iter().zip(&dir).map(|(t, d)| t + d).collect();
            let tm: Vec<f32> = theta.iter().zip(&dir).map(|(t, d)| t - d).collect();
            if let Some(u) = plus.components[k].as_updatable_mut() {
                u.copy_params_from(&tp);
            }
            if let Some(u) = minus.components[k].as_updatable_mut() {
                u.copy_params_from(&tm);
            }
        }
        pred.push(p);
        meas.push(
            (objective(&comp, &plus, req, &rr.input_values, &out_derivs)
                - objective(&comp, &minus, req, &rr.input_values, &out_derivs))
                / 2.0,
        );
    }
    let param_err = rel_err(&pred, &meas, noise);
    if std::env::var("COMPNET_VERBOSE").is_ok() {
        eprintln!(
            "seed {seed}: params predicted {pred:?} measured {meas:?}\n{}",
            net.config
        );
    }
    Some((input_err, param_err, net.kind))
}

#[test]
fn whole_network_derivatives() {
    let n = num_nets().max(
        std::env::var("COMPNET_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(0, |s| s + 1),
    );
    let mut checked = 0;
    let mut failures = Vec::new();
    let only: Option<u64> = std::env::var("COMPNET_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in 0..n {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let Some((ie, pe, kind)) = check_one(seed) else {
            continue;
        };
        checked += 1;
        // Kaldi fails at a relative error of 0.25. With steps of 1e-4, ReLU kinks (amplified
        // by recurrences) are rarely crossed; at 1e-3 they give errors up to ~0.5.
        if ie > 0.02 || pe > 0.02 {
            failures.push(format!(
                "seed {seed} ({kind}): input err {ie:.3}, param err {pe:.3}"
            ));
        }
    }
    eprintln!(
        "derivative checks on {checked} networks, {} over tolerance",
        failures.len()
    );
    for f in &failures {
        eprintln!("  {f}");
    }
    assert!(checked > 0, "no network could be checked");
    // Allow a rare kink-induced miss, as Kaldi's test warns rather than fails below 0.25.
    assert!(
        failures.len() * 20 <= checked,
        "derivative checks failed:\n{}",
        failures.join("\n")
    );
}
