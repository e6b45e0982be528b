//! LstmNonlinearityComponent: the fused LSTM cell nonlinearity of Kaldi's "fast" LSTM layers.
//!
//! Input row (cell dim C): `i_part, f_part, c_part, o_part, c_prev` (5C columns), plus three
//! per-frame dropout scales `i_scale, f_scale, o_scale` when `use-dropout=true`. Output row:
//! `c_t, m_t` (2C columns). Parameters: the diagonal peephole weights `w_ic, w_fc, w_oc`
//! (rows of a 3×C matrix). With σ the logistic sigmoid:
//!
//! ```text
//! i = σ(i_part + w_ic⊙c_prev)      f = σ(f_part + w_fc⊙c_prev)
//! c = f·f_scale⊙c_prev + i·i_scale⊙tanh(c_part)
//! o = σ(o_part + w_oc⊙c)           m = o·o_scale⊙tanh(c)
//! ```
//!
//! Statistics (accumulated in Backprop into the `to_update` component, as Kaldi does): per
//! unit sums of the values and derivatives of the five nonlinearities (i σ, f σ, tanh(c_part),
//! o σ, tanh(c)), a self-repair counter per nonlinearity and the frame count. Self-repair
//! nudges the input derivative of units whose average derivative fell below a threshold.

use super::info_summary;
use super::kaldi_fields::{
    expect_closing, read_array_field, read_field, read_opt_field, read_vector_field,
    write_updatable,
};
use super::param_init;
use super::param_ops::{self, updatable_boilerplate, updatable_common};
use super::{
    update_target, Backprop, Component, Description, Memo, Propagate, Properties, UpdatableCommon,
    UpdatableComponent,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{
    backprop_lstm_nonlinearity, lstm_self_repair_scales, LstmBackpropInput, LstmStatsSums, MatView,
    MatViewMut, Matrix, Vector, Vector64,
};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const TYPE: &str = "LstmNonlinearityComponent";
/// Names of the five nonlinearities in the info line (Kaldi's order).
const NONLIN_NAMES: [&str; 5] = [
    "i_t_sigmoid",
    "f_t_sigmoid",
    "c_t_tanh",
    "o_t_sigmoid",
    "m_t_tanh",
];

/// The fused LSTM nonlinearity with peephole parameters and statistics.
#[derive(Clone, Debug)]
pub struct LstmNonlinearityComponent {
    common: UpdatableCommon,
    /// 3 × C: peephole weights w_ic, w_fc, w_oc.
    params: Matrix,
    use_dropout: bool,
    /// 5 × C sums of the nonlinearity values (f64, as Kaldi keeps them).
    value_sum: Vector64,
    /// 5 × C sums of the nonlinearity derivatives.
    deriv_sum: Vector64,
    /// Thresholds (5) then scales (5) of self-repair.
    self_repair_config: [f32; 10],
    /// Per nonlinearity (5): number of (frame, unit) pairs that were self-repaired.
    self_repair_total: Vector64,
    count: f64,
    /// Natural-gradient state of the peephole update (in the delta network; never saved).
    ng_state: NaturalGradientState,
}

/// Kaldi preconditions the peephole gradient, summed over the minibatch (3 rows), with fixed
/// options: rank 20, update period 2, 1000 samples of history (few rows per minibatch, so a
/// smaller, faster-moving estimate than the affine layers'); not configurable there either.
fn peephole_natural_gradient() -> NaturalGradientOptions {
    NaturalGradientOptions::symmetric(20, 4.0, 2, 1000.0)
}

impl LstmNonlinearityComponent {
    /// A component with these peephole parameters (3 × C) and no statistics; default options.
    pub fn new(params: Matrix, use_dropout: bool) -> Self {
        let c = params.num_cols();
        LstmNonlinearityComponent {
            common: UpdatableCommon::default(),
            params,
            use_dropout,
            value_sum: Vector64::zeros(5 * c),
            deriv_sum: Vector64::zeros(5 * c),
            self_repair_config: [0.05, 0.05, 0.2, 0.05, 0.2, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5],
            self_repair_total: Vector64::zeros(5),
            count: 0.0,
            ng_state: NaturalGradientState::default(),
        }
    }

    /// Cell dimension C.
    pub fn cell_dim(&self) -> usize {
        self.params.num_cols()
    }

    /// The peephole parameters (3 × C).
    pub fn params(&self) -> &Matrix {
        &self.params
    }

    /// Number of frames the statistics cover.
    pub fn count(&self) -> f64 {
        self.count
    }

    /// Registry hook: `cell-dim` (required), `param-stddev` (1.0), `tanh-self-repair-threshold`
    /// (0.2), `sigmoid-self-repair-threshold` (0.05), `self-repair-scale` (1e-5),
    /// `use-dropout` (false), and the learning-rate options.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let cell_dim = param_init::require_positive(cfg, "cell-dim")?;
        let stddev: f32 = cfg.get_or("param-stddev", 1.0f32)?;
        let tanh_thr: f32 = cfg.get_or("tanh-self-repair-threshold", 0.2f32)?;
        let sig_thr: f32 = cfg.get_or("sigmoid-self-repair-threshold", 0.05f32)?;
        let sr_scale: f32 = cfg.get_or("self-repair-scale", 1e-5f32)?;
        let use_dropout: bool = cfg.get_or("use-dropout", false)?;
        let common = UpdatableCommon::from_config(cfg)?;
        if stddev < 0.0 {
            return Err(cfg.error_at_value("param-stddev", "param-stddev must be >= 0"));
        }
        if !(0.0..=1.0).contains(&sig_thr) || !(0.0..=1.0).contains(&tanh_thr) {
            return Err(cfg.error("self-repair thresholds must be in [0, 1]"));
        }
        if !(0.0..0.1).contains(&sr_scale) {
            return Err(
                cfg.error_at_value("self-repair-scale", "self-repair-scale must be in [0, 0.1)")
            );
        }
        let params = {
            let rng: &mut dyn RngCore = init_rng;
            param_init::gaussian_matrix(3, cell_dim, 0.0, stddev, rng)
        };
        let mut c = LstmNonlinearityComponent::new(params, use_dropout);
        c.common = common;
        c.self_repair_config = [
            sig_thr, sig_thr, tanh_thr, sig_thr, tanh_thr, sr_scale, sr_scale, sr_scale, sr_scale,
            sr_scale,
        ];
        Ok(Box::new(c))
    }

    /// Registry hook: reads the body after `<LstmNonlinearityComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, TYPE)?;
        r.expect_token("<Params>")?;
        let at = r.pos();
        let params = r.matrix()?;
        if params.num_rows() != 3 || params.num_cols() == 0 {
            return Err(r.err_at(at, "a <Params> matrix of 3 rows and at least one column"));
        }
        let c = params.num_cols();
        let read_stats = |r: &mut TokenReader<'_>, tok: &str| -> Result<Matrix> {
            r.expect_token(tok)?;
            let at = r.pos();
            let m = r.matrix()?;
            if m.num_rows() != 5 || m.num_cols() != c {
                return Err(r.err_at(at, format!("a {tok} matrix of 5 × {c}")));
            }
            Ok(m)
        };
        let value_avg = read_stats(r, "<ValueAvg>")?;
        let deriv_avg = read_stats(r, "<DerivAvg>")?;
        let cfg: [f32; 10] = read_array_field(r, "<SelfRepairConfig>")?;
        let prob = read_vector_field(r, "<SelfRepairProb>", 5)?;
        let use_dropout = read_opt_field(r, "<UseDropout>")?.unwrap_or(false);
        let count = read_field(r, "<Count>")?;
        expect_closing(r, TYPE)?;
        let mut comp = LstmNonlinearityComponent::new(params, use_dropout);
        comp.common = common;
        comp.self_repair_config = cfg;
        comp.count = count;
        // Stored normalised; the sums are avg × count (Kaldi's reader does the same), the
        // repaired totals prob × count × C.
        comp.value_sum = Vector64::from_f32_matrix(&value_avg);
        comp.value_sum.scale(count);
        comp.deriv_sum = Vector64::from_f32_matrix(&deriv_avg);
        comp.deriv_sum.scale(count);
        comp.self_repair_total = Vector64::from_f32(&prob);
        comp.self_repair_total.scale(count);
        comp.self_repair_total.scale(c as f64);
        Ok(Box::new(comp))
    }

    /// Sums divided by the count, rounded to float (the sums themselves when count is 0).
    fn stats_avg(&self, sum: &Vector64) -> Matrix {
        let inv = if self.count != 0.0 {
            1.0 / self.count
        } else {
            1.0
        };
        let mut avg = sum.to_matrix(5, self.cell_dim());
        avg.view_mut().scale(inv as f32);
        avg
    }

    /// The core of Backprop: input derivative (if wanted), parameter derivative (3 × C) and
    /// statistics (when `stats` is given).
    fn backprop_core(
        &self,
        in_value: MatView<'_>,
        out_deriv: MatView<'_>,
        in_deriv: Option<&mut MatViewMut<'_>>,
        params_deriv: Option<&mut Vector64>,
        mut stats: Option<&mut LstmNonlinearityComponent>,
    ) {
        let (repair, repaired_units) = lstm_self_repair_scales(
            &self.deriv_sum,
            self.count,
            &self.self_repair_config,
            self.cell_dim(),
        );
        backprop_lstm_nonlinearity(
            LstmBackpropInput {
                in_value,
                params: self.params.view(),
                out_deriv,
                use_dropout: self.use_dropout,
                self_repair: &repair,
            },
            in_deriv,
            params_deriv,
            stats.as_deref_mut().map(|st| LstmStatsSums {
                value_sum: &mut st.value_sum,
                deriv_sum: &mut st.deriv_sum,
            }),
        );
        if let Some(st) = stats {
            let rows = in_value.num_rows() as f64;
            st.self_repair_total.add_vec(rows, &repaired_units);
            st.count += rows;
        }
    }
}

impl Component for LstmNonlinearityComponent {
    fn describe(&self) -> Description {
        Description::new(
            TYPE,
            5 * self.cell_dim() + if self.use_dropout { 3 } else { 0 },
            2 * self.cell_dim(),
            Properties::SIMPLE | Properties::UPDATABLE | Properties::BACKPROP_NEEDS_INPUT,
        )
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let c = self.cell_dim();
        if p.input.num_cols() != self.input_dim() || p.output.num_cols() != 2 * c {
            return None;
        }
        p.output
            .compute_lstm_nonlinearity(p.input, self.params.view(), self.use_dropout);
        None
    }

    fn backprop(&self, mut b: Backprop<'_>) {
        let c = self.cell_dim();
        if b.in_value.num_cols() != self.input_dim()
            || b.out_deriv.num_cols() != 2 * c
            || b.out_deriv.num_rows() != b.in_value.num_rows()
        {
            return;
        }
        if let Some(g) = &b.in_deriv {
            if g.num_cols() != self.input_dim() || g.num_rows() != b.in_value.num_rows() {
                return;
            }
        }
        let upd = update_target::<LstmNonlinearityComponent>(b.to_update);
        match upd {
            Some(u) if u.cell_dim() == c => {
                let mut pd = Vector64::zeros(3 * c);
                self.backprop_core(
                    b.in_value,
                    b.out_deriv,
                    b.in_deriv.as_mut(),
                    Some(&mut pd),
                    Some(u),
                );
                // The summed gradient's 3 rows go through the natural-gradient
                // preconditioner (Kaldi's `preconditioner_`), unless this is a gradient holder.
                let grad = pd.to_matrix(3, c);
                let options = peephole_natural_gradient();
                Update::new(&u.common, Some((&options, &mut u.ng_state)), false)
                    .rows_block(u.params.view_mut(), grad);
            }
            _ => self.backprop_core(b.in_value, b.out_deriv, b.in_deriv.as_mut(), None, None),
        }
    }

    fn write(&self, w: &mut TokenWriter) {
        let prob = if self.count != 0.0 {
            self.self_repair_total
                .div_to_f32(self.count * self.cell_dim() as f64)
        } else {
            Vector::from_f64(&self.self_repair_total)
        };
        write_updatable(
            w,
            TYPE,
            &self.common,
            &[
                ("<Params>", &self.params),
                ("<ValueAvg>", &self.stats_avg(&self.value_sum)),
                ("<DerivAvg>", &self.stats_avg(&self.deriv_sum)),
                ("<SelfRepairConfig>", &self.self_repair_config),
                ("<SelfRepairProb>", &prob),
                ("<UseDropout>", &self.use_dropout.then_some(true)),
                ("<Count>", &self.count),
            ],
        );
    }

    fn info(&self) -> String {
        let c = self.cell_dim();
        let g = |v: f64| fmt_g(v, 6);
        let mut s = info_summary::updatable_header(self, &self.common);
        s += &format!(", cell-dim={c}, use-dropout={}", self.use_dropout);
        for (k, name) in ["w_ic", "w_fc", "w_oc"].iter().enumerate() {
            let row = self.params.sub(k, 1, 0, c);
            let rms = (row.trace_mat_mat(row) / c as f32).sqrt();
            s += &format!(", {name}-rms={}", fmt_g(rms as f64, 4));
        }
        if self.count != 0.0 {
            // Kaldi names the frame count when there are statistics (a trained model).
            s += &format!(", count={}", g(self.count));
        }
        for (k, name) in NONLIN_NAMES.iter().enumerate() {
            s += &format!(
                ", {name}={{ self-repair-lower-threshold={}, self-repair-scale={}",
                g(self.self_repair_config[k] as f64),
                g(self.self_repair_config[k + 5] as f64)
            );
            if self.count != 0.0 {
                let prop = self.self_repair_total.get(k) / (self.count * c as f64);
                // Row k of the averages (the sums in float, times the float 1/count).
                let avg = |sum: &Vector64| -> Vector {
                    let mut row = Vector::zeros(c);
                    row.as_row_mut()
                        .copy_row_from(0, self.stats_avg(sum).view(), k);
                    row
                };
                s += &format!(
                    ", self-repaired-proportion={}, value-avg={}, deriv-avg={}",
                    g(prop),
                    info_summary::summarize_vector(&avg(&self.value_sum)),
                    info_summary::summarize_vector(&avg(&self.deriv_sum))
                );
            }
            s += " }";
        }
        s
    }

    updatable_boilerplate!();
    fn exact_stats(&self) -> Vector64 {
        let mut v = Vector64::default();
        v.push(self.count);
        v.push(self.value_sum.dim() as f64);
        v.push(self.deriv_sum.dim() as f64);
        self.self_repair_total.append_to(&mut v);
        self.value_sum.append_to(&mut v);
        self.deriv_sum.append_to(&mut v);
        v
    }
    fn set_exact_stats(&mut self, stats: &Vector64) -> bool {
        if stats.dim() < 8 {
            return false;
        }
        let (nv, nd) = (stats.get(1) as usize, stats.get(2) as usize);
        if nv != self.value_sum.dim() || nd != self.deriv_sum.dim() || stats.dim() != 8 + nv + nd {
            return false;
        }
        let Some((head, rest)) = stats.split_at(3) else {
            return false;
        };
        let Some((total, rest)) = rest.split_at(5) else {
            return false;
        };
        let Some((value_sum, deriv_sum)) = rest.split_at(nv) else {
            return false;
        };
        self.count = head.get(0);
        self.self_repair_total = total;
        self.value_sum = value_sum;
        self.deriv_sum = deriv_sum;
        true
    }
    fn zero_stats(&mut self) {
        self.value_sum.set_zero();
        self.deriv_sum.set_zero();
        self.self_repair_total.set_zero();
        self.count = 0.0;
    }
    fn scale_stats(&mut self, scale: f32) {
        let s = scale as f64;
        self.value_sum.scale(s);
        self.deriv_sum.scale(s);
        self.self_repair_total.scale(s);
        self.count *= s;
    }
}

impl UpdatableComponent for LstmNonlinearityComponent {
    updatable_common!(ng);
    fn num_parameters(&self) -> usize {
        3 * self.cell_dim()
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        vec![self.params.view()]
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        vec![self.params.view_mut()]
    }
    /// Scales the parameters and the statistics (zeroing both when `alpha` is 0), as Kaldi.
    fn scale(&mut self, alpha: f32) {
        self.params.view_mut().scale(alpha);
        if alpha == 0.0 {
            self.zero_stats();
        } else {
            self.scale_stats(alpha);
        }
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        let Some(o) = other.as_any().downcast_ref::<LstmNonlinearityComponent>() else {
            return;
        };
        if o.cell_dim() != self.cell_dim() {
            return;
        }
        self.params
            .view_mut()
            .add_mat(alpha, o.params.view(), crate::matrix::Trans::No);
        let a = alpha as f64;
        self.value_sum.add_vec(a, &o.value_sum);
        self.deriv_sum.add_vec(a, &o.deriv_sum);
        self.self_repair_total.add_vec(a, &o.self_repair_total);
        self.count += a * o.count;
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        other
            .as_any()
            .downcast_ref::<LstmNonlinearityComponent>()
            .filter(|o| o.params.num_cols() == self.params.num_cols())
            .map(|o| self.params.view().trace_mat_mat(o.params.view()))
            .unwrap_or(0.0)
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
        param_ops::perturb_matrix(&mut self.params, stddev, rng);
    }
}
