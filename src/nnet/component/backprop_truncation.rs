//! BackpropTruncationComponent: in recurrent layers, the forward pass multiplies by `scale`
//! (the identity when scale is 1); the backward pass multiplies the derivative by `scale`,
//! clips each row's norm to `clipping-threshold`, and zeroes rows whose norm exceeds
//! `zeroing-threshold` at frames where the recurrence crosses a multiple of
//! `zeroing-interval` (truncated BPTT). It is a general component because the zeroing depends
//! on the time index of each row; the diagnostics are kept in the file.

use super::kaldi_fields::{
    expect_closing, read_count_field, read_dim_field, read_field, read_opt_field, Field,
};
use super::param_ops::component_boilerplate;
use super::{
    update_target, BackpropInPlace, Component, Description, Memo, MiscComputationInfo,
    PrecomputedIndexes, PropagateInPlace, Properties,
};
use crate::error::Result;
use crate::index::Index;
use crate::io::codec::fmt_g;
use crate::io::TokenReader;
use crate::matrix::MatViewMut;
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

const TYPE: &str = "BackpropTruncationComponent";

/// Scale, clip and periodically zero back-propagated derivatives.
#[derive(Clone, Debug)]
pub struct BackpropTruncationComponent {
    dim: usize,
    scale: f32,
    clipping_threshold: f32,
    zeroing_threshold: f32,
    zeroing_interval: i32,
    recurrence_interval: i32,
    num_clipped: f64,
    num_zeroed: f64,
    count: f64,
    count_zeroing_boundaries: f64,
}

/// Which rows of a step lie on a zeroing boundary.
#[derive(Debug, Clone)]
pub struct TruncationIndexes {
    /// One flag per output row: true where the derivative may be zeroed.
    pub zeroing: Vec<bool>,
    /// Number of rows with the flag set.
    pub zeroing_sum: usize,
}

impl PrecomputedIndexes for TruncationIndexes {}

/// Floor division.
fn div_floor(a: i32, b: i32) -> i32 {
    a.div_euclid(b)
}

impl BackpropTruncationComponent {
    /// Registry hook: `dim` (required), `scale` (1.0), `clipping-threshold` (30),
    /// `zeroing-threshold` (15), `zeroing-interval` (20), `recurrence-interval` (1).
    pub fn from_config(
        cfg: &ConfigLine,
        _init_rng: &mut dyn RngCore,
    ) -> Result<Box<dyn Component>> {
        let dim = super::param_init::require_positive(cfg, "dim")?;
        let c = BackpropTruncationComponent {
            dim,
            scale: cfg.get_or("scale", 1.0f32)?,
            clipping_threshold: cfg.get_or("clipping-threshold", 30.0f32)?,
            zeroing_threshold: cfg.get_or("zeroing-threshold", 15.0f32)?,
            zeroing_interval: cfg.get_or("zeroing-interval", 20i32)?,
            recurrence_interval: cfg.get_or("recurrence-interval", 1i32)?,
            num_clipped: 0.0,
            num_zeroed: 0.0,
            count: 0.0,
            count_zeroing_boundaries: 0.0,
        };
        if c.clipping_threshold < 0.0 || c.zeroing_threshold < 0.0 {
            return Err(cfg.error("clipping-threshold and zeroing-threshold must be >= 0"));
        }
        if c.zeroing_interval <= 0 || c.recurrence_interval <= 0 {
            return Err(cfg.error("zeroing-interval and recurrence-interval must be positive"));
        }
        Ok(Box::new(c))
    }

    /// Registry hook: reads the body after `<BackpropTruncationComponent>`.
    pub fn read(r: &mut TokenReader<'_>) -> Result<Box<dyn Component>> {
        r.try_token(&format!("<{TYPE}>"))?;
        let dim = read_dim_field(r, "<Dim>", "<Dim>")?;
        // Old files have no <Scale>.
        let scale = read_opt_field(r, "<Scale>")?.unwrap_or(1.0);
        r.expect_token("<ClippingThreshold>")?;
        let at = r.pos();
        let clipping_threshold = r.f32()?;
        if clipping_threshold < 0.0 {
            return Err(r.err_at(at, "a <ClippingThreshold> >= 0"));
        }
        r.expect_token("<ZeroingThreshold>")?;
        let at = r.pos();
        let zeroing_threshold = r.f32()?;
        if zeroing_threshold < 0.0 {
            return Err(r.err_at(at, "a <ZeroingThreshold> >= 0"));
        }
        let zeroing_interval = read_count_field(r, "<ZeroingInterval>", "<ZeroingInterval>")?;
        let recurrence_interval =
            read_count_field(r, "<RecurrenceInterval>", "<RecurrenceInterval>")?;
        let num_clipped = read_field(r, "<NumElementsClipped>")?;
        let num_zeroed = read_field(r, "<NumElementsZeroed>")?;
        let count = read_field(r, "<NumElementsProcessed>")?;
        let count_zeroing_boundaries = read_field(r, "<NumZeroingBoundaries>")?;
        expect_closing(r, TYPE)?;
        Ok(Box::new(BackpropTruncationComponent {
            dim,
            scale,
            clipping_threshold,
            zeroing_threshold,
            zeroing_interval,
            recurrence_interval,
            num_clipped,
            num_zeroed,
            count,
            count_zeroing_boundaries,
        }))
    }

    /// The forward (and backward) scale.
    pub fn scale_factor(&self) -> f32 {
        self.scale
    }

    /// The backward pass in place on `deriv` (which holds the output derivative).
    fn backprop_rows(
        &self,
        indexes: Option<&dyn PrecomputedIndexes>,
        deriv: &mut MatViewMut<'_>,
        to_update: Option<&mut dyn Component>,
    ) {
        if self.scale != 1.0 {
            deriv.scale(self.scale);
        }
        let rows = deriv.num_rows();
        let mut clipped = 0usize;
        if self.clipping_threshold > 0.0 {
            let mut scales = deriv.as_view().row_norms();
            clipped = scales.clip_scales_from_norms(self.clipping_threshold);
            // Rows within the threshold are multiplied by 1.0, which is exact.
            deriv.mul_rows_vec(&scales);
        }
        let zi = indexes.and_then(|p| p.as_any().downcast_ref::<TruncationIndexes>());
        let mut zeroed = 0usize;
        let mut boundaries = 0usize;
        if let Some(zi) = zi {
            boundaries = zi.zeroing_sum;
            if self.zeroing_threshold > 0.0 {
                zeroed = deriv.zero_rows_with_norm_above(&zi.zeroing, self.zeroing_threshold);
            }
        }
        if let Some(u) = update_target::<BackpropTruncationComponent>(to_update) {
            u.num_clipped += clipped as f64;
            u.num_zeroed += zeroed as f64;
            u.count += rows as f64;
            u.count_zeroing_boundaries += boundaries as f64;
        }
    }
}

impl Component for BackpropTruncationComponent {
    fn describe(&self) -> Description {
        Description::new(
            TYPE,
            self.dim,
            self.dim,
            Properties::PROPAGATE_IN_PLACE | Properties::BACKPROP_IN_PLACE,
        )
    }
    fn propagate_in_place(&self, mut p: PropagateInPlace<'_>) -> Option<Memo> {
        if self.scale != 1.0 {
            p.data.scale(self.scale);
        }
        None
    }
    fn backprop_in_place(&self, mut b: BackpropInPlace<'_>) {
        self.backprop_rows(b.indexes, &mut b.deriv, b.to_update);
    }
    fn kaldi_fields(&self) -> Vec<Field<'_>> {
        vec![
            ("<Dim>", &self.dim),
            ("<Scale>", &self.scale),
            ("<ClippingThreshold>", &self.clipping_threshold),
            ("<ZeroingThreshold>", &self.zeroing_threshold),
            ("<ZeroingInterval>", &self.zeroing_interval),
            ("<RecurrenceInterval>", &self.recurrence_interval),
            ("<NumElementsClipped>", &self.num_clipped),
            ("<NumElementsZeroed>", &self.num_zeroed),
            ("<NumElementsProcessed>", &self.count),
            ("<NumZeroingBoundaries>", &self.count_zeroing_boundaries),
        ]
    }
    fn info(&self) -> String {
        let g = |v: f64| fmt_g(v, 6);
        let clipped = if self.count > 0.0 {
            self.num_clipped / self.count
        } else {
            0.0
        };
        let zeroed = if self.count_zeroing_boundaries > 0.0 {
            self.num_zeroed / self.count_zeroing_boundaries
        } else {
            0.0
        };
        format!(
            "{TYPE}, dim={}, scale={}, count={}, recurrence-interval={}, clipping-threshold={}, \
             clipped-proportion={}, zeroing-threshold={}, zeroing-interval={}, \
             zeroed-proportion={}, count-zeroing-boundaries={}",
            self.dim,
            g(self.scale as f64),
            fmt_g(self.count, 3),
            self.recurrence_interval,
            g(self.clipping_threshold as f64),
            g(clipped),
            g(self.zeroing_threshold as f64),
            self.zeroing_interval,
            g(zeroed),
            self.count_zeroing_boundaries as i64
        )
    }
    component_boilerplate!();
    fn zero_stats(&mut self) {
        self.num_clipped = 0.0;
        self.num_zeroed = 0.0;
        self.count = 0.0;
        self.count_zeroing_boundaries = 0.0;
    }
    fn scale_stats(&mut self, scale: f32) {
        let s = scale as f64;
        self.num_clipped *= s;
        self.num_zeroed *= s;
        self.count *= s;
        self.count_zeroing_boundaries *= s;
    }
    fn add_stats(&mut self, alpha: f32, other: &dyn Component) {
        if let Some(o) = other.as_any().downcast_ref::<BackpropTruncationComponent>() {
            let a = alpha as f64;
            self.num_clipped += a * o.num_clipped;
            self.num_zeroed += a * o.num_zeroed;
            self.count += a * o.count;
            self.count_zeroing_boundaries += a * o.count_zeroing_boundaries;
        }
    }
    fn precompute_indexes(
        &self,
        _misc: &MiscComputationInfo,
        _input: &[Index],
        output: &[Index],
        _need_backprop: bool,
    ) -> Option<Box<dyn PrecomputedIndexes>> {
        // A row is on a boundary when the frame it recurs from (t − recurrence-interval) lies
        // in an earlier zeroing interval.
        let zeroing: Vec<bool> = output
            .iter()
            .map(|ix| {
                ix.t != crate::index::NO_TIME
                    && div_floor(ix.t, self.zeroing_interval)
                        != div_floor(
                            ix.t.saturating_sub(self.recurrence_interval),
                            self.zeroing_interval,
                        )
            })
            .collect();
        let zeroing_sum = zeroing.iter().filter(|&&z| z).count();
        Some(Box::new(TruncationIndexes {
            zeroing,
            zeroing_sum,
        }))
    }
}
