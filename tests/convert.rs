//! `compnet convert`: the nnet3 config a Brainstorm architecture becomes, re-read by the Kaldi
//! reader, is the same network (byte-identical model files for the same `--srand`); Kaldi's
//! command-line habits; failures leave no output behind.

use compnet::frontend::brainstorm;
use compnet::nnet::Nnet;
use compnet::random::seeded_rng;
use std::path::Path;
use std::process::{Command, Output};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
const BIN: &str = env!("CARGO_BIN_EXE_compnet");
const ARCHS: &[&str] = &[
    "seed_basic.json",
    "layout_example.json",
    "lstm_highway.json",
    "convnet.json",
];

fn compnet(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run compnet")
}

fn ok(args: &[&str]) -> Output {
    let o = compnet(args);
    assert!(
        o.status.success(),
        "compnet {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn fails(args: &[&str]) -> String {
    let o = compnet(args);
    assert!(!o.status.success(), "compnet {args:?} should fail");
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!e.contains("panicked"), "{e}");
    e
}

fn read(p: &str) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn converted_brainstorm_configs_initialise_to_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    for arch in ARCHS {
        let json = format!("{DATA}/brainstorm/{arch}");
        ok(&["convert", "--from=brainstorm", &json, &p("net.config")]);
        ok(&["init", "--srand=7", &json, &p("a.raw")]);
        ok(&["init", "--srand=7", &p("net.config"), &p("b.raw")]);
        assert!(read(&p("a.raw")) == read(&p("b.raw")), "{arch}");
        // In the library too: the Kaldi reader on the printed config, node for node.
        let text = std::fs::read_to_string(&json).unwrap();
        let config = brainstorm::lower(&text, arch).unwrap().config_text();
        let kaldi = Nnet::from_config_text(&config, "converted", &mut seeded_rng(3)).unwrap();
        let direct = brainstorm::read_brainstorm(&text, arch, &mut seeded_rng(3)).unwrap();
        assert_eq!(kaldi.config_lines(), direct.config_lines(), "{arch}");
        assert!(
            kaldi.write_model(false) == direct.write_model(false),
            "{arch}"
        );
    }
}

#[test]
fn convert_follows_kaldis_command_line_habits() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let json = format!("{DATA}/brainstorm/seed_basic.json");
    // `-` is stdout; `--from brainstorm` (spaced) works; the last of a repeated option wins.
    let o = ok(&[
        "convert",
        "--from",
        "ndl",
        "--from",
        "brainstorm",
        &json,
        "-",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.starts_with("# nnet3 config from seed_basic.json (brainstorm)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("input-node name=input dim=784\n"),
        "{stdout}"
    );
    // The command line is echoed to stderr, unless --print-args=false.
    assert!(String::from_utf8_lossy(&o.stderr).contains("convert"));
    let o = ok(&["convert", "--print-args=false", &json, "-"]);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Options from a --config file.
    std::fs::write(p("opts.conf"), "--from=brainstorm\n").unwrap();
    std::fs::copy(&json, p("arch.txt")).unwrap();
    ok(&[
        "convert",
        &format!("--config={}", p("opts.conf")),
        &p("arch.txt"),
        &p("x.config"),
    ]);
    assert!(read(&p("x.config")).starts_with(b"# nnet3 config from arch.txt (brainstorm)"));
    // --help names the arguments.
    let o = ok(&["convert", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("<network-in> <config-out>"));
    // Wrong argument counts and formats.
    fails(&["convert", &json]);
    let e = fails(&["convert", "--from=kaldi", &json, &p("y.config")]);
    assert!(e.contains("nnet3 config already"), "{e}");
    let e = fails(&["convert", "--from=caffe", &json, &p("y.config")]);
    assert!(e.contains("unknown network format 'caffe'"), "{e}");
}

#[test]
fn a_failed_convert_leaves_the_old_output_alone() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("out.config"), "old\n").unwrap();
    // A SquaredError whose targets have 7 dims for a 10-dim prediction.
    let bad = std::fs::read_to_string(format!("{DATA}/brainstorm/layout_example.json"))
        .unwrap()
        .replace("[\"T\", \"B\", 10]", "[\"T\", \"B\", 7]");
    std::fs::write(p("bad.json"), bad).unwrap();
    let e = fails(&["convert", &p("bad.json"), &p("out.config")]);
    assert!(e.contains("bad.json:6:25: size mismatch"), "{e}");
    assert_eq!(read(&p("out.config")), b"old\n");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().count() == 2,
        "a temporary file was left behind"
    );
    assert!(Path::new(&p("bad.json")).exists());
}

/// A small NDL network for the bundled frame-classification data (13 dims, 8 classes).
const SMALL_NDL: &str = "SimpleNetworkBuilder = [\n  layerSizes = 13:32:8\n  \
                         trainingCriterion = CrossEntropyWithSoftmax\n  layerTypes = Sigmoid\n]\n";

#[test]
fn ndl_converts_to_a_config_of_the_same_network() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    std::fs::write(p("small.ndl"), SMALL_NDL).unwrap();
    let small = p("small.ndl");
    let files = ["autoencoder.ndl", "lstm.ndl", "cnn.ndl"].map(|f| format!("{DATA}/ndl/{f}"));
    for path in files.iter().chain([&small]) {
        let o = ok(&["convert", "--srand=4", path, &p("net.config")]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("nnet3 config"));
        let config = std::fs::read_to_string(p("net.config")).unwrap();
        assert!(config.contains("# initial values"), "{path}: {config}");
        // The config initialises to the network the NDL file gives, but for initial values.
        ok(&["init", "--srand=4", &p("net.config"), &p("from_config.raw")]);
        let converted = Nnet::read_model_file(&p("from_config.raw")).unwrap().nnet;
        let text = std::fs::read_to_string(path).unwrap();
        let direct = compnet::frontend::ndl::read_ndl(&text, path, &mut seeded_rng(4)).unwrap();
        assert_eq!(converted.config_lines(), direct.config_lines(), "{path}");
        assert_eq!(converted.component_names, direct.component_names, "{path}");
        for (k, (a, b)) in converted
            .components
            .iter()
            .zip(&direct.components)
            .enumerate()
        {
            assert_eq!(a.type_name(), b.type_name(), "{path}: component {k}");
            assert_eq!(a.input_dim(), b.input_dim(), "{path}: component {k}");
            assert_eq!(a.output_dim(), b.output_dim(), "{path}: component {k}");
            assert_eq!(
                a.as_updatable().map(|u| u.num_parameters()),
                b.as_updatable().map(|u| u.num_parameters()),
                "{path}: component {k}"
            );
        }
        assert!(!direct.components.is_empty(), "{path}");
    }
}

/// The training objectives of metrics.jsonl, one per epoch.
fn train_objectives(out: &str) -> Vec<f64> {
    std::fs::read_to_string(Path::new(out).join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["train_objective"].as_f64().unwrap()
        })
        .collect()
}

#[test]
fn init_and_fit_read_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train");
    std::fs::create_dir_all(p("train")).unwrap();
    std::fs::copy(format!("{ex}/train_feats.ark"), p("train/feats.ark")).unwrap();
    std::fs::copy(format!("{ex}/train_post.txt"), p("train/post.ark")).unwrap();
    std::fs::write(p("small.ndl"), SMALL_NDL).unwrap();
    std::fs::write(p("small.txt"), SMALL_NDL).unwrap();
    let json = format!("{DATA}/brainstorm/lstm_highway.json");
    std::fs::copy(&json, p("lstm.arch")).unwrap();
    let cases: [(&str, &[&str]); 5] = [
        (&format!("{ex}/net.config"), &[]),
        (&p("small.ndl"), &[]),
        (&p("small.txt"), &["--format=ndl"]),
        (&json, &[]),
        (&p("lstm.arch"), &["--format=brainstorm"]),
    ];
    for (i, (net, format)) in cases.iter().enumerate() {
        let raw = p(&format!("{i}.raw"));
        let mut args = vec!["init", "--srand=1"];
        args.extend_from_slice(format);
        args.extend([*net, raw.as_str()]);
        ok(&args);
        let info = String::from_utf8_lossy(&ok(&["info", &raw]).stdout).into_owned();
        assert!(info.contains("output-node name=output"), "{net}: {info}");

        let out = p(&format!("out{i}"));
        let train = p("train");
        let mut args = vec![
            "fit",
            net,
            "--train",
            &train,
            "--out",
            &out,
            "--num-epochs=3",
            "--stepper=adam",
            "--lr-per=minibatch",
            "--learning-rate=0.005",
            "--extra-left-context=4",
            "--srand=1",
        ];
        args.extend_from_slice(format);
        ok(&args);
        let obj = train_objectives(&out);
        assert!(obj[2] > obj[0], "{net}: objective did not rise: {obj:?}");
    }
    // A format named wrongly is an error of that front end, naming the file.
    let e = fails(&["init", "--format=brainstorm", &p("small.ndl"), &p("x.raw")]);
    assert!(e.contains("small.ndl:1:1: expected a JSON value"), "{e}");
}

/// SimpleNetworkBuilder settings compnet accepts without acting on them are named in a
/// warning, so nobody believes their features were normalised.
#[test]
fn ignored_simple_network_builder_settings_warn() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let ndl = SMALL_NDL.replace("layerTypes", "applyMeanVarNorm = true\n  layerTypes");
    std::fs::write(p("mvn.ndl"), ndl).unwrap();
    let o = ok(&["init", &p("mvn.ndl"), &p("mvn.raw")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "warning: SimpleNetworkBuilder setting 'applyMeanVarNorm' (line 4) has no effect"
        ),
        "{err}"
    );
    // Without such a setting, no warning.
    std::fs::write(p("plain.ndl"), SMALL_NDL).unwrap();
    let o = ok(&["init", &p("plain.ndl"), &p("plain.raw")]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}
