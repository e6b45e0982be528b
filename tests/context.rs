//! `compnet info`'s left-context, right-context and modulus equal Kaldi's `nnet3-info` on
//! networks with recurrences into the past, into the future and both, clockwork-style
//! (tests/data/kaldi/context, see its README).

use std::path::Path;
use std::process::Command;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/context");

/// The `key: value` lines among the first lines of an info text, for the given keys.
fn context_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            ["left-context:", "right-context:", "modulus:"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(str::to_string)
        .collect()
}

fn check(case: &str) {
    let dir = Path::new(DATA).join(case);
    let kaldi = std::fs::read_to_string(dir.join("info_head.txt")).expect("info_head.txt");
    let want = context_lines(&kaldi);
    assert_eq!(want.len(), 3, "{case}: Kaldi's lines {want:?}");
    let tmp = std::env::temp_dir().join(format!("compnet-context-{case}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let raw = tmp.join("net.raw");
    let init = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args([
            "init",
            "--srand=1",
            dir.join("net.config").to_str().unwrap(),
            raw.to_str().unwrap(),
        ])
        .output()
        .expect("run compnet");
    assert!(
        init.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args(["info", raw.to_str().unwrap()])
        .output()
        .expect("run compnet");
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        out.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = context_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(got, want, "{case}: compnet info differs from nnet3-info");
}

#[test]
fn left_recurrence_context_matches_kaldi() {
    check("left");
}

#[test]
fn right_recurrence_context_matches_kaldi() {
    check("right");
}

#[test]
fn recurrences_both_ways_context_matches_kaldi() {
    check("mixed");
}

/// Kaldi's answer depends on its window (40 frames): a right recurrence through a `Round`
/// leaves only the first frames computable, so the right context is 40 − 4 = 36.
#[test]
fn clockwork_context_matches_kaldi() {
    check("clockwork");
}
