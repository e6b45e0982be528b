//! How a gradient becomes a parameter change.
//!
//! An updatable component's backprop does not add to its `to_update` target by itself. For
//! each parameter block it hands the rows that make the gradient, (input rows X,
//! output-derivative rows Y), to the target's [`Update`], which decides what they become:
//!
//! - [`Update::Frozen`]: learning rate 0; no product is computed at all.
//! - [`Update::Plain`]: the gradient times the learning rate, e.g. W += lr·Yᵀ·X and
//!   b += lr·Σ rows of Y. Used for gradient holders (`is_gradient`, Kaldi's `UpdateSimple`),
//!   for components without natural gradient; natural-gradient components use [`natural_gradient::OnlineNaturalGradient`].
//! - [`Update::Preconditioned`]: natural-gradient SGD (facts §7.2): the rows of [X | 1] and
//!   of Y are preconditioned first, each side by its own [`Preconditioner`] with its own
//!   state, and the learning rate is multiplied by the two scale factors they return.
//!
//! The preconditioner state of a block ([`NaturalGradientState`]) lives in the `to_update`
//! component, i.e. in the delta network, as in Kaldi, and is never saved in model files.
//! [`NaturalGradientOptions`] is the one options type for every component's natural-gradient
//! fields.

pub mod natural_gradient;

use crate::matrix::{MatView, MatViewMut, Matrix, Trans, Vector};
use natural_gradient::{NgSnapshot, OnlineNaturalGradient};

/// What an update needs of its component's learning-rate settings (the component's
/// `UpdatableCommon` implements it).
pub trait RateSettings {
    /// The learning rate (0: frozen).
    fn learning_rate(&self) -> f32;
    /// The component holds a plain gradient (never preconditioned).
    fn is_gradient(&self) -> bool;
    /// The natural-gradient estimates are used but not updated.
    fn natural_gradient_frozen(&self) -> bool;
}

/// A row-wise preconditioner with its own state: Kaldi's `OnlineNaturalGradient`
/// (`gradient::natural_gradient`) is the one meant to implement it.
pub trait Preconditioner: Send + Sync + std::fmt::Debug {
    /// Preconditions the rows of `x` in place; returns the factor the learning rate is
    /// multiplied by (the rows keep the norm of the input, the factor carries the rest).
    fn precondition_directions(&mut self, x: MatViewMut<'_>) -> f32;
    /// While frozen the estimate is used but not updated (backstitch's first step).
    fn freeze(&mut self, frozen: bool);
    /// A copy with the same state (components are cloned with their delta network).
    fn clone_box(&self) -> Box<dyn Preconditioner>;
    /// The state as plain values, for `compnet fit`'s checkpoints (None: cannot be saved).
    fn snapshot(&self) -> Option<NgSnapshot> {
        None
    }
}

/// One preconditioner slot of a component (empty until its first update), as `compnet
/// fit`'s checkpoints save and restore it.
pub trait NgSlot {
    /// Ok(None): the slot is empty; Err: it holds a preconditioner that cannot be saved.
    fn save(&self) -> Result<Option<NgSnapshot>, String>;
    /// Puts back what `save` gave; false when the snapshot does not hold together.
    fn restore(&mut self, s: Option<NgSnapshot>) -> bool;
}

impl NgSlot for Option<Box<dyn Preconditioner>> {
    fn save(&self) -> Result<Option<NgSnapshot>, String> {
        match self {
            None => Ok(None),
            Some(p) => p
                .snapshot()
                .map(Some)
                .ok_or_else(|| format!("a preconditioner that cannot be saved: {p:?}")),
        }
    }
    fn restore(&mut self, s: Option<NgSnapshot>) -> bool {
        let Some(s) = s else {
            *self = None;
            return true;
        };
        match OnlineNaturalGradient::from_snapshot(s) {
            Some(p) => {
                *self = Some(Box::new(p));
                true
            }
            None => false,
        }
    }
}

impl NgSlot for Option<OnlineNaturalGradient> {
    fn save(&self) -> Result<Option<NgSnapshot>, String> {
        Ok(self.as_ref().map(|p| p.snapshot()))
    }
    fn restore(&mut self, s: Option<NgSnapshot>) -> bool {
        let Some(s) = s else {
            *self = None;
            return true;
        };
        *self = OnlineNaturalGradient::from_snapshot(s);
        self.is_some()
    }
}

/// A component's natural-gradient state(s): its slots in a fixed order.
pub trait NgSlots {
    fn ng_slots(&mut self) -> Vec<&mut dyn NgSlot>;
}

impl NgSlots for NaturalGradientState {
    fn ng_slots(&mut self) -> Vec<&mut dyn NgSlot> {
        vec![&mut self.input, &mut self.output]
    }
}

impl<const N: usize> NgSlots for [NaturalGradientState; N] {
    fn ng_slots(&mut self) -> Vec<&mut dyn NgSlot> {
        self.iter_mut().flat_map(|s| s.ng_slots()).collect()
    }
}

impl Clone for Box<dyn Preconditioner> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// Which rows a preconditioner sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The input rows X (with a column of ones appended when the block has a bias).
    Input,
    /// The output-derivative rows Y, or the per-frame gradient rows of a per-element block.
    Output,
}

/// The natural-gradient options of a component (Kaldi's three shapes in one type). Each
/// component reads and writes the subset its Kaldi config line and file carry, under Kaldi's
/// names; components that precondition one side only (per-element and constant ones) keep
/// their `rank` and `alpha` in the `_out` fields.
#[derive(Clone, Debug, PartialEq)]
pub struct NaturalGradientOptions {
    /// Kaldi's `use-natural-gradient` (always true for the `NaturalGradient*` types).
    pub use_natural_gradient: bool,
    /// Rank of the input-side Fisher estimate.
    pub rank_in: i32,
    /// Rank of the output-side Fisher estimate.
    pub rank_out: i32,
    /// Smoothing of the input-side estimate towards the unit matrix.
    pub alpha_in: f32,
    /// Smoothing of the output-side estimate towards the unit matrix.
    pub alpha_out: f32,
    /// Minibatches between updates of the Fisher estimates.
    pub update_period: i32,
    /// Time constant (in frames) of the Fisher estimates.
    pub num_samples_history: f32,
}

impl NaturalGradientOptions {
    /// Options with the same rank and alpha on both sides.
    pub fn symmetric(rank: i32, alpha: f32, update_period: i32, num_samples_history: f32) -> Self {
        NaturalGradientOptions {
            use_natural_gradient: true,
            rank_in: rank,
            rank_out: rank,
            alpha_in: alpha,
            alpha_out: alpha,
            update_period,
            num_samples_history,
        }
    }

    /// Kaldi's defaults for an input-dim → output-dim weight block: rank-in
    /// min(20, (in+1)/2), rank-out min(80, (out+1)/2), alpha 4, update-period 4,
    /// num-samples-history 2000.
    pub fn for_weights(input_dim: usize, output_dim: usize) -> Self {
        NaturalGradientOptions {
            rank_in: 20.min((input_dim as i32 + 1) / 2),
            rank_out: 80.min((output_dim as i32 + 1) / 2),
            ..Self::symmetric(0, 4.0, 4, 2000.0)
        }
    }

    /// The options of a per-element or constant block whose Kaldi config and file carry no
    /// rank or alpha (only `use-natural-gradient`); the preconditioner sees its per-frame
    /// gradient rows.
    pub fn per_element(use_natural_gradient: bool) -> Self {
        NaturalGradientOptions {
            use_natural_gradient,
            ..Self::symmetric(20, 4.0, 4, 2000.0)
        }
    }

    /// Checks the values a config line gave (Kaldi's asserts, as an error message).
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.rank_in <= 0 || self.rank_out <= 0 || self.update_period <= 0 {
            return Err("natural-gradient rank and update-period must be positive");
        }
        if self.num_samples_history <= 0.0 || self.alpha_in < 0.0 || self.alpha_out < 0.0 {
            return Err("num-samples-history must be > 0 and alpha >= 0");
        }
        Ok(())
    }

    /// A new preconditioner for one side of a block: Kaldi's `OnlineNaturalGradient` with the
    /// side's rank and alpha.
    pub fn new_preconditioner(&self, side: Side) -> Option<Box<dyn Preconditioner>> {
        let (rank, alpha) = match side {
            Side::Input => (self.rank_in, self.alpha_in),
            Side::Output => (self.rank_out, self.alpha_out),
        };
        Some(Box::new(OnlineNaturalGradient::new(
            rank.max(1) as usize,
            self.update_period.max(1) as usize,
            self.num_samples_history,
            alpha,
        )))
    }
}

impl Preconditioner for OnlineNaturalGradient {
    fn precondition_directions(&mut self, x: MatViewMut<'_>) -> f32 {
        OnlineNaturalGradient::precondition_directions(self, x)
    }
    fn freeze(&mut self, frozen: bool) {
        OnlineNaturalGradient::freeze(self, frozen)
    }
    fn clone_box(&self) -> Box<dyn Preconditioner> {
        Box::new(self.clone())
    }
    fn snapshot(&self) -> Option<NgSnapshot> {
        Some(OnlineNaturalGradient::snapshot(self))
    }
}

/// The natural-gradient state of one parameter block: one preconditioner per side, created
/// on the first update. Not saved in model files.
#[derive(Clone, Debug, Default)]
pub struct NaturalGradientState {
    input: Option<Box<dyn Preconditioner>>,
    output: Option<Box<dyn Preconditioner>>,
    /// Applies to the preconditioners made later too.
    frozen: bool,
    /// The copies of the two sides that get preconditioned, kept between minibatches so that
    /// a block of fixed shape allocates (and zero-fills) them once.
    scratch: Scratch,
}

/// Working copies of [X | 1] and Y. Their contents never outlive a call, so a clone starts
/// empty.
#[derive(Debug, Default)]
struct Scratch {
    input: Matrix,
    output: Matrix,
}

impl Clone for Scratch {
    fn clone(&self) -> Self {
        Scratch::default()
    }
}

impl NaturalGradientState {
    /// Freezes or unfreezes both sides (Kaldi's `FreezeNaturalGradient`).
    pub fn freeze(&mut self, frozen: bool) {
        self.frozen = frozen;
        for p in [&mut self.input, &mut self.output].into_iter().flatten() {
            p.freeze(frozen);
        }
    }

    /// Creates the missing preconditioners (`input` only when the block has input rows);
    /// false when none can be made, i.e. nothing is plugged in.
    fn ensure(&mut self, options: &NaturalGradientOptions, input: bool) -> bool {
        if self.output.is_none() {
            self.output = options.new_preconditioner(Side::Output);
            self.freeze(self.frozen);
        }
        if input && self.input.is_none() {
            self.input = options.new_preconditioner(Side::Input);
            self.freeze(self.frozen);
        }
        self.output.is_some() && (!input || self.input.is_some())
    }
}

/// Runs `p` on `x` if there is one; no preconditioner is the identity with factor 1.
fn precondition(p: &mut Option<Box<dyn Preconditioner>>, x: MatViewMut<'_>) -> f32 {
    p.as_mut().map_or(1.0, |p| p.precondition_directions(x))
}

/// What one backprop does with the gradient rows of a `to_update` component.
pub enum Update<'a> {
    /// Learning rate 0: nothing to add.
    Frozen,
    /// Add `learning_rate` × the gradient.
    Plain { learning_rate: f32 },
    /// Precondition the rows first (natural gradient).
    Preconditioned {
        learning_rate: f32,
        state: &'a mut NaturalGradientState,
    },
}

impl<'a> Update<'a> {
    /// The update for a target with learning-rate options `common` and, if the component
    /// has natural-gradient options, those and the block's state. `input_side`: whether the
    /// block has input rows to precondition (weight blocks) or only gradient rows
    /// (per-element blocks).
    pub fn new(
        common: &impl RateSettings,
        natural_gradient: Option<(&NaturalGradientOptions, &'a mut NaturalGradientState)>,
        input_side: bool,
    ) -> Self {
        let learning_rate = common.learning_rate();
        if learning_rate == 0.0 {
            return Update::Frozen;
        }
        match natural_gradient {
            Some((options, state)) if options.use_natural_gradient && !common.is_gradient() => {
                state.freeze(common.natural_gradient_frozen());
                if state.ensure(options, input_side) {
                    Update::Preconditioned {
                        learning_rate,
                        state,
                    }
                } else {
                    Update::Plain { learning_rate }
                }
            }
            _ => Update::Plain { learning_rate },
        }
    }

    /// W += lr·Yᵀ·X and, with `bias`, b += lr·Σ rows of Y, for X = `in_rows` (N×D),
    /// Y = `out_deriv` (N×O), W (O×D). Preconditioned: X gets a column of ones for the bias
    /// (so weights and bias share the input-side estimate) before both sides are
    /// preconditioned.
    pub fn weight_block(
        &mut self,
        mut linear: MatViewMut<'_>,
        bias: Option<&mut Vector>,
        in_rows: MatView<'_>,
        out_deriv: MatView<'_>,
    ) {
        match self {
            Update::Frozen => {}
            Update::Plain { learning_rate } => {
                let lr = *learning_rate;
                linear.add_mat_mat(lr, out_deriv, Trans::Yes, in_rows, Trans::No, 1.0);
                if let Some(b) = bias {
                    b.add_row_sum_mat(lr, out_deriv, 1.0);
                }
            }
            Update::Preconditioned {
                learning_rate,
                state,
            } => {
                let (n, d) = (in_rows.num_rows(), in_rows.num_cols());
                let with_bias = bias.is_some();
                let Scratch {
                    input: x,
                    output: y,
                } = &mut state.scratch;
                // Every element is written below, so the old contents do not matter.
                x.resize_undefined(n, d + usize::from(with_bias));
                x.sub_mut(0, n, 0, d).copy_from(in_rows);
                if with_bias {
                    x.sub_mut(0, n, d, 1).set_const(1.0);
                }
                y.resize_undefined(out_deriv.num_rows(), out_deriv.num_cols());
                y.view_mut().copy_from(out_deriv);
                let scale_in = precondition(&mut state.input, x.view_mut());
                let scale_out = precondition(&mut state.output, y.view_mut());
                let lr = *learning_rate * scale_in * scale_out;
                linear.add_mat_mat(lr, y.view(), Trans::Yes, x.sub(0, n, 0, d), Trans::No, 1.0);
                if let Some(b) = bias {
                    b.as_row_mut().add_mat_mat(
                        lr,
                        x.sub(0, n, d, 1),
                        Trans::Yes,
                        y.view(),
                        Trans::No,
                        1.0,
                    );
                }
            }
        }
    }

    /// v += lr·Σ rows of Y, with Y = `out_deriv` read as column blocks of width `v.dim()`
    /// (an offset shared by every block). Preconditioned: the blocks become rows of their
    /// own.
    pub fn offset_block(&mut self, v: &mut Vector, out_deriv: MatView<'_>) {
        self.per_element_block(v, out_deriv, |y, v, lr| v.add_row_sum_mat(lr, y, 1.0));
    }

    /// v += lr·Σ rows of X ⊙ Y (a per-element scale shared by every column block of width
    /// `v.dim()`). Preconditioned: the per-frame gradient rows X ⊙ Y are.
    pub fn scale_block(&mut self, v: &mut Vector, in_rows: MatView<'_>, out_deriv: MatView<'_>) {
        let b = v.dim();
        match self {
            Update::Frozen => {}
            Update::Plain { learning_rate } => {
                if b == 0 {
                    return;
                }
                for k in 0..in_rows.num_cols() / b {
                    v.add_diag_mat_mat(
                        *learning_rate,
                        in_rows.cols_range(k * b, b),
                        Trans::Yes,
                        out_deriv.cols_range(k * b, b),
                        Trans::No,
                        1.0,
                    );
                }
            }
            Update::Preconditioned { .. } => {
                let mut g = in_rows.to_matrix();
                g.view_mut().mul_elements(out_deriv);
                self.offset_block(v, g.view());
            }
        }
    }

    /// target += lr · G for a gradient G already summed over the minibatch (LSTM peepholes):
    /// preconditioned, G's rows are (the output side only) and the factor scales lr.
    pub fn rows_block(&mut self, mut target: MatViewMut<'_>, mut grad: Matrix) {
        match self {
            Update::Frozen => {}
            Update::Plain { learning_rate } => {
                target.add_mat(*learning_rate, grad.view(), Trans::No);
            }
            Update::Preconditioned {
                learning_rate,
                state,
            } => {
                let scale = precondition(&mut state.output, grad.view_mut());
                target.add_mat(*learning_rate * scale, grad.view(), Trans::No);
            }
        }
    }

    /// The shared shape of per-element blocks: plain = `plain` per column block;
    /// preconditioned = the blocks stacked as rows, preconditioned, then summed.
    fn per_element_block(
        &mut self,
        v: &mut Vector,
        rows: MatView<'_>,
        plain: impl Fn(MatView<'_>, &mut Vector, f32),
    ) {
        let b = v.dim();
        if b == 0 {
            return;
        }
        let blocks = rows.num_cols() / b;
        match self {
            Update::Frozen => {}
            Update::Plain { learning_rate } => {
                for k in 0..blocks {
                    plain(rows.cols_range(k * b, b), v, *learning_rate);
                }
            }
            Update::Preconditioned {
                learning_rate,
                state,
            } => {
                let n = rows.num_rows();
                let mut g = Matrix::zeros(n * blocks, b);
                for k in 0..blocks {
                    g.sub_mut(k * n, n, 0, b)
                        .copy_from(rows.cols_range(k * b, b));
                }
                let scale = precondition(&mut state.output, g.view_mut());
                v.add_row_sum_mat(*learning_rate * scale, g.view(), 1.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preconditioner that multiplies every row by `factor` and returns `scale`; it counts
    /// its calls. Test-only: it checks the plumbing, not natural gradient.
    #[derive(Clone, Debug)]
    struct Scaling {
        factor: f32,
        scale: f32,
    }
    impl Preconditioner for Scaling {
        fn precondition_directions(&mut self, mut x: MatViewMut<'_>) -> f32 {
            x.scale(self.factor);
            self.scale
        }
        fn freeze(&mut self, _frozen: bool) {}
        fn clone_box(&self) -> Box<dyn Preconditioner> {
            Box::new(self.clone())
        }
    }

    fn state(input: f32, output: f32) -> NaturalGradientState {
        NaturalGradientState {
            input: Some(Box::new(Scaling {
                factor: input,
                scale: 1.0 / input,
            })),
            output: Some(Box::new(Scaling {
                factor: output,
                scale: 1.0 / output,
            })),
            frozen: false,
            scratch: Scratch::default(),
        }
    }

    fn m(rows: usize, cols: usize, v: &[f32]) -> Matrix {
        Matrix::from_vec(rows, cols, v.to_vec())
    }

    #[test]
    fn plain_weight_block_is_the_scaled_gradient_and_frozen_adds_nothing() {
        let x = m(2, 2, &[1.0, 2.0, 3.0, 4.0]);
        let y = m(2, 1, &[1.0, 10.0]);
        let (mut w, mut b) = (Matrix::zeros(1, 2), Vector::zeros(1));
        let mut u = Update::Plain { learning_rate: 0.5 };
        u.weight_block(w.view_mut(), Some(&mut b), x.view(), y.view());
        // Yᵀ X = [31, 42], Σ Y = 11; times 0.5.
        assert_eq!(w.to_vec(), vec![15.5, 21.0]);
        assert_eq!(b.to_vec(), vec![5.5]);
        Update::Frozen.weight_block(w.view_mut(), Some(&mut b), x.view(), y.view());
        assert_eq!((w.to_vec(), b.to_vec()), (vec![15.5, 21.0], vec![5.5]));
    }

    /// Rows scaled by 2 (input) and 3 (output) with factors 1/2 and 1/3: the change must
    /// equal the plain one, bias included, so the ones column, the two sides and the factors
    /// are all wired right.
    #[test]
    fn preconditioned_weight_block_applies_both_sides_and_their_factors() {
        let x = m(3, 2, &[1.0, -2.0, 0.5, 4.0, 3.0, 1.0]);
        let y = m(3, 2, &[1.0, 2.0, -1.0, 0.5, 0.25, 3.0]);
        let (mut w0, mut b0) = (Matrix::zeros(2, 2), Vector::zeros(2));
        Update::Plain { learning_rate: 0.1 }.weight_block(
            w0.view_mut(),
            Some(&mut b0),
            x.view(),
            y.view(),
        );
        let mut s = state(2.0, 3.0);
        let (mut w1, mut b1) = (Matrix::zeros(2, 2), Vector::zeros(2));
        Update::Preconditioned {
            learning_rate: 0.1,
            state: &mut s,
        }
        .weight_block(w1.view_mut(), Some(&mut b1), x.view(), y.view());
        for (a, b) in w0
            .to_vec()
            .iter()
            .zip(w1.to_vec())
            .chain(b0.to_vec().iter().zip(b1.to_vec()))
        {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        // A preconditioner that changes direction changes the result.
        let mut s = state(2.0, 3.0);
        s.input = Some(Box::new(Scaling {
            factor: 2.0,
            scale: 1.0,
        }));
        let (mut w2, mut b2) = (Matrix::zeros(2, 2), Vector::zeros(2));
        Update::Preconditioned {
            learning_rate: 0.1,
            state: &mut s,
        }
        .weight_block(w2.view_mut(), Some(&mut b2), x.view(), y.view());
        assert!((w2.get(0, 0) - 2.0 * w0.get(0, 0)).abs() < 1e-6);
        assert!((b2.to_vec()[1] - 2.0 * b0.to_vec()[1]).abs() < 1e-6);
    }

    #[test]
    fn per_element_blocks_agree_plain_and_preconditioned() {
        // Two column blocks of width 2 share one parameter vector.
        let x = m(2, 4, &[1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, -3.0]);
        let y = m(2, 4, &[0.5, 1.0, -2.0, 1.0, 3.0, 2.0, 1.0, 0.25]);
        for scale in [false, true] {
            let run = |u: &mut Update<'_>| {
                let mut v = Vector::zeros(2);
                if scale {
                    u.scale_block(&mut v, x.view(), y.view());
                } else {
                    u.offset_block(&mut v, y.view());
                }
                v.to_vec()
            };
            let plain = run(&mut Update::Plain { learning_rate: 0.5 });
            let mut s = state(5.0, 4.0);
            let pre = run(&mut Update::Preconditioned {
                learning_rate: 0.5,
                state: &mut s,
            });
            let want: Vec<f32> = if scale {
                // Σ over rows and blocks of x ⊙ y, times 0.5.
                vec![
                    0.5 * (0.5 - 6.0 - 3.0 + 2.0),
                    0.5 * (2.0 + 4.0 + 1.0 - 0.75),
                ]
            } else {
                vec![
                    0.5 * (0.5 - 2.0 + 3.0 + 1.0),
                    0.5 * (1.0 + 1.0 + 2.0 + 0.25),
                ]
            };
            for ((p, q), w) in plain.iter().zip(&pre).zip(&want) {
                assert!((p - w).abs() < 1e-6 && (q - w).abs() < 1e-5, "{p} {q} {w}");
            }
        }
    }

    #[test]
    fn the_choice_follows_learning_rate_gradient_flag_and_the_slot() {
        let options = NaturalGradientOptions::for_weights(10, 4);
        let mut st = NaturalGradientState::default();
        let mut common = crate::nnet::component::UpdatableCommon::default();
        let kind = |u: Update<'_>| match u {
            Update::Frozen => "frozen",
            Update::Plain { .. } => "plain",
            Update::Preconditioned { .. } => "preconditioned",
        };
        // The slot holds OnlineNaturalGradient: natural-gradient blocks are preconditioned.
        assert_eq!(
            kind(Update::new(&common, Some((&options, &mut st)), true)),
            "preconditioned"
        );
        // Without natural gradient they update plainly.
        let plain_options = NaturalGradientOptions {
            use_natural_gradient: false,
            ..options.clone()
        };
        assert_eq!(
            kind(Update::new(&common, Some((&plain_options, &mut st)), true)),
            "plain"
        );
        let mut st = state(1.0, 1.0);
        assert_eq!(
            kind(Update::new(&common, Some((&options, &mut st)), true)),
            "preconditioned"
        );
        common.is_gradient = true;
        assert_eq!(
            kind(Update::new(&common, Some((&options, &mut st)), true)),
            "plain"
        );
        common.learning_rate = 0.0;
        assert_eq!(
            kind(Update::new(&common, Some((&options, &mut st)), true)),
            "frozen"
        );
        let off = NaturalGradientOptions {
            use_natural_gradient: false,
            ..options
        };
        let common = crate::nnet::component::UpdatableCommon::default();
        assert_eq!(
            kind(Update::new(&common, Some((&off, &mut st)), true)),
            "plain"
        );
    }
}
