//! Kaldi's `--use-gpu` and `fit --device`. Without a usable GPU (the default build, or a
//! `cuda` build on a machine without one) `yes` fails with one line naming the reason and
//! leaves no output, and `optional` falls back to the CPU with one log line; with one, the
//! GPU's outputs agree with the CPU's. Each test checks whichever of the two happened. Also the
//! profiles that say where a command's time went.

use std::path::{Path, PathBuf};
use std::process::Output;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

fn compnet(dir: &Path, args: &[&str]) -> Output {
    compnet::testing::cli::run_in(env!("CARGO_BIN_EXE_compnet"), dir, args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The numbers of a text archive, in order.
fn numbers(path: &Path) -> Vec<f64> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

struct Compute {
    case: PathBuf,
    tmp: tempfile::TempDir,
}

impl Compute {
    fn new() -> Self {
        Compute {
            case: Path::new(GOLDEN).join("cases/cnn-small"),
            tmp: tempfile::tempdir().unwrap(),
        }
    }
    /// `compute` on the case's features with `extra` options into `name`.
    fn run(&self, name: &str, extra: &[&str]) -> (Output, PathBuf) {
        let out = self.tmp.path().join(name);
        let wspec = format!("ark,t:{}", out.display());
        let mut args = vec!["compute"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["model.raw", "ark:feats.txt", &wspec]);
        (compnet(&self.case, &args), out)
    }
}

#[test]
fn use_gpu_yes_fails_with_one_line_or_matches_the_cpu() {
    let c = Compute::new();
    let (cpu, cpu_out) = c.run("cpu.txt", &[]);
    assert!(cpu.status.success(), "{}", stderr(&cpu));
    for mode in ["yes", "wait"] {
        let opt = format!("--use-gpu={mode}");
        let (gpu, gpu_out) = c.run(&format!("{mode}.txt"), &[&opt]);
        let err = stderr(&gpu);
        if gpu.status.success() {
            assert!(err.contains("using the GPU"), "{err}");
            assert!(
                close(&numbers(&gpu_out), &numbers(&cpu_out), 1e-4),
                "GPU output differs from the CPU's"
            );
        } else {
            let reason: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
            assert_eq!(reason.len(), 1, "one error line: {err}");
            assert!(reason[0].contains("no usable GPU"), "{err}");
            assert!(reason[0].contains(&opt), "{err}");
            assert!(!gpu_out.exists(), "a failed run leaves no output");
        }
    }
}

#[test]
fn use_gpu_optional_falls_back_to_the_cpu_with_one_log_line() {
    let c = Compute::new();
    let (cpu, cpu_out) = c.run("cpu.txt", &["--use-gpu=no"]);
    assert!(cpu.status.success(), "{}", stderr(&cpu));
    assert!(
        !stderr(&cpu).contains("GPU"),
        "--use-gpu=no is quiet about GPUs"
    );
    let (opt, opt_out) = c.run("optional.txt", &["--use-gpu=optional"]);
    let err = stderr(&opt);
    assert!(opt.status.success(), "{err}");
    if err.contains("using the GPU") {
        assert!(close(&numbers(&opt_out), &numbers(&cpu_out), 1e-4));
    } else {
        assert_eq!(err.matches("using the CPU").count(), 1, "{err}");
        assert_eq!(
            std::fs::read(&opt_out).unwrap(),
            std::fs::read(&cpu_out).unwrap(),
            "the fallback is the CPU computation"
        );
    }
}

#[test]
fn a_wrong_use_gpu_value_is_a_usage_error() {
    let c = Compute::new();
    let (o, out) = c.run("x.txt", &["--use-gpu=sometimes"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sometimes"), "{}", stderr(&o));
    assert!(!out.exists());
}

#[test]
fn train_and_fit_refuse_a_gpu_they_cannot_have() {
    let case = Path::new(GOLDEN).join("train/affine-plain");
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("after.raw");
    let o = compnet(
        &case,
        &[
            "train",
            "--use-gpu=yes",
            "before.raw",
            "ark:egs.ark",
            model.to_str().unwrap(),
        ],
    );
    let err = stderr(&o);
    if o.status.success() {
        assert!(err.contains("using the GPU"), "{err}");
    } else {
        assert!(err.contains("no usable GPU"), "{err}");
        assert!(!model.exists(), "a failed run leaves no model");
    }
    let out_dir = tmp.path().join("fit");
    let o = compnet(
        &case,
        &[
            "fit",
            "--device=cuda",
            "before.raw",
            "--train=ark:egs.ark",
            "--valid=ark:egs.ark",
            &format!("--out={}", out_dir.display()),
            "--num-epochs=1",
        ],
    );
    let err = stderr(&o);
    if o.status.success() {
        assert!(err.contains("using the GPU"), "{err}");
    } else {
        assert!(
            err.contains("--device=cuda") && err.contains("no usable GPU"),
            "{err}"
        );
        assert!(!out_dir.exists(), "a refused fit writes nothing");
    }
    let o = compnet(&case, &["fit", "--device=tpu", "before.raw"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("tpu"), "{}", stderr(&o));
}

/// The kernels' CUDA source compiles (NVRTC, no GPU needed) for Hopper and Ampere, and
/// defines every kernel the backend launches. Needs libnvrtc on the library path
/// (`scripts/gpu_check.sh` and `scripts/cuda_source_check.sh` set it up).
#[cfg(feature = "cuda")]
#[test]
fn cuda_kernel_source_compiles_with_every_kernel() {
    for arch in ["sm_90", "sm_80"] {
        match compnet::matrix::device::check_kernel_source(arch) {
            Ok(n) => assert!(n >= 40, "{n} kernels"),
            Err(e) => panic!("{arch}: {e}"),
        }
    }
}

/// `COMPNET_PROFILE=1` prints the stage table when the command ends (with a GPU,
/// `COMPNET_GPU_PROFILE=1` adds the per-call table); without it nothing is printed.
#[test]
fn the_stage_profile_is_printed_only_when_asked_for() {
    let case = Path::new(GOLDEN).join("train/affine-plain");
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("after.raw");
    let train = |profile: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_compnet"));
        cmd.current_dir(&case).args([
            "train",
            "before.raw",
            "ark:egs.ark",
            model.to_str().unwrap(),
        ]);
        if profile {
            cmd.env("COMPNET_PROFILE", "1");
        } else {
            cmd.env_remove("COMPNET_PROFILE");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let err = train(true);
    assert!(err.contains("stage profile"), "{err}");
    let stage_count = |name: &str| -> Option<u64> {
        err.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().rev().nth(1)?.parse().ok())
    };
    assert!(
        stage_count("trainer: train").is_some_and(|n| n > 0),
        "{err}"
    );
    assert!(err.lines().any(|l| l.starts_with("Propagate ")), "{err}");
    assert!(!train(false).contains("stage profile"));
}
