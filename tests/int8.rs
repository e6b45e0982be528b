//! int8 inference (`compnet compute --quantize=int8`, `matrix::int8`) on the golden networks:
//! - the int8 outputs are within a stated tolerance of the float outputs (Kaldi's for
//!   chunked computation, compnet's for looped), for feed-forward (TDNN, TDNN-F) and
//!   recurrent (LSTM, fast-LSTMP) networks;
//! - without the option (or with `--quantize=none`) the outputs are bit-identical to a
//!   float computation of a model that never had int8 switched on;
//! - option parsing: Kaldi's forms, the last value wins, a bad value is a usage error.
//!
//! Tolerance: the outputs are log-probabilities; per element
//! `|int8 − float| ≤ 0.2 · (1 + |float|)`, and 0.02 on average. Measured: at most 0.14
//! (TDNN-F, the deepest of these untrained networks), 0.011 on average; 0.02 / 0.004 for the
//! others. What int8 costs on real-size networks is
//! measured in docs/PERFORMANCE.md ("int8 inference").

use compnet::io::table::SequentialTableReader;
use compnet::matrix::Matrix;
use compnet::nnet::Nnet;
use compnet::run::chunked::{ChunkComputer, IvectorSource, NnetSimpleComputationOptions};
use compnet::testing::golden::golden_dir;
use std::path::{Path, PathBuf};

const TOL: (f32, f32) = (0.2, 0.02);

fn read_archive(path: &Path) -> Vec<(String, Matrix)> {
    let spec = format!("ark:{}", path.display());
    SequentialTableReader::<Matrix>::open(&spec)
        .unwrap_or_else(|e| panic!("open {spec}: {e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("read {spec}: {e}")))
        .collect()
}

fn case(name: &str) -> PathBuf {
    golden_dir().join("cases").join(name)
}

fn case_options(case: &Path) -> Vec<String> {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).expect("json"))
            .expect("parse case.json");
    json.get("compute_options")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn compute(case: &Path, opts: &[&str], out: &Path) {
    let mut args = vec!["compnet".to_string(), "compute".to_string()];
    args.extend(case_options(case));
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push(case.join("model.raw").display().to_string());
    args.push(format!("ark:{}", case.join("feats.txt").display()));
    args.push(format!("ark:{}", out.display()));
    match compnet::cli::main_with_args(args.clone()) {
        Ok(0) => {}
        other => panic!("{args:?}: {other:?}"),
    }
}

/// Largest and mean |a − b| / (1 + |b|); panics past `tol.0` (largest) or `tol.1` (mean).
fn differences(
    what: &str,
    ours: &[(String, Matrix)],
    reference: &[(String, Matrix)],
    tol: (f32, f32),
) -> (f32, f32) {
    assert_eq!(ours.len(), reference.len(), "{what}: utterances");
    let (mut worst, mut sum, mut n) = (0.0f32, 0.0f64, 0usize);
    for ((k1, a), (k2, b)) in ours.iter().zip(reference) {
        assert_eq!(k1, k2, "{what}");
        assert_eq!(
            (a.num_rows(), a.num_cols()),
            (b.num_rows(), b.num_cols()),
            "{what} {k1}"
        );
        for (x, y) in a.to_vec().iter().zip(b.to_vec()) {
            let d = (x - y).abs() / (1.0 + y.abs());
            assert!(d <= tol.0, "{what} {k1}: {x} vs {y}");
            worst = worst.max(d);
            sum += d as f64;
            n += 1;
        }
    }
    let mean = (sum / n.max(1) as f64) as f32;
    assert!(mean <= tol.1, "{what}: mean relative difference {mean}");
    (worst, mean)
}

const CASES: &[&str] = &[
    "tdnn-component",
    "tdnnf",
    "simplest",
    "fast-lstmp",
    "lstm-primitives",
];

#[test]
fn int8_outputs_are_close_to_float_outputs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut report = Vec::new();
    for name in CASES {
        let dir = case(name);
        let kaldi = read_archive(&dir.join("output.txt"));
        for (label, float_opts, int8_opts) in [
            ("chunked", vec![], vec!["--quantize=int8"]),
            (
                "looped",
                vec!["--looped"],
                vec!["--quantize", "int8", "--looped"],
            ),
        ] {
            // The float reference: Kaldi's own output for chunked computation; for looped,
            // compnet's float output of the same mode (tests/looped.rs ties it to Kaldi).
            let reference = if float_opts.is_empty() {
                kaldi.clone()
            } else {
                let out = tmp.path().join(format!("{name}-{label}-float.ark"));
                compute(&dir, &float_opts, &out);
                read_archive(&out)
            };
            let out = tmp.path().join(format!("{name}-{label}.ark"));
            compute(&dir, &int8_opts, &out);
            let ours = read_archive(&out);
            let (w, m) = differences(&format!("{name} {label}"), &ours, &reference, TOL);
            // int8 changes the outputs: a computation that silently stayed in floats fails.
            assert!(
                w > 1e-5,
                "{name} {label}: int8 output equals the float one ({w})"
            );
            report.push(format!("{name}/{label}: {w:.2e} (mean {m:.2e})"));
        }
    }
    eprintln!("largest (mean) relative differences: {}", report.join(", "));
}

#[test]
fn without_the_option_outputs_are_bit_identical() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in CASES {
        let dir = case(name);
        let plain = tmp.path().join(format!("{name}-plain.ark"));
        let none = tmp.path().join(format!("{name}-none.ark"));
        compute(&dir, &[], &plain);
        compute(&dir, &["--quantize=int8", "--quantize=none"], &none);
        let (a, b) = (read_archive(&plain), read_archive(&none));
        assert_eq!(a.len(), b.len());
        for ((k, x), (_, y)) in a.iter().zip(&b) {
            let bits = |m: &Matrix| m.to_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(x), bits(y), "{name} {k}");
        }
    }
}

/// Switching int8 on and off again leaves a model whose float outputs are those of a model
/// that never had it, to the bit; on, the outputs differ.
#[test]
fn switching_int8_off_restores_float_products() {
    let dir = case("tdnn-component");
    let path = dir.join("model.raw");
    let feats = read_archive(&dir.join("feats.txt"));
    let opts = NnetSimpleComputationOptions::default();
    let outputs = |nnet: Nnet| {
        let mut cc = ChunkComputer::new(nnet, &opts, "output", None).expect("computer");
        feats
            .iter()
            .map(|(_, f)| {
                cc.compute(f, IvectorSource::None)
                    .expect("compute")
                    .to_vec()
            })
            .collect::<Vec<_>>()
    };
    let fresh = Nnet::read_model_file(path.to_str().expect("path"))
        .expect("model")
        .nnet;
    let mut switched = fresh.clone();
    assert!(switched.set_int8_inference(true) >= 2);
    let int8 = outputs(switched.clone());
    switched.set_int8_inference(false);
    let bits = |v: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        v.iter()
            .map(|r| r.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    let plain = bits(outputs(fresh));
    assert_eq!(bits(outputs(switched)), plain);
    assert_ne!(bits(int8), plain);
}

#[test]
fn quantize_option_forms() {
    let dir = case("simplest");
    let tmp = tempfile::tempdir().expect("tempdir");
    let model = dir.join("model.raw").display().to_string();
    let feats = format!("ark:{}", dir.join("feats.txt").display());
    let run = |opts: &[&str], out: &str| {
        let mut args = vec!["compnet".to_string(), "compute".to_string()];
        args.extend(opts.iter().map(|s| s.to_string()));
        args.extend([
            model.clone(),
            feats.clone(),
            format!("ark:{}", tmp.path().join(out).display()),
        ]);
        compnet::cli::main_with_args(args)
    };
    let bytes = |out: &str| std::fs::read(tmp.path().join(out)).expect("output");
    assert_eq!(run(&["--quantize=int8"], "a.ark").ok(), Some(0));
    assert_eq!(run(&["--quantize", "int8"], "b.ark").ok(), Some(0));
    assert_eq!(
        run(&["--quantize=none", "--quantize=int8"], "c.ark").ok(),
        Some(0)
    );
    assert_eq!(run(&[], "d.ark").ok(), Some(0));
    assert_eq!(bytes("a.ark"), bytes("b.ark"));
    assert_eq!(bytes("a.ark"), bytes("c.ark"));
    assert_ne!(bytes("a.ark"), bytes("d.ark"));
    for bad in ["--quantize=int4", "--quantize=INT8", "--quantize="] {
        let e = run(&[bad], "e.ark").expect_err(bad).to_string();
        assert!(
            e.contains("--quantize") && e.contains("none or int8"),
            "{bad}: {e}"
        );
    }
    // eval takes the option too, and refuses the same values.
    let e = compnet::cli::main_with_args(
        [
            "compnet",
            "eval",
            "--quantize=int16",
            &model,
            "no-such-data",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    )
    .expect_err("eval")
    .to_string();
    assert!(e.contains("--quantize=int16"), "{e}");
}

/// An affine layer and the ReLU in place after it run as one pass with 8-bit products
/// (`NnetComputer`'s fusion, `int8::forward_bias` with `relu`): the outputs are bit-identical to
/// running the two commands one after the other (`without_fusion`), the pairs are fused
/// (both affine+ReLU pairs of this network), and with float products nothing is fused.
#[test]
fn fused_affine_relu_equals_the_two_steps() {
    use compnet::compile::{
        compile_computation, optimize, CompilerOptions, ComputationRequest, IoSpecification,
        OptimizeOptions,
    };
    use compnet::nnet::Index;
    use compnet::run::NnetComputer;
    let config = "input-node name=input dim=6
component name=a type=NaturalGradientAffineComponent input-dim=18 output-dim=20
component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 1))
component name=r type=RectifiedLinearComponent dim=20
component-node name=r component=r input=a
component name=n type=NormalizeComponent dim=20
component-node name=n component=n input=r
component name=b type=AffineComponent input-dim=40 output-dim=16
component-node name=b component=b input=Append(Offset(n, -1), n)
component name=r2 type=RectifiedLinearComponent dim=16
component-node name=r2 component=r2 input=b
component name=o type=AffineComponent input-dim=16 output-dim=5
component-node name=o component=o input=r2
component name=s type=LogSoftmaxComponent dim=5
component-node name=s component=s input=o
output-node name=output input=s
";
    let mut nnet =
        Nnet::from_config_text(config, "test.config", &mut compnet::random::seeded_rng(5))
            .expect("config");
    let req = ComputationRequest {
        inputs: vec![IoSpecification {
            name: "input".into(),
            indexes: (0..3)
                .flat_map(|n| (-2..=10).map(move |t| Index::new(n, t, 0)))
                .collect(),
            has_deriv: false,
        }],
        outputs: vec![IoSpecification {
            name: "output".into(),
            indexes: (0..3)
                .flat_map(|n| (0..=9).map(move |t| Index::new(n, t, 0)))
                .collect(),
            has_deriv: false,
        }],
        ..Default::default()
    };
    let mut comp = compile_computation(&nnet, &req, &CompilerOptions::default()).expect("compile");
    optimize(&nnet, &mut comp, &OptimizeOptions::default());
    let x = compnet::testing::numeric::gauss(39, 6, 17);
    let run = |nnet: &Nnet, fuse: bool| {
        let c = NnetComputer::new(&comp, nnet, None).poison_undefined();
        let mut c = if fuse { c } else { c.without_fusion() };
        c.accept_input("input", x.clone()).unwrap();
        c.run_forward().unwrap();
        let bits: Vec<u32> = c
            .output("output")
            .unwrap()
            .to_vec()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        (bits, c.num_fused())
    };
    let (float_fused, n) = run(&nnet, true);
    assert_eq!(n, 0, "float products are never fused");
    assert_eq!(float_fused, run(&nnet, false).0);
    nnet.set_int8_inference(true);
    let (fused, n) = run(&nnet, true);
    let (alone, n0) = run(&nnet, false);
    assert_eq!((n, n0), (2, 0));
    assert_eq!(fused, alone, "fused affine+ReLU differs from the two steps");
    assert_ne!(fused, float_fused, "the int8 path ran");
}
