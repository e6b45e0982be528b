//! `compnet fit` and `compnet eval` end to end, on the bundled example's data: Kaldi's
//! stepper equals `compnet train`, runs are reproducible, resume is bit-identical, a killed
//! run leaves a loadable checkpoint, bad input is a clear error.

use compnet::testing::cli;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const EX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train");

fn compnet(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run compnet")
}

fn ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&cli::succeeds(BIN, args).stdout).into_owned()
}

fn fails(args: &[&str]) -> String {
    cli::fails(BIN, args)
}

/// A data directory (feats.ark + post.ark) from the example's `which` set.
fn data_dir(root: &Path, which: &str) -> String {
    let d = root.join(which);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(format!("{EX}/{which}_feats.ark"), d.join("feats.ark")).unwrap();
    std::fs::copy(format!("{EX}/{which}_post.txt"), d.join("post.ark")).unwrap();
    d.to_string_lossy().into_owned()
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn read(p: impl AsRef<Path>) -> Vec<u8> {
    std::fs::read(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    train: String,
    valid: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let train = data_dir(&root, "train");
    let valid = data_dir(&root, "valid");
    Setup {
        _dir: dir,
        root,
        train,
        valid,
    }
}

/// `0.raw` (the example net, `--srand=1`) and the training egs merged into minibatches of 32
/// (`merged.ark`) under the test's root, as `compnet train` would get them; returns the egs'
/// rspecifier.
fn initial_model_and_egs(t: &Setup) -> String {
    let r = |f: &str| s(&t.root.join(f));
    ok(&[
        "init",
        "--srand=1",
        &format!("{EX}/net.config"),
        &r("0.raw"),
    ]);
    ok(&[
        "get-egs",
        "--num-pdfs=8",
        "--left-context=4",
        "--right-context=4",
        "--num-frames=8",
        &format!("ark:{EX}/train_feats.ark"),
        &format!("ark:{EX}/train_post.txt"),
        &format!("ark:{}", r("egs.ark")),
    ]);
    ok(&[
        "merge-egs",
        "--minibatch-size=32",
        &format!("ark:{}", r("egs.ark")),
        &format!("ark:{}", r("merged.ark")),
    ]);
    format!("ark:{}", r("merged.ark"))
}

#[test]
fn natural_gradient_stepper_equals_compnet_train() {
    let t = setup();
    let r = |f: &str| s(&t.root.join(f));
    let egs = initial_model_and_egs(&t);
    ok(&[
        "train",
        "--srand=3",
        "--momentum=0.5",
        &r("0.raw"),
        &egs,
        &r("train.raw"),
    ]);
    ok(&[
        "fit",
        &r("0.raw"),
        "--train",
        &egs,
        "--out",
        &r("fit"),
        "--stepper=ng",
        "--momentum=0.5",
        "--num-epochs=1",
        "--minibatch-size=1",
        "--shuffle=false",
        "--learning-rate=0.002",
        "--srand=3",
    ]);
    let (a, b) = (read(r("train.raw")), read(r("fit/final.raw")));
    assert!(a == b, "fit --stepper=ng differs from compnet train");
    // And it trained: the model moved from the initial one.
    assert!(read(r("0.raw")) != b);
}

fn fit_args<'a>(t: &'a Setup, out: &'a str, extra: &[&'a str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "fit".into(),
        format!("{EX}/net.config"),
        "--train".into(),
        t.train.clone(),
        "--valid".into(),
        t.valid.clone(),
        "--out".into(),
        out.into(),
        "--srand=5".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_fit(args: &[String]) -> String {
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    ok(&a)
}

#[test]
fn same_command_twice_gives_identical_files_and_resume_is_bit_identical() {
    let t = setup();
    let extra = [
        "--stepper=adam",
        "--lr-per=minibatch",
        "--learning-rate=0.004:0.002",
        "--minibatch-size=32*2:64",
        "--num-epochs=3",
        "--gradient-noise=0.01",
        "--dropout-schedule=0,0.2@0.5,0",
    ];
    let a = s(&t.root.join("a"));
    let b = s(&t.root.join("b"));
    let c = s(&t.root.join("c"));
    run_fit(&fit_args(&t, &a, &extra));
    run_fit(&fit_args(&t, &b, &extra));
    for f in [
        "final.raw",
        "metrics.jsonl",
        "curves.svg",
        "checkpoint.ckpt",
        "best.raw",
    ] {
        assert!(
            read(format!("{a}/{f}")) == read(format!("{b}/{f}")),
            "{f} differs between two identical runs"
        );
    }
    // Interrupted mid-epoch (epoch 2 of 3), then resumed.
    let mut stop = extra.to_vec();
    stop.push("--max-minibatches=27");
    let out = run_fit(&fit_args(&t, &c, &stop));
    assert!(out.contains("stopped early"), "{out}");
    assert!(read(format!("{c}/final.raw")) != read(format!("{a}/final.raw")));
    let mut resume = extra.to_vec();
    resume.push("--resume");
    run_fit(&fit_args(&t, &c, &resume));
    for f in ["final.raw", "metrics.jsonl", "checkpoint.ckpt"] {
        assert!(
            read(format!("{a}/{f}")) == read(format!("{c}/{f}")),
            "{f} differs between the uninterrupted and the resumed run"
        );
    }
    // Three epochs, each with validation figures; the objective improved.
    let metrics = String::from_utf8(read(format!("{a}/metrics.jsonl"))).unwrap();
    let rows: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    let v = |i: usize| rows[i]["valid_objective"].as_f64().unwrap();
    assert!(v(2) > v(0), "{metrics}");
    assert_eq!(rows[0]["learning_rate"].as_f64(), Some(0.004));
    assert_eq!(rows[2]["learning_rate"].as_f64(), Some(0.002));
}

#[test]
fn every_stepper_learns_and_eval_agrees_with_fit() {
    let t = setup();
    for (stepper, lr) in [
        ("sgd", "0.5"),
        ("momentum", "0.05"),
        ("nesterov", "0.05"),
        ("adagrad", "0.02"),
        ("rmsprop", "0.002"),
        ("adam", "0.004"),
        ("adamw", "0.004"),
        ("ng", "0.002"),
    ] {
        let out = s(&t.root.join(stepper));
        let lr_per = if stepper == "ng" {
            "sample"
        } else {
            "minibatch"
        };
        let text = run_fit(&fit_args(
            &t,
            &out,
            &[
                &format!("--stepper={stepper}"),
                &format!("--learning-rate={lr}"),
                &format!("--lr-per={lr_per}"),
                "--num-epochs=3",
            ],
        ));
        let acc: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("validation accuracy "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{text}"));
        assert!(acc > 0.8, "{stepper}: validation accuracy {acc}");
        if stepper == "adam" {
            let e = ok(&["eval", &format!("{out}/final.raw"), &t.valid]);
            let word = format!("accuracy {acc} ");
            // fit prints 6 significant digits, as eval does.
            assert!(e.contains(&word[..word.len() - 1]), "{e} vs {text}");
        }
    }
}

#[test]
fn toml_options_and_the_command_line_wins() {
    let t = setup();
    let toml = t.root.join("fit.toml");
    std::fs::write(
        &toml,
        "num-epochs = 1\nstepper = \"adam\"\nlearning-rate = \"0.002\"\nlr-per = \"minibatch\"\n",
    )
    .unwrap();
    let out = s(&t.root.join("o"));
    let cfg = format!("--config={}", s(&toml));
    run_fit(&fit_args(&t, &out, &[&cfg, "--num-epochs", "2"]));
    let metrics = String::from_utf8(read(format!("{out}/metrics.jsonl"))).unwrap();
    assert_eq!(metrics.lines().count(), 2, "{metrics}");
    std::fs::write(&toml, "num-epochs = 1\nnot-an-option = 3\n").unwrap();
    let a = fit_args(&t, &out, &[&cfg]);
    let e = fails(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(
        e.contains("fit.toml:2:") && e.contains("not-an-option"),
        "{e}"
    );
}

#[test]
fn a_killed_run_leaves_a_loadable_checkpoint() {
    let t = setup();
    let out = s(&t.root.join("k"));
    let args = fit_args(
        &t,
        &out,
        &[
            "--stepper=adam",
            "--lr-per=minibatch",
            "--learning-rate=0.002",
            "--minibatch-size=1",
            "--checkpoint-every=1mb",
            "--num-epochs=50",
        ],
    );
    let ckpt = format!("{out}/checkpoint.ckpt");
    for delay_ms in [30, 170, 410] {
        let mut child = Command::new(BIN)
            .args(&args[..])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while !Path::new(&ckpt).exists() {
            assert!(t0.elapsed().as_secs() < 60, "no checkpoint appeared");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        // The checkpoint that is there loads: resume for a few minibatches more.
        let mut resume = args.clone();
        resume.push("--resume".into());
        resume.push("--max-minibatches=100000".into());
        resume.retain(|a| a != "--num-epochs=50");
        resume.push("--num-epochs=50".into());
        let mut child2 = Command::new(BIN)
            .args(&resume[..])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = child2.kill();
        let o = child2.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("Resuming from"), "{err}");
        assert!(!err.contains("ERROR"), "{err}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let t = setup();
    let out = s(&t.root.join("bad"));
    // Features of another dimension than the network's input.
    let cfg12 = t.root.join("net12.config");
    let text = std::fs::read_to_string(format!("{EX}/net.config")).unwrap();
    std::fs::write(
        &cfg12,
        text.replace(
            "input-node name=input dim=13",
            "input-node name=input dim=12",
        )
        .replace("input-dim=65", "input-dim=60"),
    )
    .unwrap();
    let mut a = fit_args(&t, &out, &[]);
    a[1] = s(&cfg12);
    let e = fails(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(
        e.contains("feats.ark") && e.contains("dimension 13") && e.contains("12"),
        "{e}"
    );
    // Labels beyond the output dimension.
    let cfg4 = t.root.join("net4.config");
    std::fs::write(
        &cfg4,
        text.replace("output-dim=8", "output-dim=4")
            .replace("dim=8", "dim=4"),
    )
    .unwrap();
    a[1] = s(&cfg4);
    let e = fails(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(
        e.contains("post.ark") && e.contains("outside 0..4") && e.contains("utterance"),
        "{e}"
    );
    // An empty split.
    let empty = t.root.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("feats.ark"), b"").unwrap();
    std::fs::write(empty.join("post.ark"), b"").unwrap();
    let mut a = fit_args(&t, &out, &[]);
    a[3] = s(&empty);
    let e = fails(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(e.contains("empty") && e.contains(&s(&empty)), "{e}");
    // A schedule that does not parse.
    let a = fit_args(&t, &out, &["--learning-rate=0.1:fast*3"]);
    let e = fails(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(e.contains("--learning-rate") && e.contains("item 2"), "{e}");
    // A checkpoint from another network.
    let good = s(&t.root.join("good"));
    run_fit(&fit_args(&t, &good, &["--num-epochs=1", "--stepper=adam"]));
    let other = t.root.join("other.config");
    std::fs::write(
        &other,
        text.replace("output-dim=64", "output-dim=32")
            .replace("input-dim=192", "input-dim=96")
            .replace("dim=64", "dim=32")
            .replace("input-dim=64", "input-dim=32"),
    )
    .unwrap();
    let mut a = fit_args(&t, &good, &["--num-epochs=2", "--stepper=adam", "--resume"]);
    a[1] = s(&other);
    let e = fails(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(
        e.contains("checkpoint.ckpt") && e.contains("another network"),
        "{e}"
    );
    // The checkpoint is still there and loadable by the right network.
    run_fit(&fit_args(
        &t,
        &good,
        &["--num-epochs=2", "--stepper=adam", "--resume"],
    ));
}

fn metrics_rows(dir: &str) -> Vec<serde_json::Value> {
    String::from_utf8(read(format!("{dir}/metrics.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn auto_adjust_early_stopping_and_decay_act_as_documented() {
    let t = setup();
    // AutoAdjust: an improvement of 1000 is never reached, so from the second epoch on the
    // rate halves after every epoch (the first epoch sets the best).
    let a = s(&t.root.join("auto"));
    run_fit(&fit_args(
        &t,
        &a,
        &[
            "--num-epochs=4",
            "--learning-rate=0.002",
            "--auto-adjust=0.5",
            "--auto-adjust-threshold=1000",
            "--load-best=false",
        ],
    ));
    let lr: Vec<f64> = metrics_rows(&a)
        .iter()
        .map(|r| r["learning_rate"].as_f64().unwrap())
        .collect();
    assert_eq!(lr, vec![0.002, 0.002, 0.001, 0.0005]);
    // Early stopping: with a zero rate after epoch 1 only the BatchNorm statistics still
    // change, which does not improve the validation objective by the threshold, so
    // patience 2 stops after epoch 3.
    let e = s(&t.root.join("early"));
    let out = run_fit(&fit_args(
        &t,
        &e,
        &[
            "--num-epochs=10",
            "--learning-rate=0.002:0",
            "--patience=2",
            "--auto-adjust-threshold=0.01",
            "--stepper=sgd",
        ],
    ));
    assert!(out.contains("stopped early"), "{out}");
    assert_eq!(metrics_rows(&e).len(), 3);
    // Kaldi's exponential decay: the last minibatch's rate is close to the final one.
    let d = s(&t.root.join("decay"));
    run_fit(&fit_args(
        &t,
        &d,
        &[
            "--num-epochs=2",
            "--initial-effective-lrate=0.004",
            "--final-effective-lrate=0.0004",
        ],
    ));
    let rows = metrics_rows(&d);
    let (first, last) = (
        rows[0]["learning_rate"].as_f64().unwrap(),
        rows[1]["learning_rate"].as_f64().unwrap(),
    );
    assert!(first < 0.004 && first > 0.0012, "{first}");
    assert!(last > 0.0004 && last < 0.0005, "{last}");
}

/// The text form of one component of a model.
fn component_text(model: &str, name: &str) -> String {
    let text = ok(&["copy", "--binary=false", model, "-"]);
    let start = text
        .find(&format!("<ComponentName> {name} "))
        .unwrap_or_else(|| panic!("no {name}"));
    let rest = &text[start + 10..];
    let end = rest.find("<ComponentName>").unwrap_or(rest.len());
    rest[..end].to_string()
}

#[test]
fn frozen_components_do_not_move_under_any_stepper() {
    let t = setup();
    let text = std::fs::read_to_string(format!("{EX}/net.config")).unwrap();
    let cfg = t.root.join("frozen.config");
    std::fs::write(
        &cfg,
        text.replace(
            "input-dim=192 output-dim=64 learning-rate=0.002",
            "input-dim=192 output-dim=64 learning-rate=0.002 learning-rate-factor=0",
        ),
    )
    .unwrap();
    let init = s(&t.root.join("init.raw"));
    ok(&["init", "--srand=1", &s(&cfg), &init]);
    for stepper in ["adam", "momentum", "ng"] {
        let out = s(&t.root.join(stepper));
        let mut a = fit_args(
            &t,
            &out,
            &[&format!("--stepper={stepper}"), "--num-epochs=1"],
        );
        a[1] = init.clone();
        run_fit(&a);
        let fin = format!("{out}/final.raw");
        assert_eq!(
            component_text(&init, "tdnn2.affine"),
            component_text(&fin, "tdnn2.affine"),
            "{stepper} moved a frozen component"
        );
        assert_ne!(
            component_text(&init, "tdnn1.affine"),
            component_text(&fin, "tdnn1.affine"),
            "{stepper} did not train"
        );
    }
}

/// `--min-deriv-time` / `--max-deriv-time-relative` (Kaldi's derivative-time limits) on a
/// recurrent network: `fit --stepper=ng` gives `compnet train --optimization.*`'s model
/// byte for byte on the same minibatches, and the limits change what is trained.
#[test]
fn derivative_time_limits_in_fit_equal_compnet_train() {
    let t = setup();
    let r = |f: &str| s(&t.root.join(f));
    let case = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kaldi/train/lstm-deriv-time"
    );
    let before = format!("{case}/before.raw");
    let egs = format!("ark:{case}/egs.ark");
    ok(&[
        "train",
        "--srand=1",
        "--optimization.min-deriv-time=-2",
        "--optimization.max-deriv-time-relative=-3",
        &before,
        &egs,
        &r("train.raw"),
    ]);
    let fit = |out: &str, limits: &[&str]| {
        let mut a = vec![
            "fit",
            &before,
            "--train",
            &egs,
            "--out",
            out,
            "--stepper=ng",
            "--num-epochs=1",
            "--minibatch-size=1",
            "--shuffle=false",
            "--learning-rate=0.001",
            "--srand=1",
        ];
        a.extend_from_slice(limits);
        ok(&a);
    };
    let (limited, free) = (r("fit"), r("fit-free"));
    fit(
        &limited,
        &["--min-deriv-time=-2", "--max-deriv-time-relative=-3"],
    );
    fit(&free, &[]);
    let ours = read(format!("{limited}/final.raw"));
    assert!(
        read(r("train.raw")) == ours,
        "fit with derivative-time limits differs from compnet train with them"
    );
    assert!(read(format!("{free}/final.raw")) != ours);
    // The same limits from the TOML file.
    let toml = r("fit.toml");
    std::fs::write(&toml, "min-deriv-time = -2\nmax-deriv-time-relative = -3\n").unwrap();
    let from_toml = r("fit-toml");
    fit(&from_toml, &["--config", &toml]);
    assert!(read(format!("{from_toml}/final.raw")) == ours);
    let err = fails(&[
        "fit",
        &before,
        "--train",
        &egs,
        "--out",
        &r("bad"),
        "--min-deriv-time=5",
        "--max-deriv-time=4",
    ]);
    assert!(err.contains("--min-deriv-time=5"), "{err}");
}

/// Per-utterance labels from the command line: `--help` says how they are given, the
/// bundled pooling network learns from `utt2label` with a range of chunk widths, and a
/// label for an utterance the features lack is an error naming the file, line and key.
#[test]
fn per_utterance_labels_train_a_pooling_network() {
    let help = ok(&["fit", "--help"]);
    assert!(
        help.contains("utt2label") && help.contains("MIN,MAX"),
        "{help}"
    );
    let digits = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/digits");
    let t = tempfile::tempdir().unwrap();
    let out = s(&t.path().join("xv"));
    let config = format!("{digits}/xvector.config");
    let train = format!("{digits}/train");
    let valid = format!("{digits}/valid");
    let text = ok(&[
        "fit",
        &config,
        "--train",
        &train,
        "--valid",
        &valid,
        "--out",
        &out,
        "--labels=utterance",
        "--chunk-width=7,8",
        "--num-epochs=2",
        "--learning-rate=0.002",
        "--srand=1",
    ]);
    let acc: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("validation accuracy "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(acc > 0.8, "validation accuracy {acc}");
    // One output row per chunk: eval counts one frame per image of the validation set.
    let e = ok(&[
        "eval",
        "--labels=utterance",
        &format!("{out}/final.raw"),
        &valid,
    ]);
    assert!(e.contains("over 299 frames"), "{e}");
    // A label for an utterance that is not in feats.ark.
    let bad = t.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(format!("{valid}/feats.ark"), bad.join("feats.ark")).unwrap();
    let mut labels = std::fs::read_to_string(format!("{valid}/utt2label")).unwrap();
    labels.push_str("not-an-image 3\n");
    std::fs::write(bad.join("utt2label"), labels).unwrap();
    let err = fails(&[
        "fit",
        &config,
        "--train",
        &s(&bad),
        "--out",
        &s(&t.path().join("o")),
        "--num-epochs=1",
    ]);
    assert!(
        err.contains("utt2label:300:") && err.contains("not-an-image"),
        "{err}"
    );
}

/// Kaldi's natural-gradient stepper (with momentum): interrupted mid-epoch and resumed,
/// the run ends with the same model and checkpoint, byte for byte, as an uninterrupted one
/// (the checkpoint holds the Fisher estimates, the momentum and the generator's position);
/// its checkpoint is refused by another network.
#[test]
fn natural_gradient_resume_is_bit_identical() {
    let t = setup();
    // With momentum the delta network carries over between minibatches; without, it is
    // zero and the checkpoint leaves it out.
    for momentum in ["0.5", "0"] {
        let m = format!("--momentum={momentum}");
        let extra = [
            "--stepper=ng",
            m.as_str(),
            "--learning-rate=0.002",
            "--minibatch-size=16",
            "--num-epochs=2",
        ];
        let a = s(&t.root.join(format!("a{momentum}")));
        let c = s(&t.root.join(format!("c{momentum}")));
        run_fit(&fit_args(&t, &a, &extra));
        // Far enough for every preconditioner to be past its first ten updates.
        let mut stop = extra.to_vec();
        stop.push("--max-minibatches=23");
        let out = run_fit(&fit_args(&t, &c, &stop));
        assert!(out.contains("stopped early"), "{out}");
        assert!(read(format!("{c}/final.raw")) != read(format!("{a}/final.raw")));
        let mut resume = extra.to_vec();
        resume.push("--resume");
        let o = compnet(
            &fit_args(&t, &c, &resume)
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
        );
        assert!(o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("Resuming from") && !err.contains("WARNING"),
            "{err}"
        );
        for f in ["final.raw", "checkpoint.ckpt", "metrics.jsonl"] {
            assert!(
                read(format!("{a}/{f}")) == read(format!("{c}/{f}")),
                "{f} differs between the uninterrupted and the resumed ng run (momentum \
                 {momentum})"
            );
        }
    }
    let c = s(&t.root.join("c0.5"));
    let resume = [
        "--stepper=ng",
        "--momentum=0.5",
        "--learning-rate=0.002",
        "--minibatch-size=16",
        "--num-epochs=2",
        "--resume",
    ];
    // Another network's run refuses this checkpoint and leaves it as it was.
    let text = std::fs::read_to_string(format!("{EX}/net.config")).unwrap();
    let other = t.root.join("other.config");
    std::fs::write(
        &other,
        text.replace("output-dim=64", "output-dim=32")
            .replace("input-dim=192", "input-dim=96")
            .replace("dim=64", "dim=32")
            .replace("input-dim=64", "input-dim=32"),
    )
    .unwrap();
    let before = read(format!("{c}/checkpoint.ckpt"));
    let mut args = fit_args(&t, &c, &resume);
    args[1] = s(&other);
    let e = fails(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(
        e.contains("checkpoint.ckpt") && e.contains("another network"),
        "{e}"
    );
    assert!(read(format!("{c}/checkpoint.ckpt")) == before);
}

/// Backstitch (`--backstitch-training-scale`, `--backstitch-training-interval`) with Kaldi's
/// stepper: on the same minibatches `fit` gives `compnet train`'s model byte for byte, and
/// backstitch changes the model; a stepper without backstitch refuses it.
#[test]
fn backstitch_in_fit_equals_compnet_train() {
    let t = setup();
    let r = |f: &str| s(&t.root.join(f));
    let egs = initial_model_and_egs(&t);
    let backstitch = [
        "--backstitch-training-scale=0.3",
        "--backstitch-training-interval=2",
    ];
    let mut train = vec!["train", "--srand=3"];
    train.extend(backstitch);
    let (zero, merged_out) = (r("0.raw"), r("train.raw"));
    train.extend([zero.as_str(), egs.as_str(), merged_out.as_str()]);
    ok(&train);
    let fit = |out: &str, extra: &[&str]| {
        let mut a = vec![
            "fit",
            &zero,
            "--train",
            &egs,
            "--out",
            out,
            "--stepper=ng",
            "--num-epochs=1",
            "--minibatch-size=1",
            "--shuffle=false",
            "--learning-rate=0.002",
            "--srand=3",
        ];
        a.extend_from_slice(extra);
        ok(&a);
    };
    let (with, without) = (r("fit"), r("fit-plain"));
    fit(&with, &backstitch);
    fit(&without, &[]);
    let ours = read(format!("{with}/final.raw"));
    assert!(
        read(r("train.raw")) == ours,
        "fit with backstitch differs from compnet train with backstitch"
    );
    assert!(read(format!("{without}/final.raw")) != ours);
    let err = fails(&[
        "fit",
        &zero,
        "--train",
        &egs,
        "--out",
        &r("bad"),
        "--stepper=adam",
        "--backstitch-training-scale=0.3",
    ]);
    assert!(
        err.contains("--backstitch-training-scale") && err.contains("--stepper=adam"),
        "{err}"
    );
}

/// `--parallel` is checked before anything is read; without the `mpi` feature a parallel
/// mode, or a run as one of several mpirun processes, is an error that says how to build.
#[test]
fn parallel_options_are_checked() {
    let e = fails(&["fit", "net.config", "--out", "o", "--parallel=average:0"]);
    assert!(
        e.contains("--parallel=average:0") && e.contains("average:K"),
        "{e}"
    );
    let e = fails(&["fit", "net.config", "--out", "o", "--parallel-bucket-mb=0"]);
    assert!(e.contains("--parallel-bucket-mb"), "{e}");
    if cfg!(feature = "mpi") {
        return;
    }
    let e = fails(&["fit", "net.config", "--out", "o", "--parallel=data"]);
    assert!(e.contains("--features mpi"), "{e}");
    let o = Command::new(BIN)
        .args(["fit", "net.config", "--out", "o"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("one of 2 processes") && e.contains("--parallel=data"),
        "{e}"
    );
}
