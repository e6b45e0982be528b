//! `AffineComponent`, `NaturalGradientAffineComponent` and `FixedAffineComponent`:
//! y = W·x + b with W of size output-dim × input-dim.
//!
//! Both trainable kinds share one Rust type, [`AffineComponent`]; `natural_gradient` is `Some`
//! for the NG kind, which keeps its NG hyper-parameters (the NG state is never saved, as in
//! Kaldi). Backprop hands (input rows, output-derivative rows) to the `to_update`
//! component's [`crate::gradient::Update`], which adds the gradient scaled by its learning
//! rate, preconditioned for the NG kind once a preconditioner is plugged in.

use super::info_summary;
use super::kaldi_fields::{self, read_field, read_opt_field, write_updatable, Field};
use super::param_init::{self, RandomInit};
use super::param_ops::{self, component_boilerplate, updatable_boilerplate};
use super::{
    update_target, Backprop, Component, Description, Memo, Propagate, Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut, Matrix, Vector, WeightMatrix};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// The weight natural-gradient options as a model file holds them (NaturalGradientAffine and
/// Linear: both ranks, the update period, the history and one alpha).
pub(crate) fn weight_ng_options(
    (rank_in, rank_out): (i32, i32),
    update_period: i32,
    num_samples_history: f32,
    alpha: f32,
) -> NaturalGradientOptions {
    NaturalGradientOptions {
        rank_in,
        rank_out,
        update_period,
        num_samples_history,
        ..NaturalGradientOptions::symmetric(0, alpha, 0, 0.0)
    }
}

/// The natural-gradient options of a weight block from a config line (`rank-in`,
/// `rank-out`, `update-period`, `num-samples-history`, `alpha`), with Kaldi's defaults for
/// these dimensions (NaturalGradientAffine and Linear share them).
pub(crate) fn weight_ng_options_from_config(
    cfg: &ConfigLine,
    input_dim: usize,
    output_dim: usize,
) -> Result<NaturalGradientOptions> {
    let d = NaturalGradientOptions::for_weights(input_dim, output_dim);
    let alpha = cfg.get_or("alpha", d.alpha_in)?;
    let o = NaturalGradientOptions {
        rank_in: cfg.get_or("rank-in", d.rank_in)?,
        rank_out: cfg.get_or("rank-out", d.rank_out)?,
        update_period: cfg.get_or("update-period", d.update_period)?,
        num_samples_history: cfg.get_or("num-samples-history", d.num_samples_history)?,
        alpha_in: alpha,
        alpha_out: alpha,
        ..d
    };
    o.validate().map_err(|e| cfg.error(e))?;
    Ok(o)
}

/// `AffineComponent` or (with `natural_gradient`) `NaturalGradientAffineComponent`.
#[derive(Clone, Debug)]
pub struct AffineComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// W, output-dim × input-dim.
    pub linear: WeightMatrix,
    /// b, output-dim.
    pub bias: Vector,
    /// Kaldi's orthonormal-constraint (0 = none); applied by the trainer.
    pub orthonormal_constraint: f32,
    /// Present for `NaturalGradientAffineComponent`.
    pub natural_gradient: Option<NaturalGradientOptions>,
    /// The preconditioners, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

const AFFINE: &str = "AffineComponent";
const NG_AFFINE: &str = "NaturalGradientAffineComponent";
const FIXED_AFFINE: &str = "FixedAffineComponent";

/// W and b from a config line: `matrix=<file>` (W with b as its last column) or
/// input-dim/output-dim with random values. Returns (W, b).
fn init_affine_params(
    cfg: &ConfigLine,
    default_bias_stddev: f32,
    with_bias_mean: bool,
    init_rng: &mut dyn RngCore,
) -> Result<(Matrix, Vector)> {
    if let Some(path) = cfg.get::<String>("matrix")? {
        let m = param_init::read_matrix_file(cfg, "matrix", &path)?;
        if m.num_cols() < 2 || m.num_rows() < 1 {
            return Err(cfg.error_at_value(
                "matrix",
                format!("matrix in {path} is {}x{}; need at least 1 row and 2 columns (W then the bias column)", m.num_rows(), m.num_cols()),
            ));
        }
        let (rows, in_dim) = (m.num_rows(), m.num_cols() - 1);
        for (key, want) in [("input-dim", in_dim), ("output-dim", rows)] {
            if let Some(d) = cfg.get::<i32>(key)? {
                if d as i64 != want as i64 {
                    return Err(cfg.error_at_value(
                        key,
                        format!("{key}={d} does not match the matrix in {path} ({want})"),
                    ));
                }
            }
        }
        let linear = m.sub(0, rows, 0, in_dim).to_matrix();
        let bias = Vector::from_vec(m.sub(0, rows, in_dim, 1).to_vec());
        return Ok((linear, bias));
    }
    let in_dim = param_init::require_positive(cfg, "input-dim")?;
    let out_dim = param_init::require_positive(cfg, "output-dim")?;
    let init = RandomInit::from_config(cfg, in_dim, default_bias_stddev, with_bias_mean)?;
    let linear = init.weights(out_dim, in_dim, init_rng);
    Ok((linear, init.bias(out_dim, init_rng)))
}

/// Reads `<LinearParams> M <BiasParams> V` and checks that the dimensions agree.
fn read_linear_bias(r: &mut TokenReader<'_>) -> Result<(Matrix, Vector)> {
    let linear: Matrix = read_field(r, "<LinearParams>")?;
    r.expect_token("<BiasParams>")?;
    let at = r.pos();
    let bias = r.vector()?;
    if bias.dim() != linear.num_rows() || linear.num_cols() == 0 {
        return Err(kaldi_fields::dim_error(
            r,
            at,
            format!(
                "a bias of dimension {} matching a non-empty linear matrix (got {})",
                linear.num_rows(),
                bias.dim()
            ),
        ));
    }
    Ok((linear, bias))
}

/// y = W·x + b (overwrites `out`).
pub(crate) fn affine_forward(
    linear: &WeightMatrix,
    bias: &Vector,
    input: MatView<'_>,
    mut out: MatViewMut<'_>,
) {
    linear.forward_affine(input, &mut out, bias);
}

/// in_deriv += out_deriv · W.
pub(crate) fn affine_backprop_input(
    linear: &WeightMatrix,
    out_deriv: MatView<'_>,
    in_deriv: Option<MatViewMut<'_>>,
) {
    if let Some(mut d) = in_deriv {
        linear.backward(1.0, out_deriv, &mut d, 1.0);
    }
}

impl AffineComponent {
    /// A plain AffineComponent from parameters.
    pub fn new(linear: Matrix, bias: Vector) -> Self {
        AffineComponent {
            common: UpdatableCommon::default(),
            linear: linear.into(),
            bias,
            orthonormal_constraint: 0.0,
            natural_gradient: None,
            ng_state: NaturalGradientState::default(),
        }
    }

    /// Kaldi's InitFromConfig of the plain kind or (with `natural_gradient`) the NG kind.
    pub fn from_config_kind(
        cfg: &ConfigLine,
        init_rng: &mut dyn RngCore,
        ng: bool,
    ) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let (linear, bias) = init_affine_params(cfg, 1.0, ng, init_rng)?;
        let orthonormal_constraint = cfg.get_or("orthonormal-constraint", 0.0f32)?;
        let natural_gradient = if ng {
            Some(weight_ng_options_from_config(
                cfg,
                linear.num_cols(),
                linear.num_rows(),
            )?)
        } else {
            None
        };
        Ok(Box::new(AffineComponent {
            common,
            linear: linear.into(),
            bias,
            orthonormal_constraint,
            natural_gradient,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Kaldi's AffineComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        Self::from_config_kind(cfg, init_rng, false)
    }

    /// Reads an AffineComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, AFFINE)?;
        let (linear, bias) = read_linear_bias(r)?;
        let orthonormal_constraint = read_opt_field(r, "<OrthonormalConstraint>")?.unwrap_or(0.0);
        kaldi_fields::expect_closing(r, AFFINE)?;
        Ok(Box::new(AffineComponent {
            common,
            linear: linear.into(),
            bias,
            orthonormal_constraint,
            natural_gradient: None,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Reads a NaturalGradientAffineComponent body (tolerating Kaldi's legacy fields).
    pub fn ng_read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, NG_AFFINE)?;
        let (linear, bias) = read_linear_bias(r)?;
        let rank_in = read_field(r, "<RankIn>")?;
        let rank_out = read_field(r, "<RankOut>")?;
        let orthonormal_constraint = read_opt_field(r, "<OrthonormalConstraint>")?.unwrap_or(0.0);
        let update_period = read_field(r, "<UpdatePeriod>")?;
        let num_samples_history = read_field(r, "<NumSamplesHistory>")?;
        let alpha = read_field(r, "<Alpha>")?;
        // Legacy fields of older models, read and dropped.
        read_opt_field::<f32>(r, "<MaxChangePerSample>")?;
        read_opt_field::<bool>(r, "<IsGradient>")?;
        if read_opt_field::<f64>(r, "<UpdateCount>")?.is_some() {
            read_field::<f64>(r, "<ActiveScalingCount>")?;
            read_field::<f64>(r, "<MaxChangeScaleStats>")?;
        }
        let at = r.pos();
        let tok = r.token()?;
        if !tok.contains("NaturalGradientAffineComponent>") {
            return Err(r.err_at(at, "token </NaturalGradientAffineComponent>"));
        }
        Ok(Box::new(AffineComponent {
            common,
            linear: linear.into(),
            bias,
            orthonormal_constraint,
            natural_gradient: Some(weight_ng_options(
                (rank_in, rank_out),
                update_period,
                num_samples_history,
                alpha,
            )),
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Adds the parameter change for these rows to this (`to_update`) component: the
    /// gradient scaled by its learning rate, natural-gradient preconditioned when it has
    /// natural gradient and a preconditioner is plugged in.
    pub fn accumulate_gradient(&mut self, in_value: MatView<'_>, out_deriv: MatView<'_>) {
        let ng = self
            .natural_gradient
            .as_ref()
            .map(|o| (o, &mut self.ng_state));
        Update::new(&self.common, ng, true).weight_block(
            self.linear.view_mut(),
            Some(&mut self.bias),
            in_value,
            out_deriv,
        );
    }
}

impl Component for AffineComponent {
    fn describe(&self) -> Description {
        Description::new(
            if self.natural_gradient.is_some() {
                NG_AFFINE
            } else {
                AFFINE
            },
            self.linear.num_cols(),
            self.linear.num_rows(),
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_ADDS,
        )
    }
    fn propagate(&self, p: Propagate<'_>) -> Option<Memo> {
        affine_forward(&self.linear, &self.bias, p.input, p.output);
        None
    }
    fn propagate_relu(&self, mut p: Propagate<'_>) -> bool {
        self.linear
            .forward_affine_relu(p.input, &mut p.output, &self.bias)
    }
    fn product_weights_mut(&mut self) -> Vec<&mut WeightMatrix> {
        vec![&mut self.linear]
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(u) = update_target::<AffineComponent>(b.to_update) {
            u.accumulate_gradient(b.in_value, b.out_deriv);
        }
        affine_backprop_input(&self.linear, b.out_deriv, b.in_deriv);
    }
    fn write(&self, w: &mut TokenWriter) {
        let orthonormal =
            (self.orthonormal_constraint != 0.0).then_some(self.orthonormal_constraint);
        let ng = self.natural_gradient.as_ref();
        write_updatable(
            w,
            self.type_name(),
            &self.common,
            &[
                ("<LinearParams>", &self.linear),
                ("<BiasParams>", &self.bias),
                ("<RankIn>", &ng.map(|o| o.rank_in)),
                ("<RankOut>", &ng.map(|o| o.rank_out)),
                ("<OrthonormalConstraint>", &orthonormal),
                ("<UpdatePeriod>", &ng.map(|o| o.update_period)),
                ("<NumSamplesHistory>", &ng.map(|o| o.num_samples_history)),
                ("<Alpha>", &ng.map(|o| o.alpha_in)),
            ],
        );
    }
    fn info(&self) -> String {
        let g = |v: f32| crate::io::codec::fmt_g(v as f64, 6);
        let mut s = info_summary::updatable_header(self, &self.common);
        s += &info_summary::orthonormal_info(self.orthonormal_constraint);
        s += ", ";
        s += &info_summary::matrix_stats("linear-params", &self.linear, true);
        s += ", ";
        s += &info_summary::vector_stats("bias", &self.bias);
        if let Some(ng) = &self.natural_gradient {
            s += &format!(
                ", rank-in={}, rank-out={}, num-samples-history={}, update-period={}, alpha={}",
                ng.rank_in,
                ng.rank_out,
                g(ng.num_samples_history),
                ng.update_period,
                g(ng.alpha_in)
            );
        }
        s
    }
    updatable_boilerplate!();
}

param_ops::linear_bias_updatable!(AffineComponent, orthonormal, ng);

/// `FixedAffineComponent`: a non-trainable affine transform (LDA, IDCT, ...).
#[derive(Clone, Debug)]
pub struct FixedAffineComponent {
    /// W, output-dim × input-dim.
    pub linear: WeightMatrix,
    /// b, output-dim.
    pub bias: Vector,
}

impl FixedAffineComponent {
    /// A fixed affine transform from parameters (Kaldi's `convert-to-fixed-affine` edit).
    pub fn new(linear: Matrix, bias: Vector) -> Self {
        FixedAffineComponent {
            linear: linear.into(),
            bias,
        }
    }

    /// Kaldi's FixedAffineComponent::InitFromConfig: `matrix=<file>`, or input-dim and
    /// output-dim: then one standard-normal matrix of output-dim × (input-dim + 1) whose last
    /// column is the bias.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let (linear, bias) = if cfg.get::<String>("matrix")?.is_some() {
            init_affine_params(cfg, 1.0, false, init_rng)?
        } else {
            let in_dim = param_init::require_positive(cfg, "input-dim")?;
            let out_dim = param_init::require_positive(cfg, "output-dim")?;
            let m = param_init::gaussian_matrix(out_dim, in_dim + 1, 0.0, 1.0, init_rng);
            let linear = m.sub(0, out_dim, 0, in_dim).to_matrix();
            let bias = Vector::from_vec(m.sub(0, out_dim, in_dim, 1).to_vec());
            (linear, bias)
        };
        Ok(Box::new(FixedAffineComponent {
            linear: linear.into(),
            bias,
        }))
    }

    /// Reads a FixedAffineComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<FixedAffineComponent>")?;
        let (linear, bias) = read_linear_bias(r)?;
        kaldi_fields::expect_closing(r, FIXED_AFFINE)?;
        Ok(Box::new(FixedAffineComponent {
            linear: linear.into(),
            bias,
        }))
    }
}

impl Component for FixedAffineComponent {
    fn describe(&self) -> Description {
        Description::new(
            FIXED_AFFINE,
            self.linear.num_cols(),
            self.linear.num_rows(),
            Properties::SIMPLE | Properties::BACKPROP_ADDS,
        )
    }
    fn propagate(&self, p: Propagate<'_>) -> Option<Memo> {
        affine_forward(&self.linear, &self.bias, p.input, p.output);
        None
    }
    fn product_weights_mut(&mut self) -> Vec<&mut WeightMatrix> {
        vec![&mut self.linear]
    }
    fn backprop(&self, b: Backprop<'_>) {
        affine_backprop_input(&self.linear, b.out_deriv, b.in_deriv);
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<LinearParams>", &self.linear),
            ("<BiasParams>", &self.bias),
        ]
    }
    fn info(&self) -> String {
        format!(
            "{FIXED_AFFINE}, input-dim={}, output-dim={}, {}, {}",
            self.input_dim(),
            self.output_dim(),
            info_summary::matrix_stats("linear-params", &self.linear, false),
            info_summary::vector_stats("bias", &self.bias)
        )
    }
    component_boilerplate!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nnet::component::UpdatableComponent;
    use crate::testing::golden::{golden_component, golden_path, round_trip_golden};

    #[test]
    fn golden_affine_and_ng_affine_round_trip_byte_exact() {
        for (case, name) in [
            ("simplest", "affine"),
            ("seed", "affine1"),
            ("clockwork", "affine1"),
            ("misc-components", "final-affine"),
        ] {
            if let Err(msg) = round_trip_golden(case, name) {
                panic!("{msg}");
            }
        }
    }

    #[test]
    fn golden_fixed_affine_from_matrix_file_matches_kaldi_bytes() {
        let dir = golden_path("cases/tdnn-splice-ivector");
        if let Err(msg) = round_trip_golden("tdnn-splice-ivector", "lda") {
            panic!("{msg}");
        }
        let mat = dir.join("lda.mat");
        let cfg = ConfigLine::parse_str(&format!("matrix={}", mat.display())).unwrap();
        let c = FixedAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).unwrap();
        for binary in [false, true] {
            let want = golden_component("tdnn-splice-ivector", "lda", binary).unwrap();
            let mut w = TokenWriter::new(binary);
            c.write(&mut w);
            assert!(
                w.bytes() == &want[..],
                "FixedAffine from lda.mat differs (binary={binary})"
            );
        }
    }

    #[test]
    fn golden_info_lines_match() {
        for (case, name) in [
            ("simplest", "affine"),
            ("misc-components", "final-affine"),
            ("tdnn-splice-ivector", "lda"),
        ] {
            if let Err(msg) = crate::testing::golden::check_golden_info(case, name) {
                panic!("{msg}");
            }
        }
    }

    #[test]
    fn config_defaults_and_errors() {
        let cfg = ConfigLine::parse_str("input-dim=29 output-dim=20").unwrap();
        let c = AffineComponent::from_config_kind(&cfg, &mut crate::random::seeded_rng(0), true)
            .unwrap();
        let a = c.as_any().downcast_ref::<AffineComponent>().unwrap();
        let ng = a.natural_gradient.clone().unwrap();
        assert_eq!((ng.rank_in, ng.rank_out), (15, 10));
        assert_eq!((a.input_dim(), a.output_dim()), (29, 20));
        // Missing dims name the option.
        let cfg = ConfigLine::parse_str("input-dim=3").unwrap();
        let e = AffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("output-dim"), "{e}");
        let cfg = ConfigLine::parse_str("input-dim=3 output-dim=-2").unwrap();
        assert!(AffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).is_err());
        let cfg = ConfigLine::parse_str("matrix=/nonexistent/x.mat").unwrap();
        let e = FixedAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/x.mat"), "{e}");
    }

    #[test]
    fn matrix_option_splits_bias_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.mat");
        std::fs::write(&p, "[ 1 2 3\n 4 5 6 ]\n").unwrap();
        let cfg =
            ConfigLine::parse_str(&format!("matrix={} learning-rate=0.5", p.display())).unwrap();
        let c = AffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).unwrap();
        let a = c.as_any().downcast_ref::<AffineComponent>().unwrap();
        assert_eq!(a.linear.to_vec(), vec![1.0, 2.0, 4.0, 5.0]);
        assert_eq!(a.bias.to_vec(), [3.0, 6.0]);
        assert_eq!(a.common.learning_rate, 0.5);
        // Forward against a hand computation: [1 1] -> [1+2+3, 4+5+6].
        let x = Matrix::from_vec(1, 2, vec![1.0, 1.0]);
        let mut y = Matrix::zeros(1, 2);
        c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        assert_eq!(y.to_vec(), vec![6.0, 15.0]);
    }

    #[test]
    fn gradient_is_scaled_by_learning_rate_of_to_update() {
        let a = AffineComponent::new(
            Matrix::from_vec(1, 2, vec![1.0, -1.0]),
            Vector::from_vec(vec![0.5]),
        );
        let x = Matrix::from_vec(2, 2, vec![1.0, 2.0, 3.0, 4.0]);
        let d = Matrix::from_vec(2, 1, vec![1.0, 10.0]);
        let mut u = a.clone();
        UpdatableComponent::scale(&mut u, 0.0);
        u.common.learning_rate = 0.5;
        a.backprop(Backprop {
            in_value: x.view(),
            out_value: Matrix::zeros(0, 0).view(),
            to_update: Some(&mut u),
            ..Backprop::new(d.view(), None, &mut crate::random::seeded_rng(0))
        });
        // dW = dᵀ x = [1*1+10*3, 1*2+10*4] = [31, 42]; db = 11; times lr 0.5.
        assert_eq!(u.linear.to_vec(), vec![15.5, 21.0]);
        assert_eq!(u.bias.to_vec(), [5.5]);
    }
}

#[cfg(test)]
mod binary_matrix_tests {
    use super::*;

    #[test]
    fn matrix_option_reads_binary_kaldi_matrix() {
        let m = Matrix::from_vec(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let mut w = TokenWriter::new(true);
        w.binary_header();
        w.matrix(&m);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.bin");
        std::fs::write(&p, w.into_bytes()).unwrap();
        let cfg = ConfigLine::parse_str(&format!("matrix={} input-dim=2", p.display())).unwrap();
        let c = FixedAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).unwrap();
        let f = c.as_any().downcast_ref::<FixedAffineComponent>().unwrap();
        assert_eq!(f.linear.to_vec(), vec![1.0, 2.0, 4.0, 5.0]);
        assert_eq!(f.bias.to_vec(), [3.0, 6.0]);
        // A mismatching declared dimension is an error naming the option.
        let cfg = ConfigLine::parse_str(&format!("matrix={} output-dim=3", p.display())).unwrap();
        let e = FixedAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("output-dim"), "{e}");
    }
}
