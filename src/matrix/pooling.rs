//! Statistics over ranges of rows, for Kaldi's StatisticsExtraction (counts, sums and sums
//! of squares per output row) and StatisticsPooling (means, optional standard deviations
//! and log counts), with their backward passes. Output row `o` summarises input rows
//! `ranges[o] = (start, end)`.

use super::on_device;
use super::{MatView, MatViewMut, Real};

/// How [`MatViewMut::pool_row_range_stats`] turns summed statistics into its output.
#[derive(Clone, Copy, Debug)]
pub struct PoolingOptions {
    /// Leading output columns that hold log(count).
    pub num_log_count_features: usize,
    /// Whether the second half of the statistics becomes standard deviations.
    pub output_stddevs: bool,
    /// The floor on the variance before the square root.
    pub variance_floor: Real,
}

impl MatViewMut<'_> {
    /// Adds to output row o: `[count, Σ x, Σ x² (if include_variance)]` over input rows
    /// `ranges[o]`, count being the number of those rows (StatisticsExtraction forward; self has 1 + d (+ d) columns).
    pub fn add_row_range_stats(
        &mut self,
        input: MatView<'_>,
        ranges: &[(usize, usize)],
        include_variance: bool,
    ) {
        let d = input.num_cols();
        assert_eq!(
            self.num_cols(),
            1 + d + if include_variance { d } else { 0 },
            "add_row_range_stats: dim"
        );
        on_device!(self.place.on_device() && input.place.on_device() => super::cuda_ops::add_row_range_stats(self, input, ranges));
        for (o, &(s, e)) in ranges.iter().enumerate() {
            let row = self.row_mut(o);
            let (head, rest) = row.split_at_mut(1);
            head[0] += (e - s) as Real;
            let (sum, sumsq) = rest.split_at_mut(d);
            for i in s..e {
                let x = input.row(i);
                for (a, &v) in sum.iter_mut().zip(x) {
                    *a += v;
                }
                if include_variance {
                    for (a, &v) in sumsq.iter_mut().zip(x) {
                        *a += v * v;
                    }
                }
            }
        }
    }
    /// Backward of [`add_row_range_stats`](Self::add_row_range_stats): every input row i in
    /// `ranges[o]` becomes the Σx derivative of output row o, plus `2 x · (Σx² derivative)`
    /// when `in_value` (the forward input) is given.
    pub fn backprop_row_range_stats(
        &mut self,
        out_deriv: MatView<'_>,
        ranges: &[(usize, usize)],
        in_value: Option<MatView<'_>>,
    ) {
        let d = self.num_cols();
        on_device!(self.place.on_device() && out_deriv.place.on_device() && in_value.is_none_or(|x| x.place.on_device()) => super::cuda_ops::backprop_row_range_stats(self, out_deriv, ranges, in_value));
        for (o, &(s, e)) in ranges.iter().enumerate() {
            let od = out_deriv.row(o);
            let (dsum, dsq) = od[1..].split_at(d);
            for i in s..e {
                let gi = self.row_mut(i);
                gi.copy_from_slice(dsum);
                if let Some(x) = in_value {
                    for ((a, &x), &dq) in gi.iter_mut().zip(x.row(i)).zip(dsq) {
                        *a += 2.0 * x * dq;
                    }
                }
            }
        }
    }
    /// Output row o: `[log(count) × num_log_count_features, mean, (stddev)]` of the
    /// extraction statistics (`[count, Σx, Σx²]` rows) in `ranges[o]`; an empty range gives a
    /// zero row (StatisticsPooling forward). Short windows add rows in order, as Kaldi; long
    /// ones (x-vector pooling over whole utterances, O(T²) row additions) use f64 prefix sums.
    pub fn pool_row_range_stats(
        &mut self,
        input: MatView<'_>,
        ranges: &[(usize, usize)],
        opts: PoolingOptions,
    ) {
        let nl = opts.num_log_count_features;
        let fd = (input.num_cols() - 1) / if opts.output_stddevs { 2 } else { 1 };
        assert_eq!(
            self.num_cols(),
            nl + input.num_cols() - 1,
            "pool_row_range_stats: dim"
        );
        let total: usize = ranges.iter().map(|&(s, e)| e.saturating_sub(s)).sum();
        let long = total > 16 * input.num_rows().max(1);
        on_device!(self.place.on_device() && input.place.on_device() => super::cuda_ops::pool_row_range_stats(self, input, ranges, opts, long));
        let prefix = long.then(|| {
            let cols = input.num_cols();
            let mut pre = vec![0.0f64; (input.num_rows() + 1) * cols];
            for i in 0..input.num_rows() {
                let (done, next) = pre.split_at_mut((i + 1) * cols);
                let prev = &done[i * cols..];
                for ((n, &p), &x) in next[..cols].iter_mut().zip(prev).zip(input.row(i)) {
                    *n = p + x as f64;
                }
            }
            pre
        });
        for (o, &(s, e)) in ranges.iter().enumerate() {
            let row = self.row_mut(o);
            row.fill(0.0);
            if s == e {
                continue; // not computable; the compiler never asks for such a row
            }
            let mut count = 0.0f32;
            let stats = &mut row[nl..];
            if let Some(pre) = &prefix {
                let cols = input.num_cols();
                let (lo, hi) = (
                    &pre[s * cols..(s + 1) * cols],
                    &pre[e * cols..(e + 1) * cols],
                );
                count = (hi[0] - lo[0]) as f32;
                for ((a, &h), &l) in stats.iter_mut().zip(&hi[1..]).zip(&lo[1..]) {
                    *a = (h - l) as f32;
                }
            } else {
                for i in s..e {
                    let x = input.row(i);
                    count += x[0];
                    for (a, &v) in stats.iter_mut().zip(&x[1..]) {
                        *a += v;
                    }
                }
            }
            // Kaldi divides rows by multiplying with the inverted counts.
            let inv = 1.0 / count;
            for a in stats.iter_mut() {
                *a *= inv;
            }
            if opts.output_stddevs {
                let (mean, var) = stats.split_at_mut(fd);
                for (v, &m) in var.iter_mut().zip(mean.iter()) {
                    let centered = *v - m * m;
                    *v = centered.max(opts.variance_floor).sqrt();
                }
            }
            let log_count = count.ln();
            for a in &mut row[..nl] {
                *a = log_count;
            }
        }
    }
    /// Adds the input derivative of [`pool_row_range_stats`](Self::pool_row_range_stats)
    /// (`variance_floor` is ignored, as in Kaldi). The count comes from `out_value`'s log
    /// count when there is one, else from the `in_value` count column.
    pub fn backprop_pool_row_range_stats(
        &mut self,
        in_value: MatView<'_>,
        out_value: MatView<'_>,
        out_deriv: MatView<'_>,
        ranges: &[(usize, usize)],
        opts: PoolingOptions,
    ) {
        let nl = opts.num_log_count_features;
        let od_dim = out_deriv.num_cols();
        let fd = (self.num_cols() - 1) / if opts.output_stddevs { 2 } else { 1 };
        // The input value is read only for the counts (no log counts), the output value only
        // for the log counts and standard deviations.
        on_device!(self.place.on_device() && out_deriv.place.on_device() && (nl > 0 || in_value.place.on_device()) && ((nl == 0 && !opts.output_stddevs) || out_value.place.on_device()) && od_dim == nl + self.num_cols() - 1 => super::cuda_ops::backprop_pool_row_range_stats(self, (in_value, out_value, out_deriv), ranges, opts));
        let mut d = vec![0.0f32; od_dim - nl];
        for (o, &(s, e)) in ranges.iter().enumerate() {
            d.copy_from_slice(&out_deriv.row(o)[nl..]);
            if opts.output_stddevs {
                // d/dvar of sqrt(var) = 0.5 / stddev; var = E[x²] − mean², so the mean
                // also gets −2·mean·dvar.
                let y = &out_value.row(o)[nl..];
                let (mean, std) = y.split_at(fd);
                let (dmean, dvar) = d.split_at_mut(fd);
                for (((dv, &sd), dm), &m) in
                    dvar.iter_mut().zip(std).zip(dmean.iter_mut()).zip(mean)
                {
                    *dv = 0.5 * *dv / sd;
                    *dm += -2.0 * m * *dv;
                }
            }
            let count = if nl > 0 {
                out_value.row(o)[0].exp()
            } else {
                (s..e).map(|i| in_value.row(i)[0]).sum::<f32>()
            };
            let inv = 1.0 / count;
            for v in d.iter_mut() {
                *v *= inv;
            }
            for i in s..e {
                for (a, &v) in self.row_mut(i)[1..].iter_mut().zip(&d) {
                    *a += v;
                }
            }
        }
    }
}
