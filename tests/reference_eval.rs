//! The compiled computation run by NnetComputer must equal the naive reference evaluator
//! (which is written independently of the compiler) on many random networks and requests.
//!
//! `COMPNET_RANDOM_NETS=N` sets the number of networks (default 400; raise it for an
//! even more thorough run).

use compnet::compile::checker::check_computation;
use compnet::compile::context::nnet_context;
use compnet::compile::optimize::optimize_observed;
use compnet::compile::{compile_computation, CompilerOptions, NnetComputation, OptimizeOptions};
use compnet::matrix::Matrix;
use compnet::nnet::{Index, Nnet};
use compnet::random::seeded_rng;
use compnet::run::NnetComputer;
use compnet::testing::component::ParamCopies;
use compnet::testing::reference::ReferenceEvaluator;
use compnet::testing::{random_matrix, random_nnet_config, random_request, RandomRequest};

fn num_nets() -> u64 {
    std::env::var("COMPNET_RANDOM_NETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400)
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

/// Runs one random network; returns (kind, computable), and adds the names of the optimizer
/// passes that changed its computation to `fired`.
fn check_one(
    seed: u64,
    with_derivs: bool,
    fired: &mut std::collections::BTreeSet<String>,
) -> (&'static str, bool) {
    let net = random_nnet_config(seed, false);
    if std::env::var("COMPNET_VERBOSE").is_ok() {
        eprintln!("seed {seed} ({}):\n{}", net.kind, net.config);
    }
    // The network's parameters depend only on its seed.
    let mut nnet = Nnet::from_config_text(
        &net.config,
        "<random>",
        &mut compnet::random::seeded_rng(seed),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: config rejected: {e}\n{}", net.config));
    for c in nnet.components.iter_mut() {
        c.set_test_mode(true, &mut compnet::random::seeded_rng(0));
    }
    // Kaldi's context computation only handles networks whose inputs are 'input' (and
    // 'ivector'); others get a generous fixed context (the generator's offsets are small).
    let (left, right) = match nnet_context(&nnet) {
        Ok(c) => (c.left, c.right),
        Err(_) if net.inputs.len() > 1 && !net.inputs[1].1 => (4, 4),
        Err(e) => panic!("seed {seed}: context: {e}\n{}", net.config),
    };
    let rr = random_request(&nnet, &net, left, right, seed, with_derivs)
        .unwrap_or_else(|e| panic!("seed {seed}: request: {e}"));
    let req = &rr.request;
    let inputs: Vec<(&str, &[Index], &Matrix)> = req
        .inputs
        .iter()
        .zip(&rr.input_values)
        .map(|(s, m)| (s.name.as_str(), s.indexes.as_slice(), m))
        .collect();
    let mut reference = ReferenceEvaluator::new(&nnet, &inputs).expect("reference");
    let expected: Vec<_> = req
        .outputs
        .iter()
        .map(|o| reference.compute(&o.name, &o.indexes))
        .collect();
    let ctx_msg = || {
        format!(
            "seed {seed} ({}):\n{}\nrequest:\n{req}",
            net.kind, net.config
        )
    };
    let comp = match compile_computation(&nnet, req, &CompilerOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            assert!(
                expected.iter().any(|r| r.is_err()),
                "the compiler refused a request the reference computes: {e}\n{}",
                ctx_msg()
            );
            return (net.kind, false);
        }
    };
    for (o, r) in req.outputs.iter().zip(&expected) {
        if let Err(e) = r {
            panic!(
                "compiled, but the reference cannot compute {}: {e}\n{}",
                o.name,
                ctx_msg()
            );
        }
    }
    check_computation(&comp, &nnet)
        .unwrap_or_else(|e| panic!("compiled computation: {e}\n{}", ctx_msg()));
    let plain = run_computation(&nnet, &comp, &rr, with_derivs, seed, false, &ctx_msg);
    for ((o, r), got) in req.outputs.iter().zip(&expected).zip(&plain.outputs) {
        let want = r.as_ref().expect("checked above");
        let d = rel_diff(got, want);
        assert!(
            d < 1e-4,
            "output {} differs from the reference by {d}\nours {got:?}\nref {want:?}\n{}",
            o.name,
            ctx_msg()
        );
    }
    for (i, d) in req
        .inputs
        .iter()
        .filter(|i| i.has_deriv)
        .zip(&plain.input_derivs)
    {
        assert_eq!(d.num_rows(), i.indexes.len());
    }
    // The optimized computation (matrices it allocates undefined are filled with NaN) must
    // give the same outputs, input derivatives and parameter gradients; the checker must
    // accept what every pass leaves. On a difference, each pass is switched off in turn to
    // name the one behind it.
    let changed_by = std::cell::RefCell::new(Vec::new());
    let compare = |opts: &OptimizeOptions| -> Result<(), String> {
        let mut optimized =
            compile_computation(&nnet, req, &CompilerOptions::default()).expect("compile");
        let mut passes = 0;
        let mut problem = None;
        let mut before = optimized.commands.clone();
        optimize_observed(&nnet, &mut optimized, opts, &mut |pass, c| {
            passes += 1;
            if c.commands != before && *opts == OptimizeOptions::default() {
                changed_by.borrow_mut().push(pass.to_string());
                before = c.commands.clone();
            }
            if let (None, Err(e)) = (&problem, check_computation(c, &nnet)) {
                problem = Some(format!(
                    "after optimizer pass {pass}: {e}\ncomputation:\n{}",
                    compnet::compile::print::format_computation(c, &nnet)
                ));
            }
        });
        if let Some(p) = problem {
            return Err(p);
        }
        if *opts == OptimizeOptions::default() {
            assert_eq!(passes, 11, "every optimizer pass must be checked");
        }
        let opt = run_computation(&nnet, &optimized, &rr, with_derivs, seed, true, &ctx_msg);
        let printed = || compnet::compile::print::format_computation(&optimized, &nnet);
        let same = |what: &str, a: &[Matrix], b: &[Matrix]| -> Result<(), String> {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                let d = rel_diff(x, y);
                if d.is_nan() || d >= 1e-5 {
                    return Err(format!("{what} differs by {d}\noptimized:\n{}", printed()));
                }
            }
            Ok(())
        };
        same("output", &opt.outputs, &plain.outputs)?;
        same("input derivative", &opt.input_derivs, &plain.input_derivs)?;
        assert_eq!(opt.gradient.len(), plain.gradient.len());
        let scale = plain.gradient.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (a, b) in opt.gradient.iter().zip(&plain.gradient) {
            if (a - b).abs().is_nan() || (a - b).abs() > 1e-5 * scale {
                return Err(format!("parameter gradient {a} vs {b}"));
            }
        }
        Ok(())
    };
    if let Err(e) = compare(&OptimizeOptions::default()) {
        panic!(
            "optimized computation: {e}\n{}\n{}",
            culprit(&compare),
            ctx_msg()
        );
    }
    fired.extend(changed_by.into_inner());
    (net.kind, true)
}

/// Names the optimizer passes whose switching off (alone) makes `compare` succeed.
fn culprit(compare: &dyn Fn(&OptimizeOptions) -> Result<(), String>) -> String {
    let mut found = Vec::new();
    for &pass in compnet::compile::optimize::PASS_OPTIONS {
        let mut o = OptimizeOptions::default();
        assert!(o.set_pass(pass, false), "{pass}");
        if compare(&o).is_ok() {
            found.push(pass);
        }
    }
    if found.is_empty() {
        "no single pass switched off removes the difference".into()
    } else {
        format!(
            "culprit: --optimization.{}=false removes the difference",
            found.join(", or ")
        )
    }
}

/// What one run of a computation gives: outputs, input derivatives and the parameter
/// gradient (all updatable components, vectorised in order).
struct RunResult {
    outputs: Vec<Matrix>,
    input_derivs: Vec<Matrix>,
    gradient: Vec<f32>,
}

fn run_computation(
    nnet: &Nnet,
    comp: &NnetComputation,
    rr: &RandomRequest,
    with_derivs: bool,
    seed: u64,
    poison: bool,
    ctx_msg: &dyn Fn() -> String,
) -> RunResult {
    let req = &rr.request;
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        if let Some(u) = c.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let delta_opt = if req.need_model_derivative {
        Some(&mut delta)
    } else {
        None
    };
    let mut computer = NnetComputer::new(comp, nnet, delta_opt);
    if poison {
        computer = computer.poison_undefined();
    }
    for (s, m) in req.inputs.iter().zip(&rr.input_values) {
        computer.accept_input(&s.name, m.clone()).expect("accept");
    }
    computer
        .run_forward()
        .unwrap_or_else(|e| panic!("run_forward: {e}\n{}", ctx_msg()));
    let outputs = req
        .outputs
        .iter()
        .map(|o| computer.output(&o.name).expect("output").clone())
        .collect();
    let mut input_derivs = Vec::new();
    if with_derivs {
        // The backward pass must run and produce derivatives of the right shapes.
        let mut rng = seeded_rng(seed);
        for o in req.outputs.iter().filter(|o| o.has_deriv) {
            let dim = nnet.node_dim(nnet.node_index(&o.name).expect("node"));
            computer
                .accept_output_deriv(&o.name, random_matrix(o.indexes.len(), dim, &mut rng))
                .expect("deriv");
        }
        computer
            .run_backward()
            .unwrap_or_else(|e| panic!("run_backward: {e}\n{}", ctx_msg()));
        for i in req.inputs.iter().filter(|i| i.has_deriv) {
            let d = computer
                .input_deriv(&i.name)
                .unwrap_or_else(|e| panic!("{e}\n{}", ctx_msg()));
            input_derivs.push(d.clone());
        }
    }
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

fn run_many(with_derivs: bool, offset: u64) {
    let n = num_nets();
    let mut fired = std::collections::BTreeSet::new();
    let mut by_kind: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for seed in offset..offset + n {
        let (kind, ok) = check_one(seed, with_derivs, &mut fired);
        let e = by_kind.entry(kind).or_default();
        e.0 += 1;
        if ok {
            e.1 += 1;
        }
    }
    eprintln!("random networks (kind: total / computable):");
    let mut computable = 0;
    for (k, (t, c)) in &by_kind {
        eprintln!("  {k}: {t} / {c}");
        computable += c;
    }
    assert!(
        computable as u64 * 2 >= n,
        "fewer than half of the random requests were computable"
    );
    // The random networks exercise every pass that rewrites commands (a pass that never
    // fires would make the comparison above prove nothing about it).
    let mut expected = vec![
        "snip_row_ops",
        "split_row_ops",
        "optimize_row_ops",
        "extend_matrices",
        "remove_assignments/propagate_in_place/backprop_in_place",
        "initialize_undefined",
        "move_sizing_commands",
        "allocate_from_other",
    ];
    // Forward sums start with a copy; additions to zeros are the backward pass's, and only
    // a backward pass reads what memory compression keeps.
    if with_derivs {
        expected.push("convert_addition");
        expected.push("memory_compression");
    }
    for pass in expected {
        assert!(
            fired.contains(pass),
            "pass {pass} never changed a random computation: {fired:?}"
        );
    }
    eprintln!("passes that changed some computation: {fired:?}");
}

/// Recursion in the reference evaluator goes as deep as the recurrence; give it room.
fn with_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

#[test]
fn compiled_forward_matches_reference() {
    with_big_stack(|| run_many(false, 0));
}

#[test]
fn compiled_forward_with_backward_matches_reference() {
    with_big_stack(|| run_many(true, 1000));
}
