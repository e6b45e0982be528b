//! `nnet3-xvector-compute` under Kaldi's name against Kaldi's outputs in
//! tests/data/kaldi/xvector (the `cases/xvector-small` network: TDNN, statistics pooling):
//! whole utterances (the 9-frame one padded to 100 frames), chunks with padding, chunks
//! without padding (an utterance below the minimum skipped with Kaldi's warning) and a chunk
//! size above two utterances' lengths. Vectors to 1e-5 relative: the network's sums run in
//! Kaldi's BLAS order there and compnet's here. With the default `--min-chunk-size=100` the
//! utterances are padded to 100 frames, and the first 18 frames, all the pooling at t = 0
//! sees, are copies of one frame: the variance the pooling takes is E[x²] − E[x]² of equal
//! values, a difference of rounding errors whose square root amplifies the last bits (5e-5
//! relative measured), so that case is compared to 1e-3. Log lines: the same messages, but
//! for the timing line's figures.

use compnet::matrix::Vector;
use compnet::testing::cli::{log_bodies, run_golden, sh, GoldenRun};
use std::path::Path;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/xvector");

fn read_vectors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let spec = format!("ark:{}", path.display());
    compnet::io::table::SequentialTableReader::<Vector>::open(&spec)
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            (k, v.to_vec())
        })
        .collect()
}

#[test]
fn xvectors_match_kaldi() {
    let GoldenRun { root, work, .. } = run_golden(env!("CARGO_BIN_EXE_compnet"), "xvector", GOLDEN);
    let mut compared = 0;
    for (vecs, log, n, tol) in [
        ("xv.txt", "xv.log", 3, 1e-3),
        ("xv_whole.txt", "xv_whole.log", 3, 1e-5),
        ("xv_chunk.txt", "xv_chunk.log", 3, 1e-5),
        ("xv_nopad.ark", "xv_nopad.log", 2, 1e-5),
        ("xv_long.txt", "xv_long.log", 3, 1e-5),
    ] {
        let (want, got) = (
            read_vectors(&Path::new(GOLDEN).join(vecs)),
            read_vectors(&work.join(vecs)),
        );
        assert_eq!(want.len(), n, "{vecs}");
        assert_eq!(
            got.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            want.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            "{vecs}: keys"
        );
        for ((k, g), (_, w)) in got.iter().zip(&want) {
            assert_eq!(g.len(), w.len(), "{vecs} {k}");
            for (a, b) in g.iter().zip(w) {
                assert!(
                    (a - b).abs() <= tol * b.abs().max(1.0),
                    "{vecs} {k}: {a} where Kaldi has {b}"
                );
            }
        }
        let bodies = |dir: &Path| -> Vec<String> {
            log_bodies(&std::fs::read_to_string(dir.join(log)).unwrap())
                .into_iter()
                .filter(|l| !l.contains("orphan"))
                .map(|l| match l.strip_prefix("Time taken") {
                    Some(_) => "Time taken".to_string(),
                    None => l,
                })
                .collect()
        };
        assert_eq!(bodies(&work), bodies(Path::new(GOLDEN)), "{log}");
        compared += 1;
    }
    assert_eq!(compared, 5);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn bad_xvector_input_fails_as_kaldi_does() {
    let (root, bin, work) = compnet::testing::cli::bad_input_work(
        env!("CARGO_BIN_EXE_compnet"),
        "xvector",
        GOLDEN,
        &["model.raw", "feats.txt"],
    );
    let raw = std::fs::read(work.join("model.raw")).unwrap();
    std::fs::write(work.join("cut.raw"), &raw[..raw.len() / 2]).unwrap();
    std::fs::write(work.join("cut_feats.txt"), "a  [\n 1 2 3\n 4 5").unwrap();
    for (line, says) in [
        (
            "nnet3-xvector-compute cut.raw ark:feats.txt ark:/dev/null",
            "cut.raw: at byte",
        ),
        (
            "nnet3-xvector-compute model.raw ark:cut_feats.txt ark:/dev/null",
            "cut_feats.txt",
        ),
    ] {
        let out = sh(&bin, &work, line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "`{line}` panicked: {err}");
        assert_eq!(out.status.code(), Some(255), "`{line}`: {err}");
        assert!(
            err.contains(says),
            "`{line}`: the error does not say {says}: {err}"
        );
    }
    // Every utterance too short, without padding: nothing written, exit 1 as Kaldi.
    let out = sh(
        &bin,
        &work,
        "nnet3-xvector-compute --pad-input=false --min-chunk-size=1000 model.raw ark:feats.txt ark,t:-",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        sh(&bin, &work, "nnet3-xvector-compute model.raw")
            .status
            .code(),
        Some(1)
    );
    let _ = std::fs::remove_dir_all(&root);
}
