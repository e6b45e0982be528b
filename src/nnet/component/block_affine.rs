//! Affine transforms with block structure: `BlockAffineComponent` (block-diagonal W, each
//! block its own parameters), `RepeatedAffineComponent` and
//! `NaturalGradientRepeatedAffineComponent` (one small affine applied to each of num-repeats
//! consecutive input blocks; the NG kind differs only in its training update).

use super::info_summary;
use super::kaldi_fields::{self, write_updatable};
use super::param_init::{self, RandomInit};
use super::param_ops::{self, updatable_boilerplate};
use super::{
    update_target, Backprop, Component, Description, Memo, Propagate, Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::Update;
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, MatViewMut, Matrix, Trans, Vector};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const BLOCK: &str = "BlockAffineComponent";
const REPEATED: &str = "RepeatedAffineComponent";
const NG_REPEATED: &str = "NaturalGradientRepeatedAffineComponent";

/// Reads input-dim, output-dim and the block count `key`, checking divisibility.
fn block_dims(cfg: &ConfigLine, key: &str) -> Result<(usize, usize, usize)> {
    let in_dim = param_init::require_positive(cfg, "input-dim")?;
    let out_dim = param_init::require_positive(cfg, "output-dim")?;
    let n = param_init::require_positive(cfg, key)?;
    if in_dim % n != 0 || out_dim % n != 0 {
        return Err(cfg.error_at_value(
            key,
            format!("{key}={n} must divide input-dim={in_dim} and output-dim={out_dim}"),
        ));
    }
    Ok((in_dim, out_dim, n))
}

/// Random W (rows × cols) and b (rows) with Kaldi's options; `bias_stddev` is the default.
fn random_params(
    cfg: &ConfigLine,
    rows: usize,
    cols: usize,
    bias_stddev: f32,
    init_rng: &mut dyn RngCore,
) -> Result<(Matrix, Vector)> {
    let init = RandomInit::from_config(cfg, cols, bias_stddev, true)?;
    let linear = init.weights(rows, cols, init_rng);
    Ok((linear, init.bias(rows, init_rng)))
}

/// Reads `<Count> i32 <LinearParams> M <BiasParams> V` with consistent dimensions.
fn read_counted_params(
    r: &mut TokenReader<'_>,
    count_token: &str,
    rows_multiple: bool,
) -> Result<(usize, Matrix, Vector)> {
    r.expect_token(count_token)?;
    let n = kaldi_fields::read_positive_i32(r, count_token)?;
    r.expect_token("<LinearParams>")?;
    let at = r.pos();
    let linear = r.matrix()?;
    if linear.num_rows() == 0
        || linear.num_cols() == 0
        || (rows_multiple && linear.num_rows() % n != 0)
    {
        return Err(r.err_at(
            at,
            format!("a non-empty linear matrix (rows a multiple of {n})"),
        ));
    }
    r.expect_token("<BiasParams>")?;
    let at = r.pos();
    let bias = r.vector()?;
    if bias.dim() != linear.num_rows() {
        return Err(r.err_at(at, format!("a bias of dimension {}", linear.num_rows())));
    }
    Ok((n, linear, bias))
}

/// Writes the component with its count field (`<NumBlocks>` or `<NumRepeats>`), W and b: the
/// layout [`read_counted_params`] reads.
fn write_counted_params(
    w: &mut TokenWriter,
    type_name: &str,
    common: &UpdatableCommon,
    count_token: &str,
    n: usize,
    linear: &Matrix,
    bias: &Vector,
) {
    write_updatable(
        w,
        type_name,
        common,
        &[
            (count_token, &n),
            ("<LinearParams>", linear),
            ("<BiasParams>", bias),
        ],
    );
}

/// `BlockAffineComponent`: W is block-diagonal with num-blocks equal blocks, stored stacked
/// vertically (output-dim × input-dim/num-blocks).
#[derive(Clone, Debug)]
pub struct BlockAffineComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// The blocks stacked vertically: block k is rows [k·ob, (k+1)·ob).
    pub linear: Matrix,
    /// b, one value per row of W.
    pub bias: Vector,
    /// Number of diagonal blocks.
    pub num_blocks: usize,
}

impl BlockAffineComponent {
    /// Kaldi's BlockAffineComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let (in_dim, out_dim, n) = block_dims(cfg, "num-blocks")?;
        let (linear, bias) = random_params(cfg, out_dim, in_dim / n, 1.0, init_rng)?;
        Ok(Box::new(BlockAffineComponent {
            common,
            linear,
            bias,
            num_blocks: n,
        }))
    }

    /// Reads a BlockAffineComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, BLOCK)?;
        let (num_blocks, linear, bias) = read_counted_params(r, "<NumBlocks>", true)?;
        kaldi_fields::expect_closing(r, BLOCK)?;
        Ok(Box::new(BlockAffineComponent {
            common,
            linear,
            bias,
            num_blocks,
        }))
    }

    fn block_sizes(&self) -> (usize, usize) {
        (
            self.linear.num_cols(),
            self.linear.num_rows() / self.num_blocks,
        )
    }
}

impl Component for BlockAffineComponent {
    fn describe(&self) -> Description {
        Description::new(
            BLOCK,
            self.linear.num_cols() * self.num_blocks,
            self.linear.num_rows(),
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_ADDS,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let (ib, ob) = self.block_sizes();
        for k in 0..self.num_blocks {
            let w = self.linear.sub(k * ob, ob, 0, ib);
            p.output.cols_range_mut(k * ob, ob).add_mat_mat(
                1.0,
                p.input.cols_range(k * ib, ib),
                Trans::No,
                w,
                Trans::Yes,
                0.0,
            );
        }
        p.output.add_vec_to_rows(1.0, &self.bias, 1.0);
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        let (ib, ob) = self.block_sizes();
        if let Some(u) = update_target::<BlockAffineComponent>(b.to_update) {
            let mut update = Update::new(&u.common, None, true);
            for k in 0..self.num_blocks {
                update.weight_block(
                    u.linear.sub_mut(k * ob, ob, 0, ib),
                    None,
                    b.in_value.cols_range(k * ib, ib),
                    b.out_deriv.cols_range(k * ob, ob),
                );
            }
            update.offset_block(&mut u.bias, b.out_deriv);
        }
        if let Some(mut d) = b.in_deriv {
            for k in 0..self.num_blocks {
                let w = self.linear.sub(k * ob, ob, 0, ib);
                d.cols_range_mut(k * ib, ib).add_mat_mat(
                    1.0,
                    b.out_deriv.cols_range(k * ob, ob),
                    Trans::No,
                    w,
                    Trans::No,
                    1.0,
                );
            }
        }
    }
    fn write(&self, w: &mut TokenWriter) {
        let (ty, n) = (BLOCK, self.num_blocks);
        write_counted_params(
            w,
            ty,
            &self.common,
            "<NumBlocks>",
            n,
            &self.linear,
            &self.bias,
        );
    }
    fn info(&self) -> String {
        format!(
            "{}, num-blocks={}, {}, {}",
            info_summary::updatable_header(self, &self.common),
            self.num_blocks,
            info_summary::matrix_stats("linear-params", &self.linear, false),
            info_summary::vector_stats("bias", &self.bias)
        )
    }
    updatable_boilerplate!();
}

param_ops::linear_bias_updatable!(BlockAffineComponent);

impl BlockAffineComponent {
    /// The block-affine form of a repeated affine (Kaldi's `BlockAffineComponent` constructor
    /// from a `RepeatedAffineComponent`): num-repeats blocks, each a copy of W and b, with
    /// the same learning-rate options.
    pub fn from_repeated(r: &RepeatedAffineComponent) -> Self {
        let (rows, cols) = (r.linear.num_rows(), r.linear.num_cols());
        let mut linear = Matrix::zeros(rows * r.num_repeats, cols);
        let mut bias = Vec::with_capacity(rows * r.num_repeats);
        let b = r.bias.to_vec();
        for k in 0..r.num_repeats {
            linear
                .view_mut()
                .rows_range_mut(k * rows, rows)
                .copy_from(r.linear.view());
            bias.extend_from_slice(&b);
        }
        BlockAffineComponent {
            common: r.common.clone(),
            linear,
            bias: Vector::from_vec(bias),
            num_blocks: r.num_repeats,
        }
    }
}

/// Kaldi's `ConvertRepeatedToBlockAffine`: every `RepeatedAffineComponent` and
/// `NaturalGradientRepeatedAffineComponent` of `components` (and of the chain of each
/// `CompositeComponent` among them) becomes the equivalent `BlockAffineComponent`; returns
/// how many were converted.
pub fn convert_repeated_to_block(components: &mut [Box<dyn Component>]) -> usize {
    let mut n = 0;
    for c in components.iter_mut() {
        if let Some(r) = c.as_any().downcast_ref::<RepeatedAffineComponent>() {
            *c = Box::new(BlockAffineComponent::from_repeated(r));
            n += 1;
        } else if let Some(cc) = c
            .as_any_mut()
            .downcast_mut::<super::composite::CompositeComponent>()
        {
            n += convert_repeated_to_block(&mut cc.components);
        }
    }
    n
}

/// `RepeatedAffineComponent` or (with `natural_gradient`)
/// `NaturalGradientRepeatedAffineComponent`: the same affine (W, b) applied to each of
/// num-repeats consecutive blocks of the input.
#[derive(Clone, Debug)]
pub struct RepeatedAffineComponent {
    /// Learning-rate options.
    pub common: UpdatableCommon,
    /// W, (output-dim/num-repeats) × (input-dim/num-repeats).
    pub linear: Matrix,
    /// b, one value per row of W.
    pub bias: Vector,
    /// Number of input blocks the affine is applied to.
    pub num_repeats: usize,
    /// True for `NaturalGradientRepeatedAffineComponent`.
    pub natural_gradient: bool,
    /// Its preconditioner, when this is the `to_update` side (never saved).
    pub ng_state: crate::gradient::NaturalGradientState,
}

impl RepeatedAffineComponent {
    /// InitFromConfig of RepeatedAffineComponent or (with `natural_gradient`) its NG kind (the
    /// same options).
    pub fn from_config_kind(
        cfg: &ConfigLine,
        init_rng: &mut dyn RngCore,
        natural_gradient: bool,
    ) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let (in_dim, out_dim, n) = block_dims(cfg, "num-repeats")?;
        // Kaldi initialises this component's bias to zero unless bias-stddev is given.
        let (linear, bias) = random_params(cfg, out_dim / n, in_dim / n, 0.0, init_rng)?;
        Ok(Box::new(RepeatedAffineComponent {
            common,
            linear,
            bias,
            num_repeats: n,
            natural_gradient,
            ng_state: Default::default(),
        }))
    }

    /// Adds out_deriv · W block by block to `in_deriv`, if given.
    fn input_deriv(&self, out_deriv: MatView<'_>, in_deriv: Option<MatViewMut<'_>>) {
        let (ib, ob) = (self.linear.num_cols(), self.linear.num_rows());
        if let Some(mut d) = in_deriv {
            for k in 0..self.num_repeats {
                d.cols_range_mut(k * ib, ib).add_mat_mat(
                    1.0,
                    out_deriv.cols_range(k * ob, ob),
                    Trans::No,
                    self.linear.view(),
                    Trans::No,
                    1.0,
                );
            }
        }
    }

    /// The natural-gradient kind's update (as Kaldi's): the gradient [∂W ∂b] summed over all
    /// rows and repeats is formed first, and *its* rows (one per output unit, block-in + 1
    /// columns) go through one preconditioner of rank min(40, block-in / 2), update period 4.
    fn natural_gradient_update(&mut self, in_value: MatView<'_>, out_deriv: MatView<'_>, n: usize) {
        let (ib, ob) = (self.linear.num_cols(), self.linear.num_rows());
        let mut grad = Matrix::zeros(ob, ib + 1);
        for k in 0..n {
            let (x, y) = (
                in_value.cols_range(k * ib, ib),
                out_deriv.cols_range(k * ob, ob),
            );
            grad.sub_mut(0, ob, 0, ib)
                .add_mat_mat(1.0, y, Trans::Yes, x, Trans::No, 1.0);
            let mut bias = Vector::zeros(ob);
            bias.add_row_sum_mat(1.0, y, 0.0);
            let mut col = grad.sub_mut(0, ob, ib, 1);
            col.add_mat(1.0, bias.as_mat(ob, 1), Trans::No);
        }
        let rank = 40.min(ib as i32 / 2).max(1);
        let options = crate::gradient::NaturalGradientOptions::symmetric(rank, 4.0, 4, 2000.0);
        let mut step = Matrix::zeros(ob, ib + 1);
        Update::new(&self.common, Some((&options, &mut self.ng_state)), false)
            .rows_block(step.view_mut(), grad);
        self.linear
            .view_mut()
            .add_mat(1.0, step.sub(0, ob, 0, ib), Trans::No);
        self.bias
            .as_row_mut()
            .add_mat(1.0, step.sub(0, ob, ib, 1), Trans::Yes);
    }

    /// Kaldi's RepeatedAffineComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        Self::from_config_kind(cfg, init_rng, false)
    }

    /// Reads a RepeatedAffineComponent or (with `natural_gradient`) NG kind body.
    pub fn read_kind(
        r: &mut TokenReader<'_>,
        natural_gradient: bool,
    ) -> Result<Box<dyn Component>> {
        let ty = if natural_gradient {
            NG_REPEATED
        } else {
            REPEATED
        };
        let common = UpdatableCommon::read(r, ty)?;
        let (num_repeats, linear, bias) = read_counted_params(r, "<NumRepeats>", false)?;
        kaldi_fields::expect_closing(r, ty)?;
        Ok(Box::new(RepeatedAffineComponent {
            common,
            linear,
            bias,
            num_repeats,
            natural_gradient,
            ng_state: Default::default(),
        }))
    }

    /// Reads a RepeatedAffineComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        Self::read_kind(r, false)
    }
}

impl Component for RepeatedAffineComponent {
    fn describe(&self) -> Description {
        Description::new(
            if self.natural_gradient {
                NG_REPEATED
            } else {
                REPEATED
            },
            self.linear.num_cols() * self.num_repeats,
            self.linear.num_rows() * self.num_repeats,
            Properties::SIMPLE
                | Properties::UPDATABLE
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::BACKPROP_ADDS
                | Properties::INPUT_CONTIGUOUS
                | Properties::OUTPUT_CONTIGUOUS,
        )
    }
    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let (ib, ob) = (self.linear.num_cols(), self.linear.num_rows());
        for k in 0..self.num_repeats {
            let mut o = p.output.cols_range_mut(k * ob, ob);
            o.add_mat_mat(
                1.0,
                p.input.cols_range(k * ib, ib),
                Trans::No,
                self.linear.view(),
                Trans::Yes,
                0.0,
            );
            o.add_vec_to_rows(1.0, &self.bias, 1.0);
        }
        None
    }
    fn backprop(&self, b: Backprop<'_>) {
        let (ib, ob) = (self.linear.num_cols(), self.linear.num_rows());
        if let Some(u) = update_target::<RepeatedAffineComponent>(b.to_update) {
            if u.natural_gradient {
                u.natural_gradient_update(b.in_value, b.out_deriv, self.num_repeats);
                return self.input_deriv(b.out_deriv, b.in_deriv);
            }
            let mut update = Update::new(&u.common, None, true);
            for k in 0..self.num_repeats {
                update.weight_block(
                    u.linear.view_mut(),
                    Some(&mut u.bias),
                    b.in_value.cols_range(k * ib, ib),
                    b.out_deriv.cols_range(k * ob, ob),
                );
            }
        }
        self.input_deriv(b.out_deriv, b.in_deriv);
    }
    fn write(&self, w: &mut TokenWriter) {
        let (ty, n) = (self.type_name(), self.num_repeats);
        write_counted_params(
            w,
            ty,
            &self.common,
            "<NumRepeats>",
            n,
            &self.linear,
            &self.bias,
        );
    }
    fn info(&self) -> String {
        format!(
            "{}, num-repeats={}, {}, {}",
            info_summary::updatable_header(self, &self.common),
            self.num_repeats,
            info_summary::matrix_stats("linear-params", &self.linear, false),
            info_summary::vector_stats("bias", &self.bias)
        )
    }
    updatable_boilerplate!();
}

param_ops::linear_bias_updatable!(RepeatedAffineComponent, ng);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::golden::{check_golden_info, round_trip_golden};

    #[test]
    fn golden_block_and_repeated_round_trip_and_info() {
        for name in ["block1", "rep1"] {
            if let Err(msg) = round_trip_golden("misc-components", name) {
                panic!("{msg}");
            }
            if let Err(msg) = check_golden_info("misc-components", name) {
                panic!("{msg}");
            }
        }
    }

    #[test]
    fn block_affine_equals_dense_block_diagonal() {
        // Independent reference: expand the blocks into a dense matrix and multiply.
        let cfg = ConfigLine::parse_str("input-dim=6 output-dim=4 num-blocks=2").unwrap();
        let c = BlockAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).unwrap();
        let b = c.as_any().downcast_ref::<BlockAffineComponent>().unwrap();
        let mut dense = Matrix::zeros(4, 6);
        for k in 0..2 {
            dense
                .sub_mut(k * 2, 2, k * 3, 3)
                .copy_from(b.linear.sub(k * 2, 2, 0, 3));
        }
        let x = {
            let r = &mut crate::random::seeded_rng(0);
            param_init::gaussian_matrix(3, 6, 0.0, 1.0, r)
        };
        let mut want = Matrix::zeros(3, 4);
        want.view_mut()
            .add_mat_mat(1.0, x.view(), Trans::No, dense.view(), Trans::Yes, 0.0);
        want.view_mut().add_vec_to_rows(1.0, &b.bias, 1.0);
        let mut got = Matrix::zeros(3, 4);
        c.propagate(Propagate::new(
            x.view(),
            got.view_mut(),
            &mut crate::random::seeded_rng(0),
        ));
        assert!(got.view().approx_equal(want.view(), 1e-6));
    }

    #[test]
    fn bad_block_counts_are_errors() {
        for line in [
            "input-dim=6 output-dim=4 num-blocks=4",
            "input-dim=6 output-dim=4 num-blocks=0",
            "input-dim=6 output-dim=4",
        ] {
            let cfg = ConfigLine::parse_str(line).unwrap();
            assert!(
                BlockAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).is_err(),
                "{line}"
            );
        }
        let cfg = ConfigLine::parse_str("input-dim=6 output-dim=5 num-repeats=3").unwrap();
        assert!(
            RepeatedAffineComponent::from_config(&cfg, &mut crate::random::seeded_rng(0)).is_err()
        );
    }
}
