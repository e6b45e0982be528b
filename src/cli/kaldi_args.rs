//! Kaldi's command-line conventions, applied to the arguments before clap sees them.
//!
//! Kaldi's `ParseOptions` gives every tool the same habits, and Kaldi's scripts rely on them:
//! - `--config=<file>` reads options from a file (one `--name=value` per line, `#` comments;
//!   may be repeated); options on the command line override the file's, whatever their order
//!   (a command that declares its own `--config`, like `fit` with its TOML file, reads it
//!   itself);
//! - the standard options `--verbose=N`, `--print-args` (on by default: the command line is
//!   echoed to stderr, so a log file starts with the command that wrote it) and `--help`;
//! - a bare boolean (`--compress`) means true, and `--apply-exp true` is `--apply-exp=true`;
//! - an option given twice: the last one wins (clap's `args_override_self`, set in `mod.rs`);
//! - every option the matching Kaldi binary registers is accepted. Those with no meaning in
//!   compnet (GPU memory, Kaldi optimizer passes compnet does not have) are listed in
//!   [`compat_options`]: they are checked for a well-formed value and removed with a warning,
//!   or, where ignoring a non-default value would silently change the result, rejected with a
//!   message that says so.

use crate::error::{Error, Result};

/// The standard options every tool takes, besides `--config` and `--help`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandardOptions {
    /// `--verbose`: Kaldi's verbose level (0 = normal).
    pub verbose: i32,
    /// `--print-args`: echo the command line to stderr (Kaldi's default: true).
    pub print_args: bool,
}

impl Default for StandardOptions {
    fn default() -> Self {
        StandardOptions {
            verbose: 0,
            print_args: true,
        }
    }
}

pub use crate::log::{set_verbose_level, verbose_level};

/// The value type of an option, as Kaldi's usage message names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Bool,
    Int,
    Float,
    Str,
}

/// What compnet does with a Kaldi option it has no use for.
#[derive(Clone, Copy, Debug)]
pub enum Treatment {
    /// Accepted with a warning that gives the reason.
    NoEffect(&'static str),
    /// Accepted at Kaldi's default value (given as it would be written); any other value is an
    /// error giving the reason, because ignoring it would change the result.
    OnlyDefault(&'static str, &'static str),
}

/// A Kaldi option that compnet accepts without implementing.
#[derive(Clone, Copy, Debug)]
pub struct CompatOption {
    pub name: &'static str,
    pub kind: ValueKind,
    pub treatment: Treatment,
}

const fn no_effect(name: &'static str, kind: ValueKind, why: &'static str) -> CompatOption {
    CompatOption {
        name,
        kind,
        treatment: Treatment::NoEffect(why),
    }
}

const fn only_default(
    name: &'static str,
    kind: ValueKind,
    default: &'static str,
    why: &'static str,
) -> CompatOption {
    CompatOption {
        name,
        kind,
        treatment: Treatment::OnlyDefault(default, why),
    }
}

use ValueKind::{Bool, Float, Int, Str};

/// Parses a boolean option value the way Kaldi's command lines do: `true`/`t`/`1`/empty or
/// `false`/`f`/`0`, in any case.
pub fn parse_kaldi_bool(s: &str) -> std::result::Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "t" | "1" | "" => Ok(true),
        "false" | "f" | "0" => Ok(false),
        _ => Err(format!("expected true or false, got '{s}'")),
    }
}

/// A Kaldi boolean option, as `#[arg(long, kaldi_bool = "true")]` (clap's derive calls
/// the builder method an attribute names): `--name` alone is true, `--name=false`, values
/// as [`parse_kaldi_bool`] reads them, and `default` when it is not given.
pub trait KaldiBool {
    fn kaldi_bool(self, default: &'static str) -> Self;
}

impl KaldiBool for clap::Arg {
    fn kaldi_bool(self, default: &'static str) -> Self {
        self.value_parser(parse_kaldi_bool)
            .num_args(0..=1)
            .default_value(default)
            .default_missing_value("true")
            .require_equals(true)
            .action(clap::ArgAction::Set)
    }
}

const NO_PASS: &str = "compnet's optimizer has no such pass; results are the same";
const NO_DERIV: &str = "nnet3-compute computes no derivatives, so there is nothing to limit";

/// The derivative-time limits, real options where derivatives are computed
/// (`cli::compile::OptimizationArgs`); `compute` has none to limit.
const DERIV_TIME_NO_EFFECT: &[CompatOption] = &[
    no_effect("optimization.max-deriv-time", Int, NO_DERIV),
    no_effect("optimization.max-deriv-time-relative", Int, NO_DERIV),
    no_effect("optimization.min-deriv-time", Int, NO_DERIV),
];

/// Kaldi's `--optimization.*` options that compnet's optimizer does not have (those it has are
/// real options: `cli::compile::OptimizationArgs`).
const OPTIMIZATION: &[CompatOption] = &[
    no_effect("optimization.allow-left-merge", Bool, NO_PASS),
    no_effect("optimization.allow-right-merge", Bool, NO_PASS),
    only_default(
        "optimization.consolidate-model-update",
        Bool,
        "true",
        "compnet always consolidates the model update of recurrent layers (natural gradient \
         sees all time steps together, as in Kaldi's default)",
    ),
];

const DEBUG: &[CompatOption] = &[
    no_effect(
        "computation.debug",
        Bool,
        "use `compnet compile` to print a computation",
    ),
    no_effect(
        "debug-computation",
        Bool,
        "use `compnet compile` to print a computation",
    ),
];

const CUDA: &[CompatOption] = &[
    no_effect(
        "cuda-cache-memory",
        Bool,
        "compnet runs on the CPU; there is no GPU memory to cache",
    ),
    no_effect(
        "cuda-memory-proportion",
        Float,
        "compnet runs on the CPU; there is no GPU memory to reserve",
    ),
];

const COMPUTE: &[CompatOption] = &[no_effect(
    "acoustic-scale",
    Float,
    "it is a no-op in nnet3-compute as well",
)];

const COMPUTE_PROB: &[CompatOption] = &[no_effect(
    "collapse-model",
    Bool,
    "compnet evaluates the model as it is; Kaldi's collapsing folds BatchNorm and \
         dropout into neighbouring layers, which changes only rounding",
)];

const TRAIN: &[CompatOption] = &[no_effect(
    "binary-write-cache",
    Bool,
    "the compiled-computation cache lives in memory only (see --write-cache)",
)];

const COPY_FEATS: &[CompatOption] = &[
    only_default("htk-in", Bool, "false", "HTK input is not supported"),
    only_default("sphinx-in", Bool, "false", "Sphinx input is not supported"),
];

const MERGE_EGS: &[CompatOption] = &[only_default(
    "multilingual-eg",
    Bool,
    "false",
    "multilingual examples are not implemented yet",
)];

const AVERAGE: &[CompatOption] = &[no_effect(
    "num-threads",
    Int,
    "averaging is a single pass over the parameters",
)];

const XVECTOR: &[CompatOption] = &[
    no_effect(
        "frames-per-chunk",
        Int,
        "nnet3-xvector-compute chunks by --chunk-size",
    ),
    no_effect(
        "extra-left-context",
        Int,
        "nnet3-xvector-compute does not use it",
    ),
    no_effect(
        "extra-right-context",
        Int,
        "nnet3-xvector-compute does not use it",
    ),
    no_effect(
        "extra-left-context-initial",
        Int,
        "nnet3-xvector-compute does not use it",
    ),
    no_effect(
        "extra-right-context-final",
        Int,
        "nnet3-xvector-compute does not use it",
    ),
    no_effect(
        "frame-subsampling-factor",
        Int,
        "nnet3-xvector-compute does not use it",
    ),
    no_effect(
        "cached-compiler-in",
        Str,
        "compiled computations are cached in memory only",
    ),
    no_effect(
        "cached-compiler-out",
        Str,
        "compiled computations are cached in memory only",
    ),
];

/// The Kaldi options subcommand `sub` accepts without implementing.
pub fn compat_options(sub: &str) -> Vec<&'static CompatOption> {
    let groups: &[&[CompatOption]] = match sub {
        "compute" => &[COMPUTE, OPTIMIZATION, DERIV_TIME_NO_EFFECT, DEBUG],
        "compute-prob" => &[COMPUTE_PROB, OPTIMIZATION, DEBUG],
        "train" => &[TRAIN, OPTIMIZATION, &DEBUG[..1], CUDA],
        "copy-feats" => &[COPY_FEATS],
        "merge-egs" => &[MERGE_EGS],
        "average" => &[AVERAGE],
        "xvector-compute" => &[COMPUTE, OPTIMIZATION, DERIV_TIME_NO_EFFECT, DEBUG, XVECTOR],
        _ => &[],
    };
    groups.iter().flat_map(|g| g.iter()).collect()
}

/// Whether `value` is a well-formed value of `kind` (Kaldi's parsing: booleans are
/// true/false/t/f/1/0 or empty).
fn well_formed(kind: ValueKind, value: &str) -> bool {
    match kind {
        Bool => crate::cli::kaldi_args::parse_kaldi_bool(value).is_ok(),
        Int => value.trim().parse::<i32>().is_ok(),
        Float => value.trim().parse::<f32>().is_ok(),
        Str => true,
    }
}

/// Whether two spellings of a value of `kind` mean the same.
fn same_value(kind: ValueKind, a: &str, b: &str) -> bool {
    match kind {
        Bool => {
            crate::cli::kaldi_args::parse_kaldi_bool(a).ok()
                == crate::cli::kaldi_args::parse_kaldi_bool(b).ok()
        }
        Int => a.trim().parse::<i64>().ok() == b.trim().parse::<i64>().ok(),
        Float => a.trim().parse::<f64>().ok() == b.trim().parse::<f64>().ok(),
        Str => a == b,
    }
}

/// The arguments after Kaldi's conventions are applied, ready for clap.
#[derive(Debug)]
pub struct Prepared {
    pub args: Vec<String>,
    pub standard: StandardOptions,
    /// Warnings about accepted options without effect, one per option.
    pub warnings: Vec<String>,
}

/// Splits `--name=value` into ("name", Some("value")) and `--name` into ("name", None).
fn split_option(arg: &str) -> Option<(&str, Option<&str>)> {
    let body = arg.strip_prefix("--")?;
    if body.is_empty() {
        return None;
    }
    Some(match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    })
}

/// Reads the options of a `--config` file: one option per line, `#` to the end of a line is a
/// comment, blank lines are skipped (Kaldi's `ReadConfigFile`).
fn read_config_file(path: &str) -> Result<Vec<(String, usize)>> {
    let text = crate::cli::init::read_config_text(path)?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if !line.starts_with("--") || line.len() < 3 {
            return Err(Error::Usage(format!(
                "{path}:{}: expected an option like --name=value, found '{line}'",
                i + 1
            )));
        }
        if line.split_whitespace().count() > 1 && !line.contains('=') {
            return Err(Error::Usage(format!(
                "{path}:{}: expected one option per line, like --name=value, found '{line}'",
                i + 1
            )));
        }
        out.push((line.to_string(), i + 1));
    }
    Ok(out)
}

/// Applies Kaldi's conventions to `args` (program name, subcommand, its arguments) for the
/// subcommand as clap describes it in `cmd`.
pub fn prepare(args: Vec<String>, cmd: &clap::Command) -> Result<Prepared> {
    let mut standard = StandardOptions::default();
    let mut warnings = Vec::new();
    if args.len() < 2 {
        return Ok(Prepared {
            args,
            standard,
            warnings,
        });
    }
    let sub_name = args[1].clone();
    let Some(sub) = cmd.find_subcommand(&sub_name) else {
        // Not a subcommand (or `--help`, `--version`): clap explains.
        return Ok(Prepared {
            args,
            standard,
            warnings,
        });
    };
    let compat = compat_options(&sub_name);
    // A command with a `--config` of its own (fit's TOML file) reads it itself.
    let own_config = sub.get_arguments().any(|a| a.get_long() == Some("config"));
    // Long options of the subcommand that take an optional value (our booleans).
    let optional_value = |name: &str| {
        sub.get_arguments().any(|a| {
            a.get_long() == Some(name) && a.get_num_args().is_some_and(|r| r.min_values() == 0)
        })
    };

    // Options from --config files come first, so that the command line overrides them.
    let mut from_files: Vec<(String, String)> = Vec::new(); // (option, where)
    let mut rest: Vec<(String, String)> = Vec::new();
    let mut it = args[2..].iter().peekable();
    let mut positional_only = false;
    while let Some(arg) = it.next() {
        if positional_only {
            rest.push((arg.clone(), "the command line".into()));
            continue;
        }
        if arg == "--" {
            positional_only = true;
            rest.push((arg.clone(), "the command line".into()));
            continue;
        }
        match split_option(arg) {
            Some(("config", value)) if !own_config => {
                let path = match value {
                    Some(p) => p.to_string(),
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| Error::Usage("--config needs a file name".into()))?,
                };
                for (opt, line) in read_config_file(&path)? {
                    if matches!(split_option(&opt), Some(("config", _))) {
                        return Err(Error::Usage(format!(
                            "{path}:{line}: --config inside a config file is not allowed"
                        )));
                    }
                    from_files.push((opt, format!("{path}:{line}")));
                }
            }
            _ => rest.push((arg.clone(), "the command line".into())),
        }
    }

    let mut out = vec![args[0].clone(), sub_name.clone()];
    let mut warned: Vec<&str> = Vec::new();
    let all: Vec<(String, String)> = from_files.into_iter().chain(rest).collect();
    let mut i = 0;
    let mut positional_only = false;
    while i < all.len() {
        let (arg, origin) = (&all[i].0, &all[i].1);
        i += 1;
        if positional_only || arg == "--" {
            positional_only = true;
            out.push(arg.clone());
            continue;
        }
        let Some((name, value)) = split_option(arg) else {
            out.push(arg.clone());
            continue;
        };
        // A value given as the next argument: `--name value`.
        let next_is_value = |i: usize| all.get(i).filter(|(a, _)| !a.starts_with("--"));
        match name {
            "verbose" | "print-args" => {
                let (v, used_next) = match value {
                    Some(v) => (v.to_string(), false),
                    None if name == "verbose" => match next_is_value(i) {
                        Some((v, _)) => (v.clone(), true),
                        None => ("1".to_string(), false),
                    },
                    None => match next_is_value(i).map(|(v, _)| v.as_str()) {
                        Some(v @ ("true" | "false")) => (v.to_string(), true),
                        _ => ("true".to_string(), false),
                    },
                };
                if used_next {
                    i += 1;
                }
                if name == "verbose" {
                    standard.verbose = v.trim().parse().map_err(|_| {
                        Error::Usage(format!("{origin}: --verbose expects an integer, got '{v}'"))
                    })?;
                } else {
                    standard.print_args = crate::cli::kaldi_args::parse_kaldi_bool(&v)
                        .map_err(|e| Error::Usage(format!("{origin}: --print-args: {e}")))?;
                }
                continue;
            }
            _ => {}
        }
        if let Some(opt) = compat.iter().find(|o| o.name == name) {
            let value = match value {
                Some(v) => v.to_string(),
                None if opt.kind == Bool => match next_is_value(i).map(|(v, _)| v.as_str()) {
                    Some(v @ ("true" | "false")) => {
                        i += 1;
                        v.to_string()
                    }
                    _ => "true".to_string(),
                },
                None => match next_is_value(i) {
                    Some((v, _)) => {
                        i += 1;
                        v.clone()
                    }
                    None => return Err(Error::Usage(format!("{origin}: --{name} needs a value"))),
                },
            };
            if !well_formed(opt.kind, &value) {
                return Err(Error::Usage(format!(
                    "{origin}: --{name}: expected a {} value, got '{value}'",
                    match opt.kind {
                        Bool => "boolean",
                        Int => "integer",
                        Float => "number",
                        Str => "string",
                    }
                )));
            }
            match opt.treatment {
                Treatment::NoEffect(why) => {
                    if !warned.contains(&opt.name) {
                        warned.push(opt.name);
                        warnings.push(format!(
                            "compnet {sub_name}: warning: --{name} is accepted for Kaldi's \
                             scripts and has no effect: {why}"
                        ));
                    }
                }
                Treatment::OnlyDefault(default, why) => {
                    if !same_value(opt.kind, &value, default) {
                        return Err(Error::Usage(format!(
                            "{origin}: --{name}={value}: only Kaldi's default \
                             (--{name}={default}) is accepted: {why}"
                        )));
                    }
                }
            }
            continue;
        }
        if value.is_none() && optional_value(name) {
            // A bare boolean, or `--name true` / `--name false`.
            match next_is_value(i).map(|(v, _)| v.as_str()) {
                Some(v @ ("true" | "false")) => {
                    out.push(format!("--{name}={v}"));
                    i += 1;
                }
                _ => out.push(format!("--{name}=true")),
            }
            continue;
        }
        out.push(arg.clone());
    }
    Ok(Prepared {
        args: out,
        standard,
        warnings,
    })
}

/// The command line as Kaldi echoes it with `--print-args`: arguments joined by spaces, those
/// with characters a shell would interpret in single quotes.
pub fn command_line_for_log(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=.,:/+@%^".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_kaldi_boolean_for_every_option() {
        // Kaldi's `ParseOptions::ToBool`: any case, and an empty value is true.
        for t in ["true", "T", "t", "1", "", "TRUE"] {
            assert_eq!(parse_kaldi_bool(t), Ok(true), "{t:?}");
        }
        for f in ["false", "F", "f", "0", "False"] {
            assert_eq!(parse_kaldi_bool(f), Ok(false), "{f:?}");
        }
        for bad in ["yes", "no", "2", "tru"] {
            assert!(parse_kaldi_bool(bad).is_err(), "{bad:?}");
        }
    }

    fn cmd() -> clap::Command {
        clap::Command::new("compnet").subcommand(
            clap::Command::new("compute")
                .arg(
                    clap::Arg::new("apply-exp")
                        .long("apply-exp")
                        .num_args(0..=1)
                        .require_equals(true),
                )
                .arg(clap::Arg::new("frames-per-chunk").long("frames-per-chunk"))
                .arg(clap::Arg::new("args").num_args(0..)),
        )
    }

    fn prep(args: &[&str]) -> Result<Prepared> {
        prepare(args.iter().map(|s| s.to_string()).collect(), &cmd())
    }

    #[test]
    fn bare_and_spaced_booleans() {
        let p = prep(&[
            "compnet",
            "compute",
            "--apply-exp",
            "m.raw",
            "--apply-exp",
            "false",
        ])
        .unwrap();
        assert_eq!(
            p.args,
            [
                "compnet",
                "compute",
                "--apply-exp=true",
                "m.raw",
                "--apply-exp=false"
            ]
        );
    }

    #[test]
    fn standard_options_are_taken_out() {
        let p = prep(&[
            "compnet",
            "compute",
            "--verbose=3",
            "--print-args=false",
            "a",
        ])
        .unwrap();
        assert_eq!(p.args, ["compnet", "compute", "a"]);
        assert_eq!(
            p.standard,
            StandardOptions {
                verbose: 3,
                print_args: false
            }
        );
        assert!(prep(&["compnet", "compute", "--verbose=x"]).is_err());
    }

    #[test]
    fn compat_options_warn_or_refuse() {
        let p = prep(&[
            "compnet",
            "compute",
            "--acoustic-scale=0.1",
            "--acoustic-scale",
            "2",
        ])
        .unwrap();
        assert_eq!(p.args, ["compnet", "compute"]);
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(prep(&["compnet", "compute", "--acoustic-scale=x"]).is_err());
        assert!(prep(&[
            "compnet",
            "compute",
            "--optimization.consolidate-model-update=true"
        ])
        .is_ok());
        let e = prep(&[
            "compnet",
            "compute",
            "--optimization.consolidate-model-update=false",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("only Kaldi's default"), "{e}");
        // No derivatives in compute: the limits are accepted with a warning.
        let p = prep(&["compnet", "compute", "--optimization.min-deriv-time=0"]).unwrap();
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    }

    #[test]
    fn config_files_come_first() {
        let dir = std::env::temp_dir().join(format!("compnet-kaldi-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("opts.conf");
        std::fs::write(
            &f,
            "# chunking\n--frames-per-chunk=20  # short\n\n--apply-exp\n",
        )
        .unwrap();
        let fs = f.to_str().unwrap();
        let p = prep(&[
            "compnet",
            "compute",
            "--frames-per-chunk=7",
            &format!("--config={fs}"),
        ])
        .unwrap();
        assert_eq!(
            p.args,
            [
                "compnet",
                "compute",
                "--frames-per-chunk=20",
                "--apply-exp=true",
                "--frames-per-chunk=7"
            ]
        );
        std::fs::write(&f, "--frames-per-chunk=20\nframes=3\n").unwrap();
        let e = prep(&["compnet", "compute", "--config", fs]).unwrap_err();
        assert!(e.to_string().contains("opts.conf:2:"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn log_quoting() {
        let a: Vec<String> = ["compnet", "compute", "ark:a b.ark", "x'y"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            command_line_for_log(&a),
            "compnet compute 'ark:a b.ark' 'x'\\''y'"
        );
    }
}
