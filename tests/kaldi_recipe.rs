//! `scripts/kaldi_recipe.sh`: what Kaldi's `steps/nnet3/train_raw_dnn.py` does (egs, iterations
//! of two parallel `nnet3-train` jobs, `nnet3-average`, `nnet3-compute-prob`,
//! `nnet3-show-progress`, `nnet3-combine`), run with compnet under Kaldi's names only. The
//! script checks the log lines the driver parses and fails if one is missing; here it must
//! succeed, and the held-out objective must improve on the initial model's.

use std::process::Command;

#[test]
fn train_raw_dnn_in_miniature_runs_under_kaldi_names() {
    let root = env!("CARGO_MANIFEST_DIR");
    let work = std::env::temp_dir().join(format!("compnet-kaldi-recipe-{}", std::process::id()));
    let out = Command::new("sh")
        .arg(format!("{root}/scripts/kaldi_recipe.sh"))
        .arg(&work)
        .env("COMPNET", env!("CARGO_BIN_EXE_compnet"))
        .env("ITERS", "2")
        .env_remove("KALDI_BIN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // "iter  train  valid  accuracy" rows for iterations 0..=2, then the final line.
    let valid: Vec<f64> = stdout
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(valid.len(), 3, "{stdout}");
    assert!(valid[2] > valid[0] + 0.5, "no progress: {stdout}");
    assert!(stdout.contains("final  valid log-likelihood -"), "{stdout}");
    let _ = std::fs::remove_dir_all(&work);
}
