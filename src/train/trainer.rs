//! The trainer (Kaldi's `NnetTrainer`, facts §7.1): one call per merged minibatch runs the
//! step core's pass (forward, objective derivatives, backward into the delta network) and
//! its Kaldi update (L2, max-change, momentum; optionally backstitch's two steps), and keeps
//! the objective sums and log lines of `nnet3-train`.

use super::example::{computation_request, num_sequences};
use super::network_ops::{zero_component_stats, MaxChangeStats};
use super::step::{
    output_objectives, run_pass, GradientReduction, KaldiUpdate, KaldiUpdateOptions, SingleProcess,
};
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::compile::request::ComputationRequest;
use crate::compile::NnetComputation;
use crate::error::{Error, Result};
use crate::io::egs::NnetExample;
use crate::log::{fmt_g, log, warn};
use crate::nnet::Nnet;
use crate::run::NnetComputer;
use std::collections::BTreeMap;

/// Options of the trainer, with Kaldi's defaults (`NnetTrainerOptions`).
#[derive(Clone, Debug)]
pub struct NnetTrainerOptions {
    /// Zero the component statistics before training.
    pub zero_component_stats: bool,
    /// Accumulate component statistics (BatchNorm, nonlinearities) while training.
    pub store_component_stats: bool,
    /// Minibatches per objective log line.
    pub print_interval: usize,
    /// Momentum (0 = none); the learning rate is effectively unchanged by it.
    pub momentum: f32,
    /// Multiplies every component's `l2-regularize`.
    pub l2_regularize_factor: f32,
    /// Backstitch scale α (0 = off).
    pub backstitch_training_scale: f32,
    /// Do backstitch on every this-many-th minibatch.
    pub backstitch_training_interval: usize,
    /// BatchNorm statistics are scaled by this after every minibatch.
    pub batchnorm_stats_scale: f32,
    /// Limit on the norm of the whole change per minibatch (0 = none).
    pub max_param_change: f32,
    /// Seeds every random choice (dropout masks, statistics sampling, orthonormal steps).
    pub srand: u64,
    /// The compiler's options (`--compiler.*`, `--optimization.*`).
    pub compiler: CachingCompilerOptions,
    /// Name in log lines.
    pub program: String,
}

impl Default for NnetTrainerOptions {
    fn default() -> Self {
        NnetTrainerOptions {
            zero_component_stats: true,
            store_component_stats: true,
            print_interval: 100,
            momentum: 0.0,
            l2_regularize_factor: 1.0,
            backstitch_training_scale: 0.0,
            backstitch_training_interval: 1,
            batchnorm_stats_scale: 0.8,
            max_param_change: 2.0,
            srand: 0,
            compiler: CachingCompilerOptions::default(),
            program: "compnet train".into(),
        }
    }
}

/// Running sums of one output's objective, with the per-phase part Kaldi logs every
/// `print_interval` minibatches (`ObjectiveFunctionInfo`).
#[derive(Clone, Debug, Default)]
pub struct ObjectiveFunctionInfo {
    current_phase: usize,
    minibatches_this_phase: usize,
    tot_weight_this_phase: f64,
    tot_objf_this_phase: f64,
    pub tot_weight: f64,
    pub tot_objf: f64,
}

impl ObjectiveFunctionInfo {
    fn update(
        &mut self,
        name: &str,
        program: &str,
        print_interval: usize,
        minibatch: usize,
        weight: f64,
        objf: f64,
    ) {
        let phase = minibatch / print_interval;
        if phase != self.current_phase {
            self.print_phase(name, program, print_interval);
            self.current_phase = phase;
            self.minibatches_this_phase = 0;
            self.tot_weight_this_phase = 0.0;
            self.tot_objf_this_phase = 0.0;
        }
        self.minibatches_this_phase += 1;
        self.tot_weight_this_phase += weight;
        self.tot_objf_this_phase += objf;
        self.tot_weight += weight;
        self.tot_objf += objf;
    }

    fn print_phase(&self, name: &str, program: &str, print_interval: usize) {
        let start = self.current_phase * print_interval;
        let end = start + print_interval - 1;
        let avg = fmt_g(self.tot_objf_this_phase / self.tot_weight_this_phase);
        let frames = fmt_g(self.tot_weight_this_phase);
        if self.minibatches_this_phase == print_interval {
            log(program, &format!(
                "Average objective function for '{name}' for minibatches {start}-{end} is {avg} over {frames} frames."
            ));
        } else {
            // Kaldi's line for a partial phase (its quote placement included).
            log(program, &format!(
                "Average objective function for '{name} using {} minibatches in minibatch range {start}-{end} is {avg} over {frames} frames.",
                self.minibatches_this_phase
            ));
        }
    }

    /// The objective per frame so far.
    pub fn average(&self) -> f64 {
        self.tot_objf / self.tot_weight
    }
}

impl NnetTrainerOptions {
    /// The update's share of the options.
    pub fn update_options(&self) -> KaldiUpdateOptions {
        KaldiUpdateOptions {
            momentum: self.momentum,
            max_param_change: self.max_param_change,
            l2_regularize_factor: self.l2_regularize_factor,
            batchnorm_stats_scale: self.batchnorm_stats_scale,
            backstitch_training_scale: self.backstitch_training_scale,
            backstitch_training_interval: self.backstitch_training_interval,
        }
    }
}

/// Trains a network one minibatch at a time.
pub struct NnetTrainer<'a> {
    opts: NnetTrainerOptions,
    nnet: &'a mut Nnet,
    /// The delta network (the learning-rate-scaled gradient, the momentum between
    /// minibatches) and the update that applies it.
    update: KaldiUpdate,
    compiler: CachingCompiler,
    objectives: BTreeMap<String, ObjectiveFunctionInfo>,
    num_minibatches_processed: usize,
}

impl<'a> NnetTrainer<'a> {
    pub fn new(opts: NnetTrainerOptions, nnet: &'a mut Nnet) -> Result<Self> {
        opts.update_options().validate()?;
        if opts.print_interval == 0 {
            return Err(Error::Usage("--print-interval must be positive".into()));
        }
        if opts.zero_component_stats {
            zero_component_stats(nnet);
        }
        let update = KaldiUpdate::new(nnet, opts.update_options(), opts.srand);
        let compiler = CachingCompiler::new(opts.compiler.clone());
        Ok(NnetTrainer {
            opts,
            nnet,
            update,
            compiler,
            objectives: BTreeMap::new(),
            num_minibatches_processed: 0,
        })
    }

    /// Trains on one (merged) minibatch.
    pub fn train(&mut self, eg: &NnetExample) -> Result<()> {
        let request = computation_request(self.nnet, eg, true, self.opts.store_component_stats)?;
        let computation = crate::run::profile::timed(
            || "trainer: compile (cached)".into(),
            || self.compiler.compile(self.nnet, &request),
        )?;
        self.update
            .replay_compile_draws(self.nnet, &request, &self.compiler);
        crate::log::vlog(1, &self.opts.program, || {
            format!(
                "minibatch {}: {} sequences, a computation of {} commands",
                self.num_minibatches_processed,
                num_sequences(eg),
                computation.commands.len()
            )
        });
        let seed = self
            .opts
            .srand
            .wrapping_add(self.num_minibatches_processed as u64);
        let sequences = num_sequences(eg);
        let n = self.num_minibatches_processed as u64;
        if self.update.backstitch_now(n) {
            // Both passes draw the same random numbers (the stream is reseeded before each);
            // the first uses the natural-gradient estimates without updating them.
            self.update.freeze_natural_gradient(true);
            self.update.reseed_for_backstitch(n);
            self.forward_backward(eg, &request, &computation, seed, "")?;
            let ok = self.update.backstitch_step(self.nnet, sequences, true);
            self.warn_unless(ok);
            self.update.freeze_natural_gradient(false);
            self.update.reseed_for_backstitch(n);
            self.forward_backward(eg, &request, &computation, seed, "_backstitch")?;
            let ok = self.update.backstitch_step(self.nnet, sequences, false);
            self.warn_unless(ok);
        } else {
            self.forward_backward(eg, &request, &computation, seed, "")?;
            let ok = crate::run::profile::timed(
                || "trainer: update".into(),
                || self.update.step(self.nnet, sequences),
            );
            self.warn_unless(ok);
        }
        self.num_minibatches_processed += 1;
        Ok(())
    }

    /// The step core's pass: objectives logged under `output name + suffix`, the gradient
    /// into the delta network.
    fn forward_backward(
        &mut self,
        eg: &NnetExample,
        request: &ComputationRequest,
        computation: &NnetComputation,
        seed: u64,
        suffix: &str,
    ) -> Result<()> {
        let mut sums = Vec::new();
        let nnet = &mut *self.nnet;
        let objectives = output_objectives(nnet, request);
        let KaldiUpdate {
            delta, kaldi_rand, ..
        } = &mut self.update;
        let computer = NnetComputer::for_training(computation, nnet, delta).with_seed(seed);
        run_pass(
            computer,
            &objectives,
            request,
            eg,
            true,
            Some(kaldi_rand),
            |o| {
                sums.push((format!("{}{suffix}", o.name), o.objective));
                Ok(())
            },
        )?;
        SingleProcess.reduce(&mut self.update.delta)?;
        let (program, interval, mb) = (
            self.opts.program.clone(),
            self.opts.print_interval,
            self.num_minibatches_processed,
        );
        for (name, s) in sums {
            self.objectives.entry(name.clone()).or_default().update(
                &name,
                &program,
                interval,
                mb,
                s.tot_weight,
                s.tot_objf,
            );
        }
        Ok(())
    }

    /// Kaldi's warning when the change of a minibatch was not finite and was skipped.
    fn warn_unless(&self, ok: bool) {
        if !ok {
            warn(&self.opts.program, &format!(
                "minibatch {}: the parameter change is not finite (NaN or infinity in the gradient); update skipped",
                self.num_minibatches_processed
            ));
        }
    }

    /// Logs the overall objectives and how often max-change acted; false when nothing was
    /// trained on (Kaldi's `PrintTotalStats`).
    pub fn print_total_stats(&self) -> bool {
        let p = &self.opts.program;
        let mut any = false;
        for (name, info) in &self.objectives {
            let avg = fmt_g(info.average());
            log(
                p,
                &format!(
                    "Overall average objective function for '{name}' is {avg} over {} frames.",
                    fmt_g(info.tot_weight)
                ),
            );
            log(
                p,
                &format!("[this line is to be parsed by a script:] log-prob-per-frame={avg}"),
            );
            any |= info.tot_weight != 0.0 && info.tot_weight.is_finite();
        }
        let n = self.num_minibatches_processed.max(1) as f64;
        let names = self
            .nnet
            .components
            .iter()
            .zip(&self.nnet.component_names)
            .filter(|(c, _)| c.as_updatable().is_some())
            .map(|(_, n)| n);
        for (name, &count) in names.zip(&self.update.max_change.per_component) {
            if count > 0 {
                log(
                    p,
                    &format!(
                        "For {name}, per-component max-change was enforced {} % of the time.",
                        fmt_g(100.0 * count as f64 / n)
                    ),
                );
            }
        }
        if self.update.max_change.global > 0 {
            log(
                p,
                &format!(
                    "The global max-change was enforced {} % of the time.",
                    fmt_g(100.0 * self.update.max_change.global as f64 / n)
                ),
            );
        }
        if self.update.max_change.non_finite > 0 {
            warn(
                p,
                &format!(
                    "{} of {} minibatches had a non-finite parameter change and were not applied.",
                    self.update.max_change.non_finite, self.num_minibatches_processed
                ),
            );
        }
        let st = self.compiler.stats();
        log(
            p,
            &format!(
                "{} seconds taken in nnet3 compilation total ({} computations compiled, {} of \
                 them by the shortcut; {} cache hits).",
                fmt_g(st.compile_time.as_secs_f64()),
                st.misses,
                st.shortcuts,
                st.hits
            ),
        );
        any
    }

    /// Per-output objective sums so far.
    pub fn objectives(&self) -> &BTreeMap<String, ObjectiveFunctionInfo> {
        &self.objectives
    }

    /// Minibatches trained on.
    pub fn num_minibatches_processed(&self) -> usize {
        self.num_minibatches_processed
    }

    /// Max-change statistics so far.
    pub fn max_change_stats(&self) -> &MaxChangeStats {
        &self.update.max_change
    }
}
