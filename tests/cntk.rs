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

/// A network of one LinearComponent (2x2) with parameters `p` and a gradient network holding
/// `g` (the direction that raises the objective: minus CNTK's criterion gradient).
fn one_linear(p: &[f32], g: &[f32]) -> (compnet::nnet::Nnet, compnet::nnet::Nnet) {
    use compnet::train::fit::stepper::gradient_network;
    let mut nnet = compnet::nnet::Nnet::from_config_text(
        "input-node name=input dim=2\n\
         component name=W type=LinearComponent input-dim=2 output-dim=2\n\
         component-node name=W component=W input=input\n\
         output-node name=output input=W objective=quadratic\n",
        "one_linear",
        &mut compnet::random::seeded_rng(0),
    )
    .unwrap();
    nnet.components[0]
        .as_updatable_mut()
        .unwrap()
        .copy_params_from(p);
    let mut grad = gradient_network(&nnet);
    grad.components[0]
        .as_updatable_mut()
        .unwrap()
        .copy_params_from(g);
    (nnet, grad)
}

fn params(nnet: &compnet::nnet::Nnet) -> Vec<f32> {
    nnet.components[0].as_updatable().unwrap().params_to_vec()
}

/// One SGD step with CNTK's L1RegWeight, L2RegWeight and norm clipping, computed by hand
/// from CNTK's definition: the criterion's summed gradient d over N samples is scaled down
/// to a norm of at most clippingThresholdPerSample·N, then L2RegWeight·N·w is added, the
/// step is w − lr·d, and L1 shrinks each weight toward 0 by lr·L1RegWeight·N (stopping at
/// 0). The same step comes from a per-minibatch rate lr·N.
#[test]
fn one_step_with_cntk_regularisation_and_norm_clipping_matches_the_definition() {
    use compnet::train::fit::stepper::{
        apply_plain_step, GradientOptions, Stepper, StepperKind, StepperOptions,
    };
    let p = [0.5f32, -0.2, 0.01, 1.0];
    let g = [1.0f32, -3.0, -0.05, 0.2];
    let (n, lr, l1, l2, clip) = (4.0f64, 0.1f64, 0.05f64, 0.01f64, 0.5f64);
    // By hand, in CNTK's terms (d = the criterion's gradient = -g).
    let d: Vec<f64> = g.iter().map(|&x| -f64::from(x)).collect();
    let norm = d.iter().map(|x| x * x).sum::<f64>().sqrt();
    let scale = (clip * n / norm).min(1.0);
    assert!(scale < 1.0, "the test must clip");
    let want: Vec<f64> = p
        .iter()
        .zip(&d)
        .map(|(&w, &dx)| {
            let w = f64::from(w);
            let stepped = w - lr * (dx * scale + l2 * n * w);
            let t = lr * l1 * n;
            stepped.signum() * (stepped.abs() - t).max(0.0)
        })
        .collect();
    assert_eq!(want[2], 0.0, "L1 must reach 0 for the third weight");
    let gopts = GradientOptions {
        l1: l1 as f32,
        l2: l2 as f32,
        clip: clip as f32,
        clip_norm: true,
        per_sample: true,
        noise_stddev: 0.0,
    };
    // Per-sample rate (the summed gradient), then a per-minibatch rate lr·N on the mean.
    for (step_lr, grad_scale) in [(lr, 1.0), (lr * n, 1.0 / n)] {
        let (mut nnet, mut grad) = one_linear(&p, &g);
        let mut stepper = Stepper::new(StepperOptions {
            kind: StepperKind::Sgd,
            ..Default::default()
        });
        let ok = apply_plain_step(
            &mut stepper,
            &mut nnet,
            &mut grad,
            step_lr as f32,
            grad_scale as f32,
            &gopts,
            1,
            n,
            &mut compnet::random::seeded_rng(0),
        );
        assert!(ok);
        let got = params(&nnet);
        for (a, b) in got.iter().zip(&want) {
            assert!((f64::from(*a) - b).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }
    // Truncation (gradientClippingWithTruncation=true): each element within ±clip·N; and
    // CNTK's unit-gain momentum: v = m·v + (1 - m)·g, w += lr·v.
    let (mut nnet, mut grad) = one_linear(&p, &g);
    let m = 0.9f32;
    let mut stepper = Stepper::new(StepperOptions {
        kind: StepperKind::Momentum,
        momentum: m,
        unit_gain: true,
        ..Default::default()
    });
    let trunc = GradientOptions {
        clip: 0.5,
        ..Default::default()
    };
    let rng = &mut compnet::random::seeded_rng(0);
    assert!(apply_plain_step(
        &mut stepper,
        &mut nnet,
        &mut grad,
        0.1,
        1.0,
        &trunc,
        1,
        4.0,
        rng
    ));
    let got = params(&nnet);
    for i in 0..4 {
        let want = p[i] + 0.1 * (1.0 - m) * g[i].clamp(-2.0, 2.0);
        assert!((got[i] - want).abs() < 1e-6, "{got:?}");
    }
}

/// CNTK clips each Parameter's gradient by its own norm (`gradientClippingWithTruncation=false`):
/// an affine component's weights and bias are two Parameters, each scaled to the threshold
/// on its own, and a Parameter under the threshold keeps its gradient. Clipping over a
/// component or over the whole model would leave every step below the threshold and scale
/// the small one too.
#[test]
fn norm_clipping_scales_each_parameter_on_its_own() {
    use compnet::train::fit::stepper::{
        apply_plain_step, gradient_network, GradientOptions, Stepper, StepperKind, StepperOptions,
    };
    let mut nnet = compnet::nnet::Nnet::from_config_text(
        "input-node name=input dim=2\n\
         component name=A type=AffineComponent input-dim=2 output-dim=2\n\
         component name=L type=LinearComponent input-dim=2 output-dim=2\n\
         component-node name=A component=A input=input\n\
         component-node name=L component=L input=A\n\
         output-node name=output input=L objective=quadratic\n",
        "affine_linear",
        &mut compnet::random::seeded_rng(0),
    )
    .unwrap();
    // Weights 0; gradients: A's weights of norm 5, A's bias of norm 2, L's of norm 0.14.
    let (ga, gl) = ([3.0f32, 4.0, 0.0, 0.0, 0.0, 2.0], [0.1f32, 0.0, 0.0, 0.1]);
    for c in &mut nnet.components {
        let u = c.as_updatable_mut().unwrap();
        let zeros = vec![0.0; u.params_to_vec().len()];
        u.copy_params_from(&zeros);
    }
    let mut grad = gradient_network(&nnet);
    grad.components[0]
        .as_updatable_mut()
        .unwrap()
        .copy_params_from(&ga);
    grad.components[1]
        .as_updatable_mut()
        .unwrap()
        .copy_params_from(&gl);
    let mut stepper = Stepper::new(StepperOptions {
        kind: StepperKind::Sgd,
        ..Default::default()
    });
    let gopts = GradientOptions {
        clip: 1.0,
        clip_norm: true,
        ..Default::default()
    };
    assert!(apply_plain_step(
        &mut stepper,
        &mut nnet,
        &mut grad,
        1.0,
        1.0,
        &gopts,
        1,
        1.0,
        &mut compnet::random::seeded_rng(0),
    ));
    let a = nnet.components[0].as_updatable().unwrap().params_to_vec();
    let l = nnet.components[1].as_updatable().unwrap().params_to_vec();
    // Weights scaled by 1/5, bias by 1/2: each Parameter's step has norm 1; L's unclipped.
    let want_a = [0.6f32, 0.8, 0.0, 0.0, 0.0, 1.0];
    for (got, want) in a.iter().zip(&want_a) {
        assert!((got - want).abs() < 1e-6, "A: {a:?}, want {want_a:?}");
    }
    for (got, want) in l.iter().zip(&gl) {
        assert!((got - want).abs() < 1e-7, "L: {l:?}, want {gl:?}");
    }
}

/// The same through `compnet cntk`: with one minibatch per epoch and per-minibatch rate lr,
/// every Parameter of the NDL network (two layers' W and B) moves by exactly lr times
/// `clippingThresholdPerSample` between the epoch-1 model and the final one.
#[test]
fn cntk_norm_clipping_moves_every_parameter_by_the_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    make_data(&data);
    let exp = dir.path().join("exp");
    let config = dir.path().join("clip.config");
    std::fs::write(
        &config,
        format!(
            "command=Train\ndeviceId=-1\n\
             Train=[\n action=train\n modelPath={exp}/c.dnn\n\
             NDLNetworkBuilder=[ndlMacros={EX}/ndl/macros.ndl; networkDescription={EX}/ndl/one_layer.ndl]\n\
             SGD=[minibatchSize=100000; learningRatesPerMB=2; maxEpochs=2\n\
                  gradientClippingWithTruncation=false; clippingThresholdPerSample=0.001]\n\
             reader=[readerType=HTKMLFReader; randomize=None\n\
               features=[dim=24; scpFile={data}/train.scp]\n\
               labels=[mlfFile={data}/train.mlf; labelDim=12; labelMappingFile={data}/states.list]]\n]\n",
            exp = s(&exp),
            data = s(&data),
        ),
    )
    .unwrap();
    ok(&["cntk", &s(&config)]);
    let read = |p: &Path| compnet::nnet::Nnet::read_model_file(&s(p)).unwrap().nnet;
    let (before, after) = (read(&exp.join("c.dnn.1")), read(&exp.join("c.dnn")));
    let mut norms = Vec::new();
    for (i, name) in before.component_names.iter().enumerate() {
        let Some(u) = before.components[i].as_updatable() else {
            continue;
        };
        let j = after.component_index(name).unwrap();
        let v = after.components[j].as_updatable().unwrap().params_to_vec();
        let step: f64 = u
            .params_to_vec()
            .iter()
            .zip(&v)
            .map(|(a, b)| f64::from(b - a).powi(2))
            .sum::<f64>()
            .sqrt();
        norms.push((name.clone(), step));
    }
    assert_eq!(norms.len(), 4, "{norms:?}");
    for (name, step) in &norms {
        assert!(
            (step / 0.002 - 1.0).abs() < 0.01,
            "{name}: step {step}: {norms:?}"
        );
    }
}

const MEL_MACROS: &str = "BFF(in, rows, cols)\n{\n B=Parameter(rows, init=fixedvalue, value=0)\n \
    W=Parameter(rows, cols)\n T=Times(W, in)\n BFF=Plus(T, B)\n}\n\
    SBFF(in, rows, cols)\n{\n BFF=BFF(in, rows, cols)\n S=Sigmoid(BFF)\n}\n";

fn mel_model() -> compnet::nnet::Nnet {
    let ndl = format!(
        "{MEL_MACROS}features=Input(4, tag=feature)\nlabels=Input(3, tag=label)\n\
         L1=SBFF(features, 5, 4)\nO=BFF(L1, 3, 5)\n\
         CE=CrossEntropyWithSoftmax(labels, O, tag=criteria)\n"
    );
    compnet::frontend::ndl::read_ndl(&ndl, "m.ndl", &mut compnet::random::seeded_rng(1)).unwrap()
}

/// Runs MEL text on `mel_model()` loaded as `m`; the model after it.
fn mel(text: &str) -> compnet::error::Result<compnet::nnet::Nnet> {
    let read = |_: &str| Ok(mel_model());
    let mut m = compnet::frontend::cntk::mel::Mel::new("e.mel", MEL_MACROS.to_string(), 2, &read);
    m.run(text)?;
    Ok(m.model("m").expect("loaded").clone())
}

fn has_line(n: &compnet::nnet::Nnet, want: &str) -> bool {
    n.config_lines().iter().any(|l| l == want)
}

fn comp_params(n: &compnet::nnet::Nnet, comp: &str) -> Vec<f32> {
    let i = n
        .component_index(comp)
        .unwrap_or_else(|| panic!("no {comp}"));
    n.components[i].as_updatable().unwrap().params_to_vec()
}

fn lr_factor(n: &compnet::nnet::Nnet, comp: &str) -> f32 {
    let i = n.component_index(comp).unwrap();
    n.components[i]
        .as_updatable()
        .unwrap()
        .common()
        .learning_rate_factor
}

#[test]
fn mel_set_input_copy_and_copy_sub_tree() {
    // A layer inserted between L1 and the output with a wildcard target, as discriminative
    // pre-training does.
    let n = mel(
        "m=LoadModel(x)\nSetDefaultModel(m)\nH=5\nL2=SBFF(L1.S, H, H)\n\
                 SetInput(O.*T, 1, L2.S)\n",
    )
    .unwrap();
    assert!(has_line(
        &n,
        "component-node name=O.T component=O.W input=L2.S"
    ));
    assert!(has_line(
        &n,
        "component-node name=L2.BFF.T component=L2.BFF.W input=L1.S"
    ));
    // CopyNode of a Parameter makes a new one with the same values; SetInput(T, 0, W2)
    // makes the Times use it.
    let n = mel("m=LoadModel(x)\nCopyNode(O.W, O.W2)\nSetInput(O.T, 0, O.W2)\n").unwrap();
    assert!(has_line(
        &n,
        "component-node name=O.T component=O.W2 input=L1.S"
    ));
    assert_eq!(comp_params(&n, "O.W2"), comp_params(&mel_model(), "O.W"));
    // copy=value copies into an existing parameter of the same shape.
    let n = mel("m=LoadModel(x)\nL2=SBFF(L1.S, 5, 5)\nL3=SBFF(L1.S, 5, 5)\n\
                 CopyNode(L2.BFF.W, L3.BFF.W, copy=value)\n")
    .unwrap();
    assert_eq!(comp_params(&n, "L3.BFF.W"), comp_params(&n, "L2.BFF.W"));
    // A wildcard copy of a whole layer: the links among the copies go to the copies, the
    // Times uses the copied Parameter, the values are the layer's.
    let n = mel("m=LoadModel(x)\nCopyNode(L1.*, L3.*)\n").unwrap();
    assert!(has_line(
        &n,
        "component-node name=L3.S component=L3.S input=Sum(L3.BFF.T, L3.BFF.B)"
    ));
    assert!(has_line(
        &n,
        "component-node name=L3.BFF.T component=L3.BFF.W input=input"
    ));
    assert_eq!(comp_params(&n, "L3.BFF.W"), comp_params(&n, "L1.BFF.W"));
    // CopySubTree: the node and all it reads, prefixed, reading the model's input.
    let n = mel("m=LoadModel(x)\nCopySubTree(L1.S, m, X.)\n").unwrap();
    assert!(has_line(
        &n,
        "component-node name=X.L1.S component=X.L1.S input=Sum(X.L1.BFF.T, X.L1.BFF.B)"
    ));
    assert!(has_line(
        &n,
        "component-node name=X.L1.BFF.T component=X.L1.BFF.T input=input"
    ));
    assert_eq!(comp_params(&n, "X.L1.BFF.T"), comp_params(&n, "L1.BFF.W"));
    for (text, want) in [
        ("SetDefaultModel(m)\n", "e.mel:1: no model named m"),
        (
            "m=LoadModel(x)\nSetInput(Nope, 0, L1.S)\n",
            "e.mel:2: no node of model m matches 'Nope'",
        ),
        (
            "m=LoadModel(x)\nSetInput(O.T, 2, L1.S)\n",
            "e.mel:2: 'O.T' (LinearComponent) takes its data as input 1",
        ),
        (
            "m=LoadModel(x)\nSetInput(O.T, 1, Ghost)\n",
            "e.mel:2: model m has no node 'Ghost'",
        ),
        (
            "m=LoadModel(x)\nSetInput(O.T, 0, L1.BFF.W)\n",
            "e.mel:2: 'L1.BFF.W' (LinearComponent 4x5) cannot be the weight of 'O.T'",
        ),
        (
            "m=LoadModel(x)\nCopyNode(L1.BFF.W, O.W, copy=value)\n",
            "e.mel:2: CopyNode: L1.BFF.W (LinearComponent 4x5) and O.W",
        ),
        (
            "m=LoadModel(x)\n\nCopyNode(L1.S, O.T)\n",
            "e.mel:3: CopyNode: model m has 'O.T' already",
        ),
        (
            "m=LoadModel(x)\nCopyNode(Ghost*, G*)\n",
            "e.mel:2: no node or parameter matches 'Ghost*'",
        ),
        (
            "m=LoadModel(x)\nCopyNode(L1.S, L4.S, copy=some)\n",
            "e.mel:2: copy=some: expected all or value",
        ),
        (
            "m=LoadModel(x)\nCopySubTree(L1.S, m, L)\nCopySubTree(L1.S, m, L)\n",
            "e.mel:3: CopySubTree: model m has 'LL1.BFF.B' already",
        ),
        (
            "m=LoadModel(x)\nL1=SBFF(L1.S, 5, 5)\n",
            "makes 'L1.BFF.W', which the model has already",
        ),
    ] {
        let e = mel(text).expect_err(text).to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn mel_delete_rename_set_property_and_dump() {
    let dir = tempfile::tempdir().unwrap();
    let out = s(&dir.path().join("out.mdl"));
    // A node nothing reads goes at once, with its component.
    let n = mel("m=LoadModel(x)\nL2=SBFF(L1.S, 5, 5)\nDeleteNode(L2.S)\n").unwrap();
    assert!(n.node_index("L2.S").is_none() && n.component_index("L2.S").is_none());
    // As in CNTK, deleting a node that is read leaves its readers without that input until
    // SetInput gives them another; the model saves once they have one.
    let text = format!(
        "m=LoadModel(x)\nCopyNode(L1.S, L1.S2)\nDeleteNode(L1.S)\nSetInput(O.T, 1, L1.S2)\n\
         SaveModel(m, {out})\n"
    );
    let n = mel(&text).unwrap();
    assert!(n.node_index("L1.S").is_none() && n.component_index("L1.S").is_none());
    assert!(has_line(
        &n,
        "component-node name=O.T component=O.W input=L1.S2"
    ));
    let saved = compnet::nnet::Nnet::read_model_file(&out).unwrap().nnet;
    assert_eq!(saved.config_lines(), n.config_lines());
    let e = mel(&format!(
        "m=LoadModel(x)\nDeleteNode(L1.S)\n\nSaveModel(m, {out})\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("e.mel:4: model m: 'L1.S', deleted on line 2, is still read by O.T"),
        "{e}"
    );
    let e = mel("m=LoadModel(x)\nDeleteNode(L1.S)\nSetInput(O.T, 1, L1.S)\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("e.mel:3: 'L1.S' was deleted on line 2"), "{e}");
    // Rename: a layer's nodes and Parameters with wildcards; readers follow.
    let n = mel("m=LoadModel(x)\nRename(L1.*, H1.*)\n").unwrap();
    assert!(has_line(
        &n,
        "component-node name=O.T component=O.W input=H1.S"
    ));
    assert!(has_line(
        &n,
        "component-node name=H1.BFF.T component=H1.BFF.W input=input"
    ));
    assert!(n.node_index("L1.S").is_none());
    let e = mel("m=LoadModel(x)\nRename(O.T, L1.S)\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("e.mel:2: Rename: model m has a node 'L1.S' already"),
        "{e}"
    );
    // SetProperty: needGradient (also by the node), learningRateMultiplier, criterion.
    let n = mel(
        "m=LoadModel(x)\nSetProperty(L1.BFF.W, needGradient, false)\n\
                 SetProperty(m.O.T, computeGradient, false)\n\
                 SetProperty(L1.BFF.B, learningRateMultiplier, 0.5)\n",
    )
    .unwrap();
    assert_eq!(lr_factor(&n, "L1.BFF.W"), 0.0);
    assert_eq!(lr_factor(&n, "O.W"), 0.0);
    let b = n.component_index("L1.BFF.B").map(|_| "L1.BFF.B");
    if let Some(b) = b {
        assert_eq!(lr_factor(&n, b), 0.5);
    }
    let n =
        mel("m=LoadModel(x)\nL2=SBFF(L1.S, 3, 5)\nSetProperty(L2.S, criterion, true)\n").unwrap();
    let out_line = n
        .config_lines()
        .into_iter()
        .find(|l| l.starts_with("output-node name=output "))
        .unwrap();
    assert!(out_line.contains("input=L2.S"), "{out_line}");
    for (text, want) in [
        (
            "m=LoadModel(x)\nSetProperty(L1.S, learningRate, 0)\n",
            "e.mel:2: SetProperty(learningRate): not a property",
        ),
        (
            "m=LoadModel(x)\nSetProperty(L1.S, feature, true)\n",
            "e.mel:2: feature=true on 'L1.S'",
        ),
        (
            "m=LoadModel(x)\nSetProperty(L1.S, needGradient, maybe)\n",
            "e.mel:2: needGradient=maybe: expected true or false",
        ),
        (
            "m=LoadModel(x)\nSetProperty(L9.*, needGradient, false)\n",
            "e.mel:2: no node or parameter of model m matches 'L9.*'",
        ),
    ] {
        let e = mel(text).expect_err(text).to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
    // DumpModel writes the network's config lines.
    let dump = s(&dir.path().join("m.txt"));
    mel(&format!("m=LoadModel(x)\nDumpModel(m, {dump})\n")).unwrap();
    let text = std::fs::read_to_string(&dump).unwrap();
    assert!(
        text.contains("component-node name=O.T component=O.W input=L1.S"),
        "{text}"
    );
}

/// Runs `mel` (a MEL file's text) on `mel_model()` through `compnet cntk`'s edit action;
/// the saved model, or the error.
fn cntk_edit(dir: &Path, mel: &str) -> Result<compnet::nnet::Nnet, String> {
    let model = dir.join("m.dnn");
    mel_model().write_model_file(&s(&model), true).unwrap();
    std::fs::write(dir.join("macros.ndl"), MEL_MACROS).unwrap();
    std::fs::write(dir.join("e.mel"), mel).unwrap();
    let new = dir.join("new.dnn");
    let _ = std::fs::remove_file(&new);
    std::fs::write(
        dir.join("edit.config"),
        format!(
            "command=Edit\ndeviceId=-1\nDir={}\n\
             Edit=[action=edit; editPath=$Dir$/e.mel; ndlMacros=$Dir$/macros.ndl\n\
               CurrModel=$Dir$/m.dnn; NewModel=$Dir$/new.dnn]\n",
            s(dir)
        ),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["cntk", &s(&dir.join("edit.config"))])
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(compnet::nnet::Nnet::read_model_file(&s(&new)).unwrap().nnet)
}

/// CNTK's SetInputs (every input of one node: a Times its weight then its data),
/// CopyNodeInputs (a node reads what another reads; a Times shares the other's weight; a
/// new name makes a node) and ReviseParameter (a Parameter's values from a text matrix, a
/// vector from a column), through `compnet cntk`'s edit action; bad uses name the MEL line,
/// a bad matrix its own file and line.
#[test]
fn mel_set_inputs_copy_node_inputs_and_revise_parameter_through_an_edit_action() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // O.W is 3x5 (rows = outputs), L1.BFF.B a vector of 5, written as CNTK writes them.
    let ow: Vec<Vec<f32>> = (0..3)
        .map(|r| (0..5).map(|c| r as f32 * 0.5 - c as f32 * 0.25).collect())
        .collect();
    let text: String = ow
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        })
        .collect();
    std::fs::write(d.join("ow.txt"), format!("{text}\n")).unwrap();
    std::fs::write(d.join("b.txt"), "0.1\n-0.2\n0.3\n\n-0.4\n0.5\n").unwrap();
    let n = cntk_edit(
        d,
        "m=LoadModel($CurrModel$)\nSetDefaultModel(m)\nL2=SBFF(L1.S, 5, 5)\n\
         SetInputs(O.T, O.W, L2.S)\n\
         CopyNode(L2.BFF.W, L2.W2)\n\
         SetNodeInputs(L2.BFF.T, L2.W2, L1.S)\n\
         CopyNodeInputs(L2.BFF.T, O.T2)\n\
         CopyInputs(L1.S, L2.S)\n\
         ReviseParameter(O.W, $Dir$/ow.txt)\n\
         ReviseParameter(m.L1.BFF.B, $Dir$/b.txt)\n\
         SaveModel(m, $NewModel$)\n",
    )
    .unwrap();
    for want in [
        "component-node name=O.T component=O.W input=L2.S",
        "component-node name=L2.BFF.T component=L2.W2 input=L1.S",
        // A new Times with the inputs of L2.BFF.T: the same weight, the same data.
        "component-node name=O.T2 component=L2.W2 input=L1.S",
        // L2.S keeps its own sigmoid and now reads L1.S's input.
        "component-node name=L2.S component=L2.S input=Sum(L1.BFF.T, L1.BFF.B)",
    ] {
        assert!(has_line(&n, want), "{want}:\n{:#?}", n.config_lines());
    }
    assert_eq!(
        comp_params(&n, "O.W"),
        ow.concat(),
        "ReviseParameter(O.W) row by row"
    );
    assert_eq!(comp_params(&n, "L1.BFF.B"), vec![0.1, -0.2, 0.3, -0.4, 0.5]);
    // The weights not revised are the model's.
    assert_eq!(
        comp_params(&n, "L1.BFF.W"),
        comp_params(&mel_model(), "L1.BFF.W")
    );
    let load = "m=LoadModel($CurrModel$)\n";
    for (body, want) in [
        (
            "SetInputs(O.T, L1.S)\n",
            "e.mel:2: 'O.T' (LinearComponent) has 2 inputs (its weight Parameter, then its data), SetInputs gave 1",
        ),
        (
            "SetInputs(L1.S, O.T, input)\n",
            "e.mel:2: 'L1.S' (SigmoidComponent) has 1 input, SetInputs gave 2",
        ),
        (
            "SetInputs(*.T, O.W, L1.S)\n",
            "e.mel:2: SetInputs sets the inputs of one node; '*.T' matches 2",
        ),
        (
            "SetInputs(O.T, L1.BFF.W, L1.S)\n",
            "e.mel:2: 'L1.BFF.W' (LinearComponent 4x5) cannot be the weight of 'O.T'",
        ),
        (
            "SetInputs(L1.S, *.T)\n",
            "e.mel:2: '*.T' names 2 nodes (L1.BFF.T, O.T); each input is one node",
        ),
        (
            "CopyNodeInputs(L1.S, O.T)\n",
            "e.mel:2: CopyNodeInputs: 'L1.S' (SigmoidComponent) and 'O.T' (LinearComponent) take different inputs",
        ),
        (
            "CopyNodeInputs(L1.BFF.T, O.T)\n",
            "e.mel:2: 'L1.BFF.W' (LinearComponent 4x5) cannot be the weight of 'O.T'",
        ),
        (
            "\nReviseParameter(O.W, $Dir$/b.txt)\n",
            "b.txt: a 5x1 matrix, but Parameter 'O.W' is 3x5",
        ),
        (
            "ReviseParameter(O.T, $Dir$/ow.txt)\n",
            "e.mel:2: no Parameter of model m matches 'O.T'",
        ),
        ("ReviseParameter(O.W)\n", "e.mel:2: ReviseParameter(parameter, file): two arguments"),
    ] {
        let e = cntk_edit(d, &format!("{load}{body}SaveModel(m, $NewModel$)\n"))
            .expect_err(body);
        assert!(e.contains(want), "{body:?}: {e}");
    }
    // A bad matrix file: its own line.
    std::fs::write(d.join("ow.txt"), "1 2 3 4 5\n1 2 x 4 5\n").unwrap();
    let e = cntk_edit(d, &format!("{load}ReviseParameter(O.W, $Dir$/ow.txt)\n")).unwrap_err();
    assert!(e.contains("ow.txt:2: 'x' is not a finite number"), "{e}");
    std::fs::write(d.join("ow.txt"), "1 2 3 4 5\n\n1 2 3 4\n").unwrap();
    let e = cntk_edit(d, &format!("{load}ReviseParameter(O.W, $Dir$/ow.txt)\n")).unwrap_err();
    assert!(
        e.contains("ow.txt:3: 4 numbers, but the rows above have 5"),
        "{e}"
    );
}

/// Kaldi text archives of the corpus's `split`: features (`feats.ark`), posteriors
/// (`post.ark`), alignments (`ali.ark`) and feat-to-len's counts (`counts`), under `out`.
fn kaldi_archives(data: &Path, split: &str, out: &Path) -> Vec<(String, usize)> {
    let scp = s(&data.join(format!("{split}.scp")));
    let feats = compnet::io::htk::read_scp_features(&scp, Some(&s(data)), Some(DIM)).unwrap();
    let map = compnet::io::mlf::LabelMap::read(&s(&data.join("states.list"))).unwrap();
    let mlf =
        compnet::io::mlf::Mlf::read(&s(&data.join(format!("{split}.mlf"))), Some(&map)).unwrap();
    let (mut f, mut p, mut a, mut c) = (String::new(), String::new(), String::new(), String::new());
    let mut utts = Vec::new();
    for (key, m) in &feats {
        f.push_str(&format!("{key}  [\n"));
        for r in 0..m.num_rows() {
            let row: Vec<String> = m.row_to_vec(r).iter().map(|x| x.to_string()).collect();
            f.push_str(&format!("  {}\n", row.join(" ")));
        }
        f.push_str("]\n");
        let labels = &mlf.get(key).unwrap().labels;
        p.push_str(key);
        a.push_str(key);
        for l in labels {
            p.push_str(&format!(" [ {l} 1 ]"));
            a.push_str(&format!(" {l}"));
        }
        p.push('\n');
        a.push('\n');
        c.push_str(&format!("{key} {}\n", m.num_rows()));
        utts.push((key.clone(), m.num_rows()));
    }
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(out.join("feats.ark"), f).unwrap();
    std::fs::write(out.join("post.ark"), p).unwrap();
    std::fs::write(out.join("ali.ark"), a).unwrap();
    std::fs::write(out.join("counts"), c).unwrap();
    utts
}

/// CNTK's KaldiReader as Kaldi's recipes for CNTK set it up (rx and mlfFile name files that
/// hold rspecifiers, scpFile lists the utterances with their frames), with the SGD settings
/// CNTK scales its own way (momentum and dropout per epoch, norm clipping, per-sample L1/L2);
/// then eval reads alignments, write reads features; bad lists and mappings name file and
/// line.
#[test]
fn kaldi_reader_and_cntk_sgd_settings_train_evaluate_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    make_data(&data);
    let tr = dir.path().join("kaldi_train");
    let te = dir.path().join("kaldi_test");
    kaldi_archives(&data, "train", &tr);
    let test_utts = kaldi_archives(&data, "test", &te);
    std::fs::write(
        tr.join("cntk_train.feats"),
        format!("ark:{}\n", s(&tr.join("feats.ark"))),
    )
    .unwrap();
    std::fs::write(
        tr.join("cntk_train.labels"),
        format!("ark:{}\n", s(&tr.join("post.ark"))),
    )
    .unwrap();
    let mapping: String = (0..STATES).map(|i| format!("{i}\n")).collect();
    std::fs::write(tr.join("cntk_label.mapping"), &mapping).unwrap();
    let exp = dir.path().join("exp");
    let config = dir.path().join("kaldi.config");
    let text = format!(
        "command=Train:Test:Write\ndeviceId=-1\nTR={tr}\nTE={te}\n\
         Train=[\n action=train\n modelPath={exp}/k.dnn\n\
         NDLNetworkBuilder=[ndlMacros={EX}/ndl/macros.ndl; networkDescription={EX}/ndl/one_layer.ndl]\n\
         SGD=[minibatchSize=64; learningRatesPerMB=0.8; momentumPerMB=0.5:0.9; maxEpochs=3\n\
              L2RegWeight=0.00001; L1RegWeight=0.000001; dropoutRate=0.1:0\n\
              gradientClippingWithTruncation=false; clippingThresholdPerSample=5]\n\
         reader=[readerType=KaldiReader; randomSeed=2\n\
           features=[dim=24; rx=$TR$/cntk_train.feats; scpFile=$TR$/counts]\n\
           labels=[mlfFile=$TR$/cntk_train.labels; labelDim=12; labelMappingFile=$TR$/cntk_label.mapping]]\n]\n\
         Test=[\n action=eval\n modelPath={exp}/k.dnn\n\
         reader=[readerType=KaldiReader\n features=[dim=24; scpFile=ark:$TE$/feats.ark]\n\
           labels=[aliFile=ark:$TE$/ali.ark; labelDim=12]]\n]\n\
         Write=[\n action=write\n modelPath={exp}/k.dnn\n outputNodeNames=L1.S\n outputPath={exp}/out\n\
         reader=[readerType=KaldiReader; features=[dim=24; scpFile=ark:$TE$/feats.ark]]\n]\n",
        tr = s(&tr),
        te = s(&te),
        exp = s(&exp),
    );
    std::fs::write(&config, text).unwrap();
    let run = cli::succeeds(BIN, &["cntk", &s(&config)]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout).into_owned(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    );
    assert!(
        stderr.contains(
            "SGD: momentum 0.5:0.9:0.9 (unit gain), dropout per epoch 0.1:0, clipping by norm \
             at 5 per sample, L1 0.000001 and L2 0.00001 per sample"
        ),
        "{stderr}"
    );
    let err = error_rate(&stdout);
    assert!(err < 0.2, "error rate {err}:\n{stdout}");
    // write: one Kaldi text matrix per test utterance, of L1.S's dimension.
    let written = std::fs::read_to_string(exp.join("out.L1.S")).unwrap();
    assert_eq!(written.matches('[').count(), test_utts.len());
    let first = &test_utts[0];
    let rows = written
        .split(&format!("{}  [", first.0))
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>();
    assert_eq!(rows.len(), first.1);
    assert_eq!(rows[0].split_whitespace().count(), 64);
    // A count that disagrees with the features names the list's line.
    let counts = std::fs::read_to_string(tr.join("counts")).unwrap();
    let mut lines: Vec<String> = counts.lines().map(str::to_string).collect();
    let key = lines[2].split_whitespace().next().unwrap().to_string();
    lines[2] = format!("{key} 999");
    std::fs::write(tr.join("counts"), lines.join("\n") + "\n").unwrap();
    std::fs::remove_file(exp.join("k.dnn")).unwrap();
    let e = fails(&["cntk", &s(&config), "command=Train"]);
    assert!(
        e.contains(&format!(
            "counts:3: utterance {key} has 999 frames here but"
        )),
        "{e}"
    );
    lines[2] = "justone".into();
    std::fs::write(tr.join("counts"), lines.join("\n") + "\n").unwrap();
    let e = fails(&["cntk", &s(&config), "command=Train"]);
    assert!(e.contains("counts:3: expected 'utterance frames'"), "{e}");
    std::fs::write(
        tr.join("counts"),
        counts.replace(&format!("{key} "), "ghost_utt "),
    )
    .unwrap();
    let e = fails(&["cntk", &s(&config), "command=Train"]);
    assert!(e.contains("counts:3: utterance ghost_utt is not in"), "{e}");
    std::fs::write(tr.join("counts"), &counts).unwrap();
    // The mapping must be the identity on pdf ids; rx must hold an rspecifier.
    std::fs::write(tr.join("cntk_label.mapping"), mapping.replace("3\n", "x\n")).unwrap();
    let e = fails(&["cntk", &s(&config), "command=Train"]);
    assert!(
        e.contains("cntk_label.mapping:4: 'x': a KaldiReader's labels are pdf ids"),
        "{e}"
    );
    std::fs::write(tr.join("cntk_label.mapping"), &mapping).unwrap();
    std::fs::write(tr.join("cntk_train.feats"), "feats.ark\n").unwrap();
    let e = fails(&["cntk", &s(&config), "command=Train"]);
    assert!(
        e.contains("cntk_train.feats:1 holds 'feats.ark', not a Kaldi rspecifier"),
        "{e}"
    );
}

/// `compnet fit` takes CNTK's settings as its own options: dropout and momentum per epoch,
/// unit-gain momentum, norm clipping and per-sample L1/L2; the last epoch's dropout is in the
/// model it writes.
#[test]
fn fit_takes_cntk_sgd_settings_as_options() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    make_data(&data);
    let train = dir.path().join("train");
    std::fs::create_dir_all(&train).unwrap();
    let scp = std::fs::read_to_string(data.join("train.scp")).unwrap();
    std::fs::write(
        train.join("feats.scp"),
        scp.replace("train.htk", "../data/train.htk"),
    )
    .unwrap();
    std::fs::copy(data.join("train.mlf"), train.join("labels.mlf")).unwrap();
    std::fs::copy(data.join("states.list"), train.join("labels.map")).unwrap();
    let net = dir.path().join("net.config");
    std::fs::write(
        &net,
        NET.replace(
            "component-node name=o component=o input=r",
            "component name=d type=DropoutComponent dim=32 dropout-proportion=0.0\n\
             component-node name=d component=d input=r\n\
             component-node name=o component=o input=d",
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let args = [
        "fit".to_string(),
        s(&net),
        "--train".into(),
        s(&train),
        "--out".into(),
        s(&out),
        "--stepper=momentum".into(),
        "--momentum-schedule=0.5:0.9".into(),
        "--momentum-gain=unit".into(),
        "--dropout-per-epoch=0.25:0.5".into(),
        "--clip-gradient=1".into(),
        "--clip-by=norm".into(),
        "--regularize-per=sample".into(),
        "--l2=0.0001".into(),
        "--l1=0.00001".into(),
        "--num-epochs=2".into(),
        "--learning-rate=0.01".into(),
    ];
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let model = compnet::nnet::Nnet::read_model_file(&s(&out.join("final.raw")))
        .unwrap()
        .nnet;
    let text_path = dir.path().join("final.txt");
    model.write_model_file(&s(&text_path), false).unwrap();
    let text = std::fs::read_to_string(&text_path).unwrap();
    assert!(text.contains("<DropoutProportion> 0.5 "), "{text}");
    for (bad, want) in [
        (
            "--clip-by=sideways",
            "--clip-by=sideways: expected value or norm",
        ),
        (
            "--regularize-per=epoch",
            "--regularize-per=epoch: expected minibatch or sample",
        ),
        (
            "--momentum-gain=double",
            "--momentum-gain=double: expected classic or unit",
        ),
        (
            "--dropout-per-epoch=0.5:1.5",
            "--dropout-per-epoch: 1.5 is not a proportion",
        ),
        (
            "--momentum-schedule=0.5:1",
            "--momentum-schedule: 1 is not in [0, 1)",
        ),
    ] {
        let mut a: Vec<&str> = args[..7].iter().map(String::as_str).collect();
        a.push(bad);
        let e = fails(&a);
        assert!(e.contains(want), "{bad}: {e}");
    }
}

/// A feed-forward NDL network over `v` one-hot inputs (times `ctx` stacked words) and `out`
/// labels, with the bundled macros.
fn text_ndl(dir: &Path, v: usize, ctx: usize, out: usize) -> String {
    let p = dir.join("text.ndl");
    std::fs::write(
        &p,
        format!(
            "features=Input({}, tag=feature)\nlabels=Input({out}, tag=label)\n\
             L1=SBFF(features, 24, {})\nCE=SMBFF(L1, {out}, 24, labels, tag=Criteria)\n\
             Err=ErrorPrediction(labels, CE.BFF, tag=Eval)\n",
            v * ctx,
            v * ctx
        ),
    )
    .unwrap();
    s(&p)
}

/// CNTK's LMSequenceReader: sentences of a word-class vocabulary, each a sequence whose
/// labels are the next words (`</s>` added at both ends), trained and evaluated through
/// `compnet cntk`. The sentences run w_k, w_k+1, ..., w7 from a random k, so every next word
/// but the first is determined: the error rate falls far below chance (8/9).
#[test]
fn lm_sequence_reader_trains_a_next_word_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut vocab = String::from("0 100 </s> 0\n");
    for w in 0..8 {
        vocab.push_str(&format!("{} 10 w{w} {}\n", w + 1, w % 2));
    }
    std::fs::write(d.join("vocab.txt"), &vocab).unwrap();
    let mut rng = compnet::random::seeded_rng(3);
    let mut text = String::new();
    for _ in 0..200 {
        let k = rng.random_range(0..7);
        let words: Vec<String> = (k..8).map(|w| format!("w{w}")).collect();
        text.push_str(&(words.join(" ") + "\n"));
    }
    std::fs::write(d.join("train.txt"), &text).unwrap();
    let ndl = text_ndl(d, 9, 1, 9);
    let reader = |f: &str| {
        format!(
            "reader=[readerType=LMSequenceReader; randomize=None; wordclass={dir}/vocab.txt\n\
               file={dir}/{f}; features=[dim=0]\n\
               labelIn=[labelType=Category; labelDim=9; beginSequence=\"</s>\"; endSequence=\"</s>\"]\n\
               labels=[labelType=NextWord; labelDim=9]]\n",
            dir = s(d)
        )
    };
    std::fs::write(
        d.join("lm.config"),
        format!(
            "command=Train:Test\ndeviceId=-1\n\
             Train=[action=train; modelPath={dir}/lm.dnn\n\
             NDLNetworkBuilder=[ndlMacros={EX}/ndl/macros.ndl; networkDescription={ndl}]\n\
             SGD=[minibatchSize=8; learningRatesPerMB=2; momentumPerMB=0.9; maxEpochs=20]\n{}]\n\
             Test=[action=eval; modelPath={dir}/lm.dnn\n{}]\n",
            reader("train.txt"),
            reader("train.txt"),
            dir = s(d)
        ),
    )
    .unwrap();
    let cfg = s(&d.join("lm.config"));
    let out = cli::succeeds(BIN, &["cntk", &cfg]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let tokens: usize = text.lines().map(|l| l.split_whitespace().count() + 1).sum();
    assert!(
        stderr.contains(&format!("200 sentences, {tokens} tokens, 9 words")),
        "{stderr}"
    );
    let err = error_rate(&stdout);
    assert!(err < 0.3, "error rate {err}:\n{stdout}");
    // The word after </s> is drawn at random: a model that sees one word at a time errs at
    // least on every sentence that does not start with the commonest first word (a reader
    // whose labels were the inputs themselves would reach 0).
    let mut firsts = std::collections::HashMap::new();
    for l in text.lines() {
        *firsts
            .entry(l.split_whitespace().next().unwrap())
            .or_insert(0usize) += 1;
    }
    let floor = (200 - firsts.values().max().unwrap()) as f64 / tokens as f64;
    assert!(
        err > 0.99 * floor,
        "error rate {err} below the floor {floor}"
    );
    // Malformed input names the file and line.
    std::fs::write(d.join("bad.txt"), "w1 w2\nw3 nope w4\n").unwrap();
    let e = fails(&[
        "cntk",
        &cfg,
        "command=Test",
        &format!("Test.reader.file={}/bad.txt", s(d)),
    ]);
    assert!(
        e.contains("bad.txt:2: 'nope' is not in the vocabulary, and neither is unk='<unk>'"),
        "{e}"
    );
    std::fs::write(d.join("vocab.txt"), vocab.replace("3 10 w2 0", "3 10 w2")).unwrap();
    let e = fails(&["cntk", &cfg, "command=Test"]);
    assert!(
        e.contains("vocab.txt:4: expected 'index count word class' (4 fields), got 3"),
        "{e}"
    );
    std::fs::write(d.join("vocab.txt"), &vocab).unwrap();
    let e = fails(&[
        "cntk",
        &cfg,
        "command=Test",
        "Test.reader.labelIn.labelDim=10",
    ]);
    assert!(
        e.contains("labelDim=10, but the token list has 9 entries"),
        "{e}"
    );
}

/// CNTK's LUSequenceReader on ATIS-style slot filling: `word label` lines, sentences between
/// blank lines, token files for the words and labels, a word map, `wordContext=-1:0` (the
/// previous word stacked beside each word, which is what tells a city after "from" from one
/// after "to"): trained and evaluated to a low error; a bad line names the file and line.
#[test]
fn lu_sequence_reader_tags_tokens_with_word_context() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cities = ["boston", "denver", "dallas", "seattle"];
    let mut words = vec!["BOS", "EOS", "flights", "from", "to", "<unk>"];
    words.extend(cities);
    std::fs::write(d.join("input.txt"), words.join("\n") + "\n").unwrap();
    std::fs::write(d.join("output.txt"), "O\nB-fromloc\nB-toloc\n").unwrap();
    std::fs::write(d.join("wordmap.txt"), "flight flights\n").unwrap();
    let mut rng = compnet::random::seeded_rng(5);
    let mut text = String::new();
    for i in 0..150 {
        let (a, b) = (rng.random_range(0..4), rng.random_range(0..4));
        let f = if i % 2 == 0 { "flights" } else { "flight" };
        let (first, second) = if i % 3 == 0 {
            (("to", "B-toloc"), ("from", "B-fromloc"))
        } else {
            (("from", "B-fromloc"), ("to", "B-toloc"))
        };
        text.push_str(&format!(
            "BOS O\n{f} O\n{} O\n{} {}\n{} O\n{} {}\nEOS O\n\n",
            first.0, cities[a], first.1, second.0, cities[b], second.1
        ));
    }
    std::fs::write(d.join("atis.txt"), &text).unwrap();
    let ndl = text_ndl(d, words.len(), 2, 3);
    std::fs::write(
        d.join("lu.config"),
        format!(
            "command=Train:Test\ndeviceId=-1\nD={dir}\n\
             reader=[readerType=LUSequenceReader; randomize=None; wordContext=-1:0; unk=\"<unk>\"\n\
               wordmap=$D$/wordmap.txt; file=$D$/atis.txt; features=[dim=0]\n\
               labelIn=[labelType=Category; usewordmap=true; labelDim=10; beginSequence=\"BOS\"; endSequence=\"EOS\"; token=$D$/input.txt]\n\
               labels=[labelType=Category; token=$D$/output.txt]]\n\
             Train=[action=train; modelPath=$D$/lu.dnn\n\
             NDLNetworkBuilder=[ndlMacros={EX}/ndl/macros.ndl; networkDescription={ndl}]\n\
             SGD=[minibatchSize=8; learningRatesPerMB=0.5; momentumPerMB=0.9; maxEpochs=8]]\n\
             Test=[action=eval; modelPath=$D$/lu.dnn]\n",
            dir = s(d)
        ),
    )
    .unwrap();
    let cfg = s(&d.join("lu.config"));
    let out = cli::succeeds(BIN, &["cntk", &cfg]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = error_rate(&stdout);
    assert!(err < 0.05, "error rate {err}:\n{stdout}");
    // Without the word map, "flight" is <unk> (still read); a label outside the label
    // tokens, or a line without one, names the line.
    let bad = text.replacen("B-toloc", "B-city", 1);
    let line = text.lines().position(|l| l.ends_with("B-toloc")).unwrap() + 1;
    std::fs::write(d.join("atis.txt"), &bad).unwrap();
    let e = fails(&["cntk", &cfg, "command=Test"]);
    assert!(
        e.contains(&format!(
            "atis.txt:{line}: label 'B-city' is not in the label tokens"
        )),
        "{e}"
    );
    std::fs::write(d.join("atis.txt"), text.replacen("EOS O\n", "EOS\n", 1)).unwrap();
    let e = fails(&["cntk", &cfg, "command=Test"]);
    assert!(
        e.contains("atis.txt:7: expected 'word label', got 'EOS'"),
        "{e}"
    );
    std::fs::write(d.join("atis.txt"), &text).unwrap();
    let e = fails(&["cntk", &cfg, "command=Test", "reader.wordContext=0"]);
    assert!(
        e.contains("10 words × 1 context position(s) = 10 inputs, but the network's input has dimension 20"),
        "{e}"
    );
}

/// `compnet fit` trains from the text sequence readers' formats too: a directory holding
/// `sentences.txt` and `words.txt` (a language model: next-word labels, `</s>` at both ends)
/// or `slots.txt`, `words.txt` and `labels.txt` (per-token labels).
#[test]
fn fit_trains_from_sentence_and_slot_directories() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let net = d.join("net.config");
    let config = |v: usize, out: usize| {
        format!(
            "input-node name=input dim={v}\n\
             component name=a type=AffineComponent input-dim={v} output-dim=16\n\
             component name=r type=SigmoidComponent dim=16\n\
             component name=o type=AffineComponent input-dim=16 output-dim={out}\n\
             component name=ls type=LogSoftmaxComponent dim={out}\n\
             component-node name=a component=a input=input\n\
             component-node name=r component=r input=a\n\
             component-node name=o component=o input=r\n\
             component-node name=ls component=ls input=o\n\
             output-node name=output input=ls objective=linear\n"
        )
    };
    let fit = |data: &Path, out: &str| {
        ok(&[
            "fit",
            &s(&net),
            "--train",
            &s(data),
            "--valid",
            &s(data),
            "--out",
            &s(&d.join(out)),
            "--stepper=adam",
            "--num-epochs=15",
            "--minibatch-size=4",
            "--learning-rate=0.02",
            "--srand=1",
        ])
    };
    let accuracy = |stdout: &str| -> f64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("validation accuracy "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"))
    };
    // Sentences w_k ... w7: every next word but the first is determined.
    let lm = d.join("lm");
    std::fs::create_dir_all(&lm).unwrap();
    let words: Vec<String> = std::iter::once("</s>".to_string())
        .chain((0..8).map(|w| format!("w{w}")))
        .collect();
    std::fs::write(lm.join("words.txt"), words.join("\n") + "\n").unwrap();
    let text: String = (0..60)
        .map(|i| {
            (i % 7..8)
                .map(|w| format!("w{w}"))
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        })
        .collect();
    std::fs::write(lm.join("sentences.txt"), &text).unwrap();
    std::fs::write(&net, config(9, 9)).unwrap();
    let acc = accuracy(&fit(&lm, "lm_out"));
    assert!(acc > 0.7, "LM accuracy {acc}");
    // Slots: the label is a function of the word.
    let lu = d.join("lu");
    std::fs::create_dir_all(&lu).unwrap();
    std::fs::write(lu.join("words.txt"), "BOS\nEOS\nto\nboston\ndenver\n").unwrap();
    std::fs::write(lu.join("labels.txt"), "O\nB-city\n").unwrap();
    let slots: String = (0..40)
        .map(|i| {
            format!(
                "BOS O\nto O\n{} B-city\nEOS O\n\n",
                ["boston", "denver"][i % 2]
            )
        })
        .collect();
    std::fs::write(lu.join("slots.txt"), &slots).unwrap();
    std::fs::write(&net, config(5, 2)).unwrap();
    let acc = accuracy(&fit(&lu, "lu_out"));
    assert!(acc > 0.95, "LU accuracy {acc}");
    // A bad line names the file and line.
    std::fs::write(lu.join("slots.txt"), slots.replacen("to O", "to", 1)).unwrap();
    let e = fails(&[
        "fit",
        &s(&net),
        "--train",
        &s(&lu),
        "--out",
        &s(&d.join("lu_bad")),
    ]);
    assert!(
        e.contains("slots.txt:2: expected 'word label', got 'to'"),
        "{e}"
    );
}
