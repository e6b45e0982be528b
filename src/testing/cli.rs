//! Running the `compnet` binary from integration tests (which pass its path,
//! `env!("CARGO_BIN_EXE_compnet")`): no run may panic, and a run that must fail must say so
//! in one error line and leave no output (nor a temporary beside it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A bad-input test's folders: a scratch root with compnet's Kaldi names (`bin` is compnet),
/// and its `work/` holding copies of `files` from `golden`. Returns (root, names folder, work).
pub fn bad_input_work(
    bin: &str,
    tag: &str,
    golden: &str,
    files: &[&str],
) -> (PathBuf, PathBuf, PathBuf) {
    let root = scratch(tag, "bad");
    let names = kaldi_names(bin, &root);
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    for f in files {
        std::fs::copy(Path::new(golden).join(f), work.join(f)).unwrap();
    }
    (root, names, work)
}

/// Runs `bin` with `args`; panics if it panicked.
pub fn run(bin: &str, args: &[&str]) -> Output {
    unpanicked(args, Command::new(bin).args(args))
}

/// Runs `bin` with `args` in the folder `dir`; panics if it panicked.
pub fn run_in<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    bin: &str,
    dir: &Path,
    args: &[S],
) -> Output {
    unpanicked(args, Command::new(bin).args(args).current_dir(dir))
}

/// Runs `cmd` (started with `args`) to its end; panics if it panicked.
fn unpanicked<S: std::fmt::Debug>(args: &[S], cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run compnet");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked"),
        "compnet {args:?} panicked:\n{err}"
    );
    out
}

/// Runs `bin` with `args`, which must succeed without panicking; returns what it printed.
pub fn succeeds<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(bin: &str, args: &[S]) -> Output {
    let out = Command::new(bin).args(args).output().expect("run compnet");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("panicked"),
        "compnet {args:?} failed:\n{}\n{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Runs `bin` with `args`, which must fail (non-zero exit) without panicking; returns stderr.
pub fn fails<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(bin: &str, args: &[S]) -> String {
    let out = Command::new(bin).args(args).output().expect("run compnet");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "compnet {args:?} should fail:\n{err}"
    );
    assert!(
        !err.contains("panicked"),
        "compnet {args:?} panicked:\n{err}"
    );
    err
}

/// Runs a command that must fail: non-zero exit, an error line starting `compnet: error: `
/// (right after the echoed command line when `error_first`; after log lines otherwise), no
/// `out_file` and
/// no temporary file beside it. Returns stderr.
pub fn must_fail(bin: &str, args: &[&str], out_file: &Path, error_first: bool) -> String {
    let out = run(bin, args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "compnet {args:?} succeeded:\n{err}");
    // Every command echoes its command line first, as Kaldi's tools do (`--print-args`).
    let mut full = vec![bin.to_string()];
    full.extend(args.iter().map(|a| a.to_string()));
    let echo = format!("{}\n", crate::cli::kaldi_args::command_line_for_log(&full));
    let after_echo = err.strip_prefix(echo.as_str()).unwrap_or(&err);
    let says = if error_first {
        after_echo.starts_with("compnet: error: ")
    } else {
        err.lines().any(|l| l.starts_with("compnet: error: "))
    };
    assert!(says, "{args:?}: {err}");
    assert!(!out_file.exists(), "{args:?} left {}", out_file.display());
    let dir = out_file.parent().expect("output in a folder");
    let leftovers: Vec<String> = std::fs::read_dir(dir)
        .expect("read the output folder")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{args:?} left {leftovers:?}");
    err
}

/// A fresh scratch folder `compnet-<tag>-<pid>-<name>` under the system's temporary folder.
pub fn scratch(tag: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compnet-{tag}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A folder of Kaldi names made by `compnet install-kaldi-names` (`bin`: the compnet binary).
pub fn kaldi_names(bin: &str, root: &Path) -> PathBuf {
    let dir = root.join("bin");
    let out = Command::new(bin)
        .args(["install-kaldi-names", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// Runs a shell command line in `dir` with the Kaldi names first on PATH.
pub fn sh(bin: &Path, dir: &Path, line: &str) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .args(["-c", line])
        .env("PATH", path)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The LOG and WARNING messages of a log, without their prefixes; the compilation-time line
/// (compnet's compiler reports other figures) is left out.
pub fn log_bodies(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("LOG (") || l.starts_with("WARNING ("))
        .filter(|l| !l.contains("seconds taken in nnet3 compilation"))
        .map(|l| match l.find(".cc:") {
            Some(i) => l[i + l[i..].find(") ").unwrap() + 2..]
                .trim_end()
                .to_string(),
            None => l[l.find(") ").unwrap() + 2..].trim_end().to_string(),
        })
        .collect()
}

/// A golden folder's run under Kaldi's names: the scratch `work` folder its commands ran in,
/// the inputs copied there (`# inputs: ` in `cmd.txt`), and how many commands ran.
pub struct GoldenRun {
    /// The scratch folder (holding `work` and the Kaldi names' `bin`).
    pub root: PathBuf,
    /// The folder of Kaldi names.
    pub names: PathBuf,
    pub work: PathBuf,
    pub inputs: Vec<String>,
    pub commands: usize,
}

/// Runs every command line of `golden/cmd.txt` with `sh`, Kaldi's names (links to `bin`, the
/// compnet binary) first on PATH, in a scratch folder holding only the inputs; each must
/// succeed without panicking.
pub fn run_golden(bin: &str, tag: &str, golden: &str) -> GoldenRun {
    let root = scratch(tag, "golden");
    let names = kaldi_names(bin, &root);
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cmd = std::fs::read_to_string(Path::new(golden).join("cmd.txt")).unwrap();
    let inputs: Vec<String> = cmd
        .lines()
        .find_map(|l| l.strip_prefix("# inputs: "))
        .expect("an inputs line")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for f in &inputs {
        std::fs::copy(Path::new(golden).join(f), work.join(f)).unwrap();
    }
    let mut commands = 0;
    for line in cmd
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let out = sh(&names, &work, line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "`{line}` panicked: {err}");
        assert!(out.status.success(), "`{line}` failed: {err}");
        commands += 1;
    }
    GoldenRun {
        root,
        names,
        work,
        inputs,
        commands,
    }
}
