//! The fit loop: epochs of minibatches from the data iterator, forward and backward into the
//! stepper's target network, the step, the schedules (learning rate, minibatch size, dropout,
//! AutoAdjust) and the hooks (monitor, saver, stoppers, visualiser).

use super::data::{minibatch_groups, spawn_loader, DataSet};
use super::hooks::{
    curves_svg, read_checkpoint, write_checkpoint, write_metrics, EpochRecord, Every, LoopState,
};
use super::schedule::{exponential_decay, warmup_factor, DropoutSchedule, EpochSchedule};
use super::stepper::{
    apply_plain_step, gradient_network, kaldi_update, param_shapes, GradientOptions, Stepper,
    StepperKind, StepperOptions,
};
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::compile::request::ComputationRequest;
use crate::compile::NnetComputation;
use crate::egs::merge::merge_examples;
use crate::error::{Error, Result};
use crate::io::egs::NnetExample;
use crate::io::le_bytes::ByteReader;
use crate::kaldi_rand::GlibcRand;
use crate::log::{fmt_g, log, warn};
use crate::nnet::Nnet;
use crate::run::NnetComputer;
use crate::train::diagnostics::{NnetComputeProb, NnetComputeProbOptions};
use crate::train::example::{computation_request, num_sequences};
use crate::train::network_ops::{scale_batchnorm_stats, zero_component_stats};
use crate::train::objective::compute_accuracy;
use crate::train::parallel::Parallel;
use crate::train::step::{output_objectives, run_pass, GradientReduction, KaldiUpdate};

const P: &str = "compnet fit";

/// Minibatches in a row whose parameter change is not finite after which the run stops.
const MAX_SKIPPED_IN_A_ROW: usize = 20;

/// Everything `compnet fit` is told (after defaults, the TOML file and the command line).
#[derive(Clone, Debug)]
pub struct FitOptions {
    pub out_dir: String,
    pub num_epochs: usize,
    pub stepper: StepperOptions,
    pub gradient: GradientOptions,
    /// Learning rate per epoch (CNTK notation); ignored when the exponential decay is set.
    pub learning_rate: EpochSchedule,
    /// Kaldi's decay: (initial, final) effective learning rate.
    pub exponential_decay: Option<(f64, f64)>,
    /// The learning rate is per minibatch (divided by its frames) rather than per sample.
    pub lr_per_minibatch: bool,
    /// Linear warm-up over this many minibatches.
    pub warmup: usize,
    pub minibatch_size: EpochSchedule,
    pub dropout: Option<DropoutSchedule>,
    /// The dropout proportion of every dropout component per epoch (CNTK's `dropoutRate`).
    pub dropout_per_epoch: Option<EpochSchedule>,
    /// The plain steppers' momentum per epoch (in place of `stepper.momentum`).
    pub momentum_schedule: Option<EpochSchedule>,
    /// AutoAdjust: reduce the learning rate by this factor when the validation objective
    /// improves by less than `auto_adjust_threshold` (0 = off); at most `max_reductions`
    /// times; with `load_best`, go back to the best model first.
    pub auto_adjust_factor: f64,
    pub auto_adjust_threshold: f64,
    pub max_reductions: usize,
    pub load_best_on_reduction: bool,
    pub early_stopping_patience: usize,
    /// Stop (after a checkpoint) once this many seconds have passed (0 = no limit).
    pub max_wall_seconds: f64,
    /// Stop (after a checkpoint) once this many minibatches are done in all (0 = no limit).
    pub max_minibatches: u64,
    pub shuffle: bool,
    pub srand: u64,
    pub print_interval: usize,
    pub checkpoint_every: Every,
    pub plot_every: Every,
    pub resume: bool,
    /// With `resume`: keep the checkpoint's model and position but start the stepper's state
    /// (momentum, moment estimates, natural-gradient estimates) afresh; needed to resume a
    /// checkpoint written by another stepper.
    pub reset_stepper_state: bool,
    pub zero_component_stats: bool,
    pub store_component_stats: bool,
    pub compiler: CachingCompilerOptions,
    /// Minibatches the loader may prepare ahead.
    pub prefetch: usize,
    /// CNTK's per-epoch models: after each epoch but the last, the model is also written to
    /// `<this>.<epoch>` (1-based), as CNTK names them beside its `modelPath`.
    pub epoch_models: Option<String>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            out_dir: String::new(),
            num_epochs: 10,
            stepper: StepperOptions::default(),
            gradient: GradientOptions::default(),
            learning_rate: EpochSchedule {
                items: vec![(0.001, 1)],
            },
            exponential_decay: None,
            lr_per_minibatch: false,
            warmup: 0,
            minibatch_size: EpochSchedule {
                items: vec![(64.0, 1)],
            },
            dropout: None,
            dropout_per_epoch: None,
            momentum_schedule: None,
            auto_adjust_factor: 0.0,
            auto_adjust_threshold: 0.0,
            max_reductions: 4,
            load_best_on_reduction: true,
            early_stopping_patience: 0,
            max_wall_seconds: 0.0,
            max_minibatches: 0,
            shuffle: true,
            srand: 0,
            print_interval: 100,
            checkpoint_every: Every::Epochs(1),
            plot_every: Every::Epochs(1),
            resume: false,
            reset_stepper_state: false,
            zero_component_stats: true,
            store_component_stats: true,
            compiler: CachingCompilerOptions::default(),
            prefetch: 4,
            epoch_models: None,
        }
    }
}

/// What a run ended with.
#[derive(Clone, Debug)]
pub struct FitSummary {
    pub records: Vec<EpochRecord>,
    pub final_model: String,
    pub curves: String,
    pub stopped_early: Option<String>,
}

/// Where the backward pass writes, and how the step is taken.
enum Updater {
    Plain { grad: Nnet, stepper: Stepper },
    Kaldi(Box<KaldiUpdate>),
}

/// Paths inside the output directory.
pub fn out_path(dir: &str, file: &str) -> String {
    format!("{}/{file}", dir.trim_end_matches('/'))
}

/// Sets the dropout proportion of the matching dropout components.
fn set_dropout(nnet: &mut Nnet, schedule: &DropoutSchedule, fraction: f64) {
    let p = schedule.value(fraction) as f32;
    for (c, name) in nnet.components.iter_mut().zip(&nnet.component_names) {
        if schedule.matches(name) {
            crate::nnet::component::dropout::set_dropout_proportion(c.as_mut(), p);
        }
    }
}

/// Objective and accuracy per frame of `nnet` on `data` (test mode: no dropout, BatchNorm's
/// stored statistics), per output; the first output's pair is returned.
pub fn evaluate(
    nnet: &Nnet,
    data: &DataSet,
    minibatch_size: usize,
    srand: u64,
) -> Result<Vec<(String, f64, f64, f64)>> {
    let mut test = nnet.clone();
    test.set_test_modes(true, true, srand);
    let mut prob = NnetComputeProb::new(
        NnetComputeProbOptions {
            program: P.into(),
            ..Default::default()
        },
        &test,
    );
    for g in minibatch_groups(data, minibatch_size, false, 0) {
        let egs: Vec<NnetExample> = g.iter().map(|&i| data.examples[i].clone()).collect();
        let eg = if egs.len() == 1 {
            egs.into_iter().next().expect("one")
        } else {
            merge_examples(&egs, false)?
        };
        prob.compute(&eg)
            .map_err(|e| Error::Compute(format!("{}: {e}", data.source)))?;
    }
    let mut out = Vec::new();
    for name in test.output_names() {
        if let Some(o) = prob.objective(name) {
            let acc = prob.accuracy(name).unwrap_or_default();
            out.push((
                name.to_string(),
                o.tot_objf / o.tot_weight,
                acc.tot_objf / acc.tot_weight,
                o.tot_weight,
            ));
        }
    }
    if out.is_empty() {
        return Err(Error::Compute(format!(
            "{}: nothing was evaluated",
            data.source
        )));
    }
    Ok(out)
}

/// Trains `nnet` on `train` (validating on `valid`) as `opts` says; writes the model,
/// checkpoints, metrics and curves into `opts.out_dir`.
pub fn fit(
    opts: &FitOptions,
    nnet: Nnet,
    train: &DataSet,
    valid: Option<&DataSet>,
) -> Result<FitSummary> {
    fit_parallel(opts, nnet, train, valid, &mut Parallel::single())
}

/// [`fit`] as one of `par`'s processes (`--parallel`): this rank trains on its share of each
/// minibatch, gradients or models meet at `par`, and rank 0 alone validates and writes.
pub fn fit_parallel(
    opts: &FitOptions,
    mut nnet: Nnet,
    train: &DataSet,
    valid: Option<&DataSet>,
    par: &mut Parallel,
) -> Result<FitSummary> {
    opts.stepper.validate()?;
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| Error::io(&opts.out_dir, e))?;
    let ckpt_path = out_path(&opts.out_dir, "checkpoint.ckpt");
    let best_path = out_path(&opts.out_dir, "best.raw");
    let metrics_path = out_path(&opts.out_dir, "metrics.jsonl");
    let curves_path = out_path(&opts.out_dir, "curves.svg");
    let final_path = out_path(&opts.out_dir, "final.raw");
    let kind = opts.stepper.kind;
    let mut state = LoopState {
        lr_factor: 1.0,
        num_parameters: nnet.num_parameters(),
        ..Default::default()
    };
    let mut stepper_bytes = None;
    let mut ng_bytes = Vec::new();
    if opts.resume && std::path::Path::new(&ckpt_path).exists() {
        let (s, mut parts) = read_checkpoint(&ckpt_path)?;
        ng_bytes = parts.pop().expect("four parts");
        let stats = parts.pop().expect("three parts");
        let st = parts.pop().expect("three parts");
        let model = parts.pop().expect("three parts");
        if s.num_parameters != nnet.num_parameters() {
            return Err(Error::Usage(format!(
                "{ckpt_path}: the checkpoint is of a network with {} parameters, this one has {} \
                 (a checkpoint of another network)",
                s.num_parameters,
                nnet.num_parameters()
            )));
        }
        let read = Nnet::read_model(&model, &ckpt_path)?.nnet;
        if !crate::train::network_ops::same_structure(&read, &nnet) {
            return Err(Error::Usage(format!(
                "{ckpt_path}: the checkpoint's network differs from this one (a checkpoint of \
                 another network)"
            )));
        }
        if let Some(what) = non_finite_part(&read) {
            return Err(Error::Usage(format!(
                "{ckpt_path}: {what} are not finite (a damaged checkpoint, or one of a \
                 diverged run)"
            )));
        }
        nnet = read;
        restore_stats(&mut nnet, &stats, &ckpt_path)?;
        state = s;
        // The stepper that wrote the state: its name opens the stepper part.
        let written = ByteReader::new(&st, &ckpt_path).cstr()?;
        if opts.reset_stepper_state {
            log(
                P,
                &format!(
                    "{ckpt_path}: the state of --stepper={written} is not used \
                     (--reset-stepper-state): --stepper={} starts afresh",
                    kind.name()
                ),
            );
            ng_bytes.clear();
        } else if written != kind.name() {
            return Err(Error::Usage(format!(
                "{ckpt_path}: the checkpoint was written with --stepper={written}, this run \
                 uses --stepper={}; add --reset-stepper-state to keep its model and position \
                 and start the stepper's state afresh",
                kind.name()
            )));
        } else {
            stepper_bytes = Some(st);
        }
        log(
            P,
            &format!(
                "Resuming from {ckpt_path}: epoch {}, minibatch {}",
                state.epoch + 1,
                state.position
            ),
        );
    } else if opts.zero_component_stats {
        zero_component_stats(&mut nnet);
    }
    // The command line's patience holds, also for a resumed run.
    state.early_stopping.patience = opts.early_stopping_patience;
    par.start(&mut nnet)?;
    let mut updater = if kind == StepperKind::NaturalGradient {
        let mut k = kaldi_update(&nnet, &opts.stepper, opts.srand);
        if let Some(b) = &stepper_bytes {
            k.read_state(b, &ckpt_path)?;
            super::ng_state::restore(&mut k.delta, &ng_bytes, &ckpt_path)?;
        }
        Updater::Kaldi(Box::new(k))
    } else {
        let mut stepper = Stepper::new(opts.stepper.clone());
        if let Some(b) = &stepper_bytes {
            stepper.read_state(b, &param_shapes(&nnet), &ckpt_path)?;
            if stepper.t > state.global_minibatch {
                return Err(Error::Usage(format!(
                    "{ckpt_path}: the stepper counts {} steps in {} minibatches (a damaged \
                     checkpoint)",
                    stepper.t, state.global_minibatch
                )));
            }
        }
        Updater::Plain {
            grad: gradient_network(&nnet),
            stepper,
        }
    };
    let compiler = CachingCompiler::new(opts.compiler.clone());
    let start = std::time::Instant::now();
    // The minibatch counts of every epoch, for the fraction of training done.
    let groups_of = |epoch: usize| {
        let mb = opts.minibatch_size.value(epoch).round().max(1.0) as usize;
        minibatch_groups(
            train,
            mb,
            opts.shuffle,
            opts.srand
                .wrapping_mul(1_000_003)
                .wrapping_add(epoch as u64),
        )
    };
    let total_minibatches: u64 = (0..opts.num_epochs)
        .map(|e| groups_of(e).len() as u64)
        .sum::<u64>()
        .max(1);
    if state.epoch < opts.num_epochs && state.position > groups_of(state.epoch).len() {
        return Err(Error::Usage(format!(
            "{ckpt_path}: minibatch {} of epoch {}, which has {} minibatches (a damaged \
             checkpoint, or other data or minibatch sizes)",
            state.position,
            state.epoch + 1,
            groups_of(state.epoch).len()
        )));
    }
    let mut stopped = None;
    let mut last_lr = 0.0;
    // Non-finite changes in a row: a few are skipped (as Kaldi does), a run of them means
    // the training diverged.
    let mut skipped_in_a_row = 0usize;
    'epochs: while state.epoch < opts.num_epochs {
        let epoch = state.epoch;
        let groups = groups_of(epoch);
        let n_groups = groups.len();
        // This rank's shares, and each minibatch's frames and sequences (global and local).
        let local = par.local_groups(&groups);
        let totals: Vec<[f64; 3]> = groups
            .iter()
            .zip(&local)
            .map(|(g, l)| {
                let (f, s) = group_totals(&nnet, train, g);
                [f, s, group_totals(&nnet, train, l).1]
            })
            .collect();
        let rx = spawn_loader(train, local, state.position, opts.prefetch);
        // A bar per epoch when stderr is a terminal; Kaldi-style log lines otherwise.
        let bar = crate::log::progress_spinner(&format!("epoch {}", epoch + 1)).inspect(|b| {
            b.set_length(n_groups as u64);
            b.set_position(state.position as u64);
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} minibatches {msg}")
            {
                b.set_style(style);
            }
        });
        let (mut frames_timer, mut frames_since) = (std::time::Instant::now(), 0.0f64);
        // Each minibatch's time runs from the end of the one before (loader waits included).
        let mut step_timer = std::time::Instant::now();
        for item in rx {
            let eg = item?;
            let progress = state.global_minibatch as f64 / total_minibatches as f64;
            let mut lr = match opts.exponential_decay {
                Some((a, b)) => exponential_decay(a, b, progress),
                None => opts.learning_rate.value(epoch),
            };
            lr *= warmup_factor(state.global_minibatch as usize, opts.warmup) * state.lr_factor;
            if let Some(d) = &opts.dropout {
                set_dropout(&mut nnet, d, progress);
            }
            if let Some(d) = &opts.dropout_per_epoch {
                let v = d.value(epoch);
                let all = DropoutSchedule {
                    pattern: "*".into(),
                    points: vec![(0.0, v), (1.0, v)],
                };
                set_dropout(&mut nnet, &all, progress);
            }
            let [frames, global_sequences, local_sequences] = totals[state.position];
            // Per-minibatch rates step along the mean gradient rather than the sum.
            let grad_scale = if opts.lr_per_minibatch {
                1.0 / frames.max(1.0)
            } else {
                1.0
            };
            let step_lr = (lr * par.lr_scale()) as f32;
            last_lr = lr;
            if let Updater::Kaldi(k) = &mut updater {
                // Natural gradient updates inside the backward pass, at the delta's rates.
                k.set_learning_rate((lr * par.lr_scale() * grad_scale) as f32);
            }
            // Forward, objectives, backward into the stepper's target (nothing on a rank
            // whose share of the minibatch is empty).
            let compiled = eg
                .as_ref()
                .map(|eg| {
                    let request = computation_request(&nnet, eg, true, opts.store_component_stats)
                        .map_err(|e| Error::Compute(format!("{}: {e}", train.source)))?;
                    let computation = compiler.compile(&nnet, &request)?;
                    if let Updater::Kaldi(k) = &mut updater {
                        k.replay_compile_draws(&nnet, &request, &compiler);
                    }
                    Ok::<_, Error>((eg, request, computation))
                })
                .transpose()?;
            let seed = par.rank_seed(opts.srand.wrapping_add(state.global_minibatch));
            let sequences = if par.global_step() {
                global_sequences
            } else {
                local_sequences
            } as usize;
            let not_finite = |objf: f64| {
                Error::Compute(format!(
                    "epoch {}, minibatch {}: the objective is not finite ({objf}); stopping \
                     (try a smaller learning rate); the last checkpoint is {ckpt_path}",
                    epoch + 1,
                    state.position
                ))
            };
            let backstitch = match &updater {
                Updater::Kaldi(k) => k.backstitch_now(state.global_minibatch),
                Updater::Plain { .. } => false,
            };
            let mut fb = |nnet: &mut Nnet, target: &mut Nnet, mut kaldi: Option<&mut GlibcRand>| {
                par.before_backward(target);
                let sums = match &compiled {
                    Some((eg, request, computation)) => forward_backward(
                        nnet,
                        target,
                        request,
                        computation,
                        eg,
                        seed,
                        kaldi.as_deref_mut(),
                        &train.source,
                    )?,
                    None => [0.0; 4],
                };
                par.reduce(target)?;
                if let Some(k) = kaldi {
                    par.sync_stream(k)?;
                }
                Ok::<_, Error>(sums)
            };
            let ([objf, weight, correct, acc_weight], ok) = match (&mut updater, backstitch) {
                (Updater::Kaldi(k), true) => {
                    // Kaldi's backstitch: both passes draw the same random numbers; the
                    // first uses the natural-gradient estimates without updating them. The
                    // first pass's objective is the minibatch's.
                    let n = state.global_minibatch;
                    k.freeze_natural_gradient(true);
                    k.reseed_for_backstitch(n);
                    let KaldiUpdate {
                        delta, kaldi_rand, ..
                    } = &mut **k;
                    let first = fb(&mut nnet, delta, Some(kaldi_rand))?;
                    if !first[0].is_finite() {
                        return Err(not_finite(first[0]));
                    }
                    let ok = k.backstitch_step(&mut nnet, sequences, true);
                    k.freeze_natural_gradient(false);
                    k.reseed_for_backstitch(n);
                    let KaldiUpdate {
                        delta, kaldi_rand, ..
                    } = &mut **k;
                    fb(&mut nnet, delta, Some(kaldi_rand))?;
                    (first, k.backstitch_step(&mut nnet, sequences, false) && ok)
                }
                (u, _) => {
                    let sums = match u {
                        Updater::Kaldi(k) => {
                            let KaldiUpdate {
                                delta, kaldi_rand, ..
                            } = &mut **k;
                            fb(&mut nnet, delta, Some(kaldi_rand))?
                        }
                        Updater::Plain { grad, .. } => fb(&mut nnet, grad, None)?,
                    };
                    if !sums[0].is_finite() {
                        return Err(not_finite(sums[0]));
                    }
                    let ok = match u {
                        Updater::Kaldi(k) => k.step(&mut nnet, sequences),
                        Updater::Plain { grad, stepper } => {
                            if let Some(m) = &opts.momentum_schedule {
                                stepper.opts.momentum = m.value(epoch) as f32;
                            }
                            let mut rng = crate::random::seeded_rng(
                                opts.srand
                                    ^ state.global_minibatch.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                            );
                            let ok = apply_plain_step(
                                stepper,
                                &mut nnet,
                                grad,
                                step_lr,
                                grad_scale as f32,
                                &opts.gradient,
                                sequences,
                                frames,
                                &mut rng,
                            );
                            scale_batchnorm_stats(0.8, &mut nnet);
                            ok
                        }
                    };
                    (sums, ok)
                }
            };
            if !ok {
                warn(P, &format!("epoch {}, minibatch {}: the parameter change is not finite; update skipped", epoch + 1, state.position));
                skipped_in_a_row += 1;
                if skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW {
                    return Err(Error::Compute(format!(
                        "epoch {}, minibatch {}: the training diverged: the last \
                         {MAX_SKIPPED_IN_A_ROW} parameter changes were not finite; stopping \
                         (try a smaller learning rate); the last checkpoint is {ckpt_path}",
                        epoch + 1,
                        state.position
                    )));
                }
            } else {
                skipped_in_a_row = 0;
            }
            par.after_step(&mut nnet, state.global_minibatch + 1)?;
            // The minibatch's figures over all ranks, and whether any rank is out of time.
            let out_of_time = opts.max_wall_seconds > 0.0
                && start.elapsed().as_secs_f64() >= opts.max_wall_seconds;
            let mut sums = [objf, weight, correct, acc_weight, out_of_time as u8 as f64];
            par.sum_scalars(&mut sums)?;
            let [objf, weight, correct, acc_weight, out_of_time] = sums;
            par.note_step(step_timer.elapsed(), frames);
            step_timer = std::time::Instant::now();
            state.train_objf += objf;
            state.train_weight += weight;
            state.train_correct += correct;
            state.train_acc_weight += acc_weight;
            state.position += 1;
            state.global_minibatch += 1;
            frames_since += frames;
            if let Some(b) = &bar {
                b.set_message(format!(
                    "epoch {}: objective {:.4}, {:.0} frames/s",
                    epoch + 1,
                    state.train_objf / state.train_weight,
                    frames_since / frames_timer.elapsed().as_secs_f64().max(1e-9)
                ));
                b.set_position(state.position as u64);
            } else if state.position.is_multiple_of(opts.print_interval.max(1)) {
                log(
                    P,
                    &format!(
                        "epoch {} minibatches {}: objective {} accuracy {} ({} frames/s)",
                        epoch + 1,
                        state.position,
                        fmt_g(state.train_objf / state.train_weight),
                        fmt_g(state.train_correct / state.train_acc_weight),
                        fmt_g(
                            (frames_since / frames_timer.elapsed().as_secs_f64().max(1e-9)).round()
                        )
                    ),
                );
                frames_timer = std::time::Instant::now();
                frames_since = 0.0;
            }
            if opts
                .checkpoint_every
                .after_minibatch(state.global_minibatch)
                && state.position < n_groups
            {
                save_on_root(par, &ckpt_path, &state, &mut nnet, &mut updater)?;
            }
            let out_of_time = out_of_time > 0.0;
            let out_of_minibatches =
                opts.max_minibatches > 0 && state.global_minibatch >= opts.max_minibatches;
            if out_of_time || out_of_minibatches {
                save_on_root(par, &ckpt_path, &state, &mut nnet, &mut updater)?;
                stopped = Some(if out_of_time {
                    format!(
                        "the wall-time limit of {} s was reached",
                        opts.max_wall_seconds
                    )
                } else {
                    format!(
                        "the limit of {} minibatches was reached",
                        opts.max_minibatches
                    )
                });
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
                break 'epochs;
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        // End of the epoch: validation, AutoAdjust, stoppers, metrics, curves, checkpoint.
        let (mut valid_objective, mut valid_accuracy) = (None, None);
        // The model rank 0 validates and writes (the ranks' statistics summed, or the
        // models averaged).
        let out_model = par.output_model(&mut nnet)?.into_owned();
        if let Some(v) = valid {
            if par.is_root() {
                let res = evaluate(&out_model, v, 64, opts.srand)?;
                valid_objective = Some(res[0].1);
                // No frame with an accuracy (weight 0) is no figure, not NaN.
                valid_accuracy = Some(res[0].2).filter(|a| !a.is_nan());
            }
            valid_objective = par.from_root(valid_objective)?;
            valid_accuracy = par.from_root(valid_accuracy)?;
        }
        let record = EpochRecord {
            epoch: epoch + 1,
            minibatches: state.global_minibatch,
            learning_rate: last_lr,
            train_objective: state.train_objf / state.train_weight,
            train_accuracy: if state.train_acc_weight != 0.0 {
                state.train_correct / state.train_acc_weight
            } else {
                0.0
            },
            valid_objective,
            valid_accuracy,
        };
        record.check().map_err(|why| {
            Error::Compute(format!(
                "the training diverged: {why}; stopping (try a smaller learning rate); the \
                 last checkpoint is {ckpt_path}"
            ))
        })?;
        log(P, &format!(
            "epoch {}: train objective {} accuracy {}; validation objective {} accuracy {}; learning rate {}",
            epoch + 1,
            fmt_g(record.train_objective),
            fmt_g(record.train_accuracy),
            valid_objective.map_or("-".into(), fmt_g),
            valid_accuracy.map_or("-".into(), fmt_g),
            fmt_g(last_lr)
        ));
        state.records.push(record);
        let mut stop_now = None;
        if let Some(vo) = valid_objective {
            let improved = state
                .best_valid
                .is_none_or(|b| vo > b + opts.auto_adjust_threshold);
            let new_best = state.best_valid.is_none_or(|b| vo > b);
            if new_best {
                state.best_valid = Some(vo);
                if par.is_root() {
                    out_model.write_model_file(&best_path, true)?;
                }
            }
            if !improved && opts.auto_adjust_factor > 0.0 && state.reductions < opts.max_reductions
            {
                state.lr_factor *= opts.auto_adjust_factor;
                state.reductions += 1;
                log(
                    P,
                    &format!(
                        "validation objective did not improve: learning rate factor now {}",
                        fmt_g(state.lr_factor)
                    ),
                );
                let load = opts.load_best_on_reduction
                    && !new_best
                    && par.is_root()
                    && std::path::Path::new(&best_path).exists();
                if par.from_root(Some(load as u8 as f64))? == Some(1.0) {
                    if par.is_root() {
                        nnet = Nnet::read_model_file(&best_path)?.nnet;
                    }
                    par.reloaded(&mut nnet)?;
                    log(P, &format!("loaded the best model so far, {best_path}"));
                }
            }
            if state.early_stopping.update(improved) {
                stop_now = Some(format!(
                    "no improvement on the validation set for {} epochs",
                    opts.early_stopping_patience
                ));
            }
        }
        state.epoch += 1;
        state.position = 0;
        state.train_objf = 0.0;
        state.train_weight = 0.0;
        state.train_correct = 0.0;
        state.train_acc_weight = 0.0;
        if par.is_root() {
            write_metrics(&metrics_path, &state.records)?;
            if opts.plot_every.after_epoch(state.epoch) || state.epoch == opts.num_epochs {
                crate::io::write_file_atomic(&curves_path, curves_svg(&state.records).as_bytes())?;
            }
        }
        if let Some(prefix) = &opts.epoch_models {
            if state.epoch < opts.num_epochs && stop_now.is_none() {
                let out = par.output_model(&mut nnet)?;
                if par.is_root() {
                    out.write_model_file(&format!("{prefix}.{}", state.epoch), true)?;
                }
            }
        }
        if opts.checkpoint_every.after_epoch(state.epoch)
            || state.epoch == opts.num_epochs
            || stop_now.is_some()
        {
            save_on_root(par, &ckpt_path, &state, &mut nnet, &mut updater)?;
        }
        if let Some(why) = stop_now {
            log(P, &format!("stopping early: {why}"));
            stopped = Some(why);
            break;
        }
    }
    let out = par.output_model(&mut nnet)?;
    if par.is_root() {
        crate::io::write_file_atomic(&curves_path, curves_svg(&state.records).as_bytes())?;
        out.write_model_file(&final_path, true)?;
    }
    if let Some(r) = par.report() {
        log(P, &r);
    }
    Ok(FitSummary {
        records: state.records,
        final_model: final_path,
        curves: curves_path,
        stopped_early: stopped,
    })
}

/// The step core's pass into `target` (the stepper's network): the objective, its weight,
/// the correct frames and the accuracy's weight, summed over the outputs.
#[allow(clippy::too_many_arguments)]
fn forward_backward(
    nnet: &mut Nnet,
    target: &mut Nnet,
    request: &ComputationRequest,
    computation: &NnetComputation,
    eg: &NnetExample,
    seed: u64,
    kaldi_rand: Option<&mut GlibcRand>,
    source: &str,
) -> Result<[f64; 4]> {
    let mut sums = [0.0; 4];
    let objectives = output_objectives(nnet, request);
    let computer = NnetComputer::for_training(computation, nnet, target).with_seed(seed);
    run_pass(computer, &objectives, request, eg, true, kaldi_rand, |o| {
        let acc = compute_accuracy(o.supervision, o.output);
        sums[0] += o.objective.tot_objf;
        sums[1] += o.objective.tot_weight;
        sums[2] += acc.tot_objf;
        sums[3] += acc.tot_weight;
        Ok(())
    })
    .map_err(|e| match e {
        Error::Compute(m) => Error::Compute(format!("{source}: {m}")),
        e => e,
    })?;
    Ok(sums)
}

/// The supervised frames and the sequences of a minibatch made of `group`'s examples.
fn group_totals(nnet: &Nnet, data: &DataSet, group: &[usize]) -> (f64, f64) {
    let mut frames = 0.0;
    let mut sequences = 0.0;
    for &i in group {
        let eg = &data.examples[i];
        frames += eg
            .io
            .iter()
            .filter(|io| nnet.objective_type(&io.name).is_some())
            .map(|io| io.features.num_rows() as f64)
            .sum::<f64>();
        sequences += num_sequences(eg) as f64;
    }
    (frames, sequences)
}

/// Writes the checkpoint on rank 0 (a collective call: every rank takes part in making the
/// model that is written).
fn save_on_root(
    par: &mut Parallel,
    path: &str,
    state: &LoopState,
    nnet: &mut Nnet,
    updater: &mut Updater,
) -> Result<()> {
    let out = par.output_model(nnet)?;
    if par.is_root() {
        save(path, state, &out, updater)?;
    }
    Ok(())
}

/// The first part of `nnet` that is not finite: an updatable component's parameters or a
/// component's exact statistics (for messages: "the parameters of component X").
fn non_finite_part(nnet: &Nnet) -> Option<String> {
    for (c, name) in nnet.components.iter().zip(&nnet.component_names) {
        if let Some(u) = c.as_updatable() {
            if !u.param_blocks().iter().all(|b| b.is_finite()) {
                return Some(format!("the parameters of component {name}"));
            }
        }
        if c.exact_stats().to_vec().iter().any(|x| !x.is_finite()) {
            return Some(format!("the statistics of component {name}"));
        }
    }
    None
}

/// Writes the checkpoint; a model or stepper state that is not finite (a diverged run) is
/// an error instead, and the previous checkpoint stays.
fn save(path: &str, state: &LoopState, nnet: &Nnet, updater: &mut Updater) -> Result<()> {
    let diverged = |what: String| {
        Error::Compute(format!(
            "epoch {}, minibatch {}: the training diverged: {what} are not finite; stopping \
             without writing {path} (the last checkpoint written, if any, is kept; try a \
             smaller learning rate)",
            state.epoch + 1,
            state.position
        ))
    };
    if let Some(what) = non_finite_part(nnet) {
        return Err(diverged(what));
    }
    let mut st = Vec::new();
    let mut ng = Vec::new();
    match updater {
        Updater::Plain { stepper, .. } => {
            if !stepper.is_finite() {
                return Err(diverged(format!(
                    "the {} stepper's statistics",
                    stepper.opts.kind.name()
                )));
            }
            stepper.write_state(&mut st)
        }
        Updater::Kaldi(k) => {
            if let Some(what) = non_finite_part(&k.delta) {
                return Err(diverged(format!("the momentum ({what})")));
            }
            k.write_state(&mut st);
            ng = super::ng_state::encode(&mut k.delta)?;
        }
    }
    write_checkpoint(
        path,
        state,
        [&nnet.write_model(true), &st, &encode_stats(nnet), &ng],
    )
}

/// Every component's exact statistics: per component a count and the values (f64 LE).
pub(super) fn encode_stats(nnet: &Nnet) -> Vec<u8> {
    let mut out = Vec::new();
    for c in &nnet.components {
        let s = c.exact_stats().to_vec();
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        for v in s {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Restores what [`encode_stats`] wrote.
pub(super) fn restore_stats(nnet: &mut Nnet, bytes: &[u8], file: &str) -> Result<()> {
    let mut r = ByteReader::new(bytes, file);
    for (c, name) in nnet.components.iter_mut().zip(&nnet.component_names) {
        let n = r.u64()?;
        if n > (bytes.len() / 8) as u64 {
            return Err(r.err("a statistics list longer than the checkpoint"));
        }
        let v = r.finite_vector64(n as usize, &format!("the statistics of component {name}"))?;
        if !c.set_exact_stats(&v) {
            return Err(Error::Usage(format!(
                "{file}: the statistics of component {name} do not fit it (a checkpoint of \
                 another network?)"
            )));
        }
    }
    Ok(())
}
