//! The general (Index-aware) dropout components:
//!
//! * [`GeneralDropoutComponent`]: dropout whose mask (of dimension `block-dim`, repeated over
//!   the `dim / block-dim` blocks of a row) is shared by all frames of a sequence, or by
//!   blocks of `time-period` frames; `continuous` masks are uniform in [1−2p, 1+2p], binary
//!   ones are 0 or 1/(1−p); with `specaugment-max-proportion` it zeroes random frequency bands
//!   instead (SpecAugment frequency masking). Test mode is the identity.
//! * [`DropoutMaskComponent`]: takes no input and emits a per-frame mask (LSTM gate dropout):
//!   1 with probability 1−p else 0, or continuous; test mode gives the constant 1−p (1 when
//!   continuous or p = 0).
//! * [`SpecAugmentTimeMaskComponent`]: zeroes random runs of up to `time-mask-max-frames`
//!   frames of each sequence, about `zeroed-proportion` of them in all. Test mode is the
//!   identity.
//!
//! The training-mode masks use our own random generator, so they never match Kaldi's draws.

use super::dropout::{read_proportion, read_proportion_field};
use super::kaldi_fields::{
    expect_closing, read_count_field, read_dim_field, read_opt_field, read_positive_i32,
    write_component, Field, Flag,
};
use super::param_ops::test_mode_boilerplate;
use super::{
    Backprop, BackpropInPlace, Component, Description, Memo, MiscComputationInfo,
    PrecomputedIndexes, Propagate, PropagateInPlace, Properties,
};
use crate::error::Result;
use crate::index::Index;
use crate::io::codec::fmt_g;
use crate::io::{TokenReader, TokenWriter};
use crate::kaldi_rand::{kaldi_rand_int, kaldi_with_prob};
use crate::matrix::{MatViewMut, Matrix};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;
use std::collections::HashMap;

const GD: &str = "GeneralDropoutComponent";
const DM: &str = "DropoutMaskComponent";
const SA: &str = "SpecAugmentTimeMaskComponent";

fn g6(v: f32) -> String {
    fmt_g(v as f64, 6)
}

// ---------------------------------------------------------------------------------------------
// GeneralDropoutComponent

/// Dropout with masks shared over time and over feature blocks.
#[derive(Clone, Debug)]
pub struct GeneralDropoutComponent {
    dim: usize,
    block_dim: usize,
    time_period: i32,
    pub(super) dropout_proportion: f32,
    specaugment_max_proportion: f32,
    specaugment_max_regions: i32,
    continuous: bool,
    test_mode: bool,
}

/// For each row of a step, which mask row it uses.
#[derive(Clone, Debug)]
pub struct DropoutMaskRows {
    /// Mask row of every output row.
    pub row_map: Vec<usize>,
    /// Number of distinct mask rows.
    pub num_mask_rows: usize,
}

impl PrecomputedIndexes for DropoutMaskRows {}

/// What Propagate hands to Backprop: the mask rows and which one each row used.
#[derive(Debug)]
struct GeneralDropoutMemo {
    mask: Matrix,
    row_map: Vec<usize>,
}

impl GeneralDropoutComponent {
    /// Registry hook: `dim` (required), `block-dim` (dim), `time-period` (0),
    /// `dropout-proportion` (0.5), `continuous` (false), `specaugment-max-proportion` (0),
    /// `specaugment-max-regions` (1), `test-mode` (false).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim = super::param_init::require_positive(cfg, "dim")?;
        let block_dim = super::param_init::positive_or(cfg, "block-dim", dim)?;
        let c = GeneralDropoutComponent {
            dim,
            block_dim,
            time_period: cfg.get_or("time-period", 0i32)?,
            dropout_proportion: cfg.get_or("dropout-proportion", 0.5f32)?,
            continuous: cfg.get_or("continuous", false)?,
            specaugment_max_proportion: cfg.get_or("specaugment-max-proportion", 0.0f32)?,
            specaugment_max_regions: cfg.get_or("specaugment-max-regions", 1i32)?,
            test_mode: cfg.get_or("test-mode", false)?,
        };
        if !dim.is_multiple_of(block_dim) {
            return Err(cfg.error_at_value("block-dim", "block-dim must divide dim"));
        }
        if c.time_period < 0 {
            return Err(cfg.error_at_value("time-period", "time-period must be >= 0"));
        }
        if !(0.0..=1.0).contains(&c.dropout_proportion) {
            return Err(
                cfg.error_at_value("dropout-proportion", "dropout-proportion must be in [0, 1]")
            );
        }
        if !(0.0..=1.0).contains(&c.specaugment_max_proportion) {
            return Err(cfg.error_at_value(
                "specaugment-max-proportion",
                "specaugment-max-proportion must be in [0, 1]",
            ));
        }
        if c.specaugment_max_regions < 1 {
            return Err(cfg.error_at_value(
                "specaugment-max-regions",
                "specaugment-max-regions must be positive",
            ));
        }
        if c.specaugment_max_proportion != 0.0 && c.continuous {
            return Err(cfg.error("specaugment-max-proportion cannot be used with continuous=true"));
        }
        Ok(Box::new(c))
    }

    /// Registry hook: reads the body after `<GeneralDropoutComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token(&format!("<{GD}>"))?;
        let dim = read_dim_field(r, "<Dim>", "<Dim>")?;
        r.expect_token("<BlockDim>")?;
        let at = r.pos();
        let block_dim = read_positive_i32(r, "<BlockDim>")?;
        if !dim.is_multiple_of(block_dim) {
            return Err(r.err_at(at, "a <BlockDim> dividing <Dim>"));
        }
        r.expect_token("<TimePeriod>")?;
        let at = r.pos();
        let time_period = r.i32()?;
        if time_period < 0 {
            return Err(r.err_at(at, "a <TimePeriod> >= 0"));
        }
        let dropout_proportion = read_proportion_field(r, "<DropoutProportion>")?;
        let mut c = GeneralDropoutComponent {
            dim,
            block_dim,
            time_period,
            dropout_proportion,
            specaugment_max_proportion: 0.0,
            specaugment_max_regions: 1,
            continuous: false,
            test_mode: false,
        };
        if r.try_token("<SpecAugmentMaxProportion>")? {
            c.specaugment_max_proportion = read_proportion(r, "<SpecAugmentMaxProportion>")?;
            if r.try_token("<SpecAugmentMaxRegions>")? {
                c.specaugment_max_regions =
                    super::kaldi_fields::read_positive_count(r, "<SpecAugmentMaxRegions>")?;
            }
        }
        c.test_mode = r.try_token("<TestMode>")?;
        c.continuous = r.try_token("<Continuous>")?;
        expect_closing(r, GD)?;
        Ok(Box::new(c))
    }

    /// True when Propagate is the identity (test mode, or nothing to drop).
    fn is_identity(&self) -> bool {
        self.test_mode || (self.dropout_proportion == 0.0 && self.specaugment_max_proportion == 0.0)
    }

    /// Draws `rows` mask rows of dimension block-dim.
    fn random_mask(&self, rows: usize, rng: &mut dyn RngCore) -> Matrix {
        let bd = self.block_dim;
        let mut m = Matrix::zeros(rows, bd);
        let p = self.dropout_proportion;
        // The mode is fixed per component, so drawing the whole matrix row-major gives the
        // same stream as drawing row by row.
        if self.specaugment_max_proportion > 0.0 {
            // Kaldi: bins × proportion in float, + 0.5 in double, truncated.
            let max_zeroed = ((bd as f32 * self.specaugment_max_proportion) as f64 + 0.5) as usize;
            let max_regions = self.specaugment_max_regions as usize;
            m.view_mut()
                .set_rand_zeroed_regions_mask(rng, max_zeroed, max_regions);
        } else if self.continuous {
            m.view_mut().set_rand_continuous_dropout_mask(rng, p);
        } else {
            // Kaldi's Scale(1.0 / (1.0 - p)): the factor in double, stored as float.
            let keep = if p < 1.0 {
                (1.0 / (1.0 - p as f64)) as f32
            } else {
                0.0
            };
            m.view_mut().set_rand_dropout_mask(rng, p, keep);
        }
        m
    }

    /// Multiplies every row of `data` by its mask row, block by block.
    fn apply_mask(&self, data: &mut MatViewMut<'_>, mask: &Matrix, row_map: &[usize]) {
        data.mul_blocks_by_mask_rows(mask.view(), row_map);
    }

    /// Draws masks for a step and applies them to `data`; returns the memo.
    fn dropout_in_place(
        &self,
        indexes: Option<&dyn PrecomputedIndexes>,
        data: &mut MatViewMut<'_>,
        rng: &mut dyn RngCore,
    ) -> Option<Memo> {
        if self.is_identity() {
            return None;
        }
        let rows = data.num_rows();
        let pre = indexes
            .and_then(|p| p.as_any().downcast_ref::<DropoutMaskRows>())
            .filter(|p| p.row_map.len() == rows);
        // Without Index information every row gets its own mask.
        // With block-dim < dim Kaldi draws (dim / block-dim) times the mask rows and uses
        // the first ones for every block of a row; the extra rows matter to the stream
        // (SpecAugment draws per row).
        let (row_map, n) = match pre {
            Some(p) => (
                p.row_map.clone(),
                p.num_mask_rows * (self.dim / self.block_dim.max(1)).max(1),
            ),
            None => ((0..rows).collect(), rows),
        };
        let mask = self.random_mask(n, rng);
        self.apply_mask(data, &mask, &row_map);
        Some(Box::new(GeneralDropoutMemo { mask, row_map }))
    }

    /// Backprop in place: multiplies by the mask used in Propagate.
    fn backprop_mask(&self, memo: Option<&Memo>, deriv: &mut MatViewMut<'_>) {
        if let Some(m) = memo.and_then(|m| m.downcast_ref::<GeneralDropoutMemo>()) {
            self.apply_mask(deriv, &m.mask, &m.row_map);
        }
    }
}

impl Component for GeneralDropoutComponent {
    fn describe(&self) -> Description {
        let properties = (Properties::RANDOM_COMPONENT
            | Properties::PROPAGATE_IN_PLACE
            | Properties::BACKPROP_IN_PLACE
            | Properties::USES_MEMO)
            .with_if(
                self.block_dim != self.dim,
                Properties::INPUT_CONTIGUOUS | Properties::OUTPUT_CONTIGUOUS,
            );
        Description::new(GD, self.dim, self.dim, properties)
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        self.dropout_in_place(p.indexes, &mut p.data, p.rng)
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        self.backprop_mask(b.memo, &mut b.deriv);
    }
    fn write(&self, w: &mut TokenWriter) {
        let specaugment = self.specaugment_max_proportion != 0.0;
        let max_regions = self.specaugment_max_regions;
        write_component(
            w,
            GD,
            &[
                ("<Dim>", &self.dim),
                ("<BlockDim>", &self.block_dim),
                ("<TimePeriod>", &self.time_period),
                ("<DropoutProportion>", &self.dropout_proportion),
                (
                    "<SpecAugmentMaxProportion>",
                    &specaugment.then_some(self.specaugment_max_proportion),
                ),
                (
                    "<SpecAugmentMaxRegions>",
                    &(specaugment && max_regions != 1).then_some(max_regions),
                ),
                ("<TestMode>", &Flag(self.test_mode)),
                ("<Continuous>", &Flag(self.continuous)),
            ],
        );
    }
    fn info(&self) -> String {
        let mut s = format!("{GD}, dim={}, block-dim={}", self.dim, self.block_dim);
        if self.time_period > 0 {
            s += &format!(", time-period={}", self.time_period);
        }
        s += &format!(", dropout-proportion={}", g6(self.dropout_proportion));
        if self.specaugment_max_proportion != 0.0 {
            s += &format!(
                ", specaugment-max-proportion={}, specaugment-max-regions={}",
                g6(self.specaugment_max_proportion),
                self.specaugment_max_regions
            );
        }
        if self.continuous {
            s += ", continuous=true";
        }
        s
    }
    test_mode_boilerplate!();
    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        _input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        // Rows share a mask when they have the same n (and time block, with time-period).
        let mut keys: HashMap<(i32, i32), usize> = HashMap::new();
        let row_map: Vec<usize> = output
            .iter()
            .map(|ix| {
                let tb = if self.time_period > 0 {
                    ix.t.div_euclid(self.time_period)
                } else {
                    0
                };
                let next = keys.len();
                *keys.entry((ix.n, tb)).or_insert(next)
            })
            .collect();
        Some(Box::new(DropoutMaskRows {
            num_mask_rows: keys.len(),
            row_map,
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// DropoutMaskComponent

/// A per-frame dropout mask, computed from no input.
#[derive(Clone, Debug)]
pub struct DropoutMaskComponent {
    output_dim: usize,
    pub(super) dropout_proportion: f32,
    continuous: bool,
    test_mode: bool,
}

impl DropoutMaskComponent {
    /// Registry hook: `output-dim` (required), `dropout-proportion` (0.5), `continuous`
    /// (false), `test-mode` (false).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let output_dim = super::param_init::require_positive(cfg, "output-dim")?;
        let c = DropoutMaskComponent {
            output_dim,
            dropout_proportion: cfg.get_or("dropout-proportion", 0.5f32)?,
            continuous: cfg.get_or("continuous", false)?,
            test_mode: cfg.get_or("test-mode", false)?,
        };
        if !(0.0..=1.0).contains(&c.dropout_proportion) {
            return Err(
                cfg.error_at_value("dropout-proportion", "dropout-proportion must be in [0, 1]")
            );
        }
        Ok(Box::new(c))
    }

    /// Registry hook: reads the body after `<DropoutMaskComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token(&format!("<{DM}>"))?;
        let mut c = DropoutMaskComponent {
            output_dim: read_dim_field(r, "<OutputDim>", "<OutputDim>")?,
            dropout_proportion: read_proportion_field(r, "<DropoutProportion>")?,
            continuous: false,
            test_mode: read_opt_field(r, "<TestMode>")?.unwrap_or(false),
        };
        c.continuous = r.try_token("<Continuous>")?;
        expect_closing(r, DM)?;
        Ok(Box::new(c))
    }
}

impl Component for DropoutMaskComponent {
    fn describe(&self) -> Description {
        Description::new(
            DM,
            self.output_dim,
            self.output_dim,
            Properties::RANDOM_COMPONENT,
        )
    }
    /// Equal to the output dim, so that the (ignored) input descriptor, which in xconfig
    /// output names the node itself, has a consistent dimension.
    fn propagate(&self, mut step: Propagate<'_>) -> Option<Memo> {
        let p = self.dropout_proportion;
        if self.test_mode {
            let v = if self.continuous || p == 0.0 {
                1.0
            } else {
                1.0 - p
            };
            step.output.set_const(v);
            return None;
        }
        if p == 0.0 {
            step.output.set_const(1.0);
            return None;
        }
        if self.continuous {
            step.output.set_rand_continuous_dropout_mask(step.rng, p);
            return None;
        }
        step.output.set_rand_dropout_mask(step.rng, p, 1.0);
        let (rows, cols) = (step.output.num_rows(), step.output.num_cols());
        if cols == 2 || cols == 3 {
            // Kaldi's case for the LSTM's gates: a second uniform fill u, one per row, and
            // column 0 = Heaviside(u − p), column 1 = Heaviside(1 − p − u), so that the two
            // are never both zero (column 2 keeps the first mask).
            let u = crate::kaldi_rand::kaldi_uniform(rows, step.rng);
            let (q, r) = ((-1.0 + 2.0 * p as f64) as f32, -p);
            for (i, &x) in u.iter().enumerate() {
                let first = x + r;
                let second = -(first + q);
                step.output.set(i, 0, if first > 0.0 { 1.0 } else { 0.0 });
                step.output.set(i, 1, if second > 0.0 { 1.0 } else { 0.0 });
            }
        }
        None
    }
    fn backprop(&self, _: Backprop<'_>) {
        // No input, so nothing to back-propagate to.
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<OutputDim>", &self.output_dim),
            ("<DropoutProportion>", &self.dropout_proportion),
            ("<TestMode>", &self.test_mode),
            ("<Continuous>", Flag::of(self.continuous)),
        ]
    }
    fn info(&self) -> String {
        let mut s = format!(
            "{DM}, output-dim={}, dropout-proportion={}",
            self.output_dim,
            g6(self.dropout_proportion)
        );
        if self.continuous {
            s += ", continuous=true";
        }
        s
    }
    test_mode_boilerplate!();
    fn get_input_indexes(
        &self,
        _misc: &MiscComputationInfo,
        _output_index: &Index,
        _desired: &mut Vec<Index>,
    ) {
        // Needs no input.
    }
}

// ---------------------------------------------------------------------------------------------
// SpecAugmentTimeMaskComponent

/// SpecAugment time masking.
#[derive(Clone, Debug)]
pub struct SpecAugmentTimeMaskComponent {
    dim: usize,
    zeroed_proportion: f32,
    time_mask_max_frames: i32,
    test_mode: bool,
}

/// The rows of each sequence of a step, in time order.
#[derive(Clone, Debug)]
pub struct SequenceRows {
    /// Per sequence (distinct n), its row numbers sorted by t.
    pub sequences: Vec<Vec<usize>>,
    /// Total number of rows.
    pub num_rows: usize,
}

impl PrecomputedIndexes for SequenceRows {}

/// The rows a time-masking Propagate zeroed (a row selection, like the compiled row tables).
#[derive(Debug)]
struct TimeMaskMemo(Vec<bool>);

impl SpecAugmentTimeMaskComponent {
    /// Registry hook: `dim` (required), `zeroed-proportion` (0.25), `time-mask-max-frames`
    /// (10), `test-mode` (false).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim = super::param_init::require_positive(cfg, "dim")?;
        let c = SpecAugmentTimeMaskComponent {
            dim,
            zeroed_proportion: cfg.get_or("zeroed-proportion", 0.25f32)?,
            time_mask_max_frames: cfg.get_or("time-mask-max-frames", 10i32)?,
            test_mode: cfg.get_or("test-mode", false)?,
        };
        if !(0.0..1.0).contains(&c.zeroed_proportion) {
            return Err(
                cfg.error_at_value("zeroed-proportion", "zeroed-proportion must be in [0, 1)")
            );
        }
        if c.time_mask_max_frames <= 0 {
            return Err(cfg.error_at_value(
                "time-mask-max-frames",
                "time-mask-max-frames must be positive",
            ));
        }
        Ok(Box::new(c))
    }

    /// Registry hook: reads the body after `<SpecAugmentTimeMaskComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token(&format!("<{SA}>"))?;
        let dim = read_dim_field(r, "<Dim>", "<Dim>")?;
        r.expect_token("<ZeroedProportion>")?;
        let at = r.pos();
        let zeroed_proportion = r.f32()?;
        if !(0.0..1.0).contains(&zeroed_proportion) {
            return Err(r.err_at(at, "a <ZeroedProportion> in [0, 1)"));
        }
        let time_mask_max_frames =
            read_count_field(r, "<TimeMaskMaxFrames>", "<TimeMaskMaxFrames>")?;
        let test_mode = r.try_token("<TestMode>")?;
        expect_closing(r, SA)?;
        Ok(Box::new(SpecAugmentTimeMaskComponent {
            dim,
            zeroed_proportion,
            time_mask_max_frames,
            test_mode,
        }))
    }

    /// Draws the 0/1 mask of every row and applies it to `data`.
    fn mask_in_place(
        &self,
        indexes: Option<&dyn PrecomputedIndexes>,
        data: &mut MatViewMut<'_>,
        rng: &mut dyn RngCore,
    ) -> Option<Memo> {
        if self.test_mode || self.zeroed_proportion == 0.0 {
            return None;
        }
        let rows = data.num_rows();
        let all: Vec<Vec<usize>>;
        let seqs = match indexes
            .and_then(|p| p.as_any().downcast_ref::<SequenceRows>())
            .filter(|p| p.num_rows == rows)
        {
            Some(p) => &p.sequences,
            None => {
                // Without Index information the rows are taken as one sequence.
                all = vec![(0..rows).collect()];
                &all
            }
        };
        // Kaldi's SpecAugmentTimeMaskComponent: along each sequence, alternating kept
        // segments of RandInt(1, kept-max) frames and zeroed ones of RandInt(1,
        // time-mask-max-frames), starting with a kept one with probability zeroed-proportion;
        // kept-max = time-mask-max-frames · (1 − z) / z in float, truncated. The draws are from
        // the process stream.
        let z = self.zeroed_proportion;
        let max_zeroed = self.time_mask_max_frames;
        let max_kept = ((max_zeroed as f32 * (1.0 - z)) / z) as i32;
        let mut zeroed_rows = vec![false; rows];
        for seq in seqs {
            let mut t = 0;
            while t < seq.len() {
                if t > 0 || kaldi_with_prob(rng, z) {
                    let kept = kaldi_rand_int(rng, 1, max_kept.max(1)) as usize;
                    t = (t + kept).min(seq.len());
                }
                let zeroed = kaldi_rand_int(rng, 1, max_zeroed) as usize;
                for &row in seq.iter().skip(t).take(zeroed) {
                    if let Some(zeroed_row) = zeroed_rows.get_mut(row) {
                        *zeroed_row = true;
                    }
                }
                t = (t + zeroed).min(seq.len());
            }
        }
        data.zero_rows(&zeroed_rows);
        Some(Box::new(TimeMaskMemo(zeroed_rows)))
    }

    fn backprop_mask(memo: Option<&Memo>, deriv: &mut MatViewMut<'_>) {
        if let Some(TimeMaskMemo(zeroed)) = memo.and_then(|m| m.downcast_ref::<TimeMaskMemo>()) {
            // Entries past the derivative's rows are left out.
            deriv.zero_rows(&zeroed[..zeroed.len().min(deriv.num_rows())]);
        }
    }
}

impl Component for SpecAugmentTimeMaskComponent {
    fn describe(&self) -> Description {
        Description::new(
            SA,
            self.dim,
            self.dim,
            Properties::RANDOM_COMPONENT
                | Properties::PROPAGATE_IN_PLACE
                | Properties::BACKPROP_IN_PLACE
                | Properties::USES_MEMO,
        )
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        self.mask_in_place(p.indexes, &mut p.data, p.rng)
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        Self::backprop_mask(b.memo, &mut b.deriv);
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<Dim>", &self.dim),
            ("<ZeroedProportion>", &self.zeroed_proportion),
            ("<TimeMaskMaxFrames>", &self.time_mask_max_frames),
            ("<TestMode>", Flag::of(self.test_mode)),
        ]
    }
    fn info(&self) -> String {
        format!(
            "{SA}, dim={}, zeroed-proportion={}, time-mask-max-frames={}",
            self.dim,
            g6(self.zeroed_proportion),
            self.time_mask_max_frames
        )
    }
    test_mode_boilerplate!();
    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        _input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        // Kaldi's order: sequences by increasing n, each one's rows by t (then row).
        let mut by_n: std::collections::BTreeMap<i32, Vec<usize>> = Default::default();
        for (r, ix) in output.iter().enumerate() {
            by_n.entry(ix.n).or_default().push(r);
        }
        let mut sequences: Vec<Vec<usize>> = by_n.into_values().collect();
        for s in &mut sequences {
            s.sort_by_key(|&r| output.get(r).map_or(0, |ix| ix.t));
        }
        Some(Box::new(SequenceRows {
            sequences,
            num_rows: output.len(),
        }))
    }
}
