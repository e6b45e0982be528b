//! Byte-identical model round trips against real Kaldi files (tests/data/kaldi).
//!
//! For every golden model: `compnet copy --binary=false model.raw out.txt` must equal Kaldi's
//! `model.txt` byte for byte, `compnet copy model.raw out.raw` must equal `model_copy.raw`
//! (where Kaldi's own copy differs from the input) or else `model.raw`, and reading `model.txt`
//! must work too (text -> binary -> text must give `model.txt` back). A model that uses a
//! component type compnet does not know yet must fail with an "unknown component type" error
//! naming that type; every other failure fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use compnet::testing::golden::known_missing;

/// Where the golden files are.
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

/// The number of models that must be fully checked (raised as component types land).
const MIN_FULLY_CHECKED: usize = 14;

/// Cases that must be fully checked (all their component types exist now).
const REQUIRED_CASES: &[&str] = &[
    "seed",
    "simplest",
    "tdnn-splice-ivector",
    "tdnn-component",
    "rnn",
    "clockwork",
    "lstm-primitives",
    "descriptors",
    "misc-components",
    "xvector-small",
    "old-cnn",
    "composite-distribute",
];

/// One golden model: a binary file, its Kaldi text rendering, and the expected binary copy.
struct GoldenModel {
    label: String,
    raw: PathBuf,
    txt: PathBuf,
    /// Kaldi's `nnet3-copy` of `raw`; `None` where it is not known (see `golden_models`).
    expected_copy: Option<PathBuf>,
    /// Holds any accumulated statistics (nonlinearity or BatchNorm `<Count>` not 0): Kaldi
    /// keeps them as double sums and re-derives the averages on write, so a second
    /// read/write cycle may move their last digit.
    trained_stats: bool,
}

/// True if any component in the model has a non-zero `<Count>` or `<OderivCount>`
/// (accumulated statistics).
fn has_stats(txt: &Path) -> bool {
    let t = std::fs::read_to_string(txt).unwrap();
    t.split("Count>")
        .skip(1)
        .any(|c| c.split_whitespace().next().is_some_and(|v| v != "0"))
}

fn golden_models() -> Vec<GoldenModel> {
    let mut v = Vec::new();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(Path::new(GOLDEN).join("cases"))
        .expect("golden cases folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.raw").exists())
        .collect();
    cases.sort();
    for dir in cases {
        let copy = dir.join("model_copy.raw");
        v.push(GoldenModel {
            trained_stats: has_stats(&dir.join("model.txt")),
            label: dir.file_name().unwrap().to_string_lossy().into_owned(),
            raw: dir.join("model.raw"),
            txt: dir.join("model.txt"),
            expected_copy: Some(if copy.exists() {
                copy
            } else {
                dir.join("model.raw")
            }),
        });
    }
    let mut trains: Vec<PathBuf> = std::fs::read_dir(Path::new(GOLDEN).join("train"))
        .expect("golden train folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    trains.sort();
    for dir in trains {
        for stem in ["before", "after"] {
            let raw = dir.join(format!("{stem}.raw"));
            assert!(raw.exists(), "{} missing", raw.display());
            let txt = dir.join(format!("{stem}.txt"));
            let trained_stats = has_stats(&txt);
            v.push(GoldenModel {
                trained_stats,
                label: format!(
                    "train/{}/{stem}",
                    dir.file_name().unwrap().to_string_lossy()
                ),
                raw: raw.clone(),
                txt,
                // A trained net was written by nnet3-train; Kaldi's own copy of it re-derives
                // the accumulated statistics (BatchNorm variances, nonlinearity averages: as
                // cases/cnn-small/model_copy.raw shows), and that copy is not in the golden
                // set. The text round trip below still checks these models.
                expected_copy: (!trained_stats).then_some(raw),
            });
        }
    }
    let m = Path::new(GOLDEN).join("formats/model");
    // formats/model/model.raw is a plain file copy of cases/tdnnf/model.raw (formats/cmd.txt),
    // so what nnet3-copy writes from it is cases/tdnnf/model_copy.raw.
    v.push(GoldenModel {
        trained_stats: has_stats(&m.join("model.txt")),
        label: "formats/model".into(),
        raw: m.join("model.raw"),
        txt: m.join("model.txt"),
        expected_copy: Some(Path::new(GOLDEN).join("cases/tdnnf/model_copy.raw")),
    });
    v
}

/// Runs `compnet` with these arguments; returns (success, stderr).
fn compnet(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args(args)
        .output()
        .expect("run compnet");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "compnet {args:?} panicked:\n{stderr}"
    );
    (out.status.success(), stderr)
}

/// First differing byte of two buffers, for messages.
fn first_diff(a: &[u8], b: &[u8]) -> String {
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let ctx = |s: &[u8]| {
        String::from_utf8_lossy(&s[i.saturating_sub(40).min(s.len())..(i + 40).min(s.len())])
            .into_owned()
    };
    format!(
        "lengths {} vs {}, first difference at byte {i}:\n ours:   {:?}\n kaldi:  {:?}",
        a.len(),
        b.len(),
        ctx(a),
        ctx(b)
    )
}

enum Outcome {
    Checked,
    UnknownType(String),
}

/// Extracts the type from an "unknown component type X" message.
fn unknown_type(stderr: &str) -> Option<String> {
    let i = stderr.find("unknown component type")?;
    let rest = stderr[i + "unknown component type".len()..].trim_start_matches([' ', '\'']);
    let t: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!t.is_empty()).then_some(t)
}

fn check_model(m: &GoldenModel, tmp: &Path) -> Result<Outcome, String> {
    let raw = m.raw.to_str().unwrap();
    let out_txt = tmp.join("out.txt");
    let out_raw = tmp.join("out.raw");
    let (ok, err) = compnet(&["copy", "--binary=false", raw, out_txt.to_str().unwrap()]);
    if !ok {
        return match unknown_type(&err) {
            Some(t) => {
                // It must name the type and the file, and leave no output behind.
                if !err.contains(raw) {
                    return Err(format!("error does not name the file: {err}"));
                }
                if out_txt.exists() {
                    return Err("a failed copy left an output file".into());
                }
                Ok(Outcome::UnknownType(t))
            }
            None => Err(format!("copy to text failed: {err}")),
        };
    }
    let ours = std::fs::read(&out_txt).unwrap();
    let kaldi = std::fs::read(&m.txt).unwrap();
    if ours != kaldi {
        return Err(format!(
            "text copy differs from {}: {}",
            m.txt.display(),
            first_diff(&ours, &kaldi)
        ));
    }
    let (ok, err) = compnet(&["copy", raw, out_raw.to_str().unwrap()]);
    if !ok {
        return Err(format!("copy to binary failed: {err}"));
    }
    if let Some(expected) = &m.expected_copy {
        let ours = std::fs::read(&out_raw).unwrap();
        let kaldi = std::fs::read(expected).unwrap();
        if ours != kaldi {
            return Err(format!(
                "binary copy differs from {}: {}",
                expected.display(),
                first_diff(&ours, &kaldi)
            ));
        }
    }
    // Text in: text -> binary -> text gives Kaldi's text again (7-digit floats re-read).
    let from_text = tmp.join("from_text.raw");
    let again = tmp.join("again.txt");
    let (ok, err) = compnet(&["copy", m.txt.to_str().unwrap(), from_text.to_str().unwrap()]);
    if !ok {
        return Err(format!("reading the text model failed: {err}"));
    }
    let (ok, err) = compnet(&[
        "copy",
        "--binary",
        "false",
        from_text.to_str().unwrap(),
        again.to_str().unwrap(),
    ]);
    if !ok {
        return Err(format!("copy of the re-read model failed: {err}"));
    }
    let ours = std::fs::read(&again).unwrap();
    let kaldi = std::fs::read(&m.txt).unwrap();
    if ours != kaldi && !m.trained_stats {
        return Err(format!(
            "text -> binary -> text differs: {}",
            first_diff(&ours, &kaldi)
        ));
    }
    Ok(Outcome::Checked)
}

#[test]
fn golden_models_round_trip_byte_identically() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = Vec::new();
    let mut unknown = Vec::new();
    let mut failures = Vec::new();
    for (i, m) in golden_models().into_iter().enumerate() {
        let dir = tmp.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        match check_model(&m, &dir) {
            Ok(Outcome::Checked) => checked.push(m.label.clone()),
            Ok(Outcome::UnknownType(t)) if known_missing(&m.label).is_some() => {
                unknown.push(format!("{} (unknown component type {t})", m.label))
            }
            Ok(Outcome::UnknownType(t)) => failures.push(format!(
                "{}: unknown component type {t}, and the case is not known-missing",
                m.label
            )),
            Err(e) => failures.push(format!("{}: {e}", m.label)),
        }
    }
    eprintln!("fully checked ({}): {}", checked.len(), checked.join(", "));
    eprintln!(
        "waiting for component types ({}): {}",
        unknown.len(),
        unknown.join(", ")
    );
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n\n"));
    assert!(
        checked.len() >= MIN_FULLY_CHECKED,
        "only {} models fully checked, expected at least {MIN_FULLY_CHECKED}",
        checked.len()
    );
    let pending: Vec<&&str> = REQUIRED_CASES
        .iter()
        .filter(|c| !checked.iter().any(|k| k == *c))
        .collect();
    assert!(
        pending.is_empty(),
        "required cases not fully checked: {pending:?}"
    );
}

/// Kaldi's text -> binary conversion of a BatchNorm net (formats/model): `model.txt` read and
/// written binary must equal `model_from_text.raw`, and that written as text must equal
/// `model_from_text.txt`.
#[test]
fn text_model_converts_like_kaldi() {
    let m = Path::new(GOLDEN).join("formats/model");
    let tmp = tempfile::tempdir().unwrap();
    let out_raw = tmp.path().join("from_text.raw");
    let out_txt = tmp.path().join("from_text.txt");
    let (ok, err) = compnet(&[
        "copy",
        "--binary=true",
        m.join("model.txt").to_str().unwrap(),
        out_raw.to_str().unwrap(),
    ]);
    assert!(ok, "formats/model: {err}");
    let ours = std::fs::read(&out_raw).unwrap();
    let kaldi = std::fs::read(m.join("model_from_text.raw")).unwrap();
    assert!(ours == kaldi, "{}", first_diff(&ours, &kaldi));
    let (ok, err) = compnet(&[
        "copy",
        "--binary=false",
        out_raw.to_str().unwrap(),
        out_txt.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let ours = std::fs::read(&out_txt).unwrap();
    let kaldi = std::fs::read(m.join("model_from_text.txt")).unwrap();
    assert!(ours == kaldi, "{}", first_diff(&ours, &kaldi));
}

/// A TransitionModel written from the layout in the facts (§2.5), in text or binary.
fn transition_model(binary: bool) -> Vec<u8> {
    use compnet::io::TokenWriter;
    if !binary {
        return b"<TransitionModel> \n<Topology> \n<TopologyEntry> \n<ForPhones> \n1 2 3 \n\
</ForPhones> \n<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State> \n\
<State> 1 </State> \n</TopologyEntry> \n</Topology> \n<Triples> 3 \n1 0 0 \n2 0 1 \n3 0 2 \n\
</Triples> \n<LogProbs> \n [ 0 -0.6931472 -0.6931472 -0.6931472 -0.6931472 -0.6931472 -0.6931472 ]\n\
</LogProbs> \n</TransitionModel> \n"
            .to_vec();
    }
    let mut w = TokenWriter::new(true);
    w.token("<TransitionModel>");
    w.token("<Topology>");
    w.int_vec(&[1, 2, 3]);
    w.int_vec(&[-1, 0, 0, 0]);
    w.i32(1);
    w.i32(2);
    w.i32(0);
    w.i32(2);
    w.i32(0);
    w.f32(0.5);
    w.i32(1);
    w.f32(0.5);
    w.i32(-1);
    w.i32(0);
    w.token("</Topology>");
    w.token("<Triples>");
    w.i32(3);
    for p in 1..=3 {
        w.i32(p);
        w.i32(0);
        w.i32(p - 1);
    }
    w.token("</Triples>");
    w.token("<LogProbs>");
    let l = -std::f32::consts::LN_2;
    w.vector(&[0.0, l, l, l, l, l, l]);
    w.token("</LogProbs>");
    w.token("</TransitionModel>");
    w.into_bytes()
}

/// A final.mdl (TransitionModel + AmNnetSimple) around a golden network is read: the network
/// is the same, the priors and stored context come back, and `copy` writes the raw network.
#[test]
fn final_mdl_is_read() {
    use compnet::io::TokenWriter;
    let dir = Path::new(GOLDEN).join("cases/seed");
    let tmp = tempfile::tempdir().unwrap();
    let priors = [0.25f32, 0.5, 0.25];
    for binary in [true, false] {
        let model =
            std::fs::read(dir.join(if binary { "model.raw" } else { "model.txt" })).unwrap();
        let body = if binary { &model[2..] } else { &model[..] };
        let mut w = TokenWriter::new(binary);
        w.binary_header();
        w.raw(&transition_model(binary));
        w.raw(body);
        w.token("<LeftContext>");
        w.i32(1);
        w.token("<RightContext>");
        w.i32(2);
        w.token("<Priors>");
        w.vector(&priors);
        let mdl = w.into_bytes();
        let read = compnet::nnet::Nnet::read_model(&mdl, "final.mdl").unwrap();
        let am = read.am.expect("acoustic-model part");
        assert_eq!((am.left_context, am.right_context), (1, 2));
        assert_eq!(am.priors.to_vec(), priors);
        assert_eq!(read.binary, binary);
        assert_eq!(read.nnet.write_model(binary), model);
        // Through the command line too: a final.mdl copies to the raw network.
        let p = tmp.path().join("final.mdl");
        std::fs::write(&p, &mdl).unwrap();
        let out = tmp.path().join("out");
        let (ok, err) = compnet(&[
            "copy",
            &format!("--binary={binary}"),
            p.to_str().unwrap(),
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), model);
        // Truncations inside the acoustic-model parts are errors.
        for cut in [10, 60, mdl.len() - 3, mdl.len() - 20] {
            assert!(
                compnet::nnet::Nnet::read_model(&mdl[..cut], "final.mdl").is_err(),
                "cut {cut}"
            );
        }
    }
}
