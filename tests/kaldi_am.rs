//! The acoustic-model tools (`nnet3-am-init` from a tree and topology or from a transition
//! model, `nnet3-am-copy`, `nnet3-am-info`, `nnet3-am-train-transitions`,
//! `nnet3-am-adjust-priors`, `ali-to-pdf`, and `nnet3-compute-prob` on a `final.mdl`), run
//! under Kaldi's names from a folder made by `compnet install-kaldi-names`, against Kaldi's
//! own outputs in tests/data/kaldi/am: every line of its `cmd.txt` runs with `sh` in a
//! scratch folder holding only the inputs; every other file of the golden folder must then be
//! there and equal Kaldi's byte for byte (logs: the same LOG and WARNING messages, prefixes
//! aside; `nnet3-compute-prob`'s log: its objective lines). Then bad input: each tool fails
//! with Kaldi's exit status and a message naming the file and where.

use compnet::testing::cli::{log_bodies, run_golden, sh, GoldenRun};
use std::path::Path;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/am");

#[test]
fn am_tools_under_kaldi_names_write_what_kaldi_writes() {
    let GoldenRun {
        root,
        work,
        inputs,
        commands,
        ..
    } = run_golden(env!("CARGO_BIN_EXE_compnet"), "am", GOLDEN);
    assert_eq!(commands, 21);
    let mut compared = 0;
    for entry in std::fs::read_dir(GOLDEN).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "cmd.txt" || name == "README.md" || inputs.contains(&name) {
            continue;
        }
        let want = std::fs::read(Path::new(GOLDEN).join(&name)).unwrap();
        let got = std::fs::read(work.join(&name))
            .unwrap_or_else(|e| panic!("{name} was not written: {e}"));
        if name == "prob_am.log" {
            let overall = |b: &[u8]| -> Vec<String> {
                log_bodies(&String::from_utf8_lossy(b))
                    .into_iter()
                    .filter(|l| l.starts_with("Overall"))
                    .collect()
            };
            assert_eq!(overall(&got), overall(&want), "{name}");
            assert_eq!(overall(&want).len(), 2);
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
    assert_eq!(compared, 41, "golden files compared");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn bad_am_input_fails_as_kaldi_does() {
    let (root, bin, work) = compnet::testing::cli::bad_input_work(
        env!("CARGO_BIN_EXE_compnet"),
        "am",
        GOLDEN,
        &[
            "0.mdl",
            "0_text.mdl",
            "topo",
            "tree.txt",
            "after.raw",
            "ali.txt",
            "post_sum.txt",
            "rep.mdl",
        ],
    );
    // A model with repeated affines cut inside its network.
    let rep = std::fs::read(work.join("rep.mdl")).unwrap();
    std::fs::write(work.join("cut_rep.mdl"), &rep[..rep.len() * 2 / 3]).unwrap();
    let mdl = std::fs::read(work.join("0.mdl")).unwrap();
    // Cut inside the transition model's tuples (byte 300 of Kaldi's file).
    std::fs::write(work.join("cut.mdl"), &mdl[..300]).unwrap();
    // A tuple count far beyond the file (the int32 after `<Triples> `, size byte first).
    let at = mdl.windows(10).position(|w| w == b"<Triples> ").unwrap() + 10;
    let mut huge = mdl.clone();
    huge[at + 1..at + 5].copy_from_slice(&0x7fff_fff0i32.to_le_bytes());
    std::fs::write(work.join("huge.mdl"), &huge).unwrap();
    let text = std::fs::read_to_string(work.join("0_text.mdl")).unwrap();
    // A log-probability vector one short.
    std::fs::write(
        work.join("short_lp.mdl"),
        text.replacen(" -0.6931472 -0.6931472 ]", " -0.6931472 ]", 1),
    )
    .unwrap();
    std::fs::write(work.join("bad_topo"), "<Topology>\n<TopologyEntry>\n<ForPhones>\n1 x\n</ForPhones>\n</TopologyEntry>\n</Topology>\n").unwrap();
    std::fs::write(
        work.join("bad_tree"),
        "ContextDependency 1 0 ToPdf TE 0 2 ( NULL QQ 1 ) EndContextDependency\n",
    )
    .unwrap();
    std::fs::write(work.join("bad.ali"), "utt1 1 2 99\n").unwrap();
    std::fs::write(work.join("post3.vec"), " [ 1 2 3 ]\n").unwrap();
    for (line, names) in [
        ("nnet3-am-info cut.mdl", "cut.mdl: at byte"),
        ("nnet3-am-copy huge.mdl out.mdl", "huge.mdl: at byte"),
        (
            "nnet3-am-copy --convert-repeated-to-block cut_rep.mdl out.mdl",
            "cut_rep.mdl: at byte",
        ),
        (
            "nnet3-am-copy short_lp.mdl out.mdl",
            "short_lp.mdl: at byte",
        ),
        (
            "ali-to-pdf short_lp.mdl ark:ali.txt ark:/dev/null",
            "short_lp.mdl: at byte",
        ),
        (
            "nnet3-am-init tree.txt bad_topo after.raw out.mdl",
            "bad_topo: at byte 41",
        ),
        (
            "nnet3-am-init bad_tree topo after.raw out.mdl",
            "bad_tree: at byte 42",
        ),
        ("ali-to-pdf 0.mdl ark:bad.ali ark:/dev/null", "utt1"),
        (
            "nnet3-am-train-transitions 0.mdl ark:bad.ali out.mdl",
            "utt1",
        ),
        ("nnet3-am-adjust-priors 0.mdl post3.vec out.mdl", "dim 3"),
        ("nnet3-am-init 0.mdl cut.mdl out.mdl", "cut.mdl"),
    ] {
        let out = sh(&bin, &work, line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "`{line}` panicked: {err}");
        assert_eq!(out.status.code(), Some(255), "`{line}`: {err}");
        assert!(
            err.contains(names),
            "`{line}`: the error does not say {names}: {err}"
        );
        assert!(
            err.contains("ERROR ("),
            "`{line}`: no ERROR line in Kaldi's form: {err}"
        );
        assert!(!work.join("out.mdl").exists(), "`{line}` left an output");
    }
    // Usage errors exit 1.
    for line in [
        "nnet3-am-info",
        "nnet3-am-init a b",
        "ali-to-pdf 0.mdl ark:ali.txt",
    ] {
        assert_eq!(sh(&bin, &work, line).status.code(), Some(1), "{line}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
