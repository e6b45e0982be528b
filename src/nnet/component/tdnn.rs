//! `TdnnComponent`: splices its own input at fixed time offsets and applies an affine (or,
//! with `use-bias=false`, linear) map. The TDNN-F workhorse.
//!
//! Output Index (n, t, x) needs the inputs (n, t + o, x) for every offset o. Column block k of
//! `linear_params` multiplies the input at offset k. Propagate does one GEMM per offset on the
//! input rows for that offset, found at compile time (`precompute_indexes`): a contiguous row
//! block when possible (the usual case with t-major row order), a few contiguous runs, or a
//! gathered copy.

use super::info_summary;
use super::kaldi_fields::{self, read_field, read_opt_field, write_updatable};
use super::param_init::{self, RandomInit};
use super::param_ops::{self, updatable_boilerplate, updatable_common};
use super::{
    precomputed_or_default, update_target, Backprop, Component, Description, Memo,
    MiscComputationInfo, PrecomputedIndexes, Propagate, Properties, UpdatableCommon,
    UpdatableComponent,
};
use crate::error::Result;
use crate::gradient::{NaturalGradientOptions, NaturalGradientState, Update};
use crate::index::{Index, NO_TIME};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, Matrix, Trans, Vector, WeightMatrix};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use std::collections::HashMap;

const TDNN: &str = "TdnnComponent";

/// `TdnnComponent`.
#[derive(Clone, Debug)]
pub struct TdnnComponent {
    pub common: UpdatableCommon,
    /// Distinct time offsets (column block k of `linear_params` belongs to offset k).
    pub time_offsets: Vec<i32>,
    /// output-dim × (input-dim · #offsets).
    pub linear_params: WeightMatrix,
    /// Empty when the component has no bias.
    pub bias_params: Vector,
    /// Kaldi's orthonormal-constraint (0 = none); applied by the trainer.
    pub orthonormal_constraint: f32,
    /// use-natural-gradient, rank-in/out, alpha-in/out, num-samples-history.
    pub ng: NaturalGradientOptions,
    /// The preconditioners, when this is the `to_update` side of a natural-gradient update.
    pub ng_state: NaturalGradientState,
}

/// Kaldi's TdnnComponent has no update-period option; its preconditioners use this one.
const TDNN_NG_UPDATE_PERIOD: i32 = 4;

/// How the input rows of one time offset line up with the output rows.
#[derive(Clone, Debug, PartialEq)]
pub enum TdnnOffsetRows {
    /// Output row i uses input row `start + i`.
    Contiguous { start: usize },
    /// Runs `(out_start, in_start, len)`: output rows `out_start..+len` use input rows
    /// `in_start..+len`.
    Runs(Vec<(usize, usize, usize)>),
    /// Output row i uses input row `rows[i]` (−1: no such input; treated as zeros).
    Gather(Vec<i32>),
}

/// The precomputed row layout of one TdnnComponent step.
#[derive(Clone, Debug, PartialEq)]
pub struct TdnnPrecomputed {
    pub num_input_rows: usize,
    pub num_output_rows: usize,
    /// One entry per time offset.
    pub offsets: Vec<TdnnOffsetRows>,
}

impl PrecomputedIndexes for TdnnPrecomputed {}

/// Average run length from which separate GEMMs per run beat one gathered copy.
const MIN_AVG_RUN: usize = 16;

impl TdnnPrecomputed {
    /// Classifies a row map (output row → input row, −1 if missing).
    fn from_map(map: Vec<i32>) -> TdnnOffsetRows {
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        let mut missing = false;
        for (o, &i) in map.iter().enumerate() {
            if i < 0 {
                missing = true;
                break;
            }
            let i = i as usize;
            match runs.last_mut() {
                Some((os, is, len)) if *os + *len == o && *is + *len == i => *len += 1,
                _ => runs.push((o, i, 1)),
            }
        }
        if missing {
            return TdnnOffsetRows::Gather(map);
        }
        match &runs[..] {
            [] => TdnnOffsetRows::Contiguous { start: 0 },
            [(0, start, _)] => TdnnOffsetRows::Contiguous { start: *start },
            _ if map.len() >= MIN_AVG_RUN * runs.len() => TdnnOffsetRows::Runs(runs),
            _ => TdnnOffsetRows::Gather(map),
        }
    }

    /// The row layout for these Indexes: input and output in the order given.
    pub fn new(time_offsets: &[i32], input: &[Index], output: &[Index]) -> Self {
        let pos: HashMap<Index, i32> = input
            .iter()
            .enumerate()
            .filter(|(_, ix)| ix.t != NO_TIME)
            .map(|(i, ix)| (*ix, i as i32))
            .collect();
        let offsets = time_offsets
            .iter()
            .map(|&off| {
                let map = output
                    .iter()
                    .map(|o| {
                        if o.t == NO_TIME {
                            return -1;
                        }
                        let want = Index::new(o.n, o.t.wrapping_add(off), o.x);
                        pos.get(&want).copied().unwrap_or(-1)
                    })
                    .collect();
                Self::from_map(map)
            })
            .collect();
        TdnnPrecomputed {
            num_input_rows: input.len(),
            num_output_rows: output.len(),
            offsets,
        }
    }

    /// The layout assumed without precomputed indexes: one sequence of consecutive frames,
    /// input rows covering output frames widened by the offsets' span.
    fn default_layout(time_offsets: &[i32], num_in: usize, num_out: usize) -> Self {
        let min = time_offsets.iter().copied().min().unwrap_or(0);
        let offsets = time_offsets
            .iter()
            .map(|&off| {
                let map = (0..num_out)
                    .map(|i| {
                        let j = i as i64 + (off as i64 - min as i64);
                        if j >= 0 && (j as usize) < num_in {
                            j as i32
                        } else {
                            -1
                        }
                    })
                    .collect();
                Self::from_map(map)
            })
            .collect();
        TdnnPrecomputed {
            num_input_rows: num_in,
            num_output_rows: num_out,
            offsets,
        }
    }

    /// True if every row this layout names exists in matrices of these sizes.
    fn fits(&self, num_in: usize, num_out: usize) -> bool {
        self.num_input_rows == num_in
            && self.num_output_rows == num_out
            && self.offsets.iter().all(|o| match o {
                TdnnOffsetRows::Contiguous { start } => start + num_out <= num_in,
                TdnnOffsetRows::Runs(r) => r
                    .iter()
                    .all(|&(o, i, l)| o + l <= num_out && i + l <= num_in),
                TdnnOffsetRows::Gather(m) => {
                    m.len() == num_out && m.iter().all(|&i| i < num_in as i32)
                }
            })
    }
}

/// TdnnComponent's natural-gradient options: its ranks and alphas per side, Kaldi's fixed
/// update period.
fn tdnn_ng_options(
    use_natural_gradient: bool,
    (rank_in, rank_out): (i32, i32),
    (alpha_in, alpha_out): (f32, f32),
    num_samples_history: f32,
) -> NaturalGradientOptions {
    NaturalGradientOptions {
        use_natural_gradient,
        rank_in,
        rank_out,
        alpha_in,
        alpha_out,
        update_period: TDNN_NG_UPDATE_PERIOD,
        num_samples_history,
    }
}

impl TdnnComponent {
    /// Kaldi's TdnnComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let in_dim = param_init::require_positive(cfg, "input-dim")?;
        let out_dim = param_init::require_positive(cfg, "output-dim")?;
        let time_offsets: Vec<i32> = cfg.require("time-offsets")?;
        if !distinct_nonempty(&time_offsets) {
            return Err(cfg.error_at_value(
                "time-offsets",
                "time-offsets must be a non-empty list of distinct integers",
            ));
        }
        let n = time_offsets.len();
        let full_in = in_dim * n;
        let init = RandomInit::from_config(cfg, full_in, 1.0, true)?;
        let use_bias: bool = cfg.get_or("use-bias", true)?;
        let rank_in: i32 = cfg.get_or("rank-in", 20.min((full_in as i32 + 1) / 2))?;
        let rank_out: i32 = cfg.get_or("rank-out", 80.min((out_dim as i32 + 1) / 2))?;
        let alpha_in: f32 = cfg.get_or("alpha-in", 4.0)?;
        let alpha_out: f32 = cfg.get_or("alpha-out", 4.0)?;
        let num_samples_history: f32 = cfg.get_or("num-samples-history", 2000.0)?;
        if rank_in <= 0 || rank_out <= 0 || alpha_in <= 0.0 || alpha_out <= 0.0 {
            return Err(cfg.error("rank-in, rank-out, alpha-in and alpha-out must be positive"));
        }
        let linear_params = init.weights(out_dim, full_in, init_rng);
        let bias_params = if use_bias {
            init.bias(out_dim, init_rng)
        } else {
            Vector::zeros(0)
        };
        Ok(Box::new(TdnnComponent {
            common,
            time_offsets,
            linear_params: linear_params.into(),
            bias_params,
            orthonormal_constraint: cfg.get_or("orthonormal-constraint", 0.0f32)?,
            ng: tdnn_ng_options(
                cfg.get_or("use-natural-gradient", true)?,
                (rank_in, rank_out),
                (alpha_in, alpha_out),
                num_samples_history,
            ),
            ng_state: NaturalGradientState::default(),
        }))
    }

    /// Reads a TdnnComponent body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, TDNN)?;
        r.expect_token("<TimeOffsets>")?;
        let at = r.pos();
        let time_offsets = r.int_vec()?;
        if !distinct_nonempty(&time_offsets) {
            return Err(r.err_at(at, "a non-empty list of distinct time offsets"));
        }
        r.expect_token("<LinearParams>")?;
        let at = r.pos();
        let linear_params = r.matrix()?;
        if linear_params.num_rows() == 0
            || linear_params.num_cols() == 0
            || linear_params.num_cols() % time_offsets.len() != 0
        {
            return Err(r.err_at(
                at,
                format!(
                    "a non-empty parameter matrix whose column count is a multiple of {} (the number of time offsets)",
                    time_offsets.len()
                ),
            ));
        }
        r.expect_token("<BiasParams>")?;
        let at = r.pos();
        let bias_params = r.vector()?;
        if bias_params.dim() != 0 && bias_params.dim() != linear_params.num_rows() {
            return Err(r.err_at(
                at,
                format!(
                    "a bias vector of dimension 0 or {}",
                    linear_params.num_rows()
                ),
            ));
        }
        let orthonormal_constraint = read_field(r, "<OrthonormalConstraint>")?;
        let use_natural_gradient = read_field(r, "<UseNaturalGradient>")?;
        let num_samples_history = read_field(r, "<NumSamplesHistory>")?;
        let (alpha_in, alpha_out) = match read_opt_field(r, "<AlphaInOut>")? {
            Some(alphas) => alphas,
            None => {
                let a = read_field(r, "<Alpha>")?;
                (a, a)
            }
        };
        let (rank_in, rank_out) = read_field(r, "<RankInOut>")?;
        kaldi_fields::expect_closing(r, TDNN)?;
        Ok(Box::new(TdnnComponent {
            common,
            time_offsets,
            linear_params: linear_params.into(),
            bias_params,
            orthonormal_constraint,
            ng: tdnn_ng_options(
                use_natural_gradient,
                (rank_in, rank_out),
                (alpha_in, alpha_out),
                num_samples_history,
            ),
            ng_state: NaturalGradientState::default(),
        }))
    }

    fn block_dim(&self) -> usize {
        self.linear_params.num_cols() / self.time_offsets.len().max(1)
    }

    /// The weight block for time offset number k (output-dim × input-dim).
    fn block(&self, k: usize) -> MatView<'_> {
        let d = self.block_dim();
        self.linear_params
            .sub(0, self.linear_params.num_rows(), k * d, d)
    }

    /// The row layout to use: the precomputed one if it fits these matrices, else the default.
    fn layout<'a>(
        &'a self,
        indexes: Option<&'a dyn PrecomputedIndexes>,
        num_in: usize,
        num_out: usize,
    ) -> Option<std::borrow::Cow<'a, TdnnPrecomputed>> {
        precomputed_or_default(
            indexes,
            || TdnnPrecomputed::default_layout(&self.time_offsets, num_in, num_out),
            |p| p.offsets.len() == self.time_offsets.len() && p.fits(num_in, num_out),
        )
    }
}

impl TdnnComponent {
    /// The input rows each output row reads, offsets side by side (n_out × input-dim ·
    /// #offsets; zeros where an input row is missing).
    fn spliced_input(
        &self,
        layout: &TdnnPrecomputed,
        in_value: MatView<'_>,
        n_out: usize,
    ) -> Matrix {
        let d = self.block_dim();
        let mut x = Matrix::zeros(n_out, d * layout.offsets.len());
        for (k, rows) in layout.offsets.iter().enumerate() {
            let mut xk = x.sub_mut(0, n_out, k * d, d);
            match rows {
                TdnnOffsetRows::Contiguous { start } => {
                    xk.copy_from(in_value.rows_range(*start, n_out))
                }
                TdnnOffsetRows::Runs(runs) => {
                    for &(o, i, l) in runs {
                        xk.rows_range_mut(o, l).copy_from(in_value.rows_range(i, l));
                    }
                }
                TdnnOffsetRows::Gather(map) => xk.copy_rows(in_value, map),
            }
        }
        x
    }
}

/// True if `v` is non-empty and has no repeated values (Kaldi's Check on time offsets).
fn distinct_nonempty(v: &[i32]) -> bool {
    let set: std::collections::HashSet<i32> = v.iter().copied().collect();
    !v.is_empty() && set.len() == v.len()
}

/// The rows `rows[i]` of `src` as a new matrix (zeros where `rows[i]` is −1).
fn gather(src: MatView<'_>, rows: &[i32]) -> Matrix {
    let mut m = Matrix::zeros(rows.len(), src.num_cols());
    m.view_mut().copy_rows(src, rows);
    m
}

/// The Index hooks of the components whose output at t reads the input at t + each time offset
/// (`self.$offsets()`), needing those at `self.$required()`: TdnnComponent and
/// TimeHeightConvolutionComponent. Both sort their Indexes t-major (t, x, n): with all
/// sequences present at every frame, each offset's input rows then form one contiguous block
/// (or mostly runs, for a convolution with padding).
macro_rules! time_offset_hooks {
    ($offsets:ident, $required:ident) => {
        /// Output t is computable where the input is at every required t + offset.
        fn output_t_range(&self, input: $crate::index::TRange) -> $crate::index::TRange {
            let req = self.$required();
            let lo = req.iter().min().copied().unwrap_or(0) as i64;
            let hi = req.iter().max().copied().unwrap_or(0) as i64;
            match input {
                $crate::index::TRange::Span(a, b) => $crate::index::TRange::span(a - lo, b - hi),
                r => r,
            }
        }
        fn get_input_indexes(
            &self,
            _misc: &$crate::nnet::component::MiscComputationInfo,
            output_index: &$crate::index::Index,
            desired: &mut Vec<$crate::index::Index>,
        ) {
            desired.clear();
            let offsets = self.$offsets();
            desired.extend(offsets.iter().map(|&t| output_index.with_t_offset(t)));
        }
        fn reorder_indexes(
            &self,
            input: &mut Vec<$crate::index::Index>,
            output: &mut Vec<$crate::index::Index>,
        ) {
            input.sort();
            output.sort();
        }
    };
}
pub(crate) use time_offset_hooks;

impl TdnnComponent {
    fn time_offsets(&self) -> &[i32] {
        &self.time_offsets
    }
}

impl Component for TdnnComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::UPDATABLE
            | Properties::REORDERS_INDEXES
            | Properties::BACKPROP_ADDS
            | Properties::BACKPROP_NEEDS_INPUT)
            .with_if(self.bias_params.dim() == 0, Properties::PROPAGATE_ADDS);
        Description::new(
            TDNN,
            self.block_dim(),
            self.linear_params.num_rows(),
            properties,
        )
    }

    fn product_weights_mut(&mut self) -> Vec<&mut WeightMatrix> {
        vec![&mut self.linear_params]
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        if self.bias_params.dim() != 0 {
            p.output.copy_from_vec_rows(&self.bias_params);
        }
        let (n_in, n_out) = (p.input.num_rows(), p.output.num_rows());
        if p.input.num_cols() != self.input_dim() || p.output.num_cols() != self.output_dim() {
            return None;
        }
        let layout = self.layout(p.indexes, n_in, n_out)?;
        let d = self.block_dim();
        let w = &self.linear_params;
        for (k, rows) in layout.offsets.iter().enumerate() {
            match rows {
                TdnnOffsetRows::Contiguous { start } => {
                    let x = p.input.rows_range(*start, n_out);
                    w.forward_cols(1.0, x, &mut p.output, 1.0, k * d);
                }
                TdnnOffsetRows::Runs(runs) => {
                    for &(o, i, l) in runs {
                        let mut y = p.output.rows_range_mut(o, l);
                        w.forward_cols(1.0, p.input.rows_range(i, l), &mut y, 1.0, k * d);
                    }
                }
                TdnnOffsetRows::Gather(map) => {
                    let x = gather(p.input, map);
                    w.forward_cols(1.0, x.view(), &mut p.output, 1.0, k * d);
                }
            }
        }
        None
    }

    fn backprop(&self, b: Backprop<'_>) {
        let n_out = b.out_deriv.num_rows();
        if b.out_deriv.num_cols() != self.output_dim() {
            return;
        }
        if let Some(mut d) = b.in_deriv {
            if d.num_cols() == self.input_dim() {
                if let Some(layout) = self.layout(b.indexes, d.num_rows(), n_out) {
                    for (k, rows) in layout.offsets.iter().enumerate() {
                        let w = self.block(k);
                        match rows {
                            TdnnOffsetRows::Contiguous { start } => d
                                .rows_range_mut(*start, n_out)
                                .add_mat_mat(1.0, b.out_deriv, Trans::No, w, Trans::No, 1.0),
                            TdnnOffsetRows::Runs(runs) => {
                                for &(o, i, l) in runs {
                                    d.rows_range_mut(i, l).add_mat_mat(
                                        1.0,
                                        b.out_deriv.rows_range(o, l),
                                        Trans::No,
                                        w,
                                        Trans::No,
                                        1.0,
                                    );
                                }
                            }
                            TdnnOffsetRows::Gather(map) => {
                                let mut tmp = Matrix::zeros(n_out, self.input_dim());
                                tmp.view_mut().add_mat_mat(
                                    1.0,
                                    b.out_deriv,
                                    Trans::No,
                                    w,
                                    Trans::No,
                                    0.0,
                                );
                                d.add_to_rows_from(1.0, tmp.view(), map);
                            }
                        }
                    }
                }
            }
        }
        let Some(u) = update_target::<TdnnComponent>(b.to_update) else {
            return;
        };
        if u.linear_params.num_rows() != self.linear_params.num_rows()
            || u.linear_params.num_cols() != self.linear_params.num_cols()
            || b.in_value.num_cols() != self.input_dim()
        {
            return;
        }
        let Some(layout) = self.layout(b.indexes, b.in_value.num_rows(), n_out) else {
            return;
        };
        let out_dim = self.output_dim();
        let mut update = Update::new(&u.common, Some((&u.ng, &mut u.ng_state)), true);
        let lr = match update {
            Update::Frozen => return,
            Update::Plain { learning_rate } => learning_rate,
            Update::Preconditioned { .. } => {
                // The preconditioner sees whole spliced input rows (all offsets side by
                // side), as the weight matrix does.
                let x = self.spliced_input(&layout, b.in_value, n_out);
                let bias = (u.bias_params.dim() == out_dim).then_some(&mut u.bias_params);
                update.weight_block(u.linear_params.view_mut(), bias, x.view(), b.out_deriv);
                return;
            }
        };
        // Plain gradient: one product per offset on the rows that offset reads.
        let d = self.block_dim();
        for (k, rows) in layout.offsets.iter().enumerate() {
            let mut wk = u.linear_params.sub_mut(0, out_dim, k * d, d);
            match rows {
                TdnnOffsetRows::Contiguous { start } => wk.add_mat_mat(
                    lr,
                    b.out_deriv,
                    Trans::Yes,
                    b.in_value.rows_range(*start, n_out),
                    Trans::No,
                    1.0,
                ),
                TdnnOffsetRows::Runs(runs) => {
                    for &(o, i, l) in runs {
                        wk.add_mat_mat(
                            lr,
                            b.out_deriv.rows_range(o, l),
                            Trans::Yes,
                            b.in_value.rows_range(i, l),
                            Trans::No,
                            1.0,
                        );
                    }
                }
                TdnnOffsetRows::Gather(map) => {
                    let x = gather(b.in_value, map);
                    wk.add_mat_mat(lr, b.out_deriv, Trans::Yes, x.view(), Trans::No, 1.0);
                }
            }
        }
        if u.bias_params.dim() == out_dim {
            u.bias_params.add_row_sum_mat(lr, b.out_deriv, 1.0);
        }
    }

    // Every offset's input is required.
    time_offset_hooks!(time_offsets, time_offsets);

    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        Some(Box::new(TdnnPrecomputed::new(
            &self.time_offsets,
            input,
            output,
        )))
    }

    fn write(&self, w: &mut TokenWriter) {
        let ng = &self.ng;
        write_updatable(
            w,
            TDNN,
            &self.common,
            &[
                ("<TimeOffsets>", &self.time_offsets),
                ("<LinearParams>", &self.linear_params),
                ("<BiasParams>", &self.bias_params),
                ("<OrthonormalConstraint>", &self.orthonormal_constraint),
                ("<UseNaturalGradient>", &ng.use_natural_gradient),
                ("<NumSamplesHistory>", &ng.num_samples_history),
                ("<AlphaInOut>", &(ng.alpha_in, ng.alpha_out)),
                ("<RankInOut>", &(ng.rank_in, ng.rank_out)),
            ],
        );
    }

    fn info(&self) -> String {
        let g = |v: f32| crate::io::codec::fmt_g(v as f64, 6);
        let mut s = info_summary::updatable_header(self, &self.common);
        s += &info_summary::orthonormal_info(self.orthonormal_constraint);
        let offs: Vec<String> = self.time_offsets.iter().map(|o| o.to_string()).collect();
        s += &format!(", time-offsets={}", offs.join(","));
        s += ", ";
        s += &info_summary::matrix_stats("linear-params", &self.linear_params, true);
        if self.bias_params.dim() == 0 {
            s += ", has-bias=false";
        } else {
            s += ", ";
            s += &info_summary::vector_stats("bias", &self.bias_params);
        }
        if !self.ng.use_natural_gradient {
            s += ", use-natural-gradient=false";
        } else {
            s += &format!(
                ", rank-in={}, rank-out={}, num-samples-history={}, update-period=4, alpha-in={}, alpha-out={}",
                self.ng.rank_in,
                self.ng.rank_out,
                g(self.ng.num_samples_history),
                g(self.ng.alpha_in),
                g(self.ng.alpha_out)
            );
        }
        s
    }

    updatable_boilerplate!();
}

impl TdnnComponent {
    fn same_shape(&self, o: &TdnnComponent) -> bool {
        o.linear_params.num_rows() == self.linear_params.num_rows()
            && o.linear_params.num_cols() == self.linear_params.num_cols()
            && o.bias_params.dim() == self.bias_params.dim()
    }
}

impl UpdatableComponent for TdnnComponent {
    fn orthonormal_constraint(&mut self) -> Option<(f32, crate::matrix::MatViewMut<'_>)> {
        (self.orthonormal_constraint != 0.0)
            .then(|| (self.orthonormal_constraint, self.linear_params.view_mut()))
    }
    updatable_common!(ng);
    fn num_parameters(&self) -> usize {
        self.linear_params.num_rows() * self.linear_params.num_cols() + self.bias_params.dim()
    }
    fn param_blocks(&self) -> Vec<crate::matrix::MatView<'_>> {
        vec![self.linear_params.view(), self.bias_params.as_row()]
    }
    fn param_blocks_mut(&mut self) -> Vec<crate::matrix::MatViewMut<'_>> {
        vec![self.linear_params.view_mut(), self.bias_params.as_row_mut()]
    }
    fn scale(&mut self, alpha: f32) {
        self.linear_params.view_mut().scale(alpha);
        self.bias_params.as_row_mut().scale(alpha);
    }
    fn add(&mut self, alpha: f32, other: &dyn Component) {
        if let Some(o) = other.as_any().downcast_ref::<TdnnComponent>() {
            if self.same_shape(o) {
                self.linear_params
                    .view_mut()
                    .add_mat(alpha, o.linear_params.view(), Trans::No);
                param_ops::vec_add(&mut self.bias_params, alpha, &o.bias_params);
            }
        }
    }
    fn dot_product(&self, other: &dyn Component) -> f32 {
        match other.as_any().downcast_ref::<TdnnComponent>() {
            Some(o) if self.same_shape(o) => {
                self.linear_params
                    .view()
                    .trace_mat_mat(o.linear_params.view())
                    + param_ops::vector_dot(&self.bias_params, &o.bias_params)
            }
            _ => 0.0,
        }
    }
    fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
        param_ops::perturb_matrix(&mut self.linear_params, stddev, rng);
        if self.bias_params.dim() != 0 {
            param_ops::perturb_vector(&mut self.bias_params, stddev, rng);
        }
    }
}
