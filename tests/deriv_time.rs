//! Derivative-time limits (`compile::deriv_time`, Kaldi's `--optimization.min-deriv-time`,
//! `max-deriv-time`, `max-deriv-time-relative`) on random networks (recurrent ones among
//! them): the limited computation, optimized or not, must give the outputs, input
//! derivatives and parameter gradients of the unlimited, unoptimized computation in which
//! every derivative row outside the range is zeroed by hand after each command that writes
//! it. The checker runs after the limit and after every optimizer pass.
//!
//! Requests are in t-major order, as Kaldi's training requests are, so "outside the range"
//! (per row) and Kaldi's contiguous row spans agree.
//!
//! `COMPNET_RANDOM_NETS=N` sets the number of networks (default 300).

use compnet::compile::analysis::{command_accesses, Access};
use compnet::compile::checker::check_computation;
use compnet::compile::context::nnet_context;
use compnet::compile::deriv_time::deriv_time_range;
use compnet::compile::optimize::optimize_for_request_observed;
use compnet::compile::{
    compile_computation, Command, CompilerOptions, ComputationRequest, NnetComputation,
    OptimizeOptions, SubMatrixInfo,
};
use compnet::matrix::Matrix;
use compnet::nnet::Nnet;
use compnet::random::seeded_rng;
use compnet::run::NnetComputer;
use compnet::testing::component::ParamCopies;
use compnet::testing::{random_matrix, random_nnet_config, random_request, RandomRequest};
use rand::Rng;

fn num_nets() -> u64 {
    std::env::var("COMPNET_RANDOM_NETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

/// Max |a − b| relative to max(1, max |b|).
fn rel_diff(a: &Matrix, b: &Matrix) -> f32 {
    assert_eq!((a.num_rows(), a.num_cols()), (b.num_rows(), b.num_cols()));
    let mut d = 0.0f32;
    for r in 0..a.num_rows() {
        for (x, y) in a.row_to_vec(r).iter().zip(&b.row_to_vec(r)) {
            d = d.max((x - y).abs());
        }
    }
    d / b.view().max_abs().max(1.0)
}

/// The reference: after every command that writes a derivative matrix, a SetConst zeroes
/// each run of its rows whose t is outside [min, max].
fn zero_outside_by_hand(nnet: &Nnet, comp: &mut NnetComputation, min: i32, max: i32) {
    let nm = comp.matrices.len();
    // Per derivative matrix: sub-matrices of its runs of rows outside the range.
    let mut runs: Vec<Vec<usize>> = vec![Vec::new(); nm];
    for (m, run) in runs.iter_mut().enumerate().skip(1) {
        let d = &comp.matrix_debug_info[m];
        if !d.is_deriv || d.cindexes.len() != comp.matrices[m].num_rows {
            continue;
        }
        let outside: Vec<bool> = d
            .cindexes
            .iter()
            .map(|(_, i)| i.t < min || i.t > max)
            .collect();
        let mut r = 0;
        while r < outside.len() {
            if !outside[r] {
                r += 1;
                continue;
            }
            let start = r;
            while r < outside.len() && outside[r] {
                r += 1;
            }
            let info = SubMatrixInfo {
                matrix: m,
                row_offset: start,
                num_rows: r - start,
                col_offset: 0,
                num_cols: comp.matrices[m].num_cols,
            };
            run.push(comp.new_submatrix(info));
        }
    }
    let old = std::mem::take(&mut comp.commands);
    for cmd in old {
        let written: Vec<usize> = command_accesses(nnet, &cmd)
            .submatrices(comp)
            .into_iter()
            .filter(|&(_, a)| a != Access::Read)
            .map(|(s, _)| comp.submatrices[s].matrix)
            .collect();
        comp.commands.push(cmd);
        for m in written {
            for &s in &runs[m] {
                comp.commands.push(Command::SetConst { s, alpha: 0.0 });
            }
        }
    }
}

struct RunResult {
    outputs: Vec<Matrix>,
    input_derivs: Vec<Matrix>,
    gradient: Vec<f32>,
}

fn run_computation(
    nnet: &Nnet,
    comp: &NnetComputation,
    rr: &RandomRequest,
    seed: u64,
    poison: bool,
) -> RunResult {
    let req = &rr.request;
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        if let Some(u) = c.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let delta_opt = req.need_model_derivative.then_some(&mut delta);
    let mut computer = NnetComputer::new(comp, nnet, delta_opt);
    if poison {
        computer = computer.poison_undefined();
    }
    for (s, m) in req.inputs.iter().zip(&rr.input_values) {
        computer.accept_input(&s.name, m.clone()).expect("accept");
    }
    computer.run_forward().expect("run_forward");
    let outputs = req
        .outputs
        .iter()
        .map(|o| computer.output(&o.name).expect("output").clone())
        .collect();
    let mut rng = seeded_rng(seed);
    for o in req.outputs.iter().filter(|o| o.has_deriv) {
        let dim = nnet.node_dim(nnet.node_index(&o.name).expect("node"));
        computer
            .accept_output_deriv(&o.name, random_matrix(o.indexes.len(), dim, &mut rng))
            .expect("deriv");
    }
    computer.run_backward().expect("run_backward");
    let input_derivs = req
        .inputs
        .iter()
        .filter(|i| i.has_deriv)
        .map(|i| computer.input_deriv(&i.name).expect("input deriv").clone())
        .collect();
    drop(computer);
    let mut gradient = Vec::new();
    for c in &delta.components {
        if let Some(u) = c.as_updatable() {
            let at = gradient.len();
            gradient.resize(at + u.num_parameters(), 0.0);
            u.copy_params_to(&mut gradient[at..]);
        }
    }
    RunResult {
        outputs,
        input_derivs,
        gradient,
    }
}

/// A random network and a t-major request with derivatives for `seed`, or `None` when the
/// request is not computable.
fn setup(seed: u64) -> Option<(Nnet, RandomRequest, &'static str, String)> {
    let net = random_nnet_config(seed, true);
    // The GRUs self-repair on a random half of their backprop calls; a limited computation
    // makes fewer calls than the full one, so the two would draw differently. Their
    // self-repair is switched off here (it is tested with the components).
    let config: String = net
        .config
        .lines()
        .map(|l| {
            if l.contains("GruNonlinearityComponent") {
                format!("{l} self-repair-scale=0\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let mut nnet = Nnet::from_config_text(&config, "<random>", &mut seeded_rng(seed))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for c in nnet.components.iter_mut() {
        c.set_test_mode(true, &mut seeded_rng(0));
    }
    let (left, right) = match nnet_context(&nnet) {
        Ok(c) => (c.left, c.right),
        Err(_) => (4, 4),
    };
    let mut rr = random_request(&nnet, &net, left, right, seed, true).ok()?;
    let mut rng = seeded_rng(seed ^ 0xd7);
    for (s, m) in rr.request.inputs.iter_mut().zip(rr.input_values.iter_mut()) {
        s.indexes.sort();
        *m = random_matrix(s.indexes.len(), m.num_cols(), &mut rng);
    }
    for o in rr.request.outputs.iter_mut() {
        o.indexes.sort();
    }
    rr.request.need_model_derivative = true;
    compile_computation(&nnet, &rr.request, &CompilerOptions::default()).ok()?;
    Some((nnet, rr, net.kind, net.config))
}

/// Random limits around the request's output frames: (min, max, max-relative).
fn random_limits(req: &ComputationRequest, seed: u64) -> (i32, i32, i32) {
    let ts: Vec<i32> = req
        .outputs
        .iter()
        .flat_map(|o| o.indexes.iter().map(|i| i.t))
        .collect();
    let (lo, hi) = (*ts.iter().min().unwrap(), *ts.iter().max().unwrap());
    let mut rng = seeded_rng(seed ^ 0x11);
    let min = if rng.random_bool(0.8) {
        rng.random_range(lo - 3..=hi)
    } else {
        i32::MIN
    };
    let (max, rel) = match rng.random_range(0..3) {
        0 => (i32::MAX, i32::MAX),
        1 => (rng.random_range(min.max(lo - 3)..=hi + 2), i32::MAX),
        _ => (
            i32::MAX,
            rng.random_range((min.max(lo - 3) - hi).min(0)..=2),
        ),
    };
    (min, max, rel)
}

/// Checks one network; returns (kind, whether the limit removed any command).
fn check_one(seed: u64) -> Option<(&'static str, bool)> {
    let (nnet, rr, kind, config) = setup(seed)?;
    let req = &rr.request;
    let (min, max, rel) = random_limits(req, seed);
    let (lo, hi) = deriv_time_range(min, max, rel, req)?;
    if lo > hi {
        return None;
    }
    let ctx = || format!("seed {seed} ({kind}), t in [{lo}, {hi}]:\n{config}\nrequest:\n{req}");
    let debug = CompilerOptions {
        output_debug_info: true,
    };
    let mut reference = compile_computation(&nnet, req, &debug).expect("compile");
    let unlimited_commands = reference.commands.len();
    zero_outside_by_hand(&nnet, &mut reference, lo, hi);
    check_computation(&reference, &nnet).unwrap_or_else(|e| panic!("reference: {e}\n{}", ctx()));
    let want = run_computation(&nnet, &reference, &rr, seed, false);
    let mut removed = false;
    for optimize in [false, true] {
        let opts = OptimizeOptions {
            optimize,
            min_deriv_time: min,
            max_deriv_time: max,
            max_deriv_time_relative: rel,
            ..Default::default()
        };
        let mut limited = compile_computation(&nnet, req, &debug).expect("compile");
        let mut passes = Vec::new();
        optimize_for_request_observed(&nnet, req, &mut limited, &opts, &mut |pass, c| {
            passes.push(pass.to_string());
            check_computation(c, &nnet).unwrap_or_else(|e| {
                panic!(
                    "after pass {pass}: {e}\n{}\n{}",
                    ctx(),
                    compnet::compile::print::format_computation(c, &nnet)
                )
            });
            if pass == "limit_deriv_times" && c.commands.len() < unlimited_commands {
                removed = true;
            }
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
        assert_eq!(
            passes.first().map(String::as_str),
            Some("limit_deriv_times")
        );
        let got = run_computation(&nnet, &limited, &rr, seed, true);
        let same = |what: &str, a: &[Matrix], b: &[Matrix]| {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                let d = rel_diff(x, y);
                assert!(
                    d < 1e-5,
                    "optimize={optimize}: {what} differs by {d}\n{}\nlimited:\n{}",
                    ctx(),
                    compnet::compile::print::format_computation(&limited, &nnet)
                );
            }
        };
        same("output", &got.outputs, &want.outputs);
        same("input derivative", &got.input_derivs, &want.input_derivs);
        assert_eq!(got.gradient.len(), want.gradient.len());
        let scale = want.gradient.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (a, b) in got.gradient.iter().zip(&want.gradient) {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "optimize={optimize}: parameter gradient {a} vs {b}\n{}",
                ctx()
            );
        }
    }
    Some((kind, removed))
}

#[test]
fn limited_computations_equal_derivatives_zeroed_by_hand() {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| {
            let mut by_kind: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
            for seed in 0..num_nets() {
                if let Some((kind, removed)) = check_one(seed) {
                    let e = by_kind.entry(kind).or_default();
                    e.0 += 1;
                    e.1 += removed as usize;
                }
            }
            eprintln!("limited networks (kind: checked / commands removed):");
            for (k, (n, r)) in &by_kind {
                eprintln!("  {k}: {n} / {r}");
            }
            let pruned: usize = by_kind.values().map(|v| v.1).sum();
            let checked: usize = by_kind.values().map(|v| v.0).sum();
            assert!(checked >= 100, "only {checked} networks checked");
            assert!(
                pruned * 3 >= checked,
                "the limit pruned only {pruned} of {checked}"
            );
            for k in ["rnn", "lstm-like"] {
                assert!(
                    by_kind.get(k).is_some_and(|v| v.1 > 0),
                    "no {k} network was limited"
                );
            }
        })
        .expect("spawn")
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
}
