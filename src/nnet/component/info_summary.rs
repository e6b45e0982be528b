//! The parameter summaries of component `info` lines, as Kaldi prints them: succinct floats,
//! `SummarizeVector` percentiles, `PrintParameterStats` for matrices and vectors, and the
//! learning-rate options.

use super::{Component, UpdatableCommon};
use crate::matrix::{Matrix, Vector};

/// How an updatable component's info line starts: `Type, input-dim=…, output-dim=…` and the
/// learning-rate options.
pub fn updatable_header(c: &dyn Component, common: &UpdatableCommon) -> String {
    format!(
        "{}, input-dim={}, output-dim={}, {}",
        c.type_name(),
        c.input_dim(),
        c.output_dim(),
        updatable_info(common)
    )
}

/// `, orthonormal-constraint=…` when the constraint is set, else nothing.
pub fn orthonormal_info(constraint: f32) -> String {
    if constraint != 0.0 {
        format!(
            ", orthonormal-constraint={}",
            crate::io::codec::fmt_g(constraint as f64, 6)
        )
    } else {
        String::new()
    }
}

/// Formats a float the way Kaldi's summaries do: fixed with 0, 1 or 2 decimals by magnitude,
/// one significant digit below 0.01.
pub fn fmt_succinct(f: f32) -> String {
    // The magnitude classes are decided after rounding, so 0.9996 prints as "1.0".
    let a = f.abs();
    if (9.95..10000.0).contains(&a) {
        format!("{f:.0}")
    } else if a >= 0.995 {
        format!("{f:.1}")
    } else if a >= 0.01 {
        format!("{f:.2}")
    } else {
        crate::io::codec::fmt_g(f as f64, 1)
    }
}

/// Mean and standard deviation as Kaldi's summaries compute them: `sqrt(E[x²] − mean²)` in
/// float, the sum accumulated in float and the sum of squares as its BLAS dot product does
/// (in double). Golden info lines depend on this rounding.
pub fn mean_stddev(v: &Vector) -> (f32, f32) {
    // The summary is text: it reads the elements through a host copy.
    let v = v.to_vec();
    let n = v.len() as f32;
    let sum: f32 = v.iter().sum();
    let sumsq = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>() as f32;
    let mean = sum / n;
    let var = sumsq / n - mean * mean;
    (mean, var.sqrt())
}

/// The learning-rate part of an updatable component's info line, in Kaldi's order
/// (l2-regularize before max-change, as golden info.txt files show); `UpdatableCommon::info`
/// delegates here.
pub fn updatable_info(c: &crate::nnet::component::UpdatableCommon) -> String {
    let g = |v: f32| crate::io::codec::fmt_g(v as f64, 6);
    let mut s = format!("learning-rate={}", g(c.learning_rate));
    if c.is_gradient {
        s += ", is-gradient=true";
    }
    if c.l2_regularize != 0.0 {
        s += &format!(", l2-regularize={}", g(c.l2_regularize));
    }
    if c.learning_rate_factor != 1.0 {
        s += &format!(", learning-rate-factor={}", g(c.learning_rate_factor));
    }
    if c.max_change > 0.0 {
        s += &format!(", max-change={}", g(c.max_change));
    }
    s
}

/// Kaldi's vector summary: all values for short vectors, else percentiles, mean and stddev.
pub fn summarize_vector(v: &Vector) -> String {
    summarize_vector_with(v, mean_stddev)
}

/// [`summarize_vector`] with the mean and standard deviation from `mean_stddev` (the
/// nonlinearities' statistics are summarised with Kaldi's float arithmetic).
pub fn summarize_vector_with(v: &Vector, mean_stddev: fn(&Vector) -> (f32, f32)) -> String {
    if v.dim() < 10 {
        let mut s = String::from("[ ");
        for x in v.to_vec() {
            s += &fmt_succinct(x);
            s.push(' ');
        }
        s.push(']');
        return s;
    }
    let (mean, stddev) = mean_stddev(v);
    // Percentiles of a sorted host copy (the summary is text).
    let mut sorted = v.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    // Groups separated by spaces, values within a group by commas (as the label).
    let groups: [&[usize]; 3] = [&[0, 1, 2, 5], &[10, 20, 50, 80, 90], &[95, 98, 99, 100]];
    let mut vals = Vec::new();
    for g in groups {
        let items: Vec<String> = g
            .iter()
            .map(|&p| {
                let i = (sorted.len() - 1) * p / 100;
                fmt_succinct(sorted.get(i).copied().unwrap_or(0.0))
            })
            .collect();
        vals.push(items.join(","));
    }
    format!(
        "[percentiles(0,1,2,5 10,20,50,80,90 95,98,99,100)=({}), mean={}, stddev={}]",
        vals.join(" "),
        crate::io::codec::fmt_g(mean as f64, 3),
        crate::io::codec::fmt_g(stddev as f64, 3)
    )
}

/// `name-rms=…` and, with `norms`, `name-row-norms=[…], name-col-norms=[…]` (Kaldi's
/// PrintParameterStats for a matrix).
pub fn matrix_stats(name: &str, m: &Matrix, norms: bool) -> String {
    let n = (m.num_rows() * m.num_cols()) as f32;
    let v = m.view();
    let rms = (v.trace_mat_mat(v) / n).sqrt();
    let mut s = format!("{name}-rms={}", crate::io::codec::fmt_g(rms as f64, 4));
    if norms {
        s += &format!(
            ", {name}-row-norms={}, {name}-col-norms={}",
            summarize_vector(&v.row_norms()),
            summarize_vector(&v.col_norms())
        );
    }
    s
}

/// `name-{mean,stddev}=m,s` (Kaldi's PrintParameterStats for a vector).
pub fn vector_stats(name: &str, v: &Vector) -> String {
    let (m, s) = mean_stddev(v);
    format!(
        "{name}-{{mean,stddev}}={},{}",
        crate::io::codec::fmt_g(m as f64, 4),
        crate::io::codec::fmt_g(s as f64, 4)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn succinct_floats_match_kaldi_summaries() {
        // Values as they appear in golden info.txt summaries.
        assert_eq!(fmt_succinct(0.8), "0.80");
        assert_eq!(fmt_succinct(1.04), "1.0");
        assert_eq!(fmt_succinct(-0.99), "-0.99");
        assert_eq!(fmt_succinct(0.0003), "0.0003");
        assert_eq!(fmt_succinct(0.005), "0.005");
        assert_eq!(fmt_succinct(12.4), "12");
        assert_eq!(fmt_succinct(0.9996), "1.0");
    }

    #[test]
    fn stddev_rounding_matches_golden_scale_and_offset() {
        // misc-components sao1 scales: Kaldi prints stddev 0.008883 (a plain float sum of
        // squares would give 0.008888).
        let v = Vector::from_vec(vec![
            0.9932863, 0.9952043, 1.003862, 1.009663, 1.010197, 0.9869992, 1.000211, 0.9962454,
            0.9901223, 0.9911237, 1.017438, 1.001811,
        ]);
        let (m, s) = mean_stddev(&v);
        assert_eq!(crate::io::codec::fmt_g(m as f64, 4), "0.9997");
        assert!((s - 0.008883).abs() < 3e-6, "{s}");
    }
}
