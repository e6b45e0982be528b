//! Steppers: how a minibatch's gradient becomes a parameter change (CNTK's learners,
//! Brainstorm's steppers), and Kaldi's natural-gradient SGD with max-change.
//!
//! The plain steppers see the plain gradient: the backward pass writes into a *gradient
//! network* whose components are gradient holders (`is_gradient`, learning rate 1), for which
//! `gradient::Update` never preconditions. Each stepper, a [`StepPolicy`] of the step core,
//! then updates every updatable component's parameter blocks (`param_blocks_mut`) in place
//! from its gradient blocks through `matrix` operations, keeping its own state per block
//! (momentum, squared-gradient averages) as matrices of the block's shape, which a
//! checkpoint saves. The gradient is of the objective to *maximise* (Kaldi's log-likelihood),
//! so a step adds to the parameters.
//!
//! Kaldi's stepper (`--stepper=ng`, [`kaldi_update`]) is the step core's
//! [`KaldiUpdate`], the same code `compnet train` runs: the backward pass writes into a delta
//! network whose components carry the learning rates and precondition their gradient rows
//! (natural gradient), then L2, max-change, momentum, BatchNorm-stats scaling and the
//! orthonormal constraint. This file adds its checkpoint state.

use crate::compile::kaldi_draws::KaldiCompileDraws;
use crate::error::{Error, Result};
use crate::io::le_bytes::ByteReader;
use crate::kaldi_rand::GlibcRand;
use crate::matrix::{MatView, MatViewMut, Matrix, Trans};
use crate::nnet::component::param_init::gaussian_matrix;
use crate::nnet::Nnet;
use crate::train::step::{KaldiUpdate, KaldiUpdateOptions, StepPolicy};
use rand::rngs::StdRng;

/// The steppers `--stepper` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepperKind {
    Sgd,
    Momentum,
    Nesterov,
    AdaGrad,
    RmsProp,
    Adam,
    AdamW,
    /// Kaldi's natural-gradient SGD with max-change (`compnet train`'s update).
    NaturalGradient,
}

impl StepperKind {
    /// Parses `--stepper`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "sgd" => StepperKind::Sgd,
            "momentum" => StepperKind::Momentum,
            "nesterov" => StepperKind::Nesterov,
            "adagrad" => StepperKind::AdaGrad,
            "rmsprop" => StepperKind::RmsProp,
            "adam" => StepperKind::Adam,
            "adamw" => StepperKind::AdamW,
            "ng" | "natural-gradient" | "kaldi" => StepperKind::NaturalGradient,
            _ => {
                return Err(Error::Usage(format!(
                    "--stepper={s}: expected one of sgd, momentum, nesterov, adagrad, rmsprop, \
                     adam, adamw, ng"
                )))
            }
        })
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            StepperKind::Sgd => "sgd",
            StepperKind::Momentum => "momentum",
            StepperKind::Nesterov => "nesterov",
            StepperKind::AdaGrad => "adagrad",
            StepperKind::RmsProp => "rmsprop",
            StepperKind::Adam => "adam",
            StepperKind::AdamW => "adamw",
            StepperKind::NaturalGradient => "ng",
        }
    }
}

/// The steppers' hyper-parameters (defaults: PyTorch's for Adam/AdamW, CNTK's for RMSProp).
#[derive(Clone, Debug, PartialEq)]
pub struct StepperOptions {
    pub kind: StepperKind,
    /// Momentum μ (momentum, Nesterov; Kaldi's `--momentum` for ng, default 0 there).
    pub momentum: f32,
    /// Adam's β₁ and β₂.
    pub beta1: f32,
    pub beta2: f32,
    /// Added to the denominator of AdaGrad, RMSProp and Adam.
    pub epsilon: f32,
    /// AdamW's decoupled weight decay λ (p ← p − lr·λ·p each step).
    pub weight_decay: f32,
    /// RMSProp (CNTK): smoothing γ of the mean square, and the per-parameter step-size
    /// factors: × `rms_inc` when the step keeps its sign, × `rms_dec` when it flips, kept in
    /// [`rms_min`, `rms_max`].
    pub rms_gamma: f32,
    pub rms_inc: f32,
    pub rms_dec: f32,
    pub rms_max: f32,
    pub rms_min: f32,
    /// ng: limit on the norm of the whole change per minibatch (Kaldi's `--max-param-change`).
    pub max_param_change: f32,
    /// ng: Kaldi's backstitch, `--backstitch-training-scale` α (0 = off): on every
    /// `backstitch_interval`-th minibatch a step of −α·lr along the gradient, then one of
    /// (1+α)·lr along the gradient at the new point.
    pub backstitch_scale: f32,
    pub backstitch_interval: usize,
    /// Momentum with unit gain (CNTK's): v ← μ·v + (1 − μ)·g, so that μ does not change
    /// the size of a steady step.
    pub unit_gain: bool,
}

impl Default for StepperOptions {
    fn default() -> Self {
        StepperOptions {
            kind: StepperKind::NaturalGradient,
            momentum: 0.9,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.01,
            rms_gamma: 0.99,
            rms_inc: 1.2,
            rms_dec: 0.75,
            rms_max: 10.0,
            rms_min: 0.1,
            max_param_change: 2.0,
            backstitch_scale: 0.0,
            backstitch_interval: 1,
            unit_gain: false,
        }
    }
}

impl StepperOptions {
    /// Checks the ranges (an error names the option).
    pub fn validate(&self) -> Result<()> {
        let unit = |name: &str, v: f32| {
            if (0.0..1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::Usage(format!("--{name} must be in [0, 1), got {v}")))
            }
        };
        let momentum_name = if self.kind == StepperKind::NaturalGradient {
            "momentum (ng)"
        } else {
            "momentum"
        };
        unit(momentum_name, self.momentum)?;
        unit("beta1", self.beta1)?;
        unit("beta2", self.beta2)?;
        unit("rms-gamma", self.rms_gamma)?;
        check_non_negative(&[
            ("epsilon", self.epsilon),
            ("weight-decay", self.weight_decay),
            ("rms-inc", self.rms_inc),
            ("rms-dec", self.rms_dec),
            ("rms-max", self.rms_max),
            ("rms-min", self.rms_min),
            ("max-param-change", self.max_param_change),
        ])?;
        for (name, v, lo, hi) in [
            ("epsilon", self.epsilon, f32::MIN_POSITIVE, 1.0),
            ("weight-decay", self.weight_decay, 0.0, 1.0),
            ("rms-inc", self.rms_inc, 1.0, 100.0),
            ("rms-dec", self.rms_dec, f32::MIN_POSITIVE, 1.0),
            ("rms-min", self.rms_min, f32::MIN_POSITIVE, 1e6),
            ("rms-max", self.rms_max, f32::MIN_POSITIVE, 1e6),
        ] {
            if !(lo..=hi).contains(&v) {
                let range = if lo > 0.0 && lo < 1.0 {
                    format!("above 0 and at most {hi}")
                } else {
                    format!("in [{lo}, {hi}]")
                };
                return Err(Error::Usage(format!("--{name} must be {range}, got {v}")));
            }
        }
        if self.rms_min > self.rms_max {
            return Err(Error::Usage(format!(
                "--rms-min={} is above --rms-max={}",
                self.rms_min, self.rms_max
            )));
        }
        if !self.backstitch_scale.is_finite() || self.backstitch_scale < 0.0 {
            return Err(Error::Usage(format!(
                "--backstitch-training-scale must be a finite number >= 0, got {}",
                self.backstitch_scale
            )));
        }
        if self.backstitch_interval == 0 {
            return Err(Error::Usage(
                "--backstitch-training-interval must be positive".into(),
            ));
        }
        if self.backstitch_scale > 0.0 {
            if self.kind != StepperKind::NaturalGradient {
                return Err(Error::Usage(format!(
                    "--backstitch-training-scale: backstitch is Kaldi's update (--stepper=ng); \
                     it is not defined for --stepper={}",
                    self.kind.name()
                )));
            }
            if self.momentum > 0.0 {
                return Err(Error::Usage(
                    "backstitch training is incompatible with --momentum > 0 (as in Kaldi)".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The shapes of every updatable component's parameter blocks, in order: what a plain
/// stepper's state is checked against when a checkpoint is read.
pub fn param_shapes(nnet: &Nnet) -> Vec<Vec<(usize, usize)>> {
    nnet.components
        .iter()
        .filter_map(|c| c.as_updatable())
        .map(|u| {
            u.param_blocks()
                .iter()
                .map(|b| (b.num_rows(), b.num_cols()))
                .collect()
        })
        .collect()
}

/// A plain stepper's state: the step count and, per updatable component, its state
/// matrices.
#[derive(Clone, Debug, PartialEq)]
pub struct Stepper {
    pub opts: StepperOptions,
    /// Steps taken (Adam's bias correction).
    pub t: u64,
    /// `slots[component][slot][block]`: per updatable component and state slot, one matrix
    /// of each parameter block's shape; created on the component's first step.
    pub slots: Vec<Vec<Vec<Matrix>>>,
}

impl Stepper {
    pub fn new(opts: StepperOptions) -> Self {
        Stepper {
            opts,
            t: 0,
            slots: Vec::new(),
        }
    }

    /// Starts a step (one minibatch): advances the step count.
    pub fn begin_step(&mut self) {
        self.t += 1;
    }

    /// True when every state value is finite.
    pub fn is_finite(&self) -> bool {
        self.slots
            .iter()
            .flatten()
            .flatten()
            .all(|m| m.view().is_finite())
    }

    /// Updates the parameter blocks `params` of updatable component `component` from their
    /// gradients `grads` (to maximise) with learning rate `lr` (0 = frozen: neither the
    /// parameters nor the state move), through the stepper's [`StepPolicy`].
    pub fn update_component(
        &mut self,
        component: usize,
        params: &mut [MatViewMut<'_>],
        grads: &[MatView<'_>],
        lr: f32,
    ) {
        debug_assert_eq!(params.len(), grads.len());
        if lr == 0.0 {
            return;
        }
        let init = self.opts.state_init();
        if self.slots.len() <= component {
            self.slots.resize(component + 1, Vec::new());
        }
        let slots = &mut self.slots[component];
        let fits = |slot: &Vec<Matrix>| {
            slot.len() == params.len()
                && slot
                    .iter()
                    .zip(params.iter())
                    .all(|(m, p)| (m.num_rows(), m.num_cols()) == (p.num_rows(), p.num_cols()))
        };
        if slots.len() != init.len() || !slots.iter().all(fits) {
            *slots = init
                .iter()
                .map(|&v| {
                    params
                        .iter()
                        .map(|p| {
                            let mut m = Matrix::zeros(p.num_rows(), p.num_cols());
                            if v != 0.0 {
                                m.view_mut().set_const(v);
                            }
                            m
                        })
                        .collect()
                })
                .collect();
        }
        for (b, (p, g)) in params.iter_mut().zip(grads).enumerate() {
            let mut state: Vec<MatViewMut<'_>> =
                slots.iter_mut().map(|slot| slot[b].view_mut()).collect();
            self.opts.update(self.t, lr, p, *g, &mut state);
        }
    }

    /// Serialises the state (little-endian; see [`Stepper::read_state`]): per component and
    /// slot, the blocks' values one after another, each row by row.
    pub fn write_state(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.opts.kind.name().as_bytes());
        out.push(0);
        out.extend_from_slice(&self.t.to_le_bytes());
        out.extend_from_slice(&(self.slots.len() as u64).to_le_bytes());
        for component in &self.slots {
            out.extend_from_slice(&(component.len() as u64).to_le_bytes());
            for slot in component {
                let len: usize = slot.iter().map(|m| m.num_rows() * m.num_cols()).sum();
                out.extend_from_slice(&(len as u64).to_le_bytes());
                for m in slot {
                    for v in m.to_vec() {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
    }

    /// Reads what [`Stepper::write_state`] wrote, checking the stepper's name and that every
    /// component's blocks have the shapes `shapes[component]` (from [`param_shapes`]: the
    /// checkpoint is of this network).
    pub fn read_state(
        &mut self,
        bytes: &[u8],
        shapes: &[Vec<(usize, usize)>],
        file: &str,
    ) -> Result<()> {
        let mut r = ByteReader::new(bytes, file);
        let name = r.cstr()?;
        if name != self.opts.kind.name() {
            return Err(Error::Usage(format!(
                "{file}: the checkpoint was written with --stepper={name}, this run uses \
                 --stepper={}",
                self.opts.kind.name()
            )));
        }
        self.t = r.u64()?;
        let nblocks = r.u64()? as usize;
        if nblocks > shapes.len() {
            return Err(r.err(&format!(
                "at most {} parameter blocks, found {nblocks} (a checkpoint of another network?)",
                shapes.len()
            )));
        }
        let mut slots = Vec::with_capacity(nblocks);
        for (b, blocks) in shapes.iter().enumerate().take(nblocks) {
            let size: usize = blocks.iter().map(|&(rows, cols)| rows * cols).sum();
            let nslots = r.u64()? as usize;
            if nslots > 8 {
                return Err(r.err("at most 8 state vectors per block"));
            }
            let mut component = Vec::with_capacity(nslots);
            for _ in 0..nslots {
                let len = r.u64()? as usize;
                if len != size {
                    return Err(r.err(&format!(
                        "block {b} has {size} parameters in this network but {len} in the \
                         checkpoint (a checkpoint of another network?)"
                    )));
                }
                let what = format!("block {b}: a stepper statistic");
                component.push(r.finite_matrices(blocks, &what)?);
            }
            slots.push(component);
        }
        self.slots = slots;
        Ok(())
    }
}

/// The plain steppers as policies of the step core: each rule a sequence of `matrix`
/// operations on the block, its gradient and its state.
impl StepPolicy for StepperOptions {
    fn state_init(&self) -> &'static [f32] {
        match self.kind {
            StepperKind::Sgd | StepperKind::NaturalGradient => &[],
            StepperKind::Momentum | StepperKind::Nesterov | StepperKind::AdaGrad => &[0.0],
            // Mean square, step size, sign of the last step.
            StepperKind::RmsProp => &[0.0, 1.0, 0.0],
            StepperKind::Adam | StepperKind::AdamW => &[0.0, 0.0],
        }
    }

    fn update(
        &self,
        t: u64,
        lr: f32,
        p: &mut MatViewMut<'_>,
        g: MatView<'_>,
        state: &mut [MatViewMut<'_>],
    ) {
        let o = self;
        match (o.kind, state) {
            (StepperKind::Sgd | StepperKind::NaturalGradient, _) => {
                p.add_mat(lr, g, Trans::No);
            }
            // v ← μ·v + g; p ← p + lr·v.
            // With unit gain (CNTK's), v ← μ·v + (1 − μ)·g.
            (StepperKind::Momentum, [v]) => {
                let gain = if o.unit_gain { 1.0 - o.momentum } else { 1.0 };
                v.add_mat_scaled(gain, g, o.momentum);
                p.add_mat(lr, v.as_view(), Trans::No);
            }
            // v ← μ·v + g; p ← p + lr·(g + μ·v).
            (StepperKind::Nesterov, [v]) => {
                v.add_mat_scaled(1.0, g, o.momentum);
                let mut ahead = v.as_view().to_matrix();
                ahead.view_mut().add_mat_scaled(1.0, g, o.momentum);
                p.add_mat(lr, ahead.view(), Trans::No);
            }
            // s ← s + g²; p ← p + lr·g / (√s + ε).
            (StepperKind::AdaGrad, [s]) => {
                s.add_mul_elements(1.0, g, g);
                let mut step = g.to_matrix();
                step.view_mut().scale(lr);
                let mut den = s.as_view().to_matrix();
                den.view_mut().apply_sqrt();
                den.view_mut().add_const(o.epsilon);
                step.view_mut().div_elements(den.view());
                p.add_mat(1.0, step.view(), Trans::No);
            }
            // ms ← γ·ms + (1−γ)·g²; the step size grows (× inc, up to max) while the sign
            // of g holds and shrinks (× dec, down to min) when it flips;
            // p ← p + lr·size·g / √(ms + ε).
            (StepperKind::RmsProp, [ms, size, sign]) => {
                ms.scale(o.rms_gamma);
                ms.add_mul_elements(1.0 - o.rms_gamma, g, g);
                let mut new_sign = g.to_matrix();
                new_sign.view_mut().apply_signum();
                let mut agreement = new_sign.clone();
                agreement.view_mut().mul_elements(sign.as_view());
                size.scale_by_sign_agreement(
                    agreement.view(),
                    o.rms_inc,
                    o.rms_max,
                    o.rms_dec,
                    o.rms_min,
                );
                sign.copy_from(new_sign.view());
                let mut step = size.as_view().to_matrix();
                step.view_mut().scale(lr);
                step.view_mut().mul_elements(g);
                let mut den = ms.as_view().to_matrix();
                den.view_mut().add_const(o.epsilon);
                den.view_mut().apply_sqrt();
                step.view_mut().div_elements(den.view());
                p.add_mat(1.0, step.view(), Trans::No);
            }
            // m ← β₁·m + (1−β₁)·g; v ← β₂·v + (1−β₂)·g²; with the bias corrections
            // c = 1 − βᵗ, p ← p·decay + lr·(m/c₁) / (√(v/c₂) + ε), decay = 1 − lr·λ for
            // AdamW (1 for Adam).
            (StepperKind::Adam | StepperKind::AdamW, [m, v]) => {
                let t = t.max(1) as i32;
                let c1 = 1.0 - o.beta1.powi(t);
                let c2 = 1.0 - o.beta2.powi(t);
                m.add_mat_scaled(1.0 - o.beta1, g, o.beta1);
                v.scale(o.beta2);
                v.add_mul_elements(1.0 - o.beta2, g, g);
                let mut step = m.as_view().to_matrix();
                step.view_mut().div_const(c1);
                step.view_mut().scale(lr);
                let mut den = v.as_view().to_matrix();
                den.view_mut().div_const(c2);
                den.view_mut().apply_sqrt();
                den.view_mut().add_const(o.epsilon);
                step.view_mut().div_elements(den.view());
                if o.kind == StepperKind::AdamW {
                    p.scale(1.0 - lr * o.weight_decay);
                }
                p.add_mat(1.0, step.view(), Trans::No);
            }
            (kind, state) => unreachable!("{kind:?} with {} state slots", state.len()),
        }
    }
}

/// Refuses an option (`--name`, value) that is not a finite number >= 0.
pub fn check_non_negative(options: &[(&str, f32)]) -> Result<()> {
    for &(name, v) in options {
        if !v.is_finite() || v < 0.0 {
            return Err(Error::Usage(format!(
                "--{name} must be a finite number >= 0, got {v}"
            )));
        }
    }
    Ok(())
}

/// Per-minibatch regularisers the plain steppers apply to the gradient first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GradientOptions {
    /// g ← g − l1·sign(p).
    pub l1: f32,
    /// g ← g − l2·p (on top of the components' own `l2-regularize`, applied Kaldi's way:
    /// g ← g − 2·l2-regularize·sequences·p).
    pub l2: f32,
    /// Per-sample clipping: each element of the summed gradient is kept within
    /// ±clip·frames (0 = none).
    pub clip: f32,
    /// With `clip`: each parameter block's gradient (a CNTK Parameter: an affine
    /// component's weights, its bias) is scaled down to a Frobenius norm of at most
    /// clip·frames instead of each element being truncated (CNTK's
    /// `gradientClippingWithTruncation=false`); blocks are clipped one by one, never over a
    /// component or the whole model.
    pub clip_norm: bool,
    /// CNTK's `L1RegWeight`/`L2RegWeight`: the weights are per sample (times the
    /// minibatch's frames), the gradient is clipped before L2 is added, and L1 is a proximal
    /// step after the update (p shrunk toward 0 by lr·l1·frames, stopping at 0).
    pub per_sample: bool,
    /// Standard deviation of Gaussian noise added to each gradient element (0 = none).
    pub noise_stddev: f32,
}

/// Applies a plain stepper to `nnet` from the gradient network `grad` (as the backward pass
/// left it), then zeroes `grad`. `lr`: the learning rate for a component with
/// learning-rate-factor 1; `grad_scale` multiplies the summed gradient first (1/frames for
/// per-minibatch rates); `sequences`/`frames`: of the minibatch, for the regularisers.
#[allow(clippy::too_many_arguments)]
pub fn apply_plain_step(
    stepper: &mut Stepper,
    nnet: &mut Nnet,
    grad: &mut Nnet,
    lr: f32,
    grad_scale: f32,
    gopts: &GradientOptions,
    sequences: usize,
    frames: f64,
    rng: &mut StdRng,
) -> bool {
    stepper.begin_step();
    let mut component = 0;
    for (dest, src) in nnet.components.iter_mut().zip(grad.components.iter_mut()) {
        let Some(u) = dest.as_updatable_mut() else {
            dest.add_stats(1.0, src.as_ref());
            src.scale_stats(0.0);
            continue;
        };
        let Some(gu) = src.as_updatable_mut() else {
            continue;
        };
        let factor = u.common().learning_rate_factor;
        let l2_own = 2.0 * u.common().l2_regularize * sequences as f32;
        let clip = gopts.clip * (frames as f32 * grad_scale).max(1.0);
        // CNTK's per-sample weights: times the frames the (scaled) gradient sums over.
        let per = if gopts.per_sample {
            frames as f32 * grad_scale
        } else {
            1.0
        };
        let mut grads = gu.param_blocks_mut();
        // The regularised gradient, in place of the plain one:
        // g ← scale·g − (l2 + own l2)·p − l1·sign(p), clipped, plus noise; with CNTK's
        // per-sample weights, L2 is added after clipping and L1 is a shrink after the step.
        for (p, g) in u.param_blocks().iter().zip(grads.iter_mut()) {
            g.scale(grad_scale);
            if !gopts.per_sample {
                g.add_mat(-(l2_own + gopts.l2), *p, Trans::No);
                if gopts.l1 != 0.0 {
                    let mut sign = p.to_matrix();
                    sign.view_mut().apply_signum();
                    g.add_mat(-gopts.l1, sign.view(), Trans::No);
                }
            }
            if clip > 0.0 && !gopts.clip_norm {
                g.apply_floor(-clip);
                g.apply_ceiling(clip);
            }
        }
        if clip > 0.0 && gopts.clip_norm {
            // CNTK clips each Parameter's gradient by its own Frobenius norm (SGD's
            // ClipGradient runs once per learnable node): a component's parameter blocks
            // (an affine component's weights and bias) are CNTK's separate Parameters.
            for g in grads.iter_mut() {
                let norm = g.as_view().sum_squares_f64().sqrt();
                if norm > f64::from(clip) {
                    g.scale((f64::from(clip) / norm) as f32);
                }
            }
        }
        let mut finite = true;
        for (p, g) in u.param_blocks().iter().zip(grads.iter_mut()) {
            if gopts.per_sample {
                g.add_mat(-(l2_own + gopts.l2 * per), *p, Trans::No);
            }
            if gopts.noise_stddev > 0.0 {
                let noise = gaussian_matrix(g.num_rows(), g.num_cols(), 0.0, 1.0, rng);
                g.add_mat(gopts.noise_stddev, noise.view(), Trans::No);
            }
            finite &= g.as_view().is_finite();
        }
        // A frozen component (rate 0) is not borrowed mutably: its weights keep their
        // inference copies.
        if finite && lr * factor != 0.0 {
            let grads: Vec<MatView<'_>> = grads.iter().map(|g| g.as_view()).collect();
            let mut params = u.param_blocks_mut();
            stepper.update_component(component, &mut params, &grads, lr * factor);
            if gopts.per_sample && gopts.l1 != 0.0 {
                let t = lr * factor * gopts.l1 * per;
                params.iter_mut().for_each(|p| p.shrink_toward_zero(t));
            }
        }
        drop(grads);
        gu.scale(0.0);
        if !finite {
            return false;
        }
        component += 1;
    }
    true
}

/// A fresh gradient network for `nnet`: every updatable component a zeroed gradient holder
/// (learning rate 1, so the backward pass adds the plain gradient), except frozen ones
/// (learning-rate-factor 0), which get learning rate 0 and are skipped by the backward pass.
pub fn gradient_network(nnet: &Nnet) -> Nnet {
    let mut g = nnet.clone();
    for c in &mut g.components {
        if let Some(u) = c.as_updatable_mut() {
            let frozen = u.common().learning_rate_factor == 0.0;
            u.set_zero(true);
            if frozen {
                u.common_mut().learning_rate = 0.0;
            }
        } else {
            c.scale_stats(0.0);
        }
    }
    g
}

/// `--stepper=ng`: the step core's Kaldi update with `fit`'s options (L2 factor 1 and
/// BatchNorm decay 0.8, `compnet train`'s defaults).
pub fn kaldi_update(nnet: &Nnet, opts: &StepperOptions, srand: u64) -> KaldiUpdate {
    let update = KaldiUpdateOptions {
        momentum: opts.momentum,
        max_param_change: opts.max_param_change,
        backstitch_training_scale: opts.backstitch_scale,
        backstitch_training_interval: opts.backstitch_interval.max(1),
        ..KaldiUpdateOptions::default()
    };
    KaldiUpdate::new(nnet, update, srand)
}

/// The checkpoint part of the Kaldi update.
impl KaldiUpdate {
    /// The state a resumed run needs besides the natural-gradient estimates
    /// (`ng_state`): the generator's position and the delta network's parameters and
    /// statistics (the momentum between minibatches).
    pub fn write_state(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"ng\0");
        let words = self.kaldi_rand.state_words();
        out.extend_from_slice(&(words.len() as u64).to_le_bytes());
        for w in words {
            out.extend_from_slice(&(w as u64).to_le_bytes());
        }
        out.extend_from_slice(&(self.srand_seed as i64 as u64).to_le_bytes());
        let keys = self.kaldi_draws.keys();
        out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        for k in keys {
            out.extend_from_slice(&k.to_le_bytes());
        }
        // Without momentum the delta is zero between minibatches: no blocks are written (a
        // model-sized part less to write and sync).
        let blocks: Vec<&dyn crate::nnet::component::UpdatableComponent> = self
            .delta
            .components
            .iter()
            .filter_map(|c| c.as_updatable())
            .filter(|_| self.opts.momentum != 0.0)
            .collect();
        out.extend_from_slice(&(blocks.len() as u64).to_le_bytes());
        for u in blocks {
            out.extend_from_slice(&(u.num_parameters() as u64).to_le_bytes());
            for b in u.param_blocks() {
                for x in b.to_vec() {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
        out.extend_from_slice(&super::fit_loop::encode_stats(&self.delta));
    }

    /// Reads what [`KaldiUpdate::write_state`] wrote; the delta network must have the
    /// same blocks (a checkpoint of this network) and its values must be finite.
    pub fn read_state(&mut self, bytes: &[u8], file: &str) -> Result<()> {
        let mut r = ByteReader::new(bytes, file);
        let name = r.cstr()?;
        if name != "ng" {
            return Err(Error::Usage(format!(
                "{file}: the checkpoint was written with --stepper={name}, this run uses \
                 --stepper=ng"
            )));
        }
        let num_words = r.u64()?;
        if num_words != 35 {
            return Err(r.err("a random-generator state of 35 words"));
        }
        let mut words = Vec::with_capacity(35);
        for _ in 0..35 {
            words.push(r.u64()? as u32);
        }
        let kaldi_rand = GlibcRand::from_state_words(&words)
            .ok_or_else(|| r.err("a valid random-generator state"))?;
        let srand_seed = r.u64()? as i64 as i32;
        let num_keys = r.u64()?;
        if num_keys > (bytes.len() / 8) as u64 {
            return Err(r.err("a count of compiled requests that fits the file"));
        }
        let mut keys = Vec::with_capacity(num_keys as usize);
        for _ in 0..num_keys {
            keys.push(r.u64()?);
        }
        let n = r.u64()?;
        let mut blocks: Vec<&mut dyn crate::nnet::component::UpdatableComponent> = self
            .delta
            .components
            .iter_mut()
            .filter_map(|c| c.as_updatable_mut())
            .collect();
        if n != blocks.len() as u64 && (n != 0 || self.opts.momentum != 0.0) {
            return Err(r.err(&format!(
                "{n} parameter blocks, this network has {} (a checkpoint of another network)",
                blocks.len()
            )));
        }
        for (b, u) in blocks.iter_mut().enumerate().take(n as usize) {
            let len = r.u64()?;
            if len != u.num_parameters() as u64 {
                return Err(r.err(&format!(
                    "block {b} has {} parameters in this network but {len} in the checkpoint \
                     (a checkpoint of another network)",
                    u.num_parameters()
                )));
            }
            let shapes: Vec<(usize, usize)> = u
                .param_blocks()
                .iter()
                .map(|b| (b.num_rows(), b.num_cols()))
                .collect();
            let values = r.finite_matrices(&shapes, &format!("block {b}: a momentum value"))?;
            for (mut block, m) in u.param_blocks_mut().into_iter().zip(&values) {
                block.copy_from(m.view());
            }
        }
        super::fit_loop::restore_stats(&mut self.delta, &bytes[r.pos..], file)?;
        self.kaldi_rand = kaldi_rand;
        self.srand_seed = srand_seed;
        self.kaldi_draws = KaldiCompileDraws::from_keys(&keys);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every plain stepper.
    const PLAIN_KINDS: [StepperKind; 7] = [
        StepperKind::Sgd,
        StepperKind::Momentum,
        StepperKind::Nesterov,
        StepperKind::AdaGrad,
        StepperKind::RmsProp,
        StepperKind::Adam,
        StepperKind::AdamW,
    ];

    fn stepper(kind: StepperKind) -> Stepper {
        Stepper::new(StepperOptions {
            kind,
            ..Default::default()
        })
    }

    /// One step of `s` on a single block.
    fn step(s: &mut Stepper, p: &mut Matrix, g: &Matrix, lr: f32) {
        s.begin_step();
        s.update_component(0, &mut [p.view_mut()], &[g.view()], lr);
    }

    fn row<const N: usize>(v: [f32; N]) -> Matrix {
        Matrix::from_rows(&[v.to_vec()])
    }

    /// Two steps on p = [1, -2] with gradients [0.5, -1] then [-0.25, 2], lr 0.1, each
    /// against the update rule written out by hand.
    fn two_steps(kind: StepperKind) -> Matrix {
        let mut s = stepper(kind);
        let mut p = row([1.0, -2.0]);
        for g in [[0.5f32, -1.0], [-0.25, 2.0]] {
            step(&mut s, &mut p, &row(g), 0.1);
        }
        p
    }

    fn close<const N: usize>(a: &Matrix, b: [f64; N]) {
        for (k, y) in b.iter().enumerate() {
            let x = a.view().get(0, k) as f64;
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn first_steps_equal_hand_computed_values() {
        // SGD: p + 0.1 g1 + 0.1 g2.
        close(&two_steps(StepperKind::Sgd), [1.025, -1.9]);
        // Momentum 0.9: v1 = g1, v2 = 0.9 g1 + g2 = [0.2, 1.1]; p += 0.1 (v1 + v2).
        close(&two_steps(StepperKind::Momentum), [1.07, -1.99]);
        // Nesterov: step1 = g1 + 0.9 v1 = 1.9 g1; step2 = g2 + 0.9 v2 = [-0.07, 2.99].
        close(
            &two_steps(StepperKind::Nesterov),
            [1.0 + 0.1 * (0.95 - 0.07), -2.0 + 0.1 * (-1.9 + 2.99)],
        );
        // AdaGrad: s1 = g1², step1 = lr·sign(g1); s2 = g1² + g2².
        let e = 1e-8;
        close(
            &two_steps(StepperKind::AdaGrad),
            [
                1.0 + 0.1 * (0.5 / (0.5 + e)) + 0.1 * (-0.25 / (0.3125f64.sqrt() + e)),
                -2.0 - 0.1 + 0.1 * (2.0 / 5f64.sqrt()),
            ],
        );
        // Adam: bias-corrected, the first step is lr·sign(g); the second by hand.
        let adam2 = |g1: f64, g2: f64| {
            let m = 0.9 * 0.1 * g1 + 0.1 * g2;
            let v = 0.999 * 0.001 * g1 * g1 + 0.001 * g2 * g2;
            let (mh, vh) = (m / (1.0 - 0.81), v / (1.0 - 0.999f64 * 0.999));
            0.1 * mh / (vh.sqrt() + 1e-8)
        };
        close(
            &two_steps(StepperKind::Adam),
            [1.0 + 0.1 + adam2(0.5, -0.25), -2.0 - 0.1 + adam2(-1.0, 2.0)],
        );
        // AdamW: p ← p(1 − lr λ) first.
        let d = 1.0 - 0.1 * 0.01;
        close(
            &two_steps(StepperKind::AdamW),
            [
                (1.0 * d + 0.1) * d + adam2(0.5, -0.25),
                (-2.0 * d - 0.1) * d + adam2(-1.0, 2.0),
            ],
        );
        // RMSProp (CNTK): ms1 = 0.01 g1²; step 1 on the first step, then ×0.75 on a sign
        // flip (both elements flip).
        let ms1 = [0.01 * 0.25, 0.01 * 1.0];
        let ms2 = [0.99 * ms1[0] + 0.01 * 0.0625, 0.99 * ms1[1] + 0.01 * 4.0];
        close(
            &two_steps(StepperKind::RmsProp),
            [
                1.0 + 0.1 * 0.5 / (ms1[0] + e).sqrt() + 0.1 * 0.75 * -0.25 / (ms2[0] + e).sqrt(),
                -2.0 - 0.1 / (ms1[1] + e).sqrt() + 0.1 * 0.75 * 2.0 / (ms2[1] + e).sqrt(),
            ],
        );
    }

    /// After any mix of 32- and 64-bit draws and byte fills, the generator replayed from
    /// its word count continues with the same numbers.
    #[test]
    fn rmsprop_grows_the_step_while_the_sign_holds() {
        let mut s = stepper(StepperKind::RmsProp);
        let mut p = row([0.0]);
        for _ in 0..3 {
            step(&mut s, &mut p, &row([1.0]), 0.1);
        }
        close(&s.slots[0][1][0], [1.44]);
    }

    #[test]
    fn every_stepper_decreases_a_convex_objective() {
        // Maximise −½ Σ a_i (p_i − c_i)²: the gradient is a ⊙ (c − p).
        let a = row([1.0, 4.0, 0.5, 2.0]);
        let c = row([1.0, -1.0, 2.0, 0.5]);
        let loss = |p: &Matrix| -> f32 {
            (0..4)
                .map(|i| {
                    0.5 * a.view().get(0, i) * (p.view().get(0, i) - c.view().get(0, i)).powi(2)
                })
                .sum()
        };
        for kind in PLAIN_KINDS {
            let mut s = stepper(kind);
            let lr = match kind {
                StepperKind::Momentum | StepperKind::Nesterov => 0.02,
                StepperKind::RmsProp => 0.002,
                StepperKind::Sgd => 0.1,
                StepperKind::AdaGrad => 0.5,
                _ => 0.05,
            };
            let mut p = Matrix::zeros(1, 4);
            let start = loss(&p);
            for _ in 0..300 {
                // g = a ⊙ (c − p).
                let mut g = c.clone();
                g.view_mut().add_mat(-1.0, p.view(), Trans::No);
                g.view_mut().mul_elements(a.view());
                step(&mut s, &mut p, &g, lr);
            }
            assert!(
                loss(&p) < 0.05 * start,
                "{kind:?}: loss {} from {start}",
                loss(&p)
            );
        }
    }

    #[test]
    fn a_frozen_block_does_not_move() {
        let mut s = stepper(StepperKind::Adam);
        let mut p = row([1.0, 2.0]);
        step(&mut s, &mut p, &row([1.0, 1.0]), 0.0);
        assert_eq!(p, row([1.0, 2.0]));
        assert!(s.slots.is_empty());
    }

    #[test]
    fn state_round_trips_and_rejects_another_network() {
        let mut s = stepper(StepperKind::Adam);
        let mut w = Matrix::from_rows(&[vec![1.0, 2.0], vec![3.0, 4.0]]);
        let mut b = row([5.0]);
        let gw = Matrix::from_rows(&[vec![0.3, -0.1], vec![0.7, 0.2]]);
        s.begin_step();
        s.update_component(
            0,
            &mut [w.view_mut(), b.view_mut()],
            &[gw.view(), row([-0.5]).view()],
            0.01,
        );
        let mut bytes = Vec::new();
        s.write_state(&mut bytes);
        let shapes = [vec![(2, 2), (1, 1)]];
        let mut t = stepper(StepperKind::Adam);
        t.read_state(&bytes, &shapes, "ckpt").unwrap();
        assert_eq!(s, t);
        let e = t
            .read_state(&bytes, &[vec![(2, 2), (1, 2)]], "ckpt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ckpt") && e.contains("another network"), "{e}");
        let mut sgd = stepper(StepperKind::Sgd);
        assert!(sgd.read_state(&bytes, &shapes, "ckpt").is_err());
        assert!(t
            .read_state(&bytes[..bytes.len() - 2], &shapes, "ckpt")
            .is_err());
    }

    /// The checkpoint holds a component's state as one run of values, the blocks one after
    /// another row by row: a state written for blocks (2×2, 1×1) reads back for one 1×5
    /// block with the same values.
    #[test]
    fn state_bytes_are_the_blocks_in_order() {
        let mut s = stepper(StepperKind::Momentum);
        let mut w = Matrix::zeros(2, 2);
        let mut b = Matrix::zeros(1, 1);
        let gw = Matrix::from_rows(&[vec![1.0, 2.0], vec![3.0, 4.0]]);
        s.begin_step();
        s.update_component(
            0,
            &mut [w.view_mut(), b.view_mut()],
            &[gw.view(), row([5.0]).view()],
            1.0,
        );
        let mut bytes = Vec::new();
        s.write_state(&mut bytes);
        let mut flat = stepper(StepperKind::Momentum);
        flat.read_state(&bytes, &[vec![(1, 5)]], "ckpt").unwrap();
        assert_eq!(flat.slots[0][0][0], row([1.0, 2.0, 3.0, 4.0, 5.0]));
    }

    /// Every plain stepper's matrix-operation update equals, bit for bit, the rule applied
    /// one element at a time (an independent scalar reference), over several steps on two
    /// blocks with gradients of both signs and zeros.
    #[test]
    fn matrix_updates_equal_the_scalar_rules_bit_for_bit() {
        for kind in PLAIN_KINDS {
            let o = StepperOptions {
                kind,
                ..Default::default()
            };
            let mut s = Stepper::new(o.clone());
            let mut w = crate::matrix::pseudo_random(3, 5, 7);
            let mut b = crate::matrix::pseudo_random(1, 4, 8);
            let mut reference = ScalarReference::new(&o, &[&w, &b]);
            for t in 0..5u32 {
                let mut gw = crate::matrix::pseudo_random(3, 5, 100 + t);
                let gb = crate::matrix::pseudo_random(1, 4, 200 + t);
                gw.view_mut().set(1, 2, 0.0);
                let lr = 0.01 * (t + 1) as f32;
                s.begin_step();
                s.update_component(
                    0,
                    &mut [w.view_mut(), b.view_mut()],
                    &[gw.view(), gb.view()],
                    lr,
                );
                reference.step(lr, &[&gw, &gb]);
                for (m, r) in [&w, &b].iter().zip(&reference.params) {
                    for i in 0..m.num_rows() {
                        for j in 0..m.num_cols() {
                            assert_eq!(
                                m.view().get(i, j).to_bits(),
                                r.view().get(i, j).to_bits(),
                                "{kind:?} step {t} ({i}, {j})"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The plain steppers' rules element by element, for the test above.
    struct ScalarReference {
        o: StepperOptions,
        t: i32,
        params: Vec<Matrix>,
        /// Per block: the state values of each element.
        state: Vec<Matrix>,
    }

    impl ScalarReference {
        fn new(o: &StepperOptions, params: &[&Matrix]) -> Self {
            let state = params
                .iter()
                .map(|p| {
                    let mut m = Matrix::zeros(p.num_rows() * p.num_cols(), 3);
                    if o.kind == StepperKind::RmsProp {
                        // The step sizes start at 1.
                        m.view_mut().cols_range_mut(1, 1).set_const(1.0);
                    }
                    m
                })
                .collect();
            ScalarReference {
                o: o.clone(),
                t: 0,
                params: params.iter().map(|&p| p.clone()).collect(),
                state,
            }
        }

        fn step(&mut self, lr: f32, grads: &[&Matrix]) {
            self.t += 1;
            let o = &self.o;
            for ((p, g), st) in self.params.iter_mut().zip(grads).zip(&mut self.state) {
                let cols = p.num_cols();
                for k in 0..p.num_rows() * cols {
                    let (i, j) = (k / cols, k % cols);
                    let (x, g) = (p.view().get(i, j), g.view().get(i, j));
                    let [mut a, mut b, mut c] = [0, 1, 2].map(|s| st.view().get(k, s));
                    let x = match o.kind {
                        StepperKind::Sgd | StepperKind::NaturalGradient => x + lr * g,
                        StepperKind::Momentum => {
                            a = o.momentum * a + g;
                            x + lr * a
                        }
                        StepperKind::Nesterov => {
                            a = o.momentum * a + g;
                            x + lr * (g + o.momentum * a)
                        }
                        StepperKind::AdaGrad => {
                            a += g * g;
                            x + lr * g / (a.sqrt() + o.epsilon)
                        }
                        StepperKind::RmsProp => {
                            a = o.rms_gamma * a + (1.0 - o.rms_gamma) * g * g;
                            let sign = if g > 0.0 {
                                1.0
                            } else if g < 0.0 {
                                -1.0
                            } else {
                                0.0
                            };
                            if sign * c > 0.0 {
                                b = (b * o.rms_inc).min(o.rms_max);
                            } else if sign * c < 0.0 {
                                b = (b * o.rms_dec).max(o.rms_min);
                            }
                            c = sign;
                            x + lr * b * g / (a + o.epsilon).sqrt()
                        }
                        StepperKind::Adam | StepperKind::AdamW => {
                            let c1 = 1.0 - o.beta1.powi(self.t);
                            let c2 = 1.0 - o.beta2.powi(self.t);
                            let decay = if o.kind == StepperKind::AdamW {
                                1.0 - lr * o.weight_decay
                            } else {
                                1.0
                            };
                            a = o.beta1 * a + (1.0 - o.beta1) * g;
                            b = o.beta2 * b + (1.0 - o.beta2) * g * g;
                            x * decay + lr * (a / c1) / ((b / c2).sqrt() + o.epsilon)
                        }
                    };
                    p.view_mut().set(i, j, x);
                    for (s, v) in [a, b, c].into_iter().enumerate() {
                        st.view_mut().set(k, s, v);
                    }
                }
            }
        }
    }
}
