//! The LSTM cell nonlinearity and its backward pass (Kaldi's ComputeLstmNonlinearity and
//! BackpropLstmNonlinearity), fused per frame as Kaldi's kernels are.
//!
//! Input columns: `[i_part, f_part, c_part, o_part, c_prev]`, C each, plus three dropout
//! scales `(i, f, o)` when `use_dropout`. Output: `[c_t, m_t]`. `params` is 3 × C: the
//! peephole weights w_ic, w_fc, w_oc.

use super::buf::on_device;
use super::simd::{self, LstmRow, LstmRowGrads};
use super::{MatView, MatViewMut, Real, Vector, Vector64};

/// Row `r` of the cell input split into its parts; `params` holds the peephole weights.
fn lstm_row<'a>(x: &'a [Real], params: &MatView<'a>, c: usize, use_dropout: bool) -> LstmRow<'a> {
    LstmRow {
        i_part: &x[..c],
        f_part: &x[c..2 * c],
        c_part: &x[2 * c..3 * c],
        o_part: &x[3 * c..4 * c],
        c_prev: &x[4 * c..5 * c],
        w_ic: params.row(0),
        w_fc: params.row(1),
        w_oc: params.row(2),
        scales: if use_dropout {
            [x[5 * c], x[5 * c + 1], x[5 * c + 2]]
        } else {
            [1.0; 3]
        },
    }
}

/// Where the backward pass adds the per-unit statistics: the sums (5 × C, in f64) of the
/// five nonlinearities' values and derivatives, order i, f, tanh(c_part), o, tanh(c_t).
pub struct LstmStatsSums<'s> {
    /// Σ of the values.
    pub value_sum: &'s mut Vector64,
    /// Σ of the derivatives.
    pub deriv_sum: &'s mut Vector64,
}

/// The operands of [`backprop_lstm_nonlinearity`] besides what it writes.
#[derive(Clone, Copy)]
pub struct LstmBackpropInput<'a> {
    /// The forward input (see the module doc).
    pub in_value: MatView<'a>,
    /// The 3 × C peephole weights.
    pub params: MatView<'a>,
    /// The derivative with respect to the output `[c_t, m_t]`.
    pub out_deriv: MatView<'a>,
    /// Whether the input carries the three dropout scales.
    pub use_dropout: bool,
    /// 5 × C self-repair terms (0 where a unit is not repaired): sigmoids are pushed
    /// towards 0.5 and tanh units towards 0 by this much.
    pub self_repair: &'a Vector,
}

impl MatViewMut<'_> {
    /// `self = [c_t, m_t]` of the LSTM cell for every row of `input` (Kaldi's
    /// ComputeLstmNonlinearity); `params` is 3 × C.
    pub fn compute_lstm_nonlinearity(
        &mut self,
        input: MatView<'_>,
        params: MatView<'_>,
        use_dropout: bool,
    ) {
        let c = params.num_cols();
        assert_eq!(params.num_rows(), 3, "compute_lstm_nonlinearity: params");
        assert_eq!(
            self.num_cols(),
            2 * c,
            "compute_lstm_nonlinearity: output dim"
        );
        assert!(
            input.num_cols() == 5 * c + if use_dropout { 3 } else { 0 },
            "compute_lstm_nonlinearity: input dim"
        );
        on_device!(self.place.on_device() && input.place.on_device() && params.place.on_device() => super::cuda_ops::lstm_cell(self, input, params, use_dropout));
        for r in 0..input.num_rows().min(self.num_rows()) {
            let x = lstm_row(input.row(r), &params, c, use_dropout);
            let (c_out, m_out) = self.row_mut(r).split_at_mut(c);
            simd::lstm_cell_row(x, c_out, m_out);
        }
    }
}

/// The LSTM cell's backward pass (Kaldi's BackpropLstmNonlinearity): writes the input
/// derivative into `in_deriv` (when given), adds the peephole derivative (3 × C, row-major,
/// f64) into `params_deriv` and the value/derivative sums into `stats` (when given). With
/// every matrix on the GPU it runs as kernels (`cuda_ops::lstm_backprop`), the f64 sums being
/// added on the host from per-unit totals read back.
pub fn backprop_lstm_nonlinearity(
    a: LstmBackpropInput<'_>,
    mut in_deriv: Option<&mut MatViewMut<'_>>,
    params_deriv: Option<&mut Vector64>,
    stats: Option<LstmStatsSums<'_>>,
) {
    let LstmBackpropInput {
        in_value,
        params,
        out_deriv,
        use_dropout,
        self_repair: repair,
    } = a;
    let repair = &repair.data[..];
    let c = params.num_cols();
    assert_eq!(params.num_rows(), 3, "backprop_lstm_nonlinearity: params");
    assert_eq!(
        repair.len(),
        5 * c,
        "backprop_lstm_nonlinearity: self-repair"
    );
    let n = in_value.num_rows();
    let in_width = 5 * c + if use_dropout { 3 } else { 0 };
    assert!(
        out_deriv.num_rows() == n
            && out_deriv.num_cols() >= 2 * c
            && in_value.num_cols() >= in_width
            && in_deriv
                .as_ref()
                .is_none_or(|d| d.num_rows() >= n && d.num_cols() >= in_width)
            && params_deriv.as_ref().is_none_or(|p| p.dim() >= 3 * c)
            && stats
                .as_ref()
                .is_none_or(|st| st.value_sum.dim() >= 5 * c && st.deriv_sum.dim() >= 5 * c),
        "backprop_lstm_nonlinearity: dimensions"
    );
    on_device!(in_value.place.on_device()
    && params.place.on_device()
    && out_deriv.place.on_device()
    && in_deriv.as_ref().is_none_or(|d| d.place.on_device())
    => super::cuda_ops::lstm_backprop(
        a,
        in_deriv,
        params_deriv.map(|p| &mut p.data[..]),
        stats.map(|st| (&mut st.value_sum.data[..], &mut st.deriv_sum.data[..])),
    ));
    // Outputs the caller did not ask for go to scratch rows, so one kernel serves all cases.
    let mut in_scratch = vec![0.0; if in_deriv.is_some() { 0 } else { 5 * c }];
    let mut params_scratch = vec![0.0f64; if params_deriv.is_some() { 0 } else { 3 * c }];
    let mut stats_scratch = vec![0.0f64; if stats.is_some() { 0 } else { 10 * c }];
    let mut scale_terms = vec![0.0; 3 * c];
    let half = stats_scratch.len() / 2;
    let (value_scratch, deriv_scratch) = stats_scratch.split_at_mut(half);
    let (value_sum, deriv_sum) = match stats {
        Some(st) => (&mut st.value_sum.data[..], &mut st.deriv_sum.data[..]),
        None => (value_scratch, deriv_scratch),
    };
    let params_deriv: &mut [f64] = match params_deriv {
        Some(p) => &mut p.data,
        None => &mut params_scratch,
    };
    for r in 0..n {
        let x = lstm_row(in_value.row(r), &params, c, use_dropout);
        let row_deriv: &mut [Real] = match in_deriv.as_deref_mut() {
            Some(g) => &mut g.row_mut(r)[..5 * c],
            None => &mut in_scratch,
        };
        simd::lstm_cell_backprop_row(
            x,
            out_deriv.row(r),
            repair,
            LstmRowGrads {
                in_deriv: row_deriv,
                params_deriv: &mut *params_deriv,
                value_sum: &mut *value_sum,
                deriv_sum: &mut *deriv_sum,
                scale_terms: &mut scale_terms,
            },
        );
        // Derivatives w.r.t. the three dropout scales (they feed nothing trainable in
        // practice, but this keeps Backprop the true derivative), summed in unit order.
        if use_dropout {
            let mut scale_deriv = [0.0f32; 3];
            for (k, d) in scale_deriv.iter_mut().enumerate() {
                for &t in &scale_terms[k * c..(k + 1) * c] {
                    *d += t;
                }
            }
            if let Some(g) = in_deriv.as_deref_mut() {
                g.row_mut(r)[5 * c..5 * c + 3].copy_from_slice(&scale_deriv);
            }
        }
    }
}

/// Per nonlinearity k (5 blocks of C) and unit j: the self-repair term of the LSTM's backward
/// pass, `config[k + 5]` where `deriv_sum[k·C + j] / (1 + count) < config[k]` (the divisor
/// rounded to float, the comparison in f64, as Kaldi), else 0; and per nonlinearity the number
/// of units with a nonzero term. `config` is Kaldi's `<SelfRepairConfig>`: five thresholds,
/// then five scales. Returns zeros where the sums are missing (fused: divide, compare, select,
/// count).
pub fn lstm_self_repair_scales(
    deriv_sum: &Vector64,
    count: f64,
    config: &[Real; 10],
    cell_dim: usize,
) -> (Vector, Vector64) {
    let c = cell_dim;
    let mut out = vec![0.0 as Real; 5 * c];
    let mut units = vec![0.0f64; 5];
    // Kaldi divides the derivative sum by 1 + count (in float), so a model without
    // statistics repairs every unit.
    let denom = (1.0 + count) as f32 as f64;
    if deriv_sum.dim() == 5 * c {
        for k in 0..5 {
            let thr = config[k] as f64;
            let scale = config[k + 5];
            for j in 0..c {
                if deriv_sum.data[k * c + j] / denom < thr {
                    out[k * c + j] = scale;
                }
            }
        }
    }
    for (k, n) in units.iter_mut().enumerate() {
        *n = out[k * c..(k + 1) * c]
            .iter()
            .filter(|&&s| s != 0.0)
            .count() as f64;
    }
    (Vector::from_vec(out), Vector64::from_vec(units))
}
