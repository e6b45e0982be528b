//! The LDA preconditioning tools (`nnet3-acc-lda-stats`, `nnet-get-feature-transform`) run
//! under Kaldi's names against Kaldi's outputs in tests/data/kaldi/lda. The statistics must be
//! byte-identical, with `--rand-prune` too: the pruning draws from the C library's `rand()`
//! stream as Kaldi's `RandPrune` does, after the draws of Kaldi's compiler for each new
//! request (`compile::kaldi_draws`), so the same frames are kept. The transforms come out
//! of an eigen decomposition, where Kaldi's SVD and compnet's Jacobi method agree to rounding,
//! and where each eigenvector's sign is arbitrary: rows are compared up to sign, to 1e-4 of
//! the row's largest element, for the directions with between-class variance; the directions
//! without any (singular values of 1e-16) are an arbitrary basis of one subspace in either
//! program, so there the Gram matrix MᵀM of those rows, which does not depend on the basis, is
//! compared. Log lines: the same messages, numbers to 1e-4 relative (the list of singular
//! values: those above 1e-6).

use compnet::matrix::Matrix;
use compnet::testing::cli::{log_bodies, run_golden, sh, GoldenRun};
use std::path::Path;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/lda");

/// The numbers of a log's LOG lines (bodies without prefixes), and the text around them.
fn log_numbers(text: &str) -> Vec<(String, Vec<f64>)> {
    log_bodies(text)
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut words = Vec::new();
            let mut nums = Vec::new();
            for w in l.split_whitespace() {
                match w.trim_end_matches('.').parse::<f64>() {
                    Ok(x) if !w.starts_with('[') => nums.push(x),
                    _ => words.push(w.to_string()),
                }
            }
            (words.join(" "), nums)
        })
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-12
}

fn read_matrix(path: &Path) -> Matrix {
    compnet::io::table::read_object::<Matrix>(path.to_str().unwrap()).unwrap()
}

/// Compares a transform with Kaldi's as the module note says; `d` are the singular values.
fn compare_transform(name: &str, got: &Matrix, want: &Matrix, d: &[f64]) {
    assert_eq!(
        (got.num_rows(), got.num_cols()),
        (want.num_rows(), want.num_cols()),
        "{name}: shape"
    );
    let (rows, cols) = (want.num_rows(), want.num_cols());
    let row = |m: &Matrix, r: usize| (0..cols).map(|c| m.get(r, c) as f64).collect::<Vec<_>>();
    let mut null_rows = Vec::new();
    assert!(
        d.len() >= rows,
        "{name}: {} singular values for {rows} rows",
        d.len()
    );
    for (r, &dr) in d.iter().enumerate().take(rows) {
        if dr < 1e-6 {
            null_rows.push(r);
            continue;
        }
        let (g, w) = (row(got, r), row(want, r));
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let dot: f64 = g.iter().zip(&w).map(|(a, b)| a * b).sum();
        let sign = if dot < 0.0 { -1.0 } else { 1.0 };
        for c in 0..cols {
            assert!(
                (sign * g[c] - w[c]).abs() <= 1e-4 * scale,
                "{name}: row {r}, column {c}: {} where Kaldi has {} (sign {sign})",
                g[c],
                w[c]
            );
        }
    }
    if !null_rows.is_empty() {
        let gram = |m: &Matrix| {
            let mut g = vec![0.0f64; cols * cols];
            for &r in &null_rows {
                let v = row(m, r);
                for i in 0..cols {
                    for j in 0..cols {
                        g[i * cols + j] += v[i] * v[j];
                    }
                }
            }
            g
        };
        let (g, w) = (gram(got), gram(want));
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for k in 0..g.len() {
            assert!(
                (g[k] - w[k]).abs() <= 1e-4 * scale,
                "{name}: Gram matrix of the rows without between-class variance, element {k}: \
                 {} where Kaldi has {}",
                g[k],
                w[k]
            );
        }
    }
}

/// A packed matrix as Kaldi writes it (`FP`, binary or text): its dimension and values.
fn read_packed(path: &Path) -> (usize, Vec<f64>) {
    let bytes = std::fs::read(path).unwrap();
    if bytes.starts_with(b"\0B") {
        assert_eq!(&bytes[2..6], b"FP \x04", "{}", path.display());
        let n = i32::from_le_bytes(bytes[6..10].try_into().unwrap()) as usize;
        let values: Vec<f64> = bytes[10..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect();
        assert_eq!(values.len(), n * (n + 1) / 2, "{}", path.display());
        (n, values)
    } else {
        let text = String::from_utf8(bytes).unwrap();
        let values: Vec<f64> = text
            .split_whitespace()
            .filter(|w| *w != "[" && *w != "]")
            .map(|w| w.parse().unwrap())
            .collect();
        let rows = text.lines().filter(|l| l.trim() != "[").count();
        let n = if values.is_empty() { 0 } else { rows };
        assert_eq!(values.len(), n * (n + 1) / 2, "{}", path.display());
        (n, values)
    }
}

/// `--write-cholesky` and `--write-within-covar`: the factor and C·Cᵀ, to 1e-5 of the largest
/// element (Kaldi's Cholesky sums with its BLAS, C·Cᵀ in floats); the layout (binary or text,
/// the empty matrix after smoothing) exactly.
fn compare_packed_outputs(work: &Path) {
    let mut compared = 0;
    for name in [
        "chol.tp",
        "covar.sp",
        "chol.txt",
        "covar.txt",
        "chol_smoothed.txt",
        "covar_smoothed.txt",
    ] {
        let (gn, g) = read_packed(&work.join(name));
        let (wn, w) = read_packed(&Path::new(GOLDEN).join(name));
        assert_eq!(gn, wn, "{name}: dimension");
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for (k, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "{name}: element {k} is {a} where Kaldi has {b}"
            );
        }
        if wn == 0 {
            let (gb, wb) = (
                std::fs::read(work.join(name)).unwrap(),
                std::fs::read(Path::new(GOLDEN).join(name)).unwrap(),
            );
            assert_eq!(gb, wb, "{name}: the empty matrix");
        }
        compared += 1;
    }
    assert_eq!(compared, 6);
}

#[test]
fn lda_tools_under_kaldi_names_match_kaldi() {
    let GoldenRun { root, work, .. } = run_golden(env!("CARGO_BIN_EXE_compnet"), "lda", GOLDEN);
    // Statistics: byte for byte.
    for name in [
        "lda.acc",
        "lda_text.acc",
        "lda_pruned.acc",
        "lda_pruned_text.acc",
    ] {
        let (g, w) = (
            std::fs::read(work.join(name)).unwrap(),
            std::fs::read(Path::new(GOLDEN).join(name)).unwrap(),
        );
        assert!(
            g == w,
            "{name} differs from Kaldi's ({} vs {} bytes)",
            g.len(),
            w.len()
        );
    }
    for name in [
        "acc.log",
        "acc_text.log",
        "acc_pruned.log",
        "acc_pruned_text.log",
    ] {
        let read = |dir: &Path| log_bodies(&std::fs::read_to_string(dir.join(name)).unwrap());
        assert_eq!(read(&work), read(Path::new(GOLDEN)), "{name}");
    }
    // Transforms and their logs.
    let mut checked = 0;
    for (mat, log) in [
        ("lda.mat", "transform.log"),
        ("lda8.txt", "transform8.log"),
        ("lda6.txt", "transform6.log"),
        ("lda_ceil.txt", "transform_ceil.log"),
        ("lda_chol.mat", "chol.log"),
        ("lda_chol8.txt", "chol8.log"),
        ("lda_smoothed.txt", "chol_smoothed.log"),
    ] {
        let read = |dir: &Path| log_numbers(&std::fs::read_to_string(dir.join(log)).unwrap());
        let (g, w) = (read(&work), read(Path::new(GOLDEN)));
        assert_eq!(
            g.iter().map(|(t, _)| t).collect::<Vec<_>>(),
            w.iter().map(|(t, _)| t).collect::<Vec<_>>(),
            "{log}: the messages differ"
        );
        let mut d = Vec::new();
        for ((text, gn), (_, wn)) in g.iter().zip(&w) {
            assert_eq!(gn.len(), wn.len(), "{log}: {text}");
            let list = text.starts_with("LDA singular values");
            for (a, b) in gn.iter().zip(wn) {
                if list && *b < 1e-6 {
                    assert!(
                        a.abs() < 1e-6,
                        "{log}: a singular value {a} where Kaldi's is 0"
                    );
                } else {
                    assert!(
                        close(*a, *b, 1e-4),
                        "{log}: {text}: {a} where Kaldi has {b}"
                    );
                }
            }
            if list {
                d = wn.clone();
            }
        }
        let want = read_matrix(&Path::new(GOLDEN).join(mat));
        let got = read_matrix(&work.join(mat));
        // With the singular values ceilinged (all of them here), the rows are compared up to
        // sign like the others.
        compare_transform(mat, &got, &want, &d);
        checked += 1;
    }
    assert_eq!(checked, 7);
    compare_packed_outputs(&work);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn bad_lda_input_fails_as_kaldi_does() {
    let (root, bin, work) = compnet::testing::cli::bad_input_work(
        env!("CARGO_BIN_EXE_compnet"),
        "lda",
        GOLDEN,
        &["lda.acc", "lda_text.acc", "init.raw", "egs.ark"],
    );
    let acc = std::fs::read(work.join("lda.acc")).unwrap();
    std::fs::write(work.join("cut.acc"), &acc[..acc.len() - 100]).unwrap();
    let mut huge = acc.clone();
    // The dimension after `<VECSIZE> ` and its size byte.
    let at = acc.windows(10).position(|w| w == b"<VECSIZE> ").unwrap() + 11;
    huge[at..at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
    std::fs::write(work.join("huge.acc"), &huge).unwrap();
    let text = std::fs::read_to_string(work.join("lda_text.acc")).unwrap();
    std::fs::write(
        work.join("bad.acc"),
        text.replacen("<NUMCLASSES> 10", "<NUMCLASSES> 9", 1),
    )
    .unwrap();
    let egs = std::fs::read(work.join("egs.ark")).unwrap();
    std::fs::write(work.join("cut.egs"), &egs[..egs.len() / 2]).unwrap();
    for (line, says) in [
        (
            "nnet-get-feature-transform out.mat cut.acc",
            "cut.acc: at byte",
        ),
        (
            "nnet-get-feature-transform out.mat huge.acc",
            "huge.acc: at byte 22",
        ),
        (
            "nnet-get-feature-transform out.mat bad.acc",
            "bad.acc: at byte",
        ),
        (
            "nnet-get-feature-transform --dim=50 out.mat lda.acc",
            "--dim=50",
        ),
        (
            "nnet3-acc-lda-stats init.raw ark:cut.egs out.mat",
            "cut.egs",
        ),
        (
            "nnet3-acc-lda-stats --rand-prune=-1 init.raw ark:egs.ark out.mat",
            "--rand-prune=-1",
        ),
        (
            "nnet-get-feature-transform --write-cholesky=no/such/dir/c.tp out.mat lda.acc",
            "no/such/dir/c.tp",
        ),
        (
            "nnet3-acc-lda-stats --rand-prune=x init.raw ark:egs.ark out.mat",
            "rand-prune",
        ),
    ] {
        let out = sh(&bin, &work, line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "`{line}` panicked: {err}");
        assert!(!out.status.success(), "`{line}` succeeded: {err}");
        assert!(
            err.contains(says),
            "`{line}`: the error does not say {says}: {err}"
        );
        assert!(!work.join("out.mat").exists(), "`{line}` left an output");
    }
    assert_eq!(
        sh(&bin, &work, "nnet-get-feature-transform out.mat")
            .status
            .code(),
        Some(1)
    );
    let _ = std::fs::remove_dir_all(&root);
}
