//! Initial component parameters from config lines: random values drawn from the init
//! generator the caller passes (`RandomInit`: param-stddev, bias-stddev, bias-mean), parameter
//! files named in config lines, and the positive-integer options that size them.

use crate::error::Result;
use crate::io::TokenReader;
use crate::kaldi_rand::kaldi_randn;
use crate::matrix::{MatViewMut, Matrix, Vector};
use crate::nnet::config_line::ConfigLine;
use rand::RngCore;

/// A rows × cols matrix of Gaussian values with this mean and standard deviation, as Kaldi
/// makes one: `SetRandn` (one [`RandomState`](crate::kaldi_rand::RandomState) from `rng`,
/// Box–Muller pairs along each row), then `Scale(stddev)` and `Add(mean)`.
pub fn gaussian_matrix(
    rows: usize,
    cols: usize,
    mean: f32,
    stddev: f32,
    rng: &mut dyn RngCore,
) -> Matrix {
    let mut m = Matrix::from_vec(rows, cols, kaldi_randn(rows, cols, rng));
    scale_add(&mut m.view_mut(), stddev, mean);
    m
}

/// A vector of Gaussian values with this mean and standard deviation (Kaldi's `SetRandn`,
/// `Scale`, `Add` on a vector: the matrix's fill on one row).
pub fn gaussian_vector(dim: usize, mean: f32, stddev: f32, rng: &mut dyn RngCore) -> Vector {
    let mut m = Matrix::from_vec(1, dim, kaldi_randn(1, dim, rng));
    scale_add(&mut m.view_mut(), stddev, mean);
    Vector::from_vec(m.to_vec())
}

/// `x·stddev + mean` in float, each step rounded as Kaldi's `Scale` then `Add` round it
/// (BLAS's scal with a zero factor writes +0, and so does adding 0 here).
fn scale_add(m: &mut MatViewMut<'_>, stddev: f32, mean: f32) {
    if stddev == 0.0 {
        m.set_zero();
    } else {
        m.scale(stddev);
    }
    m.add_const(mean);
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
        let param_stddev: f32 = cfg.get_or("param-stddev", default_stddev(cols))?;
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

/// Kaldi's default `param-stddev` for `cols` inputs: 1/√cols computed in double, then
/// stored as float.
pub fn default_stddev(cols: usize) -> f32 {
    (1.0 / (cols as f64).sqrt()) as f32
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

/// A required positive integer config value.
pub(super) fn cfg_pos(cfg: &ConfigLine, key: &str) -> Result<usize> {
    let v: i32 = cfg.require(key)?;
    if v <= 0 {
        return Err(cfg.error_at_value(key, format!("{key} must be > 0")));
    }
    Ok(v as usize)
}

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
