//! The tools Kaldi's recipes call besides training (`feat-to-dim`, `feat-to-len`,
//! `ali-to-post`, `apply-cmvn`, `matrix-sum`, `vector-sum`, `nnet3-subset-egs`,
//! `nnet3-show-progress`, `nnet3-compute-from-egs`), run under Kaldi's names from a folder
//! made by `compnet install-kaldi-names`, against Kaldi's own outputs in
//! tests/data/kaldi/belt: every line of its `cmd.txt` runs with `sh` in a scratch folder
//! holding only the inputs, every other file of the golden folder must then be there and equal
//! Kaldi's byte for byte (logs: the same LOG and WARNING messages, prefixes aside). Then bad
//! input: each tool must fail with Kaldi's exit status, a message naming the input and no
//! panic.

use compnet::testing::cli::{log_bodies, run_golden, sh, GoldenRun};
use std::path::Path;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/belt");

#[test]
fn tools_under_kaldi_names_write_what_kaldi_writes() {
    let GoldenRun {
        root,
        names: bin,
        work,
        inputs,
        commands,
    } = run_golden(env!("CARGO_BIN_EXE_compnet"), "belt", GOLDEN);
    assert_eq!(commands, 29);
    let mut compared = 0;
    for entry in std::fs::read_dir(GOLDEN).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "cmd.txt" || name == "README.md" || inputs.contains(&name) {
            continue;
        }
        let want = std::fs::read(Path::new(GOLDEN).join(&name)).unwrap();
        let got = std::fs::read(work.join(&name))
            .unwrap_or_else(|e| panic!("{name} was not written: {e}"));
        if name.starts_with("from_egs.") && !name.ends_with(".log") {
            // The network's outputs: Kaldi's own sums run in its BLAS's order, so the last
            // digit may differ; compared as numbers in text (copy-feats), to 1e-5.
            let as_text = |dir: &Path| {
                let out = sh(&bin, dir, &format!("copy-feats ark:{name} ark,t:-"));
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8(out.stdout).unwrap()
            };
            let (w, g) = (as_text(Path::new(GOLDEN)), as_text(&work));
            let (wt, gt): (Vec<&str>, Vec<&str>) = (
                w.split_whitespace().collect(),
                g.split_whitespace().collect(),
            );
            assert_eq!(
                wt.len(),
                gt.len(),
                "{name}: a different layout from Kaldi's"
            );
            for (a, b) in wt.iter().zip(&gt) {
                match (a.parse::<f64>(), b.parse::<f64>()) {
                    (Ok(x), Ok(y)) => assert!(
                        (x - y).abs() <= 1e-5 * x.abs().max(1e-3),
                        "{name}: {y} where Kaldi has {x}"
                    ),
                    _ => assert_eq!(a, b, "{name}: a different layout from Kaldi's"),
                }
            }
        } else if name.ends_with(".log") {
            let (w, g) = (
                log_bodies(&String::from_utf8_lossy(&want)),
                log_bodies(&String::from_utf8_lossy(&got)),
            );
            assert_eq!(g, w, "{name}: log lines differ from Kaldi's");
        } else {
            assert!(
                want == got,
                "{name} differs from Kaldi's ({} vs {} bytes)",
                got.len(),
                want.len()
            );
        }
        compared += 1;
    }
    assert!(compared >= 45, "only {compared} golden files compared");
    let _ = std::fs::remove_dir_all(&root);
}

/// `nnet3-show-progress` with examples on a network with BatchNorm (in training mode, as
/// Kaldi's tool leaves it) and ReLUs whose self-repair draws from the `rand()` stream:
/// Kaldi's log lines, objective change per component included, in one and two segments.
#[test]
fn show_progress_with_examples_matches_kaldi() {
    const PROGRESS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/progress");
    let GoldenRun {
        root,
        work,
        commands,
        ..
    } = run_golden(env!("CARGO_BIN_EXE_compnet"), "progress", PROGRESS);
    assert_eq!(commands, 2);
    for name in ["progress.log", "progress2.log"] {
        let read = |dir: &Path| log_bodies(&std::fs::read_to_string(dir.join(name)).unwrap());
        let (g, w) = (read(&work), read(Path::new(PROGRESS)));
        assert!(
            w.iter()
                .any(|l| l.starts_with("Total objf change per component")),
            "{name}: Kaldi's log has no breakdown"
        );
        assert_eq!(g, w, "{name}: log lines differ from Kaldi's");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn bad_input_fails_as_kaldi_does() {
    let (root, bin, work) = compnet::testing::cli::bad_input_work(
        env!("CARGO_BIN_EXE_compnet"),
        "belt",
        GOLDEN,
        &[
            "feats.txt",
            "egs_unmerged.ark",
            "before.raw",
            "after.raw",
            "cmvn.txt",
            "x1.vec",
        ],
    );
    // A truncated egs archive, a feature archive cut mid-matrix, a network cut short,
    // statistics of the wrong dimension and an alignment with a non-integer.
    let egs = std::fs::read(work.join("egs_unmerged.ark")).unwrap();
    std::fs::write(work.join("cut.egs"), &egs[..egs.len() / 2 + 7]).unwrap();
    std::fs::write(work.join("cut_feats.txt"), "a  [\n 1 2 3\n 4 5").unwrap();
    let raw = std::fs::read(work.join("before.raw")).unwrap();
    std::fs::write(work.join("cut.raw"), &raw[..raw.len() / 3]).unwrap();
    std::fs::write(work.join("bad_cmvn.txt"), "a [ 1 2 3\n 4 5 6 ]\n").unwrap();
    std::fs::write(work.join("bad.ali"), "a 1 2 x 4\n").unwrap();
    std::fs::write(work.join("bad.vec"), " [ 1 2 nan? ]\n").unwrap();
    // Examples of another network (20-dim input where this one takes 13).
    std::fs::copy(
        Path::new(GOLDEN).join("../train/lstm-ng/egs.ark"),
        work.join("wrong_dim.egs"),
    )
    .unwrap();
    for (line, names) in [
        ("feat-to-dim ark:cut_feats.txt -", "cut_feats.txt"),
        ("feat-to-len ark:cut_feats.txt", "cut_feats.txt"),
        ("feat-to-len ark:feats.txt lens.txt", "lens.txt"),
        ("ali-to-post ark:bad.ali ark,t:-", "bad.ali"),
        (
            "apply-cmvn ark:bad_cmvn.txt ark:feats.txt ark:-",
            "bad_cmvn.txt",
        ),
        (
            "apply-cmvn ark:cmvn.txt ark:cut_feats.txt ark:-",
            "cut_feats.txt",
        ),
        ("matrix-sum ark:cut_feats.txt out.mat", "cut_feats.txt"),
        ("vector-sum x1.vec bad.vec out.vec", "bad.vec"),
        (
            "nnet3-subset-egs --n=3 ark:cut.egs ark:/dev/null",
            "cut.egs",
        ),
        ("nnet3-show-progress cut.raw before.raw", "cut.raw"),
        (
            "nnet3-show-progress before.raw after.raw ark:cut.egs",
            "cut.egs",
        ),
        (
            "nnet3-show-progress before.raw after.raw ark:/dev/null",
            "No examples read",
        ),
        (
            "nnet3-show-progress before.raw after.raw ark:wrong_dim.egs",
            "wrong_dim.egs",
        ),
        (
            "nnet3-compute-from-egs before.raw ark:cut.egs ark:/dev/null",
            "cut.egs",
        ),
    ] {
        let out = sh(&bin, &work, line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "`{line}` panicked: {err}");
        assert!(!out.status.success(), "`{line}` succeeded: {err}");
        assert!(
            err.contains(names),
            "`{line}`: the error does not name {names}: {err}"
        );
        assert!(
            err.contains("ERROR ("),
            "`{line}`: no ERROR line in Kaldi's form: {err}"
        );
    }
    // Usage errors exit 1, like Kaldi's PrintUsage; other errors 255.
    let out = sh(&bin, &work, "feat-to-dim ark:feats.txt");
    assert_eq!(out.status.code(), Some(1));
    let out = sh(&bin, &work, "nnet3-show-progress cut.raw before.raw");
    assert_eq!(out.status.code(), Some(255));
    let _ = std::fs::remove_dir_all(&root);
}
