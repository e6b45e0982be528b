//! Per-dimension trainable components: `PerElementScaleComponent` and
//! `NaturalGradientPerElementScaleComponent` (y = x ⊙ s), `PerElementOffsetComponent`
//! (y = x + o, optionally per block), `ScaleAndOffsetComponent` (y = x ⊙ s + o, per block;
//! its backprop reconstructs x from the output) and `ConstantFunctionComponent` (y = c,
//! ignoring x).

use super::constant::{constant_info, ConstantOutput};
use super::info_summary;
use super::kaldi_fields::{
    self, read_field, read_nonempty_vector, read_opt_field, write_updatable,
};
use super::param_init;
use super::param_ops::{updatable_boilerplate, vector_params_updatable};
use super::{
    update_target, Backprop, BackpropInPlace, Component, Description, Memo, Propagate,
    PropagateInPlace, Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut, Vector};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const PES: &str = "PerElementScaleComponent";
const NG_PES: &str = "NaturalGradientPerElementScaleComponent";
const PEO: &str = "PerElementOffsetComponent";
const SAO: &str = "ScaleAndOffsetComponent";
const CFC: &str = "ConstantFunctionComponent";

/// A parameter vector from `vector=<file>` or `dim` + `param-mean`/`param-stddev`.
fn init_param_vector(
    cfg: &ConfigLine,
    default_mean: f32,
    dim_key: &str,
    init_rng: &mut dyn RngCore,
) -> Result<Vector> {
    if let Some(path) = cfg.get::<String>("vector")? {
        let v = param_init::read_vector_file(cfg, "vector", &path)?;
        if v.dim() == 0 {
            return Err(cfg.error_at_value("vector", format!("vector in {path} is empty")));
        }
        return Ok(v);
    }
    let dim = param_init::require_positive(cfg, dim_key)?;
    let mean: f32 = cfg.get_or("param-mean", default_mean)?;
    let stddev: f32 = cfg.get_or("param-stddev", 0.0)?;
    if stddev < 0.0 {
        return Err(cfg.error_at_value("param-stddev", "param-stddev must be >= 0"));
    }
    Ok({
        let rng: &mut dyn RngCore = init_rng;
        param_init::gaussian_vector(dim, mean, stddev, rng)
    })
}

fn g6(v: f32) -> String {
    crate::io::codec::fmt_g(v as f64, 6)
}

/// Applies `f` to each column block of width `block` of `m`.
fn for_blocks(m: &mut MatViewMut<'_>, block: usize, mut f: impl FnMut(&mut MatViewMut<'_>)) {
    if block == 0 {
        return;
    }
    for k in 0..m.num_cols() / block {
        f(&mut m.cols_range_mut(k * block, block));
    }
}

// ---------------------------------------------------------------------------------------------

/// `PerElementScaleComponent` or (with `natural_gradient`)
/// `NaturalGradientPerElementScaleComponent`.
#[derive(Clone, Debug)]
pub struct PerElementScaleComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// Per-dimension scales.
    pub scales: Vector,
    /// Present for `NaturalGradientPerElementScaleComponent` (rank, alpha: the `_out` fields).
    pub natural_gradient: Option<NaturalGradientOptions>,
    /// The preconditioner, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

impl PerElementScaleComponent {
    /// Kaldi's InitFromConfig of the plain kind or (with `natural_gradient`) the NG kind.
    pub fn from_config_kind(
        cfg: &ConfigLine,
        init_rng: &mut dyn RngCore,
        ng: bool,
    ) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let scales = init_param_vector(cfg, 1.0, "dim", init_rng)?;
        let natural_gradient = if ng {
            let o = NaturalGradientOptions::symmetric(
                cfg.get_or("rank", 8)?,
                cfg.get_or("alpha", 4.0)?,
                cfg.get_or("update-period", 10)?,
                cfg.get_or("num-samples-history", 2000.0)?,
            );
            if o.validate().is_err() {
                return Err(cfg.error(
                    "rank, update-period and num-samples-history must be positive, alpha >= 0",
                ));
            }
            Some(o)
        } else {
            None
        };
        Ok(Box::new(PerElementScaleComponent {
            common,
            scales,
            natural_gradient,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Kaldi's PerElementScaleComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        Self::from_config_kind(cfg, init_rng, false)
    }

    /// Reads a PerElementScaleComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, PES)?;
        r.expect_token("<Params>")?;
        let scales = read_nonempty_vector(r, "scale")?;
        kaldi_fields::expect_closing(r, PES)?;
        Ok(Box::new(PerElementScaleComponent {
            common,
            scales,
            natural_gradient: None,
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Reads a NaturalGradientPerElementScaleComponent body.
    pub fn ng_read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let mut common = UpdatableCommon::read(r, NG_PES)?;
        r.expect_token("<Params>")?;
        let scales = read_nonempty_vector(r, "scale")?;
        kaldi_fields::read_opt_into(r, "<IsGradient>", &mut common.is_gradient)?;
        let rank = read_field(r, "<Rank>")?;
        let update_period = read_field(r, "<UpdatePeriod>")?;
        let num_samples_history = read_field(r, "<NumSamplesHistory>")?;
        let alpha = read_field(r, "<Alpha>")?;
        kaldi_fields::expect_closing(r, NG_PES)?;
        Ok(Box::new(PerElementScaleComponent {
            common,
            scales,
            natural_gradient: Some(NaturalGradientOptions::symmetric(
                rank,
                alpha,
                update_period,
                num_samples_history,
            )),
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// scales += lr · Σ_rows (in ⊙ out_deriv), through this (`to_update`) component's update.
    fn accumulate(&mut self, in_value: MatView<'_>, out_deriv: MatView<'_>) {
        let ng = self
            .natural_gradient
            .as_ref()
            .map(|o| (o, &mut self.ng_state));
        Update::new(&self.common, ng, false).scale_block(&mut self.scales, in_value, out_deriv);
    }
}

impl Component for PerElementScaleComponent {
    fn describe(&self) -> Description {
        Description::new(
            if self.natural_gradient.is_some() {
                NG_PES
            } else {
                PES
            },
            self.scales.dim(),
            self.scales.dim(),
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::PROPAGATE_IN_PLACE
                | Properties::BACKPROP_IN_PLACE,
        )
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        p.data.mul_cols_vec(&self.scales);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(u) = update_target::<PerElementScaleComponent>(b.to_update) {
            u.accumulate(b.in_value, b.out_deriv);
        }
        if let Some(mut d) = b.in_deriv {
            d.copy_from(b.out_deriv);
            d.mul_cols_vec(&self.scales);
        }
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        // The gradient needs the output derivative, so it comes first.
        if let Some(u) = update_target::<PerElementScaleComponent>(b.to_update) {
            u.accumulate(b.in_value, b.deriv.as_view());
        }
        b.deriv.mul_cols_vec(&self.scales);
    }
    fn write(&self, w: &mut TokenWriter) {
        let ng = self.natural_gradient.as_ref();
        write_updatable(
            w,
            self.type_name(),
            &self.common,
            &[
                ("<Params>", &self.scales),
                ("<IsGradient>", &ng.map(|_| self.common.is_gradient)),
                ("<Rank>", &ng.map(|o| o.rank_out)),
                ("<UpdatePeriod>", &ng.map(|o| o.update_period)),
                ("<NumSamplesHistory>", &ng.map(|o| o.num_samples_history)),
                ("<Alpha>", &ng.map(|o| o.alpha_out)),
            ],
        );
    }
    fn info(&self) -> String {
        let (lo, hi) = self.scales.min_max();
        let mut s = format!(
            "{}, scales-min={}, scales-max={}, {}",
            info_summary::updatable_header(self, &self.common),
            g6(lo),
            g6(hi),
            info_summary::vector_stats("scales", &self.scales)
        );
        if let Some(ng) = &self.natural_gradient {
            s += &format!(
                ", rank={}, update-period={}, num-samples-history={}, alpha={}",
                ng.rank_out,
                ng.update_period,
                g6(ng.num_samples_history),
                g6(ng.alpha_out)
            );
        }
        s
    }
    updatable_boilerplate!();
}

vector_params_updatable!(PerElementScaleComponent, scales);

// ---------------------------------------------------------------------------------------------

/// `PerElementOffsetComponent`: y = x + o, with o repeated over blocks when dim > o.dim().
#[derive(Clone, Debug)]
pub struct PerElementOffsetComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// The offsets (block-dim values).
    pub offsets: Vector,
    /// Input and output dimension, a multiple of `offsets.dim()`.
    pub dim: usize,
    /// Natural-gradient options (Kaldi's file carries only use-natural-gradient).
    pub ng: NaturalGradientOptions,
    /// The preconditioner, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

impl PerElementOffsetComponent {
    /// Kaldi's PerElementOffsetComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let (offsets, dim) = if cfg.has("vector") {
            let v = init_param_vector(cfg, 0.0, "dim", init_rng)?;
            let dim = param_init::positive_or(cfg, "dim", v.dim())?;
            if dim % v.dim() != 0 {
                return Err(cfg.error_at_value(
                    "dim",
                    format!(
                        "dim={dim} is not a multiple of the vector dimension {}",
                        v.dim()
                    ),
                ));
            }
            (v, dim)
        } else {
            let dim = param_init::require_positive(cfg, "dim")?;
            let block = param_init::positive_or(cfg, "block-dim", dim)?;
            if dim % block != 0 {
                return Err(cfg.error_at_value(
                    "block-dim",
                    format!("block-dim={block} must divide dim={dim}"),
                ));
            }
            let mean: f32 = cfg.get_or("param-mean", 0.0)?;
            let stddev: f32 = cfg.get_or("param-stddev", 0.0)?;
            if stddev < 0.0 {
                return Err(cfg.error_at_value("param-stddev", "param-stddev must be >= 0"));
            }
            (
                {
                    let rng: &mut dyn RngCore = init_rng;
                    param_init::gaussian_vector(block, mean, stddev, rng)
                },
                dim,
            )
        };
        Ok(Box::new(PerElementOffsetComponent {
            common,
            offsets,
            dim,
            ng: NaturalGradientOptions::per_element(cfg.get_or("use-natural-gradient", true)?),
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Reads a PerElementOffsetComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, PEO)?;
        r.expect_token("<Offsets>")?;
        let offsets = read_nonempty_vector(r, "offset")?;
        let mut dim = offsets.dim();
        if r.try_token("<Dim>")? {
            let at = r.pos();
            dim = kaldi_fields::read_positive_i32(r, "dimension")?;
            if dim % offsets.dim() != 0 {
                return Err(r.err_at(
                    at,
                    format!("a multiple of the offset dimension {}", offsets.dim()),
                ));
            }
        }
        let use_natural_gradient = read_opt_field(r, "<UseNaturalGradient>")?.unwrap_or(true);
        kaldi_fields::expect_closing(r, PEO)?;
        Ok(Box::new(PerElementOffsetComponent {
            common,
            offsets,
            dim,
            ng: NaturalGradientOptions::per_element(use_natural_gradient),
            ng_state: NaturalGradientState::default(),
        }))
    }

    fn accumulate(&mut self, out_deriv: MatView<'_>) {
        Update::new(&self.common, Some((&self.ng, &mut self.ng_state)), false)
            .offset_block(&mut self.offsets, out_deriv);
    }
}

impl Component for PerElementOffsetComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::SIMPLE
            | Properties::UPDATABLE
            | Properties::BACKPROP_IN_PLACE
            | Properties::PROPAGATE_IN_PLACE)
            .with_if(
                self.dim != self.offsets.dim(),
                Properties::OUTPUT_CONTIGUOUS,
            );
        Description::new(PEO, self.dim, self.dim, properties)
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        let o = &self.offsets;
        for_blocks(&mut p.data, o.dim(), |b| b.add_vec_to_rows(1.0, o, 1.0));
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(u) = update_target::<PerElementOffsetComponent>(b.to_update) {
            u.accumulate(b.out_deriv);
        }
        if let Some(mut d) = b.in_deriv {
            d.copy_from(b.out_deriv);
        }
    }
    fn backprop_in_place(&self, b: BackpropInPlace<'_>) {
        // The input derivative equals the output derivative: nothing to change in place.
        if let Some(u) = update_target::<PerElementOffsetComponent>(b.to_update) {
            u.accumulate(b.deriv.as_view());
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_updatable(
            w,
            PEO,
            &self.common,
            &[
                ("<Offsets>", &self.offsets),
                ("<Dim>", &self.dim),
                ("<UseNaturalGradient>", &self.ng.use_natural_gradient),
            ],
        );
    }
    fn info(&self) -> String {
        let (lo, hi) = self.offsets.min_max();
        format!(
            "{}, offsets-min={}, offsets-max={}, block-dim={}, use-natural-gradient={}, {}",
            info_summary::updatable_header(self, &self.common),
            g6(lo),
            g6(hi),
            self.offsets.dim(),
            self.ng.use_natural_gradient,
            info_summary::vector_stats("offsets", &self.offsets)
        )
    }
    updatable_boilerplate!();
}

vector_params_updatable!(PerElementOffsetComponent, offsets);

// ---------------------------------------------------------------------------------------------

/// `ScaleAndOffsetComponent`: y = x ⊙ s + o per column block of width `scales.dim()`.
#[derive(Clone, Debug)]
pub struct ScaleAndOffsetComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// Input and output dimension, a multiple of `scales.dim()`.
    pub dim: usize,
    /// Per-dimension scales.
    pub scales: Vector,
    /// Per-dimension offsets.
    pub offsets: Vector,
    /// use-natural-gradient and rank (the `_out` fields), shared by both parameter blocks.
    pub ng: NaturalGradientOptions,
    /// The preconditioners of the scales and of the offsets (`to_update` side).
    pub ng_state: [NaturalGradientState; 2],
}

/// Scales smaller than this in magnitude are treated as ±this when the backprop reconstructs
/// the input from the output.
const SAO_EPSILON: f32 = 1.0e-4;

impl ScaleAndOffsetComponent {
    /// Kaldi's ScaleAndOffsetComponent::InitFromConfig (scales 1, offsets 0).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let dim = param_init::require_positive(cfg, "dim")?;
        let block = param_init::positive_or(cfg, "block-dim", dim)?;
        if dim % block != 0 {
            return Err(cfg.error_at_value(
                "block-dim",
                format!("block-dim={block} must divide dim={dim}"),
            ));
        }
        let rank: i32 = cfg.get_or("rank", 20)?;
        if rank <= 0 {
            return Err(cfg.error_at_value("rank", "rank must be positive"));
        }
        let mut scales = Vector::zeros(block);
        scales.set_const(1.0);
        Ok(Box::new(ScaleAndOffsetComponent {
            common,
            dim,
            scales,
            offsets: Vector::zeros(block),
            ng: NaturalGradientOptions {
                rank_in: rank,
                rank_out: rank,
                ..NaturalGradientOptions::per_element(cfg.get_or("use-natural-gradient", true)?)
            },
            ng_state: Default::default(),
        }))
    }

    /// Reads a ScaleAndOffsetComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, SAO)?;
        r.expect_token("<Dim>")?;
        let dim = kaldi_fields::read_positive_i32(r, "dimension")?;
        r.expect_token("<Scales>")?;
        let at = r.pos();
        let scales = read_nonempty_vector(r, "scale")?;
        if dim % scales.dim() != 0 {
            return Err(r.err_at(at, format!("a scale vector whose dimension divides {dim}")));
        }
        r.expect_token("<Offsets>")?;
        let at = r.pos();
        let offsets = r.vector()?;
        if offsets.dim() != scales.dim() {
            return Err(r.err_at(
                at,
                format!("an offset vector of dimension {}", scales.dim()),
            ));
        }
        let use_natural_gradient = read_field(r, "<UseNaturalGradient>")?;
        let rank = read_field(r, "<Rank>")?;
        kaldi_fields::expect_closing(r, SAO)?;
        Ok(Box::new(ScaleAndOffsetComponent {
            common,
            dim,
            scales,
            offsets,
            ng: NaturalGradientOptions {
                rank_in: rank,
                rank_out: rank,
                ..NaturalGradientOptions::per_element(use_natural_gradient)
            },
            ng_state: Default::default(),
        }))
    }

    /// Accumulates the gradient; the input is reconstructed as (y − o) / s.
    fn accumulate(
        &mut self,
        out_value: MatView<'_>,
        out_deriv: MatView<'_>,
        scales: &Vector,
        offsets: &Vector,
    ) {
        let inv = scales.reciprocal_away_from_zero(SAO_EPSILON);
        let mut x = out_value.to_matrix();
        let mut xv = x.view_mut();
        for_blocks(&mut xv, inv.dim(), |b| {
            b.add_vec_to_rows(-1.0, offsets, 1.0);
            b.mul_cols_vec(&inv);
        });
        let [scale_state, offset_state] = &mut self.ng_state;
        Update::new(&self.common, Some((&self.ng, scale_state)), false).scale_block(
            &mut self.scales,
            x.view(),
            out_deriv,
        );
        Update::new(&self.common, Some((&self.ng, offset_state)), false)
            .offset_block(&mut self.offsets, out_deriv);
    }
}

impl Component for ScaleAndOffsetComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::SIMPLE
            | Properties::UPDATABLE
            | Properties::BACKPROP_IN_PLACE
            | Properties::PROPAGATE_IN_PLACE
            | Properties::BACKPROP_NEEDS_OUTPUT)
            .with_if(
                self.dim != self.scales.dim(),
                Properties::INPUT_CONTIGUOUS | Properties::OUTPUT_CONTIGUOUS,
            );
        Description::new(SAO, self.dim, self.dim, properties)
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        let (s, o) = (&self.scales, &self.offsets);
        for_blocks(&mut p.data, s.dim(), |b| {
            b.mul_cols_vec(s);
            b.add_vec_to_rows(1.0, o, 1.0);
        });
        None
    }
    fn backprop(&self, step: Backprop<'_>) {
        if let Some(u) = update_target::<ScaleAndOffsetComponent>(step.to_update) {
            u.accumulate(step.out_value, step.out_deriv, &self.scales, &self.offsets);
        }
        if let Some(mut d) = step.in_deriv {
            d.copy_from(step.out_deriv);
            let s = &self.scales;
            for_blocks(&mut d, s.dim(), |b| b.mul_cols_vec(s));
        }
    }
    fn backprop_in_place(&self, mut step: BackpropInPlace<'_>) {
        if let Some(u) = update_target::<ScaleAndOffsetComponent>(step.to_update) {
            u.accumulate(
                step.out_value,
                step.deriv.as_view(),
                &self.scales,
                &self.offsets,
            );
        }
        let s = &self.scales;
        for_blocks(&mut step.deriv, s.dim(), |b| b.mul_cols_vec(s));
    }
    fn write(&self, w: &mut TokenWriter) {
        write_updatable(
            w,
            SAO,
            &self.common,
            &[
                ("<Dim>", &self.dim),
                ("<Scales>", &self.scales),
                ("<Offsets>", &self.offsets),
                ("<UseNaturalGradient>", &self.ng.use_natural_gradient),
                ("<Rank>", &self.ng.rank_out),
            ],
        );
    }
    fn info(&self) -> String {
        let mut s = info_summary::updatable_header(self, &self.common);
        s += &format!(", rank={}", self.ng.rank_out);
        if self.dim != self.scales.dim() {
            s += &format!(", block-size={}", self.scales.dim());
        }
        s += &format!(
            ", {}, {}",
            info_summary::vector_stats("scales", &self.scales),
            info_summary::vector_stats("offsets", &self.offsets)
        );
        s
    }
    updatable_boilerplate!();
}

vector_params_updatable!(ScaleAndOffsetComponent, scales, offsets);

// ---------------------------------------------------------------------------------------------

/// `ConstantFunctionComponent`: every output row is the (optionally trainable) vector
/// `output`; the input is ignored.
#[derive(Clone, Debug)]
pub struct ConstantFunctionComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// Input dimension (the input values are ignored).
    pub input_dim: usize,
    /// The constant output row.
    pub output: Vector,
    /// Whether the output vector is trained.
    pub is_updatable: bool,
    /// Natural-gradient options (Kaldi's file carries only use-natural-gradient).
    pub ng: NaturalGradientOptions,
    /// The preconditioner, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

impl ConstantFunctionComponent {
    /// Kaldi's ConstantFunctionComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let input_dim = param_init::require_positive(cfg, "input-dim")?;
        let output_dim = param_init::require_positive(cfg, "output-dim")?;
        let c = ConstantOutput::from_config(cfg, output_dim, init_rng)?;
        Ok(Box::new(ConstantFunctionComponent::new(
            common, input_dim, c,
        )))
    }

    /// Reads a ConstantFunctionComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, CFC)?;
        let input_dim = kaldi_fields::read_dim_field(r, "<InputDim>", "input dimension")?;
        let c = ConstantOutput::read(r, CFC)?;
        Ok(Box::new(ConstantFunctionComponent::new(
            common, input_dim, c,
        )))
    }

    fn new(common: UpdatableCommon, input_dim: usize, c: ConstantOutput) -> Self {
        ConstantFunctionComponent {
            common,
            input_dim,
            output: c.output,
            is_updatable: c.is_updatable,
            ng: c.ng,
            ng_state: NaturalGradientState::default(),
        }
    }
}

impl Component for ConstantFunctionComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::SIMPLE | Properties::BACKPROP_ADDS)
            .with_if(self.is_updatable, Properties::UPDATABLE)
            .with_if(
                self.input_dim == self.output.dim(),
                Properties::PROPAGATE_IN_PLACE,
            );
        Description::new(CFC, self.input_dim, self.output.dim(), properties)
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        p.output.copy_from_vec_rows(&self.output);
        None
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        p.data.copy_from_vec_rows(&self.output);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        // The output does not depend on the input: the input derivative gets nothing added.
        if let Some(u) = update_target::<ConstantFunctionComponent>(b.to_update) {
            if u.is_updatable {
                Update::new(&u.common, Some((&u.ng, &mut u.ng_state)), false)
                    .offset_block(&mut u.output, b.out_deriv);
            }
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_updatable(
            w,
            CFC,
            &self.common,
            &[
                ("<InputDim>", &self.input_dim),
                ("<Output>", &self.output),
                ("<IsUpdatable>", &self.is_updatable),
                ("<UseNaturalGradient>", &self.ng.use_natural_gradient),
            ],
        );
    }
    fn info(&self) -> String {
        // Kaldi repeats the type and dimensions after the learning-rate part.
        let dims = format!(
            "{CFC}, input-dim={}, output-dim={}",
            self.input_dim,
            self.output.dim()
        );
        constant_info(
            (&dims, &dims),
            &self.common,
            self.is_updatable,
            &self.ng,
            &self.output,
        )
    }
    updatable_boilerplate!(if is_updatable);
}

vector_params_updatable!(ConstantFunctionComponent, output);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::golden::{check_golden_info, round_trip_golden};

    #[test]
    fn golden_round_trip_and_info() {
        for (case, name) in [
            ("misc-components", "peoffset1"),
            ("misc-components", "pescale1"),
            ("misc-components", "sao1"),
            ("misc-components", "constfn1"),
            ("lstm-primitives", "Wic"),
        ] {
            if let Err(msg) = round_trip_golden(case, name) {
                panic!("{msg}");
            }
            if let Err(msg) = check_golden_info(case, name) {
                panic!("{msg}");
            }
        }
    }

    #[test]
    fn scale_and_offset_matches_hand_computation() {
        let cfg = ConfigLine::parse_str("dim=4 block-dim=2").unwrap();
        let mut c =
            ScaleAndOffsetComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).unwrap();
        let sao = c
            .as_any_mut()
            .downcast_mut::<ScaleAndOffsetComponent>()
            .unwrap();
        sao.scales = Vector::from_vec(vec![2.0, -1.0]);
        sao.offsets = Vector::from_vec(vec![0.5, 1.0]);
        let x = crate::matrix::Matrix::from_vec(1, 4, vec![1.0, 2.0, 3.0, 4.0]);
        let mut y = crate::matrix::Matrix::zeros(1, 4);
        c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        assert_eq!(y.to_vec(), vec![2.5, -1.0, 6.5, -3.0]);
    }

    #[test]
    fn offset_block_dim_must_divide() {
        let cfg = ConfigLine::parse_str("dim=6 block-dim=4").unwrap();
        assert!(
            PerElementOffsetComponent::from_config(&cfg, &mut crate::random::seeded_rng(0))
                .is_err()
        );
    }
}
