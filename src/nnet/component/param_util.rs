//! Helpers shared by the affine family and the other updatable simple components: random
//! initial parameters (drawn from the init generator the caller passes), parameter files named in config lines, the parameter
//! summaries of `info` lines, and a few small parameter ops.

use crate::error::Result;
use crate::frontend::kaldi::config_line::ConfigLine;
use crate::io::TokenReader;
use crate::matrix::{MatView, Matrix, Trans, Vector};
use rand::RngCore;

/// A rows × cols matrix of Gaussian values with this mean and standard deviation.
pub fn gaussian_matrix(
    rows: usize,
    cols: usize,
    mean: f32,
    stddev: f32,
    rng: &mut dyn RngCore,
) -> Matrix {
    let data = (0..rows * cols)
        .map(|_| mean + stddev * crate::random::rand_gauss(rng))
        .collect();
    Matrix::from_vec(rows, cols, data)
}

/// A vector of Gaussian values with this mean and standard deviation.
pub fn gaussian_vector(dim: usize, mean: f32, stddev: f32, rng: &mut dyn RngCore) -> Vector {
    Vector::from_vec(
        (0..dim)
            .map(|_| mean + stddev * crate::random::rand_gauss(rng))
            .collect(),
    )
}

/// The random initialisation of a weight block with `cols` inputs, from a config line:
/// `param-stddev` (default 1/√cols), `bias-stddev` and `bias-mean` (0; only where the type
/// takes it).
pub struct RandomInit {
    pub param_stddev: f32,
    pub bias_mean: f32,
    pub bias_stddev: f32,
}

impl RandomInit {
    /// Reads the options; `default_bias_stddev` is the type's default for `bias-stddev`.
    pub fn from_config(
        cfg: &ConfigLine,
        cols: usize,
        default_bias_stddev: f32,
        with_bias_mean: bool,
    ) -> Result<Self> {
        let param_stddev: f32 = cfg.get_or("param-stddev", 1.0 / (cols as f32).sqrt())?;
        let bias_stddev: f32 = cfg.get_or("bias-stddev", default_bias_stddev)?;
        let bias_mean: f32 = if with_bias_mean {
            cfg.get_or("bias-mean", 0.0)?
        } else {
            0.0
        };
        if param_stddev < 0.0 || bias_stddev < 0.0 {
            return Err(cfg.error("param-stddev and bias-stddev must be >= 0"));
        }
        Ok(RandomInit {
            param_stddev,
            bias_mean,
            bias_stddev,
        })
    }

    /// A rows × cols weight matrix: N(0, param-stddev²).
    pub fn weights(&self, rows: usize, cols: usize, rng: &mut dyn RngCore) -> Matrix {
        gaussian_matrix(rows, cols, 0.0, self.param_stddev, rng)
    }

    /// A bias vector: N(bias-mean, bias-stddev²).
    pub fn bias(&self, dim: usize, rng: &mut dyn RngCore) -> Vector {
        gaussian_vector(dim, self.bias_mean, self.bias_stddev, rng)
    }
}

/// Reads a Kaldi matrix file (text or binary) named by the config option `key`.
pub fn read_matrix_file(cfg: &ConfigLine, key: &str, path: &str) -> Result<Matrix> {
    let bytes = crate::io::read_file(path)
        .map_err(|e| cfg.error_at_value(key, format!("cannot read matrix for {key}: {e}")))?;
    let mut r = TokenReader::detect(&bytes, path)?;
    r.matrix()
}

/// Reads a Kaldi vector file (text or binary) named by the config option `key`.
pub fn read_vector_file(cfg: &ConfigLine, key: &str, path: &str) -> Result<Vector> {
    let bytes = crate::io::read_file(path)
        .map_err(|e| cfg.error_at_value(key, format!("cannot read vector for {key}: {e}")))?;
    let mut r = TokenReader::detect(&bytes, path)?;
    r.vector()
}

/// A required strictly positive integer option.
pub fn require_positive(cfg: &ConfigLine, key: &str) -> Result<usize> {
    let v: i32 = cfg.require(key)?;
    if v <= 0 {
        return Err(cfg.error_at_value(key, format!("{key} must be positive (got {v})")));
    }
    Ok(v as usize)
}

/// An optional strictly positive integer option.
pub fn positive_or(cfg: &ConfigLine, key: &str, default: usize) -> Result<usize> {
    match cfg.get::<i32>(key)? {
        None => Ok(default),
        Some(v) if v > 0 => Ok(v as usize),
        Some(v) => Err(cfg.error_at_value(key, format!("{key} must be positive (got {v})"))),
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
pub fn mean_stddev(v: &[f32]) -> (f32, f32) {
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
pub fn summarize_vector(v: &[f32]) -> String {
    if v.len() < 10 {
        let mut s = String::from("[ ");
        for &x in v {
            s += &fmt_succinct(x);
            s.push(' ');
        }
        s.push(']');
        return s;
    }
    let (mean, stddev) = mean_stddev(v);
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
pub fn vector_stats(name: &str, v: &[f32]) -> String {
    let (m, s) = mean_stddev(v);
    format!(
        "{name}-{{mean,stddev}}={},{}",
        crate::io::codec::fmt_g(m as f64, 4),
        crate::io::codec::fmt_g(s as f64, 4)
    )
}

/// `self += alpha · other` for vectors of equal length.
pub fn vec_add(v: &mut Vector, alpha: f32, other: &Vector) {
    if v.dim() == other.len() {
        v.as_row_mut()
            .add_mat(alpha, MatView::from_slice(other, 1, other.len()), Trans::No);
    }
}

/// Dot product of two vectors (accumulated in f64).
pub fn vec_dot(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    MatView::from_slice(a, 1, a.len()).trace_mat_mat(MatView::from_slice(b, 1, b.len()))
}

/// Adds Gaussian noise of standard deviation `stddev` to a matrix.
pub fn perturb_matrix(m: &mut Matrix, stddev: f32, rng: &mut dyn RngCore) {
    let noise = gaussian_matrix(m.num_rows(), m.num_cols(), 0.0, stddev, rng);
    m.view_mut().add_mat(1.0, noise.view(), Trans::No);
}

/// Adds Gaussian noise of standard deviation `stddev` to a vector.
pub fn perturb_vector(v: &mut Vector, stddev: f32, rng: &mut dyn RngCore) {
    let noise = gaussian_vector(v.dim(), 0.0, stddev, rng);
    vec_add(v, 1.0, &noise);
}

/// Copies a matrix then a vector into `out` (the Vectorize order of the affine family).
pub fn vectorize_into(parts: &[&[f32]], out: &mut [f32]) {
    let mut off = 0;
    for p in parts {
        if let Some(dst) = out.get_mut(off..off + p.len()) {
            dst.copy_from_slice(p);
        }
        off += p.len();
    }
}

/// Fills a vector from `params[*off..]` and advances `off` (UnVectorize); ignores short input.
pub fn take_params_vector(dst: &mut Vector, params: &[f32], off: &mut usize) {
    let n = dst.dim();
    if let Some(src) = params.get(*off..*off + n) {
        dst.copy_from_slice(src);
    }
    *off += n;
}

/// Fills `dst` from `params[*off..]` and advances `off` (UnVectorize); ignores short input.
pub fn take_params(dst: &mut [f32], params: &[f32], off: &mut usize) {
    if let Some(src) = params.get(*off..*off + dst.len()) {
        dst.copy_from_slice(src);
    }
    *off += dst.len();
}

/// Reads a positive i32 after `token` (error names the offset).
pub(super) fn read_pos_i32(r: &mut TokenReader<'_>, token: &str) -> Result<usize> {
    r.expect_token(token)?;
    Ok(super::kaldi_fields::read_positive_count(r, &format!("value after {token}"))? as usize)
}

/// A required positive integer config value.
pub(super) fn cfg_pos(cfg: &ConfigLine, key: &str) -> Result<usize> {
    let v: i32 = cfg.require(key)?;
    if v <= 0 {
        return Err(cfg.error_at_value(key, format!("{key} must be > 0")));
    }
    Ok(v as usize)
}

/// Implements `clone_box`, `as_any` and `as_any_mut` for a component type.
macro_rules! component_boilerplate {
    () => {
        fn clone_box(&self) -> Box<dyn $crate::nnet::component::Component> {
            Box::new(self.clone())
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    };
}
pub(crate) use component_boilerplate;

/// `component_boilerplate!()` plus `as_updatable` and `as_updatable_mut` giving the component
/// itself (for a type that implements `UpdatableComponent`).
macro_rules! updatable_boilerplate {
    () => {
        $crate::nnet::component::param_util::component_boilerplate!();
        fn as_updatable(&self) -> Option<&dyn $crate::nnet::component::UpdatableComponent> {
            Some(self)
        }
        fn as_updatable_mut(
            &mut self,
        ) -> Option<&mut dyn $crate::nnet::component::UpdatableComponent> {
            Some(self)
        }
    };
}
pub(crate) use updatable_boilerplate;

/// The initial output vector of ConstantComponent / ConstantFunctionComponent: `dim` draws
/// from N(output-mean, output-stddev²) (both options default to 0).
pub fn constant_output_from_config(
    cfg: &ConfigLine,
    dim: usize,
    init_rng: &mut dyn RngCore,
) -> Result<Vector> {
    let mean: f32 = cfg.get_or("output-mean", 0.0)?;
    let stddev: f32 = cfg.get_or("output-stddev", 0.0)?;
    if stddev < 0.0 {
        return Err(cfg.error_at_value("output-stddev", "output-stddev must be >= 0"));
    }
    Ok(gaussian_vector(dim, mean, stddev, init_rng))
}

/// Parameter algebra for a (W, b) pair: adds `alpha`·(olin, obias) when the shapes agree.
pub fn pair_add(lin: &mut Matrix, bias: &mut Vector, alpha: f32, olin: &Matrix, obias: &Vector) {
    if (olin.num_rows(), olin.num_cols()) == (lin.num_rows(), lin.num_cols()) {
        lin.view_mut()
            .add_mat(alpha, olin.view(), crate::matrix::Trans::No);
        vec_add(bias, alpha, obias);
    }
}

/// Dot product of two (W, b) pairs (0 when the shapes differ).
pub fn pair_dot(lin: &Matrix, bias: &Vector, olin: &Matrix, obias: &Vector) -> f32 {
    if (olin.num_rows(), olin.num_cols()) != (lin.num_rows(), lin.num_cols()) {
        return 0.0;
    }
    lin.view().trace_mat_mat(olin.view()) + vec_dot(bias, obias)
}

/// Sets a (W, b) pair from `params` in the order `vectorize` uses (W row-major, then b).
pub fn pair_unvectorize(lin: &mut Matrix, bias: &mut Vector, params: &[f32]) {
    let mut off = 0;
    let mut v = lin.to_vec();
    take_params(&mut v, params, &mut off);
    *lin = Matrix::from_vec(lin.num_rows(), lin.num_cols(), v);
    take_params_vector(bias, params, &mut off);
}

/// Implements `UpdatableComponent` for a type whose parameters are `linear` (W) and `bias`
/// (b), with its learning-rate options in `common`.
macro_rules! linear_bias_updatable {
    ($ty:ty) => {
        impl $crate::nnet::component::UpdatableComponent for $ty {
            fn common(&self) -> &$crate::nnet::component::UpdatableCommon {
                &self.common
            }
            fn common_mut(&mut self) -> &mut $crate::nnet::component::UpdatableCommon {
                &mut self.common
            }
            fn num_parameters(&self) -> usize {
                self.linear.num_rows() * (self.linear.num_cols() + 1)
            }
            fn vectorize(&self, out: &mut [f32]) {
                $crate::nnet::component::param_util::vectorize_into(
                    &[&self.linear.to_vec(), &self.bias],
                    out,
                );
            }
            fn unvectorize(&mut self, params: &[f32]) {
                $crate::nnet::component::param_util::pair_unvectorize(
                    &mut self.linear,
                    &mut self.bias,
                    params,
                );
            }
            fn scale(&mut self, alpha: f32) {
                self.linear.view_mut().scale(alpha);
                self.bias.as_row_mut().scale(alpha);
            }
            fn add(&mut self, alpha: f32, other: &dyn $crate::nnet::component::Component) {
                if let Some(o) = other.as_any().downcast_ref::<$ty>() {
                    $crate::nnet::component::param_util::pair_add(
                        &mut self.linear,
                        &mut self.bias,
                        alpha,
                        &o.linear,
                        &o.bias,
                    );
                }
            }
            fn dot_product(&self, other: &dyn $crate::nnet::component::Component) -> f32 {
                other.as_any().downcast_ref::<$ty>().map_or(0.0, |o| {
                    $crate::nnet::component::param_util::pair_dot(
                        &self.linear,
                        &self.bias,
                        &o.linear,
                        &o.bias,
                    )
                })
            }
            fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
                $crate::nnet::component::param_util::perturb_matrix(&mut self.linear, stddev, rng);
                $crate::nnet::component::param_util::perturb_vector(&mut self.bias, stddev, rng);
            }
        }
    };
}
pub(crate) use linear_bias_updatable;

/// Implements `UpdatableComponent` for a type whose parameters are a list of vectors (in
/// Vectorize order), with its learning-rate options in `common`.
macro_rules! vector_params_updatable {
    ($ty:ty, $($field:ident),+) => {
        impl $crate::nnet::component::UpdatableComponent for $ty {
            fn common(&self) -> &$crate::nnet::component::UpdatableCommon {
                &self.common
            }
            fn common_mut(&mut self) -> &mut $crate::nnet::component::UpdatableCommon {
                &mut self.common
            }
            fn num_parameters(&self) -> usize {
                0 $(+ self.$field.dim())+
            }
            fn vectorize(&self, out: &mut [f32]) {
                $crate::nnet::component::param_util::vectorize_into(&[$(&self.$field),+], out);
            }
            fn unvectorize(&mut self, params: &[f32]) {
                let mut off = 0;
                $($crate::nnet::component::param_util::take_params_vector(
                    &mut self.$field,
                    params,
                    &mut off,
                );)+
            }
            fn scale(&mut self, alpha: f32) {
                $(self.$field.scale(alpha);)+
            }
            fn add(&mut self, alpha: f32, other: &dyn $crate::nnet::component::Component) {
                if let Some(o) = other.as_any().downcast_ref::<$ty>() {
                    $($crate::nnet::component::param_util::vec_add(
                        &mut self.$field,
                        alpha,
                        &o.$field,
                    );)+
                }
            }
            fn dot_product(&self, other: &dyn $crate::nnet::component::Component) -> f32 {
                match other.as_any().downcast_ref::<$ty>() {
                    Some(o) => {
                        0.0 $(+ $crate::nnet::component::param_util::vec_dot(&self.$field, &o.$field))+
                    }
                    None => 0.0,
                }
            }
            fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
                $($crate::nnet::component::param_util::perturb_vector(&mut self.$field, stddev, rng);)+
            }
        }
    };
}
pub(crate) use vector_params_updatable;

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
        let v = [
            0.9932863, 0.9952043, 1.003862, 1.009663, 1.010197, 0.9869992, 1.000211, 0.9962454,
            0.9901223, 0.9911237, 1.017438, 1.001811,
        ];
        let (m, s) = mean_stddev(&v);
        assert_eq!(crate::io::codec::fmt_g(m as f64, 4), "0.9997");
        assert!((s - 0.008883).abs() < 3e-6, "{s}");
    }
}
