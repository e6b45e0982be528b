//! Components whose forward pass is the identity and which act on the derivative only:
//! NoOp (scales it by `backprop-scale`) and ClipGradient (clips it, with self-repair).
//! Formats, options and flags follow Kaldi's `nnet-simple-component.{h,cc}`.

use super::kaldi_fields::{read_field, read_opt_field, read_pos_i32, Field};
use super::param_init::cfg_pos;
use super::param_ops::component_boilerplate;
use super::{
    update_target, BackpropInPlace, Component, Description, Memo, PropagateInPlace, Properties,
};
use crate::error::Result;
use crate::io::codec::fmt_g;
use crate::io::TokenReader;
use crate::kaldi_rand::kaldi_rand_uniform;
use crate::matrix::{MatView, MatViewMut, Trans};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// Identity; scales the back-propagated derivative by `backprop-scale`.
#[derive(Clone, Debug)]
pub struct NoOpComponent {
    dim: usize,
    backprop_scale: f32,
}

impl NoOpComponent {
    /// The identity on `dim` columns (derivative scale 1).
    pub fn new(dim: usize) -> Self {
        NoOpComponent {
            dim,
            backprop_scale: 1.0,
        }
    }

    /// Registry hook: `dim`, `backprop-scale` (1.0).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim = cfg_pos(cfg, "dim")?;
        let backprop_scale = cfg.get_or("backprop-scale", 1.0f32)?;
        Ok(Box::new(NoOpComponent {
            dim,
            backprop_scale,
        }))
    }
    /// Registry hook; also accepts the old format written when NoOp was a nonlinearity.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<NoOpComponent>")?;
        let dim = read_pos_i32(r, "<Dim>")?;
        let mut backprop_scale = 1.0;
        if r.try_token("<ValueAvg>")? {
            r.vector()?;
            r.expect_token("<DerivAvg>")?;
            r.vector()?;
            r.expect_token("<Count>")?;
            r.f64()?;
            if r.try_token("<OderivRms>")? {
                r.vector()?;
                r.expect_token("<OderivCount>")?;
                r.f64()?;
            }
            if r.try_token("<NumDimsSelfRepaired>")? {
                r.f64()?;
            }
            if r.try_token("<NumDimsProcessed>")? {
                r.f64()?;
            }
        } else {
            backprop_scale = read_field(r, "<BackpropScale>")?;
        }
        r.expect_token("</NoOpComponent>")?;
        Ok(Box::new(NoOpComponent {
            dim,
            backprop_scale,
        }))
    }
}

impl Component for NoOpComponent {
    fn describe(&self) -> Description {
        Description::new(
            "NoOpComponent",
            self.dim,
            self.dim,
            Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE,
        )
    }
    fn propagate_in_place(&self, _: PropagateInPlace<'_>) -> Option<Memo> {
        None
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        if self.backprop_scale != 1.0 {
            b.deriv.scale(self.backprop_scale);
        }
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<Dim>", &self.dim),
            ("<BackpropScale>", &self.backprop_scale),
        ]
    }
    fn info(&self) -> String {
        let mut s = format!("NoOpComponent, dim={}", self.dim);
        if self.backprop_scale != 1.0 {
            s += &format!(", backprop-scale={}", fmt_g(self.backprop_scale as f64, 6));
        }
        s
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// Identity forward; clips the back-propagated derivative (per element, or per row norm),
/// with optional self-repair when too many rows get clipped.
#[derive(Clone, Debug)]
pub struct ClipGradientComponent {
    dim: usize,
    clipping_threshold: f32,
    norm_based_clipping: bool,
    self_repair_clipped_proportion_threshold: f32,
    self_repair_target: f32,
    self_repair_scale: f32,
    num_clipped: i32,
    count: i32,
    num_self_repaired: i32,
    num_backpropped: i32,
}

impl ClipGradientComponent {
    /// Registry hook: `dim`, `clipping-threshold` (15), `norm-based-clipping` (false),
    /// `self-repair-clipped-proportion-threshold` (0.01), `self-repair-target` (0),
    /// `self-repair-scale` (1).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim = cfg_pos(cfg, "dim")?;
        let c = ClipGradientComponent {
            dim,
            clipping_threshold: cfg.get_or("clipping-threshold", 15.0f32)?,
            norm_based_clipping: cfg.get_or("norm-based-clipping", false)?,
            self_repair_clipped_proportion_threshold: cfg
                .get_or("self-repair-clipped-proportion-threshold", 0.01f32)?,
            self_repair_target: cfg.get_or("self-repair-target", 0.0f32)?,
            self_repair_scale: cfg.get_or("self-repair-scale", 1.0f32)?,
            num_clipped: 0,
            count: 0,
            num_self_repaired: 0,
            num_backpropped: 0,
        };
        if c.clipping_threshold < 0.0
            || c.self_repair_clipped_proportion_threshold < 0.0
            || c.self_repair_target < 0.0
            || c.self_repair_scale < 0.0
        {
            return Err(cfg.error("ClipGradientComponent thresholds and scales must be >= 0"));
        }
        Ok(Box::new(c))
    }
    /// Registry hook (also reads the older format without self-repair fields).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<ClipGradientComponent>")?;
        let dim = read_pos_i32(r, "<Dim>")?;
        let mut c = ClipGradientComponent {
            dim,
            clipping_threshold: read_field(r, "<ClippingThreshold>")?,
            norm_based_clipping: read_field(r, "<NormBasedClipping>")?,
            self_repair_clipped_proportion_threshold: 1.0,
            self_repair_target: 0.0,
            self_repair_scale: 0.0,
            num_clipped: 0,
            count: 0,
            num_self_repaired: 0,
            num_backpropped: 0,
        };
        if let Some(t) = read_opt_field(r, "<SelfRepairClippedProportionThreshold>")? {
            c.self_repair_clipped_proportion_threshold = t;
            c.self_repair_target = read_field(r, "<SelfRepairTarget>")?;
            c.self_repair_scale = read_field(r, "<SelfRepairScale>")?;
        }
        c.num_clipped = read_field(r, "<NumElementsClipped>")?;
        c.count = read_field(r, "<NumElementsProcessed>")?;
        if let Some(n) = read_opt_field(r, "<NumSelfRepaired>")? {
            c.num_self_repaired = n;
            c.num_backpropped = read_field(r, "<NumBackpropped>")?;
        }
        r.expect_token("</ClipGradientComponent>")?;
        Ok(Box::new(c))
    }

    /// Clips `d` in place, updating the counters of `upd` (if training).
    fn clip(
        &self,
        in_value: MatView<'_>,
        d: &mut MatViewMut<'_>,
        to_update: Option<&mut dyn Component>,
        rng: &mut dyn RngCore,
    ) {
        let mut upd = update_target::<ClipGradientComponent>(to_update);
        if self.clipping_threshold > 0.0 {
            if self.norm_based_clipping {
                let mut scales = d.as_view().row_sum_squares();
                let clipped = scales.clip_scales_from_sum_squares(self.clipping_threshold) as i32;
                // Rows within the threshold are multiplied by 1.0, which is exact.
                d.mul_rows_vec(&scales);
                if let Some(u) = upd.as_deref_mut() {
                    u.num_clipped += clipped;
                    u.count += d.num_rows() as i32;
                }
            } else {
                d.apply_ceiling(self.clipping_threshold);
                d.apply_floor(-self.clipping_threshold);
            }
            if let Some(u) = upd {
                u.num_backpropped += 1;
                self.repair(in_value, d, u, rng);
            }
        } else if self.clipping_threshold == 0.0 {
            d.set_zero();
        }
    }

    /// Self-repair: when the clipped proportion exceeds its threshold, adds a term pulling
    /// the input towards `self-repair-target`, keeping the summed row norms unchanged.
    fn repair(
        &self,
        in_value: MatView<'_>,
        d: &mut MatViewMut<'_>,
        upd: &mut ClipGradientComponent,
        rng: &mut dyn RngCore,
    ) {
        const REPAIR_PROBABILITY: f32 = 0.5;
        if self.self_repair_clipped_proportion_threshold >= 1.0
            || self.self_repair_scale == 0.0
            || self.count == 0
            || kaldi_rand_uniform(rng) > REPAIR_PROBABILITY
        {
            return;
        }
        let clipped_proportion = self.num_clipped as f32 / self.count as f32;
        if clipped_proportion <= self.self_repair_clipped_proportion_threshold
            || in_value.num_rows() != d.num_rows()
            || in_value.num_cols() != d.num_cols()
        {
            return;
        }
        upd.num_self_repaired += 1;
        let target = self.self_repair_target;
        let mut repair = in_value.to_matrix();
        repair.view_mut().apply_soft_threshold(target);
        let row_norm_sum = |m: MatView<'_>| -> f64 { m.row_norms().sum_f64() };
        let n = d.num_rows().max(1) as f64;
        let deriv_norm_sum = row_norm_sum(d.as_view());
        let magnitude =
            self.self_repair_scale as f64 * clipped_proportion as f64 * (deriv_norm_sum / n);
        let repair_norm_sum = row_norm_sum(repair.view());
        let scale = if repair_norm_sum != 0.0 {
            magnitude / (repair_norm_sum / n)
        } else {
            0.0
        };
        d.add_mat(
            (-scale / REPAIR_PROBABILITY as f64) as f32,
            repair.view(),
            Trans::No,
        );
        let repaired_norm_sum = row_norm_sum(d.as_view());
        if repaired_norm_sum != 0.0 {
            d.scale((deriv_norm_sum / repaired_norm_sum) as f32);
        }
    }
}

impl Component for ClipGradientComponent {
    fn describe(&self) -> Description {
        Description::new(
            "ClipGradientComponent",
            self.dim,
            self.dim,
            Properties::SIMPLE
                | Properties::PROPAGATE_IN_PLACE
                | Properties::BACKPROP_IN_PLACE
                | Properties::BACKPROP_NEEDS_INPUT,
        )
    }
    fn propagate_in_place(&self, _: PropagateInPlace<'_>) -> Option<Memo> {
        None
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        self.clip(b.in_value, &mut b.deriv, b.to_update, b.rng);
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<Dim>", &self.dim),
            ("<ClippingThreshold>", &self.clipping_threshold),
            ("<NormBasedClipping>", &self.norm_based_clipping),
            (
                "<SelfRepairClippedProportionThreshold>",
                &self.self_repair_clipped_proportion_threshold,
            ),
            ("<SelfRepairTarget>", &self.self_repair_target),
            ("<SelfRepairScale>", &self.self_repair_scale),
            ("<NumElementsClipped>", &self.num_clipped),
            ("<NumElementsProcessed>", &self.count),
            ("<NumSelfRepaired>", &self.num_self_repaired),
            ("<NumBackpropped>", &self.num_backpropped),
        ]
    }
    fn info(&self) -> String {
        let prop = if self.count > 0 {
            self.num_clipped as f32 / self.count as f32
        } else {
            0.0
        };
        let mut s = format!(
            "ClipGradientComponent, dim={}, norm-based-clipping={}, clipping-threshold={}, clipped-proportion={}",
            self.dim,
            self.norm_based_clipping,
            fmt_g(self.clipping_threshold as f64, 6),
            fmt_g(prop as f64, 6)
        );
        if self.self_repair_scale != 0.0 {
            s += &format!(
                ", self-repair-clipped-proportion-threshold={}, self-repair-target={}, self-repair-scale={}",
                fmt_g(self.self_repair_clipped_proportion_threshold as f64, 6),
                fmt_g(self.self_repair_target as f64, 6),
                fmt_g(self.self_repair_scale as f64, 6)
            );
        }
        s
    }
    fn zero_stats(&mut self) {
        self.count = 0;
        self.num_clipped = 0;
        self.num_self_repaired = 0;
        self.num_backpropped = 0;
    }
    fn scale_stats(&mut self, scale: f32) {
        self.count = (self.count as f32 * scale) as i32;
        self.num_clipped = (self.num_clipped as f32 * scale) as i32;
    }
    component_boilerplate!();
}

#[cfg(test)]
mod tests {
    use crate::matrix::Matrix;
    use crate::testing::component::{init, input_deriv};

    #[test]
    fn norm_based_clipping_scales_long_rows() {
        let config =
            "type=ClipGradientComponent dim=2 clipping-threshold=1 norm-based-clipping=true";
        let c = init(config).expect("init");
        let od = Matrix::from_rows(&[vec![3.0, 4.0], vec![0.3, 0.4]]);
        let v = input_deriv(c.as_ref(), &od, &od, &od).to_vec();
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(&v[2..], &[0.3, 0.4]);
    }
}
