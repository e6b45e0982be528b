//! Row normalisation (Kaldi's NormalizePerRow and DiffNormalizePerRow), block by block.

use super::on_device;
use super::parallel::for_row_blocks;
use super::{simd, MatView, MatViewMut, Real};

/// The floor on the mean square Kaldi applies before the inverse square root (2^-66).
pub const NORMALIZE_SQUARED_NORM_FLOOR: Real = 1.355_252_7e-20;

/// The factor that scales a block with squared sum `sumsq` to the target: (sumsq / d)^-1/2
/// with d = block-dim · target-rms², the ratio floored at Kaldi's kSquaredNormFloor.
#[inline(always)]
fn normalize_scale(sumsq: Real, d_scaled: Real) -> Real {
    (sumsq * (1.0 / d_scaled))
        .max(NORMALIZE_SQUARED_NORM_FLOOR)
        .powf(-0.5)
}

/// A block's input and output widths (+1 for the log column) and `block_dim · target_rms²`,
/// the divisor [`normalize_scale`] takes.
fn block_dims(block_dim: usize, target_rms: Real, add_log: bool) -> (usize, usize, Real) {
    let d_scaled = block_dim as f32 * target_rms * target_rms;
    (block_dim, block_dim + usize::from(add_log), d_scaled)
}

impl MatViewMut<'_> {
    /// Normalises each block of `block_dim` columns of `src` to RMS `target_rms`, writing
    /// blocks of `block_dim` columns (+1 with `add_log`: the log RMS) into `self`
    /// (Kaldi's NormalizePerRow; vectorised).
    pub fn normalize_per_row(
        &mut self,
        src: MatView<'_>,
        block_dim: usize,
        target_rms: Real,
        add_log: bool,
    ) {
        on_device!(self.place.on_device() && src.place.on_device() => super::cuda_ops::normalize(self, Some(src), block_dim, target_rms, add_log));
        let (bd, obd, d_scaled) = block_dims(block_dim, target_rms, add_log);
        for_row_blocks(self.rb(), |first, mut dst| {
            for i in 0..dst.num_rows() {
                let s = src.row(first + i);
                for (ib, ob) in s.chunks(bd).zip(dst.row_mut(i).chunks_mut(obd)) {
                    let f = normalize_scale(simd::sum_squares(ib), d_scaled);
                    simd::scale_into(&mut ob[..bd], ib, f);
                    if add_log {
                        ob[bd] = -f.ln() + target_rms.ln();
                    }
                }
            }
        });
    }
    /// [`normalize_per_row`](Self::normalize_per_row) in place, without the log column.
    pub fn apply_normalize_per_row(&mut self, block_dim: usize, target_rms: Real) {
        on_device!(self.place.on_device() => super::cuda_ops::normalize(self, None, block_dim, target_rms, false));
        let (_, _, d_scaled) = block_dims(block_dim, target_rms, false);
        for r in 0..self.num_rows() {
            for blk in self.row_mut(r).chunks_mut(block_dim) {
                let f = normalize_scale(simd::sum_squares(blk), d_scaled);
                simd::scale(blk, f);
            }
        }
    }
    /// Adds the input derivative of [`normalize_per_row`](Self::normalize_per_row) to `self`
    /// (Kaldi's DiffNormalizePerRow). With `out_deriv = None`, `self` holds the output
    /// derivative (no log column) and is overwritten with the input derivative.
    pub fn diff_normalize_per_row(
        &mut self,
        in_value: MatView<'_>,
        out_deriv: Option<MatView<'_>>,
        block_dim: usize,
        target_rms: Real,
        add_log: bool,
    ) {
        on_device!(self.place.on_device() && in_value.place.on_device() && out_deriv.is_none_or(|d| d.place.on_device()) => super::cuda_ops::diff_normalize(self, in_value, out_deriv, block_dim, target_rms, add_log));
        let (bd, obd, d_scaled) = block_dims(block_dim, target_rms, add_log);
        // Rows are independent: blocks of them run in parallel.
        for_row_blocks(self.rb(), |first, mut dst| {
            let mut od_buf = vec![0.0f32; obd];
            for i in 0..dst.num_rows() {
                let r = first + i;
                let x_row = in_value.row(r);
                let od_row: Option<&[f32]> = out_deriv.as_ref().map(|m| m.row(r));
                let d_row = dst.row_mut(i);
                for (b, x) in x_row.chunks(bd).enumerate() {
                    match od_row {
                        Some(o) => od_buf.copy_from_slice(&o[b * obd..(b + 1) * obd]),
                        None => od_buf[..bd].copy_from_slice(&d_row[b * bd..(b + 1) * bd]),
                    }
                    let od = &od_buf[..bd];
                    let dot = simd::dot(od, x);
                    let sumsq = simd::sum_squares(x);
                    let d = &mut d_row[b * bd..(b + 1) * bd];
                    if od_row.is_none() {
                        d.iter_mut().for_each(|v| *v = 0.0);
                    }
                    if add_log {
                        let coef = od_buf[bd] / sumsq.max(bd as f32 * NORMALIZE_SQUARED_NORM_FLOOR);
                        for (v, &xx) in d.iter_mut().zip(x) {
                            *v += coef * xx;
                        }
                    }
                    let f = normalize_scale(sumsq, d_scaled);
                    // At the floor the scale does not depend on x.
                    let f3 = if f == 1.0 / NORMALIZE_SQUARED_NORM_FLOOR.sqrt() {
                        0.0
                    } else {
                        f * f * f
                    };
                    let c = -dot * f3 / d_scaled;
                    for ((v, &o), &xx) in d.iter_mut().zip(od).zip(x) {
                        *v += f * o + c * xx;
                    }
                }
            }
        });
    }
}
