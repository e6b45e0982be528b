//! Simple, parameter-free components: NoOp, ElementwiseProduct, Permute, SumBlock, SumGroup,
//! Pnorm (2-norm), FixedScale, FixedBias and ClipGradient. Formats, options and flags follow
//! Kaldi's `nnet-simple-component.{h,cc}`.

use super::kaldi_fields::{read_field, read_opt_field, read_positive_count, write_component};
use super::nonlinear::parameter_stats;
use super::param_util::component_boilerplate;
use super::{BackpropArgs, Component, Memo, PropagateArgs, Properties};
use crate::error::Result;
use crate::frontend::kaldi::config_line::ConfigLine;
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut, Trans};
use rand::Rng;
use rand::RngCore;

/// Reads a positive i32 after `token` (error names the offset).
fn read_pos_i32(r: &mut TokenReader<'_>, token: &str) -> Result<usize> {
    r.expect_token(token)?;
    Ok(read_positive_count(r, &format!("value after {token}"))? as usize)
}

/// A required positive integer config value.
fn cfg_pos(cfg: &ConfigLine, key: &str) -> Result<usize> {
    let v: i32 = cfg.require(key)?;
    if v <= 0 {
        return Err(cfg.error_at_value(key, format!("{key} must be > 0")));
    }
    Ok(v as usize)
}

/// Reads a Kaldi vector object (text or binary) from a file named in a config line.
fn read_vector_file(cfg: &ConfigLine, key: &str, path: &str) -> Result<Vec<f32>> {
    let bytes = crate::io::read_file(path)?;
    let mut r = TokenReader::detect(&bytes, path)?;
    let v = r.vector()?.into_vec();
    if v.is_empty() {
        return Err(cfg.error_at_value(key, format!("vector in {path} is empty")));
    }
    Ok(v)
}

/// `dim` standard-normal values (Kaldi's SetRandn for test-style initialisation).
fn randn_vec(dim: usize, rng: &mut dyn RngCore) -> Vec<f32> {
    (0..dim).map(|_| crate::random::rand_gauss(rng)).collect()
}

// ---------------------------------------------------------------------------------------

/// Identity; scales the back-propagated derivative by `backprop-scale`.
#[derive(Clone, Debug)]
pub struct NoOpComponent {
    dim: usize,
    backprop_scale: f32,
}

impl NoOpComponent {
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
    fn type_name(&self) -> &'static str {
        "NoOpComponent"
    }
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.dim
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE
    }
    fn propagate_in_place(&self, _args: PropagateArgs<'_>, _data: MatViewMut<'_>) -> Option<Memo> {
        None
    }
    fn backprop_in_place(&self, _args: BackpropArgs<'_>, mut deriv: MatViewMut<'_>) {
        if self.backprop_scale != 1.0 {
            deriv.scale(self.backprop_scale);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(
            w,
            "NoOpComponent",
            &[
                ("<Dim>", &self.dim),
                ("<BackpropScale>", &self.backprop_scale),
            ],
        );
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

/// Splits the input into `input-dim / output-dim` equal blocks and multiplies them
/// element-wise.
#[derive(Clone, Debug)]
pub struct ElementwiseProductComponent {
    input_dim: usize,
    output_dim: usize,
}

impl ElementwiseProductComponent {
    fn checked(input_dim: usize, output_dim: usize) -> bool {
        input_dim > output_dim && input_dim.is_multiple_of(output_dim)
    }
    /// Registry hook: `input-dim`, `output-dim` (a proper divisor of input-dim).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let output_dim = cfg_pos(cfg, "output-dim")?;
        let input_dim = cfg_pos(cfg, "input-dim")?;
        if !Self::checked(input_dim, output_dim) {
            return Err(cfg.error("input-dim must be a multiple (> 1) of output-dim"));
        }
        Ok(Box::new(ElementwiseProductComponent {
            input_dim,
            output_dim,
        }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<ElementwiseProductComponent>")?;
        let input_dim = read_pos_i32(r, "<InputDim>")?;
        let at = r.pos();
        let output_dim = read_pos_i32(r, "<OutputDim>")?;
        if !Self::checked(input_dim, output_dim) {
            return Err(r.err_at(at, "an <OutputDim> that properly divides <InputDim>"));
        }
        r.expect_token("</ElementwiseProductComponent>")?;
        Ok(Box::new(ElementwiseProductComponent {
            input_dim,
            output_dim,
        }))
    }
}

impl Component for ElementwiseProductComponent {
    fn type_name(&self) -> &'static str {
        "ElementwiseProductComponent"
    }
    fn input_dim(&self) -> usize {
        self.input_dim
    }
    fn output_dim(&self) -> usize {
        self.output_dim
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE | Properties::BACKPROP_NEEDS_INPUT
    }
    fn propagate(
        &self,
        _args: PropagateArgs<'_>,
        input: MatView<'_>,
        mut output: MatViewMut<'_>,
    ) -> Option<Memo> {
        let od = self.output_dim;
        output.copy_from(input.cols_range(0, od));
        for i in 1..self.input_dim / od {
            output.mul_elements(input.cols_range(i * od, od));
        }
        None
    }
    fn backprop(
        &self,
        args: BackpropArgs<'_>,
        out_deriv: MatView<'_>,
        in_deriv: Option<MatViewMut<'_>>,
    ) {
        let BackpropArgs { in_value, .. } = args;
        let Some(mut in_deriv) = in_deriv else {
            return;
        };
        let od = self.output_dim;
        let n = self.input_dim / od;
        for i in 0..n {
            let mut block = in_deriv.cols_range_mut(i * od, od);
            block.copy_from(out_deriv);
            for j in (0..n).filter(|&j| j != i) {
                block.mul_elements(in_value.cols_range(j * od, od));
            }
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(
            w,
            "ElementwiseProductComponent",
            &[
                ("<InputDim>", &self.input_dim),
                ("<OutputDim>", &self.output_dim),
            ],
        );
    }
    fn info(&self) -> String {
        format!(
            "ElementwiseProductComponent, input-dim={}, output-dim={}",
            self.input_dim, self.output_dim
        )
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// Reorders columns: output column i is input column `column_map[i]`.
#[derive(Clone, Debug)]
pub struct PermuteComponent {
    column_map: Vec<i32>,
    reverse_map: Vec<i32>,
}

impl PermuteComponent {
    /// The inverse map, or None if `map` is not a permutation of 0..n.
    fn reverse_of(map: &[i32]) -> Option<Vec<i32>> {
        let mut rev = vec![-1i32; map.len()];
        for (i, &j) in map.iter().enumerate() {
            let slot = rev.get_mut(usize::try_from(j).ok()?)?;
            if *slot != -1 {
                return None;
            }
            *slot = i as i32;
        }
        Some(rev)
    }
    /// Registry hook: `column-map=a,b,c,...` (a permutation of 0..dim-1).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let column_map: Vec<i32> = cfg.require("column-map")?;
        let reverse_map = Self::reverse_of(&column_map)
            .filter(|_| !column_map.is_empty())
            .ok_or_else(|| {
                cfg.error_at_value("column-map", "column-map must be a permutation of 0..dim-1")
            })?;
        Ok(Box::new(PermuteComponent {
            column_map,
            reverse_map,
        }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<PermuteComponent>")?;
        r.expect_token("<ColumnMap>")?;
        let at = r.pos();
        let column_map = r.int_vec()?;
        let reverse_map = Self::reverse_of(&column_map)
            .filter(|_| !column_map.is_empty())
            .ok_or_else(|| r.err_at(at, "a <ColumnMap> that is a permutation of 0..dim-1"))?;
        r.expect_token("</PermuteComponent>")?;
        Ok(Box::new(PermuteComponent {
            column_map,
            reverse_map,
        }))
    }
}

impl Component for PermuteComponent {
    fn type_name(&self) -> &'static str {
        "PermuteComponent"
    }
    fn input_dim(&self) -> usize {
        self.column_map.len()
    }
    fn output_dim(&self) -> usize {
        self.column_map.len()
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE
    }
    fn propagate(
        &self,
        _args: PropagateArgs<'_>,
        input: MatView<'_>,
        mut output: MatViewMut<'_>,
    ) -> Option<Memo> {
        output.copy_cols(input, &self.column_map);
        None
    }
    fn backprop(
        &self,
        _args: BackpropArgs<'_>,
        out_deriv: MatView<'_>,
        in_deriv: Option<MatViewMut<'_>>,
    ) {
        if let Some(mut d) = in_deriv {
            d.copy_cols(out_deriv, &self.reverse_map);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "PermuteComponent", &[("<ColumnMap>", &self.column_map)]);
    }
    fn info(&self) -> String {
        let mut s = format!(
            "PermuteComponent, dim={} , column-map=[ ",
            self.column_map.len()
        );
        for c in self.column_map.iter().take(5) {
            s += &format!("{c} ");
        }
        if self.column_map.len() > 5 {
            s += "... ";
        }
        s.push(']');
        s
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// Sums the `input-dim / output-dim` consecutive blocks of the input, times `scale`.
#[derive(Clone, Debug)]
pub struct SumBlockComponent {
    input_dim: usize,
    output_dim: usize,
    scale: f32,
}

impl SumBlockComponent {
    /// Registry hook: `input-dim`, `output-dim` (divides input-dim), `scale` (1.0).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let input_dim = cfg_pos(cfg, "input-dim")?;
        let output_dim = cfg_pos(cfg, "output-dim")?;
        let scale = cfg.get_or("scale", 1.0f32)?;
        if !input_dim.is_multiple_of(output_dim) {
            return Err(cfg.error("output-dim must divide input-dim"));
        }
        Ok(Box::new(SumBlockComponent {
            input_dim,
            output_dim,
            scale,
        }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<SumBlockComponent>")?;
        let input_dim = read_pos_i32(r, "<InputDim>")?;
        let at = r.pos();
        let output_dim = read_pos_i32(r, "<OutputDim>")?;
        if !input_dim.is_multiple_of(output_dim) {
            return Err(r.err_at(at, "an <OutputDim> dividing <InputDim>"));
        }
        let scale = read_field(r, "<Scale>")?;
        r.expect_token("</SumBlockComponent>")?;
        Ok(Box::new(SumBlockComponent {
            input_dim,
            output_dim,
            scale,
        }))
    }
}

impl Component for SumBlockComponent {
    fn type_name(&self) -> &'static str {
        "SumBlockComponent"
    }
    fn input_dim(&self) -> usize {
        self.input_dim
    }
    fn output_dim(&self) -> usize {
        self.output_dim
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE | Properties::PROPAGATE_ADDS | Properties::BACKPROP_ADDS
    }
    fn propagate(
        &self,
        _args: PropagateArgs<'_>,
        input: MatView<'_>,
        mut output: MatViewMut<'_>,
    ) -> Option<Memo> {
        let od = self.output_dim;
        for b in 0..self.input_dim / od {
            output.add_mat(self.scale, input.cols_range(b * od, od), Trans::No);
        }
        None
    }
    fn backprop(
        &self,
        _args: BackpropArgs<'_>,
        out_deriv: MatView<'_>,
        in_deriv: Option<MatViewMut<'_>>,
    ) {
        let Some(mut d) = in_deriv else {
            return;
        };
        let od = self.output_dim;
        for b in 0..self.input_dim / od {
            d.cols_range_mut(b * od, od)
                .add_mat(self.scale, out_deriv, Trans::No);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(
            w,
            "SumBlockComponent",
            &[
                ("<InputDim>", &self.input_dim),
                ("<OutputDim>", &self.output_dim),
                ("<Scale>", &self.scale),
            ],
        );
    }
    fn info(&self) -> String {
        format!(
            "SumBlockComponent, input-dim={}, output-dim={}, scale={}",
            self.input_dim,
            self.output_dim,
            fmt_g(self.scale as f64, 6)
        )
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// Sums consecutive groups of input columns of the given sizes into one output column each.
#[derive(Clone, Debug)]
pub struct SumGroupComponent {
    sizes: Vec<i32>,
    /// For each output column, the input column range [start, end).
    ranges: Vec<(i32, i32)>,
    /// For each input column, its output column.
    reverse: Vec<i32>,
}

impl SumGroupComponent {
    fn from_sizes(sizes: Vec<i32>) -> Option<Self> {
        if sizes.is_empty() || sizes.iter().any(|&s| s <= 0) {
            return None;
        }
        let mut ranges = Vec::with_capacity(sizes.len());
        let mut reverse = Vec::new();
        let mut start = 0i32;
        for (j, &s) in sizes.iter().enumerate() {
            let end = start.checked_add(s)?;
            ranges.push((start, end));
            start = end;
            reverse.extend(std::iter::repeat_n(j as i32, s as usize));
        }
        Some(SumGroupComponent {
            sizes,
            ranges,
            reverse,
        })
    }
    /// Registry hook: `sizes=a,b,...` or `input-dim` + `output-dim` (equal groups).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let sizes: Vec<i32> = if cfg.has("sizes") {
            cfg.require("sizes")?
        } else {
            let input_dim = cfg_pos(cfg, "input-dim")?;
            let output_dim = cfg_pos(cfg, "output-dim")?;
            if !input_dim.is_multiple_of(output_dim) {
                return Err(cfg.error("output-dim must divide input-dim"));
            }
            vec![(input_dim / output_dim) as i32; output_dim]
        };
        Self::from_sizes(sizes)
            .map(|c| Box::new(c) as Box<dyn Component>)
            .ok_or_else(|| {
                cfg.error_at_value(
                    "sizes",
                    "sizes must be a non-empty list of positive integers",
                )
            })
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<SumGroupComponent>")?;
        r.expect_token("<Sizes>")?;
        let at = r.pos();
        let sizes = r.int_vec()?;
        // The sizes add up to the input dim, one index per column: check before allocating.
        let total = sizes
            .iter()
            .try_fold(0u64, |a, &s| a.checked_add(u64::from(s.max(0) as u32)));
        crate::limits::check_product(
            &[total.unwrap_or(u64::MAX), 4],
            "<Sizes> adding up to a larger dim",
        )
        .map_err(|m| r.err_at(at, format!("<Sizes> within the memory limit: {m}")))?;
        let c = Self::from_sizes(sizes)
            .ok_or_else(|| r.err_at(at, "a non-empty <Sizes> list of positive integers"))?;
        r.expect_token("</SumGroupComponent>")?;
        Ok(Box::new(c))
    }
}

impl Component for SumGroupComponent {
    fn type_name(&self) -> &'static str {
        "SumGroupComponent"
    }
    fn input_dim(&self) -> usize {
        self.reverse.len()
    }
    fn output_dim(&self) -> usize {
        self.sizes.len()
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE
    }
    fn propagate(
        &self,
        _args: PropagateArgs<'_>,
        input: MatView<'_>,
        mut output: MatViewMut<'_>,
    ) -> Option<Memo> {
        output.sum_column_ranges(input, &self.ranges);
        None
    }
    fn backprop(
        &self,
        _args: BackpropArgs<'_>,
        out_deriv: MatView<'_>,
        in_deriv: Option<MatViewMut<'_>>,
    ) {
        if let Some(mut d) = in_deriv {
            d.copy_cols(out_deriv, &self.reverse);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "SumGroupComponent", &[("<Sizes>", &self.sizes)]);
    }
    fn info(&self) -> String {
        format!(
            "SumGroupComponent, input-dim={}, output-dim={}",
            self.input_dim(),
            self.output_dim()
        )
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// The 2-norm over groups of `input-dim / output-dim` consecutive inputs.
#[derive(Clone, Debug)]
pub struct PnormComponent {
    input_dim: usize,
    output_dim: usize,
}

impl PnormComponent {
    /// Registry hook: `input-dim`, `output-dim` (divides input-dim).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let output_dim = cfg_pos(cfg, "output-dim")?;
        let input_dim = cfg_pos(cfg, "input-dim")?;
        if !input_dim.is_multiple_of(output_dim) {
            return Err(cfg.error("output-dim must divide input-dim"));
        }
        Ok(Box::new(PnormComponent {
            input_dim,
            output_dim,
        }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<PnormComponent>")?;
        let input_dim = read_pos_i32(r, "<InputDim>")?;
        let at = r.pos();
        let output_dim = read_pos_i32(r, "<OutputDim>")?;
        if !input_dim.is_multiple_of(output_dim) {
            return Err(r.err_at(at, "an <OutputDim> dividing <InputDim>"));
        }
        r.expect_token("</PnormComponent>")?;
        Ok(Box::new(PnormComponent {
            input_dim,
            output_dim,
        }))
    }
}

impl Component for PnormComponent {
    fn type_name(&self) -> &'static str {
        "PnormComponent"
    }
    fn input_dim(&self) -> usize {
        self.input_dim
    }
    fn output_dim(&self) -> usize {
        self.output_dim
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE | Properties::BACKPROP_NEEDS_INPUT | Properties::BACKPROP_NEEDS_OUTPUT
    }
    fn propagate(
        &self,
        _args: PropagateArgs<'_>,
        input: MatView<'_>,
        mut output: MatViewMut<'_>,
    ) -> Option<Memo> {
        output.group_2norm_from(input);
        None
    }
    fn backprop(
        &self,
        args: BackpropArgs<'_>,
        out_deriv: MatView<'_>,
        in_deriv: Option<MatViewMut<'_>>,
    ) {
        let BackpropArgs {
            in_value,
            out_value,
            ..
        } = args;
        if let Some(mut d) = in_deriv {
            d.diff_group_2norm(in_value, out_value, out_deriv);
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(
            w,
            "PnormComponent",
            &[
                ("<InputDim>", &self.input_dim),
                ("<OutputDim>", &self.output_dim),
            ],
        );
    }
    fn info(&self) -> String {
        format!(
            "PnormComponent, input-dim={}, output-dim={}",
            self.input_dim, self.output_dim
        )
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// A fixed per-dimension scale.
#[derive(Clone, Debug)]
pub struct FixedScaleComponent {
    scales: Vec<f32>,
}

impl FixedScaleComponent {
    /// The scales.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }
    /// Registry hook: `scales=<vector file>`, or `dim` with `scale` (random normal without).
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let scales = if let Some(path) = cfg.get::<String>("scales")? {
            read_vector_file(cfg, "scales", &path)?
        } else {
            let dim = cfg_pos(cfg, "dim")?;
            match cfg.get::<f32>("scale")? {
                Some(s) => vec![s; dim],
                None => randn_vec(dim, init_rng),
            }
        };
        Ok(Box::new(FixedScaleComponent { scales }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<FixedScaleComponent>")?;
        r.expect_token("<Scales>")?;
        let at = r.pos();
        let scales = r.vector()?.into_vec();
        if scales.is_empty() {
            return Err(r.err_at(at, "a non-empty <Scales> vector"));
        }
        r.expect_token("</FixedScaleComponent>")?;
        Ok(Box::new(FixedScaleComponent { scales }))
    }
}

impl Component for FixedScaleComponent {
    fn type_name(&self) -> &'static str {
        "FixedScaleComponent"
    }
    fn input_dim(&self) -> usize {
        self.scales.len()
    }
    fn output_dim(&self) -> usize {
        self.scales.len()
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE
    }
    fn propagate_in_place(
        &self,
        _args: PropagateArgs<'_>,
        mut data: MatViewMut<'_>,
    ) -> Option<Memo> {
        data.mul_cols_vec(&self.scales);
        None
    }
    fn backprop_in_place(&self, _args: BackpropArgs<'_>, mut deriv: MatViewMut<'_>) {
        deriv.mul_cols_vec(&self.scales);
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "FixedScaleComponent", &[("<Scales>", &self.scales)]);
    }
    fn info(&self) -> String {
        format!(
            "FixedScaleComponent, input-dim={}, output-dim={}{}",
            self.scales.len(),
            self.scales.len(),
            parameter_stats("scales", &self.scales, true)
        )
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// A fixed per-dimension bias.
#[derive(Clone, Debug)]
pub struct FixedBiasComponent {
    bias: Vec<f32>,
}

impl FixedBiasComponent {
    /// Registry hook: `bias=<vector file>`, or `dim` (random normal bias).
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let bias = if let Some(path) = cfg.get::<String>("bias")? {
            read_vector_file(cfg, "bias", &path)?
        } else {
            randn_vec(cfg_pos(cfg, "dim")?, init_rng)
        };
        Ok(Box::new(FixedBiasComponent { bias }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<FixedBiasComponent>")?;
        r.expect_token("<Bias>")?;
        let at = r.pos();
        let bias = r.vector()?.into_vec();
        if bias.is_empty() {
            return Err(r.err_at(at, "a non-empty <Bias> vector"));
        }
        r.expect_token("</FixedBiasComponent>")?;
        Ok(Box::new(FixedBiasComponent { bias }))
    }
}

impl Component for FixedBiasComponent {
    fn type_name(&self) -> &'static str {
        "FixedBiasComponent"
    }
    fn input_dim(&self) -> usize {
        self.bias.len()
    }
    fn output_dim(&self) -> usize {
        self.bias.len()
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE
    }
    fn propagate_in_place(
        &self,
        _args: PropagateArgs<'_>,
        mut data: MatViewMut<'_>,
    ) -> Option<Memo> {
        data.add_vec_to_rows(1.0, &self.bias, 1.0);
        None
    }
    fn backprop_in_place(&self, _args: BackpropArgs<'_>, _deriv: MatViewMut<'_>) {}
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "FixedBiasComponent", &[("<Bias>", &self.bias)]);
    }
    fn info(&self) -> String {
        format!(
            "FixedBiasComponent, input-dim={}, output-dim={}{}",
            self.bias.len(),
            self.bias.len(),
            parameter_stats("bias", &self.bias, true)
        )
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
        let mut upd =
            to_update.and_then(|u| u.as_any_mut().downcast_mut::<ClipGradientComponent>());
        if self.clipping_threshold > 0.0 {
            if self.norm_based_clipping {
                let t = self.clipping_threshold;
                let mut clipped = 0;
                let scales: Vec<f32> = (d.as_view().row_sum_squares().into_iter())
                    .map(|sq| sq / (t * t))
                    .map(|q| {
                        if q > 1.0 {
                            clipped += 1;
                            q.powf(-0.5)
                        } else {
                            1.0
                        }
                    })
                    .collect();
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
            || rng.random::<f32>() > REPAIR_PROBABILITY
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
        let row_norm_sum =
            |m: MatView<'_>| -> f64 { m.row_norms().iter().map(|&x| x as f64).sum() };
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
    fn type_name(&self) -> &'static str {
        "ClipGradientComponent"
    }
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.dim
    }
    fn properties(&self) -> Properties {
        Properties::SIMPLE
            | Properties::PROPAGATE_IN_PLACE
            | Properties::BACKPROP_IN_PLACE
            | Properties::BACKPROP_NEEDS_INPUT
    }
    fn propagate_in_place(&self, _args: PropagateArgs<'_>, _data: MatViewMut<'_>) -> Option<Memo> {
        None
    }
    fn backprop_in_place(&self, args: BackpropArgs<'_>, mut deriv: MatViewMut<'_>) {
        let BackpropArgs {
            in_value,
            to_update,
            rng,
            ..
        } = args;
        self.clip(in_value, &mut deriv, to_update, rng);
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(
            w,
            "ClipGradientComponent",
            &[
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
            ],
        );
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
    use super::*;
    use crate::matrix::Matrix;

    fn cfg(s: &str) -> ConfigLine {
        ConfigLine::parse_str(s).expect("config")
    }

    #[test]
    fn pnorm_forward_and_backward() {
        let c = PnormComponent::from_config(
            &cfg("input-dim=4 output-dim=2"),
            &mut crate::random::seeded_rng(0),
        )
        .expect("init");
        let x = Matrix::from_rows(&[vec![3.0, 4.0, 0.0, 0.0]]);
        let mut y = Matrix::zeros(1, 2);
        c.propagate(
            PropagateArgs::new(&mut crate::random::seeded_rng(0)),
            x.view(),
            y.view_mut(),
        );
        assert_eq!(y.to_vec(), vec![5.0, 0.0]);
        let od = Matrix::from_rows(&[vec![10.0, 1.0]]);
        let mut id = Matrix::zeros(1, 4);
        c.backprop(
            BackpropArgs {
                in_value: x.view(),
                out_value: y.view(),
                ..BackpropArgs::new(&mut crate::random::seeded_rng(0))
            },
            od.view(),
            Some(id.view_mut()),
        );
        assert_eq!(id.to_vec(), vec![6.0, 8.0, 0.0, 0.0]);
    }

    #[test]
    fn sum_group_and_permute() {
        let c =
            SumGroupComponent::from_config(&cfg("sizes=1,2"), &mut crate::random::seeded_rng(0))
                .expect("init");
        let x = Matrix::from_rows(&[vec![1.0, 2.0, 4.0]]);
        let mut y = Matrix::zeros(1, 2);
        c.propagate(
            PropagateArgs::new(&mut crate::random::seeded_rng(0)),
            x.view(),
            y.view_mut(),
        );
        assert_eq!(y.to_vec(), vec![1.0, 6.0]);
        let p = PermuteComponent::from_config(
            &cfg("column-map=2,0,1"),
            &mut crate::random::seeded_rng(0),
        )
        .expect("init");
        let mut z = Matrix::zeros(1, 3);
        p.propagate(
            PropagateArgs::new(&mut crate::random::seeded_rng(0)),
            x.view(),
            z.view_mut(),
        );
        assert_eq!(z.to_vec(), vec![4.0, 1.0, 2.0]);
        assert!(PermuteComponent::from_config(
            &cfg("column-map=0,0,1"),
            &mut crate::random::seeded_rng(0)
        )
        .is_err());
    }

    #[test]
    fn norm_based_clipping_scales_long_rows() {
        let c = ClipGradientComponent::from_config(
            &cfg("dim=2 clipping-threshold=1 norm-based-clipping=true"),
            &mut crate::random::seeded_rng(0),
        )
        .expect("init");
        let od = Matrix::from_rows(&[vec![3.0, 4.0], vec![0.3, 0.4]]);
        let mut id = Matrix::zeros(2, 2);
        c.backprop(
            BackpropArgs {
                in_value: od.view(),
                out_value: od.view(),
                ..BackpropArgs::new(&mut crate::random::seeded_rng(0))
            },
            od.view(),
            Some(id.view_mut()),
        );
        let v = id.to_vec();
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(&v[2..], &[0.3, 0.4]);
    }
}
