//! The `init`, `info` and `copy` commands, checked against Kaldi's golden outputs
//! (tests/data/kaldi): info text, config lines with dimensions, parameter counts, option
//! forms, learning-rate and scale edits, stdin/stdout, and the bundled example.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use compnet::testing::golden::known_missing;
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

fn case(name: &str) -> PathBuf {
    Path::new(GOLDEN).join("cases").join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs compnet (in `dir` if given) with optional stdin; never accepts a panic.
fn run_in(dir: Option<&Path>, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compnet"));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let mut child = cmd.spawn().expect("spawn compnet");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(b) = stdin {
            input.write_all(b).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked"),
        "compnet {args:?} panicked: {err}"
    );
    out
}

fn run(args: &[&str]) -> Output {
    run_in(None, args, None)
}

fn ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "compnet {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every case but the known-missing ones (`testing::golden::KNOWN_MISSING`), which must fail
/// to read, naming the unknown component type.
fn readable_cases() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(Path::new(GOLDEN).join("cases"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let out = run(&["info", s(&case(n).join("model.raw"))]);
            if known_missing(n).is_some() {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    !out.status.success() && err.contains("component type"),
                    "known-missing case {n}: {err}"
                );
                return false;
            }
            true
        })
        .collect();
    v.sort();
    v
}

/// Golden info.txt split into (context lines, everything else).
fn golden_info(dir: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(dir.join("info.txt")).unwrap();
    text.lines()
        .map(str::to_string)
        .partition(|l| l.starts_with("left-context:") || l.starts_with("right-context:"))
}

/// The "component name=X type=T" part of a component line.
fn component_head(line: &str) -> &str {
    line.split(", ").next().unwrap_or(line)
}

/// Compares our info with Kaldi's: header and node lines exactly, component lines by name and
/// type (their statistics come from each component's own summary).
fn check_info(ours: &str, dir: &Path) -> Vec<String> {
    let (ctx, rest) = golden_info(dir);
    let ours: Vec<&str> = ours.lines().collect();
    let (our_ctx, our_rest): (Vec<&str>, Vec<&str>) = ours
        .iter()
        .partition(|l| l.starts_with("left-context:") || l.starts_with("right-context:"));
    let mut problems = Vec::new();
    if our_ctx != ctx {
        problems.push(format!("context lines {our_ctx:?} vs kaldi {ctx:?}"));
    }
    if our_rest.len() != rest.len() {
        problems.push(format!("{} lines vs kaldi {}", our_rest.len(), rest.len()));
    }
    for (a, b) in our_rest.iter().zip(&rest) {
        let same = if b.starts_with("component name=") {
            component_head(a) == component_head(b)
        } else {
            *a == b
        };
        if !same {
            problems.push(format!("ours:  {a}\nkaldi: {b}"));
        }
    }
    problems
}

#[test]
fn info_matches_kaldi_on_golden_models() {
    let cases = readable_cases();
    assert!(cases.len() >= 12, "only {cases:?} readable");
    let mut problems = Vec::new();
    for c in &cases {
        let out = ok(&["info", s(&case(c).join("model.raw"))]);
        for p in check_info(&String::from_utf8_lossy(&out.stdout), &case(c)) {
            problems.push(format!("{c}: {p}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `init` on each golden config gives Kaldi's structure: node lines with dimensions,
/// parameter count and component types (parameters are random, so only those).
#[test]
fn init_builds_kaldis_structure_from_golden_configs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut problems = Vec::new();
    for c in readable_cases() {
        let dir = case(&c);
        let out = tmp.path().join(format!("{c}.raw"));
        // Relative matrix files (lda.mat, scales.vec) are read from the case folder.
        let r = run_in(
            Some(&dir),
            &["init", "--srand=1", "net.config", s(&out)],
            None,
        );
        if !r.status.success() {
            problems.push(format!(
                "{c}: init failed: {}",
                String::from_utf8_lossy(&r.stderr)
            ));
            continue;
        }
        let info = ok(&["info", s(&out)]);
        for p in check_info(&String::from_utf8_lossy(&info.stdout), &dir) {
            problems.push(format!("{c}: {p}"));
        }
        checked += 1;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 7, "only {checked} configs checked");
}

#[test]
fn binary_option_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = case("seed").join("model.raw");
    let golden_txt = std::fs::read(case("seed").join("model.txt")).unwrap();
    let golden_raw = std::fs::read(&raw).unwrap();
    for (i, form) in [
        vec!["--binary=false"],
        vec!["--binary", "false"],
        vec!["--binary=f"],
        vec!["--binary=FALSE"],
        vec!["--binary=0"],
    ]
    .iter()
    .enumerate()
    {
        let out = tmp.path().join(format!("t{i}"));
        let mut args = vec!["copy"];
        args.extend(form.iter().copied());
        args.extend([s(&raw), s(&out)]);
        ok(&args);
        assert_eq!(std::fs::read(&out).unwrap(), golden_txt, "form {form:?}");
    }
    for (i, form) in [
        vec!["--binary=true"],
        vec!["--binary", "true"],
        vec!["--binary=t"],
        vec![],
    ]
    .iter()
    .enumerate()
    {
        let out = tmp.path().join(format!("b{i}"));
        let mut args = vec!["copy"];
        args.extend(form.iter().copied());
        args.extend([s(&raw), s(&out)]);
        ok(&args);
        assert_eq!(std::fs::read(&out).unwrap(), golden_raw, "form {form:?}");
    }
    // `--binary` alone means true (Kaldi), when followed by another option.
    let out = tmp.path().join("bare");
    ok(&["copy", "--binary", "--scale=1", s(&raw), s(&out)]);
    assert_eq!(std::fs::read(&out).unwrap(), golden_raw);
    let bad = run(&["copy", "--binary=maybe", s(&raw), s(&out)]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("maybe"));
}

/// `--learning-rate` sets every updatable component's rate: the result equals Kaldi's text
/// with each `<LearningRate>` value replaced.
#[test]
fn copy_sets_learning_rate() {
    let tmp = tempfile::tempdir().unwrap();
    for c in ["seed", "simplest", "tdnn-splice-ivector"] {
        let out = tmp.path().join(format!("{c}.txt"));
        ok(&[
            "copy",
            "--binary=false",
            "--learning-rate=0.0125",
            s(&case(c).join("model.raw")),
            s(&out),
        ]);
        let golden = std::fs::read_to_string(case(c).join("model.txt")).unwrap();
        assert!(golden.contains("<LearningRate> 0.001 "));
        let expected = golden.replace("<LearningRate> 0.001 ", "<LearningRate> 0.0125 ");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected, "{c}");
    }
}

/// Parses every number inside `[ ... ]` after each `tag` in a Kaldi text model.
fn bracket_numbers(text: &str, tag: &str) -> Vec<f64> {
    let mut v = Vec::new();
    for part in text.split(tag).skip(1) {
        let body = part.split_once('[').unwrap().1.split_once(']').unwrap().0;
        v.extend(body.split_whitespace().map(|t| t.parse::<f64>().unwrap()));
    }
    v
}

/// `--scale` multiplies the parameters: 2 then 0.5 is exact in floating point, so the result
/// is Kaldi's text again; a single 0.5 halves every parameter Kaldi wrote.
#[test]
fn copy_scales_parameters() {
    let tmp = tempfile::tempdir().unwrap();
    for c in ["seed", "rnn", "misc-components"] {
        let raw = case(c).join("model.raw");
        let a = tmp.path().join(format!("{c}.a"));
        let b = tmp.path().join(format!("{c}.b"));
        ok(&["copy", "--scale=2", s(&raw), s(&a)]);
        ok(&["copy", "--binary=false", "--scale", "0.5", s(&a), s(&b)]);
        let golden = std::fs::read_to_string(case(c).join("model.txt")).unwrap();
        assert_eq!(std::fs::read_to_string(&b).unwrap(), golden, "{c}");
    }
    let half = tmp.path().join("half.txt");
    ok(&[
        "copy",
        "--binary=false",
        "--scale=0.5",
        s(&case("seed").join("model.raw")),
        s(&half),
    ]);
    let ours = std::fs::read_to_string(&half).unwrap();
    let golden = std::fs::read_to_string(case("seed").join("model.txt")).unwrap();
    for tag in ["<LinearParams>", "<BiasParams>"] {
        let (o, g) = (bracket_numbers(&ours, tag), bracket_numbers(&golden, tag));
        assert_eq!(o.len(), g.len());
        assert!(!o.is_empty());
        for (x, y) in o.iter().zip(&g) {
            assert!(
                (x - 0.5 * y).abs() <= 1e-6 * y.abs().max(1e-3),
                "{x} vs {y}/2"
            );
        }
    }
}

/// `-` reads stdin and writes stdout.
#[test]
fn stdin_and_stdout() {
    let raw = std::fs::read(case("seed").join("model.raw")).unwrap();
    let txt = std::fs::read(case("seed").join("model.txt")).unwrap();
    let out = run_in(None, &["copy", "--binary=false", "-", "-"], Some(&raw));
    assert!(out.status.success());
    assert_eq!(out.stdout, txt);
    let out = run_in(None, &["copy", "-", "-"], Some(&txt));
    assert!(out.status.success());
    let back = run_in(
        None,
        &["copy", "--binary=false", "-", "-"],
        Some(&out.stdout),
    );
    assert_eq!(back.stdout, txt);
    let info = run_in(None, &["info", "-"], Some(&raw));
    assert!(info.status.success());
    assert!(check_info(&String::from_utf8_lossy(&info.stdout), &case("seed")).is_empty());
    let cfg = std::fs::read(case("simplest").join("net.config")).unwrap();
    let init = run_in(None, &["init", "--binary=false", "-", "-"], Some(&cfg));
    assert!(init.status.success());
    assert!(init.stdout.starts_with(b"<Nnet3> \ninput-node name=input"));
}

/// Outputs that are not regular files (a FIFO here, `/dev/null` in real use) are written in
/// place: the temp-file-and-rename used for regular files would replace the special file with
/// a plain one (as root, that turns `/dev/null` into a file every program appends to).
#[test]
fn special_file_outputs_stay_special() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let model = s(&case("seed").join("model.raw")).to_string();
    let feats = format!("ark:{}", s(&Path::new(GOLDEN).join("formats/feats/fm.ark")));
    let fifo_s = s(&fifo).to_string();
    let fifo_ark = format!("ark,t:{fifo_s}");
    let runs: [Vec<&str>; 2] = [
        vec!["copy", "--binary=false", &model, &fifo_s],
        vec!["copy-feats", &feats, &fifo_ark],
    ];
    for args in runs {
        let reader_path = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read(reader_path).unwrap());
        let out = ok(&args);
        assert!(out.stdout.is_empty());
        // Checked before joining: a replaced FIFO would leave the reader blocked for ever.
        let ft = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(ft.is_fifo(), "compnet {args:?} replaced the FIFO by {ft:?}");
        let got = reader.join().unwrap();
        assert!(
            !got.is_empty(),
            "nothing came through the FIFO for {args:?}"
        );
    }
}

/// `--srand` makes initialisation reproducible, and different seeds differ.
#[test]
fn srand_is_reproducible() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = case("seed").join("net.config");
    let p = |n: &str| tmp.path().join(n);
    ok(&["init", "--srand=3", s(&cfg), s(&p("a"))]);
    ok(&["init", "--srand", "3", s(&cfg), s(&p("b"))]);
    ok(&["init", "--srand=4", s(&cfg), s(&p("c"))]);
    let (a, b, c) = (
        std::fs::read(p("a")).unwrap(),
        std::fs::read(p("b")).unwrap(),
        std::fs::read(p("c")).unwrap(),
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// FixedScale/FixedBias with only `dim=` draw their values at init: from the `--srand`
/// generator, so the same seed gives the same file and another seed another one.
#[test]
fn srand_fixes_fixed_scale_and_bias_drawn_at_init() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("fixed.config");
    std::fs::write(
        &cfg,
        "input-node name=input dim=6\n\
         component name=scale type=FixedScaleComponent dim=6\n\
         component name=bias type=FixedBiasComponent dim=6\n\
         component-node name=scale component=scale input=input\n\
         component-node name=bias component=bias input=scale\n\
         output-node name=output input=bias\n",
    )
    .unwrap();
    let p = |n: &str| tmp.path().join(n);
    ok(&["init", "--srand=5", s(&cfg), s(&p("a"))]);
    ok(&["init", "--srand=5", s(&cfg), s(&p("b"))]);
    ok(&["init", "--srand=6", s(&cfg), s(&p("c"))]);
    let read = |n: &str| std::fs::read(p(n)).unwrap();
    assert_eq!(read("a"), read("b"));
    assert_ne!(read("a"), read("c"));
}

/// `init old.raw extra.config new.raw` adds to an existing network and keeps its parameters.
#[test]
fn init_applies_config_to_existing_model() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = tmp.path().join("extra.config");
    std::fs::write(
        &extra,
        "component name=relu type=RectifiedLinearComponent dim=10\n\
         component-node name=relu component=relu input=affine\n\
         output-node name=output input=relu objective=linear\n",
    )
    .unwrap();
    let out = tmp.path().join("new.txt");
    ok(&[
        "init",
        "--binary=false",
        s(&case("simplest").join("model.raw")),
        s(&extra),
        s(&out),
    ]);
    let ours = std::fs::read_to_string(&out).unwrap();
    let golden = std::fs::read_to_string(case("simplest").join("model.txt")).unwrap();
    // The affine component is carried over unchanged.
    let affine = |t: &str| {
        let i = t.find("<ComponentName> affine ").unwrap();
        let j = t[i..].find("</AffineComponent>").unwrap();
        t[i..i + j].to_string()
    };
    assert_eq!(affine(&ours), affine(&golden));
    let info = String::from_utf8_lossy(&ok(&["info", s(&out)]).stdout).into_owned();
    assert!(
        info.contains(
            "component-node name=relu component=relu input=affine input-dim=10 output-dim=10\n"
        ),
        "{info}"
    );
    assert!(
        info.contains("output-node name=output input=relu dim=10 objective=linear\n"),
        "{info}"
    );
}

/// The bundled example builds and describes itself (the README's main command).
#[test]
fn bundled_tdnn_example() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tdnn.raw");
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tdnn/net.config");
    ok(&["init", "--srand=1", s(&cfg), s(&out)]);
    let info = String::from_utf8_lossy(&ok(&["info", s(&out)]).stdout).into_owned();
    // 65*64+64 + 192*64+64 + 64*32+32 parameters.
    assert!(info.contains("num-parameters: 18656\n"), "{info}");
    assert!(
        info.starts_with("left-context: 5\nright-context: 5\n"),
        "{info}"
    );
    assert!(
        info.contains("output-node name=output input=output.log-softmax dim=32 objective=linear")
    );
}

#[test]
fn usage_errors_exit_non_zero_with_one_clear_line() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.raw");
    for args in [
        vec!["copy", s(&missing), "-"],
        vec!["info", s(&missing)],
        vec!["init", s(&missing), "-"],
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("missing.raw"), "{args:?}: {err}");
        // Kaldi's tools echo their command line first (`--print-args`), then one error line.
        let lines: Vec<&str> = err.trim_end().lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].ends_with(&args.join(" ")), "{err}");
    }
    for args in [vec!["copy", "only-one"], vec!["init", "x"], vec!["info"]] {
        assert!(!run(&args).status.success(), "{args:?}");
    }
}

/// Kaldi's habit in every command: an option given twice, the last one wins (existing Kaldi
/// command lines repeat options, e.g. a script's defaults followed by the user's).
#[test]
fn a_repeated_option_takes_the_last_value() {
    let dir = std::env::temp_dir().join(format!("compnet-cli-repeat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = format!("{GOLDEN}/train/affine-plain/before.raw");
    let out = dir.join("m.raw");
    ok(&["copy", "--binary=false", "--binary=true", &model, s(&out)]);
    assert!(
        std::fs::read(&out).unwrap().starts_with(b"\0B"),
        "last --binary=true lost"
    );
    ok(&[
        "copy",
        "--binary=true",
        "--binary",
        "false",
        &model,
        s(&out),
    ]);
    assert!(
        !std::fs::read(&out).unwrap().starts_with(b"\0B"),
        "last --binary false lost"
    );
    // train: --print-interval=1 after =1000 logs every minibatch (4 of them: 3 phase lines).
    let egs = format!("ark:{GOLDEN}/train/affine-plain/egs.ark");
    let o = ok(&[
        "train",
        "--print-interval=1000",
        "--print-interval=1",
        &model,
        &egs,
        s(&out),
    ]);
    let log = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        log.matches("Average objective function").count(),
        3,
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same command twice gives bit-identical models (every random choice is seeded).
#[test]
fn training_twice_gives_identical_models() {
    let dir = std::env::temp_dir().join(format!("compnet-cli-twice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = format!("{GOLDEN}/train/ng-batchnorm");
    let (a, b) = (dir.join("a.raw"), dir.join("b.raw"));
    for out in [&a, &b] {
        ok(&[
            "train",
            "--srand=7",
            &format!("{case}/before.raw"),
            &format!("ark:{case}/egs.ark"),
            s(out),
        ]);
    }
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
