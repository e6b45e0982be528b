//! `compnet fit --parallel` under `mpirun` (the `mpi` feature; Open MPI's mpirun on the
//! PATH), on the bundled digits data: data parallelism gives the one-process training at
//! every epoch for 2 and 4 ranks, `average:1` with plain SGD is `data`, averaging identical
//! models changes nothing, and a killed rank ends the job with a checkpoint that resumes.
#![cfg(feature = "mpi")]

use compnet::testing::component::ParamCopies;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const DIGITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/digits");

/// The digits TDNN of examples/digits without BatchNorm (whose batch statistics are per
/// rank): plain affines and ReLUs, so that the split minibatch has the same gradient.
const TDNN: &str = "input-node name=input dim=8
component name=t1 type=AffineComponent input-dim=24 output-dim=48
component name=r1 type=RectifiedLinearComponent dim=48
component name=t2 type=AffineComponent input-dim=144 output-dim=48
component name=r2 type=RectifiedLinearComponent dim=48
component name=o type=AffineComponent input-dim=48 output-dim=10 param-stddev=0.0 bias-stddev=0.0
component name=ls type=LogSoftmaxComponent dim=10
component-node name=t1 component=t1 input=Append(Offset(input, -1), input, Offset(input, 1))
component-node name=r1 component=r1 input=t1
component-node name=t2 component=t2 input=Append(Offset(r1, -2), r1, Offset(r1, 2))
component-node name=r2 component=r2 input=t2
component-node name=o component=o input=r2
component-node name=ls component=ls input=o
output-node name=output input=ls objective=linear
";

/// A linear network (affine and log-softmax).
const LINEAR: &str = "input-node name=input dim=8
component name=o type=AffineComponent input-dim=24 output-dim=10
component name=ls type=LogSoftmaxComponent dim=10
component-node name=o component=o input=Append(Offset(input, -1), input, Offset(input, 1))
component-node name=ls component=ls input=o
output-node name=output input=ls objective=linear
";

fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
        BIN,
    ]);
    c
}

/// `compnet fit` of `config` on the digits into `out`, on `np` ranks (`None`: one process
/// without mpirun) with `--parallel=mode`, plain SGD; `extra` options last.
fn fit(np: Option<usize>, mode: &str, config: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut c = match np {
        Some(n) => mpirun(n),
        None => Command::new(BIN),
    };
    c.arg("fit")
        .arg(config)
        .args(["--train", &format!("{DIGITS}/train")])
        .args(["--valid", &format!("{DIGITS}/valid")])
        .arg("--out")
        .arg(out)
        .args([
            "--stepper=sgd",
            "--lr-per=minibatch",
            "--learning-rate=0.02",
            "--minibatch-size=64",
            "--num-epochs=3",
            "--srand=1",
            "--num-threads=1",
        ]);
    if np.is_some() {
        c.arg(format!("--parallel={mode}"));
    }
    c.args(extra);
    c.stdin(Stdio::null())
        .output()
        .expect("run mpirun / compnet")
}

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The validation objective of every epoch, from metrics.jsonl.
fn valid_objectives(out: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).expect("metrics.jsonl");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["valid_objective"].as_f64().expect("valid_objective")
        })
        .collect()
}

fn assert_close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: {a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= 1e-3 * y.abs(),
            "{what}: {a:?} vs {b:?} (more than 0.1% apart)"
        );
    }
}

fn write_config(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn data_parallel_gives_the_one_process_training_and_average_1_equals_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "tdnn.config", TDNN);
    let one = dir.path().join("one");
    ok(fit(None, "", &config, &one, &[]));
    let single = valid_objectives(&one);
    assert_eq!(single.len(), 3);
    assert!(single[2] > single[0], "the network learns: {single:?}");
    let mut data2 = Vec::new();
    for np in [2, 4] {
        let out = dir.path().join(format!("data{np}"));
        let o = ok(fit(Some(np), "data", &config, &out, &[]));
        let objectives = valid_objectives(&out);
        assert_close(&objectives, &single, &format!("-np {np} --parallel=data"));
        // Rank 0 alone reports.
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert_eq!(stdout.matches("model: ").count(), 1, "{stdout}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("gradient all-reduce"), "{stderr}");
        assert!(out.join("final.raw").exists() && out.join("checkpoint.ckpt").exists());
        if np == 2 {
            data2 = objectives;
        }
    }
    let out = dir.path().join("average2");
    ok(fit(Some(2), "average:1", &config, &out, &[]));
    assert_close(
        &valid_objectives(&out),
        &data2,
        "-np 2 --parallel=average:1 against --parallel=data",
    );
}

/// Every stepper's state sees the summed gradient (momentum, Adam), or is per rank (Kaldi's
/// natural gradient, which preconditions each rank's share): 2 ranks train as one process.
#[test]
fn momentum_adam_and_natural_gradient_train_data_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "tdnn.config", TDNN);
    for (stepper, lr, tolerance) in [
        ("momentum", "0.002", 1e-3),
        ("adam", "0.001", 1e-3),
        ("ng", "0.02", 1e-2),
    ] {
        let args = [
            format!("--stepper={stepper}"),
            format!("--learning-rate={lr}"),
            "--num-epochs=2".to_string(),
        ];
        let args: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
        let one = dir.path().join(format!("{stepper}1"));
        ok(fit(None, "", &config, &one, &args));
        let two = dir.path().join(format!("{stepper}2"));
        ok(fit(Some(2), "data", &config, &two, &args));
        let (a, b) = (valid_objectives(&two), valid_objectives(&one));
        assert!(b[1] > b[0], "{stepper}: the network learns: {b:?}");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= tolerance * y.abs(),
                "--stepper={stepper}: 2 ranks {a:?}, one process {b:?}"
            );
        }
    }
}

#[test]
fn averaging_identical_models_is_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "linear.config", LINEAR);
    let init = dir.path().join("init.raw");
    ok(Command::new(BIN)
        .args(["init", "--srand=3"])
        .arg(&config)
        .arg(&init)
        .output()
        .unwrap());
    // A learning rate of 0: every rank keeps the initial parameters, averaged every
    // minibatch (the statistics differ: each rank's come from its share).
    let out = dir.path().join("avg");
    ok(fit(
        Some(4),
        "average:1",
        &init,
        &out,
        &["--learning-rate=0", "--num-epochs=1"],
    ));
    let params = |p: &Path| -> Vec<Vec<f32>> {
        let nnet = compnet::nnet::Nnet::read_model_file(&p.to_string_lossy())
            .expect("a model")
            .nnet;
        nnet.components
            .iter()
            .filter_map(|c| c.as_updatable())
            .map(|u| u.params_to_vec())
            .collect()
    };
    let (a, b) = (params(&out.join("final.raw")), params(&init));
    assert!(!b.is_empty() && !b[0].is_empty());
    assert!(
        a == b,
        "the average of 4 identical models is not the model (its parameters differ)"
    );
}

#[test]
fn a_killed_rank_ends_the_job_and_the_checkpoint_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "tdnn.config", TDNN);
    let out = dir.path().join("run");
    let mut c = mpirun(2);
    c.arg("fit")
        .arg(&config)
        .args(["--train", &format!("{DIGITS}/train")])
        .args(["--valid", &format!("{DIGITS}/valid")])
        .arg("--out")
        .arg(&out)
        .args([
            "--stepper=sgd",
            "--lr-per=minibatch",
            "--learning-rate=0.05",
            "--num-epochs=1000",
            "--checkpoint-every=3mb",
            "--num-threads=1",
            "--parallel=data",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut job = c.spawn().expect("mpirun");
    let ckpt = out.join("checkpoint.ckpt");
    let waited = Instant::now();
    while !ckpt.exists() {
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "no checkpoint after 120 s"
        );
        assert!(job.try_wait().unwrap().is_none(), "the job ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    // The ranks are mpirun's children; kill one of them (not rank 0's writer, if we can
    // tell: the last child).
    let children = String::from_utf8(
        Command::new("pgrep")
            .args(["-P", &job.id().to_string()])
            .output()
            .expect("pgrep")
            .stdout,
    )
    .unwrap();
    let victim = children
        .split_whitespace()
        .last()
        .expect("a rank process")
        .to_string();
    assert!(Command::new("kill")
        .args(["-9", &victim])
        .status()
        .unwrap()
        .success());
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = job.try_wait().unwrap() {
            break s;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the job still runs 30 s after a rank was killed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let o = job.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!status.success(), "exit status 0 after a rank died");
    assert!(
        stderr.contains("signal 9") || stderr.contains("Killed") || stderr.contains("killed"),
        "no word of the dead rank: {stderr}"
    );
    // The checkpoint resumes, here on one process.
    let o = ok(fit(
        None,
        "",
        &config,
        &out,
        &[
            "--learning-rate=0.05",
            "--num-epochs=1000",
            "--resume",
            "--max-wall-time=1",
        ],
    ));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("Resuming from"), "{stderr}");
}
