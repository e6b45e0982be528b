//! DropoutComponent (Kaldi's classic dropout): in training a random proportion of the
//! inputs (or of whole frames, with `dropout-per-frame`) is zeroed; in test mode the input
//! is scaled by 1 − dropout-proportion, as Kaldi's test mode does.

use super::kaldi_fields::{read_count_field, read_opt_field, Field};
use super::param_ops::test_mode_boilerplate;
use super::{Backprop, BackpropInPlace, Component, Description, Memo, Propagate, Properties};
use crate::error::Result;
use crate::io::codec::fmt_g;
use crate::io::TokenReader;
use crate::matrix::MatViewMut;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// Reads a proportion stored after `token`, which must lie in [0, 1] (error at its offset).
pub(super) fn read_proportion(r: &mut TokenReader<'_>, token: &str) -> Result<f32> {
    let at = r.pos();
    let p = r.f32()?;
    if !(0.0..=1.0).contains(&p) {
        return Err(r.err_at(at, format!("a {token} in [0, 1]")));
    }
    Ok(p)
}

/// `token` then a proportion in [0, 1].
pub(super) fn read_proportion_field(r: &mut TokenReader<'_>, token: &str) -> Result<f32> {
    r.expect_token(token)?;
    read_proportion(r, token)
}

/// Classic dropout.
#[derive(Clone, Debug)]
pub struct DropoutComponent {
    dim: usize,
    dropout_proportion: f32,
    dropout_per_frame: bool,
    test_mode: bool,
}

/// Sets the dropout proportion (clamped to [0, 1]) of `c` if it is a dropout component
/// (Dropout, DropoutMask or GeneralDropout, as Kaldi's `SetDropoutProportion`); returns
/// whether it is one.
pub fn set_dropout_proportion(c: &mut dyn Component, p: f32) -> bool {
    use super::dropout_general::{DropoutMaskComponent, GeneralDropoutComponent};
    let any = c.as_any_mut();
    let field = if let Some(d) = any.downcast_mut::<DropoutComponent>() {
        &mut d.dropout_proportion
    } else if let Some(d) = any.downcast_mut::<GeneralDropoutComponent>() {
        &mut d.dropout_proportion
    } else if let Some(d) = any.downcast_mut::<DropoutMaskComponent>() {
        &mut d.dropout_proportion
    } else {
        return false;
    };
    *field = p.clamp(0.0, 1.0);
    true
}

impl DropoutComponent {
    /// Registry hook: `dim`, `dropout-proportion` (both required), `dropout-per-frame`,
    /// `test-mode`.
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim: i32 = cfg.require("dim")?;
        let dropout_proportion: f32 = cfg.require("dropout-proportion")?;
        let dropout_per_frame = cfg.get_or("dropout-per-frame", false)?;
        let test_mode = cfg.get_or("test-mode", false)?;
        if dim <= 0 || !(0.0..=1.0).contains(&dropout_proportion) {
            return Err(
                cfg.error("DropoutComponent needs dim > 0 and 0 <= dropout-proportion <= 1")
            );
        }
        Ok(Box::new(DropoutComponent {
            dim: dim as usize,
            dropout_proportion,
            dropout_per_frame,
            test_mode,
        }))
    }
    /// Registry hook (the per-frame and test-mode fields are optional, as in old files).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token("<DropoutComponent>")?;
        let c = DropoutComponent {
            dim: read_count_field(r, "<Dim>", "<Dim>")? as usize,
            dropout_proportion: read_proportion_field(r, "<DropoutProportion>")?,
            dropout_per_frame: read_opt_field(r, "<DropoutPerFrame>")?.unwrap_or(false),
            test_mode: read_opt_field(r, "<TestMode>")?.unwrap_or(false),
        };
        r.expect_token("</DropoutComponent>")?;
        Ok(Box::new(c))
    }
    /// Applies dropout (or the test-mode scaling) to `data` in place.
    fn apply(&self, data: &mut MatViewMut<'_>, rng: &mut dyn RngCore) {
        let p = self.dropout_proportion;
        if self.test_mode {
            data.scale(1.0 - p);
            return;
        }
        // Keep an element when a uniform draw exceeds p (Kaldi: Heaviside(u - p)), the draws
        // as Kaldi's CPU `RandUniform` makes them.
        if self.dropout_per_frame {
            let drop: Vec<bool> = crate::kaldi_rand::kaldi_uniform(data.num_rows(), rng)
                .into_iter()
                .map(|u| u + -p <= 0.0)
                .collect();
            data.zero_rows(&drop);
        } else {
            data.apply_dropout_rand(rng, p);
        }
    }
}

impl Component for DropoutComponent {
    fn describe(&self) -> Description {
        Description::new(
            "DropoutComponent",
            self.dim,
            self.dim,
            Properties::BACKPROP_IN_PLACE
                | Properties::SIMPLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_NEEDS_OUTPUT
                | Properties::RANDOM_COMPONENT,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        p.output.copy_from(p.input);
        self.apply(&mut p.output, p.rng);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        if let Some(mut d) = b.in_deriv {
            d.copy_from(b.out_deriv);
            d.mul_mat_div_mat(b.out_value, b.in_value);
        }
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        b.deriv.mul_mat_div_mat(b.out_value, b.in_value);
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<Dim>", &self.dim),
            ("<DropoutProportion>", &self.dropout_proportion),
            ("<DropoutPerFrame>", &self.dropout_per_frame),
            ("<TestMode>", &self.test_mode),
        ]
    }
    fn info(&self) -> String {
        format!(
            "DropoutComponent, dim={}, dropout-proportion={}, dropout-per-frame={}",
            self.dim,
            fmt_g(self.dropout_proportion as f64, 6),
            self.dropout_per_frame
        )
    }
    test_mode_boilerplate!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    #[test]
    fn test_mode_scales_and_train_mode_masks() {
        let cfg = ConfigLine::parse_str("dim=3 dropout-proportion=0.25").expect("cfg");
        let mut c =
            DropoutComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).expect("init");
        let x = Matrix::from_rows(&vec![vec![1.0, -2.0, 4.0]; 50]);
        let mut y = Matrix::zeros(50, 3);
        c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        let v = y.to_vec();
        assert!(v.iter().zip(x.to_vec()).all(|(a, b)| *a == 0.0 || *a == b));
        let zeros = v.iter().filter(|a| **a == 0.0).count();
        assert!(zeros > 10 && zeros < 70, "{zeros} of 150 dropped");
        c.set_test_mode(true, &mut crate::random::seeded_rng(0));
        c.propagate(Propagate::new(
            x.view(),
            y.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        assert_eq!(y.row_to_vec(0), [0.75, -1.5, 3.0]);
    }
}
