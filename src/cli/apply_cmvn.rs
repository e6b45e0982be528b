//! `compnet apply-cmvn` (Kaldi's `apply-cmvn`): cepstral mean (and with `--norm-vars`,
//! variance) normalisation from CMVN statistics, per utterance, per speaker (`--utt2spk`) or
//! from one statistics file.
//!
//! Statistics are Kaldi's `2 x (dim+1)` double matrix: row 0 the sums of each dimension and
//! the count last, row 1 the sums of squares. The arithmetic is Kaldi's, rounding included:
//! the mean offset is `(float)(-1/count)` times the double sum, rounded to float once, and
//! added to the features; with variances, the per-dimension scale and offset are computed in
//! double, stored as floats, and applied as a multiply then an add.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::sparse::GeneralMatrix;
use crate::io::table::{
    parse_rspecifier, read_object, DoubleMatrix, MatrixWriter, RandomAccessTableReader,
    SequentialMatrixReader, SequentialTableReader, TableWriter,
};
use crate::log::{fmt_g, log, warn};
use crate::matrix::Matrix;

command_args! {
    /// Options of `compnet apply-cmvn`.
    #[usage("compnet apply-cmvn [options] (<cmvn-stats-rspecifier>|<cmvn-stats-rxfilename>) <feats-rspecifier> <feats-wspecifier>")]
    #[example("compnet apply-cmvn --utt2spk=ark:data/train/utt2spk \
                  scp:data/train/cmvn.scp scp:data/train/feats.scp ark:-")]
    pub struct Args {
        /// Rspecifier of the utterance-to-speaker map (statistics are then per speaker).
        #[arg(long, default_value = "")]
        pub utt2spk: String,
        /// Normalise the variances too.
        #[arg(long = "norm-vars", kaldi_bool = "false")]
        pub norm_vars: bool,
        /// Normalise the means (false: the features are copied unchanged).
        #[arg(long = "norm-means", kaldi_bool = "true")]
        pub norm_means: bool,
        /// Dimensions left unnormalised, colon-separated (e.g. 13:14:15).
        #[arg(long = "skip-dims", default_value = "")]
        pub skip_dims: String,
        /// Apply CMVN in reverse (not implemented; only false is accepted).
        #[arg(long, kaldi_bool = "false")]
        pub reverse: bool,
        /// `(<cmvn-stats-rspecifier>|<cmvn-stats-rxfilename>) <feats-rspecifier> <feats-wspecifier>`.
        pub args: Vec<String>,
    }
}

const P: &str = "compnet apply-cmvn";

/// Kaldi's `FakeStatsForSomeDims`: the skipped dimensions get mean 0 and variance 1.
fn fake_stats_for_dims(dims: &[usize], stats: &mut DoubleMatrix, what: &str) -> Result<()> {
    if stats.rows != 2 || stats.cols < 2 {
        return Err(Error::Usage(format!(
            "{what}: --skip-dims needs 2-row statistics with variances, got {}x{}",
            stats.rows, stats.cols
        )));
    }
    let dim = stats.cols - 1;
    let count = stats.data[dim];
    for &d in dims {
        if d >= dim {
            return Err(Error::Usage(format!(
                "--skip-dims: dimension {d} is out of range for {dim}-dimensional statistics"
            )));
        }
        stats.data[d] = 0.0;
        stats.data[stats.cols + d] = count;
    }
    Ok(())
}

/// Normalises `feats` with `stats` (Kaldi's `ApplyCmvn`); `what` names the statistics.
pub fn apply_cmvn(
    stats: &DoubleMatrix,
    norm_vars: bool,
    feats: &Matrix,
    what: &str,
) -> Result<Matrix> {
    let (rows, cols) = (feats.num_rows(), feats.num_cols());
    if stats.rows < 1 || stats.rows > 2 || stats.cols != cols + 1 {
        return Err(Error::Compute(format!(
            "{what}: dimension mismatch: cmvn {}x{}, feats {rows}x{cols}",
            stats.rows, stats.cols
        )));
    }
    if stats.rows == 1 && norm_vars {
        return Err(Error::Compute(format!(
            "{what}: variance normalization requested but no variance statistics are supplied"
        )));
    }
    let dim = cols;
    let count = stats.data[dim];
    if count.is_nan() || count < 1.0 {
        return Err(Error::Compute(format!(
            "{what}: insufficient statistics for cepstral mean and variance normalization: \
             count = {}",
            fmt_g(count)
        )));
    }
    let mut x = feats.to_vec();
    if !norm_vars {
        let alpha = (-1.0 / count) as f32;
        let offset: Vec<f32> = stats.data[..dim]
            .iter()
            .map(|&s| (f64::from(alpha) * s) as f32)
            .collect();
        for row in x.chunks_exact_mut(dim.max(1)) {
            for (v, o) in row.iter_mut().zip(&offset) {
                *v += o;
            }
        }
        return Ok(Matrix::from_vec(rows, cols, x));
    }
    let mut offset = vec![0f32; dim];
    let mut scale = vec![0f32; dim];
    for d in 0..dim {
        let mean = stats.data[d] / count;
        let mut var = stats.data[stats.cols + d] / count - mean * mean;
        let floor = 1.0e-20;
        if var < floor {
            warn(
                P,
                &format!(
                    "Flooring cepstral variance from {} to {}",
                    fmt_g(var),
                    fmt_g(floor)
                ),
            );
            var = floor;
        }
        let s = 1.0 / var.sqrt();
        if !s.is_finite() {
            return Err(Error::Compute(format!(
                "{what}: NaN or infinity in cepstral mean/variance computation"
            )));
        }
        offset[d] = (-(mean * s)) as f32;
        scale[d] = s as f32;
    }
    for row in x.chunks_exact_mut(dim.max(1)) {
        for ((v, s), o) in row.iter_mut().zip(&scale).zip(&offset) {
            *v = *v * s + o;
        }
    }
    Ok(Matrix::from_vec(rows, cols, x))
}

/// Parses `--skip-dims` (colon-separated non-negative integers).
fn parse_skip_dims(s: &str) -> Result<Vec<usize>> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(':')
        .map(|p| p.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            Error::Usage(format!(
                "bad --skip-dims option '{s}' (should be a colon-separated list of integers)"
            ))
        })
}

/// Runs the command (exit status 1 when no utterance was normalised, as Kaldi's).
pub fn run(a: Args) -> Result<i32> {
    let [cmvn_in, feats_in, feats_out] = Args::positionals(&a.args)?;
    if a.norm_vars && !a.norm_means {
        return Err(Error::Usage(
            "you cannot normalize the variance but not the mean".into(),
        ));
    }
    if a.reverse {
        return Err(Error::Usage(
            "--reverse=true is not implemented; only Kaldi's default is accepted".into(),
        ));
    }
    if !a.norm_means {
        let mut writer = TableWriter::<GeneralMatrix>::open(feats_out)?;
        let mut num_done = 0usize;
        for item in SequentialTableReader::<GeneralMatrix>::open(feats_in)? {
            let (key, m) = item?;
            writer.write(&key, &m)?;
            num_done += 1;
        }
        writer.close()?;
        log(P, &format!("Copied {num_done} utterances."));
        return Ok(if num_done != 0 { 0 } else { 1 });
    }
    let skip_dims = parse_skip_dims(&a.skip_dims)?;
    let (mut num_done, mut num_err) = (0usize, 0usize);
    let reader = SequentialMatrixReader::open(feats_in)?;
    let mut writer = MatrixWriter::open(feats_out)?;
    if parse_rspecifier(cmvn_in).is_ok() {
        let mut stats_reader = RandomAccessTableReader::<DoubleMatrix>::open(cmvn_in)?;
        let mut utt2spk = match a.utt2spk.as_str() {
            "" => None,
            r => Some(RandomAccessTableReader::<String>::open(r)?),
        };
        for item in reader {
            let (utt, feats) = item?;
            let key = match utt2spk.as_mut() {
                None => Some(utt.clone()),
                Some(map) => map.get(&utt)?.cloned(),
            };
            let stats = match &key {
                Some(k) => stats_reader.get(k)?.cloned(),
                None => None,
            };
            let Some(mut stats) = stats else {
                warn(
                    P,
                    &format!(
                        "No normalization statistics available for key {utt}, producing no \
                         output for this utterance"
                    ),
                );
                num_err += 1;
                continue;
            };
            let what = format!("{cmvn_in}: statistics of {}", key.unwrap_or_default());
            if !skip_dims.is_empty() {
                fake_stats_for_dims(&skip_dims, &mut stats, &what)?;
            }
            writer.write(&utt, &apply_cmvn(&stats, a.norm_vars, &feats, &what)?)?;
            num_done += 1;
        }
    } else {
        if !a.utt2spk.is_empty() {
            return Err(Error::Usage(format!(
                "--utt2spk is not compatible with a single statistics file {cmvn_in} (did you \
                 forget ark:?)"
            )));
        }
        let mut stats: DoubleMatrix = read_object(cmvn_in)?;
        if !skip_dims.is_empty() {
            fake_stats_for_dims(&skip_dims, &mut stats, cmvn_in)?;
        }
        for item in reader {
            let (utt, feats) = item?;
            writer.write(&utt, &apply_cmvn(&stats, a.norm_vars, &feats, cmvn_in)?)?;
            num_done += 1;
        }
    }
    writer.close()?;
    let what = if a.norm_vars {
        "cepstral mean and variance normalization"
    } else {
        "cepstral mean normalization"
    };
    log(
        P,
        &format!("Applied {what} to {num_done} utterances, errors on {num_err}"),
    );
    Ok(if num_done != 0 { 0 } else { 1 })
}
