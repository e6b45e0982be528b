//! `TimeHeightConvolutionComponent`: a 2-D convolution over time (the t of the Indexes) and
//! height (packed in the feature dimension, filter index fastest: column `h·F + f`).
//!
//! Output (n, t, x) at height h, filter j is
//! `b_j + Σ_o Σ_i W[j, o·F_in + i] · x(n, t + t_o, x)[(h·s + h_o)·F_in + i]` over the offsets
//! o = (t_o, h_o), with s = height-subsample-out. Heights outside `0..height-in` are zero
//! (padding), and so are input frames that are missing for time offsets that are not in
//! `required-time-offsets` (an output is computable when the required ones exist).
//!
//! The computation is one GEMM per block of output rows: the input is unfolded into a
//! temporary of (rows·height-out) × (#offsets·F_in), in which row (r, h) holds, offset after
//! offset, the F_in values the output pixel (r, h) reads, and multiplied by Wᵀ straight into
//! the output read as (rows·height-out) × F_out. `max-memory-mb` bounds the temporary; longer
//! inputs are done in several blocks of rows. Backprop folds Ẏ·W back onto the input
//! (`add_blocks_outer_to`) and forms the parameter gradient Ẏᵀ·unfold(X).
//!
//! Natural gradient, as in Kaldi, preconditions the parameter gradient [∇W | ∇b] itself: its
//! rows (one per output filter) on the input side, the rows of its transpose on the output
//! side, each with η = 1/num-minibatches-history per minibatch.

use super::info_summary;
use super::kaldi_fields::{self, read_field, read_positive_i32, write_fields, Field, WriteField};
use super::param_init::{self, RandomInit};
use super::param_ops::{self, updatable_boilerplate};
use super::tdnn::time_offset_hooks;
use super::{
    precomputed_or_default, Backprop, Component, Description, Memo, MiscComputationInfo,
    PrecomputedIndexes, Propagate, Properties, UpdatableCommon,
};
use crate::error::Result;
use crate::gradient::natural_gradient::OnlineNaturalGradient;
use crate::index::{Index, NO_TIME};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{MatView, Matrix, Trans, Vector, WeightMatrix};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use std::collections::HashMap;

const CONV: &str = "TimeHeightConvolutionComponent";

/// Kaldi's ConvolutionModel: the shape of the convolution, without parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvolutionModel {
    pub num_filters_in: usize,
    pub num_filters_out: usize,
    pub height_in: usize,
    pub height_out: usize,
    pub height_subsample_out: usize,
    /// (time offset, height offset) pairs, sorted and distinct; column block k of the
    /// parameters belongs to offset k.
    pub offsets: Vec<(i32, i32)>,
    /// Sorted and distinct; a subset of the offsets' time offsets.
    pub required_time_offsets: Vec<i32>,
}

impl ConvolutionModel {
    pub fn input_dim(&self) -> usize {
        self.height_in * self.num_filters_in
    }
    pub fn output_dim(&self) -> usize {
        self.height_out * self.num_filters_out
    }
    /// Columns of the parameter matrix: F_in per offset.
    pub fn param_cols(&self) -> usize {
        self.num_filters_in * self.offsets.len()
    }
    /// The distinct time offsets, sorted (Kaldi's all_time_offsets).
    pub fn all_time_offsets(&self) -> Vec<i32> {
        let mut t: Vec<i32> = self.offsets.iter().map(|o| o.0).collect();
        t.dedup();
        t
    }

    /// Kaldi's ConvolutionModel::Check as its InitFromConfig and Read apply it (padding
    /// allowed, unused input heights allowed), as an error message.
    pub fn check(&self) -> std::result::Result<(), String> {
        let dims = [
            self.num_filters_in,
            self.num_filters_out,
            self.height_in,
            self.height_out,
            self.height_subsample_out,
        ];
        if dims.contains(&0) {
            return Err(
                "num-filters-in, num-filters-out, height-in, height-out and \
                        height-subsample-out must be positive"
                    .into(),
            );
        }
        for (what, factors) in [
            ("input dimension", [self.height_in, self.num_filters_in]),
            ("output dimension", [self.height_out, self.num_filters_out]),
            (
                "parameter columns",
                [self.num_filters_in, self.offsets.len()],
            ),
        ] {
            let f: Vec<u64> = factors.iter().map(|&v| v as u64).chain([4]).collect();
            crate::limits::check_product(&f, what)?;
        }
        crate::limits::check_product(
            &[self.num_filters_out as u64, self.param_cols() as u64, 4],
            "parameter matrix",
        )?;
        if self.offsets.is_empty() {
            return Err("the convolution needs at least one offset".into());
        }
        if self.offsets.windows(2).any(|w| w[0] >= w[1]) {
            return Err("offsets must be sorted (time, then height) and distinct".into());
        }
        let all_t = self.all_time_offsets();
        let req = &self.required_time_offsets;
        if req.is_empty() || req.windows(2).any(|w| w[0] >= w[1]) {
            return Err(
                "required-time-offsets must be a non-empty sorted list of distinct \
                        values"
                    .into(),
            );
        }
        if let Some(t) = req.iter().find(|t| !all_t.contains(t)) {
            return Err(format!(
                "required time offset {t} is not one of the time offsets {all_t:?}"
            ));
        }
        // Every output height must read some input height through an offset whose time
        // offset is required (Kaldi's check; input heights no output reads are only a
        // warning in Kaldi, so they are accepted here).
        let (s, hin) = (self.height_subsample_out as i64, self.height_in as i64);
        for h in 0..self.height_out as i64 {
            let reads = self
                .offsets
                .iter()
                .any(|o| req.contains(&o.0) && (0..hin).contains(&(h * s + o.1 as i64)));
            if !reads {
                return Err(format!(
                    "output height {h} reads no input height through the required time \
                     offsets (height-in {hin}, height-subsample-out {s})"
                ));
            }
        }
        Ok(())
    }

    /// For output height h and offset k (entry h·#offsets + k): the first input column read,
    /// or −1 where the input height is padding.
    fn col_table(&self) -> Vec<i32> {
        let (s, hin, f) = (
            self.height_subsample_out as i64,
            self.height_in as i64,
            self.num_filters_in as i64,
        );
        let mut cols = Vec::with_capacity(self.height_out * self.offsets.len());
        for h in 0..self.height_out as i64 {
            for o in &self.offsets {
                let hi = h * s + o.1 as i64;
                cols.push(if (0..hin).contains(&hi) {
                    (hi * f) as i32
                } else {
                    -1
                });
            }
        }
        cols
    }

    /// Kaldi's ConvolutionModel::Info.
    pub fn info(&self) -> String {
        let offs: Vec<String> = self
            .offsets
            .iter()
            .map(|(t, h)| format!("{t},{h}"))
            .collect();
        let req: Vec<String> = self
            .required_time_offsets
            .iter()
            .map(|t| t.to_string())
            .collect();
        format!(
            "num-filters-in={}, num-filters-out={}, height-in={}, height-out={}, \
             height-subsample-out={}, {{time,height}}-offsets=[{}], \
             required-time-offsets=[{}], input-dim={}, output-dim={}",
            self.num_filters_in,
            self.num_filters_out,
            self.height_in,
            self.height_out,
            self.height_subsample_out,
            offs.join(" "),
            req.join(","),
            self.input_dim(),
            self.output_dim()
        )
    }

    fn write(&self, w: &mut TokenWriter) {
        w.token("<ConvolutionModel>");
        write_fields(
            w,
            &[
                ("<NumFiltersIn>", &self.num_filters_in),
                ("<NumFiltersOut>", &self.num_filters_out),
                ("<HeightIn>", &self.height_in),
                ("<HeightOut>", &self.height_out),
                ("<HeightSubsampleOut>", &self.height_subsample_out),
            ],
        );
        w.token("<Offsets>");
        w.int_pair_vec(&self.offsets);
        w.token("<RequiredTimeOffsets>");
        w.int_vec(&self.required_time_offsets);
        w.token("</ConvolutionModel>");
    }

    fn read(r: &mut TokenReader<'_>) -> Result<Self> {
        let at = r.pos();
        r.expect_token("<ConvolutionModel>")?;
        let mut dim = |token: &str, what: &str| -> Result<usize> {
            r.expect_token(token)?;
            read_positive_i32(r, what)
        };
        let num_filters_in = dim("<NumFiltersIn>", "num-filters-in")?;
        let num_filters_out = dim("<NumFiltersOut>", "num-filters-out")?;
        let height_in = dim("<HeightIn>", "height-in")?;
        let height_out = dim("<HeightOut>", "height-out")?;
        let height_subsample_out = dim("<HeightSubsampleOut>", "height-subsample-out")?;
        r.expect_token("<Offsets>")?;
        let offsets = r.int_pair_vec()?;
        r.expect_token("<RequiredTimeOffsets>")?;
        let required_time_offsets = r.int_vec()?;
        r.expect_token("</ConvolutionModel>")?;
        let m = ConvolutionModel {
            num_filters_in,
            num_filters_out,
            height_in,
            height_out,
            height_subsample_out,
            offsets,
            required_time_offsets,
        };
        m.check()
            .map_err(|e| r.err_at(at, format!("a valid convolution model: {e}")))?;
        Ok(m)
    }
}

/// The natural-gradient preconditioners of the `to_update` side; never saved.
#[derive(Clone, Debug, Default)]
pub struct ConvNgState {
    input: Option<OnlineNaturalGradient>,
    output: Option<OnlineNaturalGradient>,
}

impl crate::gradient::NgSlots for ConvNgState {
    fn ng_slots(&mut self) -> Vec<&mut dyn crate::gradient::NgSlot> {
        vec![&mut self.input, &mut self.output]
    }
}

/// `TimeHeightConvolutionComponent`.
#[derive(Clone, Debug)]
pub struct TimeHeightConvolutionComponent {
    pub common: UpdatableCommon,
    pub model: ConvolutionModel,
    /// num-filters-out × (#offsets · num-filters-in).
    pub linear: WeightMatrix,
    /// num-filters-out.
    pub bias: Vector,
    /// Bound on the unfolded temporary, in MiB.
    pub max_memory_mb: f32,
    pub use_natural_gradient: bool,
    pub num_minibatches_history: f32,
    pub alpha_in: f32,
    pub alpha_out: f32,
    pub rank_in: i32,
    pub rank_out: i32,
    pub ng_state: ConvNgState,
}

/// For each output row and offset (entry r·#offsets + k): the input row the offset's time
/// reads, or −1 (missing: zeros).
#[derive(Clone, Debug, PartialEq)]
pub struct ConvPrecomputed {
    pub num_input_rows: usize,
    pub num_output_rows: usize,
    pub rows: Vec<i32>,
}

impl PrecomputedIndexes for ConvPrecomputed {}

impl ConvPrecomputed {
    /// The row table for these Indexes, in the order given.
    pub fn new(model: &ConvolutionModel, input: &[Index], output: &[Index]) -> Self {
        let pos: HashMap<Index, i32> = input
            .iter()
            .enumerate()
            .filter(|(_, ix)| ix.t != NO_TIME)
            .map(|(i, ix)| (*ix, i as i32))
            .collect();
        let mut rows = Vec::with_capacity(output.len() * model.offsets.len());
        for o in output {
            for &(t, _) in &model.offsets {
                let want = Index::new(o.n, o.t.wrapping_add(t), o.x);
                rows.push(if o.t == NO_TIME {
                    -1
                } else {
                    pos.get(&want).copied().unwrap_or(-1)
                });
            }
        }
        ConvPrecomputed {
            num_input_rows: input.len(),
            num_output_rows: output.len(),
            rows,
        }
    }

    /// Without precomputed indexes: one sequence of consecutive frames, the input starting at
    /// the first output frame plus the smallest time offset.
    fn default_layout(model: &ConvolutionModel, num_in: usize, num_out: usize) -> Self {
        let min = model.offsets.iter().map(|o| o.0).min().unwrap_or(0) as i64;
        let mut rows = Vec::with_capacity(num_out * model.offsets.len());
        for i in 0..num_out as i64 {
            for &(t, _) in &model.offsets {
                let j = i + t as i64 - min;
                rows.push(if (0..num_in as i64).contains(&j) {
                    j as i32
                } else {
                    -1
                });
            }
        }
        ConvPrecomputed {
            num_input_rows: num_in,
            num_output_rows: num_out,
            rows,
        }
    }

    fn fits(&self, model: &ConvolutionModel, num_in: usize, num_out: usize) -> bool {
        self.num_input_rows == num_in
            && self.num_output_rows == num_out
            && self.rows.len() == num_out * model.offsets.len()
            && self.rows.iter().all(|&j| j < num_in as i32)
    }
}

/// The offsets of a config line: `offsets="t,h;t,h;..."`, or the product of `time-offsets`
/// and `height-offsets`. Sorted; an error if repeated.
fn offsets_from_config(cfg: &ConfigLine) -> Result<Vec<(i32, i32)>> {
    let mut offsets = Vec::new();
    if let Some(s) = cfg.get::<String>("offsets")? {
        if cfg.has("time-offsets") || cfg.has("height-offsets") {
            return Err(cfg.error_at_value(
                "offsets",
                "give either offsets or time-offsets and height-offsets, not both",
            ));
        }
        for pair in s.split(';') {
            let parsed = pair
                .split_once(',')
                .and_then(|(t, h)| Some((t.trim().parse().ok()?, h.trim().parse().ok()?)));
            match parsed {
                Some(p) => offsets.push(p),
                None => {
                    return Err(cfg.error_at_value(
                        "offsets",
                        format!("bad offset '{pair}': expected time,height (e.g. -1,0)"),
                    ))
                }
            }
        }
    } else {
        let ts: Vec<i32> = cfg.require("time-offsets")?;
        let hs: Vec<i32> = cfg.require("height-offsets")?;
        for &t in &ts {
            for &h in &hs {
                offsets.push((t, h));
            }
        }
    }
    offsets.sort_unstable();
    if offsets.is_empty() || offsets.windows(2).any(|w| w[0] == w[1]) {
        return Err(cfg.error("the offsets must be non-empty and distinct"));
    }
    Ok(offsets)
}

impl TimeHeightConvolutionComponent {
    /// Kaldi's TimeHeightConvolutionComponent::InitFromConfig.
    pub fn from_config(cfg: &ConfigLine, init_rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::from_config(cfg)?;
        let offsets = offsets_from_config(cfg)?;
        let mut all_t: Vec<i32> = offsets.iter().map(|o| o.0).collect();
        all_t.dedup();
        let required_time_offsets = match cfg.get::<Vec<i32>>("required-time-offsets")? {
            Some(mut r) => {
                r.sort_unstable();
                r
            }
            None => all_t,
        };
        let model = ConvolutionModel {
            num_filters_in: param_init::require_positive(cfg, "num-filters-in")?,
            num_filters_out: param_init::require_positive(cfg, "num-filters-out")?,
            height_in: param_init::require_positive(cfg, "height-in")?,
            height_out: param_init::require_positive(cfg, "height-out")?,
            height_subsample_out: param_init::positive_or(cfg, "height-subsample-out", 1)?,
            offsets,
            required_time_offsets,
        };
        model.check().map_err(|e| cfg.error(e))?;
        let (rows, cols) = (model.num_filters_out, model.param_cols());
        // Kaldi's nnet3-init leaves the bias at zero unless bias-stddev is given.
        let init = RandomInit::from_config(cfg, cols, 0.0, false)?;
        let init_unit: bool = cfg.get_or("init-unit", false)?;
        let opts = ConvOptions {
            max_memory_mb: cfg.get_or("max-memory-mb", 200.0)?,
            use_natural_gradient: cfg.get_or("use-natural-gradient", true)?,
            num_minibatches_history: cfg.get_or("num-minibatches-history", 4.0)?,
            alphas: (cfg.get_or("alpha-in", 4.0)?, cfg.get_or("alpha-out", 4.0)?),
            // Kaldi counts the bias column in the input side's dimension.
            ranks: (
                cfg.get_or("rank-in", 80.min((cols as i32 + 2) / 2))?,
                cfg.get_or("rank-out", 80.min((rows as i32 + 1) / 2))?,
            ),
        };
        opts.check().map_err(|e| cfg.error(e))?;
        let (linear, bias) = if init_unit {
            let zero = model
                .offsets
                .iter()
                .position(|&o| o == (0, 0))
                .ok_or_else(|| cfg.error("init-unit needs the offset (0,0)"))?;
            if model.num_filters_in != model.num_filters_out {
                return Err(cfg.error("init-unit needs num-filters-in == num-filters-out"));
            }
            let mut w = Matrix::zeros(rows, cols);
            for j in 0..rows {
                w.set(j, zero * model.num_filters_in + j, 1.0);
            }
            // Kaldi fills the bias (N(0, bias-stddev²)) with or without init-unit.
            (w, init.bias(rows, init_rng))
        } else {
            (
                init.weights(rows, cols, init_rng),
                init.bias(rows, init_rng),
            )
        };
        Ok(Box::new(Self::assemble(common, model, linear, bias, opts)))
    }

    /// Reads the body after `<TimeHeightConvolutionComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let common = UpdatableCommon::read(r, CONV)?;
        r.expect_token("<Model>")?;
        let model = ConvolutionModel::read(r)?;
        r.expect_token("<LinearParams>")?;
        let at = r.pos();
        let linear = r.matrix()?;
        if (linear.num_rows(), linear.num_cols()) != (model.num_filters_out, model.param_cols()) {
            return Err(r.err_at(
                at,
                format!(
                    "a {}x{} parameter matrix (num-filters-out × #offsets·num-filters-in), got \
                     {}x{}",
                    model.num_filters_out,
                    model.param_cols(),
                    linear.num_rows(),
                    linear.num_cols()
                ),
            ));
        }
        r.expect_token("<BiasParams>")?;
        let at = r.pos();
        let bias = r.vector()?;
        if bias.dim() != model.num_filters_out {
            return Err(r.err_at(
                at,
                format!("a bias vector of dimension {}", model.num_filters_out),
            ));
        }
        let at = r.pos();
        let opts = ConvOptions {
            max_memory_mb: read_field(r, "<MaxMemoryMb>")?,
            use_natural_gradient: read_field(r, "<UseNaturalGradient>")?,
            num_minibatches_history: read_field(r, "<NumMinibatchesHistory>")?,
            alphas: read_field(r, "<AlphaInOut>")?,
            ranks: read_field(r, "<RankInOut>")?,
        };
        opts.check()
            .map_err(|e| r.err_at(at, format!("valid options: {e}")))?;
        kaldi_fields::expect_closing(r, CONV)?;
        Ok(Box::new(Self::assemble(common, model, linear, bias, opts)))
    }

    /// The component from its parts (as configured or read) and checked options.
    fn assemble(
        common: UpdatableCommon,
        model: ConvolutionModel,
        linear: Matrix,
        bias: Vector,
        opts: ConvOptions,
    ) -> Self {
        TimeHeightConvolutionComponent {
            common,
            model,
            linear: linear.into(),
            bias,
            max_memory_mb: opts.max_memory_mb,
            use_natural_gradient: opts.use_natural_gradient,
            num_minibatches_history: opts.num_minibatches_history,
            alpha_in: opts.alphas.0,
            alpha_out: opts.alphas.1,
            rank_in: opts.ranks.0,
            rank_out: opts.ranks.1,
            ng_state: ConvNgState::default(),
        }
    }

    /// The row table to use: the precomputed one if it fits these matrices, else the default.
    fn layout<'a>(
        &'a self,
        indexes: Option<&'a dyn PrecomputedIndexes>,
        num_in: usize,
        num_out: usize,
    ) -> Option<std::borrow::Cow<'a, ConvPrecomputed>> {
        precomputed_or_default(
            indexes,
            || ConvPrecomputed::default_layout(&self.model, num_in, num_out),
            |p| p.fits(&self.model, num_in, num_out),
        )
    }

    /// Output rows per block, so that the unfolded temporary stays within max-memory-mb.
    fn rows_per_block(&self) -> usize {
        let per_row = (self.model.height_out * self.model.param_cols() * 4).max(1) as f64;
        let budget = self.max_memory_mb as f64 * 1024.0 * 1024.0;
        ((budget / per_row) as usize).max(1)
    }

    /// The blocks of output rows: (first row, row count).
    fn blocks(&self, num_out: usize) -> impl Iterator<Item = (usize, usize)> {
        let b = self.rows_per_block();
        (0..num_out)
            .step_by(b)
            .map(move |r0| (r0, b.min(num_out - r0)))
    }

    /// The input read by output rows `r0..r0 + nr`, unfolded into `t`:
    /// (nr·height-out) × (#offsets·num-filters-in).
    fn unfold(
        &self,
        layout: &ConvPrecomputed,
        cols: &[i32],
        input: MatView<'_>,
        (r0, nr): (usize, usize),
        t: &mut Matrix,
    ) {
        let (m, k) = (&self.model, self.model.offsets.len());
        // Every element is written by the gather (zeros where padded or missing).
        t.resize_undefined(nr * m.height_out, m.param_cols());
        t.view_mut().copy_blocks_outer(
            input,
            m.num_filters_in,
            m.height_out,
            &layout.rows[r0 * k..(r0 + nr) * k],
            cols,
        );
    }
}

/// Kaldi's checks on the options a config line or file gives.
/// The options a config line or model file gives besides the model and parameters, read
/// and checked alike on both paths.
struct ConvOptions {
    max_memory_mb: f32,
    use_natural_gradient: bool,
    num_minibatches_history: f32,
    alphas: (f32, f32),
    ranks: (i32, i32),
}

impl ConvOptions {
    fn check(&self) -> std::result::Result<(), String> {
        let ConvOptions {
            max_memory_mb,
            num_minibatches_history,
            alphas: (alpha_in, alpha_out),
            ranks: (rank_in, rank_out),
            ..
        } = *self;
        if max_memory_mb.is_nan() || max_memory_mb <= 0.0 {
            return Err(format!("max-memory-mb must be > 0 (got {max_memory_mb})"));
        }
        if num_minibatches_history.is_nan() || num_minibatches_history <= 1.0 {
            return Err(format!(
                "num-minibatches-history must be > 1 (got {num_minibatches_history})"
            ));
        }
        if alpha_in.is_nan() || alpha_out.is_nan() || alpha_in <= 0.0 || alpha_out <= 0.0 {
            return Err("alpha-in and alpha-out must be > 0".into());
        }
        if rank_in <= 0 || rank_out <= 0 {
            return Err("rank-in and rank-out must be > 0".into());
        }
        Ok(())
    }
}

/// Runs `f` on `view` read as (rows·groups) × (cols/groups), through a copy when the view is
/// not contiguous.
fn with_reshaped<R>(view: MatView<'_>, groups: usize, f: impl FnOnce(MatView<'_>) -> R) -> R {
    let (r, c) = (view.num_rows() * groups, view.num_cols() / groups);
    match view.reshaped(r, c) {
        Some(v) => f(v),
        None => {
            let m = view.to_matrix();
            let v = m
                .view()
                .reshaped(r, c)
                .expect("an owned matrix is contiguous");
            f(v)
        }
    }
}

impl TimeHeightConvolutionComponent {
    fn all_time_offsets(&self) -> Vec<i32> {
        self.model.all_time_offsets()
    }
    fn required_time_offsets(&self) -> &[i32] {
        &self.model.required_time_offsets
    }
}

impl Component for TimeHeightConvolutionComponent {
    fn describe(&self) -> Description {
        Description::new(
            CONV,
            self.model.input_dim(),
            self.model.output_dim(),
            Properties::UPDATABLE
                | Properties::REORDERS_INDEXES
                | Properties::BACKPROP_ADDS
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::INPUT_CONTIGUOUS
                | Properties::OUTPUT_CONTIGUOUS,
        )
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let (n_in, n_out) = (p.input.num_rows(), p.output.num_rows());
        if !p.cols_fit(self.input_dim(), self.output_dim()) {
            return None;
        }
        let layout = self.layout(p.indexes, n_in, n_out)?;
        let m = &self.model;
        let (hout, fout) = (m.height_out, m.num_filters_out);
        let cols = m.col_table();
        let mut t = Matrix::default();
        for (r0, nr) in self.blocks(n_out) {
            self.unfold(&layout, &cols, p.input, (r0, nr), &mut t);
            let mut y = p.output.rows_range_mut(r0, nr);
            if let Some(mut yr) = y.reshaped_mut(nr * hout, fout) {
                yr.copy_from_vec_rows(&self.bias);
                self.linear.forward(1.0, t.view(), &mut yr, 1.0);
            } else {
                let mut tmp = Matrix::zeros(nr * hout, fout);
                tmp.view_mut().copy_from_vec_rows(&self.bias);
                self.linear.forward(1.0, t.view(), &mut tmp.view_mut(), 1.0);
                y.copy_from(tmp.view().reshaped(nr, hout * fout)?);
            }
        }
        None
    }

    fn backprop(&self, step: Backprop<'_>) {
        let m = &self.model;
        let (hout, fout, fin) = (m.height_out, m.num_filters_out, m.num_filters_in);
        let n_out = step.out_deriv.num_rows();
        if step.out_deriv.num_cols() != self.output_dim() {
            return;
        }
        let cols = m.col_table();
        let k = m.offsets.len();
        if let Some(mut d) = step.in_deriv {
            if d.num_cols() == self.input_dim() {
                if let Some(layout) = self.layout(step.indexes, d.num_rows(), n_out) {
                    let mut dt = Matrix::default();
                    for (r0, nr) in self.blocks(n_out) {
                        dt.resize_undefined(nr * hout, m.param_cols());
                        with_reshaped(step.out_deriv.rows_range(r0, nr), hout, |dy| {
                            dt.view_mut().add_mat_mat(
                                1.0,
                                dy,
                                Trans::No,
                                self.linear.view(),
                                Trans::No,
                                0.0,
                            )
                        });
                        dt.view().add_blocks_outer_to(
                            1.0,
                            &mut d,
                            fin,
                            hout,
                            &layout.rows[r0 * k..(r0 + nr) * k],
                            &cols,
                        );
                    }
                }
            }
        }
        let Some(u) = step.to_update.and_then(|u| {
            u.as_any_mut()
                .downcast_mut::<TimeHeightConvolutionComponent>()
        }) else {
            return;
        };
        let lr = u.common.learning_rate;
        if lr == 0.0
            || (u.linear.num_rows(), u.linear.num_cols())
                != (self.linear.num_rows(), self.linear.num_cols())
            || u.bias.dim() != fout
            || step.in_value.num_cols() != self.input_dim()
        {
            return;
        }
        let Some(layout) = self.layout(step.indexes, step.in_value.num_rows(), n_out) else {
            return;
        };
        // [∇W | ∇b], summed over the blocks of rows.
        let pc = m.param_cols();
        let mut grad = Matrix::zeros(fout, pc + 1);
        let mut bias_grad = Vector::zeros(fout);
        let mut t = Matrix::default();
        for (r0, nr) in self.blocks(n_out) {
            self.unfold(&layout, &cols, step.in_value, (r0, nr), &mut t);
            with_reshaped(step.out_deriv.rows_range(r0, nr), hout, |dy| {
                grad.sub_mut(0, fout, 0, pc).add_mat_mat(
                    1.0,
                    dy,
                    Trans::Yes,
                    t.view(),
                    Trans::No,
                    1.0,
                );
                bias_grad.add_row_sum_mat(1.0, dy, 1.0);
            });
        }
        grad.sub_mut(0, fout, pc, 1)
            .add_mat(1.0, bias_grad.as_row(), Trans::Yes);
        if u.use_natural_gradient && !u.common.is_gradient {
            let frozen = u.common.natural_gradient_frozen;
            let new = |rank: i32, alpha: f32| {
                OnlineNaturalGradient::new(rank.max(1) as usize, 1, 2000.0, alpha)
                    .with_num_minibatches_history(u.num_minibatches_history)
            };
            let st = &mut u.ng_state;
            let pin = st.input.get_or_insert_with(|| new(u.rank_in, u.alpha_in));
            pin.freeze(frozen);
            let scale_in = pin.precondition_directions(grad.view_mut());
            let mut gt = grad.transposed();
            let pout = st
                .output
                .get_or_insert_with(|| new(u.rank_out, u.alpha_out));
            pout.freeze(frozen);
            let scale_out = pout.precondition_directions(gt.view_mut());
            let lr = lr * scale_in * scale_out;
            u.linear
                .view_mut()
                .add_mat(lr, gt.sub(0, pc, 0, fout), Trans::Yes);
            u.bias
                .as_row_mut()
                .add_mat(lr, gt.sub(pc, 1, 0, fout), Trans::No);
        } else {
            u.linear
                .view_mut()
                .add_mat(lr, grad.sub(0, fout, 0, pc), Trans::No);
            param_ops::vec_add(&mut u.bias, lr, &bias_grad);
        }
    }

    time_offset_hooks!(all_time_offsets, required_time_offsets);

    /// The inputs at the required time offsets; the others are used where they exist.
    fn input_required(&self, output_index: &Index, input: &Index) -> bool {
        let t = input.t.wrapping_sub(output_index.t);
        self.model.required_time_offsets.contains(&t)
    }

    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        Some(Box::new(ConvPrecomputed::new(&self.model, input, output)))
    }

    fn write(&self, w: &mut TokenWriter) {
        self.common.write(w, CONV);
        w.token("<Model>");
        self.model.write(w);
        let fields: [Field<'_>; 7] = [
            ("<LinearParams>", &self.linear as &dyn WriteField),
            ("<BiasParams>", &self.bias),
            ("<MaxMemoryMb>", &self.max_memory_mb),
            ("<UseNaturalGradient>", &self.use_natural_gradient),
            ("<NumMinibatchesHistory>", &self.num_minibatches_history),
            ("<AlphaInOut>", &(self.alpha_in, self.alpha_out)),
            ("<RankInOut>", &(self.rank_in, self.rank_out)),
        ];
        write_fields(w, &fields);
        w.token(&format!("</{CONV}>"));
    }

    fn info(&self) -> String {
        let g = |v: f32| crate::io::codec::fmt_g(v as f64, 6);
        let mut s = info_summary::updatable_header(self, &self.common);
        s += " ";
        s += &self.model.info();
        s += ", ";
        s += &info_summary::matrix_stats("filter-params", &self.linear, false);
        s += ", ";
        s += &info_summary::vector_stats("bias-params", &self.bias);
        s += &format!(
            ", num-params={}, max-memory-mb={}, use-natural-gradient={}",
            self.linear.num_rows() * (self.linear.num_cols() + 1),
            g(self.max_memory_mb),
            u8::from(self.use_natural_gradient)
        );
        if self.use_natural_gradient {
            s += &format!(
                ", num-minibatches-history={}, rank-in={}, rank-out={}, alpha={}",
                g(self.num_minibatches_history),
                self.rank_in,
                self.rank_out,
                g(self.alpha_in)
            );
        }
        s
    }

    updatable_boilerplate!();
}

param_ops::linear_bias_updatable!(TimeHeightConvolutionComponent, ng);
