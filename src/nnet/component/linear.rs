//! `LinearComponent`: y = W·x without a bias (TDNN-F bottlenecks, prefinal layers).
//!
//! Natural gradient is optional (`use-natural-gradient`, default true); the preconditioning
//! is `crate::gradient`'s.

use super::affine::{weight_ng_options, weight_ng_options_from_config};
use super::info_summary;
use super::kaldi_fields::{self, read_field, read_opt_field, write_updatable};
use super::param_init;
use super::param_ops::{self, updatable_boilerplate, updatable_common};
use super::{
    update_target, Backprop, Component, Description, Memo, Propagate, Properties, UpdatableCommon,
    UpdatableComponent,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{Trans, WeightMatrix};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const LINEAR: &str = "LinearComponent";

/// `LinearComponent`.
#[derive(Clone, Debug)]
pub struct LinearComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// W, output-dim × input-dim.
    pub params: WeightMatrix,
    /// Kaldi's orthonormal-constraint (0 = none); applied by the trainer.
    pub orthonormal_constraint: f32,
    /// use-natural-gradient, rank-in, rank-out, update-period, num-samples-history, alpha.
    pub ng: NaturalGradientOptions,
    /// The preconditioners, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

impl LinearComponent {
    /// Kaldi's LinearComponent::InitFromConfig: `matrix=<file>` (W itself) or random dims.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let params = if let Some(path) = cfg.get::<String>("matrix")? {
            let m = param_init::read_matrix_file(cfg, "matrix", &path)?;
            if m.num_rows() == 0 || m.num_cols() == 0 {
                return Err(cfg.error_at_value("matrix", format!("matrix in {path} is empty")));
            }
            for (key, want) in [("input-dim", m.num_cols()), ("output-dim", m.num_rows())] {
                if let Some(d) = cfg.get::<i32>(key)? {
                    if d as i64 != want as i64 {
                        return Err(cfg.error_at_value(
                            key,
                            format!("{key}={d} does not match the matrix in {path} ({want})"),
                        ));
                    }
                }
            }
            m
        } else {
            let in_dim = param_init::require_positive(cfg, "input-dim")?;
            let out_dim = param_init::require_positive(cfg, "output-dim")?;
            let stddev: f32 = cfg.get_or("param-stddev", param_init::default_stddev(in_dim))?;
            if stddev < 0.0 {
                return Err(cfg.error_at_value("param-stddev", "param-stddev must be >= 0"));
            }
            {
                let rng: &mut dyn RngCore = init_rng;
                param_init::gaussian_matrix(out_dim, in_dim, 0.0, stddev, rng)
            }
        };
        let mut ng = weight_ng_options_from_config(cfg, params.num_cols(), params.num_rows())?;
        ng.use_natural_gradient = cfg.get_or("use-natural-gradient", true)?;
        Ok(Box::new(LinearComponent {
            common,
            orthonormal_constraint: cfg.get_or("orthonormal-constraint", 0.0f32)?,
            params: params.into(),
            ng,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Reads a LinearComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, LINEAR)?;
        r.expect_token("<Params>")?;
        let at = r.pos();
        let params = r.matrix()?;
        if params.num_rows() == 0 || params.num_cols() == 0 {
            return Err(r.err_at(at, "a non-empty parameter matrix"));
        }
        let orthonormal_constraint = read_opt_field(r, "<OrthonormalConstraint>")?.unwrap_or(0.0);
        let use_natural_gradient = read_field(r, "<UseNaturalGradient>")?;
        let (rank_in, rank_out) = read_field(r, "<RankInOut>")?;
        let alpha = read_field(r, "<Alpha>")?;
        let num_samples_history = read_field(r, "<NumSamplesHistory>")?;
        let update_period = read_field(r, "<UpdatePeriod>")?;
        kaldi_fields::expect_closing(r, LINEAR)?;
        Ok(Box::new(LinearComponent {
            common,
            params: params.into(),
            orthonormal_constraint,
            ng: NaturalGradientOptions {
                use_natural_gradient,
                ..weight_ng_options(
                    (rank_in, rank_out),
                    update_period,
                    num_samples_history,
                    alpha,
                )
            },
            ng_state: NaturalGradientState::default(),
        }))
    }
}

impl Component for LinearComponent {
    fn describe(&self) -> Description {
        Description::new(
            LINEAR,
            self.params.num_cols(),
            self.params.num_rows(),
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::PROPAGATE_ADDS
                | Properties::BACKPROP_ADDS,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        self.params.forward(1.0, p.input, &mut p.output, 1.0);
        None
    }
    fn product_weights_mut(&mut self) -> Vec<&mut WeightMatrix> {
        vec![&mut self.params]
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(u) = update_target::<LinearComponent>(b.to_update) {
            Update::new(&u.common, Some((&u.ng, &mut u.ng_state)), true).weight_block(
                u.params.view_mut(),
                None,
                b.in_value,
                b.out_deriv,
            );
        }
        if let Some(mut d) = b.in_deriv {
            self.params.backward(1.0, b.out_deriv, &mut d, 1.0);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        let orthonormal =
            (self.orthonormal_constraint != 0.0).then_some(self.orthonormal_constraint);
        let ng = &self.ng;
        write_updatable(
            w,
            LINEAR,
            &self.common,
            &[
                ("<Params>", &self.params),
                ("<OrthonormalConstraint>", &orthonormal),
                ("<UseNaturalGradient>", &ng.use_natural_gradient),
                ("<RankInOut>", &(ng.rank_in, ng.rank_out)),
                ("<Alpha>", &ng.alpha_in),
                ("<NumSamplesHistory>", &ng.num_samples_history),
                ("<UpdatePeriod>", &ng.update_period),
            ],
        );
    }
    fn info(&self) -> String {
        let g = |v: f32| crate::io::codec::fmt_g(v as f64, 6);
        let mut s = info_summary::updatable_header(self, &self.common);
        s += ", ";
        s += &info_summary::matrix_stats("params", &self.params, true);
        // Here (unlike AffineComponent) Kaldi prints the constraint after the statistics.
        s += &info_summary::orthonormal_info(self.orthonormal_constraint);
        s += &format!(
            ", use-natural-gradient={}, rank-in={}, rank-out={}, num-samples-history={}, update-period={}, alpha={}",
            self.ng.use_natural_gradient,
            self.ng.rank_in,
            self.ng.rank_out,
            g(self.ng.num_samples_history),
            self.ng.update_period,
            g(self.ng.alpha_in)
        );
        s
    }
    updatable_boilerplate!();
}

impl UpdatableComponent for LinearComponent {
    fn orthonormal_constraint(&mut self) -> Option<(f32, crate::matrix::MatViewMut<'_>)> {
        (self.orthonormal_constraint != 0.0)
            .then(|| (self.orthonormal_constraint, self.params.view_mut()))
    }
    updatable_common!(ng);
    fn num_parameters(&self) -> usize {
        self.params.num_rows() * self.params.num_cols()
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        vec![self.params.view()]
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        vec![self.params.view_mut()]
    }
    fn scale(&mut self, alpha: f32) {
        self.params.view_mut().scale(alpha);
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        if let Some(o) = other.as_any().downcast_ref::<LinearComponent>() {
            if o.params.num_rows() == self.params.num_rows()
                && o.params.num_cols() == self.params.num_cols()
            {
                self.params
                    .view_mut()
                    .add_mat(alpha, o.params.view(), Trans::No);
            }
        }
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        match other.as_any().downcast_ref::<LinearComponent>() {
            Some(o)
                if o.params.num_rows() == self.params.num_rows()
                    && o.params.num_cols() == self.params.num_cols() =>
            {
                self.params.view().trace_mat_mat(o.params.view())
            }
            _ => 0.0,
        }
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
        param_ops::perturb_matrix(&mut self.params, stddev, rng);
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::golden::{check_golden_info, round_trip_golden};

    #[test]
    fn golden_linear_round_trip_and_info() {
        for (case, name) in [("tdnn-component", "linear3"), ("cnn-small", "lin0")] {
            if let Err(msg) = round_trip_golden(case, name) {
                panic!("{msg}");
            }
            if let Err(msg) = check_golden_info(case, name) {
                panic!("{msg}");
            }
        }
    }
}
