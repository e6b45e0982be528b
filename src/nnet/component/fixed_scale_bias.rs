//! Fixed (non-trainable) per-dimension components: FixedScale (y = x ⊙ s) and FixedBias
//! (y = x + b). Formats, options and flags follow Kaldi's `nnet-simple-component.{h,cc}`.

use super::kaldi_fields::{read_nonempty_vector, write_component};
use super::nonlinear::parameter_stats;
use super::param_init::cfg_pos;
use super::param_ops::component_boilerplate;
use super::{BackpropInPlace, Component, Description, Memo, PropagateInPlace, Properties};
use crate::error::Result;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::Vector;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// Reads a Kaldi vector object (text or binary) from a file named in a config line.
fn read_vector_file(cfg: &ConfigLine, key: &str, path: &str) -> Result<Vector> {
    let bytes = crate::io::read_file(path)?;
    let mut r = TokenReader::detect(&bytes, path)?;
    let v = r.vector()?;
    if v.dim() == 0 {
        return Err(cfg.error_at_value(key, format!("vector in {path} is empty")));
    }
    Ok(v)
}

/// The vector of config option `key` (a vector file), or else `otherwise`'s.
fn vector_option(
    cfg: &ConfigLine,
    key: &str,
    otherwise: impl FnOnce() -> Result<Vector>,
) -> Result<Vector> {
    match cfg.get::<String>(key)? {
        Some(path) => read_vector_file(cfg, key, &path),
        None => otherwise(),
    }
}

/// The body of a component whose file is `<Type> <Field> vector </Type>`.
fn read_one_vector(r: &mut TokenReader<'_>, type_name: &str, field: &str) -> Result<Vector> {
    r.try_token(&format!("<{type_name}>"))?;
    r.expect_token(field)?;
    let v = read_nonempty_vector(r, field)?;
    r.expect_token(&format!("</{type_name}>"))?;
    Ok(v)
}

/// A fixed per-dimension component's description: `v`'s dimension in and out, in place.
fn per_dim_description(type_name: &'static str, v: &Vector) -> Description {
    Description::new(
        type_name,
        v.dim(),
        v.dim(),
        Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE,
    )
}

/// A fixed per-dimension component's `info` line, with the statistics of `v` (named `what`).
fn per_dim_info(type_name: &str, what: &str, v: &Vector) -> String {
    format!(
        "{type_name}, input-dim={}, output-dim={}{}",
        v.dim(),
        v.dim(),
        parameter_stats(what, v, true)
    )
}

/// `dim` standard-normal values (Kaldi's SetRandn for test-style initialisation).
fn randn_vec(dim: usize, rng: &mut dyn RngCore) -> Vector {
    Vector::from_vec(crate::kaldi_rand::kaldi_randn(1, dim, rng))
}

// ---------------------------------------------------------------------------------------

/// A fixed per-dimension scale.
#[derive(Clone, Debug)]
pub struct FixedScaleComponent {
    scales: Vector,
}

impl FixedScaleComponent {
    /// The scales.
    pub fn scales(&self) -> &Vector {
        &self.scales
    }
    /// Registry hook: `scales=<vector file>`, or `dim` with `scale` (random normal without).
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let scales = vector_option(cfg, "scales", || {
            let dim = cfg_pos(cfg, "dim")?;
            Ok(match cfg.get::<f32>("scale")? {
                Some(s) => Vector::from_vec(vec![s; dim]),
                None => randn_vec(dim, init_rng),
            })
        })?;
        Ok(Box::new(FixedScaleComponent { scales }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let scales = read_one_vector(r, "FixedScaleComponent", "<Scales>")?;
        Ok(Box::new(FixedScaleComponent { scales }))
    }
}

impl Component for FixedScaleComponent {
    fn describe(&self) -> Description {
        per_dim_description("FixedScaleComponent", &self.scales)
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        p.data.mul_cols_vec(&self.scales);
        None
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        b.deriv.mul_cols_vec(&self.scales);
    }
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "FixedScaleComponent", &[("<Scales>", &self.scales)]);
    }
    fn info(&self) -> String {
        per_dim_info("FixedScaleComponent", "scales", &self.scales)
    }
    component_boilerplate!();
}

// ---------------------------------------------------------------------------------------

/// A fixed per-dimension bias.
#[derive(Clone, Debug)]
pub struct FixedBiasComponent {
    bias: Vector,
}

impl FixedBiasComponent {
    /// Registry hook: `bias=<vector file>`, or `dim` (random normal bias).
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let bias = vector_option(cfg, "bias", || {
            Ok(randn_vec(cfg_pos(cfg, "dim")?, init_rng))
        })?;
        Ok(Box::new(FixedBiasComponent { bias }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let bias = read_one_vector(r, "FixedBiasComponent", "<Bias>")?;
        Ok(Box::new(FixedBiasComponent { bias }))
    }
}

impl Component for FixedBiasComponent {
    fn describe(&self) -> Description {
        per_dim_description("FixedBiasComponent", &self.bias)
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        p.data.add_vec_to_rows(1.0, &self.bias, 1.0);
        None
    }
    fn backprop_in_place(&self, _: BackpropInPlace<'_>) {}
    fn write(&self, w: &mut TokenWriter) {
        write_component(w, "FixedBiasComponent", &[("<Bias>", &self.bias)]);
    }
    fn info(&self) -> String {
        per_dim_info("FixedBiasComponent", "bias", &self.bias)
    }
    component_boilerplate!();
}
