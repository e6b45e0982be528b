//! The fused GRU nonlinearities of Kaldi's "fast" GRU layers (`nnet-combined-component.h`).
//!
//! `GruNonlinearityComponent` (cell dim C, recurrent dim R ≤ C, internal weights W_h: C × R):
//!
//! ```text
//! input  z_t (C), r_t (R), hpart_t (C), c_{t-1} (C), s_{t-1} (R)    [R = C: s is c, 4C]
//! h_t = tanh(hpart_t + W_h (r_t ⊙ s_{t-1}))      c_t = (1 − z_t) ⊙ h_t + z_t ⊙ c_{t-1}
//! output h_t, c_t
//! ```
//!
//! `OutputGruNonlinearityComponent` (cell dim C, per-element weights w_h of dimension C):
//!
//! ```text
//! input  z_t, hpart_t, c_{t-1}   →   h_t = tanh(hpart_t + w_h ⊙ c_{t-1}),  c_t as above
//! ```
//!
//! Both keep statistics of the tanh (value and derivative sums, the frame count and a
//! self-repair total) and self-repair its input derivative, on a random half of the
//! minibatches, in the `to_update` component during Backprop (as Kaldi does). W_h gets Kaldi's
//! two-sided natural gradient (rank-in / rank-out), w_h the per-frame one (rank).

use super::info_summary;
use super::kaldi_fields::{expect_closing, read_field, write_updatable};
use super::param_init;
use super::param_ops::{self, updatable_boilerplate, updatable_common};
use super::UpdatableComponent;
use super::{
    update_target, Backprop, Component, Description, Memo, Propagate, Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::kaldi_rand::kaldi_rand_uniform;
use crate::matrix::{backprop_gru_cell, MatView, MatViewMut, Matrix, Trans, Vector, Vector64};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const GRU: &str = "GruNonlinearityComponent";
const OUTPUT_GRU: &str = "OutputGruNonlinearityComponent";

/// Kaldi accumulates the tanh statistics and self-repairs on about half the minibatches.
const REPAIR_AND_STATS_PROBABILITY: f32 = 0.5;

/// `x >= 0` and not NaN.
fn non_negative(x: f32) -> bool {
    x >= 0.0
}

/// The tanh statistics and self-repair settings both GRU nonlinearities share.
#[derive(Clone, Debug)]
struct TanhStats {
    /// Per cell: Σ tanh values and Σ tanh derivatives (doubles, as Kaldi keeps them).
    value_sum: Vector64,
    deriv_sum: Vector64,
    /// Σ over stored minibatches of the number of cells self-repaired.
    self_repair_total: f64,
    count: f64,
    threshold: f32,
    scale: f32,
}

impl TanhStats {
    fn new(cell_dim: usize, threshold: f32, scale: f32) -> Self {
        TanhStats {
            value_sum: Vector64::zeros(cell_dim),
            deriv_sum: Vector64::zeros(cell_dim),
            self_repair_total: 0.0,
            count: 0.0,
            threshold,
            scale,
        }
    }

    /// Config options `self-repair-threshold` (0.2) and `self-repair-scale` (1e-5).
    fn from_config(cfg: &ConfigLine, cell_dim: usize) -> Result<Self> {
        let threshold: f32 = cfg.get_or("self-repair-threshold", 0.2f32)?;
        let scale: f32 = cfg.get_or("self-repair-scale", 1e-5f32)?;
        if !non_negative(threshold) || !non_negative(scale) {
            return Err(cfg.error("self-repair-threshold and self-repair-scale must be >= 0"));
        }
        Ok(TanhStats::new(cell_dim, threshold, scale))
    }

    /// Averages as written: the sum rounded to float, times the float reciprocal of the count.
    fn avg(&self, sum: &Vector64) -> Vector {
        let inv = if self.count != 0.0 {
            (1.0 / self.count) as f32
        } else {
            1.0
        };
        let mut avg = Vector::from_f64(sum);
        avg.scale(inv);
        avg
    }

    /// `<ValueAvg> … <SelfRepairScale>` as Kaldi writes them.
    fn write_fields(&self) -> [(&'static str, Box<dyn super::kaldi_fields::WriteField>); 6] {
        [
            ("<ValueAvg>", Box::new(self.avg(&self.value_sum))),
            ("<DerivAvg>", Box::new(self.avg(&self.deriv_sum))),
            ("<SelfRepairTotal>", Box::new(self.self_repair_total)),
            ("<Count>", Box::new(self.count)),
            ("<SelfRepairThreshold>", Box::new(self.threshold)),
            ("<SelfRepairScale>", Box::new(self.scale)),
        ]
    }

    /// Reads `<ValueAvg> … <SelfRepairScale>` (averages back to sums).
    fn read(r: &mut TokenReader<'_>, cell_dim: usize) -> Result<Self> {
        let vec = |r: &mut TokenReader<'_>, tok: &str| -> Result<Vector64> {
            r.expect_token(tok)?;
            let at = r.pos();
            let v = r.vector64()?;
            if v.dim() != cell_dim {
                return Err(r.err_at(at, format!("a {tok} vector of dimension {cell_dim}")));
            }
            Ok(v)
        };
        let value_avg = vec(r, "<ValueAvg>")?;
        let deriv_avg = vec(r, "<DerivAvg>")?;
        let self_repair_total: f64 = read_field(r, "<SelfRepairTotal>")?;
        let at = r.pos();
        let count: f64 = read_field(r, "<Count>")?;
        if count.is_nan() || count < 0.0 {
            return Err(r.err_at(at, "a non-negative <Count>"));
        }
        let at = r.pos();
        let threshold: f32 = read_field(r, "<SelfRepairThreshold>")?;
        let scale: f32 = read_field(r, "<SelfRepairScale>")?;
        if !non_negative(threshold) || !non_negative(scale) {
            return Err(r.err_at(at, "non-negative self-repair threshold and scale"));
        }
        // Back to sums: avg · count.
        let (mut value_sum, mut deriv_sum) = (value_avg, deriv_avg);
        value_sum.scale(count);
        deriv_sum.scale(count);
        Ok(TanhStats {
            value_sum,
            deriv_sum,
            self_repair_total,
            count,
            threshold,
            scale,
        })
    }

    /// The info fields after the parameter summary.
    fn info(&self, cell_dim: usize) -> String {
        let g = |v: f64| fmt_g(v, 6);
        let mut s = format!(
            ", self-repair-threshold={}, self-repair-scale={}",
            g(self.threshold as f64),
            g(self.scale as f64)
        );
        if self.count > 0.0 {
            s += &format!(
                ", count={}, self-repaired-proportion={}, value-avg={}, deriv-avg={}",
                fmt_g(self.count, 3),
                g(self.self_repair_total / (self.count * cell_dim as f64)),
                info_summary::summarize_vector(&self.avg(&self.value_sum)),
                info_summary::summarize_vector(&self.avg(&self.deriv_sum))
            );
        }
        s
    }

    /// On a random half of the minibatches: adds the statistics of `h` (tanh outputs) and
    /// nudges `h_deriv` (the derivative before the tanh) of cells whose average derivative is
    /// below the threshold towards the linear region (Kaldi's `TanhStatsAndSelfRepair`).
    fn store_and_repair(
        &mut self,
        h: MatView<'_>,
        mut h_deriv: MatViewMut<'_>,
        rng: &mut dyn RngCore,
    ) {
        if kaldi_rand_uniform(rng) > REPAIR_AND_STATS_PROBABILITY {
            return;
        }
        let c = h.num_cols();
        if self.value_sum.dim() != c {
            return;
        }
        let mut tanh_deriv = h.to_matrix();
        tanh_deriv.view_mut().apply_tanh_deriv_from_output();
        self.count += h.num_rows() as f64;
        let mut sums = Vector::zeros(c);
        sums.add_row_sum_mat(1.0, h, 0.0);
        self.value_sum.add_vec_f32(1.0, &sums);
        sums.add_row_sum_mat(1.0, tanh_deriv.view(), 0.0);
        self.deriv_sum.add_vec_f32(1.0, &sums);
        if self.count <= 0.0 {
            return;
        }
        // 1 for cells below the threshold, else 0 (float arithmetic, as Kaldi's).
        // bound − d (as −d + bound, the same float), then 1 where positive.
        let bound = (self.threshold as f64 * self.count) as f32;
        let mut below = Vector::from_f64(&self.deriv_sum);
        below.scale(-1.0);
        below.add_const(bound);
        below.as_row_mut().apply_heaviside();
        // A sum of zeros and ones: exact in any precision.
        self.self_repair_total += below.sum_f64();
        h_deriv.add_mat_diag_vec(
            -self.scale / REPAIR_AND_STATS_PROBABILITY,
            h,
            Trans::No,
            &below,
            1.0,
        );
    }

    fn zero(&mut self) {
        self.value_sum.set_zero();
        self.deriv_sum.set_zero();
        self.self_repair_total = 0.0;
        self.count = 0.0;
    }
    fn scale_by(&mut self, s: f64) {
        self.value_sum.scale(s);
        self.deriv_sum.scale(s);
        self.self_repair_total *= s;
        self.count *= s;
    }
    fn add(&mut self, a: f64, o: &TanhStats) {
        if o.value_sum.dim() != self.value_sum.dim() {
            return;
        }
        self.value_sum.add_vec(a, &o.value_sum);
        self.deriv_sum.add_vec(a, &o.deriv_sum);
        self.self_repair_total += a * o.self_repair_total;
        self.count += a * o.count;
    }
}

/// `zero_stats` and `scale_stats` of a component whose statistics are its `stats`
/// ([`TanhStats`]).
macro_rules! tanh_stats_hooks {
    () => {
        fn zero_stats(&mut self) {
            self.stats.zero();
        }
        fn scale_stats(&mut self, scale: f32) {
            self.stats.scale_by(scale as f64);
        }
    };
}

/// Writes the fields of [`TanhStats::write_fields`] after `fields`.
fn write_with_stats(
    w: &mut TokenWriter,
    type_name: &str,
    common: &UpdatableCommon,
    fields: &[super::kaldi_fields::Field<'_>],
    stats: &TanhStats,
    tail: &[super::kaldi_fields::Field<'_>],
) {
    let st = stats.write_fields();
    let mut all: Vec<super::kaldi_fields::Field<'_>> = fields.to_vec();
    all.extend(st.iter().map(|(t, v)| (*t, v.as_ref())));
    all.extend_from_slice(tail);
    write_updatable(w, type_name, common, &all);
}

// ---------------------------------------------------------------- GruNonlinearityComponent

/// `GruNonlinearityComponent`.
#[derive(Clone, Debug)]
pub struct GruNonlinearityComponent {
    common: UpdatableCommon,
    cell_dim: usize,
    recurrent_dim: usize,
    /// C × R.
    w_h: Matrix,
    stats: TanhStats,
    /// rank-in, rank-out, alpha, update-period (num-samples-history is Kaldi's default).
    ng: NaturalGradientOptions,
    ng_state: NaturalGradientState,
}

impl GruNonlinearityComponent {
    /// Registry hook (Kaldi's InitFromConfig): `cell-dim` (required), `recurrent-dim`
    /// (cell-dim), `self-repair-threshold` (0.2), `self-repair-scale` (1e-5), `param-stddev`
    /// (1/sqrt(cell-dim)), `alpha` (4), `rank-in` (20), `rank-out` (80), `update-period` (4),
    /// and the learning-rate options.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let cell_dim = param_init::require_positive(cfg, "cell-dim")?;
        let recurrent_dim: i32 = cfg.get_or("recurrent-dim", -1)?;
        let recurrent_dim = if recurrent_dim < 0 {
            cell_dim
        } else if recurrent_dim == 0 || recurrent_dim as u64 > cell_dim as u64 {
            return Err(
                cfg.error_at_value("recurrent-dim", "recurrent-dim must be in 1..=cell-dim")
            );
        } else {
            recurrent_dim as usize
        };
        let stats = TanhStats::from_config(cfg, cell_dim)?;
        let stddev: f32 = cfg.get_or("param-stddev", param_init::default_stddev(cell_dim))?;
        let ng = NaturalGradientOptions {
            rank_in: cfg.get_or("rank-in", 20)?,
            rank_out: cfg.get_or("rank-out", 80)?,
            update_period: cfg.get_or("update-period", 4)?,
            ..NaturalGradientOptions::symmetric(0, cfg.get_or("alpha", 4.0f32)?, 4, 2000.0)
        };
        ng.validate().map_err(|e| cfg.error(e))?;
        if !non_negative(stddev) {
            return Err(cfg.error_at_value("param-stddev", "param-stddev must be >= 0"));
        }
        crate::limits::check_product(
            &[cell_dim as u64, recurrent_dim as u64, 4],
            "GRU parameters",
        )
        .map_err(|e| cfg.error(e))?;
        let w_h = param_init::gaussian_matrix(cell_dim, recurrent_dim, 0.0, stddev, init_rng);
        Ok(Box::new(GruNonlinearityComponent {
            common,
            cell_dim,
            recurrent_dim,
            w_h,
            stats,
            ng,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Registry hook: reads the body after `<GruNonlinearityComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, GRU)?;
        let cell_dim = super::kaldi_fields::read_pos_i32(r, "<CellDim>")?;
        let at = r.pos();
        let recurrent_dim = super::kaldi_fields::read_pos_i32(r, "<RecurrentDim>")?;
        if recurrent_dim > cell_dim {
            return Err(r.err_at(at, "a <RecurrentDim> no larger than <CellDim>"));
        }
        r.expect_token("<w_h>")?;
        let at = r.pos();
        let w_h = r.matrix()?;
        if w_h.num_rows() != cell_dim || w_h.num_cols() != recurrent_dim {
            return Err(r.err_at(
                at,
                format!("a <w_h> matrix of {cell_dim} × {recurrent_dim}"),
            ));
        }
        let stats = TanhStats::read(r, cell_dim)?;
        let alpha: f32 = read_field(r, "<Alpha>")?;
        r.expect_token("<RankInOut>")?;
        let at = r.pos();
        let rank_in = r.i32()?;
        let rank_out = r.i32()?;
        let update_period: i32 = read_field(r, "<UpdatePeriod>")?;
        expect_closing(r, GRU)?;
        let ng = NaturalGradientOptions {
            rank_in,
            rank_out,
            update_period,
            ..NaturalGradientOptions::symmetric(0, alpha, 4, 2000.0)
        };
        ng.validate().map_err(|e| r.err_at(at, e))?;
        Ok(Box::new(GruNonlinearityComponent {
            common,
            cell_dim,
            recurrent_dim,
            w_h,
            stats,
            ng,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// The internal weights W_h (cell-dim × recurrent-dim).
    pub fn w_h(&self) -> &Matrix {
        &self.w_h
    }
    /// Frames the statistics cover.
    pub fn count(&self) -> f64 {
        self.stats.count
    }

    /// Column offsets of z, r, hpart, c_prev and s_prev in the input.
    fn cols(&self) -> [usize; 5] {
        let (c, r) = (self.cell_dim, self.recurrent_dim);
        [0, c, c + r, 2 * c + r, self.input_dim() - r]
    }
}

impl Component for GruNonlinearityComponent {
    fn describe(&self) -> Description {
        Description::new(
            GRU,
            if self.recurrent_dim == self.cell_dim {
                4 * self.cell_dim
            } else {
                3 * self.cell_dim + 2 * self.recurrent_dim
            },
            2 * self.cell_dim,
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_NEEDS_OUTPUT
                | Properties::BACKPROP_ADDS,
        )
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let (n, c, r) = (p.input.num_rows(), self.cell_dim, self.recurrent_dim);
        if !p.fits(self.input_dim(), self.output_dim()) {
            return None;
        }
        let [zc, rc, hc, cc, sc] = self.cols();
        let mut sdotr = Matrix::zeros(n, r);
        sdotr
            .view_mut()
            .set_gru_reset_product(p.input.cols_range(rc, r), p.input.cols_range(sc, r));
        // The pre-activation hpart + W_h (r ⊙ s) goes straight into h's p.output columns.
        let mut h = p.output.sub_mut(0, n, 0, c);
        h.copy_from(p.input.cols_range(hc, c));
        h.add_mat_mat(
            1.0,
            sdotr.view(),
            Trans::No,
            self.w_h.view(),
            Trans::Yes,
            1.0,
        );
        p.output
            .gru_cell_from_preactivation(p.input.cols_range(zc, c), p.input.cols_range(cc, c));
        None
    }

    fn backprop(&self, mut b: Backprop<'_>) {
        let (n, c, r) = (b.in_value.num_rows(), self.cell_dim, self.recurrent_dim);
        if !b.fits(self.input_dim(), self.output_dim()) {
            return;
        }
        let [zc, rc, hc, cc, sc] = self.cols();
        let h = b.out_value.cols_range(0, c);
        let mut hd = Matrix::zeros(n, c);
        backprop_gru_cell(
            b.in_value.cols_range(zc, c),
            b.in_value.cols_range(cc, c),
            h,
            b.out_deriv,
            &mut hd.view_mut(),
            b.in_deriv.as_mut().map(|d| (d, zc, cc)),
        );
        let mut sdotr = Matrix::zeros(n, r);
        sdotr.view_mut().add_mat_mat_elements(
            1.0,
            b.in_value.cols_range(rc, r),
            b.in_value.cols_range(sc, r),
            0.0,
        );
        let upd = update_target::<GruNonlinearityComponent>(b.to_update);
        if let Some(u) = upd {
            if u.cell_dim == c && u.recurrent_dim == r {
                u.stats.store_and_repair(h, hd.view_mut(), b.rng);
                Update::new(&u.common, Some((&u.ng, &mut u.ng_state)), true).weight_block(
                    u.w_h.view_mut(),
                    None,
                    sdotr.view(),
                    hd.view(),
                );
            }
        }
        if let Some(d) = b.in_deriv.as_mut() {
            d.sub_mut(0, n, hc, c).add_mat(1.0, hd.view(), Trans::No);
            // sdotr's derivative reuses its memory.
            let sd = &mut sdotr;
            sd.view_mut()
                .add_mat_mat(1.0, hd.view(), Trans::No, self.w_h.view(), Trans::No, 0.0);
            d.sub_mut(0, n, rc, r).add_mat_mat_elements(
                1.0,
                sd.view(),
                b.in_value.cols_range(sc, r),
                1.0,
            );
            d.sub_mut(0, n, sc, r).add_mat_mat_elements(
                1.0,
                sd.view(),
                b.in_value.cols_range(rc, r),
                1.0,
            );
        }
    }

    fn write(&self, w: &mut TokenWriter) {
        write_with_stats(
            w,
            GRU,
            &self.common,
            &[
                ("<CellDim>", &self.cell_dim),
                ("<RecurrentDim>", &self.recurrent_dim),
                ("<w_h>", &self.w_h),
            ],
            &self.stats,
            &[
                ("<Alpha>", &self.ng.alpha_in),
                ("<RankInOut>", &(self.ng.rank_in, self.ng.rank_out)),
                ("<UpdatePeriod>", &self.ng.update_period),
            ],
        );
    }

    fn info(&self) -> String {
        let mut s = info_summary::updatable_header(self, &self.common);
        s += &format!(
            ", cell-dim={}, recurrent-dim={}, {}",
            self.cell_dim,
            self.recurrent_dim,
            info_summary::matrix_stats("w_h", &self.w_h, false)
        );
        s += &self.stats.info(self.cell_dim);
        s += &format!(
            ", alpha={}, rank-in={}, rank-out={}, update-period={}",
            fmt_g(self.ng.alpha_in as f64, 6),
            self.ng.rank_in,
            self.ng.rank_out,
            self.ng.update_period
        );
        s
    }

    updatable_boilerplate!();
    tanh_stats_hooks!();
}

impl UpdatableComponent for GruNonlinearityComponent {
    updatable_common!(ng);
    fn num_parameters(&self) -> usize {
        self.cell_dim * self.recurrent_dim
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        vec![self.w_h.view()]
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        vec![self.w_h.view_mut()]
    }
    /// Scales the parameters and the statistics (zeroing both when `alpha` is 0), as Kaldi.
    fn scale(&mut self, alpha: f32) {
        if alpha == 0.0 {
            self.w_h.view_mut().set_zero();
            self.stats.zero();
        } else {
            self.w_h.view_mut().scale(alpha);
            self.stats.scale_by(alpha as f64);
        }
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        let Some(o) = other.as_any().downcast_ref::<GruNonlinearityComponent>() else {
            return;
        };
        if o.cell_dim != self.cell_dim || o.recurrent_dim != self.recurrent_dim {
            return;
        }
        self.w_h.view_mut().add_mat(alpha, o.w_h.view(), Trans::No);
        self.stats.add(alpha as f64, &o.stats);
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        other
            .as_any()
            .downcast_ref::<GruNonlinearityComponent>()
            .filter(|o| {
                o.w_h.num_rows() == self.w_h.num_rows() && o.w_h.num_cols() == self.w_h.num_cols()
            })
            .map(|o| self.w_h.view().trace_mat_mat(o.w_h.view()))
            .unwrap_or(0.0)
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn RngCore) {
        param_ops::perturb_matrix(&mut self.w_h, stddev, rng);
    }
}

// ---------------------------------------------------------- OutputGruNonlinearityComponent

/// `OutputGruNonlinearityComponent`.
#[derive(Clone, Debug)]
pub struct OutputGruNonlinearityComponent {
    common: UpdatableCommon,
    /// Per-cell weights on c_{t-1} (dimension C).
    w_h: Vector,
    stats: TanhStats,
    /// rank, alpha (the `_out` fields), update-period.
    ng: NaturalGradientOptions,
    ng_state: NaturalGradientState,
}

impl OutputGruNonlinearityComponent {
    /// Registry hook (Kaldi's InitFromConfig): `cell-dim` (required), `self-repair-threshold`
    /// (0.2), `self-repair-scale` (1e-5), `param-mean` (0), `param-stddev` (1), `alpha` (4),
    /// `rank` (8), `update-period` (10), and the learning-rate options.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let cell_dim = param_init::require_positive(cfg, "cell-dim")?;
        let stats = TanhStats::from_config(cfg, cell_dim)?;
        let mean: f32 = cfg.get_or("param-mean", 0.0f32)?;
        let stddev: f32 = cfg.get_or("param-stddev", 1.0f32)?;
        let ng = NaturalGradientOptions::symmetric(
            cfg.get_or("rank", 8)?,
            cfg.get_or("alpha", 4.0f32)?,
            cfg.get_or("update-period", 10)?,
            2000.0,
        );
        ng.validate().map_err(|e| cfg.error(e))?;
        if !non_negative(stddev) || !mean.is_finite() {
            return Err(cfg.error("param-stddev must be >= 0 and param-mean finite"));
        }
        crate::limits::check_product(&[cell_dim as u64, 4], "GRU parameters")
            .map_err(|e| cfg.error(e))?;
        let w_h = param_init::gaussian_vector(cell_dim, mean, stddev, init_rng);
        Ok(Box::new(OutputGruNonlinearityComponent {
            common,
            w_h,
            stats,
            ng,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Registry hook: reads the body after `<OutputGruNonlinearityComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, OUTPUT_GRU)?;
        let cell_dim = super::kaldi_fields::read_pos_i32(r, "<CellDim>")?;
        r.expect_token("<w_h>")?;
        let at = r.pos();
        let w_h = r.vector()?;
        if w_h.dim() != cell_dim {
            return Err(r.err_at(at, format!("a <w_h> vector of dimension {cell_dim}")));
        }
        let stats = TanhStats::read(r, cell_dim)?;
        let alpha: f32 = read_field(r, "<Alpha>")?;
        let at = r.pos();
        let rank: i32 = read_field(r, "<Rank>")?;
        let update_period: i32 = read_field(r, "<UpdatePeriod>")?;
        expect_closing(r, OUTPUT_GRU)?;
        let ng = NaturalGradientOptions::symmetric(rank, alpha, update_period, 2000.0);
        ng.validate().map_err(|e| r.err_at(at, e))?;
        Ok(Box::new(OutputGruNonlinearityComponent {
            common,
            w_h,
            stats,
            ng,
            ng_state: NaturalGradientState::default(),
        }))
    }

    fn cell_dim(&self) -> usize {
        self.w_h.dim()
    }
    /// The per-cell weights w_h.
    pub fn w_h(&self) -> &Vector {
        &self.w_h
    }
    /// Frames the statistics cover.
    pub fn count(&self) -> f64 {
        self.stats.count
    }
}

impl Component for OutputGruNonlinearityComponent {
    fn describe(&self) -> Description {
        Description::new(
            OUTPUT_GRU,
            3 * self.cell_dim(),
            2 * self.cell_dim(),
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_NEEDS_OUTPUT
                | Properties::BACKPROP_ADDS,
        )
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        if !p.fits(self.input_dim(), self.output_dim()) {
            return None;
        }
        p.output.compute_output_gru_cell(p.input, &self.w_h);
        None
    }

    fn backprop(&self, mut b: Backprop<'_>) {
        let (n, c) = (b.in_value.num_rows(), self.cell_dim());
        if !b.fits(self.input_dim(), self.output_dim()) {
            return;
        }
        let h = b.out_value.cols_range(0, c);
        let c_prev = b.in_value.cols_range(2 * c, c);
        let mut hd = Matrix::zeros(n, c);
        backprop_gru_cell(
            b.in_value.cols_range(0, c),
            c_prev,
            h,
            b.out_deriv,
            &mut hd.view_mut(),
            b.in_deriv.as_mut().map(|d| (d, 0, 2 * c)),
        );
        let upd = b.to_update.and_then(|u| {
            u.as_any_mut()
                .downcast_mut::<OutputGruNonlinearityComponent>()
        });
        if let Some(u) = upd {
            if u.cell_dim() == c {
                u.stats.store_and_repair(h, hd.view_mut(), b.rng);
                Update::new(&u.common, Some((&u.ng, &mut u.ng_state)), false).scale_block(
                    &mut u.w_h,
                    c_prev,
                    hd.view(),
                );
            }
        }
        if let Some(d) = b.in_deriv.as_mut() {
            d.sub_mut(0, n, c, c).add_mat(1.0, hd.view(), Trans::No);
            hd.view_mut().mul_cols_vec(&self.w_h);
            d.sub_mut(0, n, 2 * c, c).add_mat(1.0, hd.view(), Trans::No);
        }
    }

    fn write(&self, w: &mut TokenWriter) {
        write_with_stats(
            w,
            OUTPUT_GRU,
            &self.common,
            &[("<CellDim>", &self.cell_dim()), ("<w_h>", &self.w_h)],
            &self.stats,
            &[
                ("<Alpha>", &self.ng.alpha_out),
                ("<Rank>", &self.ng.rank_out),
                ("<UpdatePeriod>", &self.ng.update_period),
            ],
        );
    }

    fn info(&self) -> String {
        let mut s = info_summary::updatable_header(self, &self.common);
        let w = self.w_h.as_row();
        let n = w.num_rows() * w.num_cols();
        let rms = (w.trace_mat_mat(w) / n.max(1) as f32).sqrt();
        s += &format!(
            ", cell-dim={}, w_h-rms={}",
            self.cell_dim(),
            fmt_g(rms as f64, 4)
        );
        s += &self.stats.info(self.cell_dim());
        s += &format!(
            ", alpha={}, rank={}, update-period={}",
            fmt_g(self.ng.alpha_out as f64, 6),
            self.ng.rank_out,
            self.ng.update_period
        );
        s
    }

    updatable_boilerplate!();
    tanh_stats_hooks!();
}

impl UpdatableComponent for OutputGruNonlinearityComponent {
    updatable_common!(ng);
    fn num_parameters(&self) -> usize {
        self.cell_dim()
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        vec![self.w_h.as_row()]
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        vec![self.w_h.as_row_mut()]
    }
    /// Scales the parameters and the statistics (zeroing both when `alpha` is 0), as Kaldi.
    fn scale(&mut self, alpha: f32) {
        if alpha == 0.0 {
            self.w_h.set_zero();
            self.stats.zero();
        } else {
            self.w_h.scale(alpha);
            self.stats.scale_by(alpha as f64);
        }
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        let Some(o) = other
            .as_any()
            .downcast_ref::<OutputGruNonlinearityComponent>()
        else {
            return;
        };
        if o.cell_dim() != self.cell_dim() {
            return;
        }
        param_ops::vec_add(&mut self.w_h, alpha, &o.w_h);
        self.stats.add(alpha as f64, &o.stats);
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        other
            .as_any()
            .downcast_ref::<OutputGruNonlinearityComponent>()
            .map(|o| param_ops::vector_dot(&self.w_h, &o.w_h))
            .unwrap_or(0.0)
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn RngCore) {
        param_ops::perturb_vector(&mut self.w_h, stddev, rng);
    }
}
