//! Inputs that would abort, panic or run for ever without their checks, each with the clear
//! error (or warning) it gives. Sizes from configs, descriptors, files and options are checked
//! against the memory limit (`COMPNET_MAX_MEMORY`, see src/limits.rs) before allocating.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Golden files, the in-repository copy of the Kaldi goldens (tests/data/kaldi).
fn kaldi_data() -> PathBuf {
    std::env::var_os("COMPNET_KALDI_DATA").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kaldi"),
        PathBuf::from,
    )
}

fn case_file(case: &str, file: &str) -> PathBuf {
    let p = kaldi_data().join("cases").join(case).join(file);
    assert!(p.exists(), "missing golden file {}", p.display());
    p
}

/// Runs compnet with a fixed memory limit so the expected messages do not depend on the
/// machine; never a panic or a signal.
fn compnet(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args(args)
        .env("COMPNET_MAX_MEMORY", "2G")
        .stdin(Stdio::null())
        .output()
        .expect("run compnet");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation of"),
        "compnet {args:?} aborted:\n{err}"
    );
    assert!(
        out.status.code().is_some(),
        "compnet {args:?} killed by a signal:\n{err}"
    );
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A command that must fail with a `compnet: error:` naming every fragment.
fn fails_with(args: &[&str], fragments: &[&str]) -> String {
    let o = compnet(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "compnet {args:?} succeeded:\n{err}");
    assert!(err.contains("compnet: error: "), "{args:?}: {err}");
    for f in fragments {
        assert!(err.contains(f), "compnet {args:?}: no '{f}' in:\n{err}");
    }
    err
}

fn succeeds(args: &[&str]) -> String {
    let o = compnet(args);
    let err = stderr(&o);
    assert!(o.status.success(), "compnet {args:?} failed:\n{err}");
    err
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn config_with(component: &str, input: &str) -> String {
    format!(
        "input-node name=input dim=4\n{component}\ncomponent-node name=c component=c \
         input={input}\noutput-node name=output input=c\n"
    )
}

/// Each huge config size fails at its line:column, naming the size asked for and the limit.
#[test]
fn huge_config_dims_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.raw");
    let out = out.to_str().unwrap();
    let cases = [
        (
            "component name=c type=AffineComponent input-dim=2147483647 output-dim=4",
            "input",
            "input-dim",
        ),
        (
            "component name=c type=LinearComponent input-dim=4 output-dim=2147483647",
            "input",
            "output-dim",
        ),
        (
            "component name=c type=BlockAffineComponent input-dim=2147483647 output-dim=4 num-blocks=1",
            "input",
            "input-dim",
        ),
        (
            "component name=c type=PerElementScaleComponent dim=2147483647",
            "input",
            "dim",
        ),
        (
            "component name=c type=LstmNonlinearityComponent cell-dim=100000000",
            "input",
            "cell-dim",
        ),
        (
            "component name=c type=SumGroupComponent sizes=2,2147483647",
            "input",
            "sizes",
        ),
        // A 100,000,000-dim layer used to run past 20 s before failing.
        (
            "component name=c type=AffineComponent input-dim=4 output-dim=100000000",
            "input",
            "output-dim",
        ),
    ];
    for (line, input, key) in cases {
        // The error points at the value of the key that asks for too much.
        let column = line.find(&format!(" {key}=")).unwrap() + key.len() + 3;
        let at = format!(":2:{column}:");
        let at = at.as_str();
        let cfg = write(dir.path(), "net.config", &config_with(line, input));
        let start = Instant::now();
        let err = fails_with(
            &["init", &cfg, out],
            &[at, "over the memory limit of 2.0 GiB", "COMPNET_MAX_MEMORY"],
        );
        assert!(err.contains("would need"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{line}: took {:?}",
            start.elapsed()
        );
        assert!(!Path::new(out).exists());
    }
}

/// Raising the limit lets a large (but real) layer through: the limit is the only reason.
#[test]
fn the_limit_is_raised_by_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "net.config",
        &config_with(
            "component name=c type=AffineComponent input-dim=4 output-dim=20000000",
            "input",
        ),
    );
    let out = dir.path().join("out.raw");
    let args = ["init", &cfg, out.to_str().unwrap()];
    fails_with(&args, &["over the memory limit"]);
    let o = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args(args)
        .env("COMPNET_MAX_MEMORY", "4G")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `Const(1, 2147483647)` in a descriptor must not abort `compute`.
#[test]
fn huge_descriptor_constant_is_a_clear_error_in_compute() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "net.config",
        "input-node name=input dim=12\noutput-node name=output input=Append(input, Const(1, 2147483647))\n",
    );
    let model = dir.path().join("m.raw");
    let model = model.to_str().unwrap();
    succeeds(&["init", &cfg, model]);
    let feats = format!("ark:{}", case_file("seed", "feats.txt").display());
    fails_with(
        &["compute", model, &feats, "ark,t:/dev/null"],
        &[
            "a computation over",
            "over the memory limit",
            "COMPNET_MAX_MEMORY",
        ],
    );
}

/// Command-line values are input too.
#[test]
fn extreme_compute_options_are_clear_errors() {
    let model = case_file("seed", "model.raw");
    let model = model.to_str().unwrap();
    let feats = format!("ark:{}", case_file("seed", "feats.txt").display());
    fails_with(
        &[
            "compute",
            "--num-threads=5000",
            model,
            &feats,
            "ark,t:/dev/null",
        ],
        &["--num-threads=5000 is more than"],
    );
    for opt in [
        "--extra-left-context=2147483647",
        "--extra-right-context=2147483647",
        "--frames-per-chunk=2147483647",
        "--frame-subsampling-factor=2147483647",
    ] {
        let name = opt.split('=').next().unwrap();
        fails_with(
            &["compute", opt, model, &feats, "ark,t:/dev/null"],
            &[&format!("{name}="), "over the memory limit"],
        );
    }
}

/// NaN and ±1e39 in a model's statistics: `info` must not panic while sorting them.
#[test]
fn nan_and_huge_statistics_do_not_break_info() {
    let text = std::fs::read_to_string(case_file("clockwork", "model.txt")).unwrap();
    let stats = |extreme: &[&str]| -> String {
        let v: Vec<String> = (0..32)
            .map(|i| {
                extreme
                    .get(i % 8)
                    .map_or(format!("0.{i}"), |s| s.to_string())
            })
            .collect();
        format!("[ {} ]", v.join(" "))
    };
    let values = stats(&["nan", "1e39", "-1e39", "-nan"]);
    let derivs = stats(&["inf", "nan", "-inf"]);
    let old = "<Dim> 32 <ValueAvg>  [ ]\n<DerivAvg>  [ ]\n<Count> 0 ";
    assert!(text.contains(old), "golden nonlin1 statistics changed");
    let damaged = text.replacen(
        old,
        &format!("<Dim> 32 <ValueAvg>  {values}\n<DerivAvg>  {derivs}\n<Count> 10 "),
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "model.txt", &damaged);
    let copy = dir.path().join("copy.txt");
    let copy = copy.to_str().unwrap();
    for m in [model.as_str(), copy] {
        if m == copy {
            succeeds(&["copy", "--binary=false", &model, copy]);
        }
        let o = compnet(&["info", m]);
        assert!(o.status.success(), "info {m}: {}", stderr(&o));
        let info = String::from_utf8_lossy(&o.stdout);
        let line = info
            .lines()
            .find(|l| l.starts_with("component name=nonlin1 "))
            .unwrap();
        assert!(line.contains("value-avg=[percentiles"), "{line}");
    }
}

/// SumGroupComponent `<Sizes>` of 2147483647 in a model (text or binary) used to allocate
/// 8.6 GB before any check; now the reader names the byte offset and the limit.
#[test]
fn huge_sum_group_sizes_in_a_model_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(case_file("misc-components", "model.txt")).unwrap();
    let old = "<Sizes> [ 1 2 3 4 6 16 ]";
    assert!(text.contains(old));
    let damaged = write(
        dir.path(),
        "m.txt",
        &text.replacen(old, "<Sizes> [ 1 2147483647 3 4 6 16 ]", 1),
    );
    fails_with(&["info", &damaged], &["at byte ", "over the memory limit"]);

    let raw = std::fs::read(case_file("misc-components", "model.raw")).unwrap();
    // A binary integer vector: size byte 4, the count, then the raw int32s.
    let mut sizes = vec![4u8];
    sizes.extend_from_slice(&6i32.to_le_bytes());
    for v in [1i32, 2, 3, 4, 6, 16] {
        sizes.extend_from_slice(&v.to_le_bytes());
    }
    let at = raw
        .windows(sizes.len())
        .position(|w| w == sizes.as_slice())
        .expect("binary <Sizes> in the golden model");
    let mut bad = raw.clone();
    bad[at + 9..at + 13].copy_from_slice(&2147483647i32.to_le_bytes());
    let p = dir.path().join("m.raw");
    std::fs::write(&p, &bad).unwrap();
    fails_with(
        &["copy", p.to_str().unwrap(), "/dev/null"],
        &["at byte ", "over the memory limit"],
    );
}

fn sum_config(terms: usize) -> String {
    let sum: Vec<String> = (0..terms).map(|i| format!("Offset(input, {i})")).collect();
    format!(
        "input-node name=input dim=4\ncomponent name=c type=RectifiedLinearComponent dim=4\n\
         component-node name=c component=c input=Sum({})\noutput-node name=output input=c\n",
        sum.join(", ")
    )
}

/// What `init` writes must read back: a flat Sum of 129+ terms is written right-nested and
/// used to hit "descriptor nested too deeply"; and many terms used to take quadratic time.
#[test]
fn long_sums_are_linear_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    for terms in [129, 300, 20_000] {
        let cfg = write(dir.path(), "sum.config", &sum_config(terms));
        let model = dir.path().join("m.txt");
        let model = model.to_str().unwrap();
        let start = Instant::now();
        succeeds(&["init", "--binary=false", &cfg, model]);
        let written = std::fs::read_to_string(model).unwrap();
        let nested = written.matches("Sum(").count();
        assert_eq!(
            nested,
            terms - 1,
            "{terms} terms written as {nested} nested Sums"
        );
        let copy = dir.path().join("copy.txt");
        succeeds(&["copy", "--binary=false", model, copy.to_str().unwrap()]);
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), written);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{terms} terms: {:?}",
            start.elapsed()
        );
        if terms == 129 {
            let o = compnet(&["info", model]);
            assert!(o.status.success(), "{}", stderr(&o));
            assert!(String::from_utf8_lossy(&o.stdout).contains("right-context: 128"));
        }
    }
}

/// 100,000 component lines: names are found by map, and the format's own bound on the
/// number of components (below 100,000) is an error at the line that passes it.
#[test]
fn many_component_lines_are_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = String::from("input-node name=input dim=4\n");
    let n = 100_000;
    for i in 0..n {
        cfg += &format!("component name=c{i} type=RectifiedLinearComponent dim=4\n");
    }
    for i in 0..n {
        let input = if i == 0 {
            "input".to_string()
        } else {
            format!("c{}", i - 1)
        };
        cfg += &format!("component-node name=c{i} component=c{i} input={input}\n");
    }
    cfg += &format!("output-node name=output input=c{}\n", n - 1);
    let path = write(dir.path(), "big.config", &cfg);
    let out = dir.path().join("big.raw");
    let start = Instant::now();
    fails_with(
        &["init", &path, out.to_str().unwrap()],
        &[
            ":100001:1:",
            "too many components: a network holds fewer than 100000",
        ],
    );
    // One component fewer is fine, and reads back.
    let fewer = cfg
        .replace(
            "component name=c99999 type=RectifiedLinearComponent dim=4\n",
            "",
        )
        .replace(
            "component-node name=c99999 component=c99999 input=c99998\n",
            "",
        )
        .replace("input=c99999", "input=c99998");
    let path = write(dir.path(), "big.config", &fewer);
    succeeds(&["init", &path, out.to_str().unwrap()]);
    succeeds(&["copy", out.to_str().unwrap(), "/dev/null"]);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// NaN or infinity in input features: a warning naming the utterance (the values are carried
/// through, as Kaldi does), also when compressing.
#[test]
fn non_finite_features_warn_with_the_utterance_key() {
    let dir = tempfile::tempdir().unwrap();
    let feats = std::fs::read_to_string(case_file("seed", "feats.txt")).unwrap();
    let first = feats.find("utt2").expect("utt2 in the golden features");
    let bracket = first + feats[first..].find('[').unwrap();
    let num_start = bracket
        + feats[bracket..]
            .find(|c: char| c == '-' || c.is_ascii_digit())
            .unwrap();
    let num_end = num_start + feats[num_start..].find(' ').unwrap();
    let damaged = format!("{}nan{}", &feats[..num_start], &feats[num_end..]);
    let path = write(dir.path(), "feats.txt", &damaged);
    let rspec = format!("ark:{path}");
    let model = case_file("seed", "model.raw");
    let err = succeeds(&[
        "compute",
        model.to_str().unwrap(),
        &rspec,
        "ark,t:/dev/null",
    ]);
    assert!(
        err.contains("warning: utterance utt2: 1 NaN or infinite value(s)"),
        "{err}"
    );
    assert!(!err.contains("utterance utt1:"), "{err}");
    let err = succeeds(&["copy-feats", "--compress=true", &rspec, "ark:/dev/null"]);
    assert!(
        err.contains("utterance utt2: 1 NaN or infinite value(s)")
            && err.contains("whole compressed matrix may become NaN"),
        "{err}"
    );
}

/// kill -9 during a write leaves the old output and a temporary; the next run writing the
/// same output recognises the temporary as stale (its writer's lock is gone) and removes it.
#[test]
fn temporaries_left_by_kill_9_are_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.ark");
    std::fs::write(&out, b"old").unwrap();
    let wspec = format!("ark:{}", out.display());
    // `compute` opens its output, then its iVector archive: a FIFO nobody writes to, so it
    // waits there with the temporary open until it is killed.
    let fifo = dir.path().join("ivectors.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let model = case_file("seed", "model.raw");
    let feats = format!("ark:{}", case_file("seed", "feats.txt").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .arg("compute")
        .arg(format!("--ivectors=ark:{}", fifo.display()))
        .arg(&model)
        .args([feats.as_str(), wspec.as_str()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let temporaries = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .collect();
        v.sort();
        v
    };
    let start = Instant::now();
    while temporaries().is_empty() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("no temporary appeared");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let left = temporaries();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(".out.ark.tmp"), "{left:?}");
    assert_eq!(std::fs::read(&out).unwrap(), b"old");

    // A live writer's temporary is not touched: this process holds its lock.
    let live = dir.path().join(".out.ark.tmp1");
    let f = std::fs::File::create(&live).unwrap();
    f.try_lock().unwrap();

    succeeds(&["copy-feats", &feats, &wspec]);
    assert_eq!(temporaries(), vec![".out.ark.tmp1".to_string()]);
    drop(f);
    succeeds(&["copy-feats", &feats, &wspec]);
    assert!(temporaries().is_empty(), "{:?}", temporaries());
    assert_ne!(std::fs::read(&out).unwrap(), b"old");
}

/// Integers that size nothing (BackpropTruncation's intervals) are not held against the memory
/// limit when read back: what `init` accepted must read back under a small limit too (found by
/// the 20-minute fuzz run, seed 4242 case 129709).
#[test]
fn huge_intervals_round_trip_under_a_small_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "net.config",
        &config_with(
            "component name=c type=BackpropTruncationComponent dim=4 \
             zeroing-interval=2147483647 recurrence-interval=2147483647",
            "input",
        ),
    );
    let raw = dir.path().join("a.raw");
    let raw = raw.to_str().unwrap();
    let copy = dir.path().join("b.raw");
    for args in [
        vec!["init", "--binary=true", cfg.as_str(), raw],
        vec!["copy", "--binary=true", raw, copy.to_str().unwrap()],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_compnet"))
            .args(&args)
            .env("COMPNET_MAX_MEMORY", "1G")
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(std::fs::read(raw).unwrap(), std::fs::read(&copy).unwrap());
}
