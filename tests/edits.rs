//! `compnet copy --edits / --edits-config / --nnet-config` against Kaldi's `nnet3-copy`: every
//! command of tests/data/kaldi/edits/cmd.txt (made with Kaldi's binaries) is replayed with
//! compnet and the written models must be byte-identical; bad edit directives fail with the
//! file and line and write nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

const EDITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/edits");

/// Splits a shell command line of cmd.txt into words (single quotes only, as cmd.txt uses).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            _ => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compnet-edits-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn edits_match_nnet3_copy() {
    let cmd = std::fs::read_to_string(Path::new(EDITS).join("cmd.txt")).unwrap();
    let out_dir = temp_dir("golden");
    let mut compared = 0;
    for line in cmd.lines().filter(|l| l.starts_with("nnet3-copy ")) {
        let mut words = shell_words(line);
        let golden = words.pop().unwrap();
        words[0] = "copy".into();
        let ours = out_dir.join(&golden);
        words.push(ours.to_str().unwrap().into());
        let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
            .current_dir(EDITS)
            .args(&words)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "`{line}` failed:\n{err}");
        let want = std::fs::read(Path::new(EDITS).join(&golden)).unwrap();
        let got = std::fs::read(&ours).unwrap();
        assert!(got == want, "`{line}`: {golden} differs from Kaldi's");
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} edit commands replayed");
    std::fs::remove_dir_all(&out_dir).unwrap();
}

/// Runs `compnet copy` with `edits` (an edit-config file's text) on the seed model; returns
/// (success, stderr) and checks that a failed run wrote nothing.
fn copy_with_edits(edits: &str, tag: &str) -> (bool, String) {
    let dir = temp_dir(tag);
    let conf = dir.join("my.edits");
    std::fs::write(&conf, edits).unwrap();
    let out_file = dir.join("out.raw");
    let model = Path::new(EDITS).join("../cases/seed/model.raw");
    let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args([
            "copy",
            &format!("--edits-config={}", conf.display()),
            model.to_str().unwrap(),
            out_file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    if !out.status.success() {
        assert!(
            !out_file.exists(),
            "a failed edit wrote {}",
            out_file.display()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    (out.status.success(), err)
}

#[test]
fn bad_edit_directives_fail_with_file_and_line() {
    let cases = [
        (
            "set-learning-rate name=* learning-rate=0.1\nfrobnicate name=*\n",
            "my.edits:2",
            "unknown edit directive 'frobnicate'",
        ),
        ("set-learning-rate name=*\n", "my.edits:1", "learning-rate"),
        (
            "set-dropout-proportion proportion=1.5\n",
            "my.edits:1",
            "[0, 1]",
        ),
        (
            "rename-node old-name=nosuch new-name=x\n",
            "my.edits:1",
            "no node 'nosuch'",
        ),
        (
            "rename-node old-name=output new-name=affine2\n",
            "my.edits:1",
            "already exists",
        ),
        (
            "remove-output-nodes name=out*\n",
            "my.edits:1",
            "every output node",
        ),
        (
            "apply-svd name=* bottleneck-dim=10\n",
            "my.edits:1",
            "not supported",
        ),
        (
            "set-learning-rate learning-rate=0.1 lernrate=2\n",
            "my.edits:1",
            "lernrate",
        ),
    ];
    for (i, (edits, at, what)) in cases.iter().enumerate() {
        let (ok, err) = copy_with_edits(edits, &format!("bad{i}"));
        assert!(!ok, "{edits:?} succeeded");
        assert!(err.contains(at), "{edits:?}: no {at} in\n{err}");
        assert!(err.contains(what), "{edits:?}: no '{what}' in\n{err}");
    }
}

#[test]
fn edits_log_what_they_did() {
    let (ok, err) = copy_with_edits(
        "# comment\nset-learning-rate name=affine* learning-rate=0.01\n\nconvert-to-fixed-affine name=affine1\n",
        "log",
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("Set learning rates for 2 components."),
        "{err}"
    );
    assert!(
        err.contains("Converted 1 components to FixedAffineComponent."),
        "{err}"
    );
}
