//! A short fixed-seed run of the repository's fuzzer (src/bin/compnet-fuzz.rs) over the golden
//! files in tests/data/kaldi: any panic, abort, timeout, allocation over the limit or broken
//! round trip fails the test. The long run is scripts/fuzz.sh (docs/RELIABILITY.md).

use std::path::Path;
use std::process::Command;

#[test]
fn short_fixed_seed_fuzz_run_finds_no_failures() {
    let out = tempfile::tempdir().unwrap();
    let data = std::env::var_os("COMPNET_KALDI_DATA").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kaldi"),
        std::path::PathBuf::from,
    );
    assert!(
        data.join("cases").is_dir(),
        "no golden data at {}",
        data.display()
    );
    let run = Command::new(env!("CARGO_BIN_EXE_compnet-fuzz"))
        .args(["--duration", "20", "--seed", "1", "--jobs", "2"])
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(out.path())
        .arg("--compnet")
        .arg(env!("CARGO_BIN_EXE_compnet"))
        .output()
        .expect("run compnet-fuzz");
    let summary = String::from_utf8_lossy(&run.stdout);
    let failures = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the fuzzer found failures:\n{failures}\n{summary}"
    );
    // It really ran: cases of every command, most of them ending in a clean error or success.
    let total: u64 = summary
        .lines()
        .next()
        .and_then(|l| l.split(": ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(total >= 40, "only {total} cases ran:\n{summary}");
    for cmd in ["info", "copy", "init", "copy-feats", "compute"] {
        assert!(
            summary.contains(&format!("\n  {cmd} ")),
            "no '{cmd}' case ran:\n{summary}"
        );
    }
    assert!(summary.contains("failures: 0"), "{summary}");
}
