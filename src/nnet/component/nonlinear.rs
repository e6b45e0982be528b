//! The nonlinearities (Kaldi's `NonlinearComponent` family): Sigmoid, Tanh, RectifiedLinear,
//! Softmax and LogSoftmax. They share the config options `dim`, `block-dim`,
//! `self-repair-{lower,upper}-threshold`, `self-repair-scale`, and the statistics
//! (value/derivative sums, output-derivative sum of squares, self-repair counters) that Kaldi
//! stores in the model file, normalised by their counts.
//!
//! Also home of the info-line helpers [`summarize_vector`] and [`parameter_stats`], which
//! reproduce Kaldi's `SummarizeVector` / `PrintParameterStats` text.

use super::info_summary;
use super::kaldi_fields::{read_field, read_opt_into, write_component};
use super::param_ops::component_boilerplate;
use super::{
    update_target, Backprop, BackpropInPlace, Component, Description, Memo, Propagate,
    PropagateInPlace, Properties, StatsStep,
};
use crate::error::Result;
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::kaldi_rand::{kaldi_rand_int, kaldi_rand_uniform};
use crate::matrix::{MatView, MatViewMut, Trans, Vector, Vector64};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// Kaldi's sentinel for "threshold not set: use the per-type default".
pub const UNSET_THRESHOLD: f32 = -1000.0;

/// Self-repair only runs on about this fraction of minibatches (Kaldi hard-codes 0.5).
const REPAIR_PROBABILITY: f32 = 0.5;

/// Kaldi's SoftmaxComponent floors its outputs here so that their logs stay finite.
const SOFTMAX_FLOOR: f32 = 1.0e-20;

/// Which nonlinearity a [`NonlinearComponent`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonlinearKind {
    Sigmoid,
    Tanh,
    RectifiedLinear,
    Softmax,
    LogSoftmax,
}

impl NonlinearKind {
    /// Kaldi's type name.
    pub fn type_name(self) -> &'static str {
        match self {
            NonlinearKind::Sigmoid => "SigmoidComponent",
            NonlinearKind::Tanh => "TanhComponent",
            NonlinearKind::RectifiedLinear => "RectifiedLinearComponent",
            NonlinearKind::Softmax => "SoftmaxComponent",
            NonlinearKind::LogSoftmax => "LogSoftmaxComponent",
        }
    }
}

/// A nonlinearity with Kaldi's statistics and self-repair state.
#[derive(Clone, Debug)]
pub struct NonlinearComponent {
    kind: NonlinearKind,
    dim: usize,
    block_dim: usize,
    /// Sum over stored frames of the output (empty until stats are stored).
    value_sum: Vector64,
    /// Sum over stored frames of the function derivative (empty for Softmax/LogSoftmax).
    deriv_sum: Vector64,
    count: f64,
    /// Sum over stored frames of the squared output derivative.
    oderiv_sumsq: Vector64,
    oderiv_count: f64,
    num_dims_self_repaired: f64,
    num_dims_processed: f64,
    self_repair_lower_threshold: f32,
    self_repair_upper_threshold: f32,
    self_repair_scale: f32,
}

impl NonlinearComponent {
    /// A fresh component of this kind with no statistics.
    pub fn new(kind: NonlinearKind, dim: usize) -> Self {
        NonlinearComponent {
            kind,
            dim,
            block_dim: dim,
            value_sum: Vector64::default(),
            deriv_sum: Vector64::default(),
            count: 0.0,
            oderiv_sumsq: Vector64::default(),
            oderiv_count: 0.0,
            num_dims_self_repaired: 0.0,
            num_dims_processed: 0.0,
            self_repair_lower_threshold: UNSET_THRESHOLD,
            self_repair_upper_threshold: UNSET_THRESHOLD,
            self_repair_scale: 0.0,
        }
    }

    /// The nonlinearity this component computes.
    pub fn kind(&self) -> NonlinearKind {
        self.kind
    }
    /// Number of frames the value/derivative statistics were accumulated over.
    pub fn count(&self) -> f64 {
        self.count
    }
    /// Number of frames the output-derivative statistics were accumulated over.
    pub fn oderiv_count(&self) -> f64 {
        self.oderiv_count
    }
    /// Per-dimension average output (empty without stats).
    pub fn value_avg(&self) -> Vector {
        avg_as_kaldi_writes(&self.value_sum, self.count)
    }
    /// Per-dimension average derivative (empty without stats).
    pub fn deriv_avg(&self) -> Vector {
        avg_as_kaldi_writes(&self.deriv_sum, self.count)
    }
    /// Self-repair counters (dims repaired, dims processed).
    pub fn self_repair_counts(&self) -> (f64, f64) {
        (self.num_dims_self_repaired, self.num_dims_processed)
    }

    /// Kaldi's `NonlinearComponent::InitFromConfig`.
    pub fn from_config_kind(kind: NonlinearKind, cfg: &ConfigLine) -> Result<Self> {
        let dim: i32 = cfg.require("dim")?;
        let block_dim: i32 = cfg.get_or("block-dim", dim)?;
        let mut c = NonlinearComponent::new(kind, 0);
        c.self_repair_lower_threshold =
            cfg.get_or("self-repair-lower-threshold", UNSET_THRESHOLD)?;
        c.self_repair_upper_threshold =
            cfg.get_or("self-repair-upper-threshold", UNSET_THRESHOLD)?;
        c.self_repair_scale = cfg.get_or("self-repair-scale", 0.0f32)?;
        if dim <= 0 || block_dim <= 0 || dim % block_dim != 0 {
            return Err(cfg.error(format!(
                "invalid initializer for {}: need dim > 0 and block-dim > 0 dividing dim",
                kind.type_name()
            )));
        }
        if c.self_repair_scale < 0.0 || c.self_repair_scale >= 0.1 {
            return Err(
                cfg.error_at_value("self-repair-scale", "self-repair-scale must be in [0, 0.1)")
            );
        }
        c.dim = dim as usize;
        c.block_dim = block_dim as usize;
        Ok(c)
    }

    /// Reads the body after `<TypeName>` (Kaldi's `NonlinearComponent::Read`).
    pub fn read_kind(kind: NonlinearKind, r: &mut TokenReader<'_>) -> Result<Self> {
        let open = format!("<{}>", kind.type_name());
        let close = format!("</{}>", kind.type_name());
        r.try_token(&open)?;
        r.expect_token("<Dim>")?;
        let at = r.pos();
        let dim = r.i32()?;
        if dim <= 0 {
            return Err(r.err_at(at, "a positive <Dim>"));
        }
        let dim = dim as usize;
        let mut c = NonlinearComponent::new(kind, dim);
        if r.try_token("<BlockDim>")? {
            let at = r.pos();
            let bd = r.i32()?;
            if bd <= 0 || !dim.is_multiple_of(bd as usize) {
                return Err(r.err_at(at, "a positive <BlockDim> dividing <Dim>"));
            }
            c.block_dim = bd as usize;
        }
        r.expect_token("<ValueAvg>")?;
        let value_avg = read_stats_vector(r, dim, "<ValueAvg>")?;
        r.expect_token("<DerivAvg>")?;
        let deriv_avg = read_stats_vector(r, dim, "<DerivAvg>")?;
        c.count = read_field(r, "<Count>")?;
        // Back to sums: avg · count, and rms² · count.
        c.value_sum = value_avg;
        c.value_sum.scale(c.count);
        c.deriv_sum = deriv_avg;
        c.deriv_sum.scale(c.count);
        if r.try_token("<OderivRms>")? {
            let rms = read_stats_vector(r, dim, "<OderivRms>")?;
            c.oderiv_count = read_field(r, "<OderivCount>")?;
            c.oderiv_sumsq = rms.clone();
            c.oderiv_sumsq.mul_elements(&rms);
            c.oderiv_sumsq.scale(c.oderiv_count);
        }
        read_opt_into(r, "<NumDimsSelfRepaired>", &mut c.num_dims_self_repaired)?;
        read_opt_into(r, "<NumDimsProcessed>", &mut c.num_dims_processed)?;
        read_opt_into(
            r,
            "<SelfRepairLowerThreshold>",
            &mut c.self_repair_lower_threshold,
        )?;
        read_opt_into(
            r,
            "<SelfRepairUpperThreshold>",
            &mut c.self_repair_upper_threshold,
        )?;
        read_opt_into(r, "<SelfRepairScale>", &mut c.self_repair_scale)?;
        r.expect_token(&close)?;
        Ok(c)
    }

    /// Accumulates output (and optionally derivative) sums (Kaldi's `StoreStatsInternal`).
    fn store_stats_internal(&mut self, out_value: MatView<'_>, deriv: Option<MatView<'_>>) {
        let dim = self.dim;
        if out_value.num_cols() != dim {
            return;
        }
        if self.value_sum.dim() != dim {
            self.value_sum = Vector64::zeros(dim);
            self.count = 0.0;
        }
        if deriv.is_some() && self.deriv_sum.dim() != dim {
            self.deriv_sum = Vector64::zeros(dim);
            self.count = 0.0;
            self.value_sum.set_zero();
        }
        self.count += out_value.num_rows() as f64;
        // Column sums in float, added to the double sums (Kaldi's temp vector).
        let mut temp = Vector::zeros(dim);
        temp.add_row_sum_mat(1.0, out_value, 0.0);
        self.value_sum.add_vec_f32(1.0, &temp);
        if let Some(d) = deriv {
            temp.add_row_sum_mat(1.0, d, 0.0);
            self.deriv_sum.add_vec_f32(1.0, &temp);
        }
    }

    /// Accumulates output-derivative squares on about 3 of 4 calls, always on the first
    /// (Kaldi's `StoreBackpropStats`).
    fn store_backprop_stats(&mut self, out_deriv: MatView<'_>, rng: &mut dyn RngCore) {
        // Kaldi draws first, then looks at the count.
        if kaldi_rand_int(rng, 0, 3) == 0 && self.oderiv_count != 0.0 {
            return;
        }
        let dim = self.dim;
        if out_deriv.num_cols() != dim {
            return;
        }
        if self.oderiv_sumsq.dim() != dim {
            self.oderiv_sumsq = Vector64::zeros(dim);
            self.oderiv_count = 0.0;
        }
        let mut temp = Vector::zeros(dim);
        temp.add_diag_mat2(1.0, out_deriv, Trans::Yes, 0.0);
        self.oderiv_sumsq.add_vec_f32(1.0, &temp);
        self.oderiv_count += out_deriv.num_rows() as f64;
    }

    /// Adds `alpha` times the statistics of `other` (Kaldi's `NonlinearComponent::Add`).
    fn add_stats_from(&mut self, alpha: f32, other: &dyn Component) {
        let Some(o) = other.as_any().downcast_ref::<NonlinearComponent>() else {
            return;
        };
        let a = alpha as f64;
        fn add_vec(dst: &mut Vector64, src: &Vector64, a: f64) {
            if src.is_empty() {
                return;
            }
            if dst.dim() != src.dim() {
                *dst = Vector64::zeros(src.dim());
            }
            dst.add_vec(a, src);
        }
        add_vec(&mut self.value_sum, &o.value_sum, a);
        add_vec(&mut self.deriv_sum, &o.deriv_sum, a);
        add_vec(&mut self.oderiv_sumsq, &o.oderiv_sumsq, a);
        self.count += a * o.count;
        self.oderiv_count += a * o.oderiv_count;
        self.num_dims_self_repaired += a * o.num_dims_self_repaired;
        self.num_dims_processed += a * o.num_dims_processed;
    }

    /// Sigmoid/Tanh self-repair: nudges inputs of units whose average derivative is below
    /// the lower threshold back towards zero.
    fn repair_saturating(
        &self,
        out_value: MatView<'_>,
        in_deriv: &mut MatViewMut<'_>,
        upd: &mut Self,
        rng: &mut dyn RngCore,
    ) {
        upd.num_dims_processed += self.dim as f64;
        if self.self_repair_scale == 0.0
            || self.count == 0.0
            || self.deriv_sum.dim() != self.dim
            || kaldi_rand_uniform(rng) > REPAIR_PROBABILITY
        {
            return;
        }
        let sigmoid = self.kind == NonlinearKind::Sigmoid;
        let default_lower = if sigmoid { 0.05 } else { 0.2 };
        let lower = if self.self_repair_lower_threshold == UNSET_THRESHOLD {
            default_lower
        } else {
            self.self_repair_lower_threshold
        } * self.count as f32;
        // 1 for each 'problematic' unit whose summed derivative is below the threshold.
        // lower − d (as −d + lower, the same float), then 1 where positive.
        let mut flags = Vector::from_f64(&self.deriv_sum);
        flags.scale(-1.0);
        flags.add_const(lower);
        flags.as_row_mut().apply_heaviside();
        upd.num_dims_self_repaired += flags.sum_f64();
        let s = self.self_repair_scale / REPAIR_PROBABILITY;
        // Sigmoid: add s * (1 - 2y) (a tanh-like push towards zero); Tanh: add -s * y.
        let (out_coef, constant) = if sigmoid { (-2.0 * s, s) } else { (-s, 0.0) };
        in_deriv.add_affine_mat_diag_vec(&flags, out_coef, out_value, constant);
    }

    /// ReLU self-repair: pushes up units that are rarely active and down units that are
    /// almost always active (per block of `block-dim` when set).
    fn repair_relu(&self, in_deriv: &mut MatViewMut<'_>, upd: &mut Self, rng: &mut dyn RngCore) {
        let (dim, bd) = (self.dim, self.block_dim);
        if self.self_repair_scale == 0.0 || self.count == 0.0 || self.deriv_sum.dim() != dim {
            return;
        }
        if kaldi_rand_uniform(rng) > REPAIR_PROBABILITY {
            return;
        }
        upd.num_dims_processed += bd as f64;
        let count = self.count as f32;
        let pick = |t: f32, def: f32| if t == UNSET_THRESHOLD { def } else { t };
        let lower = pick(self.self_repair_lower_threshold, 0.05) * count;
        let upper = pick(self.self_repair_upper_threshold, 0.95) * count;
        // Derivative sums per position in a block, averaged over the blocks.
        let stats = if bd == dim {
            Vector::from_f64(&self.deriv_sum)
        } else {
            let mut s = self.deriv_sum.sum_blocks(bd);
            s.scale(bd as f64 / dim as f64);
            Vector::from_f64(&s)
        };
        // -1 below the lower threshold, +1 above the upper one, 0 in between:
        // heaviside(s − lower) + heaviside(s − upper) − 1.
        let mut dir = stats.clone();
        dir.add_const(-lower);
        dir.as_row_mut().apply_heaviside();
        let mut above = stats;
        above.add_const(-upper);
        above.as_row_mut().apply_heaviside();
        dir.as_row_mut().add_mat(1.0, above.as_row(), Trans::No);
        dir.add_const(-1.0);
        // Σ dir² = Σ |dir| for values in {−1, 0, 1}.
        upd.num_dims_self_repaired += dir.norm(1.0) as f64;
        dir.scale(-self.self_repair_scale / REPAIR_PROBABILITY);
        in_deriv.add_vec_per_block(&dir);
    }

    /// The function derivative computed from the output, for the statistics.
    fn deriv_from_output(&self, out_value: MatView<'_>) -> Option<crate::matrix::Matrix> {
        let mut d = out_value.to_matrix();
        match self.kind {
            NonlinearKind::Sigmoid => d.view_mut().apply_sigmoid_deriv_from_output(),
            NonlinearKind::Tanh => d.view_mut().apply_tanh_deriv_from_output(),
            NonlinearKind::RectifiedLinear => d.view_mut().apply_heaviside(),
            _ => return None,
        }
        Some(d)
    }

    /// Input derivative from the output derivative, written into `in_deriv` (which may
    /// already hold `out_deriv` when `in_place`).
    fn compute_in_deriv(
        &self,
        out_value: MatView<'_>,
        out_deriv: MatView<'_>,
        in_deriv: &mut MatViewMut<'_>,
    ) {
        match self.kind {
            NonlinearKind::Sigmoid => in_deriv.diff_sigmoid(out_value, out_deriv),
            NonlinearKind::Tanh => in_deriv.diff_tanh(out_value, out_deriv),
            NonlinearKind::RectifiedLinear => in_deriv.diff_relu(out_value, out_deriv),
            NonlinearKind::Softmax => in_deriv.diff_softmax_per_row(out_value, out_deriv),
            NonlinearKind::LogSoftmax => in_deriv.diff_log_softmax_per_row(out_value, out_deriv),
        }
    }

    /// Self-repair and output-derivative statistics, done only in training (`to_update`).
    fn after_backprop(
        &self,
        out_value: MatView<'_>,
        out_deriv: MatView<'_>,
        in_deriv: &mut MatViewMut<'_>,
        to_update: Option<&mut dyn Component>,
        rng: &mut dyn RngCore,
    ) {
        let Some(upd) = update_target::<NonlinearComponent>(to_update) else {
            return;
        };
        match self.kind {
            NonlinearKind::Sigmoid | NonlinearKind::Tanh => {
                self.repair_saturating(out_value, in_deriv, upd, rng)
            }
            NonlinearKind::RectifiedLinear => self.repair_relu(in_deriv, upd, rng),
            _ => {}
        }
        upd.store_backprop_stats(out_deriv, rng);
    }
}

/// Averages as Kaldi writes them: the sum converted to float, times the float of 1/count
/// (this order reproduces Kaldi's stored floats bit for bit).
fn avg_as_kaldi_writes(sum: &Vector64, count: f64) -> Vector {
    let inv = if count != 0.0 {
        (1.0 / count) as f32
    } else {
        1.0
    };
    let mut avg = Vector::from_f64(sum);
    avg.scale(inv);
    avg
}

/// Reads a statistics vector that must be empty or of dimension `dim`.
/// Kaldi keeps these statistics in doubles, so text numbers are parsed as doubles.
fn read_stats_vector(r: &mut TokenReader<'_>, dim: usize, what: &str) -> Result<Vector64> {
    let at = r.pos();
    let v = r.vector64()?;
    if !v.is_empty() && v.dim() != dim {
        return Err(r.err_at(
            at,
            format!("a {what} vector of dimension 0 or {dim} (got {})", v.dim()),
        ));
    }
    Ok(v)
}

impl Component for NonlinearComponent {
    fn describe(&self) -> Description {
        let properties = {
            let base =
                Properties::SIMPLE | Properties::BACKPROP_NEEDS_OUTPUT | Properties::STORES_STATS;
            match self.kind {
                NonlinearKind::Sigmoid | NonlinearKind::Tanh => {
                    base | Properties::PROPAGATE_IN_PLACE
                }
                NonlinearKind::RectifiedLinear => {
                    (base | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_NEEDS_OUTPUT_SIGN)
                        .with_if(self.block_dim != self.dim, Properties::INPUT_CONTIGUOUS)
                }
                NonlinearKind::Softmax => {
                    base | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE
                }
                NonlinearKind::LogSoftmax => base,
            }
        };
        Description::new(self.kind.type_name(), self.dim, self.dim, properties)
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        match self.kind {
            NonlinearKind::Sigmoid => p.output.sigmoid_from(p.input),
            NonlinearKind::Tanh => p.output.tanh_from(p.input),
            NonlinearKind::RectifiedLinear => {
                p.output.copy_from(p.input);
                p.output.apply_floor(0.0);
            }
            NonlinearKind::Softmax => {
                p.output.copy_from(p.input);
                p.output.apply_softmax_per_row_floored(SOFTMAX_FLOOR);
            }
            NonlinearKind::LogSoftmax => p.output.log_softmax_per_row_from(p.input),
        }
        None
    }

    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        match self.kind {
            NonlinearKind::Sigmoid => p.data.apply_sigmoid(),
            NonlinearKind::Tanh => p.data.apply_tanh(),
            NonlinearKind::RectifiedLinear => p.data.apply_floor(0.0),
            NonlinearKind::Softmax => p.data.apply_softmax_per_row_floored(SOFTMAX_FLOOR),
            NonlinearKind::LogSoftmax => p.data.apply_log_softmax_per_row(),
        }
        None
    }

    fn backprop(&self, b: Backprop<'_>) {
        let Some(mut in_deriv) = b.in_deriv else {
            return;
        };
        self.compute_in_deriv(b.out_value, b.out_deriv, &mut in_deriv);
        self.after_backprop(b.out_value, b.out_deriv, &mut in_deriv, b.to_update, b.rng);
    }

    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        // The output derivative is needed after it is overwritten only for the statistics;
        // keep a copy just when training.
        let saved = b.to_update.as_ref().map(|_| b.deriv.as_view().to_matrix());
        match self.kind {
            NonlinearKind::Softmax => b.deriv.diff_softmax_per_row_in_place(b.out_value),
            NonlinearKind::Sigmoid => b.deriv.diff_sigmoid_in_place(b.out_value),
            NonlinearKind::Tanh => b.deriv.diff_tanh_in_place(b.out_value),
            NonlinearKind::RectifiedLinear => b.deriv.diff_relu_in_place(b.out_value),
            NonlinearKind::LogSoftmax => b.deriv.diff_log_softmax_per_row_in_place(b.out_value),
        }
        if let Some(od) = saved {
            self.after_backprop(b.out_value, od.view(), &mut b.deriv, b.to_update, b.rng);
        }
    }

    fn write(&self, w: &mut TokenWriter) {
        let mut rms = avg_as_kaldi_writes(&self.oderiv_sumsq, self.oderiv_count);
        rms.apply_sqrt_floored();
        let set = |t: f32| (t != UNSET_THRESHOLD).then_some(t);
        write_component(
            w,
            self.kind.type_name(),
            &[
                ("<Dim>", &self.dim),
                (
                    "<BlockDim>",
                    &(self.block_dim != self.dim).then_some(self.block_dim),
                ),
                (
                    "<ValueAvg>",
                    &avg_as_kaldi_writes(&self.value_sum, self.count),
                ),
                (
                    "<DerivAvg>",
                    &avg_as_kaldi_writes(&self.deriv_sum, self.count),
                ),
                ("<Count>", &self.count),
                ("<OderivRms>", &rms),
                ("<OderivCount>", &self.oderiv_count),
                ("<NumDimsSelfRepaired>", &self.num_dims_self_repaired),
                ("<NumDimsProcessed>", &self.num_dims_processed),
                (
                    "<SelfRepairLowerThreshold>",
                    &set(self.self_repair_lower_threshold),
                ),
                (
                    "<SelfRepairUpperThreshold>",
                    &set(self.self_repair_upper_threshold),
                ),
                (
                    "<SelfRepairScale>",
                    &(self.self_repair_scale != 0.0).then_some(self.self_repair_scale),
                ),
            ],
        );
    }

    fn info(&self) -> String {
        let mut s = format!("{}, dim={}", self.kind.type_name(), self.dim);
        if self.block_dim != self.dim {
            s += &format!(", block-dim={}", self.block_dim);
        }
        if self.self_repair_lower_threshold != UNSET_THRESHOLD {
            s += &format!(
                ", self-repair-lower-threshold={}",
                fmt_g(self.self_repair_lower_threshold as f64, 6)
            );
        }
        if self.self_repair_upper_threshold != UNSET_THRESHOLD {
            s += &format!(
                ", self-repair-upper-threshold={}",
                fmt_g(self.self_repair_upper_threshold as f64, 6)
            );
        }
        if self.self_repair_scale != 0.0 {
            s += &format!(
                ", self-repair-scale={}",
                fmt_g(self.self_repair_scale as f64, 6)
            );
        }
        if self.count > 0.0 && self.value_sum.dim() == self.dim {
            let prop = if self.num_dims_processed > 0.0 {
                self.num_dims_self_repaired / self.num_dims_processed
            } else {
                0.0
            };
            s += &format!(
                ", count={}, self-repaired-proportion={}",
                fmt_g(self.count, 3),
                fmt_g(prop, 6)
            );
            let v = avg_as_kaldi_writes(&self.value_sum, self.count);
            s += &format!(", value-avg={}", summarize_vector(&v));
            if self.deriv_sum.dim() == self.dim {
                let d = avg_as_kaldi_writes(&self.deriv_sum, self.count);
                s += &format!(", deriv-avg={}", summarize_vector(&d));
            }
        }
        if self.oderiv_count > 0.0 && self.oderiv_sumsq.dim() == self.dim {
            let mut v = avg_as_kaldi_writes(&self.oderiv_sumsq, self.oderiv_count);
            v.apply_sqrt_floored();
            s += &format!(
                ", oderiv-rms={}, oderiv-count={}",
                summarize_vector(&v),
                fmt_g(self.oderiv_count, 6)
            );
        }
        s
    }

    component_boilerplate!();

    fn store_stats_step(&mut self, s: StatsStep<'_>) {
        let (out_value, rng) = (s.out_value, s.rng);
        match self.kind {
            NonlinearKind::Sigmoid | NonlinearKind::Tanh | NonlinearKind::RectifiedLinear => {
                // Kaldi stores these on about every other minibatch, always on the first
                // (its draw comes first, whatever the count).
                if kaldi_rand_int(rng, 0, 1) == 0 && self.count != 0.0 {
                    return;
                }
                let d = self.deriv_from_output(out_value);
                self.store_stats_internal(out_value, d.as_ref().map(|m| m.view()));
            }
            NonlinearKind::Softmax => self.store_stats_internal(out_value, None),
            NonlinearKind::LogSoftmax => {}
        }
    }
    fn exact_stats(&self) -> Vector64 {
        let mut v = Vector64::default();
        for x in [
            self.count,
            self.oderiv_count,
            self.num_dims_self_repaired,
            self.num_dims_processed,
        ] {
            v.push(x);
        }
        for s in [&self.value_sum, &self.deriv_sum, &self.oderiv_sumsq] {
            v.push(s.dim() as f64);
            s.append_to(&mut v);
        }
        v
    }
    fn set_exact_stats(&mut self, stats: &Vector64) -> bool {
        let Some((head, mut rest)) = stats.split_at(4) else {
            return false;
        };
        let mut vecs = Vec::new();
        for _ in 0..3 {
            let Some((n, tail)) = rest.split_at(1) else {
                return false;
            };
            let n = n.get(0) as usize;
            let Some((v, tail)) = tail.split_at(n).filter(|_| n == 0 || n == self.dim) else {
                return false;
            };
            vecs.push(v);
            rest = tail;
        }
        if !rest.is_empty() {
            return false;
        }
        self.count = head.get(0);
        self.oderiv_count = head.get(1);
        self.num_dims_self_repaired = head.get(2);
        self.num_dims_processed = head.get(3);
        self.oderiv_sumsq = vecs.pop().unwrap_or_default();
        self.deriv_sum = vecs.pop().unwrap_or_default();
        self.value_sum = vecs.pop().unwrap_or_default();
        true
    }
    fn zero_stats(&mut self) {
        self.value_sum.set_zero();
        self.deriv_sum.set_zero();
        self.oderiv_sumsq.set_zero();
        self.count = 0.0;
        self.oderiv_count = 0.0;
        self.num_dims_self_repaired = 0.0;
        self.num_dims_processed = 0.0;
    }
    fn scale_stats(&mut self, scale: f32) {
        let s = scale as f64;
        for v in [
            &mut self.value_sum,
            &mut self.deriv_sum,
            &mut self.oderiv_sumsq,
        ] {
            v.scale(s);
        }
        self.count *= s;
        self.oderiv_count *= s;
        self.num_dims_self_repaired *= s;
        self.num_dims_processed *= s;
    }
    fn add_stats(&mut self, alpha: f32, other: &dyn Component) {
        self.add_stats_from(alpha, other);
    }
}

macro_rules! nonlinear_entry_fns {
    ($from:ident, $read:ident, $kind:expr) => {
        /// Registry hook: create from a config line.
        pub fn $from(cfg: &ConfigLine, _init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
            Ok(Box::new(NonlinearComponent::from_config_kind($kind, cfg)?))
        }
        /// Registry hook: read after the opening token.
        pub fn $read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
            Ok(Box::new(NonlinearComponent::read_kind($kind, r)?))
        }
    };
}
nonlinear_entry_fns!(sigmoid_from_config, sigmoid_read, NonlinearKind::Sigmoid);
nonlinear_entry_fns!(tanh_from_config, tanh_read, NonlinearKind::Tanh);
nonlinear_entry_fns!(relu_from_config, relu_read, NonlinearKind::RectifiedLinear);
nonlinear_entry_fns!(softmax_from_config, softmax_read, NonlinearKind::Softmax);
nonlinear_entry_fns!(
    log_softmax_from_config,
    log_softmax_read,
    NonlinearKind::LogSoftmax
);

// ---------------------------------------------------------------------------------------
// Info-line helpers.

/// Mean and standard deviation the way Kaldi computes them (float, sqrt of E[x²] − mean²,
/// which is `-nan` when rounding makes it negative).
fn mean_stddev(v: &Vector) -> (f32, f32) {
    // Info lines are text: the elements are read through a host copy.
    let v = v.to_vec();
    let n = v.len().max(1) as f32;
    let sum: f32 = v.iter().sum();
    let sumsq: f32 = v.iter().map(|x| x * x).sum();
    let mean = sum / n;
    // Kaldi's build contracts `E[x²] − mean²` into a fused multiply-add.
    let var = (-mean).mul_add(mean, sumsq / n);
    let stddev = if var < 0.0 { -f32::NAN } else { var.sqrt() };
    (mean, stddev)
}

/// Kaldi's `SummarizeVector` with its float mean and standard deviation.
pub fn summarize_vector(v: &Vector) -> String {
    info_summary::summarize_vector_with(v, mean_stddev)
}

/// Kaldi's `PrintParameterStats` for a vector: `, NAME-{mean,stddev}=m,s` (or `, NAME-rms=r`
/// without `include_mean`), 4 significant digits.
pub fn parameter_stats(name: &str, v: &Vector, include_mean: bool) -> String {
    if include_mean {
        let (mean, stddev) = mean_stddev(v);
        format!(
            ", {name}-{{mean,stddev}}={},{}",
            fmt_g(mean as f64, 4),
            fmt_g(stddev as f64, 4)
        )
    } else {
        let v = v.to_vec();
        let n = v.len().max(1) as f32;
        let rms = (v.iter().map(|x| x * x).sum::<f32>() / n).sqrt();
        format!(", {name}-rms={}", fmt_g(rms as f64, 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;
    use crate::nnet::component::info_summary::fmt_succinct;
    use crate::testing::component::{forward, input_deriv};

    /// True if a component body holds a non-zero `<Count>`.
    fn has_accumulated_stats(body: &[u8], binary: bool) -> bool {
        let pat = b"<Count> ";
        let Some(p) = body.windows(pat.len()).position(|w| w == pat) else {
            return false;
        };
        let at = p + pat.len();
        if binary {
            body.get(at + 1..at + 9)
                .is_some_and(|b| b.iter().any(|&x| x != 0))
        } else {
            String::from_utf8_lossy(&body[at..])
                .split_whitespace()
                .next()
                .is_some_and(|v| v != "0")
        }
    }

    fn cfg(s: &str) -> ConfigLine {
        ConfigLine::parse_str(s).expect("config")
    }

    /// Every component of a type owned here, read from a golden model and written again,
    /// must reproduce Kaldi's bytes exactly. Returns how many were checked.
    fn golden_round_trip(path: &str) -> usize {
        golden_components(path).len()
    }

    /// The (name, component) pairs of owned types in a golden model, each checked to
    /// re-write byte-exactly.
    fn golden_components(path: &str) -> Vec<(String, Box<dyn Component>)> {
        const OWNED: &[&str] = &[
            "SigmoidComponent",
            "TanhComponent",
            "RectifiedLinearComponent",
            "SoftmaxComponent",
            "LogSoftmaxComponent",
            "NoOpComponent",
            "ElementwiseProductComponent",
            "PermuteComponent",
            "SumBlockComponent",
            "SumGroupComponent",
            "PnormComponent",
            "FixedScaleComponent",
            "FixedBiasComponent",
            "ClipGradientComponent",
            "NormalizeComponent",
            "BatchNormComponent",
            "DropoutComponent",
        ];
        let full = format!("{}/{path}", crate::testing::golden::golden_dir().display());
        let buf = std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
        let binary = buf.starts_with(b"\0B");
        let find = |pat: &[u8], from: usize| {
            buf[from..]
                .windows(pat.len())
                .position(|w| w == pat)
                .map(|p| p + from)
        };
        let mut checked = Vec::new();
        let mut pos = 0;
        while let Some(p) = find(b"<ComponentName> ", pos) {
            let name_start = p + b"<ComponentName> ".len();
            let Some(name_end) = find(b" ", name_start) else {
                break;
            };
            let start = name_end + 1;
            pos = start;
            let Some(ty_end) = find(b"> ", start) else {
                break;
            };
            let ty = std::str::from_utf8(&buf[start + 1..ty_end])
                .expect("utf8")
                .to_string();
            if !OWNED.contains(&ty.as_str()) {
                continue;
            }
            let close = format!("</{ty}> ");
            let end = find(close.as_bytes(), start).expect("closing token") + close.len();
            let mut r = TokenReader::new(&buf[..end], binary, &full);
            r.set_pos(start);
            let c = crate::nnet::component::read_component(&mut r)
                .unwrap_or_else(|e| panic!("{full}: reading {ty}: {e}"));
            assert_eq!(r.pos(), end, "{full}: {ty} not read to its end");
            let mut w = TokenWriter::new(binary);
            c.write(&mut w);
            let got = w.into_bytes();
            // Accumulated stats are kept as double sums and re-derived on write, so Kaldi's own
            // read/write cycle moves their last digit: those are checked against what
            // nnet3-copy really wrote in tests/golden_models.rs.
            if got != buf[start..end] && !has_accumulated_stats(&buf[start..end], binary) {
                panic!(
                    "{full}: {ty} differs:\n ours:   {:?}\n kaldi: {:?}",
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&buf[start..end])
                );
            }
            let name = String::from_utf8_lossy(&buf[name_start..name_end]).into_owned();
            checked.push((name, c));
        }
        checked
    }

    #[test]
    fn golden_info_lines_match() {
        let mut n = 0;
        let cases = [
            (
                "cases/misc-components/model.raw",
                "cases/misc-components/info.txt",
            ),
            ("cases/seed/model.raw", "cases/seed/info.txt"),
            (
                "cases/tdnn-splice-ivector/model.raw",
                "cases/tdnn-splice-ivector/info.txt",
            ),
            ("cases/tdnnf/model.raw", "cases/tdnnf/info.txt"),
            ("cases/cnn-small/model.raw", "cases/cnn-small/info.txt"),
            (
                "train/ng-batchnorm/after.raw",
                "train/ng-batchnorm/after_info.txt",
            ),
            (
                "train/affine-plain/after.raw",
                "train/affine-plain/after_info.txt",
            ),
        ];
        for (case, info_file) in cases {
            let golden = crate::testing::golden::golden_dir();
            let info = std::fs::read_to_string(golden.join(info_file))
                .unwrap_or_else(|e| panic!("{info_file}: {e}"));
            for (name, c) in golden_components(case) {
                let prefix = format!("component name={name} type=");
                let line = info
                    .lines()
                    .find(|l| l.starts_with(&prefix))
                    .expect("info line");
                assert_eq!(format!("{prefix}{}", c.info()), line, "{case}");
                n += 1;
            }
        }
        eprintln!("{n} info lines match");
        assert!(n >= 47, "only {n} golden info lines compared");
    }

    #[test]
    fn golden_models_round_trip_byte_exact() {
        let mut n = 0;
        for case in [
            "misc-components",
            "seed",
            "tdnn-splice-ivector",
            "tdnnf",
            "cnn-small",
            "fast-lstmp",
            "lstm-primitives",
            "rnn",
            "tdnn-component",
            "xvector-small",
        ] {
            n += golden_round_trip(&format!("cases/{case}/model.raw"));
            n += golden_round_trip(&format!("cases/{case}/model.txt"));
        }
        for f in [
            "train/ng-batchnorm/after.raw",
            "train/ng-batchnorm/after.txt",
            "train/ng-batchnorm/before.raw",
            "train/affine-plain/after.raw",
            "train/affine-plain/after.txt",
            "formats/model/model.raw",
            "formats/model/model.txt",
        ] {
            n += golden_round_trip(f);
        }
        eprintln!("checked {n} components");
        assert!(n > 20, "only {n} golden components checked");
    }

    #[test]
    fn percentile_formatting_matches_kaldi_examples() {
        assert_eq!(fmt_succinct(0.99501), "1.0");
        assert_eq!(fmt_succinct(0.41), "0.41");
        assert_eq!(fmt_succinct(0.1), "0.10");
        assert_eq!(fmt_succinct(0.0996), "0.10");
        assert_eq!(fmt_succinct(2.0), "2.0");
        assert_eq!(fmt_succinct(0.00066), "0.0007");
        assert_eq!(fmt_succinct(3e-9), "3e-09");
        assert_eq!(fmt_succinct(0.0), "0");
        assert_eq!(fmt_succinct(-0.99), "-0.99");
    }

    #[test]
    fn softmax_backprop_matches_finite_differences() {
        let c = NonlinearComponent::from_config_kind(NonlinearKind::Softmax, &cfg("dim=4"))
            .expect("init");
        let x = Matrix::from_rows(&[vec![0.3, -1.2, 0.7, 2.0], vec![-0.5, 0.1, 0.0, 1.5]]);
        let od = Matrix::from_rows(&[vec![0.2, -0.4, 1.0, 0.3], vec![0.9, 0.1, -0.7, 0.5]]);
        let y = forward(&c, &x);
        let id = input_deriv(&c, &x, &y, &od);
        let obj = |m: &Matrix| forward(&c, m).view().trace_mat_mat(od.view()) as f64;
        let eps = 1e-3f32;
        for r in 0..2 {
            for k in 0..4 {
                let mut xp = x.clone();
                xp.set(r, k, x.get(r, k) + eps);
                let mut xm = x.clone();
                xm.set(r, k, x.get(r, k) - eps);
                let num = (obj(&xp) - obj(&xm)) / (2.0 * eps as f64);
                assert!(
                    (num - id.get(r, k) as f64).abs() < 1e-3,
                    "{r},{k}: {num} vs {}",
                    id.get(r, k)
                );
            }
        }
    }

    #[test]
    fn stats_first_call_always_stored_and_written_normalised() {
        let mut c =
            NonlinearComponent::from_config_kind(NonlinearKind::Tanh, &cfg("dim=2")).expect("init");
        let y = Matrix::from_rows(&[vec![0.5, -0.5], vec![0.0, 1.0]]);
        c.store_stats(y.view(), y.view(), None, &mut crate::random::seeded_rng(0));
        assert_eq!(c.count(), 2.0);
        assert_eq!(c.value_avg(), Vector::from_vec(vec![0.25, 0.25]));
        // derivative 1 - y^2: (0.75 + 1)/2, (0.75 + 0)/2
        assert_eq!(c.deriv_avg(), Vector::from_vec(vec![0.875, 0.375]));
    }
}
