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
        let scales = if let Some(path) = cfg.get::<String>("scales")? {
            read_vector_file(cfg, "scales", &path)?
        } else {
            let dim = cfg_pos(cfg, "dim")?;
            match cfg.get::<f32>("scale")? {
                Some(s) => Vector::from_vec(vec![s; dim]),
                None => randn_vec(dim, init_rng),
            }
        };
        Ok(Box::new(FixedScaleComponent { scales }))
    }
    /// Registry hook.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<FixedScaleComponent>")?;
        r.expect_token("<Scales>")?;
        let scales = read_nonempty_vector(r, "<Scales>")?;
        r.expect_token("</FixedScaleComponent>")?;
        Ok(Box::new(FixedScaleComponent { scales }))
    }
}

impl Component for FixedScaleComponent {
    fn describe(&self) -> Description {
        Description::new(
            "FixedScaleComponent",
            self.scales.dim(),
            self.scales.dim(),
            Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE,
        )
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
        format!(
            "FixedScaleComponent, input-dim={}, output-dim={}{}",
            self.scales.dim(),
            self.scales.dim(),
            parameter_stats("scales", &self.scales, true)
        )
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
        let bias = read_nonempty_vector(r, "<Bias>")?;
        r.expect_token("</FixedBiasComponent>")?;
        Ok(Box::new(FixedBiasComponent { bias }))
    }
}

impl Component for FixedBiasComponent {
    fn describe(&self) -> Description {
        Description::new(
            "FixedBiasComponent",
            self.bias.dim(),
            self.bias.dim(),
            Properties::SIMPLE | Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE,
        )
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
        format!(
            "FixedBiasComponent, input-dim={}, output-dim={}{}",
            self.bias.dim(),
            self.bias.dim(),
            parameter_stats("bias", &self.bias, true)
        )
    }
    component_boilerplate!();
}
