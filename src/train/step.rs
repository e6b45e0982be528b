//! The step core: the one forward (and backward) pass over an example that every training and
//! evaluation tool runs, and the one update sequence with Kaldi's semantics that `train` and
//! `fit --stepper=ng` apply after it.
//!
//! - [`run_pass`] hands an example's inputs to a computer, runs the forward pass, computes
//!   each supervised output's objective (its derivative too when training) and, when
//!   training, the backward pass. `compnet train` ([`super::NnetTrainer`]), `compnet fit`,
//!   `compute-prob`, `combine` and `eval` ([`super::NnetComputeProb`]) and the statistics
//!   recomputation all go through it; nothing else in the crate runs a training or evaluation
//!   computation.
//! - [`KaldiUpdate`] is Kaldi's `NnetTrainer` update after a backward pass into its delta
//!   network: L2, max-change, momentum, BatchNorm statistics decay, the orthonormal
//!   constraint, and backstitch's two steps on every `backstitch-interval`-th minibatch.
//! - [`GradientReduction`] is where a gradient meets the other processes of a data-parallel
//!   job before it is applied: after the backward pass, before the update. One process
//!   reduces nothing ([`SingleProcess`]).
//!
//! The device is chosen where [`run_pass`]'s computer is built: the computer allocates every
//! matrix of the computation, and the network's parameters live with the network, so a
//! second backend enters through [`crate::run::NnetComputer`] and the network's storage,
//! not here.

use super::network_ops::{
    apply_l2_regularization, constrain_orthonormal, freeze_natural_gradient, scale_batchnorm_stats,
    update_nnet_with_max_change, MaxChangeStats,
};
use super::objective::{compute_objective, ObjectiveSum};
use crate::compile::kaldi_draws::KaldiCompileDraws;
use crate::compile::request::ComputationRequest;
use crate::compile::CachingCompiler;
use crate::error::{Error, Result};
use crate::io::egs::NnetExample;
use crate::io::GeneralMatrix;
use crate::kaldi_rand::GlibcRand;
use crate::matrix::{MatView, MatViewMut, Matrix};
use crate::nnet::{Nnet, ObjectiveType};
use crate::run::NnetComputer;

/// One supervised output after the forward pass: its name, objective type, supervision, the
/// network's output and the objective summed over the minibatch.
pub struct OutputResult<'a> {
    pub name: &'a str,
    pub objective_type: ObjectiveType,
    pub supervision: &'a GeneralMatrix,
    pub output: &'a Matrix,
    pub objective: ObjectiveSum,
}

/// The objective of each output of `request`, in order (taken before the computer borrows
/// the network).
pub fn output_objectives(nnet: &Nnet, request: &ComputationRequest) -> Vec<ObjectiveType> {
    request
        .outputs
        .iter()
        .map(|o| nnet.objective_type(&o.name).unwrap_or_default())
        .collect()
}

/// Runs `computer` (compiled for `request`, made from `eg`) on `eg`: the inputs in, the
/// forward pass, every requested output's objective (`objectives`, from
/// [`output_objectives`]) handed to `each_output`, and with
/// `backward` the objectives' derivatives in and the backward pass. `kaldi_rand`, when given,
/// is lent to the computer for the pass (the components' draws from Kaldi's `rand()` stream)
/// and comes back where the pass left it.
#[allow(clippy::too_many_arguments)]
pub fn run_pass(
    mut computer: NnetComputer<'_>,
    objectives: &[ObjectiveType],
    request: &ComputationRequest,
    eg: &NnetExample,
    backward: bool,
    kaldi_rand: Option<&mut GlibcRand>,
    mut each_output: impl FnMut(OutputResult<'_>) -> Result<()>,
) -> Result<()> {
    let kaldi_rand = match kaldi_rand {
        Some(k) => {
            computer = computer.with_kaldi_rand(std::mem::take(k));
            Some(k)
        }
        None => None,
    };
    run_forward(&mut computer, request, eg)?;
    for (spec, &objective_type) in request.outputs.iter().zip(objectives) {
        let name = spec.name.as_str();
        let supervision = eg
            .get(name)
            .map(|io| &io.features)
            .ok_or_else(|| Error::Compute(format!("no supervision for '{name}'")))?;
        let output = computer.output(name)?;
        let (objective, deriv) = crate::run::profile::timed(
            || "objective".into(),
            || compute_objective(name, objective_type, supervision, output, backward),
        )?;
        each_output(OutputResult {
            name,
            objective_type,
            supervision,
            output,
            objective,
        })?;
        if let Some(d) = deriv {
            computer.accept_output_deriv(name, d)?;
        }
    }
    if backward {
        computer.run_backward()?;
    }
    if let (Some(k), Some(r)) = (kaldi_rand, computer.take_kaldi_rand()) {
        *k = r;
    }
    Ok(())
}

/// The first half of [`run_pass`], alone for the commands that read outputs without an
/// objective: the example's inputs that `request` names handed to `computer`, then the
/// forward pass.
pub fn run_forward(
    computer: &mut NnetComputer<'_>,
    request: &ComputationRequest,
    eg: &NnetExample,
) -> Result<()> {
    for spec in &request.inputs {
        if let Some(io) = eg.get(&spec.name) {
            let m =
                crate::run::profile::timed(|| "input to matrix".into(), || io.features.to_matrix());
            computer.accept_input(&spec.name, m)?;
        }
    }
    computer.run_forward()
}

/// Where a data-parallel job sums the gradient of every process before the update: called
/// once per minibatch with the network the backward pass wrote into (the delta network of
/// [`KaldiUpdate`], a plain stepper's gradient network), after the backward pass and before
/// any of it is applied.
pub trait GradientReduction {
    /// Replaces `target`'s parameters (and statistics gathered in it) by their sum over
    /// the processes.
    fn reduce(&mut self, target: &mut Nnet) -> Result<()>;
}

/// One process: the gradient is already whole.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleProcess;

impl GradientReduction for SingleProcess {
    fn reduce(&mut self, _target: &mut Nnet) -> Result<()> {
        Ok(())
    }
}

/// The settings of [`KaldiUpdate`], with Kaldi's `NnetTrainerOptions` defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct KaldiUpdateOptions {
    /// Momentum (0 = none); the learning rate is effectively unchanged by it.
    pub momentum: f32,
    /// Limit on the norm of the whole change per minibatch (0 = none).
    pub max_param_change: f32,
    /// Multiplies every component's `l2-regularize`.
    pub l2_regularize_factor: f32,
    /// BatchNorm statistics are scaled by this after every minibatch.
    pub batchnorm_stats_scale: f32,
    /// Backstitch scale α (0 = off).
    pub backstitch_training_scale: f32,
    /// Backstitch on every this-many-th minibatch (the one ≡ `srand` modulo it).
    pub backstitch_training_interval: usize,
}

impl Default for KaldiUpdateOptions {
    fn default() -> Self {
        KaldiUpdateOptions {
            momentum: 0.0,
            max_param_change: 2.0,
            l2_regularize_factor: 1.0,
            batchnorm_stats_scale: 0.8,
            backstitch_training_scale: 0.0,
            backstitch_training_interval: 1,
        }
    }
}

impl KaldiUpdateOptions {
    /// Checks the settings are in range (Kaldi asserts the same).
    pub fn validate(&self) -> Result<()> {
        if self.momentum < 0.0 || self.momentum >= 1.0 || !self.momentum.is_finite() {
            return Err(Error::Usage(format!(
                "--momentum must be in [0, 1), got {}",
                self.momentum
            )));
        }
        if self.backstitch_training_scale > 0.0 && self.momentum > 0.0 {
            return Err(Error::Usage(
                "backstitch training is incompatible with --momentum > 0".into(),
            ));
        }
        if self.backstitch_training_interval == 0 {
            return Err(Error::Usage(
                "--backstitch-training-interval must be positive".into(),
            ));
        }
        for (what, v) in [
            ("--max-param-change", self.max_param_change),
            ("--l2-regularize-factor", self.l2_regularize_factor),
            (
                "--backstitch-training-scale",
                self.backstitch_training_scale,
            ),
            ("--batchnorm-stats-scale", self.batchnorm_stats_scale),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::Usage(format!(
                    "{what} must be a finite number >= 0, got {v}"
                )));
            }
        }
        Ok(())
    }
}

/// Kaldi's update (`NnetTrainer::Train` after the backward pass): the backward pass adds the
/// learning-rate-scaled, natural-gradient-preconditioned gradient into `delta`, and
/// [`KaldiUpdate::step`] or backstitch's two [`KaldiUpdate::backstitch_step`]s apply it.
pub struct KaldiUpdate {
    pub opts: KaldiUpdateOptions,
    /// The delta network the backward pass writes into (learning rates set, natural gradient
    /// inside); between minibatches it holds the momentum.
    pub delta: Nnet,
    pub max_change: MaxChangeStats,
    /// `--srand`, which seeds `kaldi_rand`.
    pub srand: u64,
    /// Kaldi's process-wide `rand()` stream, `srand(--srand)` as `nnet3-train` seeds it:
    /// statistics sampling, self-repair, the orthonormal constraint and the compiler's checks
    /// draw from it in Kaldi's order, so that the stored statistics are Kaldi's.
    pub kaldi_rand: GlibcRand,
    /// Kaldi's `srand_seed_` (the stream's first draw, `RandInt(0, 100000)`): which
    /// minibatches take a backstitch step, and the reseed before each backstitch pass.
    pub srand_seed: i32,
    /// The compilations Kaldi would make, replayed for their draws.
    pub kaldi_draws: KaldiCompileDraws,
}

impl KaldiUpdate {
    /// A zero delta network for `nnet`.
    pub fn new(nnet: &Nnet, opts: KaldiUpdateOptions, srand: u64) -> Self {
        let mut delta = nnet.clone();
        delta.scale_all(0.0);
        let mut kaldi_rand = GlibcRand::new(srand as u32);
        let srand_seed = kaldi_rand.rand_int(0, 100_000);
        KaldiUpdate {
            opts,
            delta,
            max_change: MaxChangeStats::default(),
            srand,
            kaldi_rand,
            srand_seed,
            kaldi_draws: KaldiCompileDraws::default(),
        }
    }

    /// The draws Kaldi's compiler makes for `request` (its checks), replayed on the stream
    /// after `compiler` compiled it.
    pub fn replay_compile_draws(
        &mut self,
        nnet: &Nnet,
        request: &ComputationRequest,
        compiler: &CachingCompiler,
    ) {
        self.kaldi_draws.draw(
            nnet,
            request,
            compiler.options().use_shortcut,
            &mut |r| compiler.peek(r),
            &mut self.kaldi_rand,
        );
    }

    /// Whether minibatch `n` (counted from the start of training) takes backstitch's two
    /// steps: n ≡ `srand_seed` modulo the interval.
    pub fn backstitch_now(&self, n: u64) -> bool {
        let interval = self.opts.backstitch_training_interval.max(1) as u64;
        self.opts.backstitch_training_scale > 0.0
            && n % interval == self.srand_seed as u64 % interval
    }

    /// Before each backstitch pass on minibatch `n`: Kaldi reseeds its stream with
    /// `srand_seed` + n, so both passes draw the same values (masks, statistics choices).
    pub fn reseed_for_backstitch(&mut self, n: u64) {
        self.kaldi_rand = GlibcRand::new(self.srand_seed.wrapping_add(n as i32) as u32);
    }

    /// Kaldi's `GetNumNvalues` before the L2 term: its one draw (a spot check on one call in
    /// 101), then the sequence count.
    fn num_n_values(&mut self, sequences: usize) -> usize {
        self.kaldi_rand.rand_int(0, 100);
        sequences
    }

    /// Sets the learning rate the next backward passes use (`SetLearningRate` on the delta
    /// network, whose components do the update).
    pub fn set_learning_rate(&mut self, lr: f32) {
        self.delta.set_learning_rate(lr);
    }

    /// Freezes (or unfreezes) the natural-gradient estimates of the delta network:
    /// backstitch's first backward pass uses them without updating them.
    pub fn freeze_natural_gradient(&mut self, freeze: bool) {
        freeze_natural_gradient(freeze, &mut self.delta);
    }

    /// L2, max-change, momentum, BatchNorm scaling, orthonormal constraint after a backward
    /// pass on a minibatch of `sequences` sequences; false when the change was not finite
    /// (then nothing was applied and the momentum is dropped).
    pub fn step(&mut self, nnet: &mut Nnet, sequences: usize) -> bool {
        let l2_scale = self.num_n_values(sequences) as f32 * self.opts.l2_regularize_factor;
        apply_l2_regularization(nnet, l2_scale, &mut self.delta);
        let ok = update_nnet_with_max_change(
            &self.delta,
            self.opts.max_param_change,
            1.0,
            1.0 - self.opts.momentum,
            nnet,
            &mut self.max_change,
        );
        scale_batchnorm_stats(self.opts.batchnorm_stats_scale, nnet);
        constrain_orthonormal(nnet, &mut self.kaldi_rand);
        self.delta
            .scale_all(if ok { self.opts.momentum } else { 0.0 });
        ok
    }

    /// One of backstitch's two steps after a backward pass into the delta (the first with the
    /// natural-gradient estimates frozen): the first moves −α times the change (max-change
    /// scaled by α) and applies the orthonormal constraint, the second 1+α times it with L2
    /// and the BatchNorm scaling. The delta is zeroed (backstitch has no momentum). False
    /// when the change was not finite (then not applied).
    pub fn backstitch_step(&mut self, nnet: &mut Nnet, sequences: usize, first: bool) -> bool {
        let alpha = self.opts.backstitch_training_scale;
        let (max_change_scale, scale) = if first {
            (alpha, -alpha)
        } else {
            (1.0 + alpha, 1.0 + alpha)
        };
        if !first {
            let l2_scale =
                self.num_n_values(sequences) as f32 * self.opts.l2_regularize_factor / scale;
            apply_l2_regularization(nnet, l2_scale, &mut self.delta);
        }
        let ok = update_nnet_with_max_change(
            &self.delta,
            self.opts.max_param_change,
            max_change_scale,
            scale,
            nnet,
            &mut self.max_change,
        );
        if first {
            constrain_orthonormal(nnet, &mut self.kaldi_rand);
        } else {
            scale_batchnorm_stats(self.opts.batchnorm_stats_scale, nnet);
        }
        self.delta.scale_all(0.0);
        ok
    }
}

/// A plain stepper (`compnet fit --stepper=sgd|momentum|…`) as a policy of the step core: after
/// the backward pass into a gradient network and the [`GradientReduction`], the fit loop hands
/// each updatable component's parameter blocks (`UpdatableComponent::param_blocks_mut`), their
/// gradient blocks and the policy's per-block state to [`StepPolicy::update`], which moves
/// them in place through `matrix` operations; no parameter is copied to the host. Kaldi's
/// update ([`KaldiUpdate`]) is the other kind of step.
pub trait StepPolicy {
    /// The state matrices kept per parameter block, each of the block's shape, given as the
    /// value each starts from.
    fn state_init(&self) -> &'static [f32];
    /// Moves `param` along `grad` (the gradient of the objective to maximise) with learning
    /// rate `lr` on step `t` (1 for the first), updating `state` (one view per
    /// [`StepPolicy::state_init`] entry).
    fn update(
        &self,
        t: u64,
        lr: f32,
        param: &mut MatViewMut<'_>,
        grad: MatView<'_>,
        state: &mut [MatViewMut<'_>],
    );
}
