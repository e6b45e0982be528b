//! `compnet fit <config-or-model> --train <data> --valid <data> --out <dir>`: trains a network
//! for several epochs with a chosen stepper, schedules and hooks (`train::fit`). Options come
//! from the command line and/or a TOML file (`--config=FILE`, the same names as keys); the
//! command line wins.

use crate::cli::init::read_config_text;
use crate::cli::kaldi_args::parse_kaldi_bool;
use crate::error::{Error, Result};
use crate::frontend::{read_network, Format};
use crate::log::{fmt_g, log};
use crate::nnet::Nnet;
use crate::run::set_threads;
use crate::train::fit::data::{load, ChunkOptions, ChunkWidth, LabelKind};
use crate::train::fit::hooks::{Every, MAX_EPOCHS, MAX_MINIBATCHES};
use crate::train::fit::schedule::{DropoutSchedule, EpochSchedule};
use crate::train::fit::stepper::{
    check_non_negative, GradientOptions, StepperKind, StepperOptions,
};
use crate::train::fit::{fit_parallel, FitOptions};
use crate::train::parallel::{join, Parallel, ParallelMode};
use serde::Deserialize;

macro_rules! fit_args {
    ($( $(#[doc = $doc:literal])* $field:ident : $ty:ty = $long:literal ),* $(,)?) => {
        /// Options of `compnet fit` (every one may also be a key of the `--config` TOML file).
        #[derive(clap::Args, Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[command(override_usage = "compnet fit [options] <config-or-model> --train <data> --valid <data> --out <dir>")]
        pub struct Args {
            /// A TOML file of options (keys as the long option names); the command line wins.
            #[arg(long = "config")]
            #[serde(skip)]
            pub config: Option<String>,
            /// `<config-or-model>`: an nnet3 config, NDL or Brainstorm JSON (initialised with --srand) or a raw model.
            #[serde(skip)]
            pub args: Vec<String>,
            $(
                $(#[doc = $doc])*
                #[arg(long = $long, allow_hyphen_values = true)]
                #[serde(rename = $long)]
                pub $field: Option<$ty>,
            )*
            /// Continue from <out>/checkpoint.ckpt if there is one.
            #[arg(long, value_parser = parse_kaldi_bool, num_args = 0..=1, default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
            pub resume: Option<bool>,
            /// Shuffle the training examples every epoch (seeded by --srand).
            #[arg(long, value_parser = parse_kaldi_bool, num_args = 0..=1, default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
            pub shuffle: Option<bool>,
            /// AutoAdjust: go back to the best model when the learning rate is reduced.
            #[arg(long = "load-best", value_parser = parse_kaldi_bool, num_args = 0..=1, default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
            #[serde(rename = "load-best")]
            pub load_best: Option<bool>,
            /// With --resume: keep the checkpoint's model and position but start the stepper's state (momentum, moment estimates, natural-gradient estimates) afresh; needed to resume a checkpoint written with another --stepper, which is refused otherwise.
            #[arg(long = "reset-stepper-state", value_parser = parse_kaldi_bool, num_args = 0..=1, default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
            #[serde(rename = "reset-stepper-state")]
            pub reset_stepper_state: Option<bool>,
        }

        impl Args {
            /// Fills what the command line left unset from `file`.
            fn or(self, file: Args) -> Args {
                Args {
                    config: self.config,
                    args: self.args,
                    $( $field: self.$field.or(file.$field), )*
                    resume: self.resume.or(file.resume),
                    shuffle: self.shuffle.or(file.shuffle),
                    load_best: self.load_best.or(file.load_best),
                    reset_stepper_state: self.reset_stepper_state.or(file.reset_stepper_state),
                }
            }

            /// The option names this set of options gives a value.
            fn given(&self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $( if self.$field.is_some() { v.push($long); } )*
                for (name, set) in [
                    ("resume", self.resume.is_some()),
                    ("shuffle", self.shuffle.is_some()),
                    ("load-best", self.load_best.is_some()),
                    ("reset-stepper-state", self.reset_stepper_state.is_some()),
                ] {
                    if set {
                        v.push(name);
                    }
                }
                v
            }
        }
    };
}

fit_args! {
    /// Training data: an egs rspecifier (ark:..., scp:...) or a directory with feats.ark and labels: ali.ark or post.ark (a label per frame) or utt2label (text, `utt-id int` per line: a label per utterance, for pooling networks such as x-vectors); or CNTK's HTK data: a directory with feats.scp (an HTK script file, `name=file[s,e]` ranges allowed), labels.mlf (an HTK MLF) and optionally labels.map (the MLF's state names, one per line, in index order).
    train: String = "train",
    /// Validation data (same forms as --train).
    valid: String = "valid",
    /// Output directory (final.raw, checkpoint.ckpt, metrics.jsonl, curves.svg).
    out: String = "out",
    /// Number of epochs [10].
    num_epochs: usize = "num-epochs",
    /// sgd, momentum, nesterov, adagrad, rmsprop, adam, adamw or ng (Kaldi's natural-gradient SGD) [ng].
    stepper: String = "stepper",
    /// Learning rate per epoch, CNTK notation (0.8:3.2*14:0.08) [0.001; adam/adamw/rmsprop/adagrad with per-minibatch rates: 0.001].
    learning_rate: String = "learning-rate",
    /// Kaldi's exponential decay: initial effective learning rate (with --final-effective-lrate).
    initial_effective_lrate: f64 = "initial-effective-lrate",
    /// Kaldi's exponential decay: final effective learning rate.
    final_effective_lrate: f64 = "final-effective-lrate",
    /// sample (the rate multiplies the summed gradient, Kaldi's and CNTK's per-sample) or minibatch (the mean gradient) [sample].
    lr_per: String = "lr-per",
    /// Linear learning-rate warm-up over this many minibatches [0].
    warmup: usize = "warmup",
    /// Minibatch size per epoch, CNTK notation (64*2:128) [64].
    minibatch_size: String = "minibatch-size",
    /// Momentum (momentum, nesterov [0.9]; ng [0]).
    momentum: f32 = "momentum",
    /// Momentum per epoch, CNTK notation (0.9*2:0.99), in place of --momentum (plain steppers).
    momentum_schedule: String = "momentum-schedule",
    /// classic (v = μ·v + g) or unit (CNTK's: v = μ·v + (1 − μ)·g) [classic].
    momentum_gain: String = "momentum-gain",
    /// Adam's beta1 [0.9].
    beta1: f32 = "beta1",
    /// Adam's beta2 [0.999].
    beta2: f32 = "beta2",
    /// Denominator epsilon of adagrad, rmsprop, adam [1e-8].
    epsilon: f32 = "epsilon",
    /// AdamW's decoupled weight decay [0.01].
    weight_decay: f32 = "weight-decay",
    /// RMSProp's mean-square smoothing [0.99].
    rms_gamma: f32 = "rms-gamma",
    /// RMSProp's step growth while the sign holds [1.2].
    rms_inc: f32 = "rms-inc",
    /// RMSProp's step shrink on a sign flip [0.75].
    rms_dec: f32 = "rms-dec",
    /// RMSProp's largest step factor [10].
    rms_max: f32 = "rms-max",
    /// RMSProp's smallest step factor [0.1].
    rms_min: f32 = "rms-min",
    /// ng: limit on the norm of the change per minibatch [2.0].
    max_param_change: f32 = "max-param-change",
    /// ng: Kaldi's backstitch scale α (0 = off; needs --momentum=0): a step of -α along the gradient, then 1+α along the gradient there [0].
    backstitch_training_scale: f32 = "backstitch-training-scale",
    /// ng: backstitch on every this-many-th minibatch (those with index = --srand modulo this) [1].
    backstitch_training_interval: usize = "backstitch-training-interval",
    /// L1 regularisation per minibatch (plain steppers) [0].
    l1: f32 = "l1",
    /// L2 regularisation per minibatch (plain steppers; components' l2-regularize applies too) [0].
    l2: f32 = "l2",
    /// Per-sample gradient clipping threshold (plain steppers) [0 = none].
    clip_gradient: f32 = "clip-gradient",
    /// How --clip-gradient clips: value (each element, CNTK's gradientClippingWithTruncation) or norm (each parameter block's gradient, e.g. an affine component's weights and its bias apart, scaled to a norm of at most the threshold times the frames, as CNTK clips each Parameter) [value].
    clip_by: String = "clip-by",
    /// --l1 and --l2 weights: minibatch (as given, L1 as a sub-gradient) or sample (CNTK's L1RegWeight/L2RegWeight: times the minibatch's frames, L2 added after clipping, L1 a proximal step after the update) [minibatch].
    regularize_per: String = "regularize-per",
    /// Standard deviation of Gaussian gradient noise (plain steppers) [0].
    gradient_noise: f32 = "gradient-noise",
    /// Kaldi's dropout schedule, optionally `pattern=` first (0,0@0.20,0.5@0.5,0).
    dropout_schedule: String = "dropout-schedule",
    /// Dropout proportion of every dropout component per epoch, CNTK notation (0*2:0.5:0.2), CNTK's dropoutRate (not with --dropout-schedule).
    dropout_per_epoch: String = "dropout-per-epoch",
    /// AutoAdjust: multiply the learning rate by this when validation stops improving [0 = off].
    auto_adjust: f64 = "auto-adjust",
    /// The least improvement of the validation objective that counts, for AutoAdjust and --patience [0].
    auto_adjust_threshold: f64 = "auto-adjust-threshold",
    /// AutoAdjust: at most this many reductions [4].
    max_reductions: usize = "max-reductions",
    /// Early stopping: epochs without a better validation objective [0 = never].
    patience: usize = "patience",
    /// Stop after this many seconds (a checkpoint is written) [0 = no limit].
    max_wall_time: f64 = "max-wall-time",
    /// Stop after this many minibatches in all (a checkpoint is written; --resume continues) [0 = no limit].
    max_minibatches: u64 = "max-minibatches",
    /// Seed of every random choice (initialisation, shuffling, dropout, noise) [0].
    srand: u64 = "srand",
    /// Minibatches per log line [100].
    print_interval: usize = "print-interval",
    /// Checkpoint every N epochs (N or Ne) or N minibatches (Nmb), or never [1].
    checkpoint_every: String = "checkpoint-every",
    /// Redraw curves.svg every N epochs [1].
    plot_every: String = "plot-every",
    /// Frames per chunk cut from feature archives [8; 1 for HTK data, CNTK's frame mode]: output frames with frame labels; with utt2label, input frames per chunk (output at t = 0), N or MIN,MAX (a width drawn per utterance, seeded by --srand; shorter utterances are left out with a warning).
    chunk_width: ChunkWidth = "chunk-width",
    /// The labels of a data directory: frame (ali.ark, post.ark), utterance (utt2label) or auto (frame labels if there are any, else utt2label) [auto].
    labels: String = "labels",
    /// Extra left context of chunks (recurrent networks) [0].
    extra_left_context: i32 = "extra-left-context",
    /// Extra right context of chunks [0].
    extra_right_context: i32 = "extra-right-context",
    /// Derivatives at t below this are zero and not computed (Kaldi's --optimization.min-deriv-time; a chunk's outputs are t = 0..chunk-width-1, so -N lets the gradient reach N frames of the left context) [no limit].
    min_deriv_time: i32 = "min-deriv-time",
    /// Derivatives at t above this are zero and not computed (Kaldi's --optimization.max-deriv-time) [no limit].
    max_deriv_time: i32 = "max-deriv-time",
    /// max-deriv-time relative to each minibatch's last output t (Kaldi's --optimization.max-deriv-time-relative; 0 = no backprop from the right context) [no limit].
    max_deriv_time_relative: i32 = "max-deriv-time-relative",
    /// Threads of every thread pool [0 = all cores].
    num_threads: usize = "num-threads",
    /// Where to train: cpu, or cuda (the first GPU; a build with --features cuda; an error without one) [cpu].
    device: String = "device",
    /// The language of <config-or-model> when not a model: kaldi, ndl or brainstorm [by extension: .ndl, .json, else kaldi].
    format: String = "format",
    /// Training on the processes of `mpirun -np N` (a build with --features mpi): none; data (each minibatch split over the ranks, gradients summed; --minibatch-size is the global size); average:K (each rank steps on its share with the learning rate x N, models averaged every K minibatches) [none].
    parallel: String = "parallel",
    /// --parallel=data: megabytes of gradient per all-reduce [4].
    parallel_bucket_mb: f64 = "parallel-bucket-mb",
}

/// Reads the TOML options file (the options and the file's text).
fn read_toml(path: &str) -> Result<(Args, String)> {
    let text = read_config_text(path)?;
    let args = toml::from_str(&text).map_err(|e| {
        let (line, col) = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                (
                    before.matches('\n').count() + 1,
                    before.len() - before.rfind('\n').map_or(0, |p| p + 1) + 1,
                )
            })
            .unwrap_or((0, 0));
        // The option the line sets, which the parser's message may not name.
        let key = text
            .lines()
            .nth(line.saturating_sub(1))
            .and_then(|l| l.split_once('='))
            .map(|(k, _)| k.trim().trim_matches(|c| c == '"' || c == '\''))
            .filter(|k| !k.is_empty() && !e.message().contains(*k))
            .map_or(String::new(), |k| format!("{k}: "));
        Error::Usage(format!("{path}:{line}:{col}: {key}{}", e.message()))
    })?;
    Ok((args, text))
}

/// Where the options a TOML file set (and the command line did not) are: (name, line).
fn file_lines(text: &str, given: &[&str], on_command_line: &[&str]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        if given.contains(&key) && !on_command_line.contains(&key) {
            out.push((key.to_string(), i + 1));
        }
    }
    out
}

/// An error about an option that came from the TOML file `path` gets the file and line in
/// front: the option named first in the message is the one it is about.
fn locate(e: Error, path: &str, lines: &[(String, usize)]) -> Error {
    let Error::Usage(msg) = e else {
        return e;
    };
    let first = lines
        .iter()
        .filter_map(|(key, line)| {
            let pat = format!("--{key}");
            msg.match_indices(&pat)
                .find(|(at, _)| {
                    msg[at + pat.len()..]
                        .chars()
                        .next()
                        .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
                })
                .map(|(at, _)| (at, *line))
        })
        .min();
    match first {
        Some((_, line)) => Error::Usage(format!("{path}:{line}: {msg}")),
        None => Error::Usage(msg),
    }
}

/// The largest learning rate (and effective learning rate) `fit` takes: far above any that
/// trains, and far below where a rate times a gradient overflows single precision.
pub const MAX_LEARNING_RATE: f64 = 1e6;

/// A float option that must be finite and within `lo..=hi`.
fn in_range(name: &str, v: f64, lo: f64, hi: f64) -> Result<()> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "--{name} must be a finite number in [{lo}, {hi}], got {v}"
        )))
    }
}

/// The model to start from: a raw model, or a network description (an nnet3 config, NDL or
/// Brainstorm JSON: `format`, or by extension) initialised with `srand`.
pub fn read_or_init(path: &str, format: Option<Format>, srand: u64) -> Result<Nnet> {
    let (nnet, am) = read_model_or_config(path, format, srand)?;
    if am {
        return Err(Error::Usage(format!(
            "{path} is a final.mdl; compnet fit trains raw networks"
        )));
    }
    Ok(nnet)
}

/// The network of a model file (raw or final.mdl, text or binary, told by its first bytes)
/// or of a config in `format`'s language (by extension when None), initialised with seed
/// `srand`; and whether it came from a final.mdl.
pub fn read_model_or_config(
    path: &str,
    format: Option<Format>,
    srand: u64,
) -> Result<(Nnet, bool)> {
    let bytes = crate::io::read_file(path)?;
    let looks_binary = bytes.starts_with(b"\0B");
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]);
    let head = head.trim_start();
    let looks_model =
        looks_binary || head.starts_with("<Nnet3>") || head.starts_with("<TransitionModel>");
    if looks_model {
        let read = Nnet::read_model(&bytes, path)?;
        Ok((read.nnet, read.am.is_some()))
    } else {
        let nnet = read_network(path, format, &mut crate::random::seeded_rng(srand))?;
        Ok((nnet, false))
    }
}

/// Turns the merged options into `FitOptions` (defaults for what is unset).
pub fn options(a: &Args) -> Result<(FitOptions, ChunkOptions)> {
    let d = FitOptions::default();
    let sd = StepperOptions::default();
    let kind = StepperKind::parse(a.stepper.as_deref().unwrap_or("ng"))?;
    let stepper = StepperOptions {
        kind,
        momentum: a
            .momentum
            .unwrap_or(if kind == StepperKind::NaturalGradient {
                0.0
            } else {
                sd.momentum
            }),
        beta1: a.beta1.unwrap_or(sd.beta1),
        beta2: a.beta2.unwrap_or(sd.beta2),
        epsilon: a.epsilon.unwrap_or(sd.epsilon),
        weight_decay: a.weight_decay.unwrap_or(sd.weight_decay),
        rms_gamma: a.rms_gamma.unwrap_or(sd.rms_gamma),
        rms_inc: a.rms_inc.unwrap_or(sd.rms_inc),
        rms_dec: a.rms_dec.unwrap_or(sd.rms_dec),
        rms_max: a.rms_max.unwrap_or(sd.rms_max),
        rms_min: a.rms_min.unwrap_or(sd.rms_min),
        max_param_change: a.max_param_change.unwrap_or(sd.max_param_change),
        backstitch_scale: a.backstitch_training_scale.unwrap_or(0.0),
        backstitch_interval: a.backstitch_training_interval.unwrap_or(1),
        unit_gain: one_of_two(
            a.momentum_gain.as_deref(),
            "momentum-gain",
            ["classic", "unit"],
        )?,
    };
    let lr_per_minibatch = one_of_two(a.lr_per.as_deref(), "lr-per", ["sample", "minibatch"])?;
    let exponential_decay = match (a.initial_effective_lrate, a.final_effective_lrate) {
        (None, None) => None,
        (Some(i), Some(f)) => {
            for (name, v) in [("initial-effective-lrate", i), ("final-effective-lrate", f)] {
                if !(v.is_finite() && v > 0.0 && v <= MAX_LEARNING_RATE) {
                    return Err(Error::Usage(format!(
                        "--{name} must be a finite number in (0, {MAX_LEARNING_RATE}], got {v}"
                    )));
                }
            }
            Some((i, f))
        }
        (i, _) => {
            return Err(Error::Usage(format!(
                "--{} needs --{} (Kaldi's exponential decay takes both)",
                if i.is_some() {
                    "initial-effective-lrate"
                } else {
                    "final-effective-lrate"
                },
                if i.is_some() {
                    "final-effective-lrate"
                } else {
                    "initial-effective-lrate"
                }
            )))
        }
    };
    let learning_rate = EpochSchedule::parse(
        a.learning_rate.as_deref().unwrap_or("0.001"),
        "--learning-rate",
    )?;
    if let Some(&(v, _)) = learning_rate
        .items
        .iter()
        .find(|&&(v, _)| v > MAX_LEARNING_RATE)
    {
        return Err(Error::Usage(format!(
            "--learning-rate: {v} is above the largest learning rate, {MAX_LEARNING_RATE}"
        )));
    }
    let num_epochs = a.num_epochs.unwrap_or(d.num_epochs);
    if !(1..=MAX_EPOCHS).contains(&num_epochs) {
        return Err(Error::Usage(format!(
            "--num-epochs must be in 1..={MAX_EPOCHS}, got {num_epochs}"
        )));
    }
    stepper.validate()?;
    let mb = EpochSchedule::parse(
        a.minibatch_size.as_deref().unwrap_or("64"),
        "--minibatch-size",
    )?;
    if mb
        .items
        .iter()
        .any(|&(v, _)| !(1.0..=1e6).contains(&v) || v.fract() != 0.0)
    {
        return Err(Error::Usage(
            "--minibatch-size: sizes must be whole numbers in 1..=1000000".into(),
        ));
    }
    let gradient = GradientOptions {
        l1: a.l1.unwrap_or(0.0),
        l2: a.l2.unwrap_or(0.0),
        clip: a.clip_gradient.unwrap_or(0.0),
        clip_norm: one_of_two(a.clip_by.as_deref(), "clip-by", ["value", "norm"])?,
        per_sample: one_of_two(
            a.regularize_per.as_deref(),
            "regularize-per",
            ["minibatch", "sample"],
        )?,
        noise_stddev: a.gradient_noise.unwrap_or(0.0),
    };
    check_non_negative(&[
        ("l1", gradient.l1),
        ("l2", gradient.l2),
        ("clip-gradient", gradient.clip),
        ("gradient-noise", gradient.noise_stddev),
    ])?;
    let momentum_schedule =
        EpochSchedule::parse_option(a.momentum_schedule.as_deref(), "--momentum-schedule")?;
    if let Some(m) = &momentum_schedule {
        if kind == StepperKind::NaturalGradient {
            return Err(Error::Usage(
                "--momentum-schedule is for the plain steppers (momentum, nesterov), not ng".into(),
            ));
        }
        if let Some(&(v, _)) = m.items.iter().find(|&&(v, _)| v >= 1.0) {
            return Err(Error::Usage(format!(
                "--momentum-schedule: {v} is not in [0, 1)"
            )));
        }
    }
    let dropout_per_epoch =
        EpochSchedule::parse_option(a.dropout_per_epoch.as_deref(), "--dropout-per-epoch")?;
    if let Some(d) = &dropout_per_epoch {
        if a.dropout_schedule.is_some() {
            return Err(Error::Usage(
                "give --dropout-schedule or --dropout-per-epoch, not both".into(),
            ));
        }
        if let Some(&(v, _)) = d.items.iter().find(|&&(v, _)| v > 1.0) {
            return Err(Error::Usage(format!(
                "--dropout-per-epoch: {v} is not a proportion in [0, 1]"
            )));
        }
    }
    let out_dir = a
        .out
        .clone()
        .ok_or_else(|| Error::Usage("compnet fit: --out <dir> is required".into()))?;
    in_range(
        "auto-adjust-threshold",
        a.auto_adjust_threshold.unwrap_or(0.0),
        0.0,
        f64::MAX,
    )?;
    in_range(
        "max-wall-time",
        a.max_wall_time.unwrap_or(0.0),
        0.0,
        f64::MAX,
    )?;
    if a.max_minibatches.unwrap_or(0) > MAX_MINIBATCHES {
        return Err(Error::Usage(format!(
            "--max-minibatches must be at most {MAX_MINIBATCHES} (0 = no limit)"
        )));
    }
    let opts = FitOptions {
        out_dir,
        num_epochs,
        stepper,
        gradient,
        learning_rate,
        exponential_decay,
        lr_per_minibatch,
        warmup: a.warmup.unwrap_or(0),
        minibatch_size: mb,
        dropout: a
            .dropout_schedule
            .as_deref()
            .map(DropoutSchedule::parse)
            .transpose()?,
        dropout_per_epoch,
        momentum_schedule,
        auto_adjust_factor: a.auto_adjust.unwrap_or(0.0),
        auto_adjust_threshold: a.auto_adjust_threshold.unwrap_or(0.0),
        max_reductions: a.max_reductions.unwrap_or(d.max_reductions),
        load_best_on_reduction: a.load_best.unwrap_or(true),
        early_stopping_patience: a.patience.unwrap_or(0),
        max_wall_seconds: a.max_wall_time.unwrap_or(0.0),
        max_minibatches: a.max_minibatches.unwrap_or(0),
        shuffle: a.shuffle.unwrap_or(true),
        srand: a.srand.unwrap_or(0),
        print_interval: a.print_interval.unwrap_or(d.print_interval).max(1),
        checkpoint_every: Every::parse(
            a.checkpoint_every.as_deref().unwrap_or("1"),
            "--checkpoint-every",
        )?,
        plot_every: Every::parse(a.plot_every.as_deref().unwrap_or("1"), "--plot-every")?,
        resume: a.resume.unwrap_or(false),
        reset_stepper_state: a.reset_stepper_state.unwrap_or(false),
        ..d
    };
    let mut opts = opts;
    let o = &mut opts.compiler.optimize;
    o.min_deriv_time = a.min_deriv_time.unwrap_or(o.min_deriv_time);
    o.max_deriv_time = a.max_deriv_time.unwrap_or(o.max_deriv_time);
    o.max_deriv_time_relative = a
        .max_deriv_time_relative
        .unwrap_or(o.max_deriv_time_relative);
    if o.min_deriv_time > o.max_deriv_time {
        return Err(Error::Usage(format!(
            "--min-deriv-time={} is above --max-deriv-time={}",
            o.min_deriv_time, o.max_deriv_time
        )));
    }
    if !(0.0..1.0).contains(&opts.auto_adjust_factor) {
        return Err(Error::Usage(format!(
            "--auto-adjust must be in [0, 1), got {}",
            opts.auto_adjust_factor
        )));
    }
    let chunk = ChunkOptions {
        chunk_width: a.chunk_width.unwrap_or({
            // CNTK's frame mode for HTK data: one frame per example.
            let htk = a
                .train
                .as_deref()
                .is_some_and(|t| std::path::Path::new(t).join("labels.mlf").exists());
            let w = if htk { 1 } else { 8 };
            ChunkWidth { min: w, max: w }
        }),
        extra_left_context: a.extra_left_context.unwrap_or(0),
        extra_right_context: a.extra_right_context.unwrap_or(0),
        labels: LabelKind::parse(a.labels.as_deref().unwrap_or("auto"))?,
        seed: opts.srand,
    };
    Ok((opts, chunk))
}

/// An option that names one of two choices (`--name=no|yes`, absent: `no`): whether it is
/// the second.
fn one_of_two(value: Option<&str>, name: &str, [no, yes]: [&str; 2]) -> Result<bool> {
    match value.unwrap_or(no) {
        v if v == no => Ok(false),
        v if v == yes => Ok(true),
        other => Err(Error::Usage(format!(
            "--{name}={other}: expected {no} or {yes}"
        ))),
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let mut lines = Vec::new();
    let a = match a.config.clone() {
        Some(path) => {
            let (file, text) = read_toml(&path)?;
            lines = file_lines(&text, &file.given(), &a.given());
            a.or(file)
        }
        None => a,
    };
    let config = a.config.clone().unwrap_or_default();
    let checked = (|| {
        super::args::check_num_threads(a.num_threads.unwrap_or(0))?;
        let format = a.format.as_deref().map(Format::parse).transpose()?;
        Ok((options(&a)?, format))
    })()
    .map_err(|e| locate(e, &config, &lines));
    let ((opts, chunk), format) = checked?;
    let (mode, bucket_mb) = (|| {
        let mode = ParallelMode::parse(a.parallel.as_deref().unwrap_or("none"))?;
        let mb = a.parallel_bucket_mb.unwrap_or(4.0);
        in_range("parallel-bucket-mb", mb, 1.0 / 1024.0, 1024.0)?;
        Ok((mode, mb))
    })()
    .map_err(|e| locate(e, &config, &lines))?;
    let mut par = join(mode, (bucket_mb * 1048576.0) as usize)?;
    // Every rank has a share of every full minibatch (and so stores statistics from the
    // first one on).
    if let Some(&(v, _)) = opts
        .minibatch_size
        .items
        .iter()
        .find(|&&(v, _)| (v as usize) < par.size())
    {
        let e = Error::Usage(format!(
            "--minibatch-size: {v} is below the number of ranks, {}: the size is the global \
             minibatch's, split over the ranks",
            par.size()
        ));
        if par.size() > 1 {
            if par.is_root() {
                eprintln!("ERROR (compnet fit) {e}");
            }
            par.abort(1)
        }
        return Err(e);
    }
    if par.size() == 1 {
        return train(&a, opts, chunk, format, &mut par);
    }
    if !par.is_root() {
        crate::log::set_quiet(true);
    }
    match train(&a, opts, chunk, format, &mut par) {
        Ok(code) => Ok(code),
        Err(e) => {
            // The other ranks wait in a collective call: end them all.
            eprintln!(
                "ERROR (compnet fit) rank {} of {}: {e}; ending the job",
                par.rank(),
                par.size()
            );
            par.abort(1)
        }
    }
}

/// Reads the model and data and trains (as rank `par.rank()` of a parallel job).
fn train(
    a: &Args,
    opts: FitOptions,
    chunk: ChunkOptions,
    format: Option<Format>,
    par: &mut Parallel,
) -> Result<i32> {
    let [model_in] = a.args.as_slice() else {
        return Err(Error::Usage(
            "usage: compnet fit [options] <config-or-model> --train <data> --valid <data> --out <dir>".into(),
        ));
    };
    set_threads(a.num_threads.unwrap_or(0));
    let device = a.device.as_deref().unwrap_or("cpu");
    let use_gpu =
        crate::matrix::device::UseGpu::from_device_option(device).map_err(Error::Usage)?;
    if use_gpu == crate::matrix::device::UseGpu::Yes {
        super::args::select_device(
            "compnet fit",
            "yes",
            &super::args::CudaOptions {
                use_tf32_compute: false,
            },
        )
        .map_err(|e| Error::Usage(format!("--device={device}: {e}")))?;
    }
    let train_spec = a
        .train
        .clone()
        .ok_or_else(|| Error::Usage("compnet fit: --train <data> is required".into()))?;
    let nnet = read_or_init(model_in, format, opts.srand)?;
    let train = load(&train_spec, &nnet, &chunk)?;
    let valid = a
        .valid
        .as_deref()
        .map(|v| load(v, &nnet, &chunk))
        .transpose()?;
    log(
        "compnet fit",
        &format!(
            "{} training examples from {train_spec}{}; stepper {}, {} epochs",
            train.examples.len(),
            valid.as_ref().map_or(String::new(), |v| format!(
                ", {} validation examples from {}",
                v.examples.len(),
                v.source
            )),
            opts.stepper.kind.name(),
            opts.num_epochs
        ),
    );
    let summary = fit_parallel(&opts, nnet, &train, valid.as_ref(), par)?;
    if !par.is_root() {
        return Ok(0);
    }
    if let Some(why) = &summary.stopped_early {
        println!("stopped early: {why}");
    }
    if let Some(last) = summary.records.last() {
        match (last.valid_objective, last.valid_accuracy) {
            (Some(o), Some(acc)) => println!(
                "validation accuracy {} (objective {}) after epoch {}",
                fmt_g(acc),
                fmt_g(o),
                last.epoch
            ),
            _ => println!(
                "training accuracy {} after epoch {}",
                fmt_g(last.train_accuracy),
                last.epoch
            ),
        }
    }
    println!("model: {}", summary.final_model);
    println!("curves: {}", summary.curves);
    Ok(0)
}
