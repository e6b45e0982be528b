//! `ConstantComponent`: outputs a (optionally trainable) constant vector at every requested
//! Index and needs no input at all (e.g. the initial cell value of an LSTM built from
//! primitives, reached through `Failover`).

use super::info_summary;
use super::kaldi_fields::{self, read_field, write_updatable};
use super::param_init;
use super::param_ops::{updatable_boilerplate, vector_params_updatable};
use super::{
    update_target, Backprop, Component, Description, Memo, MiscComputationInfo, Propagate,
    Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::index::Index;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::Vector;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const CONSTANT: &str = "ConstantComponent";

/// `ConstantComponent`.
#[derive(Clone, Debug)]
pub struct ConstantComponent {
    pub common: UpdatableCommon,
    /// The output value (and the parameters).
    pub output: Vector,
    pub is_updatable: bool,
    /// Natural-gradient options (Kaldi's file carries only use-natural-gradient).
    pub ng: NaturalGradientOptions,
    /// The preconditioner, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

/// The part ConstantComponent and ConstantFunctionComponent share (Kaldi's two classes hold
/// the same fields): the output vector, whether it is trained, and with natural gradient.
pub(super) struct ConstantOutput {
    pub output: Vector,
    pub is_updatable: bool,
    pub ng: NaturalGradientOptions,
}

impl ConstantOutput {
    /// `output-mean`, `output-stddev` (a vector of `dim` draws), `is-updatable`,
    /// `use-natural-gradient`.
    pub fn from_config(cfg: &ConfigLine, dim: usize, init_rng: &mut dyn RngCore) -> Result<Self> {
        Ok(ConstantOutput {
            output: param_init::constant_output_from_config(cfg, dim, init_rng)?,
            is_updatable: cfg.get_or("is-updatable", true)?,
            ng: NaturalGradientOptions::per_element(cfg.get_or("use-natural-gradient", true)?),
        })
    }
    /// `<Output>`, `<IsUpdatable>`, `<UseNaturalGradient>`, then the closing token.
    pub fn read(r: &mut TokenReader<'_>, type_name: &str) -> Result<Self> {
        r.expect_token("<Output>")?;
        let output = kaldi_fields::read_nonempty_vector(r, "output")?;
        let is_updatable = read_field(r, "<IsUpdatable>")?;
        let use_natural_gradient = read_field(r, "<UseNaturalGradient>")?;
        kaldi_fields::expect_closing(r, type_name)?;
        Ok(ConstantOutput {
            output,
            is_updatable,
            ng: NaturalGradientOptions::per_element(use_natural_gradient),
        })
    }
}

/// The info line of both, as Kaldi prints it: `head` (type and dimensions), the
/// learning-rate part, `dims` (type and dimensions again), then the output vector's options
/// and statistics.
pub(super) fn constant_info(
    (head, dims): (&str, &str),
    common: &UpdatableCommon,
    is_updatable: bool,
    ng: &NaturalGradientOptions,
    output: &Vector,
) -> String {
    format!(
        "{head}, {}, {dims}, is-updatable={is_updatable}, use-natural-gradient={}, {}",
        info_summary::updatable_info(common),
        ng.use_natural_gradient,
        info_summary::vector_stats("output", output)
    )
}

impl ConstantComponent {
    /// Kaldi's ConstantComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let dim = param_init::require_positive(cfg, "output-dim")?;
        let c = ConstantOutput::from_config(cfg, dim, init_rng)?;
        Ok(Box::new(ConstantComponent::new(common, c)))
    }

    /// Reads a ConstantComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, CONSTANT)?;
        let c = ConstantOutput::read(r, CONSTANT)?;
        Ok(Box::new(ConstantComponent::new(common, c)))
    }

    fn new(common: UpdatableCommon, c: ConstantOutput) -> Self {
        ConstantComponent {
            common,
            output: c.output,
            is_updatable: c.is_updatable,
            ng: c.ng,
            ng_state: NaturalGradientState::default(),
        }
    }
}

impl Component for ConstantComponent {
    fn describe(&self) -> Description {
        Description::new(
            CONSTANT,
            self.output.dim(),
            self.output.dim(),
            if self.is_updatable {
                Properties::UPDATABLE
            } else {
                Properties(0)
            },
        )
    }
    /// Kaldi reports the output dimension here too; no input is ever read.
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        if p.output.num_cols() == self.output.dim() {
            p.output.copy_from_vec_rows(&self.output);
        }
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        // There is no input to propagate to; only the parameters get a gradient.
        if let Some(u) = update_target::<ConstantComponent>(b.to_update) {
            if u.is_updatable && b.out_deriv.num_cols() == u.output.dim() {
                Update::new(&u.common, Some((&u.ng, &mut u.ng_state)), false)
                    .offset_block(&mut u.output, b.out_deriv);
            }
        }
    }

    fn get_input_indexes(&self, _: &MiscComputationInfo, _: &Index, desired: &mut Vec<Index>) {
        desired.clear();
    }

    fn write(&self, w: &mut TokenWriter) {
        write_updatable(
            w,
            CONSTANT,
            &self.common,
            &[
                ("<Output>", &self.output),
                ("<IsUpdatable>", &self.is_updatable),
                ("<UseNaturalGradient>", &self.ng.use_natural_gradient),
            ],
        );
    }
    fn info(&self) -> String {
        let d = self.output.dim();
        constant_info(
            (
                &format!("{CONSTANT}, input-dim={d}, output-dim={d}"),
                &format!("{CONSTANT}, output-dim={d}"),
            ),
            &self.common,
            self.is_updatable,
            &self.ng,
            &self.output,
        )
    }
    updatable_boilerplate!(if is_updatable);
}

vector_params_updatable!(ConstantComponent, output);
