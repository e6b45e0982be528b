//! `compnet fit`'s options and checkpoints as untrusted input: every rate and schedule option
//! out of range is refused before training, naming the option (and the TOML file's line); a
//! damaged or truncated checkpoint is refused and left as it was; a checkpoint of another
//! stepper is refused unless `--reset-stepper-state`; a diverging run stops with an error and
//! leaves no checkpoint that does not read back.

use compnet::testing::cli;
use compnet::testing::component::ParamCopies;
use std::path::{Path, PathBuf};
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const EX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train");

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(args: &[String]) -> String {
    stderr(&cli::succeeds(BIN, args))
}

fn fails(args: &[String]) -> String {
    let err = cli::fails(BIN, args);
    assert!(err.contains("error"), "{err}");
    err
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
    let data = |which: &str| {
        let d = root.join(which);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(format!("{EX}/{which}_feats.ark"), d.join("feats.ark")).unwrap();
        std::fs::copy(format!("{EX}/{which}_post.txt"), d.join("post.ark")).unwrap();
        d.to_string_lossy().into_owned()
    };
    let (train, valid) = (data("train"), data("valid"));
    Setup {
        _dir: dir,
        root,
        train,
        valid,
    }
}

impl Setup {
    fn path(&self, f: &str) -> String {
        self.root.join(f).to_string_lossy().into_owned()
    }

    /// `compnet fit` of the example network into `out` with `extra` options.
    fn fit(&self, out: &str, extra: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = [
            "fit",
            &format!("{EX}/net.config"),
            "--train",
            &self.train,
            "--valid",
            &self.valid,
            "--out",
            out,
            "--srand=5",
            "--minibatch-size=16",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    }
}

fn read(p: impl AsRef<Path>) -> Vec<u8> {
    std::fs::read(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
}

#[test]
fn every_bad_rate_and_schedule_option_is_refused_by_name() {
    let t = setup();
    let out = t.path("never");
    let bad: &[(&[&str], &str)] = &[
        (
            &[
                "--initial-effective-lrate=0.01",
                "--final-effective-lrate=1e308",
            ],
            "--final-effective-lrate",
        ),
        (
            &[
                "--initial-effective-lrate=inf",
                "--final-effective-lrate=0.001",
            ],
            "--initial-effective-lrate",
        ),
        (
            &[
                "--initial-effective-lrate=0",
                "--final-effective-lrate=0.001",
            ],
            "--initial-effective-lrate",
        ),
        (
            &["--initial-effective-lrate=0.01"],
            "--final-effective-lrate",
        ),
        (&["--learning-rate=inf"], "--learning-rate"),
        (&["--learning-rate=0.1:1e300"], "--learning-rate"),
        (&["--learning-rate=-0.1"], "--learning-rate"),
        (&["--momentum=1"], "--momentum"),
        (&["--momentum=nan", "--stepper=momentum"], "--momentum"),
        (&["--beta1=1.5", "--stepper=adam"], "--beta1"),
        (&["--beta2=-0.1"], "--beta2"),
        (&["--epsilon=0", "--stepper=adam"], "--epsilon"),
        (&["--epsilon=inf"], "--epsilon"),
        (&["--weight-decay=2", "--stepper=adamw"], "--weight-decay"),
        (&["--rms-gamma=1"], "--rms-gamma"),
        (&["--rms-inc=0.5"], "--rms-inc"),
        (&["--rms-dec=0"], "--rms-dec"),
        (&["--rms-min=0"], "--rms-min"),
        (&["--rms-max=1e30"], "--rms-max"),
        (&["--max-param-change=-1"], "--max-param-change"),
        (&["--max-param-change=inf"], "--max-param-change"),
        (&["--l1=-1"], "--l1"),
        (&["--l2=nan"], "--l2"),
        (&["--clip-gradient=inf"], "--clip-gradient"),
        (&["--gradient-noise=-0.1"], "--gradient-noise"),
        (&["--dropout-schedule=0,1.5"], "--dropout-schedule"),
        (&["--dropout-schedule=0,nan"], "--dropout-schedule"),
        (&["--minibatch-size=0"], "--minibatch-size"),
        (&["--minibatch-size=64:1e9"], "--minibatch-size"),
        (&["--minibatch-size=2.5"], "--minibatch-size"),
        (&["--auto-adjust=1"], "--auto-adjust"),
        (&["--auto-adjust=nan"], "--auto-adjust"),
        (&["--auto-adjust-threshold=nan"], "--auto-adjust-threshold"),
        (&["--auto-adjust-threshold=-1"], "--auto-adjust-threshold"),
        (&["--max-wall-time=-1"], "--max-wall-time"),
        (&["--max-wall-time=inf"], "--max-wall-time"),
        (&["--num-epochs=0"], "--num-epochs"),
        (&["--num-epochs=1000000000"], "--num-epochs"),
        (&["--warmup=-1"], "--warmup"),
        (
            &["--backstitch-training-scale=inf"],
            "--backstitch-training-scale",
        ),
        (
            &["--backstitch-training-interval=0"],
            "--backstitch-training-interval",
        ),
        (&["--checkpoint-every=-3"], "--checkpoint-every"),
        (&["--plot-every=1x"], "--plot-every"),
        (
            &["--max-minibatches=18446744073709551615"],
            "--max-minibatches",
        ),
        (&["--lr-per=epoch"], "--lr-per"),
        (&["--stepper=lbfgs"], "--stepper"),
    ];
    for (extra, name) in bad {
        let e = fails(&t.fit(&out, extra));
        assert!(
            e.contains(name),
            "{extra:?}: the error does not name {name}: {e}"
        );
        assert!(!Path::new(&out).exists(), "{extra:?}: {out} was created");
    }
}

#[test]
fn a_bad_option_in_the_toml_file_names_the_file_and_line() {
    let t = setup();
    let out = t.path("never");
    let toml = t.path("opts.toml");
    let cases: &[(&str, &str, &str)] = &[
        (
            "num-epochs = 2\ninitial-effective-lrate = 0.01\nfinal-effective-lrate = 1e308\n",
            "opts.toml:3: ",
            "--final-effective-lrate",
        ),
        // 1e308 is infinite in single precision.
        (
            "stepper = \"momentum\"\nmomentum = 1e308\n",
            "opts.toml:2: ",
            "--momentum",
        ),
        (
            "learning-rate = \"0.1:inf\"\nnum-epochs = 2\n",
            "opts.toml:1: ",
            "--learning-rate",
        ),
        ("max-wall-time = nan\n", "opts.toml:1: ", "--max-wall-time"),
        ("\n\nepsilon = 0.0\n", "opts.toml:3: ", "--epsilon"),
        ("num-epochs = -1\n", "opts.toml:1:", "num-epochs"),
    ];
    for (text, at, name) in cases {
        std::fs::write(&toml, text).unwrap();
        let e = fails(&t.fit(&out, &[&format!("--config={toml}")]));
        assert!(e.contains(at) && e.contains(name), "{text:?}: {e}");
        assert!(!Path::new(&out).exists());
    }
    // The command line wins: its good value replaces the file's bad one; its bad value is
    // reported without the file.
    std::fs::write(&toml, "num-epochs = 1\nmomentum = 1e308\n").unwrap();
    let e = fails(&t.fit(&out, &[&format!("--config={toml}"), "--momentum=2"]));
    assert!(e.contains("--momentum") && !e.contains("opts.toml:"), "{e}");
    ok(&t.fit(
        &out,
        &[
            &format!("--config={toml}"),
            "--momentum=0.5",
            "--stepper=momentum",
            "--max-minibatches=2",
        ],
    ));
}

/// A run stopped after `n` minibatches with `stepper`; returns its checkpoint's path.
fn stopped_run(t: &Setup, out: &str, stepper: &str, n: usize) -> String {
    let stop = format!("--max-minibatches={n}");
    ok(&t.fit(out, &[stepper, "--momentum=0.5", "--num-epochs=2", &stop]));
    format!("{out}/checkpoint.ckpt")
}

#[test]
fn a_damaged_checkpoint_is_refused_and_left_as_it_was() {
    let t = setup();
    for stepper in ["--stepper=adam", "--stepper=ng"] {
        let out = t.path(&stepper[10..]);
        let ckpt = stopped_run(&t, &out, stepper, 5);
        let good = read(&ckpt);
        let resume = t.fit(
            &out,
            &[stepper, "--momentum=0.5", "--num-epochs=2", "--resume"],
        );
        // One flipped bit at 48 positions spread over the file (the magic, the loop state,
        // the model, the stepper and natural-gradient state, the checksum), and truncations.
        let n = good.len();
        let mut damaged: Vec<(String, Vec<u8>)> = (0..48)
            .map(|k| {
                let at = (k * 7919 + k * k * 104_729) % n;
                let mut b = good.clone();
                b[at] ^= 1 << (k % 8);
                (format!("bit {} of byte {at}", k % 8), b)
            })
            .collect();
        for cut in [0, 10, 30, n / 2, n - 9, n - 1] {
            damaged.push((format!("cut at {cut}"), good[..cut].to_vec()));
        }
        let mut extra = good.clone();
        extra.extend_from_slice(b"\0\0");
        damaged.push(("two bytes more".into(), extra));
        for (what, bytes) in damaged {
            std::fs::write(&ckpt, &bytes).unwrap();
            let e = fails(&resume);
            assert!(e.contains("checkpoint.ckpt"), "{stepper} {what}: {e}");
            assert!(
                read(&ckpt) == bytes,
                "{stepper} {what}: the checkpoint changed"
            );
        }
        // The intact checkpoint still resumes.
        std::fs::write(&ckpt, &good).unwrap();
        ok(&resume);
    }
}

#[test]
fn a_checkpoint_of_another_stepper_needs_reset_stepper_state() {
    let t = setup();
    for (written, resumed) in [("adam", "ng"), ("ng", "sgd"), ("sgd", "momentum")] {
        let out = t.path(written);
        let ckpt = stopped_run(&t, &out, &format!("--stepper={written}"), 4);
        let before = read(&ckpt);
        let other = format!("--stepper={resumed}");
        let mut resume = t.fit(&out, &[&other, "--num-epochs=2", "--resume"]);
        let e = fails(&resume);
        assert!(
            e.contains("checkpoint.ckpt")
                && e.contains(&format!("--stepper={written}"))
                && e.contains("--reset-stepper-state"),
            "{e}"
        );
        assert!(read(&ckpt) == before);
        resume.push("--reset-stepper-state".into());
        let log = ok(&resume);
        assert!(
            log.contains("starts afresh") && !log.contains("WARNING"),
            "{log}"
        );
        // It went on from the checkpoint's position (two epochs in all, as recorded).
        let metrics = String::from_utf8(read(format!("{out}/metrics.jsonl"))).unwrap();
        assert_eq!(metrics.lines().count(), 2, "{metrics}");
    }
}

/// An L2 far too large: the run stops with an error saying why, and whatever checkpoint it
/// left reads back with finite parameters; the metrics hold no `null`.
#[test]
fn a_diverging_run_stops_with_an_error_and_leaves_no_unreadable_checkpoint() {
    let t = setup();
    for stepper in ["sgd", "momentum", "adam"] {
        let out = t.path(&format!("diverge-{stepper}"));
        let s = format!("--stepper={stepper}");
        let e = fails(&t.fit(
            &out,
            &[
                &s,
                "--learning-rate=1000",
                "--l2=1e30",
                "--checkpoint-every=1mb",
                "--num-epochs=3",
            ],
        ));
        assert!(
            e.contains("diverged") || e.contains("not finite"),
            "{stepper}: {e}"
        );
        let ckpt = format!("{out}/checkpoint.ckpt");
        if Path::new(&ckpt).exists() {
            let (state, parts) = compnet::train::fit::hooks::read_checkpoint(&ckpt)
                .unwrap_or_else(|e| panic!("{stepper}: {e}"));
            state.check().unwrap();
            let nnet = compnet::nnet::Nnet::read_model(&parts[0], &ckpt)
                .unwrap()
                .nnet;
            for c in &nnet.components {
                if let Some(u) = c.as_updatable() {
                    let mut v = vec![0.0f32; u.num_parameters()];
                    u.copy_params_to(&mut v);
                    assert!(v.iter().all(|x| x.is_finite()), "{stepper}");
                }
            }
        }
        if let Ok(m) = std::fs::read_to_string(format!("{out}/metrics.jsonl")) {
            assert!(!m.contains("null"), "{stepper}: {m}");
        }
    }
}
