//! Steppers: how a minibatch's gradient becomes a parameter change (CNTK's learners,
//! Brainstorm's steppers), and Kaldi's natural-gradient SGD with max-change.
//!
//! The plain steppers see the plain gradient: the backward pass writes into a *gradient
//! network* whose components are gradient holders (`is_gradient`, learning rate 1), for which
//! `gradient::Update` never preconditions. Each stepper then updates every updatable
//! component's flat parameter vector (`vectorize`/`unvectorize`) from its flat gradient,
//! keeping its own per-parameter state (momentum, squared-gradient averages), which a
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
use crate::kaldi_rand::GlibcRand;
use crate::nnet::Nnet;
use crate::train::step::{KaldiUpdate, KaldiUpdateOptions};
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

    /// Per-parameter state vectors the stepper keeps.
    fn num_slots(self) -> usize {
        match self {
            StepperKind::Sgd | StepperKind::NaturalGradient => 0,
            StepperKind::Momentum | StepperKind::Nesterov | StepperKind::AdaGrad => 1,
            // RMSProp: mean square, step size, sign of the last step.
            StepperKind::RmsProp => 3,
            StepperKind::Adam | StepperKind::AdamW => 2,
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
        for (name, v) in [
            ("epsilon", self.epsilon),
            ("weight-decay", self.weight_decay),
            ("rms-inc", self.rms_inc),
            ("rms-dec", self.rms_dec),
            ("rms-max", self.rms_max),
            ("rms-min", self.rms_min),
            ("max-param-change", self.max_param_change),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::Usage(format!(
                    "--{name} must be a finite number >= 0, got {v}"
                )));
            }
        }
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

/// A plain stepper's state: the step count and, per parameter block (updatable component),
/// its state vectors.
#[derive(Clone, Debug, PartialEq)]
pub struct Stepper {
    pub opts: StepperOptions,
    /// Steps taken (Adam's bias correction).
    pub t: u64,
    /// `slots[block][slot]`, created on a block's first step.
    pub slots: Vec<Vec<Vec<f32>>>,
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

    /// Updates block `block`'s parameters `p` from its gradient `g` (to maximise) with
    /// learning rate `lr` (0 = frozen: neither the parameters nor the state move).
    pub fn update_block(&mut self, block: usize, p: &mut [f32], g: &[f32], lr: f32) {
        debug_assert_eq!(p.len(), g.len());
        if lr == 0.0 {
            return;
        }
        let o = &self.opts;
        let n = p.len();
        if self.slots.len() <= block {
            self.slots.resize(block + 1, Vec::new());
        }
        let slots = &mut self.slots[block];
        if slots.len() != o.kind.num_slots() || slots.iter().any(|s| s.len() != n) {
            *slots = (0..o.kind.num_slots()).map(|_| vec![0.0; n]).collect();
            if o.kind == StepperKind::RmsProp {
                slots[1].fill(1.0);
            }
        }
        match o.kind {
            StepperKind::Sgd | StepperKind::NaturalGradient => {
                for (p, g) in p.iter_mut().zip(g) {
                    *p += lr * g;
                }
            }
            StepperKind::Momentum => {
                let v = &mut slots[0];
                let gain = if o.unit_gain { 1.0 - o.momentum } else { 1.0 };
                for i in 0..n {
                    v[i] = o.momentum * v[i] + gain * g[i];
                    p[i] += lr * v[i];
                }
            }
            StepperKind::Nesterov => {
                let v = &mut slots[0];
                for i in 0..n {
                    v[i] = o.momentum * v[i] + g[i];
                    p[i] += lr * (g[i] + o.momentum * v[i]);
                }
            }
            StepperKind::AdaGrad => {
                let s = &mut slots[0];
                for i in 0..n {
                    s[i] += g[i] * g[i];
                    p[i] += lr * g[i] / (s[i].sqrt() + o.epsilon);
                }
            }
            StepperKind::RmsProp => {
                let [ms, step, sign] = &mut slots[..] else {
                    unreachable!("RMSProp has three slots")
                };
                for i in 0..n {
                    ms[i] = o.rms_gamma * ms[i] + (1.0 - o.rms_gamma) * g[i] * g[i];
                    let s = if g[i] > 0.0 {
                        1.0
                    } else if g[i] < 0.0 {
                        -1.0
                    } else {
                        0.0
                    };
                    if s * sign[i] > 0.0 {
                        step[i] = (step[i] * o.rms_inc).min(o.rms_max);
                    } else if s * sign[i] < 0.0 {
                        step[i] = (step[i] * o.rms_dec).max(o.rms_min);
                    }
                    sign[i] = s;
                    p[i] += lr * step[i] * g[i] / (ms[i] + o.epsilon).sqrt();
                }
            }
            StepperKind::Adam | StepperKind::AdamW => {
                let t = self.t.max(1) as i32;
                let c1 = 1.0 - o.beta1.powi(t);
                let c2 = 1.0 - o.beta2.powi(t);
                let decay = if o.kind == StepperKind::AdamW {
                    1.0 - lr * o.weight_decay
                } else {
                    1.0
                };
                let [m, v] = &mut slots[..] else {
                    unreachable!("Adam has two slots")
                };
                for i in 0..n {
                    m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g[i];
                    v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g[i] * g[i];
                    let m_hat = m[i] / c1;
                    let v_hat = v[i] / c2;
                    p[i] = p[i] * decay + lr * m_hat / (v_hat.sqrt() + o.epsilon);
                }
            }
        }
    }

    /// Serialises the state (little-endian; see [`Stepper::read_state`]).
    pub fn write_state(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.opts.kind.name().as_bytes());
        out.push(0);
        out.extend_from_slice(&self.t.to_le_bytes());
        out.extend_from_slice(&(self.slots.len() as u64).to_le_bytes());
        for block in &self.slots {
            out.extend_from_slice(&(block.len() as u64).to_le_bytes());
            for s in block {
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                for v in s {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
    }

    /// Reads what [`Stepper::write_state`] wrote, checking the stepper's name and that every
    /// block has `block_sizes[block]` parameters (the checkpoint is of this network).
    pub fn read_state(&mut self, bytes: &[u8], block_sizes: &[usize], file: &str) -> Result<()> {
        let mut r = ByteReader {
            bytes,
            pos: 0,
            file,
        };
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
        if nblocks > block_sizes.len() {
            return Err(r.err(&format!(
                "at most {} parameter blocks, found {nblocks} (a checkpoint of another network?)",
                block_sizes.len()
            )));
        }
        let mut slots = Vec::with_capacity(nblocks);
        for (b, &size) in block_sizes.iter().enumerate().take(nblocks) {
            let nslots = r.u64()? as usize;
            if nslots > 8 {
                return Err(r.err("at most 8 state vectors per block"));
            }
            let mut block = Vec::with_capacity(nslots);
            for _ in 0..nslots {
                let len = r.u64()? as usize;
                if len != size {
                    return Err(r.err(&format!(
                        "block {b} has {size} parameters in this network but {len} in the \
                         checkpoint (a checkpoint of another network?)"
                    )));
                }
                let v = r.f32s(len)?;
                if v.iter().any(|x| !x.is_finite()) {
                    return Err(r.err(&format!(
                        "block {b}: a stepper statistic that is not finite (a damaged \
                         checkpoint)"
                    )));
                }
                block.push(v);
            }
            slots.push(block);
        }
        self.slots = slots;
        Ok(())
    }
}

/// Reads the little-endian pieces of a checkpoint, errors naming the file and byte offset.
pub struct ByteReader<'a> {
    pub bytes: &'a [u8],
    pub pos: usize,
    pub file: &'a str,
}

impl ByteReader<'_> {
    pub fn err(&self, what: &str) -> Error {
        Error::Usage(format!("{}: byte {}: {what}", self.file, self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.bytes.len() - self.pos < n {
            return Err(self.err(&format!("expected {n} more bytes, the file ends")));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn cstr(&mut self) -> Result<String> {
        let end = self.bytes[self.pos..]
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.err("expected a name ended by a zero byte"))?;
        let s = String::from_utf8_lossy(&self.bytes[self.pos..self.pos + end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }

    pub fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        let b = self.take(n.checked_mul(4).ok_or_else(|| self.err("size overflows"))?)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    /// `n` bytes as a slice.
    pub fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        self.take(n)
    }
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
    /// With `clip`: a component's whole gradient is scaled down to a norm of at most
    /// clip·frames instead of each element being truncated (CNTK's
    /// `gradientClippingWithTruncation=false`).
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
    let mut block = 0;
    let mut p = Vec::new();
    let mut g = Vec::new();
    let mut finite = true;
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
        let n = u.num_parameters();
        p.resize(n, 0.0);
        g.resize(n, 0.0);
        u.vectorize(&mut p);
        gu.vectorize(&mut g);
        gu.scale(0.0);
        let clip = gopts.clip * (frames as f32 * grad_scale).max(1.0);
        // CNTK's per-sample weights: times the frames the (scaled) gradient sums over.
        let per = if gopts.per_sample {
            frames as f32 * grad_scale
        } else {
            1.0
        };
        for i in 0..n {
            let mut x = grad_scale * g[i];
            if !gopts.per_sample {
                x -= (l2_own + gopts.l2) * p[i];
                if gopts.l1 != 0.0 && p[i] != 0.0 {
                    x -= gopts.l1 * p[i].signum();
                }
            }
            if clip > 0.0 && !gopts.clip_norm {
                x = x.clamp(-clip, clip);
            }
            g[i] = x;
        }
        if clip > 0.0 && gopts.clip_norm {
            let norm = g
                .iter()
                .map(|&x| f64::from(x) * f64::from(x))
                .sum::<f64>()
                .sqrt();
            if norm > f64::from(clip) {
                let s = (f64::from(clip) / norm) as f32;
                g.iter_mut().for_each(|x| *x *= s);
            }
        }
        for i in 0..n {
            let mut x = g[i];
            if gopts.per_sample {
                x -= (l2_own + gopts.l2 * per) * p[i];
            }
            if gopts.noise_stddev > 0.0 {
                x += gopts.noise_stddev * crate::random::rand_gauss(rng);
            }
            finite &= x.is_finite();
            g[i] = x;
        }
        if !finite {
            return false;
        }
        stepper.update_block(block, &mut p, &g, lr * factor);
        if gopts.per_sample && gopts.l1 != 0.0 {
            let t = lr * factor * gopts.l1 * per;
            p.iter_mut()
                .for_each(|x| *x = x.signum() * (x.abs() - t).max(0.0));
        }
        if lr * factor != 0.0 {
            u.unvectorize(&p);
        }
        block += 1;
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
            let mut v = vec![0.0f32; u.num_parameters()];
            u.vectorize(&mut v);
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        out.extend_from_slice(&super::fit_loop::encode_stats(&self.delta));
    }

    /// Reads what [`KaldiUpdate::write_state`] wrote; the delta network must have the
    /// same blocks (a checkpoint of this network) and its values must be finite.
    pub fn read_state(&mut self, bytes: &[u8], file: &str) -> Result<()> {
        let mut r = ByteReader {
            bytes,
            pos: 0,
            file,
        };
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
            let v = r.f32s(len as usize)?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(r.err(&format!(
                    "block {b}: a momentum value that is not finite (a damaged checkpoint)"
                )));
            }
            u.unvectorize(&v);
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

    fn stepper(kind: StepperKind) -> Stepper {
        Stepper::new(StepperOptions {
            kind,
            ..Default::default()
        })
    }

    /// Two steps on p = [1, -2] with gradients [0.5, -1] then [-0.25, 2], lr 0.1, each
    /// against the update rule written out by hand.
    fn two_steps(kind: StepperKind) -> Vec<f32> {
        let mut s = stepper(kind);
        let mut p = vec![1.0f32, -2.0];
        for g in [[0.5f32, -1.0], [-0.25, 2.0]] {
            s.begin_step();
            s.update_block(0, &mut p, &g, 0.1);
        }
        p
    }

    fn close(a: &[f32], b: &[f64]) {
        for (x, y) in a.iter().zip(b) {
            assert!((*x as f64 - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn first_steps_equal_hand_computed_values() {
        // SGD: p + 0.1 g1 + 0.1 g2.
        close(&two_steps(StepperKind::Sgd), &[1.025, -1.9]);
        // Momentum 0.9: v1 = g1, v2 = 0.9 g1 + g2 = [0.2, 1.1]; p += 0.1 (v1 + v2).
        close(&two_steps(StepperKind::Momentum), &[1.07, -1.99]);
        // Nesterov: step1 = g1 + 0.9 v1 = 1.9 g1; step2 = g2 + 0.9 v2 = [-0.07, 2.99].
        close(
            &two_steps(StepperKind::Nesterov),
            &[1.0 + 0.1 * (0.95 - 0.07), -2.0 + 0.1 * (-1.9 + 2.99)],
        );
        // AdaGrad: s1 = g1², step1 = lr·sign(g1); s2 = g1² + g2².
        let e = 1e-8;
        close(
            &two_steps(StepperKind::AdaGrad),
            &[
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
            &[1.0 + 0.1 + adam2(0.5, -0.25), -2.0 - 0.1 + adam2(-1.0, 2.0)],
        );
        // AdamW: p ← p(1 − lr λ) first.
        let d = 1.0 - 0.1 * 0.01;
        close(
            &two_steps(StepperKind::AdamW),
            &[
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
            &[
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
        let mut p = vec![0.0f32];
        for _ in 0..3 {
            s.begin_step();
            s.update_block(0, &mut p, &[1.0], 0.1);
        }
        close(&s.slots[0][1], &[1.44]);
    }

    #[test]
    fn every_stepper_decreases_a_convex_objective() {
        // Maximise −½ Σ a_i (p_i − c_i)²: the gradient is a ⊙ (c − p).
        let a = [1.0f32, 4.0, 0.5, 2.0];
        let c = [1.0f32, -1.0, 2.0, 0.5];
        let loss = |p: &[f32]| -> f32 { (0..4).map(|i| 0.5 * a[i] * (p[i] - c[i]).powi(2)).sum() };
        for kind in [
            StepperKind::Sgd,
            StepperKind::Momentum,
            StepperKind::Nesterov,
            StepperKind::AdaGrad,
            StepperKind::RmsProp,
            StepperKind::Adam,
            StepperKind::AdamW,
        ] {
            let mut s = stepper(kind);
            let lr = match kind {
                StepperKind::Momentum | StepperKind::Nesterov => 0.02,
                StepperKind::RmsProp => 0.002,
                StepperKind::Sgd => 0.1,
                StepperKind::AdaGrad => 0.5,
                _ => 0.05,
            };
            let mut p = vec![0.0f32; 4];
            let start = loss(&p);
            for _ in 0..300 {
                let g: Vec<f32> = (0..4).map(|i| a[i] * (c[i] - p[i])).collect();
                s.begin_step();
                s.update_block(0, &mut p, &g, lr);
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
        let mut p = vec![1.0f32, 2.0];
        s.begin_step();
        s.update_block(0, &mut p, &[1.0, 1.0], 0.0);
        assert_eq!(p, vec![1.0, 2.0]);
    }

    #[test]
    fn state_round_trips_and_rejects_another_network() {
        let mut s = stepper(StepperKind::Adam);
        let mut p = vec![1.0f32, 2.0, 3.0];
        s.begin_step();
        s.update_block(0, &mut p, &[0.3, -0.1, 0.7], 0.01);
        let mut bytes = Vec::new();
        s.write_state(&mut bytes);
        let mut t = stepper(StepperKind::Adam);
        t.read_state(&bytes, &[3], "ckpt").unwrap();
        assert_eq!(s, t);
        let e = t.read_state(&bytes, &[4], "ckpt").unwrap_err().to_string();
        assert!(e.contains("ckpt") && e.contains("another network"), "{e}");
        let mut sgd = stepper(StepperKind::Sgd);
        assert!(sgd.read_state(&bytes, &[3], "ckpt").is_err());
        assert!(t
            .read_state(&bytes[..bytes.len() - 2], &[3], "ckpt")
            .is_err());
    }
}
