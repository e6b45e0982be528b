//! What every component with parameters shares: learning-rate options (Kaldi's
//! `UpdatableComponent`), their config options and file fields, and the parameter algebra the
//! trainer and the tests use.

use super::kaldi_fields::{read_field, read_opt_into, write_fields};
use super::Component;
use crate::error::Result;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut};
use crate::nnet::config_line::ConfigLine;

/// Learning-rate options common to all updatable components.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdatableCommon {
    pub learning_rate: f32,
    pub learning_rate_factor: f32,
    pub max_change: f32,
    pub l2_regularize: f32,
    /// True when the component holds a gradient rather than parameters.
    pub is_gradient: bool,
    /// Natural-gradient estimates are used but not updated (backstitch's first step, Kaldi's
    /// `FreezeNaturalGradient`); never saved.
    pub natural_gradient_frozen: bool,
}

impl Default for UpdatableCommon {
    fn default() -> Self {
        UpdatableCommon {
            learning_rate: 0.001,
            learning_rate_factor: 1.0,
            max_change: 0.0,
            l2_regularize: 0.0,
            is_gradient: false,
            natural_gradient_frozen: false,
        }
    }
}

impl crate::gradient::RateSettings for UpdatableCommon {
    fn learning_rate(&self) -> f32 {
        self.learning_rate
    }
    fn is_gradient(&self) -> bool {
        self.is_gradient
    }
    fn natural_gradient_frozen(&self) -> bool {
        self.natural_gradient_frozen
    }
}

impl UpdatableCommon {
    /// Reads `learning-rate`, `learning-rate-factor`, `max-change`, `l2-regularize`.
    pub fn from_config(cfg: &ConfigLine) -> Result<Self> {
        let d = UpdatableCommon::default();
        let c = UpdatableCommon {
            learning_rate: cfg.get_or("learning-rate", d.learning_rate)?,
            learning_rate_factor: cfg.get_or("learning-rate-factor", d.learning_rate_factor)?,
            max_change: cfg.get_or("max-change", d.max_change)?,
            l2_regularize: cfg.get_or("l2-regularize", d.l2_regularize)?,
            ..d
        };
        if c.learning_rate < 0.0 || c.learning_rate_factor < 0.0 {
            return Err(cfg.error("learning-rate and learning-rate-factor must be >= 0"));
        }
        Ok(c)
    }

    /// Writes `<TypeName>` and the common fields, ending with `<LearningRate>`.
    pub fn write(&self, w: &mut TokenWriter, type_name: &str) {
        w.token(&format!("<{type_name}>"));
        let factor = self.learning_rate_factor;
        write_fields(
            w,
            &[
                ("<LearningRateFactor>", &(factor != 1.0).then_some(factor)),
                ("<IsGradient>", &self.is_gradient.then_some(true)),
                (
                    "<MaxChange>",
                    &(self.max_change > 0.0).then_some(self.max_change),
                ),
                (
                    "<L2Regularize>",
                    &(self.l2_regularize > 0.0).then_some(self.l2_regularize),
                ),
                ("<LearningRate>", &self.learning_rate),
            ],
        );
    }

    /// Reads the common fields (the opening `<TypeName>` may or may not be consumed already).
    pub fn read(r: &mut TokenReader<'_>, type_name: &str) -> Result<Self> {
        let open = format!("<{type_name}>");
        r.try_token(&open)?;
        let mut c = UpdatableCommon::default();
        read_opt_into(r, "<LearningRateFactor>", &mut c.learning_rate_factor)?;
        read_opt_into(r, "<IsGradient>", &mut c.is_gradient)?;
        read_opt_into(r, "<MaxChange>", &mut c.max_change)?;
        read_opt_into(r, "<L2Regularize>", &mut c.l2_regularize)?;
        c.learning_rate = read_field(r, "<LearningRate>")?;
        Ok(c)
    }

    /// The learning-rate part of an info line, in Kaldi's order.
    pub fn info(&self) -> String {
        super::info_summary::updatable_info(self)
    }
}

/// The parameter interface of components with parameters.
pub trait UpdatableComponent {
    fn common(&self) -> &UpdatableCommon;
    fn common_mut(&mut self) -> &mut UpdatableCommon;
    /// Number of trainable parameters.
    fn num_parameters(&self) -> usize;
    /// The parameters as matrix blocks, in a fixed order (Kaldi's Vectorize order: a weight
    /// matrix, then its bias as a one-row block; a composite its parts' blocks in turn).
    /// Optimizers update them in place through `matrix` operations; the blocks' sizes sum to
    /// `num_parameters()`.
    fn param_blocks(&self) -> Vec<MatView<'_>>;
    /// The blocks of [`param_blocks`](Self::param_blocks), mutable.
    fn param_blocks_mut(&mut self) -> Vec<MatViewMut<'_>>;
    /// Multiplies the parameters by `alpha`.
    fn scale(&mut self, alpha: f32);
    /// Adds `alpha` times the parameters of `other` (same type and shape).
    fn add(&mut self, alpha: f32, other: &dyn Component);
    /// Dot product of the parameters with those of `other`.
    fn dot_product(&self, other: &dyn Component) -> f32;
    /// Adds Gaussian noise of this standard deviation to the parameters.
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore);
    /// Kaldi's `orthonormal-constraint` of the weight matrix (0 = none) and that matrix, for
    /// the trainer's ConstrainOrthonormal.
    fn orthonormal_constraint(&mut self) -> Option<(f32, MatViewMut<'_>)> {
        None
    }
    /// All (constraint, matrix) pairs the trainer's ConstrainOrthonormal visits: this
    /// component's own, or a composite's sub-components'.
    fn orthonormal_constraints(&mut self) -> Vec<(f32, MatViewMut<'_>)> {
        self.orthonormal_constraint().into_iter().collect()
    }
    /// Sets the learning rate to `learning_rate` × learning-rate-factor (Kaldi's
    /// `SetUnderlyingLearningRate`; a composite passes its rate on to its sub-components).
    fn set_underlying_learning_rate(&mut self, learning_rate: f32) {
        let c = self.common_mut();
        c.learning_rate = learning_rate * c.learning_rate_factor;
    }
    /// The natural-gradient preconditioner slots this component holds (in a delta network),
    /// in a fixed order: what `compnet fit` checkpoints so a resumed run is bit-identical.
    fn natural_gradient_slots(&mut self) -> Vec<&mut dyn crate::gradient::NgSlot> {
        Vec::new()
    }
    /// Freezes or unfreezes the natural-gradient estimates (Kaldi's `FreezeNaturalGradient`).
    fn freeze_natural_gradient(&mut self, freeze: bool) {
        self.common_mut().natural_gradient_frozen = freeze;
    }
    /// On a delta component: adds the L2 term −2 · `l2_scale` · learning-rate · l2 ·
    /// `params` (the model's component of the same type), if l2-regularize is set.
    fn add_l2_term(&mut self, l2_scale: f32, params: &dyn Component) {
        let (lr, l2) = (self.common().learning_rate, self.common().l2_regularize);
        let scale = -2.0 * l2_scale * lr * l2;
        if scale != 0.0 {
            self.add(scale, params);
        }
    }
    /// Zeroes the parameters; with `treat_as_gradient`, marks this a gradient holder
    /// (learning rate 1, is_gradient), as Kaldi's SetAsGradient.
    fn set_zero(&mut self, treat_as_gradient: bool) {
        self.scale(0.0);
        if treat_as_gradient {
            let c = self.common_mut();
            c.learning_rate = 1.0;
            c.is_gradient = true;
        }
    }
}
