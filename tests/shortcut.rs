//! The computation cache and shortcut compilation (`compile::cache`): a widened 2-sequence
//! computation must pass the checker and give exactly what the directly compiled one gives
//! (outputs, input derivatives, parameter gradients), on random networks (recurrent,
//! IfDefined/Failover, ReplaceIndex iVectors, dim-range nodes, several inputs and outputs)
//! and on the golden networks (statistics pooling, TDNN-F, LSTM, attention, ...). A broken
//! widening must be caught; the cache must count, evict and notice a changed network.

use compnet::compile::cache::{compile_with_shortcut, expand_computation, mini_request};
use compnet::compile::checker::check_computation;
use compnet::compile::context::nnet_context;
use compnet::compile::print::format_computation;
use compnet::compile::{
    compile_computation, optimize, CachingCompiler, CachingCompilerOptions, Command,
    CompilerOptions, ComputationRequest, IoSpecification, NnetComputation, OptimizeOptions,
};
use compnet::matrix::Matrix;
use compnet::nnet::{Index, Nnet};
use compnet::random::seeded_rng;
use compnet::run::NnetComputer;
use compnet::testing::component::ParamCopies;
use compnet::testing::{random_matrix, random_nnet_config};
use std::path::Path;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

/// Everything a computation produces, flattened.
#[derive(Debug, PartialEq)]
struct Results {
    outputs: Vec<Vec<f32>>,
    input_derivs: Vec<Vec<f32>>,
    gradients: Vec<Vec<f32>>,
}

fn flat(m: &Matrix) -> Vec<f32> {
    (0..m.num_rows()).flat_map(|r| m.row_to_vec(r)).collect()
}

/// Runs `comp` forward and (if the request has derivatives) backward on inputs and output
/// derivatives drawn from `seed`.
fn run(
    nnet: &Nnet,
    comp: &NnetComputation,
    req: &ComputationRequest,
    seed: u64,
) -> Result<Results, String> {
    let mut rng = seeded_rng(seed);
    let dim = |name: &str| nnet.node_dim(nnet.node_index(name).unwrap());
    let inputs: Vec<Matrix> = req
        .inputs
        .iter()
        .map(|s| random_matrix(s.indexes.len(), dim(&s.name), &mut rng))
        .collect();
    let out_derivs: Vec<Matrix> = req
        .outputs
        .iter()
        .map(|s| random_matrix(s.indexes.len(), dim(&s.name), &mut rng))
        .collect();
    let mut delta = nnet.clone();
    for c in delta.components.iter_mut() {
        if let Some(u) = c.as_updatable_mut() {
            u.set_zero(true);
        }
    }
    let mut res = Results {
        outputs: Vec::new(),
        input_derivs: Vec::new(),
        gradients: Vec::new(),
    };
    {
        let mut c = NnetComputer::new(comp, nnet, Some(&mut delta)).poison_undefined();
        for (s, m) in req.inputs.iter().zip(&inputs) {
            c.accept_input(&s.name, m.clone())
                .map_err(|e| e.to_string())?;
        }
        c.run_forward().map_err(|e| e.to_string())?;
        for s in &req.outputs {
            res.outputs
                .push(flat(c.output(&s.name).map_err(|e| e.to_string())?));
        }
        if req.need_derivatives() {
            for (s, d) in req.outputs.iter().zip(&out_derivs) {
                if s.has_deriv {
                    c.accept_output_deriv(&s.name, d.clone())
                        .map_err(|e| e.to_string())?;
                }
            }
            c.run_backward().map_err(|e| e.to_string())?;
            for s in req.inputs.iter().filter(|s| s.has_deriv) {
                res.input_derivs
                    .push(flat(c.input_deriv(&s.name).map_err(|e| e.to_string())?));
            }
        }
    }
    for c in &delta.components {
        if let Some(u) = c.as_updatable() {
            let mut v = vec![0.0; u.num_parameters()];
            u.copy_params_to(&mut v);
            res.gradients.push(v);
        }
    }
    Ok(res)
}

/// Largest difference between two result sets, relative to the largest magnitude, or why
/// they cannot be compared.
fn difference(a: &Results, b: &Results) -> Result<f32, String> {
    let mut worst = 0.0f32;
    for (what, x, y) in [
        ("outputs", &a.outputs, &b.outputs),
        ("input derivatives", &a.input_derivs, &b.input_derivs),
        ("gradients", &a.gradients, &b.gradients),
    ] {
        if x.len() != y.len() {
            return Err(format!("{what}: {} vs {} matrices", x.len(), y.len()));
        }
        for (k, (u, v)) in x.iter().zip(y).enumerate() {
            if u.len() != v.len() {
                return Err(format!("{what} {k}: {} vs {} values", u.len(), v.len()));
            }
            let scale = u.iter().fold(1.0f32, |m, z| m.max(z.abs()));
            for (p, q) in u.iter().zip(v) {
                let d = (p - q).abs() / scale;
                if d.is_nan() || (p.is_nan() != q.is_nan()) {
                    return Err(format!("{what} {k}: NaN"));
                }
                worst = worst.max(d);
            }
        }
    }
    Ok(worst)
}

/// Compiles `req` directly and with the shortcut, checks the widened computation and
/// compares what both compute. Returns false if the request does not compile or is not
/// decomposable; panics on any disagreement.
fn compare(nnet: &Nnet, req: &ComputationRequest, what: &str) -> bool {
    let mut direct = match compile_computation(nnet, req, &CompilerOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{what}: does not compile: {e}");
            return false;
        }
    };
    optimize(nnet, &mut direct, &OptimizeOptions::default());
    let widened = match compile_with_shortcut(nnet, req, &CachingCompilerOptions::default()) {
        Ok(Ok(c)) => c,
        Ok(Err(why)) => panic!("{what}: no shortcut: {why}\n{req}"),
        Err(e) => panic!("{what}: the 2-sequence request fails: {e}"),
    };
    check_computation(&widened, nnet).unwrap_or_else(|e| {
        panic!(
            "{what}: widened computation: {e}\n{}",
            format_computation(&widened, nnet)
        )
    });
    // The first run on a thread differs from later ones in the last bits (fresh buffers
    // rather than pooled ones); compare warm runs.
    let _ = run(nnet, &direct, req, 7);
    let a = run(nnet, &direct, req, 7).unwrap_or_else(|e| panic!("{what}: direct: {e}"));
    let b = run(nnet, &widened, req, 7).unwrap_or_else(|e| panic!("{what}: widened: {e}"));
    let d = difference(&a, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
    // Today the widened computation is the one direct compilation gives, so the results
    // agree to the bit.
    assert!(d == 0.0, "{what}: results differ by {d}\n{req}");
    true
}

/// A decomposable request: `num_n` sequences, output frames `t0..t0+len`, inputs with the
/// network's context; iVector-like inputs (`ivectors`) at t = 0; n-major or t-major.
#[allow(clippy::too_many_arguments)]
fn request(
    nnet: &Nnet,
    inputs: &[(String, bool)],
    outputs: &[String],
    num_n: i32,
    t0: i32,
    len: i32,
    t_major: bool,
    derivs: bool,
) -> ComputationRequest {
    let (left, right) = nnet_context(nnet).map_or((4, 4), |c| (c.left, c.right));
    let order = |mut v: Vec<Index>| {
        if t_major {
            v.sort();
        }
        v
    };
    let mut req = ComputationRequest {
        need_model_derivative: derivs,
        ..Default::default()
    };
    for (name, ivector) in inputs {
        let ts = if *ivector {
            0..1
        } else {
            // Two frames more on the right: a second output may need more context.
            t0 - left..t0 + len + right + 2
        };
        let mut s = IoSpecification::from_ranges(name, 0..num_n, ts, derivs && !ivector);
        s.indexes = order(s.indexes);
        req.inputs.push(s);
    }
    for name in outputs {
        let mut s = IoSpecification::from_ranges(name, 0..num_n, t0..t0 + len, derivs);
        s.indexes = order(s.indexes);
        req.outputs.push(s);
    }
    req
}

#[test]
fn random_networks_widen_exactly() {
    let mut compared = 0;
    let mut kinds = std::collections::BTreeMap::new();
    for seed in 0..120u64 {
        let net = random_nnet_config(seed, seed % 2 == 0);
        let mut nnet =
            Nnet::from_config_text(&net.config, "<random>", &mut seeded_rng(seed)).unwrap();
        for c in nnet.components.iter_mut() {
            c.set_test_mode(true, &mut seeded_rng(0));
        }
        let num_n = 3 + (seed % 5) as i32;
        let req = request(
            &nnet,
            &net.inputs,
            &net.outputs,
            num_n,
            (seed % 4) as i32,
            1 + (seed % 7) as i32,
            seed % 3 == 0,
            seed % 4 != 1,
        );
        if compare(&nnet, &req, &format!("seed {seed} ({})", net.kind)) {
            compared += 1;
            *kinds.entry(net.kind).or_insert(0) += 1;
        }
    }
    eprintln!("compared {compared}: {kinds:?}");
    assert!(compared >= 100, "only {compared} compared");
    assert!(kinds.len() >= 6, "{kinds:?}");
}

fn golden_nets() -> Vec<(String, Nnet)> {
    let mut dirs: Vec<_> = std::fs::read_dir(Path::new(GOLDEN).join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    let mut nets = Vec::new();
    for d in dirs {
        let Ok(r) = Nnet::read_model_file(d.join("model.raw").to_str().unwrap()) else {
            continue;
        };
        let mut n = r.nnet;
        for c in n.components.iter_mut() {
            c.set_test_mode(true, &mut seeded_rng(0));
        }
        nets.push((d.file_name().unwrap().to_string_lossy().to_string(), n));
    }
    nets
}

fn golden_io(n: &Nnet) -> (Vec<(String, bool)>, Vec<String>) {
    let mut inputs = vec![("input".to_string(), false)];
    if n.node_index("ivector").is_some_and(|i| n.is_input_node(i)) {
        inputs.push(("ivector".to_string(), true));
    }
    (inputs, vec!["output".to_string()])
}

#[test]
fn golden_networks_widen_exactly() {
    let mut compared = Vec::new();
    for (name, n) in golden_nets() {
        let (inputs, outputs) = golden_io(&n);
        let mut ok = false;
        for (num_n, t_major, derivs) in [(3, false, false), (5, true, true), (4, false, true)] {
            let req = request(&n, &inputs, &outputs, num_n, 0, 9, t_major, derivs);
            ok |= compare(&n, &req, &format!("{name} N={num_n}"));
        }
        if ok {
            compared.push(name);
        }
    }
    eprintln!("compared: {compared:?}");
    // Every case whose component types exist.
    assert!(compared.len() >= 12, "only {compared:?}");
    for must in [
        "xvector-small",
        "tdnnf",
        "fast-lstmp",
        "tdnn-splice-ivector",
    ] {
        assert!(compared.iter().any(|c| c == must), "{must} not compared");
    }
}

/// The statistics components' precomputed indexes are recomputed for the widened Indexes,
/// not copied: the xvector net's widened computation holds more rows in them.
#[test]
fn precomputed_indexes_are_recomputed() {
    let (_, n) = golden_nets()
        .into_iter()
        .find(|(name, _)| name == "xvector-small")
        .expect("xvector-small");
    let (inputs, outputs) = golden_io(&n);
    let req = request(&n, &inputs, &outputs, 6, 0, 9, true, true);
    let widened = compile_with_shortcut(&n, &req, &CachingCompilerOptions::default())
        .unwrap()
        .unwrap();
    let (mini, _) = mini_request(&req).unwrap();
    assert!(widened.component_precomputed_io.len() > 1);
    for io in widened.component_precomputed_io.iter().skip(1) {
        let ns: std::collections::BTreeSet<i32> = io.output_indexes.iter().map(|i| i.n).collect();
        assert_eq!(ns.len(), 6);
    }
    // The same as compiled directly, up to the order of the entries.
    let direct = compile_computation(&n, &req, &CompilerOptions::default()).unwrap();
    let mut a: Vec<_> = widened
        .component_precomputed_io
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    let mut b: Vec<_> = direct
        .component_precomputed_io
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert!(mini.inputs[0].indexes.len() * 3 == req.inputs[0].indexes.len());
}

/// Widening that loses a row, or a computation whose rows do not say which sequence they
/// belong to, must not pass unnoticed.
#[test]
fn broken_widening_is_caught() {
    // A spliced TDNN: its input is read through row tables.
    let cfg = "input-node name=input dim=3\n\
        component name=a type=AffineComponent input-dim=9 output-dim=4\n\
        component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 2))\n\
        component name=r type=RectifiedLinearComponent dim=4\n\
        component-node name=r component=r input=a\n\
        component name=b type=AffineComponent input-dim=8 output-dim=3\n\
        component-node name=b component=b input=Append(r, Offset(r, 1))\n\
        output-node name=output input=b\n";
    let nnet = Nnet::from_config_text(cfg, "<test>", &mut seeded_rng(3)).unwrap();
    let io = vec![("input".to_string(), false)];
    let req = request(&nnet, &io, &["output".into()], 4, 0, 5, true, true);
    assert!(compare(&nnet, &req, "spliced"));
    let mut direct = compile_computation(&nnet, &req, &CompilerOptions::default()).unwrap();
    optimize(&nnet, &mut direct, &OptimizeOptions::default());
    let good = run(&nnet, &direct, &req, 7).unwrap();

    // Drop one row of each row table: the comparison must see it.
    let mut broken = compile_with_shortcut(&nnet, &req, &CachingCompilerOptions::default())
        .unwrap()
        .unwrap();
    assert!(!broken.indexes.is_empty());
    for v in broken.indexes.iter_mut() {
        if let Some(x) = v.iter_mut().rev().find(|x| **x >= 0) {
            *x = -1;
        }
    }
    let bad = run(&nnet, &broken, &req, 7).unwrap();
    assert!(difference(&good, &bad).unwrap() > 1e-3);

    // Debug info that puts a row in the wrong sequence: widening refuses.
    let (mini, num_n) = mini_request(&req).unwrap();
    let mut small = compile_computation(
        &nnet,
        &mini,
        &CompilerOptions {
            output_debug_info: true,
        },
    )
    .unwrap();
    optimize(&nnet, &mut small, &OptimizeOptions::default());
    assert!(expand_computation(&nnet, &small, &mini, num_n, false).is_ok());
    let m = (1..small.matrices.len())
        .find(|&m| small.matrices[m].num_rows > 2)
        .unwrap();
    small.matrix_debug_info[m].cindexes[1].1.n ^= 1;
    assert!(expand_computation(&nnet, &small, &mini, num_n, false).is_err());
    // Without debug info it cannot widen at all.
    small.matrix_debug_info.clear();
    assert!(expand_computation(&nnet, &small, &mini, num_n, false).is_err());
}

#[test]
fn not_decomposable_requests_compile_directly() {
    let cfg = "input-node name=input dim=2\n\
        component name=a type=AffineComponent input-dim=4 output-dim=2\n\
        component-node name=a component=a input=Append(Offset(input, -1), input)\n\
        output-node name=output input=a\n";
    let nnet = Nnet::from_config_text(cfg, "<test>", &mut seeded_rng(3)).unwrap();
    let io = vec![("input".to_string(), false)];
    let good = request(&nnet, &io, &["output".into()], 4, 0, 3, false, true);
    assert!(mini_request(&good).is_ok());
    // Sequence 3 has a frame fewer; sequences out of order; two sequences only.
    let mut ragged = good.clone();
    ragged.outputs[0].indexes.pop();
    let mut shuffled = good.clone();
    shuffled.outputs[0].indexes.swap(0, 4);
    let two = request(&nnet, &io, &["output".into()], 2, 0, 3, false, true);
    let compiler = CachingCompiler::new(CachingCompilerOptions::default());
    for r in [&ragged, &shuffled, &two] {
        assert!(mini_request(r).is_err());
        let c = compiler.compile(&nnet, r).unwrap();
        check_computation(&c, &nnet).unwrap();
    }
    let s = compiler.stats();
    assert_eq!((s.misses, s.shortcuts, s.shortcut_failures), (3, 0, 0));
}

#[test]
fn cache_counts_evicts_and_follows_the_network() {
    let cfg = "input-node name=input dim=2\n\
        component name=a type=AffineComponent input-dim=4 output-dim=3 learning-rate=0.1\n\
        component-node name=a component=a input=Append(Offset(input, -1), input)\n\
        component name=r type=TanhComponent dim=3\n\
        component-node name=r component=r input=a\n\
        output-node name=output input=r\n";
    let mut nnet = Nnet::from_config_text(cfg, "<test>", &mut seeded_rng(3)).unwrap();
    let io = vec![("input".to_string(), false)];
    let req = |n| request(&nnet, &io, &["output".into()], n, 0, 4, false, true);
    let (r8, r16, r32) = (req(8), req(16), req(32));
    let compiler = CachingCompiler::new(CachingCompilerOptions {
        cache_capacity: 3,
        ..Default::default()
    });
    let c8 = compiler.compile(&nnet, &r8).unwrap();
    // The 8-sequence request and its 2-sequence request: two misses, one widening.
    let s = compiler.stats();
    assert_eq!((s.hits, s.misses, s.shortcuts), (0, 2, 1));
    assert_eq!(compiler.len(), 2);
    let again = compiler.compile(&nnet, &r8).unwrap();
    assert!(std::sync::Arc::ptr_eq(&c8, &again));
    assert_eq!(compiler.stats().hits, 1);
    // 16 sequences reuses the 2-sequence computation (a hit), 32 evicts the least recently
    // used entry: the 8-sequence one (the 2-sequence one was used after it).
    compiler.compile(&nnet, &r16).unwrap();
    assert_eq!(compiler.stats().hits, 2);
    compiler.compile(&nnet, &r32).unwrap();
    let s = compiler.stats();
    assert_eq!((s.hits, s.misses, s.shortcuts), (3, 4, 3));
    assert_eq!(compiler.len(), 3);
    let c8b = compiler.compile(&nnet, &r8).unwrap();
    assert!(!std::sync::Arc::ptr_eq(&c8, &c8b), "8 was evicted");
    assert!(s.compile_time > std::time::Duration::ZERO);
    // A change of trainability changes the computation (no parameter update): the cache
    // starts afresh.
    let before = compiler.stats().misses;
    compiler.compile(&nnet, &r8).unwrap();
    assert_eq!(compiler.stats().misses, before);
    nnet.set_learning_rate(0.0);
    let frozen = compiler.compile(&nnet, &r8).unwrap();
    assert!(compiler.stats().misses > before);
    // Parameter updates: Backprop commands that hand an updatable component its delta twin
    // (components without parameters get theirs in training too, for self-repair and
    // statistics).
    let updates = |c: &NnetComputation| {
        c.commands
            .iter()
            .filter(|c| match c {
                Command::Backprop(b) if b.update => {
                    nnet.components[b.component].as_updatable().is_some()
                }
                _ => false,
            })
            .count()
    };
    assert!(updates(&c8b) > 0);
    assert_eq!(updates(&frozen), 0);
    // Without the shortcut: no widening, same results.
    let plain = CachingCompiler::new(CachingCompilerOptions {
        use_shortcut: false,
        ..Default::default()
    });
    let p = plain.compile(&nnet, &r8).unwrap();
    assert_eq!(plain.stats().shortcuts, 0);
    let a = run(&nnet, &p, &r8, 1).unwrap();
    let b = run(&nnet, &frozen, &r8, 1).unwrap();
    assert!(difference(&a, &b).unwrap() <= 1e-6);
}

/// The cache is shared between threads.
#[test]
fn cache_is_shared_between_threads() {
    let cfg = "input-node name=input dim=2\n\
        component name=a type=AffineComponent input-dim=2 output-dim=2\n\
        component-node name=a component=a input=input\n\
        output-node name=output input=a\n";
    let nnet = Nnet::from_config_text(cfg, "<test>", &mut seeded_rng(3)).unwrap();
    let compiler = CachingCompiler::new(CachingCompilerOptions::default());
    let io = vec![("input".to_string(), false)];
    std::thread::scope(|s| {
        for k in 0..4 {
            let (compiler, nnet, io) = (&compiler, &nnet, &io);
            s.spawn(move || {
                for n in 3..8 {
                    let r = request(nnet, io, &["output".into()], n + k % 2, 0, 2, false, false);
                    compiler.compile(nnet, &r).unwrap();
                }
            });
        }
    });
    let s = compiler.stats();
    assert_eq!(s.hits + s.misses, 4 * 5 + s.shortcuts);
    assert_eq!(compiler.len(), 7); // 3..=8 sequences, and 2
}

/// `compnet compile --shortcut` prints the widened computation (here the same text as the
/// direct one); requests it cannot widen and contradictory options are clear errors.
#[test]
fn cli_compile_shortcut() {
    let model = Path::new(GOLDEN).join("cases/xvector-small/model.raw");
    let compile = |extra: &[&str]| {
        let mut args = vec![
            "compile".to_string(),
            model.to_str().unwrap().to_string(),
            "--backprop".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!stderr.contains("panicked"), "{stderr}");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            stderr,
        )
    };
    let io = ["--input=input:0..4:-12..20", "--output=output:0..4:0..8"];
    let (ok, direct, e) = compile(&io);
    assert!(ok, "{e}");
    let (ok, widened, e) =
        compile(&[&io[..], &["--shortcut", "--compiler.cache-capacity=3"]].concat());
    assert!(ok, "{e}");
    assert!(widened.contains("(4, -12:20)"), "{widened}");
    assert_eq!(direct, widened);
    let (ok, _, e) = compile(&[
        "--input=input:0..1:-12..20",
        "--output=output:0..1:0..8",
        "--shortcut",
    ]);
    assert!(!ok && e.contains("cannot be compiled by shortcut"), "{e}");
    let (ok, _, e) = compile(&[&io[..], &["--shortcut", "--compiler.use-shortcut=false"]].concat());
    assert!(!ok && e.contains("contradicts"), "{e}");
}

/// The real-size recipe networks in tests/data/kaldi/perf (WSJ TDNN, LibriSpeech TDNN-F,
/// VoxCeleb x-vector with statistics pooling, Switchboard TDNN-LSTM), 3 sequences.
#[test]
fn perf_networks_widen_exactly() {
    let dir = Path::new(GOLDEN).join("perf");
    let mut compared = Vec::new();
    // (config, output frames, derivatives): the x-vector net pools statistics over at least
    // 6 frames; the big LSTM runs forward only (the golden fast-lstmp case has derivatives).
    for (config, len, derivs) in [
        ("wsj_nnet3_tdnn_1a.config", 2, true),
        ("librispeech_chain_tdnnf_1d.config", 2, true),
        ("voxceleb_xvector_1a.config", 6, true),
        ("swbd_chain_tdnn_lstm_1m.config", 2, false),
    ] {
        let path = dir.join(config);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut n =
            Nnet::from_config_text(&text, path.to_str().unwrap(), &mut seeded_rng(0)).unwrap();
        for c in n.components.iter_mut() {
            c.set_test_mode(true, &mut seeded_rng(0));
        }
        let (inputs, outputs) = golden_io(&n);
        let req = request(&n, &inputs, &outputs, 3, 0, len, true, derivs);
        if compare(&n, &req, config) {
            compared.push(config);
        }
    }
    assert_eq!(compared.len(), 4, "{compared:?}");
}

/// With derivative-time limits (`compile::deriv_time`, applied to the 2-sequence computation
/// before widening, as Kaldi does): the widened computation passes the checker and gives
/// what the directly compiled, limited one gives, n-major and t-major requests alike.
#[test]
fn limited_computations_widen_exactly() {
    let mut compared = 0;
    let mut kinds = std::collections::BTreeMap::new();
    for seed in 0..120u64 {
        let net = random_nnet_config(seed, seed % 2 == 0);
        let mut nnet =
            Nnet::from_config_text(&net.config, "<random>", &mut seeded_rng(seed)).unwrap();
        for c in nnet.components.iter_mut() {
            c.set_test_mode(true, &mut seeded_rng(0));
        }
        let (t0, len) = ((seed % 4) as i32, 2 + (seed % 7) as i32);
        let req = request(
            &nnet,
            &net.inputs,
            &net.outputs,
            3 + (seed % 3) as i32,
            t0,
            len,
            seed % 2 == 0,
            true,
        );
        let mut options = CachingCompilerOptions::default();
        options.optimize.min_deriv_time = t0 - 1 + (seed % 2) as i32;
        options.optimize.max_deriv_time_relative = -((seed % 2) as i32);
        let debug = CompilerOptions {
            output_debug_info: true,
        };
        let Ok(mut direct) = compile_computation(&nnet, &req, &debug) else {
            continue;
        };
        compnet::compile::optimize_for_request(&nnet, &req, &mut direct, &options.optimize)
            .unwrap();
        let what = format!("seed {seed} ({})", net.kind);
        let widened = match compile_with_shortcut(&nnet, &req, &options) {
            Ok(Ok(c)) => c,
            Ok(Err(why)) => panic!("{what}: no shortcut: {why}\n{req}"),
            Err(e) => panic!("{what}: the 2-sequence request fails: {e}"),
        };
        check_computation(&widened, &nnet).unwrap_or_else(|e| panic!("{what}: {e}"));
        let _ = run(&nnet, &direct, &req, 7);
        let a = run(&nnet, &direct, &req, 7).unwrap_or_else(|e| panic!("{what}: {e}"));
        let b = run(&nnet, &widened, &req, 7).unwrap_or_else(|e| panic!("{what}: {e}"));
        let d = difference(&a, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(d == 0.0, "{what}: results differ by {d}\n{req}");
        compared += 1;
        *kinds.entry(net.kind).or_insert(0) += 1;
    }
    eprintln!("compared {compared}: {kinds:?}");
    assert!(compared >= 100, "only {compared} compared");
    for k in ["rnn", "lstm-like", "gru"] {
        assert!(kinds.contains_key(k), "no {k} network: {kinds:?}");
    }
}
