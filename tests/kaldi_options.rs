//! Kaldi's command-line conventions on every command: each option the matching Kaldi binary
//! registers (read from its `--help` output in tests/data/kaldi/usage/) is accepted at Kaldi's
//! default; `--config` files, `--print-args`, `--verbose`, `--help`; options that cannot apply
//! warn, and those whose non-default value compnet cannot honour are refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

/// Kaldi tool → (compnet subcommand, positional arguments that satisfy its parser).
const TOOLS: &[(&str, &str, &[&str])] = &[
    ("nnet3-init", "init", &["a.config", "b.raw"]),
    ("nnet3-info", "info", &["a.raw"]),
    ("nnet3-copy", "copy", &["a.raw", "b.raw"]),
    ("copy-feats", "copy-feats", &["ark:a.ark", "ark:b.ark"]),
    (
        "nnet3-compute",
        "compute",
        &["a.raw", "ark:a.ark", "ark:b.ark"],
    ),
    (
        "nnet3-get-egs",
        "get-egs",
        &["ark:a.ark", "ark:b.ark", "ark:c.ark"],
    ),
    (
        "nnet3-get-egs-dense-targets",
        "get-egs-dense-targets",
        &["ark:a.ark", "ark:b.ark", "ark:c.ark"],
    ),
    ("nnet3-merge-egs", "merge-egs", &["ark:a.egs", "ark:b.egs"]),
    (
        "nnet3-shuffle-egs",
        "shuffle-egs",
        &["ark:a.egs", "ark:b.egs"],
    ),
    ("nnet3-copy-egs", "copy-egs", &["ark:a.egs", "ark:b.egs"]),
    ("nnet3-train", "train", &["a.raw", "ark:a.egs", "b.raw"]),
    (
        "nnet3-compute-prob",
        "compute-prob",
        &["a.raw", "ark:a.egs"],
    ),
    ("nnet3-average", "average", &["a.raw", "b.raw", "c.raw"]),
    (
        "nnet3-combine",
        "combine",
        &["a.raw", "b.raw", "ark:a.egs", "c.raw"],
    ),
    ("nnet3-am-init", "am-init", &["a.mdl", "a.raw", "b.mdl"]),
    ("nnet3-am-copy", "am-copy", &["a.mdl", "b.mdl"]),
    ("nnet3-am-info", "am-info", &["a.mdl"]),
    (
        "nnet3-am-adjust-priors",
        "am-adjust-priors",
        &["a.mdl", "a.vec", "b.mdl"],
    ),
    (
        "nnet3-am-train-transitions",
        "am-train-transitions",
        &["a.mdl", "ark:a.ali", "b.mdl"],
    ),
    (
        "ali-to-pdf",
        "ali-to-pdf",
        &["a.mdl", "ark:a.ali", "ark:b.ark"],
    ),
    (
        "nnet3-acc-lda-stats",
        "acc-lda-stats",
        &["a.raw", "ark:a.egs", "a.acc"],
    ),
    (
        "nnet-get-feature-transform",
        "get-feature-transform",
        &["a.mat", "a.acc"],
    ),
    (
        "nnet3-xvector-compute",
        "xvector-compute",
        &["a.raw", "ark:a.ark", "ark:b.ark"],
    ),
];

/// One option of a Kaldi usage message: name, type and default as printed.
#[derive(Debug)]
struct KaldiOption {
    name: String,
    kind: String,
    default: String,
}

/// The options of a Kaldi `--help` output. An option's description may continue on the next
/// lines; its last line ends in `(type, default = value)`.
fn kaldi_options(tool: &str) -> Vec<KaldiOption> {
    let path = Path::new(DATA).join("usage").join(format!("{tool}.txt"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut entries: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("  --") {
            entries.push(line.to_string());
        } else if let Some(last) = entries.last_mut() {
            if !last.trim_end().ends_with(')') && !line.trim().is_empty() {
                last.push(' ');
                last.push_str(line.trim());
            }
        }
    }
    let out: Vec<KaldiOption> = entries
        .iter()
        .map(|e| {
            let name = e.trim_start()[2..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            let open = e
                .rfind('(')
                .unwrap_or_else(|| panic!("{tool}: no type in '{e}'"));
            let inner = e[open + 1..].trim_end().trim_end_matches(')');
            let (kind, default) = inner
                .split_once(", default = ")
                .unwrap_or_else(|| panic!("{tool}: no default in '{e}'"));
            KaldiOption {
                name,
                kind: kind.to_string(),
                default: default.trim_matches('"').to_string(),
            }
        })
        .collect();
    assert!(out.len() >= 4, "{tool}: only {} options parsed", out.len());
    out
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_kaldi_option_is_accepted_at_its_default() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (tool, sub, positional) in TOOLS {
        for opt in kaldi_options(tool) {
            if opt.name == "help" || opt.name == "config" {
                continue; // exercised below: they do not take a default value
            }
            let mut args = strings(&["compnet", sub]);
            args.push(format!("--{}={}", opt.name, opt.default));
            args.extend(strings(positional));
            checked += 1;
            if let Err(e) = compnet::cli::check_command_line(args.clone()) {
                failures.push(format!("{tool} --{} ({}): {e}", opt.name, opt.kind));
            }
        }
    }
    assert!(checked > 190, "only {checked} options checked");
    assert!(
        failures.is_empty(),
        "{} Kaldi options not accepted:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn an_unknown_option_is_still_an_error() {
    let args = strings(&["compnet", "compute", "--no-such-option=1", "a", "b", "c"]);
    assert!(compnet::cli::check_command_line(args).is_err());
}

fn compnet(args: &[&str]) -> Output {
    compnet::testing::cli::run(env!("CARGO_BIN_EXE_compnet"), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn case(name: &str, file: &str) -> String {
    Path::new(DATA)
        .join("cases")
        .join(name)
        .join(file)
        .to_str()
        .unwrap()
        .to_string()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "compnet-kaldi-options-{tag}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The same `compute` with every option of `nnet3-compute` spelled out at Kaldi's default
/// (as a Kaldi script might) writes the same output as with none.
#[test]
fn compute_with_all_kaldi_defaults_spelled_out_is_unchanged() {
    let model = case("seed", "model.raw");
    let feats = format!("ark:{}", case("seed", "feats.txt"));
    let plain = compnet(&["compute", &model, &feats, "ark,t:-"]);
    assert!(plain.status.success());
    let mut args = vec!["compute".to_string()];
    for opt in kaldi_options("nnet3-compute") {
        if ["help", "config", "use-gpu"].contains(&opt.name.as_str()) {
            continue;
        }
        args.push(format!("--{}={}", opt.name, opt.default));
    }
    args.extend([model, feats, "ark,t:-".into()]);
    let all = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&all.stderr);
    assert!(all.status.success(), "{err}");
    assert_eq!(text(&plain.stdout), text(&all.stdout));
    // Options that cannot apply say so.
    assert!(err.contains("--acoustic-scale is accepted for Kaldi's scripts and has no effect"));
}

#[test]
fn a_non_default_value_that_cannot_be_honoured_is_refused() {
    let model = case("seed", "model.raw");
    let feats = format!("ark:{}", case("seed", "feats.txt"));
    let out = compnet(&[
        "compute",
        "--optimization.consolidate-model-update=false",
        &model,
        &feats,
        "ark,t:-",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--optimization.consolidate-model-update=false"),
        "{err}"
    );
    assert!(err.contains("only Kaldi's default"), "{err}");
}

#[test]
fn config_files_give_options_and_the_command_line_wins() {
    let dir = temp_dir("config");
    let model = case("seed", "model.raw");
    let feats = format!("ark:{}", case("seed", "feats.txt"));
    let conf = dir.join("compute.conf");
    std::fs::write(
        &conf,
        "# as a Kaldi recipe writes it\n--apply-exp=true\n--use-priors=false\n",
    )
    .unwrap();
    let conf_opt = format!("--config={}", conf.display());
    let plain = compnet(&["compute", &model, &feats, "ark,t:-"]);
    let exp = compnet(&["compute", "--apply-exp=true", &model, &feats, "ark,t:-"]);
    assert_ne!(text(&plain.stdout), text(&exp.stdout));
    let from_file = compnet(&["compute", &conf_opt, &model, &feats, "ark,t:-"]);
    assert!(from_file.status.success());
    assert_eq!(text(&from_file.stdout), text(&exp.stdout));
    // The command line overrides the file even when it comes first.
    let overridden = compnet(&[
        "compute",
        "--apply-exp=false",
        &conf_opt,
        &model,
        &feats,
        "ark,t:-",
    ]);
    assert_eq!(text(&overridden.stdout), text(&plain.stdout));
    // A malformed line is reported with file and line.
    std::fs::write(&conf, "--apply-exp=true\napply-exp\n").unwrap();
    let bad = compnet(&["compute", &conf_opt, &model, &feats, "ark,t:-"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("compute.conf:2:"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn print_args_echoes_the_command_line_unless_turned_off() {
    let model = case("seed", "model.raw");
    let out = compnet(&["info", &model]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().next(),
        Some(format!("{} info {model}", env!("CARGO_BIN_EXE_compnet")).as_str())
    );
    let quiet = compnet(&["info", "--print-args=false", "--verbose=2", &model]);
    assert!(quiet.status.success());
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    assert_eq!(text(&quiet.stdout), text(&out.stdout));
}

#[test]
fn booleans_bare_or_spaced() {
    let model = case("seed", "model.raw");
    let feats = format!("ark:{}", case("seed", "feats.txt"));
    let eq = compnet(&["compute", "--apply-exp=true", &model, &feats, "ark,t:-"]);
    let bare = compnet(&["compute", "--apply-exp", &model, &feats, "ark,t:-"]);
    let spaced = compnet(&["compute", "--apply-exp", "true", &model, &feats, "ark,t:-"]);
    assert!(eq.status.success() && bare.status.success() && spaced.status.success());
    assert_eq!(text(&eq.stdout), text(&bare.stdout));
    assert_eq!(text(&eq.stdout), text(&spaced.stdout));
}

#[test]
fn help_names_the_positional_arguments_and_gives_an_example() {
    for (tool, sub, _) in TOOLS {
        let out = compnet(&[sub, "--help"]);
        assert!(out.status.success(), "{sub} --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("Usage: compnet {sub} ")) && text.contains(" <"),
            "{sub} (Kaldi {tool}) --help has no usage line naming its arguments:\n{text}"
        );
        assert!(
            text.contains("e.g.: compnet"),
            "{sub} --help has no example:\n{text}"
        );
        assert!(
            text.contains("--config=<file>"),
            "{sub} --help lacks the standard options"
        );
    }
}

/// `nnet3-compute --utt2spk`: the iVectors of --ivectors are looked up by speaker.
#[test]
fn utt2spk_reads_ivectors_per_speaker() {
    let dir = temp_dir("utt2spk");
    let model = case("tdnn-splice-ivector", "model.raw");
    let feats = format!("ark:{}", case("tdnn-splice-ivector", "feats.txt"));
    // One iVector: the first row of utt1's online iVectors.
    let online = std::fs::read_to_string(case("tdnn-splice-ivector", "ivectors.txt")).unwrap();
    let first_row: Vec<&str> = online
        .split('[')
        .nth(1)
        .unwrap()
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap()
        .trim_end_matches(']')
        .split_whitespace()
        .collect();
    assert_eq!(first_row.len(), 10);
    let v = format!("[ {} ]", first_row.join(" "));
    let per_utt = dir.join("utt_ivectors.txt");
    std::fs::write(&per_utt, format!("utt1 {v}\nutt2 {v}\nutt3 {v}\n")).unwrap();
    let per_spk = dir.join("spk_ivectors.txt");
    std::fs::write(&per_spk, format!("spkA {v}\n")).unwrap();
    let utt2spk = dir.join("utt2spk");
    std::fs::write(&utt2spk, "utt1 spkA\nutt2 spkA\nutt3 spkA\n").unwrap();
    let by_utt = compnet(&[
        "compute",
        &format!("--ivectors=ark:{}", per_utt.display()),
        &model,
        &feats,
        "ark,t:-",
    ]);
    assert!(by_utt.status.success(), "{}", text(&by_utt.stderr));
    let by_spk = compnet(&[
        "compute",
        &format!("--ivectors=ark:{}", per_spk.display()),
        &format!("--utt2spk=ark:{}", utt2spk.display()),
        &model,
        &feats,
        "ark,t:-",
    ]);
    assert!(by_spk.status.success(), "{}", text(&by_spk.stderr));
    assert_eq!(text(&by_utt.stdout), text(&by_spk.stdout));
    assert_eq!(text(&by_spk.stdout).matches('[').count(), 3);
    // Without the map the per-speaker archive has no entry per utterance.
    let no_map = compnet(&[
        "compute",
        &format!("--ivectors=ark:{}", per_spk.display()),
        &model,
        &feats,
        "ark,t:-",
    ]);
    assert!(text(&no_map.stderr).contains("no iVector available for utterance utt1"));
    // --utt2spk alone is a usage error.
    let alone = compnet(&[
        "compute",
        &format!("--utt2spk=ark:{}", utt2spk.display()),
        &model,
        &feats,
        "ark,t:-",
    ]);
    assert!(!alone.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
