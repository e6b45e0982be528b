//! `StatisticsExtractionComponent` and `StatisticsPoolingComponent` (x-vector stats layers).
//!
//! Extraction turns groups of frames into raw statistics: output t (rounded down to a multiple
//! of output-period) holds [count, Σx, Σx²] over the available input frames
//! t_start, t_start + input-period, … < t_start + output-period. Pooling sums those statistics
//! over the window [t − left-context, t + right-context] (step input-period) and outputs
//! [log(count) × num-log-count-features, mean, stddev]. For both, inputs are optional: an
//! output is computable when at least one of its inputs is, and only available inputs are
//! summed. Both sort their Indexes by (n, x, t), so the inputs of one output form a contiguous
//! row range.

use super::kaldi_fields::{self, read_count_field, read_dim_field, read_field, Field};
use super::param_init;
use super::param_ops::component_boilerplate;
use super::{
    inputs_computable, Backprop, Component, Description, Memo, MiscComputationInfo,
    PrecomputedIndexes, Propagate, Properties,
};
use crate::error::Result;
use crate::index::{Index, TRange};
use crate::io::TokenReader;
use crate::matrix::PoolingOptions;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use rustc_hash::FxHashMap;

const EXTRACTION: &str = "StatisticsExtractionComponent";
const POOLING: &str = "StatisticsPoolingComponent";

/// The Index hooks both components share: output `o` reads the inputs of the window
/// `self.$span(o)` = (first t, step, count) at its n and x, all optional, and the Indexes are
/// sorted (n, x, t).
macro_rules! window_hooks {
    ($span:ident) => {
        fn get_input_indexes(
            &self,
            misc: &MiscComputationInfo,
            o: &Index,
            desired: &mut Vec<Index>,
        ) {
            desired.clear();
            desired.extend(span_within(misc, o, self.$span(o)));
        }
        fn input_required(&self, _: &Index, _: &Index) -> bool {
            false
        }
        fn reorder_indexes(&self, input: &mut Vec<Index>, output: &mut Vec<Index>) {
            sort_nxt(input);
            sort_nxt(output);
        }
        fn precompute_indexes(
            &self,
            _: &MiscComputationInfo,
            input: &[Index],
            output: &[Index],
            _need_backprop: bool,
        ) -> Option<Box<dyn PrecomputedIndexes>> {
            let window = |o: &Index| self.$span(o);
            Some(Box::new(StatsPrecomputed::new(input, output, window)))
        }
    };
}

/// Kaldi's IndexLessNxt: n, then x, then t.
fn sort_nxt(v: &mut [Index]) {
    v.sort_by_key(|i| (i.n, i.x, i.t));
}

/// Row ranges of a step: for each output row, the input rows `[start, end)` it sums, and for
/// each input row the outputs `[start, end)` that use it. Invalid pairs are `(0, 0)`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsPrecomputed {
    pub num_input_rows: usize,
    pub forward: Vec<(usize, usize)>,
}

impl PrecomputedIndexes for StatsPrecomputed {}

impl StatsPrecomputed {
    /// Builds the ranges from each output's input Indexes (those present in `input`), given
    /// as `(first t, step, count)` at the output's n and x. The inputs of one output must be
    /// consecutive rows; where they are not (Indexes not in (n, x, t) order) the range is cut
    /// at the first gap.
    fn new(input: &[Index], output: &[Index], window: impl Fn(&Index) -> (i64, i64, i64)) -> Self {
        let pos: FxHashMap<Index, usize> = input.iter().enumerate().map(|(i, x)| (*x, i)).collect();
        // Window positions outside the inputs' t span cannot be present: skip them (a pooling
        // window may be 10,001 frames wide for a 1,500-frame input).
        let t_lo = input.iter().map(|i| i.t as i64).min().unwrap_or(0);
        let t_hi = input.iter().map(|i| i.t as i64).max().unwrap_or(-1);
        let mut forward = Vec::with_capacity(output.len());
        for o in output {
            let (first, step, count) = window(o);
            let step = step.max(1);
            let k_lo = if first >= t_lo {
                0
            } else {
                (t_lo - first + step - 1) / step
            };
            let k_hi = if t_hi < first {
                -1
            } else {
                ((t_hi - first) / step).min(count - 1)
            };
            let mut range: Option<(usize, usize)> = None;
            for k in k_lo..=k_hi {
                let w = Index::new(o.n, (first + k * step) as i32, o.x);
                if let Some(&p) = pos.get(&w) {
                    range = match range {
                        None => Some((p, p + 1)),
                        Some((s, e)) if e == p => Some((s, e + 1)),
                        keep => keep,
                    };
                }
            }
            let r = range.unwrap_or((0, 0));
            forward.push(r);
        }
        StatsPrecomputed {
            num_input_rows: input.len(),
            forward,
        }
    }

    /// The ranges assumed without precomputed indexes: consecutive equal groups of input rows.
    fn default_groups(num_in: usize, num_out: usize) -> Self {
        let per = num_in.checked_div(num_out).unwrap_or(0);
        let forward: Vec<(usize, usize)> = (0..num_out).map(|i| (i * per, (i + 1) * per)).collect();
        StatsPrecomputed {
            num_input_rows: num_in,
            forward,
        }
    }

    /// The precomputed ranges if they fit matrices of these sizes, else the default groups.
    fn get(indexes: Option<&dyn PrecomputedIndexes>, num_in: usize, num_out: usize) -> Self {
        match indexes.and_then(|p| p.as_any().downcast_ref::<StatsPrecomputed>()) {
            Some(p)
                if p.num_input_rows == num_in
                    && p.forward.len() == num_out
                    && p.forward.iter().all(|&(s, e)| s <= e && e <= num_in) =>
            {
                p.clone()
            }
            _ => Self::default_groups(num_in, num_out),
        }
    }
}

/// Largest multiple of `period` that is <= t (wrapping at the ends of the i32 range).
fn round_down(t: i32, period: i32) -> i32 {
    (t as i64)
        .div_euclid(period as i64)
        .wrapping_mul(period as i64) as i32
}

/// Upper limit on periods and contexts read from files or configs, so that a damaged value
/// cannot make the Index hooks allocate billions of Indexes.
const MAX_SPAN: i64 = 1 << 24;

// ---------------------------------------------------------------------------------------

/// `StatisticsExtractionComponent`.
#[derive(Clone, Debug)]
pub struct StatisticsExtractionComponent {
    pub input_dim: usize,
    pub input_period: i32,
    pub output_period: i32,
    pub include_variance: bool,
}

impl StatisticsExtractionComponent {
    /// Kaldi's StatisticsExtractionComponent::InitFromConfig.
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let input_dim = param_init::require_positive(cfg, "input-dim")?;
        let input_period = param_init::positive_or(cfg, "input-period", 1)? as i32;
        let output_period = param_init::positive_or(cfg, "output-period", 1)? as i32;
        if output_period as i64 > MAX_SPAN {
            return Err(cfg.error_at_value(
                "output-period",
                format!("output-period must be at most {MAX_SPAN}"),
            ));
        }
        if output_period % input_period != 0 {
            return Err(cfg.error_at_value(
                "output-period",
                format!("output-period={output_period} must be a multiple of input-period={input_period}"),
            ));
        }
        Ok(Box::new(StatisticsExtractionComponent {
            input_dim,
            input_period,
            output_period,
            include_variance: cfg.get_or("include-variance", true)?,
        }))
    }

    /// Reads the body (note Kaldi's misspelt `<IncludeVarinance>`).
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token(&format!("<{EXTRACTION}>"))?;
        let input_dim = read_dim_field(r, "<InputDim>", "input dimension")?;
        let input_period = read_count_field(r, "<InputPeriod>", "input period")?;
        r.expect_token("<OutputPeriod>")?;
        let at = r.pos();
        let output_period = kaldi_fields::read_positive_count(r, "output period")?;
        if output_period % input_period != 0 || output_period as i64 > MAX_SPAN {
            return Err(r.err_at(
                at,
                format!("an output period that is a multiple of the input period and at most {MAX_SPAN}"),
            ));
        }
        let include_variance = read_field(r, "<IncludeVarinance>")?;
        kaldi_fields::expect_closing(r, EXTRACTION)?;
        Ok(Box::new(StatisticsExtractionComponent {
            input_dim,
            input_period,
            output_period,
            include_variance,
        }))
    }

    /// The input Indexes of the group output `o` belongs to, as (first t, step, count).
    fn group_span(&self, o: &Index) -> (i64, i64, i64) {
        let start = round_down(o.t, self.output_period) as i64;
        let step = self.input_period as i64;
        (start, step, (self.output_period / self.input_period) as i64)
    }
}

impl Component for StatisticsExtractionComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::PROPAGATE_ADDS | Properties::REORDERS_INDEXES)
            .with_if(self.include_variance, Properties::BACKPROP_NEEDS_INPUT);
        Description::new(
            EXTRACTION,
            self.input_dim,
            1 + self.input_dim
                + if self.include_variance {
                    self.input_dim
                } else {
                    0
                },
            properties,
        )
    }

    fn propagate(&self, mut step: Propagate<'_>) -> Option<Memo> {
        let d = self.input_dim;
        if step.input.num_cols() != d || step.output.num_cols() != self.output_dim() {
            return None;
        }
        let p = StatsPrecomputed::get(step.indexes, step.input.num_rows(), step.output.num_rows());
        step.output
            .add_row_range_stats(step.input, &p.forward, self.include_variance);
        None
    }

    fn backprop(&self, b: Backprop<'_>) {
        let Some(mut g) = b.in_deriv else {
            return;
        };
        let d = self.input_dim;
        g.set_zero();
        if g.num_cols() != d || b.out_deriv.num_cols() != self.output_dim() {
            return;
        }
        let p = StatsPrecomputed::get(b.indexes, g.num_rows(), b.out_deriv.num_rows());
        let have_x = b.in_value.num_rows() == g.num_rows() && b.in_value.num_cols() == d;
        g.backprop_row_range_stats(
            b.out_deriv,
            &p.forward,
            (self.include_variance && have_x).then_some(b.in_value),
        );
    }

    /// Output t reads the inputs of its output-period group (any one suffices).
    fn output_t_range(&self, input: TRange) -> TRange {
        let p = self.output_period as i64;
        input.widen(1 - p, p - 1)
    }

    window_hooks!(group_span);

    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<InputDim>", &self.input_dim),
            ("<InputPeriod>", &self.input_period),
            ("<OutputPeriod>", &self.output_period),
            ("<IncludeVarinance>", &self.include_variance),
        ]
    }

    fn info(&self) -> String {
        format!(
            "{EXTRACTION}, input-dim={}, output-dim={}",
            self.input_dim,
            self.output_dim()
        )
    }

    component_boilerplate!();
}

/// The shared IsComputable of both components: computable if any input is available; the
/// used inputs are the available ones.
/// The Indexes of a span (first t, step, count) at `o`'s n and x, limited to the builder's
/// hint of where the input can exist (`misc.input_t_bounds`): a pooling window is 10,001
/// frames long, the utterance often far shorter. t wraps at the ends of the i32 range, as
/// Kaldi's int arithmetic does; a span that wraps is not limited.
fn span_within(
    misc: &MiscComputationInfo,
    o: &Index,
    (first, step, count): (i64, i64, i64),
) -> impl Iterator<Item = Index> {
    let last = first + (count - 1).max(0) * step;
    let fits = first >= i32::MIN as i64 && last <= i32::MAX as i64;
    let (k0, k1) = match misc.input_t_bounds {
        Some((lo, hi)) if step > 0 && fits => (
            (lo - first + step - 1).div_euclid(step).max(0),
            (hi - first).div_euclid(step).min(count - 1),
        ),
        _ => (0, count - 1),
    };
    let (n, x) = (o.n, o.x);
    (k0..=k1).map(move |k| Index::new(n, (first + k * step) as i32, x))
}

// ---------------------------------------------------------------------------------------

/// `StatisticsPoolingComponent`.
#[derive(Clone, Debug)]
pub struct StatisticsPoolingComponent {
    pub input_dim: usize,
    pub input_period: i32,
    pub left_context: i32,
    pub right_context: i32,
    pub num_log_count_features: usize,
    pub output_stddevs: bool,
    pub variance_floor: f32,
}

impl StatisticsPoolingComponent {
    /// Checks the options as Kaldi's Check() does; `Err(message)` names the violated rule.
    fn check(&self) -> std::result::Result<(), String> {
        if self.left_context < 0 || self.right_context < 0 {
            return Err("left-context and right-context must be >= 0".into());
        }
        if self.left_context as i64 + self.right_context as i64 <= 0 {
            return Err("left-context + right-context must be positive".into());
        }
        if self.left_context as i64 + self.right_context as i64 > MAX_SPAN {
            return Err(format!(
                "left-context + right-context must be at most {MAX_SPAN}"
            ));
        }
        if self.left_context % self.input_period != 0 || self.right_context % self.input_period != 0
        {
            return Err("left-context and right-context must be multiples of input-period".into());
        }
        if !(self.variance_floor > 0.0 && self.variance_floor < 1.0) {
            return Err("variance-floor must be in (0, 1)".into());
        }
        if self.output_stddevs && !(self.input_dim - 1).is_multiple_of(2) {
            return Err(
                "with output-stddevs=true, input-dim must be odd (count, sums, squares)".into(),
            );
        }
        Ok(())
    }

    /// Kaldi's StatisticsPoolingComponent::InitFromConfig.
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let input_dim = param_init::require_positive(cfg, "input-dim")?;
        let nlc: i32 = cfg.get_or("num-log-count-features", 0)?;
        if nlc < 0 {
            return Err(cfg.error_at_value("num-log-count-features", "must be >= 0"));
        }
        let c = StatisticsPoolingComponent {
            input_dim,
            input_period: param_init::positive_or(cfg, "input-period", 1)? as i32,
            left_context: cfg.get_or("left-context", -1)?,
            right_context: cfg.get_or("right-context", -1)?,
            num_log_count_features: nlc as usize,
            output_stddevs: cfg.get_or("output-stddevs", true)?,
            variance_floor: cfg.get_or("variance-floor", 1.0e-10)?,
        };
        c.check().map_err(|m| cfg.error(m))?;
        Ok(Box::new(c))
    }

    /// Reads the body.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token(&format!("<{POOLING}>"))?;
        let start = r.pos();
        let input_dim = read_dim_field(r, "<InputDim>", "input dimension")?;
        let input_period = read_count_field(r, "<InputPeriod>", "input period")?;
        let left_context = read_field(r, "<LeftContext>")?;
        let right_context = read_field(r, "<RightContext>")?;
        r.expect_token("<NumLogCountFeatures>")?;
        let at = r.pos();
        let nlc = r.i32()?;
        if nlc < 0 {
            return Err(r.err_at(at, "a non-negative number of log-count features"));
        }
        let output_stddevs = read_field(r, "<OutputStddevs>")?;
        let variance_floor = read_field(r, "<VarianceFloor>")?;
        kaldi_fields::expect_closing(r, POOLING)?;
        let c = StatisticsPoolingComponent {
            input_dim,
            input_period,
            left_context,
            right_context,
            num_log_count_features: nlc as usize,
            output_stddevs,
            variance_floor,
        };
        c.check()
            .map_err(|m| r.err_at(start, format!("a valid {POOLING} ({m})")))?;
        Ok(Box::new(c))
    }

    /// The input Indexes of the window around output `o`, as (first t, step, count).
    fn window_span(&self, o: &Index) -> (i64, i64, i64) {
        let n =
            (self.left_context as i64 + self.right_context as i64) / self.input_period as i64 + 1;
        (
            o.t as i64 - self.left_context as i64,
            self.input_period as i64,
            n,
        )
    }

    /// How the pooling kernel turns summed statistics into this component's output.
    fn pooling_options(&self) -> PoolingOptions {
        PoolingOptions {
            num_log_count_features: self.num_log_count_features,
            output_stddevs: self.output_stddevs,
            variance_floor: self.variance_floor,
        }
    }
}

impl Component for StatisticsPoolingComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::REORDERS_INDEXES | Properties::BACKPROP_ADDS)
            .with_if(
                self.output_stddevs || self.num_log_count_features > 0,
                Properties::BACKPROP_NEEDS_OUTPUT,
            )
            .with_if(
                self.num_log_count_features == 0,
                Properties::BACKPROP_NEEDS_INPUT,
            );
        Description::new(
            POOLING,
            self.input_dim,
            self.input_dim + self.num_log_count_features - 1,
            properties,
        )
    }

    fn propagate(&self, mut step: Propagate<'_>) -> Option<Memo> {
        if step.input.num_cols() != self.input_dim || step.output.num_cols() != self.output_dim() {
            return None;
        }
        let p = StatsPrecomputed::get(step.indexes, step.input.num_rows(), step.output.num_rows());
        step.output
            .pool_row_range_stats(step.input, &p.forward, self.pooling_options());
        None
    }

    fn backprop(&self, b: Backprop<'_>) {
        let Some(mut g) = b.in_deriv else {
            return;
        };
        let (nl, od_dim) = (self.num_log_count_features, self.output_dim());
        if g.num_cols() != self.input_dim || b.out_deriv.num_cols() != od_dim {
            return;
        }
        let n_out = b.out_deriv.num_rows();
        let need_out = self.output_stddevs || nl > 0;
        if need_out && (b.out_value.num_rows() != n_out || b.out_value.num_cols() != od_dim) {
            return;
        }
        let need_in = nl == 0;
        if need_in
            && (b.in_value.num_rows() != g.num_rows() || b.in_value.num_cols() != self.input_dim)
        {
            return;
        }
        let p = StatsPrecomputed::get(b.indexes, g.num_rows(), n_out);
        g.backprop_pool_row_range_stats(
            b.in_value,
            b.out_value,
            b.out_deriv,
            &p.forward,
            self.pooling_options(),
        );
    }

    /// Output t reads inputs in `[t - left, t + right]` (any one suffices).
    fn output_t_range(&self, input: TRange) -> TRange {
        input.widen(-(self.right_context as i64), self.left_context as i64)
    }

    fn is_computable(
        &self,
        misc: &MiscComputationInfo,
        o: &Index,
        input_available: &dyn Fn(&Index) -> bool,
        used_inputs: Option<&mut Vec<Index>>,
    ) -> bool {
        // Outputs exist only at multiples of the input period (read them through Round()).
        if o.t % self.input_period != 0 {
            if let Some(u) = used_inputs {
                u.clear();
            }
            return false;
        }
        inputs_computable(self, misc, o, input_available, used_inputs)
    }
    window_hooks!(window_span);

    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<InputDim>", &self.input_dim),
            ("<InputPeriod>", &self.input_period),
            ("<LeftContext>", &self.left_context),
            ("<RightContext>", &self.right_context),
            ("<NumLogCountFeatures>", &self.num_log_count_features),
            ("<OutputStddevs>", &self.output_stddevs),
            ("<VarianceFloor>", &self.variance_floor),
        ]
    }

    fn info(&self) -> String {
        format!(
            "{POOLING}, input-dim={}, output-dim={}",
            self.input_dim,
            self.output_dim()
        )
    }

    component_boilerplate!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the builder's bounds hint, a window is exactly the full window limited to the
    /// bounds: for periods above 1, bounds off the period grid, empty bounds, and a span
    /// that wraps around the i32 range (never limited).
    #[test]
    fn bounded_windows_are_the_full_windows_clipped() {
        let full = MiscComputationInfo::default();
        for (first, step, count) in [
            (0i64, 1i64, 10001i64),
            (-7, 3, 40),
            (5, 10, 1001),
            (3, 4, 1),
        ] {
            for (lo, hi) in [
                (0i64, 1499i64),
                (-5, 8),
                (2, 2),
                (13, 12),
                (-100, -50),
                (1, 30_000),
            ] {
                let o = Index::new(2, 0, 1);
                let hinted = MiscComputationInfo {
                    input_t_bounds: Some((lo, hi)),
                };
                let want: Vec<Index> = span_within(&full, &o, (first, step, count))
                    .filter(|i| (lo..=hi).contains(&(i.t as i64)))
                    .collect();
                let got: Vec<Index> = span_within(&hinted, &o, (first, step, count)).collect();
                assert_eq!(
                    got, want,
                    "span ({first},{step},{count}) bounds ({lo},{hi})"
                );
            }
        }
        let wrap = (i32::MAX as i64 - 5, 1, 10);
        let hinted = MiscComputationInfo {
            input_t_bounds: Some((0, 100)),
        };
        let o = Index::new(0, 0, 0);
        assert_eq!(span_within(&hinted, &o, wrap).count(), 10);
    }
}
