//! `compnet-fuzz`: a mutation fuzzer for the `compnet` command line.
//!
//! It damages golden Kaldi files (models in text and binary, configs, feature archives, egs)
//! by truncation, bit flips, token swaps, extreme numbers, huge dimensions and splices, runs a
//! `compnet` command on each as a child process under a time limit and an address-space limit,
//! and classifies the outcome. Every case is derived from (seed, case number) alone, so
//! `compnet-fuzz --seed S --case N` replays one case exactly. See docs/RELIABILITY.md.

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "compnet-fuzz",
    about = "Mutation fuzzer for the compnet commands"
)]
struct Opts {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Seed; case N of seed S is always the same input and command.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay only this case (prints its command and outcome).
    #[arg(long)]
    case: Option<u64>,
    /// Stop after this many cases even if time is left.
    #[arg(long)]
    max_cases: Option<u64>,
    /// Golden data (the layout of tests/data/kaldi: cases/*/, formats/feats, formats/egs);
    /// default: $COMPNET_KALDI_DATA, else tests/data/kaldi.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where failures are saved (one folder per failing case) and the summary is written.
    #[arg(long, default_value = "target/fuzz")]
    out: PathBuf,
    /// The compnet binary (default: next to this one).
    #[arg(long)]
    compnet: Option<PathBuf>,
    /// Parallel runs.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Time limit of one child process, in seconds (a run past it counts as a hang; a loaded
    /// machine makes a lower limit report slow but finishing runs as hangs).
    #[arg(long, default_value_t = 20.0)]
    time_limit: f64,
    /// Address-space limit of one child process (ulimit -v), in MiB.
    #[arg(long, default_value_t = 4096)]
    mem_limit_mb: u64,
    /// The allocation limit handed to compnet (COMPNET_MAX_MEMORY), in MiB; below
    /// --mem-limit-mb, so that a size compnet checks fails cleanly before the OS limit.
    #[arg(long, default_value_t = 1024)]
    alloc_limit_mb: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Outcome {
    Success,
    CleanError,
    /// Non-zero exit without a `compnet: error:` / usage message.
    UnclearError,
    Panic,
    Abort,
    Timeout,
    OverLimit,
    BrokenRoundTrip,
    /// `fit --resume` went on from a damaged checkpoint.
    AcceptedDamage,
    /// A refused input (a damaged checkpoint) was changed by the run that refused it.
    ChangedInput,
}

impl Outcome {
    fn is_failure(self) -> bool {
        !matches!(self, Outcome::Success | Outcome::CleanError)
    }
    fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::CleanError => "clean-error",
            Outcome::UnclearError => "unclear-error",
            Outcome::Panic => "panic",
            Outcome::Abort => "abort",
            Outcome::Timeout => "timeout",
            Outcome::OverLimit => "over-limit",
            Outcome::BrokenRoundTrip => "broken-round-trip",
            Outcome::AcceptedDamage => "accepted-damage",
            Outcome::ChangedInput => "changed-input",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    BinaryModel,
    TextModel,
    Config,
    Feats,
    Egs,
    /// A training golden's merged egs (paired with its `before.raw`).
    TrainEgs,
    /// A training golden's `before.raw` (paired with its egs).
    TrainModel,
    /// A `fit` checkpoint (made at start-up from a training golden; `note` is the stepper).
    FitCheckpoint,
    /// A `fit` TOML options file (paired with a training golden).
    FitOptions,
}

struct Seed {
    path: PathBuf,
    kind: Kind,
    bytes: Vec<u8>,
    /// The case folder's model and features, to pair a damaged file with an intact partner.
    case_dir: Option<PathBuf>,
    /// Kind-specific: the stepper of a `FitCheckpoint`.
    note: String,
}

fn load_corpus(data: &Path) -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut push = |path: PathBuf, kind: Kind, case_dir: Option<PathBuf>| {
        if let Ok(bytes) = std::fs::read(&path) {
            seeds.push(Seed {
                path,
                kind,
                bytes,
                case_dir,
                note: String::new(),
            });
        }
    };
    for c in sorted_entries(&data.join("cases")) {
        push(c.join("model.raw"), Kind::BinaryModel, Some(c.clone()));
        push(c.join("model.txt"), Kind::TextModel, Some(c.clone()));
        push(c.join("net.config"), Kind::Config, Some(c.clone()));
        push(c.join("feats.txt"), Kind::Feats, Some(c.clone()));
    }
    for c in sorted_entries(&data.join("train")) {
        push(c.join("egs.ark"), Kind::TrainEgs, Some(c.clone()));
        push(c.join("before.raw"), Kind::TrainModel, Some(c.clone()));
    }
    for (sub, kind) in [("formats/feats", Kind::Feats), ("formats/egs", Kind::Egs)] {
        for f in sorted_entries(&data.join(sub))
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "ark"))
        {
            push(f, kind, None);
        }
    }
    seeds
}

/// `fit`'s TOML options files: every rate and schedule option, for each family of steppers.
const FIT_OPTIONS: &[&str] = &[
    "stepper = \"adam\"\nlearning-rate = \"0.002:0.001*2\"\nminibatch-size = \"4:8\"\n\
     beta1 = 0.9\nbeta2 = 0.999\nepsilon = 1e-8\nwarmup = 2\ngradient-noise = 0.01\n\
     l2 = 0.0001\nclip-gradient = 5.0\ndropout-schedule = \"0,0.2@0.5,0\"\nnum-epochs = 3\n",
    "stepper = \"ng\"\ninitial-effective-lrate = 0.003\nfinal-effective-lrate = 0.0003\n\
     momentum = 0.5\nmax-param-change = 2.0\nauto-adjust = 0.5\nauto-adjust-threshold = 0.01\n\
     patience = 3\ncheckpoint-every = \"1mb\"\nmax-wall-time = 600.0\nminibatch-size = 4\n",
    "stepper = \"rmsprop\"\nlearning-rate = 0.001\nrms-gamma = 0.99\nrms-inc = 1.2\n\
     rms-dec = 0.75\nrms-max = 10.0\nrms-min = 0.1\nlr-per = \"minibatch\"\nl1 = 0.0001\n\
     minibatch-size = 8\nnum-epochs = 2\n",
    "stepper = \"adamw\"\nweight-decay = 0.01\nlearning-rate = 0.001\n\
     backstitch-training-interval = 1\nmax-reductions = 2\nprint-interval = 1\n",
    "stepper = \"ng\"\nbackstitch-training-scale = 0.3\nbackstitch-training-interval = 2\n\
     learning-rate = 0.002\nmomentum = 0.0\nminibatch-size = 4\n",
];

/// Values an option mutation puts in place of a number of a TOML file.
const EXTREME_OPTION_VALUES: &[&str] = &[
    "1e308",
    "-1e308",
    "inf",
    "-inf",
    "nan",
    "0",
    "0.0",
    "-1",
    "1e-320",
    "1e39",
    "18446744073709551615",
    "2147483647",
    "1.0",
];

/// Seeds for `fit`: its TOML options files and checkpoints written by a short run of each
/// family of steppers on the first training golden (made here, so they are of this compnet's
/// format).
fn fit_seeds(data: &Path, compnet: &Path, work: &Path) -> Vec<Seed> {
    let Some(case) = sorted_entries(&data.join("train"))
        .into_iter()
        .find(|c| c.join("before.raw").exists() && c.join("egs.ark").exists())
    else {
        return Vec::new();
    };
    let mut seeds: Vec<Seed> = FIT_OPTIONS
        .iter()
        .map(|t| Seed {
            path: case.join("fit.toml"),
            kind: Kind::FitOptions,
            bytes: t.as_bytes().to_vec(),
            case_dir: Some(case.clone()),
            note: String::new(),
        })
        .collect();
    for stepper in ["adam", "ng", "momentum", "rmsprop"] {
        let out = work.join(format!("seed-{stepper}"));
        let _ = std::fs::remove_dir_all(&out);
        let status = Command::new(compnet)
            .args(fit_args(&case, stepper))
            .arg(format!("--out={}", out.display()))
            .arg("--max-minibatches=3")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let path = out.join("checkpoint.ckpt");
        match (status, std::fs::read(&path)) {
            (Ok(st), Ok(bytes)) if st.success() => seeds.push(Seed {
                path,
                kind: Kind::FitCheckpoint,
                bytes,
                case_dir: Some(case.clone()),
                note: stepper.to_string(),
            }),
            _ => eprintln!("compnet-fuzz: no {stepper} checkpoint seed (fit failed)"),
        }
    }
    seeds
}

/// `fit` of a training golden's `before.raw` on its egs with `stepper` (no `--out`).
fn fit_args(case: &Path, stepper: &str) -> Vec<String> {
    vec![
        "fit".into(),
        case.join("before.raw").display().to_string(),
        format!("--train=ark:{}", case.join("egs.ark").display()),
        format!("--stepper={stepper}"),
        "--momentum=0.5".into(),
        "--minibatch-size=4".into(),
        "--num-epochs=3".into(),
        "--srand=1".into(),
        "--learning-rate=0.001".into(),
    ]
}

/// The entries of `dir` in name order (none if it cannot be read), so that seeds come in the
/// same order on every machine.
fn sorted_entries(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

// ---------------------------------------------------------------- mutations

const EXTREME_INTS: &[i64] = &[
    2147483647,
    2147483648,
    1073741824,
    100000000,
    16777216,
    65536,
    -1,
    0,
    -2147483648,
    4294967296,
];
const EXTREME_FLOATS: &[&str] = &[
    "nan", "-nan", "inf", "-inf", "1e39", "-1e39", "1e-45", "3.4e38",
];

/// Byte spans of whitespace-separated tokens.
fn token_spans(b: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, &c) in b.iter().enumerate() {
        let sep = c.is_ascii_whitespace() || c == b'=' || c == b',' || c == b'(' || c == b')';
        match (sep, start) {
            (true, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, b.len()));
    }
    spans
}

/// Spans of tokens that look like numbers.
fn number_spans(b: &[u8]) -> Vec<(usize, usize)> {
    token_spans(b)
        .into_iter()
        .filter(|&(s, e)| {
            let t = &b[s..e];
            t.iter().any(|c| c.is_ascii_digit())
                && t.iter().all(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
        })
        .collect()
}

fn replace(b: &mut Vec<u8>, (s, e): (usize, usize), with: &[u8]) {
    b.splice(s..e, with.iter().copied());
}

fn extreme_text(rng: &mut StdRng) -> String {
    if rng.random_bool(0.6) {
        EXTREME_INTS[rng.random_range(0..EXTREME_INTS.len())].to_string()
    } else {
        EXTREME_FLOATS[rng.random_range(0..EXTREME_FLOATS.len())].to_string()
    }
}

/// Applies one random mutation; `others` supplies splice material.
fn mutate_once(b: &mut Vec<u8>, rng: &mut StdRng, others: &[Seed]) -> &'static str {
    if b.is_empty() {
        b.push(rng.random());
        return "insert";
    }
    match rng.random_range(0..9) {
        0 => {
            let at = rng.random_range(0..b.len());
            b.truncate(at);
            "truncate"
        }
        1 => {
            for _ in 0..rng.random_range(1..=8) {
                let at = rng.random_range(0..b.len());
                b[at] ^= 1 << rng.random_range(0..8);
            }
            "bit-flip"
        }
        2 => {
            let spans = token_spans(b);
            if spans.len() < 2 {
                return "none";
            }
            let (i, j) = (
                rng.random_range(0..spans.len()),
                rng.random_range(0..spans.len()),
            );
            let (lo, hi) = (spans[i.min(j)], spans[i.max(j)]);
            let (a, c) = (b[lo.0..lo.1].to_vec(), b[hi.0..hi.1].to_vec());
            replace(b, hi, &a);
            replace(b, lo, &c);
            "token-swap"
        }
        3 | 4 => {
            let spans = number_spans(b);
            if spans.is_empty() {
                return "none";
            }
            let s = spans[rng.random_range(0..spans.len())];
            let v = extreme_text(rng);
            replace(b, s, v.as_bytes());
            "extreme-number"
        }
        5 => {
            // Binary int32/float fields follow a size byte 4: overwrite one with an extreme.
            let marks: Vec<usize> = (0..b.len().saturating_sub(4))
                .filter(|&i| b[i] == 4)
                .collect();
            if marks.is_empty() {
                return "none";
            }
            let at = marks[rng.random_range(0..marks.len())] + 1;
            let v: [u8; 4] = if rng.random_bool(0.7) {
                (EXTREME_INTS[rng.random_range(0..EXTREME_INTS.len())] as i32).to_le_bytes()
            } else {
                [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX][rng.random_range(0..4)]
                    .to_le_bytes()
            };
            b[at..at + 4].copy_from_slice(&v);
            "binary-extreme"
        }
        6 => {
            // Huge dimensions: any `dim=` / `<...Dim>` value.
            let after = |pat: &[u8]| -> Vec<usize> {
                b.windows(pat.len())
                    .enumerate()
                    .filter(|(_, w)| *w == pat)
                    .map(|(i, _)| i + pat.len())
                    .collect()
            };
            let mut keys = after(b"dim=");
            keys.extend(after(b"Dim> "));
            keys.extend(after(b"sizes="));
            if keys.is_empty() {
                return "none";
            }
            let at = keys[rng.random_range(0..keys.len())];
            let end = (at..b.len())
                .find(|&i| !b[i].is_ascii_digit())
                .unwrap_or(b.len());
            let v = [2147483647i64, 100000000, 16777216, 1000000][rng.random_range(0..4)];
            replace(b, (at, end), v.to_string().as_bytes());
            "huge-dim"
        }
        7 => {
            let from = &others[rng.random_range(0..others.len())].bytes;
            if from.is_empty() {
                return "none";
            }
            let s = rng.random_range(0..from.len());
            let e = (s + rng.random_range(1..256)).min(from.len());
            let at = rng.random_range(0..=b.len());
            b.splice(at..at, from[s..e].iter().copied());
            "splice"
        }
        _ => {
            let s = rng.random_range(0..b.len());
            let e = (s + rng.random_range(1..64)).min(b.len());
            if rng.random_bool(0.5) {
                b.drain(s..e);
                "delete"
            } else {
                let chunk = b[s..e].to_vec();
                let times = rng.random_range(1..64);
                for _ in 0..times {
                    b.splice(s..s, chunk.iter().copied());
                }
                "repeat"
            }
        }
    }
}

// ---------------------------------------------------------------- commands

/// One case: the damaged input and the commands to run on it.
struct Plan {
    input_name: &'static str,
    input: Vec<u8>,
    mutations: Vec<&'static str>,
    /// Arguments with `IN`, `OUT`, `OUT2` placeholders.
    main: Vec<String>,
    /// Run when `main` succeeds; a failure of any is a broken round trip (what compnet wrote
    /// must read back). Kaldi's own format is not byte-stable under a second copy (e.g.
    /// `<OderivRms>` is stored as a root of a mean and read back squared), so this checks
    /// reading, not bytes.
    round_trip: Vec<Step>,
    command: &'static str,
    /// The intact input: a run on any other bytes must fail (a clean error) and leave the
    /// input as it was (`fit --resume` on a damaged checkpoint).
    refuse_unless: Option<Vec<u8>>,
}

enum Step {
    /// Must succeed.
    ReadBack(Vec<String>),
    /// A further command on what `main` wrote, classified like `main` (a clean error is fine).
    Then(Vec<String>),
    /// `fit --resume` on the checkpoint `main` wrote: like `Then`, but an error about the
    /// checkpoint (`checkpoint.ckpt: ...`) is a broken round trip.
    Resume(Vec<String>),
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const EXTREME_OPTIONS: &[&str] = &[
    "--num-threads",
    "--extra-left-context",
    "--extra-right-context",
    "--frames-per-chunk",
    "--frame-subsampling-factor",
    "--extra-left-context-initial",
    "--extra-right-context-final",
];

fn extreme_option(rng: &mut StdRng) -> String {
    let opt = EXTREME_OPTIONS[rng.random_range(0..EXTREME_OPTIONS.len())];
    let v = [2147483647i64, 5000, 1000000, 100000, 0, -1, -2147483648][rng.random_range(0..7)];
    format!("{opt}={v}")
}

fn plan_case(seed: u64, case: u64, corpus: &[Seed]) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ case);
    let s = &corpus[rng.random_range(0..corpus.len())];
    let mut input = s.bytes.clone();
    let mut mutations = Vec::new();
    let n = [0usize, 1, 1, 1, 2, 2, 3][rng.random_range(0..7)];
    for _ in 0..n {
        mutations.push(mutate_once(&mut input, &mut rng, corpus));
    }
    let case_file = |f: &str| s.case_dir.as_ref().map(|d| d.join(f).display().to_string());
    let feats = case_file("feats.txt").unwrap_or_default();
    let model = case_file("model.raw").unwrap_or_default();
    let binary = if rng.random_bool(0.5) {
        "--binary=true"
    } else {
        "--binary=false"
    };
    let mut compute_opts = Vec::new();
    if rng.random_bool(0.15) {
        compute_opts.push(extreme_option(&mut rng));
    }
    let compute = |m: &str, f: &str| {
        let mut v = strs(&["compute"]);
        v.extend(compute_opts.iter().cloned());
        v.extend(strs(&[m, &format!("ark:{f}"), "ark,t:OUT"]));
        v
    };
    let mut refuse_unless = None;
    let (input_name, main, round_trip, command): (_, _, Vec<Step>, _) = match s.kind {
        Kind::BinaryModel | Kind::TextModel => {
            let name = if s.kind == Kind::BinaryModel {
                "input.raw"
            } else {
                "input.txt"
            };
            match rng.random_range(0..4) {
                0 => (name, strs(&["info", "IN"]), vec![], "info"),
                1 | 2 => (
                    name,
                    strs(&["copy", binary, "IN", "OUT"]),
                    vec![
                        Step::ReadBack(strs(&["copy", binary, "OUT", "OUT2"])),
                        Step::Then(strs(&["info", "OUT"])),
                    ],
                    "copy",
                ),
                _ => (name, compute("IN", &feats), vec![], "compute"),
            }
        }
        Kind::Config => {
            if rng.random_bool(0.7) {
                (
                    "net.config",
                    strs(&["init", binary, "IN", "OUT"]),
                    vec![
                        Step::ReadBack(strs(&["copy", binary, "OUT", "OUT2"])),
                        Step::Then(strs(&["info", "OUT"])),
                    ],
                    "init",
                )
            } else {
                // init, then compute with the result: damage that init accepts reaches the
                // compiler and the runtime.
                (
                    "net.config",
                    strs(&["init", "IN", "OUT2"]),
                    vec![Step::Then(compute("OUT2", &feats))],
                    "init+compute",
                )
            }
        }
        Kind::TrainEgs => {
            let before = case_file("before.raw").unwrap_or_default();
            if rng.random_bool(0.6) {
                // Train on the damaged egs; what it writes must evaluate.
                (
                    "egs.ark",
                    strs(&["train", "--srand=1", &before, "ark:IN", "OUT"]),
                    vec![Step::Then(strs(&["compute-prob", "OUT", "ark:IN"]))],
                    "train",
                )
            } else {
                (
                    "egs.ark",
                    strs(&["compute-prob", &before, "ark:IN"]),
                    vec![],
                    "compute-prob",
                )
            }
        }
        Kind::FitCheckpoint => {
            // Resume from the damaged checkpoint (in the case folder, the run's --out): it
            // must be refused unless it is intact; what the resumed run writes must resume.
            let case = s.case_dir.clone().unwrap_or_default();
            let mut v = fit_args(&case, &s.note);
            v.extend(strs(&["--out", "DIR", "--resume", "--max-minibatches=4"]));
            let mut again = v.clone();
            again.pop();
            again.push("--max-minibatches=5".into());
            refuse_unless = Some(s.bytes.clone());
            (
                "checkpoint.ckpt",
                v,
                vec![Step::Resume(again)],
                "fit --resume",
            )
        }
        Kind::FitOptions => {
            if rng.random_bool(0.5) {
                let spans = number_spans(&input);
                if !spans.is_empty() {
                    let at = spans[rng.random_range(0..spans.len())];
                    let v = EXTREME_OPTION_VALUES[rng.random_range(0..EXTREME_OPTION_VALUES.len())];
                    replace(&mut input, at, v.as_bytes());
                    mutations.push("option-value");
                }
            }
            let case = s.case_dir.clone().unwrap_or_default();
            let v = vec![
                "fit".to_string(),
                case.join("before.raw").display().to_string(),
                format!("--train=ark:{}", case.join("egs.ark").display()),
                "--config".into(),
                "IN".into(),
                "--out".into(),
                "DIR".into(),
                "--max-minibatches=3".into(),
            ];
            let mut again = v.clone();
            again.pop();
            again.extend(strs(&["--resume", "--max-minibatches=4"]));
            ("fit.toml", v, vec![Step::Resume(again)], "fit --config")
        }
        Kind::TrainModel => {
            let egs = case_file("egs.ark").unwrap_or_default();
            (
                "before.raw",
                strs(&["train", "IN", &format!("ark:{egs}"), "OUT"]),
                vec![Step::ReadBack(strs(&["copy", binary, "OUT", "OUT2"]))],
                "train",
            )
        }
        Kind::Feats | Kind::Egs => {
            let name = if s.path.extension().is_some_and(|e| e == "txt") {
                "input.txt"
            } else {
                "input.ark"
            };
            if s.kind == Kind::Egs && rng.random_bool(0.6) {
                // The egs tools on a damaged archive; what they write must read back.
                let (v, command) = match rng.random_range(0..4) {
                    0 => {
                        let sizes = ["1", "3", "2,4", "1:3", "9=2/10=1:3"];
                        let mb = sizes[rng.random_range(0..sizes.len())];
                        let v = vec![
                            "merge-egs".to_string(),
                            format!("--minibatch-size={mb}"),
                            format!("--compress={}", rng.random_bool(0.5)),
                        ];
                        (v, "merge-egs")
                    }
                    1 => {
                        let v = vec![
                            "shuffle-egs".to_string(),
                            format!("--srand={}", rng.random_range(0..5)),
                            format!("--buffer-size={}", rng.random_range(0..4)),
                        ];
                        (v, "shuffle-egs")
                    }
                    _ => {
                        let frames = ["", "0", "1", "random"];
                        let mut v = vec![
                            "copy-egs".to_string(),
                            format!("--srand={}", rng.random_range(0..5)),
                            format!("--left-context={}", rng.random_range(-1..3)),
                            format!("--right-context={}", rng.random_range(-1..3)),
                        ];
                        let f = frames[rng.random_range(0..frames.len())];
                        if !f.is_empty() {
                            v.push(format!("--frame={f}"));
                        }
                        (v, "copy-egs")
                    }
                };
                let mut v = v;
                v.extend(strs(&["ark:IN", "ark:OUT"]));
                (
                    name,
                    v,
                    vec![Step::ReadBack(strs(&["copy-egs", "ark:OUT", "ark,t:OUT2"]))],
                    command,
                )
            } else if !model.is_empty() && rng.random_bool(0.4) {
                (name, compute(&model, "IN"), vec![], "compute")
            } else {
                let mut v = strs(&["copy-feats"]);
                if rng.random_bool(0.5) {
                    v.push("--compress=true".into());
                    let m = rng.random_range(1..=7);
                    v.push(format!("--compression-method={m}"));
                }
                v.extend(strs(&["ark:IN", "ark:OUT"]));
                (
                    name,
                    v,
                    vec![Step::ReadBack(strs(&[
                        "copy-feats",
                        "ark:OUT",
                        "ark,t:OUT2",
                    ]))],
                    "copy-feats",
                )
            }
        }
    };
    Plan {
        input_name,
        input,
        mutations,
        main,
        round_trip,
        command,
        refuse_unless,
    }
}

// ---------------------------------------------------------------- running

struct RunResult {
    outcome: Outcome,
    stderr: String,
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"-_=./:,+".contains(&c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn resolve(args: &[String], dir: &Path, input_name: &str) -> Vec<String> {
    // Placeholders are whole arguments or follow an rspecifier/wspecifier prefix (`ark,t:`).
    let sub = |a: &str| {
        let (prefix, name) = a.rsplit_once(':').unwrap_or(("", a));
        let path = match name {
            "IN" => dir.join(input_name),
            "OUT" => dir.join("out"),
            "OUT2" => dir.join("out2"),
            "DIR" => dir.to_path_buf(),
            _ => return a.to_string(),
        };
        let sep = if prefix.is_empty() { "" } else { ":" };
        format!("{prefix}{sep}{}", path.display())
    };
    args.iter().map(|a| sub(a)).collect()
}

/// The one-line shell command that reproduces a run.
fn repro_line(o: &Opts, compnet: &Path, args: &[String]) -> String {
    let argv: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
    format!(
        "(ulimit -v {}; COMPNET_MAX_MEMORY={}M timeout {} {} {})",
        o.mem_limit_mb * 1024,
        o.alloc_limit_mb,
        o.time_limit,
        shell_quote(&compnet.display().to_string()),
        argv.join(" ")
    )
}

fn run_child(o: &Opts, compnet: &Path, args: &[String]) -> RunResult {
    let mut child = match Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {} && exec \"$0\" \"$@\"",
            o.mem_limit_mb * 1024
        ))
        .arg(compnet)
        .args(args)
        .env("COMPNET_MAX_MEMORY", format!("{}M", o.alloc_limit_mb))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return RunResult {
                outcome: Outcome::Abort,
                stderr: format!("fuzzer: cannot start {}: {e}", compnet.display()),
            }
        }
    };
    // Read stderr on a thread so a chatty child never blocks on a full pipe.
    let mut pipe = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = pipe.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs_f64(o.time_limit);
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let stderr = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    let outcome = if timed_out {
        Outcome::Timeout
    } else if stderr.contains("memory allocation of") {
        Outcome::OverLimit
    } else if stderr.contains("panicked") {
        Outcome::Panic
    } else {
        match status {
            None => Outcome::Abort,
            Some(st) if st.signal().is_some() => Outcome::Abort,
            Some(st) if st.success() => Outcome::Success,
            Some(_)
                if stderr
                    .lines()
                    .any(|l| l.starts_with("compnet: error: ") || l.starts_with("error: ")) =>
            {
                Outcome::CleanError
            }
            Some(_) => Outcome::UnclearError,
        }
    };
    RunResult { outcome, stderr }
}

struct CaseResult {
    outcome: Outcome,
    command: &'static str,
    detail: String,
    repro: String,
}

fn run_case(o: &Opts, compnet: &Path, corpus: &[Seed], case: u64, dir: &Path) -> CaseResult {
    let plan = plan_case(o.seed, case, corpus);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create the case folder");
    std::fs::write(dir.join(plan.input_name), &plan.input).expect("write the damaged input");
    if plan.refuse_unless.is_some() {
        // The run may replace its input (a checkpoint): keep a copy for the repro.
        let _ = std::fs::write(dir.join("damaged-input"), &plan.input);
    }
    let main = resolve(&plan.main, dir, plan.input_name);
    let r = run_child(o, compnet, &main);
    let mut result = CaseResult {
        outcome: r.outcome,
        command: plan.command,
        detail: format!("mutations {:?}\n{}", plan.mutations, r.stderr),
        repro: repro_line(o, compnet, &main),
    };
    if plan
        .refuse_unless
        .as_ref()
        .is_some_and(|b| *b != plan.input)
    {
        if r.outcome == Outcome::Success {
            result.outcome = Outcome::AcceptedDamage;
        } else if std::fs::read(dir.join(plan.input_name)).ok().as_ref() != Some(&plan.input) {
            result.outcome = Outcome::ChangedInput;
        }
        return result;
    }
    if r.outcome != Outcome::Success {
        return result;
    }
    for step in &plan.round_trip {
        let (args, must_succeed) = match step {
            Step::ReadBack(a) => (a, true),
            Step::Then(a) => (a, false),
            Step::Resume(a) => (a, false),
        };
        let args = resolve(args, dir, plan.input_name);
        let r = run_child(o, compnet, &args);
        result.repro += &format!(" && {}", repro_line(o, compnet, &args));
        result.detail += &format!("\nthen {args:?}:\n{}", r.stderr);
        let about_checkpoint = matches!(step, Step::Resume(_))
            && r.stderr
                .lines()
                .any(|l| l.starts_with("compnet: error: ") && l.contains("checkpoint.ckpt:"));
        let outcome = match r.outcome {
            // An error reading back what compnet itself wrote is a broken round trip; anything
            // worse keeps its own class.
            Outcome::CleanError | Outcome::UnclearError if must_succeed || about_checkpoint => {
                Outcome::BrokenRoundTrip
            }
            other => other,
        };
        if outcome != Outcome::Success {
            result.outcome = outcome;
            return result;
        }
    }
    result
}

type Counts = BTreeMap<(&'static str, &'static str), u64>;

fn main() {
    let o = Opts::parse();
    let compnet = o.compnet.clone().unwrap_or_else(|| {
        let me = std::env::current_exe().expect("own path");
        me.with_file_name("compnet")
    });
    if !compnet.exists() {
        eprintln!("compnet-fuzz: no compnet binary at {}", compnet.display());
        std::process::exit(2);
    }
    let data = o.data.clone().unwrap_or_else(|| {
        std::env::var_os("COMPNET_KALDI_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("tests/data/kaldi"))
    });
    let mut corpus = load_corpus(&data);
    if corpus.is_empty() {
        eprintln!(
            "compnet-fuzz: no golden files under {} (set --data or COMPNET_KALDI_DATA)",
            data.display()
        );
        std::process::exit(2);
    }
    std::fs::create_dir_all(&o.out).expect("create the output folder");
    let work = o.out.join("work");
    std::fs::create_dir_all(&work).expect("create the work folder");
    corpus.extend(fit_seeds(&data, &compnet, &work));

    if let Some(case) = o.case {
        let dir = work.join(format!("replay-{case}"));
        let r = run_case(&o, &compnet, &corpus, case, &dir);
        println!("case {case}: {} ({})", r.outcome.name(), r.command);
        println!("{}", r.repro);
        println!("{}", r.detail);
        std::process::exit(i32::from(r.outcome.is_failure()));
    }

    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let counts: Arc<Mutex<Counts>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let o = Arc::new(o);
    let corpus = Arc::new(corpus);
    let workers: Vec<_> = (0..o.jobs.max(1))
        .map(|w| {
            let (o, corpus, next) = (o.clone(), corpus.clone(), next.clone());
            let (counts, failures, compnet) = (counts.clone(), failures.clone(), compnet.clone());
            let dir = work.join(format!("worker-{w}"));
            std::thread::spawn(move || loop {
                if start.elapsed().as_secs_f64() >= o.duration {
                    break;
                }
                let case = next.fetch_add(1, Ordering::SeqCst);
                if o.max_cases.is_some_and(|m| case >= m) {
                    break;
                }
                let r = run_case(&o, &compnet, &corpus, case, &dir);
                *counts
                    .lock()
                    .unwrap()
                    .entry((r.command, r.outcome.name()))
                    .or_default() += 1;
                if r.outcome.is_failure() {
                    let saved = o.out.join(format!("{}-{case}", r.outcome.name()));
                    let _ = std::fs::remove_dir_all(&saved);
                    let _ = std::fs::rename(&dir, &saved);
                    let repro = r
                        .repro
                        .replace(&dir.display().to_string(), &saved.display().to_string());
                    let line = format!(
                        "{} case {case} ({}): compnet-fuzz --seed {} --case {case}  # or: {repro}",
                        r.outcome.name(),
                        r.command,
                        o.seed,
                    );
                    let _ = std::fs::write(saved.join("repro.txt"), format!("{line}\n"));
                    let _ = std::fs::write(saved.join("detail.txt"), &r.detail);
                    eprintln!("{line}");
                    failures.lock().unwrap().push(line);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("fuzz worker");
    }
    let _ = std::fs::remove_dir_all(&work);

    let counts = counts.lock().unwrap();
    let failures = failures.lock().unwrap();
    let total: u64 = counts.values().sum();
    let mut by_class: BTreeMap<&str, u64> = BTreeMap::new();
    for ((_, class), n) in counts.iter() {
        *by_class.entry(class).or_default() += n;
    }
    let mut summary = format!(
        "compnet-fuzz --duration {} --seed {} --jobs {}: {} cases in {:.1} s\n",
        o.duration,
        o.seed,
        o.jobs,
        total,
        start.elapsed().as_secs_f64()
    );
    for (class, n) in &by_class {
        summary += &format!("  {class}: {n}\n");
    }
    summary += "per command:\n";
    for ((cmd, class), n) in counts.iter() {
        summary += &format!("  {cmd} {class}: {n}\n");
    }
    summary += &format!("failures: {}\n", failures.len());
    print!("{summary}");
    let _ = std::fs::write(o.out.join("summary.txt"), &summary);
    std::process::exit(i32::from(!failures.is_empty()));
}
