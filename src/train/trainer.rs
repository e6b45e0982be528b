//! The trainer (Kaldi's `NnetTrainer`, facts §7.1): one call per merged minibatch runs the
//! forward pass, puts each output's objective derivative in, runs the backward pass into a
//! delta network, and applies the delta with L2, max-change and momentum; optionally in
//! two backstitch steps.

use super::example::{computation_request, num_sequences};
use super::log::{fmt_g, log, warn};
use super::nnet_update::{
    apply_l2_regularization, constrain_orthonormal, freeze_natural_gradient, scale_batchnorm_stats,
    update_nnet_with_max_change, zero_component_stats, MaxChangeStats,
};
use super::objective::compute_objective;
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::compile::kaldi_draws::KaldiCompileDraws;
use crate::compile::NnetComputation;
use crate::egs::kaldi_rand::GlibcRand;
use crate::error::{Error, Result};
use crate::io::egs::NnetExample;
use crate::nnet::{Nnet, ObjectiveType};
use crate::run::NnetComputer;
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// Trains a network one minibatch at a time.
pub struct NnetTrainer<'a> {
    opts: NnetTrainerOptions,
    nnet: &'a mut Nnet,
    /// Same components as `nnet`, holding the (learning-rate-scaled) gradient, and the
    /// momentum between minibatches.
    delta: Nnet,
    compiler: CachingCompiler,
    objectives: BTreeMap<String, ObjectiveFunctionInfo>,
    num_minibatches_processed: usize,
    max_change: MaxChangeStats,
    /// Kaldi's process-wide `rand()` stream, `srand(--srand)` as `nnet3-train` seeds it:
    /// statistics sampling, self-repair, the orthonormal constraint and the compiler's checks
    /// draw from it in Kaldi's order, so that the stored statistics are Kaldi's.
    kaldi_rand: GlibcRand,
    /// Kaldi's `srand_seed_` (the stream's first draw, `RandInt(0, 100000)`): which
    /// minibatches take a backstitch step, and the reseed before each backstitch pass.
    srand_seed: i32,
    /// The compilations Kaldi would make, replayed for their draws.
    kaldi_draws: KaldiCompileDraws,
}

impl<'a> NnetTrainer<'a> {
    pub fn new(opts: NnetTrainerOptions, nnet: &'a mut Nnet) -> Result<Self> {
        if opts.momentum < 0.0 || opts.momentum >= 1.0 || !opts.momentum.is_finite() {
            return Err(Error::Usage(format!(
                "--momentum must be in [0, 1), got {}",
                opts.momentum
            )));
        }
        if opts.backstitch_training_scale > 0.0 && opts.momentum > 0.0 {
            return Err(Error::Usage(
                "backstitch training is incompatible with --momentum > 0".into(),
            ));
        }
        if opts.print_interval == 0 || opts.backstitch_training_interval == 0 {
            return Err(Error::Usage(
                "--print-interval and --backstitch-training-interval must be positive".into(),
            ));
        }
        for (what, v) in [
            ("--max-param-change", opts.max_param_change),
            ("--l2-regularize-factor", opts.l2_regularize_factor),
            (
                "--backstitch-training-scale",
                opts.backstitch_training_scale,
            ),
            ("--batchnorm-stats-scale", opts.batchnorm_stats_scale),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::Usage(format!(
                    "{what} must be a finite number >= 0, got {v}"
                )));
            }
        }
        if opts.zero_component_stats {
            zero_component_stats(nnet);
        }
        let mut delta = nnet.clone();
        delta.scale_all(0.0);
        let mut kaldi_rand = GlibcRand::new(opts.srand as u32);
        let srand_seed = kaldi_rand.rand_int(0, 100_000);
        let compiler = CachingCompiler::new(opts.compiler.clone());
        Ok(NnetTrainer {
            opts,
            nnet,
            delta,
            compiler,
            objectives: BTreeMap::new(),
            num_minibatches_processed: 0,
            max_change: MaxChangeStats::default(),
            kaldi_rand,
            srand_seed,
            kaldi_draws: KaldiCompileDraws::default(),
        })
    }

    fn compile(&mut self, eg: &NnetExample) -> Result<Arc<NnetComputation>> {
        let request = computation_request(self.nnet, eg, true, self.opts.store_component_stats)?;
        let computation = self.compiler.compile(self.nnet, &request)?;
        let compiler = &self.compiler;
        self.kaldi_draws.draw(
            self.nnet,
            &request,
            compiler.options().use_shortcut,
            &mut |r| compiler.peek(r),
            &mut self.kaldi_rand,
        );
        Ok(computation)
    }

    /// Kaldi's `GetNumNvalues(eg.io, false)`: the sequence count, after its one draw (a
    /// spot check on one call in 101).
    fn num_n_values(&mut self, eg: &NnetExample) -> usize {
        self.kaldi_rand.rand_int(0, 100);
        num_sequences(eg)
    }

    /// Trains on one (merged) minibatch.
    pub fn train(&mut self, eg: &NnetExample) -> Result<()> {
        let computation = self.compile(eg)?;
        crate::train::log::vlog(1, &self.opts.program, || {
            format!(
                "minibatch {}: {} sequences, a computation of {} commands",
                self.num_minibatches_processed,
                num_sequences(eg),
                computation.commands.len()
            )
        });
        let interval = self.opts.backstitch_training_interval;
        let seed = self
            .opts
            .srand
            .wrapping_add(self.num_minibatches_processed as u64);
        if self.opts.backstitch_training_scale > 0.0
            && self.num_minibatches_processed % interval == self.srand_seed as usize % interval
        {
            // Both steps draw the same random numbers (same dropout masks).
            freeze_natural_gradient(true, &mut self.delta);
            self.backstitch_step(eg, &computation, seed, true)?;
            freeze_natural_gradient(false, &mut self.delta);
            self.backstitch_step(eg, &computation, seed, false)?;
        } else {
            self.forward_backward(eg, &computation, seed, "")?;
            let l2_scale = self.num_n_values(eg) as f32 * self.opts.l2_regularize_factor;
            apply_l2_regularization(self.nnet, l2_scale, &mut self.delta);
            let ok = self.apply_delta(1.0, 1.0 - self.opts.momentum);
            scale_batchnorm_stats(self.opts.batchnorm_stats_scale, self.nnet);
            constrain_orthonormal(self.nnet, &mut self.kaldi_rand);
            self.delta
                .scale_all(if ok { self.opts.momentum } else { 0.0 });
        }
        self.num_minibatches_processed += 1;
        Ok(())
    }

    /// Forward, objectives (logged under `output name + suffix`), backward into the delta.
    fn forward_backward(
        &mut self,
        eg: &NnetExample,
        computation: &NnetComputation,
        seed: u64,
        suffix: &str,
    ) -> Result<()> {
        // The example's supervised outputs (the request checked every io against the network).
        let outputs: Vec<(String, ObjectiveType)> = eg
            .io
            .iter()
            .filter_map(|io| Some((io.name.clone(), self.nnet.objective_type(&io.name)?)))
            .collect();
        let mut sums = Vec::new();
        {
            let mut computer = NnetComputer::for_training(computation, self.nnet, &mut self.delta)
                .with_seed(seed)
                .with_kaldi_rand(std::mem::take(&mut self.kaldi_rand));
            for io in &eg.io {
                if !outputs.iter().any(|(n, _)| n == &io.name) {
                    computer.accept_input(&io.name, io.features.to_matrix())?;
                }
            }
            computer.run_forward()?;
            for (name, objective) in &outputs {
                let sup = eg
                    .get(name)
                    .map(|io| &io.features)
                    .ok_or_else(|| Error::Compute(format!("no supervision for '{name}'")))?;
                let (sum, deriv) =
                    compute_objective(name, *objective, sup, computer.output(name)?, true)?;
                if let Some(d) = deriv {
                    computer.accept_output_deriv(name, d)?;
                }
                sums.push((format!("{name}{suffix}"), sum));
            }
            computer.run_backward()?;
            if let Some(r) = computer.take_kaldi_rand() {
                self.kaldi_rand = r;
            }
        }
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

    /// nnet += scale × delta under max-change; warns when the change is not finite.
    fn apply_delta(&mut self, max_change_scale: f32, scale: f32) -> bool {
        let ok = update_nnet_with_max_change(
            &self.delta,
            self.opts.max_param_change,
            max_change_scale,
            scale,
            self.nnet,
            &mut self.max_change,
        );
        if !ok {
            warn(&self.opts.program, &format!(
                "minibatch {}: the parameter change is not finite (NaN or infinity in the gradient); update skipped",
                self.num_minibatches_processed
            ));
        }
        ok
    }

    fn backstitch_step(
        &mut self,
        eg: &NnetExample,
        computation: &NnetComputation,
        seed: u64,
        first: bool,
    ) -> Result<()> {
        let alpha = self.opts.backstitch_training_scale;
        // Kaldi reseeds before each pass: both draw the same values (same masks, same
        // statistics choices).
        self.kaldi_rand = GlibcRand::new(
            self.srand_seed
                .wrapping_add(self.num_minibatches_processed as i32) as u32,
        );
        self.forward_backward(
            eg,
            computation,
            seed,
            if first { "" } else { "_backstitch" },
        )?;
        let (max_change_scale, scale) = if first {
            (alpha, -alpha)
        } else {
            (1.0 + alpha, 1.0 + alpha)
        };
        if !first {
            let l2_scale = self.num_n_values(eg) as f32 * self.opts.l2_regularize_factor / scale;
            apply_l2_regularization(self.nnet, l2_scale, &mut self.delta);
        }
        self.apply_delta(max_change_scale, scale);
        if first {
            constrain_orthonormal(self.nnet, &mut self.kaldi_rand);
        } else {
            scale_batchnorm_stats(self.opts.batchnorm_stats_scale, self.nnet);
        }
        self.delta.scale_all(0.0);
        Ok(())
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
        for (name, &count) in names.zip(&self.max_change.per_component) {
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
        if self.max_change.global > 0 {
            log(
                p,
                &format!(
                    "The global max-change was enforced {} % of the time.",
                    fmt_g(100.0 * self.max_change.global as f64 / n)
                ),
            );
        }
        if self.max_change.non_finite > 0 {
            warn(
                p,
                &format!(
                    "{} of {} minibatches had a non-finite parameter change and were not applied.",
                    self.max_change.non_finite, self.num_minibatches_processed
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
        &self.max_change
    }
}
