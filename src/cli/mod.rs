//! The `compnet` command line: one subcommand per Kaldi tool, with Kaldi's option names
//! (`--binary=false` and `--binary false` both work). Each subcommand lives in its own file.

pub mod ali_to_post;
pub mod am;
pub mod apply_cmvn;
pub mod args;
pub mod average;
pub mod cntk;
pub mod combine;
pub mod compile;
pub mod compute;
pub mod compute_from_egs;
pub mod compute_prob;
pub mod convert;
pub mod copy;
pub mod copy_egs;
pub mod copy_feats;
pub mod draw;
pub mod eval;
pub mod feat_info;
pub mod fit;
pub mod get_egs;
pub mod info;
pub mod init;
pub mod kaldi_args;
pub mod kaldi_names;
pub mod lda;
pub mod merge_egs;
pub mod show_progress;
pub mod shuffle_egs;
pub mod subset_egs;
pub mod sum;
pub mod train;
pub mod xvector;

use crate::error::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "compnet",
    version,
    about = "Computational networks in the Kaldi nnet3 style"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Initialise a network from a config (nnet3-init).
    Init(init::Args),
    /// Print a summary of a network (nnet3-info).
    Info(info::Args),
    /// Copy a network, optionally changing format or learning rate (nnet3-copy).
    Copy(copy::Args),
    /// Copy feature archives, optionally compressing (copy-feats).
    CopyFeats(copy_feats::Args),
    /// Run a network on features (nnet3-compute).
    Compute(compute::Args),
    /// Print the compiled computation for a request.
    Compile(compile::Args),
    /// Cut utterances into training examples (nnet3-get-egs).
    GetEgs(get_egs::Args),
    /// Cut utterances with dense targets into training examples (nnet3-get-egs-dense-targets).
    GetEgsDenseTargets(get_egs::DenseArgs),
    /// Merge examples into minibatches (nnet3-merge-egs).
    MergeEgs(merge_egs::Args),
    /// Shuffle examples (nnet3-shuffle-egs).
    ShuffleEgs(shuffle_egs::Args),
    /// Copy examples: select frames, trim context, split over outputs (nnet3-copy-egs).
    CopyEgs(copy_egs::Args),
    /// Train a network for one pass over merged egs (nnet3-train).
    Train(train::Args),
    /// Objective and accuracy of a network on egs (nnet3-compute-prob).
    ComputeProb(compute_prob::Args),
    /// Average the parameters of networks (nnet3-average).
    Average(average::Args),
    /// Combine the last models of a training run on held-out egs (nnet3-combine).
    Combine(combine::Args),
    /// Train for several epochs with a stepper, schedules and hooks, from egs or feature archives.
    Fit(Box<fit::Args>),
    /// Objective and accuracy of a network on a data set, per output.
    Eval(eval::Args),
    /// Print the nnet3 config an NDL or Brainstorm network becomes.
    Convert(convert::Args),
    /// Link Kaldi's binary names to compnet in a directory, for Kaldi's recipes.
    InstallKaldiNames(kaldi_names::Args),
    /// A random subset of examples (nnet3-subset-egs).
    SubsetEgs(subset_egs::Args),
    /// How much two networks differ, per component (nnet3-show-progress).
    ShowProgress(show_progress::Args),
    /// The dimension of the features (feat-to-dim).
    FeatToDim(feat_info::DimArgs),
    /// The number of frames of each utterance (feat-to-len).
    FeatToLen(feat_info::LenArgs),
    /// Apply cepstral mean (and variance) normalisation (apply-cmvn).
    ApplyCmvn(apply_cmvn::Args),
    /// Sum matrices, per key or into one (matrix-sum).
    MatrixSum(sum::MatrixArgs),
    /// Sum vectors, per key or into one (vector-sum).
    VectorSum(sum::VectorArgs),
    /// Alignments to posteriors (ali-to-post).
    AliToPost(ali_to_post::Args),
    /// The network's output for each example's input (nnet3-compute-from-egs).
    ComputeFromEgs(compute_from_egs::Args),
    /// Draw a network: an SVG picture or Graphviz DOT text (nnet3_to_dot.sh).
    Draw(draw::Args),
    /// Run a CNTK configuration file: the blocks of command=..., each by its action (train, eval, write, edit, adapt).
    Cntk(cntk::Args),
    /// An acoustic model from a transition model (or tree and topology) and a raw network (nnet3-am-init).
    AmInit(am::InitArgs),
    /// Copy an acoustic model, or write its raw network (nnet3-am-copy).
    AmCopy(am::CopyArgs),
    /// Print a summary of an acoustic model (nnet3-am-info).
    AmInfo(am::InfoArgs),
    /// Set an acoustic model's priors from summed posteriors (nnet3-am-adjust-priors).
    AmAdjustPriors(am::AdjustPriorsArgs),
    /// Re-estimate transition probabilities and priors from alignments (nnet3-am-train-transitions).
    AmTrainTransitions(am::TrainTransitionsArgs),
    /// Alignments (transition-ids) to pdf-ids (ali-to-pdf).
    AliToPdf(am::AliToPdfArgs),
    /// LDA statistics of a network's output, classes from the egs' supervision (nnet3-acc-lda-stats).
    AccLdaStats(lda::AccArgs),
    /// The LDA-like input transform from LDA statistics (nnet-get-feature-transform).
    GetFeatureTransform(lda::TransformArgs),
    /// One vector per utterance from an x-vector network, averaged over chunks (nnet3-xvector-compute).
    XvectorCompute(xvector::Args),
}

/// Warns (on stderr, naming the utterance) when an input matrix holds NaN or infinity: they
/// are carried through as Kaldi does, but silently they would turn up only in the outputs.
/// With compression one such value can spoil the whole compressed matrix, so that is said too.
/// Returns whether it warned.
pub fn warn_non_finite(tool: &str, key: &str, m: &crate::matrix::Matrix, compress: bool) -> bool {
    let bad = m.view().count_non_finite();
    if bad == 0 {
        return false;
    }
    let then = if compress {
        "; compression takes its range from the values, so the whole compressed matrix may \
         become NaN"
    } else {
        "; they are carried into the output"
    };
    eprintln!(
        "compnet {tool}: warning: utterance {key}: {bad} NaN or infinite value(s) in a {}x{} \
         matrix{then}",
        m.num_rows(),
        m.num_cols()
    );
    true
}

/// Prints `e` as the process's last word and gives its exit status: `compnet: error: ...` and
/// 1; under a Kaldi name, Kaldi's `ERROR (<binary>[...]:main():<binary>.cc:0) ...` and Kaldi's
/// statuses (1 for a usage error, 255 for any other, as its `main` returns -1).
pub fn report_error(e: &crate::Error) -> i32 {
    match crate::log::kaldi_program() {
        None => {
            eprintln!("compnet: error: {e}");
            1
        }
        Some(_) => {
            eprintln!(
                "{} {e}",
                crate::log::prefix("ERROR", "compnet", &e.to_string())
            );
            if matches!(e, crate::Error::Usage(_)) {
                1
            } else {
                255
            }
        }
    }
}

/// The clap description of the command line, with Kaldi's habit for every tool: an option
/// given twice, the last one wins.
fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommands(|s| {
        let example = s
            .get_after_help()
            .map(|h| format!("{h}\n\n"))
            .unwrap_or_default();
        s.args_override_self(true).after_help(format!(
            "{example}Standard options (as in every Kaldi tool):\n  \
             --config=<file>          read options from a file, one --name=value per line \
             (may be repeated; the command line wins)\n  \
             --print-args=true|false  echo the command line to stderr (default true)\n  \
             --verbose=<n>            verbose level (default 0)\n  \
             --help                   print this message"
        ))
    })
}

/// Applies Kaldi's conventions (`kaldi_args`), echoes the command line (`--print-args`) and
/// parses. `Err(exit code)` inside when the arguments did not parse or asked for help (clap
/// has printed why).
fn parse(args: Vec<String>, echo: String) -> Result<std::result::Result<Cli, i32>> {
    use clap::FromArgMatches;
    let command = command();
    let prepared = kaldi_args::prepare(args, &command)?;
    let parsed = command
        .try_get_matches_from(prepared.args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(c) => {
            kaldi_args::set_verbose_level(prepared.standard.verbose);
            if prepared.standard.print_args {
                eprintln!("{echo}");
            }
            for w in &prepared.warnings {
                eprintln!("{w}");
            }
            Ok(Ok(c))
        }
        Err(e) => {
            let _ = e.print();
            Ok(Err(if e.use_stderr() { 1 } else { 0 }))
        }
    }
}

/// Whether `args` (program name first) form a valid command line, without running it: the
/// error clap or the Kaldi conventions give otherwise. For tests of option coverage.
pub fn check_command_line(args: Vec<String>) -> std::result::Result<(), String> {
    use clap::FromArgMatches;
    let command = command();
    let prepared = kaldi_args::prepare(args, &command).map_err(|e| e.to_string())?;
    command
        .try_get_matches_from(prepared.args)
        .and_then(|m| Cli::from_arg_matches(&m))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs the command line; returns the process exit code.
///
/// Started under one of Kaldi's binary names (`kaldi_names`), `compnet` runs that binary's
/// subcommand: the command line is echoed as Kaldi echoes it (the name as started, then the
/// arguments, each followed by a space) and log lines take Kaldi's prefix.
pub fn main_with_args(mut args: Vec<String>) -> Result<i32> {
    let echo = match args.first().and_then(|a| kaldi_names::lookup(a)) {
        Some((kaldi, sub)) => {
            crate::log::set_kaldi_program(kaldi);
            let echo = kaldi_args::command_line_for_log(&args) + " ";
            args.insert(1, sub.to_string());
            echo
        }
        None => kaldi_args::command_line_for_log(&args),
    };
    let cli = match parse(args, echo)? {
        Ok(cli) => cli,
        Err(code) => return Ok(code),
    };
    match cli.command {
        Command::Init(a) => init::run(a),
        Command::Info(a) => info::run(a),
        Command::Copy(a) => copy::run(a),
        Command::CopyFeats(a) => copy_feats::run(a),
        Command::Compute(a) => compute::run(a),
        Command::Compile(a) => compile::run(a),
        Command::GetEgs(a) => get_egs::run(a),
        Command::GetEgsDenseTargets(a) => get_egs::run_dense(a),
        Command::MergeEgs(a) => merge_egs::run(a),
        Command::ShuffleEgs(a) => shuffle_egs::run(a),
        Command::CopyEgs(a) => copy_egs::run(a),
        Command::Train(a) => train::run(a),
        Command::ComputeProb(a) => compute_prob::run(a),
        Command::Average(a) => average::run(a),
        Command::Combine(a) => combine::run(a),
        Command::Fit(a) => fit::run(*a),
        Command::Eval(a) => eval::run(a),
        Command::Convert(a) => convert::run(a),
        Command::InstallKaldiNames(a) => kaldi_names::run(a),
        Command::SubsetEgs(a) => subset_egs::run(a),
        Command::ShowProgress(a) => show_progress::run(a),
        Command::FeatToDim(a) => feat_info::run_dim(a),
        Command::FeatToLen(a) => feat_info::run_len(a),
        Command::ApplyCmvn(a) => apply_cmvn::run(a),
        Command::MatrixSum(a) => sum::run_matrix(a),
        Command::VectorSum(a) => sum::run_vector(a),
        Command::AliToPost(a) => ali_to_post::run(a),
        Command::ComputeFromEgs(a) => compute_from_egs::run(a),
        Command::Cntk(a) => cntk::run(a),
        Command::Draw(a) => draw::run(a),
        Command::AmInit(a) => am::run_init(a),
        Command::AmCopy(a) => am::run_copy(a),
        Command::AmInfo(a) => am::run_info(a),
        Command::AmAdjustPriors(a) => am::run_adjust_priors(a),
        Command::AmTrainTransitions(a) => am::run_train_transitions(a),
        Command::AliToPdf(a) => am::run_ali_to_pdf(a),
        Command::AccLdaStats(a) => lda::run_acc(a),
        Command::GetFeatureTransform(a) => lda::run_transform(a),
        Command::XvectorCompute(a) => xvector::run(a),
    }
}
