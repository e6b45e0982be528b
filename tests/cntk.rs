//! CNTK's workflow end to end: `compnet cntk` runs the bundled examples/cntk/timit.config
//! (HTKMLFReader data, NDLNetworkBuilder with macros, SGD with per-minibatch schedules, an
//! MEL edit that adds a layer, retraining, eval, write) on a synthetic TIMIT-shaped corpus written here as examples/cntk/make_data.py
//! writes it; `compnet fit` trains from an HTK script and MLF; bad HTK data and configs are
//! clear errors.

use compnet::io::htk::{read_htk, write_htk};
use compnet::matrix::Matrix;
use compnet::testing::cli;
use compnet::testing::component::ParamCopies;
use rand::Rng;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const EX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cntk");
const DIM: usize = 24;
const STATES: usize = 12;

fn ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&cli::succeeds(BIN, args).stdout).into_owned()
}

fn fails(args: &[&str]) -> String {
    cli::fails(BIN, args)
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The corpus of make_data.py (same layout, own random numbers): returns the frames of each
/// test utterance.
fn make_data(out: &Path) -> Vec<(String, usize)> {
    std::fs::create_dir_all(out).unwrap();
    let mut rng = compnet::random::seeded_rng(1);
    let means: Vec<Vec<f32>> = (0..STATES)
        .map(|_| {
            (0..DIM)
                .map(|_| compnet::random::rand_gauss(&mut rng))
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..STATES)
        .map(|s| format!("ph{}_s{}", s / 3, 2 + s % 3))
        .collect();
    std::fs::write(out.join("states.list"), names.join("\n") + "\n").unwrap();
    let mut test_frames = Vec::new();
    for (split, count) in [("train", 60), ("test", 20)] {
        let mut mlf = String::from("#!MLF!#\n");
        let mut scp = String::new();
        let mut big: Vec<f32> = Vec::new();
        for u in 0..count {
            let key = format!("{split}_utt{u:03}");
            let (mut frames, mut t) = (Vec::new(), 0usize);
            mlf.push_str(&format!("\"*/{key}.lab\"\n"));
            while t < 40 {
                let st = rng.random_range(0..STATES);
                let n = rng.random_range(3..=8);
                for _ in 0..n {
                    for m in &means[st] {
                        frames.push(m + 0.6 * compnet::random::rand_gauss(&mut rng));
                    }
                }
                mlf.push_str(&format!(
                    "{} {} {}\n",
                    t * 100000,
                    (t + n) * 100000,
                    names[st]
                ));
                t += n;
            }
            mlf.push_str(".\n");
            if split == "train" {
                let first = big.len() / DIM;
                scp.push_str(&format!("{key}=train.htk[{first},{}]\n", first + t - 1));
                big.extend(frames);
            } else {
                let m = Matrix::from_vec(t, DIM, frames);
                std::fs::write(
                    out.join(format!("{key}.htk")),
                    write_htk(&m, 100000, false).unwrap(),
                )
                .unwrap();
                scp.push_str(&format!("{key}.htk\n"));
                test_frames.push((key, t));
            }
        }
        if !big.is_empty() {
            let m = Matrix::from_vec(big.len() / DIM, DIM, big);
            std::fs::write(out.join("train.htk"), write_htk(&m, 100000, true).unwrap()).unwrap();
        }
        std::fs::write(out.join(format!("{split}.scp")), scp).unwrap();
        std::fs::write(out.join(format!("{split}.mlf")), mlf).unwrap();
    }
    test_frames
}

/// The error rate of eval's `Final Results` line.
fn error_rate(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Final Results: "))
        .unwrap_or_else(|| panic!("no Final Results line in:\n{stdout}"));
    let tail = line.split("ErrorPrediction: ").nth(1).expect("error part");
    tail.split('=').nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn the_bundled_timit_config_trains_evaluates_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let exp = dir.path().join("exp");
    let test_utts = make_data(&data);
    let config = format!("{EX}/timit.config");
    let args = [
        "cntk",
        config.as_str(),
        &format!("DataDir={}", s(&data)),
        &format!("ExpDir={}", s(&exp)),
        &format!("NdlDir={EX}/ndl"),
        &format!("MelDir={EX}"),
    ];
    let out = ok(&args);
    // Layer 1's model and CNTK's per-epoch models (all epochs but the last).
    for e in 1..=2 {
        assert!(exp.join(format!("dnn1.dnn.{e}")).exists(), "epoch {e}");
    }
    assert!(exp.join("dnn1.dnn").exists());
    assert!(!exp.join("dnn1.dnn.3").exists());
    // The MEL edit: L2 reads L1's sigmoid and the output layer's Times reads L2's.
    let edited = compnet::nnet::Nnet::read_model_file(&s(&exp.join("dnn2.dnn.0")))
        .unwrap()
        .nnet;
    let lines = edited.config_lines();
    for want in [
        "component-node name=L2.BFF.T component=L2.BFF.W input=L1.S",
        "component-node name=L2.S component=L2.S input=Sum(L2.BFF.T, L2.BFF.B)",
        "component-node name=CE.BFF.T component=CE.BFF.W input=L2.S",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want}: {lines:#?}");
    }
    // Layer 1's trained weights are carried over; the retrained model keeps the structure.
    let l1 = compnet::nnet::Nnet::read_model_file(&s(&exp.join("dnn1.dnn")))
        .unwrap()
        .nnet;
    let w = |n: &compnet::nnet::Nnet| {
        let i = n.component_index("L1.BFF.W").unwrap();
        let u = n.components[i].as_updatable().unwrap();
        let mut v = vec![0.0; u.num_parameters()];
        u.copy_params_to(&mut v);
        v
    };
    assert_eq!(w(&l1), w(&edited));
    let model = exp.join("dnn2.dnn");
    let retrained = compnet::nnet::Nnet::read_model_file(&s(&model))
        .unwrap()
        .nnet;
    assert_eq!(retrained.config_lines(), lines);
    assert!(!exp.join("dnn2.dnn.ckp").exists());
    // Far below chance (11/12 for 12 states).
    let err = error_rate(&out);
    assert!(err < 0.2, "error rate {err}:\n{out}");
    // One output per test utterance, with the node's dimension and the utterance's frames.
    let scp = std::fs::read_to_string(exp.join("out/outputs.scp")).unwrap();
    assert_eq!(scp.lines().count(), test_utts.len());
    for (key, frames) in &test_utts {
        let bytes = std::fs::read(exp.join(format!("out/{key}.htk"))).unwrap();
        let (_, m) = read_htk(&bytes, key).unwrap();
        assert_eq!((m.num_rows(), m.num_cols()), (*frames, 64), "{key}");
        assert!(scp.contains(&format!("{key}={key}.htk")));
    }
    // The adapted model: the same network, other parameters.
    let adapted = compnet::nnet::Nnet::read_model_file(&s(&exp.join("dnn2.adapted.dnn")))
        .unwrap()
        .nnet;
    assert_eq!(adapted.config_lines(), lines);
    assert_ne!(w(&adapted), w(&retrained));
    // A second run finds the model and skips training; eval gives the same figures.
    let again = ok(&args);
    assert_eq!(error_rate(&again), err);
    // A GPU id is refused with the reason; a bad block name names the command line.
    let e = fails(&[
        args[0],
        args[1],
        args[2],
        args[3],
        args[4],
        args[5],
        "DeviceNumber=0",
    ]);
    assert!(e.contains("deviceId=0") && e.contains("CPU only"), "{e}");
    let e = fails(&[
        args[0],
        args[1],
        args[2],
        args[3],
        args[4],
        args[5],
        "command=Nope",
    ]);
    assert!(e.contains("there is no block Nope"), "{e}");
    // An unknown state name in the MLF names the file and line.
    let mlf = std::fs::read_to_string(data.join("test.mlf")).unwrap();
    std::fs::write(data.join("test.mlf"), mlf.replacen("ph0_s2", "ph9_s9", 1)).unwrap();
    let e = fails(&[
        args[0],
        args[1],
        args[2],
        args[3],
        args[4],
        args[5],
        "command=Test",
    ]);
    assert!(
        e.contains("test.mlf:") && e.contains("unknown state name 'ph9_s9'"),
        "{e}"
    );
}

const NET: &str = "input-node name=input dim=24
component name=a type=AffineComponent input-dim=72 output-dim=32
component name=r type=RectifiedLinearComponent dim=32
component name=o type=AffineComponent input-dim=32 output-dim=12
component name=ls type=LogSoftmaxComponent dim=12
component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 1))
component-node name=r component=r input=a
component-node name=o component=o input=r
component-node name=ls component=ls input=o
output-node name=output input=ls objective=linear
";

#[test]
fn fit_trains_from_an_htk_script_and_mlf() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    make_data(&data);
    let train = dir.path().join("train");
    std::fs::create_dir_all(&train).unwrap();
    // feats.scp's relative paths are taken from the directory.
    let scp = std::fs::read_to_string(data.join("train.scp")).unwrap();
    std::fs::write(
        train.join("feats.scp"),
        scp.replace("train.htk", "../data/train.htk"),
    )
    .unwrap();
    std::fs::copy(data.join("train.mlf"), train.join("labels.mlf")).unwrap();
    std::fs::copy(data.join("states.list"), train.join("labels.map")).unwrap();
    let net = dir.path().join("net.config");
    std::fs::write(&net, NET).unwrap();
    let out = dir.path().join("out");
    let stdout = ok(&[
        "fit",
        &s(&net),
        "--train",
        &s(&train),
        "--valid",
        &s(&train),
        "--out",
        &s(&out),
        "--stepper=adam",
        "--num-epochs=3",
        "--minibatch-size=64",
        "--learning-rate=0.003",
        "--srand=5",
    ]);
    let acc: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("validation accuracy "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(acc > 0.8, "{stdout}");
    // A range past the end of the archive names the script's line.
    std::fs::write(
        train.join("feats.scp"),
        "train_utt000=../data/train.htk[0,40]\ntrain_utt001=../data/train.htk[41,999999]\n",
    )
    .unwrap();
    let e = fails(&["fit", &s(&net), "--train", &s(&train), "--out", &s(&out)]);
    assert!(
        e.contains("feats.scp:2: utterance train_utt001: the range [41,999999] goes past the end"),
        "{e}"
    );
    // A truncated HTK file names the file and byte offset.
    let bytes = std::fs::read(data.join("train.htk")).unwrap();
    std::fs::write(data.join("train.htk"), &bytes[..bytes.len() - 7]).unwrap();
    let e = fails(&["fit", &s(&net), "--train", &s(&train), "--out", &s(&out)]);
    assert!(
        e.contains("train.htk: at byte") && e.contains("truncated"),
        "{e}"
    );
}
