//! NormalizeComponent (rescale each row or block to a target RMS, optionally appending the
//! log of the RMS) and BatchNormComponent (per-dimension normalisation with minibatch
//! statistics in training and stored statistics in test mode), as in Kaldi's
//! `nnet-normalize-component.{h,cc}`.

use super::kaldi_fields::{read_field, read_opt_field, write_component};
use super::nonlinear::summarize_vector;
use super::param_ops::component_boilerplate;
use super::{
    Backprop, BackpropInPlace, Component, Description, Memo, Propagate, PropagateInPlace,
    Properties, StatsStep,
};
use crate::error::Result;
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{
    batch_norm_backprop_coefficients, batch_norm_invented_stats, batch_norm_mean_var,
    batch_norm_scale, batch_norm_test_transform, MatView, MatViewMut, Vector, Vector64,
};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// Rescales each block of `block-dim` inputs to RMS `target-rms`.
#[derive(Clone, Debug)]
pub struct NormalizeComponent {
    input_dim: usize,
    block_dim: usize,
    target_rms: f32,
    add_log_stddev: bool,
}

impl NormalizeComponent {
    fn valid(input_dim: usize, block_dim: usize, target_rms: f32) -> bool {
        input_dim > 0 && block_dim > 0 && input_dim.is_multiple_of(block_dim) && target_rms > 0.0
    }
    /// Registry hook: `dim` or `input-dim`, `block-dim`, `target-rms` (1), `add-log-stddev`.
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim: Option<i32> = cfg.get("dim")?;
        let dim = match dim {
            Some(d) => d,
            None => cfg.require("input-dim")?,
        };
        let block_dim: i32 = cfg.get_or("block-dim", dim)?;
        let target_rms = cfg.get_or("target-rms", 1.0f32)?;
        let add_log_stddev = cfg.get_or("add-log-stddev", false)?;
        if dim <= 0 || block_dim <= 0 || !Self::valid(dim as usize, block_dim as usize, target_rms)
        {
            return Err(cfg.error(
                "invalid NormalizeComponent: need dim > 0, block-dim dividing it, target-rms > 0",
            ));
        }
        Ok(Box::new(NormalizeComponent {
            input_dim: dim as usize,
            block_dim: block_dim as usize,
            target_rms,
            add_log_stddev,
        }))
    }
    /// Registry hook (tolerates the old format with nonlinearity stats).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<NormalizeComponent>")?;
        let at = r.pos();
        let tok = r.token()?;
        if tok != "<Dim>" && tok != "<InputDim>" {
            return Err(r.err_at(at, "<InputDim> or <Dim>"));
        }
        let at = r.pos();
        let input_dim = r.i32()?;
        if input_dim <= 0 {
            return Err(r.err_at(at, "a positive input dimension"));
        }
        let mut c = NormalizeComponent {
            input_dim: input_dim as usize,
            block_dim: input_dim as usize,
            target_rms: 1.0,
            add_log_stddev: false,
        };
        if r.try_token("<BlockDim>")? {
            let at = r.pos();
            let bd = r.i32()?;
            if bd <= 0 || !c.input_dim.is_multiple_of(bd as usize) {
                return Err(r.err_at(at, "a positive <BlockDim> dividing the input dimension"));
            }
            c.block_dim = bd as usize;
        }
        if r.try_token("<TargetRms>")? {
            let at = r.pos();
            c.target_rms = r.f32()?;
            if c.target_rms <= 0.0 {
                return Err(r.err_at(at, "a positive <TargetRms>"));
            }
        }
        c.add_log_stddev = read_opt_field(r, "<AddLogStddev>")?.unwrap_or(false);
        if read_opt_field::<Vector>(r, "<ValueAvg>")?.is_some() {
            read_field::<Vector>(r, "<DerivAvg>")?;
            read_field::<f64>(r, "<Count>")?;
        }
        r.expect_token("</NormalizeComponent>")?;
        Ok(Box::new(c))
    }
}

impl Component for NormalizeComponent {
    fn describe(&self) -> Description {
        let properties =
            (Properties::SIMPLE | Properties::BACKPROP_NEEDS_INPUT | Properties::BACKPROP_ADDS)
                .with_if(
                    !self.add_log_stddev,
                    Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE,
                )
                .with_if(
                    self.block_dim != self.input_dim,
                    Properties::INPUT_CONTIGUOUS | Properties::OUTPUT_CONTIGUOUS,
                );
        Description::new(
            "NormalizeComponent",
            self.input_dim,
            self.input_dim
                + if self.add_log_stddev {
                    self.input_dim / self.block_dim
                } else {
                    0
                },
            properties,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        p.output.normalize_per_row(
            p.input,
            self.block_dim,
            self.target_rms,
            self.add_log_stddev,
        );
        None
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        // Only without add-log-stddev (same shape); each block is read fully before written.
        p.data
            .apply_normalize_per_row(self.block_dim, self.target_rms);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(mut d) = b.in_deriv {
            d.diff_normalize_per_row(
                b.in_value,
                Some(b.out_deriv),
                self.block_dim,
                self.target_rms,
                self.add_log_stddev,
            );
        }
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        b.deriv
            .diff_normalize_per_row(b.in_value, None, self.block_dim, self.target_rms, false);
    }
    fn write(&self, w: &mut TokenWriter) {
        let block_dim = (self.block_dim != self.input_dim).then_some(self.block_dim);
        write_component(
            w,
            "NormalizeComponent",
            &[
                ("<InputDim>", &self.input_dim),
                ("<BlockDim>", &block_dim),
                ("<TargetRms>", &self.target_rms),
                ("<AddLogStddev>", &self.add_log_stddev),
            ],
        );
    }
    fn info(&self) -> String {
        let mut s = format!(
            "NormalizeComponent, input-dim={}, output-dim={}, target-rms={}, add-log-stddev={}",
            self.input_dim,
            self.output_dim(),
            fmt_g(self.target_rms as f64, 6),
            self.add_log_stddev
        );
        if self.block_dim != self.input_dim {
            s += &format!(", block-dim={}", self.block_dim);
        }
        s
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// Batch normalisation without learned scale/offset.
#[derive(Clone, Debug)]
pub struct BatchNormComponent {
    dim: usize,
    block_dim: usize,
    epsilon: f32,
    target_rms: f32,
    test_mode: bool,
    count: f64,
    stats_sum: Vector64,
    stats_sumsq: Vector64,
    /// Test-mode transform y = x·scale + offset (per block position); empty in training.
    offset: Vector,
    scale: Vector,
}

/// What training-mode Propagate hands to Backprop and StoreStats.
#[derive(Debug)]
struct BatchNormMemo {
    num_frames: usize,
    mean: Vector,
    uvar: Vector,
    scale: Vector,
}

impl BatchNormComponent {
    fn valid(&self) -> bool {
        self.dim > 0
            && self.block_dim > 0
            && self.dim.is_multiple_of(self.block_dim)
            && self.epsilon > 0.0
            && self.target_rms > 0.0
    }
    /// Stored statistics count.
    pub fn count(&self) -> f64 {
        self.count
    }
    /// Whether the component is in test mode.
    pub fn test_mode(&self) -> bool {
        self.test_mode
    }
    /// Mean and (centred) variance as Kaldi writes them: computed from the sums in double
    /// precision, then rounded to float (so a binary read-then-write reproduces them).
    pub fn mean_var(&self) -> (Vector, Vector) {
        // Kaldi converts the double sums to float first and scales in float.
        batch_norm_mean_var(&self.stats_sum, &self.stats_sumsq, self.count)
    }
    /// As Kaldi: test mode without statistics invents random ones (count 1).
    fn invent_stats(&mut self, rng: &mut dyn RngCore) {
        self.count = 1.0;
        (self.stats_sum, self.stats_sumsq) = batch_norm_invented_stats(self.stats_sum.dim(), rng);
    }

    /// Recomputes the test-mode transform from the statistics (Kaldi's ComputeDerived).
    fn compute_derived(&mut self) {
        self.compute_derived_with(&mut crate::random::seeded_rng(0));
    }

    /// [`Self::compute_derived`], inventing missing statistics from `rng`.
    fn compute_derived_with(&mut self, rng: &mut dyn RngCore) {
        if !self.test_mode {
            self.offset = Vector::default();
            self.scale = Vector::default();
            return;
        }
        if self.count == 0.0 {
            // Read in test mode: no generator at hand, so a fixed seed keeps two runs on the
            // same untrained model equal.
            self.invent_stats(rng);
        }
        (self.scale, self.offset) = batch_norm_test_transform(
            &self.stats_sum,
            &self.stats_sumsq,
            self.count,
            self.epsilon,
            self.target_rms,
        );
    }

    /// Registry hook: `dim`, `block-dim`, `epsilon` (1e-3), `target-rms` (1), `test-mode`.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let dim: i32 = cfg.require("dim")?;
        let block_dim: i32 = cfg.get_or("block-dim", dim)?;
        let mut c = BatchNormComponent {
            dim: dim.max(0) as usize,
            block_dim: block_dim.max(0) as usize,
            epsilon: cfg.get_or("epsilon", 1.0e-3f32)?,
            target_rms: cfg.get_or("target-rms", 1.0f32)?,
            test_mode: cfg.get_or("test-mode", false)?,
            count: 0.0,
            stats_sum: Vector64::default(),
            stats_sumsq: Vector64::default(),
            offset: Vector::default(),
            scale: Vector::default(),
        };
        if dim <= 0 || block_dim <= 0 || !c.valid() {
            return Err(cfg.error(
                "invalid BatchNormComponent: need dim > 0, block-dim dividing it, epsilon and target-rms > 0",
            ));
        }
        c.stats_sum = Vector64::zeros(c.block_dim);
        c.stats_sumsq = Vector64::zeros(c.block_dim);
        if c.test_mode {
            // Invented statistics at config time follow the init seed.
            c.invent_stats(init_rng);
        }
        c.compute_derived();
        Ok(Box::new(c))
    }

    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<BatchNormComponent>")?;
        r.expect_token("<Dim>")?;
        let at0 = r.pos();
        let dim = r.i32()?;
        let block_dim: i32 = read_field(r, "<BlockDim>")?;
        let epsilon = read_field(r, "<Epsilon>")?;
        let target_rms = read_field(r, "<TargetRms>")?;
        let test_mode = read_field(r, "<TestMode>")?;
        let count = read_field(r, "<Count>")?;
        let mut c = BatchNormComponent {
            dim: dim.max(0) as usize,
            block_dim: block_dim.max(0) as usize,
            epsilon,
            target_rms,
            test_mode,
            count,
            stats_sum: Vector64::default(),
            stats_sumsq: Vector64::default(),
            offset: Vector::default(),
            scale: Vector::default(),
        };
        if dim <= 0 || block_dim <= 0 || !c.valid() {
            return Err(r.err_at(
                at0,
                "consistent BatchNorm dimensions, epsilon > 0 and target-rms > 0",
            ));
        }
        r.expect_token("<StatsMean>")?;
        let at = r.pos();
        // Kaldi keeps these statistics in doubles: text numbers are parsed as doubles.
        let mean = r.vector64()?;
        r.expect_token("<StatsVar>")?;
        let var = r.vector64()?;
        if mean.dim() != c.block_dim || var.dim() != c.block_dim {
            return Err(r.err_at(
                at,
                format!("<StatsMean>/<StatsVar> of dimension {}", c.block_dim),
            ));
        }
        // Back to sums: sumsq = (var + mean²)·count, sum = mean·count.
        c.stats_sumsq = mean.clone();
        c.stats_sumsq.mul_elements(&mean);
        c.stats_sumsq.add_vec(1.0, &var);
        c.stats_sumsq.scale(count);
        c.stats_sum = mean;
        c.stats_sum.scale(count);
        r.expect_token("</BatchNormComponent>")?;
        c.compute_derived();
        Ok(Box::new(c))
    }

    /// Training-mode forward pass on `data` (already holding the input).
    fn propagate_train(&self, data: &mut MatViewMut<'_>) -> Memo {
        let bd = self.block_dim;
        let n = data.num_rows() * (self.dim / bd);
        let (mut mean, mut uvar) = data.as_view().block_col_sum_and_sum_squares(bd);
        let inv_n = 1.0 / n.max(1) as f32;
        mean.scale(inv_n);
        uvar.scale(inv_n);
        let scale = batch_norm_scale(&mean, &uvar, self.target_rms, self.epsilon);
        data.sub_vec_mul_vec_per_block(&mean, &scale);
        Box::new(BatchNormMemo {
            num_frames: n,
            mean,
            uvar,
            scale,
        })
    }

    /// Backward pass in place on `deriv` (holding the output derivative).
    fn backprop_on(&self, out_value: MatView<'_>, memo: Option<&Memo>, deriv: &mut MatViewMut<'_>) {
        let bd = self.block_dim;
        if self.test_mode {
            deriv.mul_vec_per_block(&self.scale);
            return;
        }
        let Some(memo) = memo.and_then(|m| m.downcast_ref::<BatchNormMemo>()) else {
            debug_assert!(false, "BatchNormComponent: training backprop without memo");
            deriv.set_zero();
            return;
        };
        let n = memo.num_frames.max(1) as f32;
        // var_deriv_mod = -1/(t² n) Σ z·z' · scale; temp = -1/n Σ z'.
        let (zz, zsum) = out_value.block_col_dot_and_sum(deriv.as_view(), bd);
        let coeff = -1.0 / (self.target_rms * self.target_rms * n);
        let (temp, var_deriv_mod) =
            batch_norm_backprop_coefficients(&zz, &zsum, &memo.scale, coeff, n);
        deriv.add_vec_mul_vec_add_mat_vec_per_block(&temp, &memo.scale, out_value, &var_deriv_mod);
    }
}

impl Component for BatchNormComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::SIMPLE
            | Properties::BACKPROP_NEEDS_OUTPUT
            | Properties::PROPAGATE_IN_PLACE
            | Properties::BACKPROP_IN_PLACE
            | Properties::BATCH_STATISTICS)
            .with_if(
                self.block_dim < self.dim,
                Properties::INPUT_CONTIGUOUS | Properties::OUTPUT_CONTIGUOUS,
            )
            .with_if(
                !self.test_mode,
                Properties::USES_MEMO | Properties::STORES_STATS,
            );
        Description::new("BatchNormComponent", self.dim, self.dim, properties)
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        if self.test_mode {
            p.data.mul_add_vec_per_block(&self.scale, &self.offset);
            None
        } else {
            Some(self.propagate_train(&mut p.data))
        }
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        self.backprop_on(b.out_value, b.memo, &mut b.deriv);
    }
    fn write(&self, w: &mut TokenWriter) {
        let (mean, var) = self.mean_var();
        write_component(
            w,
            "BatchNormComponent",
            &[
                ("<Dim>", &self.dim),
                ("<BlockDim>", &self.block_dim),
                ("<Epsilon>", &self.epsilon),
                ("<TargetRms>", &self.target_rms),
                ("<TestMode>", &self.test_mode),
                ("<Count>", &self.count),
                ("<StatsMean>", &mean),
                ("<StatsVar>", &var),
            ],
        );
    }
    fn info(&self) -> String {
        let mut s = format!(
            "BatchNormComponent, dim={}, block-dim={}, epsilon={}, target-rms={}, count={}, test-mode={}",
            self.dim,
            self.block_dim,
            fmt_g(self.epsilon as f64, 6),
            fmt_g(self.target_rms as f64, 6),
            fmt_g(self.count, 6),
            self.test_mode
        );
        if self.count > 0.0 {
            let (mean, var) = self.mean_var();
            let mut stddev = var;
            stddev.apply_sqrt_floored();
            s += &format!(
                ", data-mean={}, data-stddev={}",
                summarize_vector(&mean),
                summarize_vector(&stddev)
            );
        }
        s
    }
    component_boilerplate!();
    fn store_stats_step(&mut self, s: StatsStep<'_>) {
        if self.test_mode {
            return;
        }
        let Some(m) = s.memo.and_then(|m| m.downcast_ref::<BatchNormMemo>()) else {
            return;
        };
        if self.stats_sum.dim() != self.block_dim {
            self.stats_sum = Vector64::zeros(self.block_dim);
            self.stats_sumsq = Vector64::zeros(self.block_dim);
        }
        let n = m.num_frames as f64;
        self.count += n;
        self.stats_sum.add_vec_f32(n, &m.mean);
        self.stats_sumsq.add_vec_f32(n, &m.uvar);
        self.offset = Vector::default();
        self.scale = Vector::default();
    }
    fn exact_stats(&self) -> Vector64 {
        let mut v = Vector64::default();
        v.push(self.count);
        self.stats_sum.append_to(&mut v);
        self.stats_sumsq.append_to(&mut v);
        v
    }
    fn set_exact_stats(&mut self, stats: &Vector64) -> bool {
        let n = stats.dim().saturating_sub(1) / 2;
        if stats.is_empty() || stats.dim() != 1 + 2 * n || (n != 0 && n != self.block_dim) {
            return false;
        }
        let Some((head, rest)) = stats.split_at(1) else {
            return false;
        };
        let Some((sum, sumsq)) = rest.split_at(n) else {
            return false;
        };
        self.count = head.get(0);
        self.stats_sum = sum;
        self.stats_sumsq = sumsq;
        // The transform is derived from the statistics in test mode.
        if self.test_mode {
            let mut rng = crate::random::seeded_rng(0);
            self.set_test_mode(true, &mut rng);
        }
        true
    }
    fn zero_stats(&mut self) {
        // In test mode the statistics define the transform, so they are kept.
        if !self.test_mode {
            self.count = 0.0;
            self.stats_sum.set_zero();
            self.stats_sumsq.set_zero();
        }
    }
    fn scale_stats(&mut self, scale: f32) {
        if scale == 0.0 {
            self.count = 0.0;
            self.stats_sum.set_zero();
            self.stats_sumsq.set_zero();
        } else {
            let s = scale as f64;
            self.count *= s;
            self.stats_sum.scale(s);
            self.stats_sumsq.scale(s);
        }
    }
    fn set_test_mode(&mut self, test_mode: bool, rng: &mut dyn RngCore) {
        self.test_mode = test_mode;
        self.compute_derived_with(rng);
    }
    fn add_stats(&mut self, alpha: f32, other: &dyn Component) {
        let Some(o) = other.as_any().downcast_ref::<BatchNormComponent>() else {
            return;
        };
        if o.stats_sum.dim() != o.block_dim || o.count == 0.0 {
            return;
        }
        if self.stats_sum.dim() != self.block_dim {
            self.stats_sum = Vector64::zeros(self.block_dim);
            self.stats_sumsq = Vector64::zeros(self.block_dim);
        }
        let a = alpha as f64;
        self.count += a * o.count;
        self.stats_sum.add_vec(a, &o.stats_sum);
        self.stats_sumsq.add_vec(a, &o.stats_sumsq);
        // The test-mode transform follows the statistics.
        if self.test_mode {
            self.compute_derived();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    #[test]
    fn normalize_gives_target_rms_and_log_stddev() {
        let cfg =
            ConfigLine::parse_str("input-dim=4 target-rms=0.5 add-log-stddev=true").expect("cfg");
        let c =
            NormalizeComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).expect("init");
        let x = Matrix::from_rows(&[vec![1.0, 2.0, 3.0, 4.0]]);
        let mut y = Matrix::zeros(1, 5);
        c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        let v = y.to_vec();
        let rms = (v[..4].iter().map(|a| a * a).sum::<f32>() / 4.0).sqrt();
        assert!((rms - 0.5).abs() < 1e-6);
        let true_rms = (30.0f32 / 4.0).sqrt();
        assert!((v[4] - true_rms.ln()).abs() < 1e-5);
    }

    #[test]
    fn batchnorm_train_output_is_standardised() {
        let cfg = ConfigLine::parse_str("dim=2").expect("cfg");
        let mut c =
            BatchNormComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).expect("init");
        let x = Matrix::from_rows(&[vec![1.0, 10.0], vec![3.0, 10.0], vec![5.0, 13.0]]);
        let mut y = Matrix::zeros(3, 2);
        let memo = c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        let mean = y.view().cols_range(0, 1).sum() / 3.0;
        assert!(mean.abs() < 1e-6);
        c.store_stats(
            x.view(),
            y.view(),
            memo.as_ref(),
            &mut crate::random::seeded_rng(0),
        );
        let bn = c
            .as_any()
            .downcast_ref::<BatchNormComponent>()
            .expect("type");
        assert_eq!(bn.count(), 3.0);
        let (m, v) = bn.mean_var();
        let (m0, v0) = (m.as_row().get(0, 0), v.as_row().get(0, 0));
        assert!((m0 - 3.0).abs() < 1e-6 && (v0 - 8.0 / 3.0).abs() < 1e-5);
    }

    /// Test mode without statistics invents them (as Kaldi does), but reproducibly: with
    /// `test-mode=true` in the config they follow the init seed (same seed, same output; a
    /// different seed, a different output); switched on later they are the same every time.
    #[test]
    fn batchnorm_invented_stats_follow_the_init_seed() {
        let x = Matrix::from_rows(&[vec![1.0, -2.0, 0.5]]);
        let run = |config: &str, seed: u64| {
            let cfg = ConfigLine::parse_str(config).expect("cfg");
            let mut init_rng = crate::random::seeded_rng(seed);
            let mut c = BatchNormComponent::from_config(&cfg, &mut init_rng).expect("init");
            c.set_test_mode(true, &mut crate::random::seeded_rng(0));
            let mut y = Matrix::zeros(1, 3);
            c.propagate(Propagate::new(
                x.view(),
                y.view_mut(),
                &mut crate::random::seeded_rng(0),
            ));
            y
        };
        let at_init = "dim=3 test-mode=true";
        assert_eq!(run(at_init, 7), run(at_init, 7));
        assert_ne!(run(at_init, 7), run(at_init, 8));
        assert_eq!(run("dim=3", 7), run("dim=3", 8));
    }
}
