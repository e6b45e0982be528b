//! `compnet init --srand=N` draws the initial parameters Kaldi's `nnet3-init --srand=N` draws
//! (glibc's `rand()` stream seeded by `--srand`, one `RandomState` per parameter fill,
//! Box–Muller as Kaldi computes it in float): the model files are byte for byte Kaldi's.
//! Goldens: tests/data/kaldi/init (see the README beside it) and the training goldens'
//! `before.raw` (Kaldi's nnet3-init, the seed in each case's cmd.txt).

use compnet::testing::cli::succeeds;
use std::path::{Path, PathBuf};

const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const KALDI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compnet-kaldi-init-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `compnet init` in `dir` with `args` (the output last) must write exactly `golden`.
fn init_equals(dir: &Path, args: &[&str], golden: &Path) {
    let out = tmp(&format!(
        "{}.out",
        golden.file_name().unwrap().to_string_lossy()
    ));
    let mut argv: Vec<String> = vec!["init".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    argv.push(out.display().to_string());
    let out_cmd = std::process::Command::new(BIN)
        .current_dir(dir)
        .args(&argv)
        .output()
        .expect("run compnet");
    assert!(
        out_cmd.status.success(),
        "compnet {argv:?} failed:\n{}",
        String::from_utf8_lossy(&out_cmd.stderr)
    );
    let (ours, theirs) = (bytes(&out), bytes(golden));
    if ours != theirs {
        let (o, t) = (
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
        );
        let first = o
            .lines()
            .zip(t.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "compnet {argv:?} differs from Kaldi's {} (first at line {}):\nours    {}\nKaldi's {}",
            golden.display(),
            first + 1,
            o.lines().nth(first).unwrap_or(""),
            t.lines().nth(first).unwrap_or("")
        );
    }
}

/// Affine, NaturalGradientAffine (bias-mean), a zero bias-stddev, Linear and a random
/// FixedAffine (odd column counts: the last element of a row from one `RandGauss`).
#[test]
fn affine_family_is_kaldis() {
    let dir = Path::new(KALDI).join("init");
    for s in [0, 3] {
        init_equals(
            &dir,
            &["--binary=false", &format!("--srand={s}"), "affine.config"],
            &dir.join(format!("affine_srand{s}.txt")),
        );
    }
}

/// Tdnn with and without bias, BatchNorm, PerElementScale (plain and natural-gradient),
/// PerElementOffset, FixedScale, FixedBias, ConstantFunction.
#[test]
fn tdnn_and_per_element_components_are_kaldis() {
    let dir = Path::new(KALDI).join("init");
    for s in [0, 3] {
        init_equals(
            &dir,
            &["--binary=false", &format!("--srand={s}"), "tdnn.config"],
            &dir.join(format!("tdnn_srand{s}.txt")),
        );
    }
}

/// LstmNonlinearity, the GRU and output-GRU nonlinearities, BlockAffine, RepeatedAffine
/// (plain and natural-gradient), Constant.
#[test]
fn recurrent_and_block_components_are_kaldis() {
    let dir = Path::new(KALDI).join("init");
    for s in [0, 3] {
        init_equals(
            &dir,
            &["--binary=false", &format!("--srand={s}"), "rnn.config"],
            &dir.join(format!("rnn_srand{s}.txt")),
        );
    }
}

/// TimeHeightConvolution (random, and init-unit, which still fills its bias), the old
/// ConvolutionComponent, a CompositeComponent's nested components, ScaleAndOffset.
#[test]
fn convolutions_and_composite_are_kaldis() {
    let dir = Path::new(KALDI).join("init");
    for s in [0, 3] {
        init_equals(
            &dir,
            &["--binary=false", &format!("--srand={s}"), "conv.config"],
            &dir.join(format!("conv_srand{s}.txt")),
        );
    }
}

/// The binary form, and a config applied to an existing model (the stream starts at
/// `srand(--srand)` again and only the new components draw).
#[test]
fn binary_output_and_added_layers_are_kaldis() {
    let dir = Path::new(KALDI).join("init");
    init_equals(
        &dir,
        &["--srand=5", "affine.config"],
        &dir.join("affine_srand5.raw"),
    );
    init_equals(
        &dir,
        &[
            "--binary=false",
            "--srand=5",
            "affine_srand5.raw",
            "add.config",
        ],
        &dir.join("add_srand5.txt"),
    );
}

/// The inference goldens' networks (matrix and vector files, dropout, LSTM layers, the
/// pre-xconfig convolution, composite and distribute components).
#[test]
fn golden_case_networks_are_kaldis() {
    for case in [
        "misc-components",
        "composite-distribute",
        "old-cnn",
        "fast-lstmp",
    ] {
        let dir = Path::new(KALDI).join("cases").join(case);
        init_equals(
            &dir,
            &["--binary=false", "--srand=1", "net.config"],
            &Path::new(KALDI)
                .join("init")
                .join(format!("case_{case}_srand1.txt")),
        );
    }
}

/// The training goldens start from Kaldi's `nnet3-init --srand=N` (N in cmd.txt).
#[test]
fn training_goldens_start_where_kaldi_does() {
    let mut checked = 0;
    for case in [
        "affine-plain",
        "ng-batchnorm",
        "momentum-l2",
        "backstitch",
        "quadratic",
    ] {
        let dir = Path::new(KALDI).join("train").join(case);
        let cmd = std::fs::read_to_string(dir.join("cmd.txt")).unwrap();
        let srand = cmd
            .lines()
            .find_map(|l| l.strip_prefix("nnet3-init --srand="))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{case}: no nnet3-init line in cmd.txt"));
        init_equals(
            &dir,
            &[&format!("--srand={srand}"), "net.config"],
            &dir.join("before.raw"),
        );
        checked += 1;
    }
    assert_eq!(checked, 5);
}

/// Different seeds give different models (and the default is Kaldi's 0, which glibc treats
/// as 1).
#[test]
fn seeds_differ_and_zero_is_one() {
    let dir = Path::new(KALDI).join("init");
    let cfg = dir.join("affine.config");
    let (a, b) = (tmp("s0.txt"), tmp("s1.txt"));
    succeeds(
        BIN,
        &[
            "init",
            "--binary=false",
            cfg.to_str().unwrap(),
            a.to_str().unwrap(),
        ],
    );
    succeeds(
        BIN,
        &[
            "init",
            "--binary=false",
            "--srand=1",
            cfg.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
    );
    assert_eq!(bytes(&a), bytes(&dir.join("affine_srand0.txt")));
    assert_eq!(bytes(&a), bytes(&b));
    assert_ne!(bytes(&a), bytes(&dir.join("affine_srand3.txt")));
}
