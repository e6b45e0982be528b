//! `RestrictedAttentionComponent`: multi-head self-attention over a fixed window of frames
//! (Kaldi's `nnet-attention-component.h`). It has no parameters; keys, values and queries
//! come from the preceding affine component.
//!
//! Per head the input row is `key (K), value (V), query (K + C)` with C = num-left-inputs +
//! num-right-inputs + 1 context positions; the output row is `value (V)` plus, with
//! `output-context=true`, the C attention weights. Output t attends to the inputs at
//! `t + o·time-stride` for o = −left..=right:
//!
//! ```text
//! b[o] = key-scale · key(t + o·stride) · query_key(t) + query_context(t)[o]
//! c = softmax(b)        out = Σ_o c[o] · value(t + o·stride)   (then c itself, if wanted)
//! ```
//!
//! The step's rows are laid out on a regular grid (Kaldi's `ConvolutionComputationIo`):
//! t-major, every (n, x) pair at each t, the input padded to the whole requested window.
//! Inputs that are allowed to be missing (beyond num-left/right-inputs-required) become blank
//! rows, i.e. zero keys and values, which still take part in the softmax (as in Kaldi).
//! Statistics: per head the summed entropy of c and the summed c per position, on a random
//! two minibatches in three (Kaldi's `StoreStats`).

use super::kaldi_fields::{expect_closing, read_field, write_component};
use super::param_ops::component_boilerplate;
use super::{
    Backprop, Component, Description, Memo, MiscComputationInfo, PrecomputedIndexes, Propagate,
    Properties, StatsStep,
};
use crate::error::Result;
use crate::index::{Index, TRange, NO_TIME};
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::kaldi_rand::kaldi_rand_int;
use crate::matrix::{Matrix, Trans, Vector, Vector64};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use std::collections::{BTreeSet, HashSet};

const TYPE: &str = "RestrictedAttentionComponent";

/// Largest value accepted for each size option (dimensions, contexts, strides), so that the
/// derived dimensions and time offsets cannot overflow.
const MAX_OPTION: i32 = 1 << 20;

/// `RestrictedAttentionComponent`.
#[derive(Clone, Debug)]
pub struct RestrictedAttentionComponent {
    num_heads: usize,
    key_dim: usize,
    value_dim: usize,
    num_left_inputs: i32,
    num_right_inputs: i32,
    time_stride: i32,
    num_left_inputs_required: i32,
    num_right_inputs_required: i32,
    output_context: bool,
    key_scale: f32,
    /// Frames the statistics cover.
    stats_count: f64,
    /// Per head: Σ over frames of the entropy of c (empty until statistics are stored).
    entropy_stats: Vector64,
    /// num_heads × C, row-major: Σ over frames of c (empty until statistics are stored).
    posterior_stats: Vector64,
}

/// The regular row grid of one step (the fields of Kaldi's `ConvolutionComputationIo` that
/// attention uses; input and output share `t_step`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionIo {
    pub num_images: usize,
    pub start_t_in: i64,
    pub num_t_in: usize,
    pub start_t_out: i64,
    pub num_t_out: usize,
    pub t_step: i64,
}

impl PrecomputedIndexes for AttentionIo {}

/// Greatest common divisor (of non-negative values; gcd(0, x) = x).
fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// First t, gcd of the differences (0 for one value) and count of the grid through the
/// sorted distinct `ts` (Kaldi's `RegularizeTList`).
fn regularize(ts: &BTreeSet<i64>) -> (i64, i64, usize) {
    let first = ts.first().copied().unwrap_or(0);
    let last = ts.last().copied().unwrap_or(0);
    let mut step = 0;
    let mut prev = first;
    for &t in ts.iter().skip(1) {
        step = gcd(step, t - prev);
        prev = t;
    }
    let num = if step == 0 {
        1
    } else {
        ((last - first) / step) as usize + 1
    };
    (first, step, num)
}

/// The sorted distinct (n, x) pairs of `indexes` (Kaldi's `GetNxList`).
fn nx_pairs(indexes: &[Index]) -> Vec<(i32, i32)> {
    let set: BTreeSet<(i32, i32)> = indexes.iter().map(|i| (i.n, i.x)).collect();
    set.into_iter().collect()
}

/// The sorted distinct real t values of `indexes` (blanks left out).
fn t_values(indexes: &[Index]) -> BTreeSet<i64> {
    indexes
        .iter()
        .filter(|i| i.t != NO_TIME)
        .map(|i| i.t as i64)
        .collect()
}

impl RestrictedAttentionComponent {
    /// Registry hook (Kaldi's InitFromConfig): key-dim, value-dim, num-left-inputs and
    /// num-right-inputs are required; num-heads (1), time-stride (1),
    /// num-left/right-inputs-required (all), output-context (true), key-scale
    /// (1/sqrt(key-dim)).
    pub fn from_config(cfg: &ConfigLine, _rng: &mut dyn RngCore) -> Result<Box<dyn Component>> {
        let missing = || {
            cfg.error(
                "all of key-dim, value-dim, num-left-inputs and num-right-inputs must be given",
            )
        };
        let key_dim: i32 = cfg.get("key-dim")?.ok_or_else(missing)?;
        let value_dim: i32 = cfg.get("value-dim")?.ok_or_else(missing)?;
        let left: i32 = cfg.get("num-left-inputs")?.ok_or_else(missing)?;
        let right: i32 = cfg.get("num-right-inputs")?.ok_or_else(missing)?;
        let num_heads: i32 = cfg.get_or("num-heads", 1)?;
        let time_stride: i32 = cfg.get_or("time-stride", 1)?;
        let left_req: i32 = cfg.get_or("num-left-inputs-required", -1)?;
        let right_req: i32 = cfg.get_or("num-right-inputs-required", -1)?;
        let output_context: bool = cfg.get_or("output-context", true)?;
        let key_scale: f32 = cfg.get_or("key-scale", -1.0f32)?;
        for (key, v) in [
            ("num-heads", num_heads),
            ("key-dim", key_dim),
            ("value-dim", value_dim),
            ("num-left-inputs", left),
            ("num-right-inputs", right),
            ("time-stride", time_stride),
        ] {
            if v > MAX_OPTION {
                return Err(cfg.error_at_value(key, format!("{key} must be at most {MAX_OPTION}")));
            }
        }
        let key_scale = if key_scale < 0.0 {
            1.0 / (key_dim.max(1) as f32).sqrt()
        } else {
            key_scale
        };
        let left_req = if left_req < 0 { left } else { left_req };
        let right_req = if right_req < 0 { right } else { right_req };
        if num_heads <= 0
            || key_dim <= 0
            || value_dim <= 0
            || left < 0
            || right < 0
            || left + right <= 0
            || left_req > left
            || right_req > right
            || time_stride <= 0
        {
            return Err(cfg.error(
                "invalid values: need num-heads, key-dim, value-dim, time-stride > 0, \
                 num-left-inputs, num-right-inputs >= 0 (not both 0) and the required \
                 inputs no more than the inputs",
            ));
        }
        if !(key_scale > 0.0 && key_scale <= 1.0) {
            return Err(cfg.error_at_value("key-scale", "key-scale must be in (0, 1]"));
        }
        let c = RestrictedAttentionComponent {
            num_heads: num_heads as usize,
            key_dim: key_dim as usize,
            value_dim: value_dim as usize,
            num_left_inputs: left,
            num_right_inputs: right,
            time_stride,
            num_left_inputs_required: left_req,
            num_right_inputs_required: right_req,
            output_context,
            key_scale,
            stats_count: 0.0,
            entropy_stats: Vector64::default(),
            posterior_stats: Vector64::default(),
        };
        crate::limits::check_product(
            &[c.num_heads as u64, c.input_dim_per_head() as u64],
            "attention input dimension",
        )
        .map_err(|e| cfg.error(e))?;
        Ok(Box::new(c))
    }

    /// Registry hook: reads the body after `<RestrictedAttentionComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        let at = r.pos();
        let pos = |r: &mut TokenReader<'_>, tok: &str| -> Result<i32> {
            let at = r.pos();
            let v: i32 = read_field(r, tok)?;
            if !(1..=MAX_OPTION).contains(&v) {
                return Err(r.err_at(at, format!("{tok} in 1..={MAX_OPTION}")));
            }
            Ok(v)
        };
        let nonneg = |r: &mut TokenReader<'_>, tok: &str| -> Result<i32> {
            let at = r.pos();
            let v: i32 = read_field(r, tok)?;
            if !(0..=MAX_OPTION).contains(&v) {
                return Err(r.err_at(at, format!("{tok} in 0..={MAX_OPTION}")));
            }
            Ok(v)
        };
        let num_heads = pos(r, "<NumHeads>")?;
        let key_dim = pos(r, "<KeyDim>")?;
        let value_dim = pos(r, "<ValueDim>")?;
        let left = nonneg(r, "<NumLeftInputs>")?;
        let right = nonneg(r, "<NumRightInputs>")?;
        let time_stride = pos(r, "<TimeStride>")?;
        let left_req = nonneg(r, "<NumLeftInputsRequired>")?;
        let right_req = nonneg(r, "<NumRightInputsRequired>")?;
        let output_context: bool = read_field(r, "<OutputContext>")?;
        let ks_at = r.pos();
        let key_scale: f32 = read_field(r, "<KeyScale>")?;
        let count_at = r.pos();
        let stats_count: f64 = read_field(r, "<StatsCount>")?;
        r.expect_token("<EntropyStats>")?;
        let ent_at = r.pos();
        let entropy_stats = r.vector64()?;
        r.expect_token("<PosteriorStats>")?;
        let post_at = r.pos();
        let (rows, cols, posterior_stats) = r.matrix64()?;
        expect_closing(r, TYPE)?;
        if left + right == 0 || left_req > left || right_req > right {
            return Err(r.err_at(
                at,
                "num-left/right-inputs not both 0 and the required inputs no more than them",
            ));
        }
        if !(key_scale > 0.0 && key_scale <= 1.0) {
            return Err(r.err_at(ks_at, "a <KeyScale> in (0, 1]"));
        }
        if stats_count.is_nan() || stats_count < 0.0 {
            return Err(r.err_at(count_at, "a non-negative <StatsCount>"));
        }
        let c = RestrictedAttentionComponent {
            num_heads: num_heads as usize,
            key_dim: key_dim as usize,
            value_dim: value_dim as usize,
            num_left_inputs: left,
            num_right_inputs: right,
            time_stride,
            num_left_inputs_required: left_req,
            num_right_inputs_required: right_req,
            output_context,
            key_scale,
            stats_count,
            entropy_stats,
            posterior_stats,
        };
        if !c.entropy_stats.is_empty() && c.entropy_stats.dim() != c.num_heads {
            return Err(r.err_at(
                ent_at,
                format!("<EntropyStats> of dimension {}", c.num_heads),
            ));
        }
        let empty = rows == 0 || cols == 0;
        if !(empty || rows == c.num_heads && cols == c.context_dim()) {
            return Err(r.err_at(
                post_at,
                format!("<PosteriorStats> of {} × {}", c.num_heads, c.context_dim()),
            ));
        }
        if c.entropy_stats.is_empty() != empty {
            return Err(r.err_at(
                post_at,
                "<PosteriorStats> present exactly when <EntropyStats> is",
            ));
        }
        Ok(Box::new(c))
    }

    /// Number of context positions C.
    pub fn context_dim(&self) -> usize {
        (self.num_left_inputs + 1 + self.num_right_inputs) as usize
    }
    fn input_dim_per_head(&self) -> usize {
        2 * self.key_dim + self.value_dim + self.context_dim()
    }
    fn output_dim_per_head(&self) -> usize {
        self.value_dim
            + if self.output_context {
                self.context_dim()
            } else {
                0
            }
    }
    /// Frames the statistics cover.
    pub fn stats_count(&self) -> f64 {
        self.stats_count
    }

    /// The input t values of the window of output t, first to last.
    fn window(&self, t: i64) -> impl Iterator<Item = (i32, i64)> + '_ {
        let s = self.time_stride as i64;
        (-self.num_left_inputs..=self.num_right_inputs).map(move |o| (o, t + o as i64 * s))
    }

    /// The regular grid of a step (Kaldi's `GetComputationStructure`): the input and output
    /// t grids refined to a common step dividing time-stride, the input widened to the whole
    /// requested window. None if `output` has no real Index.
    pub fn computation_io(&self, input: &[Index], output: &[Index]) -> Option<AttentionIo> {
        let pairs = nx_pairs(if input.is_empty() { output } else { input });
        let (start_out, step_out, num_out) = regularize(&t_values(output));
        if t_values(output).is_empty() || pairs.is_empty() {
            return None;
        }
        let tin = t_values(input);
        let (_, step_in, _) = if tin.is_empty() {
            (0, 0, 0)
        } else {
            regularize(&tin)
        };
        let stride = self.time_stride as i64;
        let step_out = if step_out == 0 { stride } else { step_out };
        let step_in = if step_in == 0 { stride } else { step_in };
        let t_step = gcd(gcd(step_out, step_in), stride);
        let num_t_out = 1 + (step_out / t_step) as usize * (num_out - 1);
        let last_out = start_out + (num_t_out as i64 - 1) * t_step;
        let first_in = start_out - stride * self.num_left_inputs as i64;
        let last_in = last_out + stride * self.num_right_inputs as i64;
        Some(AttentionIo {
            num_images: pairs.len(),
            start_t_in: first_in,
            num_t_in: ((last_in - first_in) / t_step) as usize + 1,
            start_t_out: start_out,
            num_t_out,
            t_step,
        })
    }

    /// The grid's Indexes: t-major, (n, x) pairs in order; Indexes not in `present` blank.
    fn grid_indexes(
        pairs: &[(i32, i32)],
        start: i64,
        step: i64,
        num: usize,
        present: &HashSet<Index>,
    ) -> Vec<Index> {
        let mut out = Vec::with_capacity(num * pairs.len());
        for k in 0..num {
            let t = start + k as i64 * step;
            for &(n, x) in pairs {
                let ix = Index::new(n, t as i32, x);
                out.push(if present.contains(&ix) {
                    ix
                } else {
                    Index::new(n, NO_TIME, x)
                });
            }
        }
        out
    }

    /// Output rows, input rows before the first output frame, and rows between context
    /// positions, for a step with this grid (or, without one, a single sequence on a
    /// time-stride grid).
    fn layout(
        &self,
        io: Option<&AttentionIo>,
        rows_in: usize,
        rows_out: usize,
    ) -> Option<(usize, usize)> {
        let c = self.context_dim();
        let (rows_left, shift) = match io {
            Some(io) => {
                if io.num_images * io.num_t_in != rows_in
                    || io.num_images * io.num_t_out != rows_out
                {
                    return None;
                }
                let per_position = (self.time_stride as i64 / io.t_step) as usize;
                (
                    ((io.start_t_out - io.start_t_in) / io.t_step) as usize * io.num_images,
                    per_position * io.num_images,
                )
            }
            None => (self.num_left_inputs as usize, 1),
        };
        (rows_in == rows_out + (c - 1) * shift && rows_left + rows_out <= rows_in)
            .then_some((rows_left, shift))
    }

    fn io_of(indexes: Option<&dyn PrecomputedIndexes>) -> Option<&AttentionIo> {
        indexes.and_then(|p| p.as_any().downcast_ref::<AttentionIo>())
    }
}

impl Component for RestrictedAttentionComponent {
    fn describe(&self) -> Description {
        Description::new(
            TYPE,
            self.num_heads * self.input_dim_per_head(),
            self.num_heads * self.output_dim_per_head(),
            Properties::REORDERS_INDEXES
                | Properties::BACKPROP_NEEDS_INPUT
                | Properties::PROPAGATE_ADDS
                | Properties::BACKPROP_ADDS
                | Properties::STORES_STATS
                | Properties::USES_MEMO,
        )
    }

    fn propagate(&self, mut p: Propagate<'_>) -> Option<Memo> {
        let (rows_in, rows_out) = (p.input.num_rows(), p.output.num_rows());
        if !p.cols_fit(self.input_dim(), self.output_dim()) {
            return None;
        }
        let (rows_left, shift) = self.layout(Self::io_of(p.indexes), rows_in, rows_out)?;
        let (kd, vd, cd) = (self.key_dim, self.value_dim, self.context_dim());
        let (ip, op) = (self.input_dim_per_head(), self.output_dim_per_head());
        let mut c = Matrix::zeros(rows_out, self.num_heads * cd);
        for h in 0..self.num_heads {
            let inp = p.input.cols_range(h * ip, ip);
            // One pass per head: dot products, positional term, softmax and weighted sum
            // (and the weights themselves with output-context) row by row.
            p.output
                .sub_mut(0, rows_out, h * op, op)
                .add_restricted_attention(
                    &mut c.sub_mut(0, rows_out, h * cd, cd),
                    inp.cols_range(0, kd + vd),
                    inp.sub(rows_left, rows_out, kd + vd, kd + cd),
                    kd,
                    self.key_scale,
                    shift,
                );
        }
        Some(Box::new(c))
    }

    fn backprop(&self, b: Backprop<'_>) {
        let Some(mut in_deriv) = b.in_deriv else {
            return;
        };
        let Some(c) = b.memo.and_then(|m| m.downcast_ref::<Matrix>()) else {
            return;
        };
        let (rows_in, rows_out) = (b.in_value.num_rows(), b.out_deriv.num_rows());
        let (kd, cd) = (self.key_dim, self.context_dim());
        if b.in_value.num_cols() != self.input_dim()
            || b.out_deriv.num_cols() != self.output_dim()
            || in_deriv.num_rows() != rows_in
            || in_deriv.num_cols() != self.input_dim()
            || c.num_rows() != rows_out
            || c.num_cols() != self.num_heads * cd
        {
            return;
        }
        let Some((rows_left, shift)) = self.layout(Self::io_of(b.indexes), rows_in, rows_out)
        else {
            return;
        };
        // One fused walk over the output rows, every head and the whole chain rule at once.
        in_deriv.add_restricted_attention_backprop(
            b.in_value,
            c.view(),
            b.out_deriv,
            rows_left,
            self.num_heads,
            kd,
            self.key_scale,
            shift,
        );
    }

    fn store_stats_step(&mut self, s: StatsStep<'_>) {
        let Some(c) = s.memo.and_then(|m| m.downcast_ref::<Matrix>()) else {
            return;
        };
        let (heads, cd) = (self.num_heads, self.context_dim());
        if c.num_cols() != heads * cd {
            return;
        }
        if self.entropy_stats.dim() != heads {
            self.entropy_stats = Vector64::zeros(heads);
            self.posterior_stats = Vector64::zeros(heads * cd);
            self.stats_count = 0.0;
        }
        // Kaldi stores them for a random two minibatches in three, to save time.
        if kaldi_rand_int(s.rng, 0, 2) == 0 {
            return;
        }
        let mut sums = Vector::zeros(heads * cd);
        sums.add_row_sum_mat(1.0, c.view(), 0.0);
        let mut log_c = c.clone();
        log_c.view_mut().apply_floor(1.0e-20);
        log_c.view_mut().apply_log();
        let mut plogp = Vector::zeros(heads * cd);
        plogp.add_diag_mat_mat(-1.0, c.view(), Trans::Yes, log_c.view(), Trans::No, 0.0);
        // Per head, the sum of its `cd` entries: the column sums of plogp read as heads × cd.
        let mut entropy = Vector::zeros(heads);
        entropy.add_col_sum_mat(1.0, plogp.as_mat(heads, cd), 0.0);
        self.entropy_stats.add_vec_f32(1.0, &entropy);
        self.posterior_stats.add_vec_f32(1.0, &sums);
        self.stats_count += c.num_rows() as f64;
    }
    fn zero_stats(&mut self) {
        self.entropy_stats.set_zero();
        self.posterior_stats.set_zero();
        self.stats_count = 0.0;
    }
    fn scale_stats(&mut self, scale: f32) {
        let s = scale as f64;
        self.entropy_stats.scale(s);
        self.posterior_stats.scale(s);
        self.stats_count *= s;
    }
    fn add_stats(&mut self, alpha: f32, other: &dyn Component) {
        let Some(o) = other
            .as_any()
            .downcast_ref::<RestrictedAttentionComponent>()
        else {
            return;
        };
        let a = alpha as f64;
        if self.entropy_stats.is_empty() && !o.entropy_stats.is_empty() {
            self.entropy_stats = Vector64::zeros(o.entropy_stats.dim());
        }
        if self.posterior_stats.is_empty() && !o.posterior_stats.is_empty() {
            self.posterior_stats = Vector64::zeros(o.posterior_stats.dim());
        }
        if o.entropy_stats.dim() == self.entropy_stats.dim() {
            self.entropy_stats.add_vec(a, &o.entropy_stats);
        }
        if o.posterior_stats.dim() == self.posterior_stats.dim() {
            self.posterior_stats.add_vec(a, &o.posterior_stats);
        }
        self.stats_count += a * o.stats_count;
    }

    fn write(&self, w: &mut TokenWriter) {
        write_component(
            w,
            TYPE,
            &[
                ("<NumHeads>", &self.num_heads),
                ("<KeyDim>", &self.key_dim),
                ("<ValueDim>", &self.value_dim),
                ("<NumLeftInputs>", &self.num_left_inputs),
                ("<NumRightInputs>", &self.num_right_inputs),
                ("<TimeStride>", &self.time_stride),
                ("<NumLeftInputsRequired>", &self.num_left_inputs_required),
                ("<NumRightInputsRequired>", &self.num_right_inputs_required),
                ("<OutputContext>", &self.output_context),
                ("<KeyScale>", &self.key_scale),
                ("<StatsCount>", &self.stats_count),
                ("<EntropyStats>", &self.entropy_stats),
                (
                    "<PosteriorStats>",
                    &F64Matrix {
                        rows: if self.posterior_stats.is_empty() {
                            0
                        } else {
                            self.num_heads
                        },
                        data: &self.posterior_stats,
                    },
                ),
            ],
        );
    }

    fn info(&self) -> String {
        let g = |v: f64| fmt_g(v, 6);
        let mut s = format!(
            "{TYPE}, input-dim={}, output-dim={}, num-heads={}, time-stride={}, key-dim={}, \
             value-dim={}, num-left-inputs={}, num-right-inputs={}, context-dim={}, \
             num-left-inputs-required={}, num-right-inputs-required={}, output-context={}, \
             key-scale={}",
            self.input_dim(),
            self.output_dim(),
            self.num_heads,
            self.time_stride,
            self.key_dim,
            self.value_dim,
            self.num_left_inputs,
            self.num_right_inputs,
            self.context_dim(),
            self.num_left_inputs_required,
            self.num_right_inputs_required,
            self.output_context,
            g(self.key_scale as f64)
        );
        if self.stats_count != 0.0 {
            s += ", entropy=";
            // Text: the statistics are read through host copies.
            for e in self.entropy_stats.to_vec() {
                s += &format!("{},", g(e / self.stats_count));
            }
            let cd = self.context_dim();
            let posterior_stats = self.posterior_stats.to_vec();
            for h in 0..self.num_heads.min(5) {
                s += &format!(" posterior-stats[{h}]=");
                for p in posterior_stats.iter().skip(h * cd).take(cd) {
                    s += &format!("{},", g(p / self.stats_count));
                }
            }
            s += &format!(" stats-count={}", g(self.stats_count));
        }
        s
    }

    component_boilerplate!();

    fn output_t_range(&self, input: TRange) -> TRange {
        let s = self.time_stride as i64;
        match input {
            TRange::Span(a, b) => TRange::span(
                a + s * self.num_left_inputs_required as i64,
                b - s * self.num_right_inputs_required as i64,
            ),
            r => r,
        }
    }

    fn get_input_indexes(
        &self,
        _misc: &MiscComputationInfo,
        output_index: &Index,
        desired: &mut Vec<Index>,
    ) {
        desired.clear();
        for (_, t) in self.window(output_index.t as i64) {
            desired.push(Index::new(output_index.n, t as i32, output_index.x));
        }
    }

    /// The window's inputs within the required offsets; the others are used where they exist.
    fn input_required(&self, output_index: &Index, input: &Index) -> bool {
        let o = (input.t as i64 - output_index.t as i64) / self.time_stride as i64;
        (-self.num_left_inputs_required as i64..=self.num_right_inputs_required as i64).contains(&o)
    }

    /// Lays the rows out on the step's grid, blanks where an Index is not in the step.
    fn reorder_indexes(&self, input: &mut Vec<Index>, output: &mut Vec<Index>) {
        let Some(io) = self.computation_io(input, output) else {
            return;
        };
        let pairs = nx_pairs(input);
        let in_set: HashSet<Index> = input.iter().copied().collect();
        let out_set: HashSet<Index> = output.iter().copied().collect();
        *input = Self::grid_indexes(&pairs, io.start_t_in, io.t_step, io.num_t_in, &in_set);
        *output = Self::grid_indexes(&pairs, io.start_t_out, io.t_step, io.num_t_out, &out_set);
    }

    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        let io = self.computation_io(input, output)?;
        Some(Box::new(io))
    }
}

/// A Kaldi `Matrix<double>` field (row-major data of `rows` rows).
struct F64Matrix<'a> {
    rows: usize,
    data: &'a Vector64,
}

impl super::kaldi_fields::WriteField for F64Matrix<'_> {
    fn write_value(&self, w: &mut TokenWriter) {
        let cols = self.data.dim().checked_div(self.rows).unwrap_or(0);
        w.matrix_f64(self.rows, cols, &self.data.to_vec());
    }
}
