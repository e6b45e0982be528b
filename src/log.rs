//! Log lines in Kaldi's shape, so its python drivers can parse ours: `LOG (<program>) <text>`
//! on stderr, numbers as C++ streams print them (6 significant digits, `%g` style).

/// `x` as C++'s default `ostream << x` prints a float or double: `%g` with 6 significant
/// digits (Kaldi's log lines).
pub fn fmt_g(x: f64) -> String {
    crate::io::codec::fmt_g(x, 6)
}

/// The Kaldi binary this process runs as (`compnet` started as `nnet3-train`, see
/// `cli::kaldi_names`), if any.
static KALDI_PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Makes every log line of this process take Kaldi's prefix for binary `name`.
pub fn set_kaldi_program(name: &'static str) {
    let _ = KALDI_PROGRAM.set(name);
}

/// The Kaldi binary this process runs as, if it was started under a Kaldi name.
pub fn kaldi_program() -> Option<&'static str> {
    KALDI_PROGRAM.get().copied()
}

/// Where Kaldi's binaries print a log line from, for the lines Kaldi's Python libraries find
/// by the function and file in the prefix (`steps/libs/nnet3/report/log_parse.py` looks for
/// `compute-prob...:PrintTotalStats():nnet...diagnostics.cc:<line>`); other lines name
/// `main()` of the binary's own source file.
fn kaldi_site(program: &str, text: &str) -> String {
    const SITES: &[(&str, &str)] = &[
        (
            "Overall average objective function",
            "PrintTotalStats():nnet-training.cc:317",
        ),
        (
            "[this line is to be parsed by a script:]",
            "PrintTotalStats():nnet-training.cc:324",
        ),
        (
            "Average objective function",
            "PrintStatsForThisPhase():nnet-training.cc:278",
        ),
        ("Overall ", "PrintTotalStats():nnet-diagnostics.cc:162"),
        ("Recomputing stats", "RecomputeStats():nnet-utils.cc:551"),
        ("Done recomputing", "RecomputeStats():nnet-utils.cc:570"),
    ];
    SITES
        .iter()
        .find(|(prefix, _)| text.starts_with(prefix))
        .map(|(_, site)| site.to_string())
        .unwrap_or_else(|| format!("main():{program}.cc:0"))
}

/// The prefix of a log line at `level` (`LOG`, `WARNING`, `VLOG[2]`): `LEVEL (<program>)`, or
/// Kaldi's `LEVEL (<binary>[compnet-<version>]:<function>():<file>:<line>)` when the process
/// runs under a Kaldi name.
pub fn prefix(level: &str, program: &str, text: &str) -> String {
    match kaldi_program() {
        None => format!("{level} ({program})"),
        Some(k) => format!(
            "{level} ({k}[compnet-{}]:{})",
            env!("CARGO_PKG_VERSION"),
            kaldi_site(k, text)
        ),
    }
}

/// Whether `log` lines are left out (the processes of a parallel job other than rank 0).
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Leaves out (or prints again) the `log` lines of this process; warnings still print.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, std::sync::atomic::Ordering::Relaxed);
}

/// Prints `LOG (<program>) <text>` on stderr (Kaldi's prefix under a Kaldi name).
pub fn log(program: &str, text: &str) {
    if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("{} {text}", prefix("LOG", program, text));
    }
}

/// The verbose level of this process (Kaldi's `--verbose=N`, default 0).
static VERBOSE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Kaldi's verbose level given on the command line (`--verbose=N`, default 0).
pub fn verbose_level() -> i32 {
    VERBOSE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets the verbose level (the command line does, before a command runs).
pub fn set_verbose_level(v: i32) {
    VERBOSE.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// Prints `VLOG[<level>] (<program>) <text>` on stderr when the verbose level is at least
/// `level` (Kaldi's `KALDI_VLOG`). What each level adds: 1, one line per utterance or
/// minibatch; 2, each computation compiled, with the compiler's phase times.
pub fn vlog(level: i32, program: &str, text: impl FnOnce() -> String) {
    if verbose_level() >= level {
        let text = text();
        eprintln!(
            "{} {text}",
            prefix(&format!("VLOG[{level}]"), program, &text)
        );
    }
}

/// Prints `WARNING (<program>) <text>` on stderr.
pub fn warn(program: &str, text: &str) {
    eprintln!("{} {text}", prefix("WARNING", program, text));
}

/// A spinner on stderr when it is a terminal (long runs show progress; logs stay clean).
pub fn progress_spinner(message: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message(message.to_string());
        b
    })
}

#[cfg(test)]
mod tests {
    use super::fmt_g;

    #[test]
    fn formats_like_a_cpp_stream() {
        for (x, want) in [
            (-3.34665f64, "-3.34665"),
            (-2.7681249, "-2.76812"),
            (160.0, "160"),
            (0.1875, "0.1875"),
            (1.1e-5, "1.1e-05"),
            (0.000453, "0.000453"),
            (1234567.0, "1.23457e+06"),
            (123456.4, "123456"),
            (-0.5, "-0.5"),
            (100.0, "100"),
            (99.99999, "100"),
            (113.3568, "113.357"),
        ] {
            assert_eq!(fmt_g(x), want, "{x}");
        }
    }
}
