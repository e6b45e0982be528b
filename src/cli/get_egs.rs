//! `compnet get-egs` (Kaldi's `nnet3-get-egs`) and `compnet get-egs-dense-targets`
//! (`nnet3-get-egs-dense-targets`): utterances into training examples, chunked by
//! [`crate::egs::splitter`], with Kaldi's random choices reproduced (`egs::kaldi_rand`).

use super::copy_feats::parse_kaldi_bool;
use crate::egs::kaldi_rand::GlibcRand;
use crate::egs::splitter::{parse_num_frames, ExampleGenerationConfig, UtteranceSplitter};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::egs::{NnetExample, NnetExampleWriter, NnetIo};
use crate::io::sparse::{GeneralMatrix, Posterior, SparseMatrix, SparseVector};
use crate::io::table::{RandomAccessMatrixReader, RandomAccessTableReader, SequentialMatrixReader};
use crate::matrix::Matrix;

/// Options shared by both commands (Kaldi's `ExampleGenerationConfig` and the rest).
#[derive(clap::Args, Debug)]
pub struct CommonArgs {
    /// Compress the input (and dense output) matrices.
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
    pub compress: bool,
    /// Frames of left context.
    #[arg(long = "left-context", default_value_t = 0)]
    pub left_context: i32,
    /// Frames of right context.
    #[arg(long = "right-context", default_value_t = 0)]
    pub right_context: i32,
    /// Left context of an utterance's first chunk (-1: --left-context).
    #[arg(long = "left-context-initial", default_value_t = -1, allow_hyphen_values = true)]
    pub left_context_initial: i32,
    /// Right context of an utterance's last chunk (-1: --right-context).
    #[arg(long = "right-context-final", default_value_t = -1, allow_hyphen_values = true)]
    pub right_context_final: i32,
    /// Chunk sizes: the primary size first, then alternatives (`8` or `8,7,9`).
    #[arg(long = "num-frames", default_value = "1")]
    pub num_frames: String,
    /// Overlap between chunks treated as free when choosing chunk sizes.
    #[arg(long = "num-frames-overlap", default_value_t = 0)]
    pub num_frames_overlap: i32,
    /// Output frame subsampling.
    #[arg(long = "frame-subsampling-factor", default_value_t = 1)]
    pub frame_subsampling_factor: i32,
    /// iVectors, one row per --online-ivector-period frames.
    #[arg(long = "online-ivectors", alias = "ivectors", default_value = "")]
    pub online_ivectors: String,
    /// Frames per iVector row.
    #[arg(long = "online-ivector-period", default_value_t = 1)]
    pub online_ivector_period: i32,
    /// Allowed difference between feature and iVector lengths.
    #[arg(long = "length-tolerance", default_value_t = 100)]
    pub length_tolerance: i32,
    /// Allowed difference between (subsampled) feature and target lengths.
    #[arg(long = "targets-length-tolerance", default_value_t = 2)]
    pub targets_length_tolerance: i32,
    /// Features rspecifier.
    pub features: String,
    /// Supervision rspecifier (posteriors or dense targets).
    pub targets: String,
    /// Examples wspecifier.
    pub egs_out: String,
}

/// Options of `compnet get-egs`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of pdfs (the output dimension); required.
    #[arg(long = "num-pdfs", default_value_t = -1, allow_hyphen_values = true)]
    pub num_pdfs: i32,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Options of `compnet get-egs-dense-targets`.
#[derive(clap::Args, Debug)]
pub struct DenseArgs {
    /// Dimension of the targets; required.
    #[arg(long = "num-targets", default_value_t = -1, allow_hyphen_values = true)]
    pub num_targets: i32,
    #[command(flatten)]
    pub common: CommonArgs,
}

enum Supervision {
    Posteriors(RandomAccessTableReader<Posterior>, usize),
    Dense(RandomAccessMatrixReader, usize),
}

/// Rows `first..first+n` of `m`, repeating the edge rows beyond either end.
fn rows_with_padding(m: &Matrix, first: i32, n: i32) -> Matrix {
    let last = m.num_rows() as i32 - 1;
    let mut out = Matrix::zeros(n as usize, m.num_cols());
    for r in 0..n {
        let src = (first + r).clamp(0, last) as usize;
        out.row_mut(r as usize).copy_from_slice(m.row(src));
    }
    out
}

fn generate(c: &CommonArgs, mut sup: Supervision, tool: &str) -> Result<i32> {
    let fsf = c.frame_subsampling_factor;
    let config = ExampleGenerationConfig {
        left_context: c.left_context,
        right_context: c.right_context,
        left_context_initial: c.left_context_initial,
        right_context_final: c.right_context_final,
        num_frames_overlap: c.num_frames_overlap,
        frame_subsampling_factor: fsf,
        num_frames: parse_num_frames(&c.num_frames, fsf)?,
    };
    if c.left_context < 0 || c.right_context < 0 {
        return Err(Error::Usage(
            "--left-context and --right-context must be >= 0".into(),
        ));
    }
    if c.online_ivector_period < 1 {
        return Err(Error::Usage(
            "--online-ivector-period must be positive".into(),
        ));
    }
    let mut splitter = UtteranceSplitter::new(config)?;
    let mut rng = GlibcRand::default();
    let feats = SequentialMatrixReader::open(&c.features)?;
    let mut ivectors = if c.online_ivectors.is_empty() {
        None
    } else {
        Some(RandomAccessMatrixReader::open(&c.online_ivectors)?)
    };
    let mut writer = NnetExampleWriter::open(&c.egs_out)?;
    let (mut num_err, mut num_written) = (0usize, 0usize);
    for item in feats {
        let (key, feats) = item?;
        let n_rows = feats.num_rows() as i32;
        let n_out = (n_rows + fsf - 1) / fsf;
        let target_len = match &mut sup {
            Supervision::Posteriors(r, _) => r.get(&key)?.map(|p| p.len()),
            Supervision::Dense(r, _) => r.get(&key)?.map(|m| m.num_rows()),
        };
        let Some(target_len) = target_len else {
            eprintln!("WARNING ({tool}) No supervision for key {key}");
            num_err += 1;
            continue;
        };
        if (target_len as i32 - n_out).abs() > c.targets_length_tolerance || target_len == 0 {
            eprintln!(
                "WARNING ({tool}) Mismatch in length for utterance {key}: {n_out} (subsampled) feature frames versus {target_len} target frames"
            );
            num_err += 1;
            continue;
        }
        let ivec = match &mut ivectors {
            None => None,
            Some(r) => match r.get(&key)? {
                None => {
                    eprintln!("WARNING ({tool}) No iVectors for utterance {key}");
                    num_err += 1;
                    continue;
                }
                Some(m) => {
                    let covered = m.num_rows() as i32 * c.online_ivector_period;
                    if m.num_rows() == 0 || (n_rows - covered).abs() > c.length_tolerance {
                        eprintln!(
                            "WARNING ({tool}) Length difference between feats {n_rows} and iVectors {} exceeds tolerance {}",
                            m.num_rows(),
                            c.length_tolerance
                        );
                        num_err += 1;
                        continue;
                    }
                    Some(m.clone())
                }
            },
        };
        let chunks = splitter.chunks(n_rows, &mut rng)?;
        if chunks.is_empty() {
            eprintln!(
                "WARNING ({tool}) Not producing egs for utterance {key} because it is too short: {n_rows} frames."
            );
        }
        for chunk in &chunks {
            let total = chunk.left_context + chunk.num_frames + chunk.right_context;
            let start = chunk.first_frame - chunk.left_context;
            let mut eg = NnetExample::default();
            eg.io.push(NnetIo {
                name: "input".into(),
                indexes: (0..total)
                    .map(|i| Index::new(0, i - chunk.left_context, 0))
                    .collect(),
                features: GeneralMatrix::Full(rows_with_padding(&feats, start, total)),
            });
            if let Some(iv) = &ivec {
                // Kaldi draws the frame from a window as long as the whole utterance.
                let frame = rng.rand_int(start, start + n_rows - 1);
                let row = (frame / c.online_ivector_period).clamp(0, iv.num_rows() as i32 - 1);
                eg.io.push(NnetIo {
                    name: "ivector".into(),
                    indexes: vec![Index::new(0, 0, 0)],
                    features: GeneralMatrix::Full(rows_with_padding(iv, row, 1)),
                });
            }
            let first_out = chunk.first_frame / fsf;
            let n_sub = chunk.num_frames / fsf;
            let indexes = (0..n_sub).map(|i| Index::new(0, i * fsf, 0)).collect();
            let features = match &mut sup {
                Supervision::Posteriors(r, dim) => {
                    let post = r.value(&key)?;
                    let mut rows = Vec::with_capacity(n_sub as usize);
                    for i in 0..n_sub {
                        let t = (first_out + i) as usize;
                        let w = chunk.output_weights[i as usize];
                        let mut pairs = post.get(t).cloned().unwrap_or_default();
                        for p in &mut pairs {
                            if p.0 < 0 || p.0 as usize >= *dim {
                                return Err(Error::Usage(format!(
                                    "utterance {key}, frame {t}: pdf id {} is outside 0..{dim} (--num-pdfs)",
                                    p.0
                                )));
                            }
                            p.1 *= w;
                        }
                        rows.push(SparseVector { dim: *dim, pairs });
                    }
                    GeneralMatrix::Sparse(SparseMatrix { rows })
                }
                Supervision::Dense(r, dim) => {
                    let m = r.value(&key)?;
                    if m.num_cols() != *dim {
                        return Err(Error::Usage(format!(
                            "utterance {key}: targets have dim {} but --num-targets={dim}",
                            m.num_cols()
                        )));
                    }
                    let mut part = rows_with_padding(m, first_out, n_sub);
                    for i in 0..n_sub as usize {
                        let w = chunk.output_weights[i];
                        part.row_mut(i).iter_mut().for_each(|v| *v *= w);
                    }
                    GeneralMatrix::Full(part)
                }
            };
            eg.io.push(NnetIo {
                name: "output".into(),
                indexes,
                features,
            });
            if c.compress {
                eg.compress();
            }
            writer.write(&format!("{key}-{}", chunk.first_frame), &eg)?;
            num_written += 1;
        }
    }
    writer.close()?;
    eprintln!("LOG ({tool}) {}", splitter.summary());
    if num_err > 0 {
        eprintln!("WARNING ({tool}) {num_err} utterances had errors and could not be processed.");
    }
    Ok(if num_written == 0 { 1 } else { 0 })
}

/// Runs `compnet get-egs`.
pub fn run(a: Args) -> Result<i32> {
    if a.num_pdfs <= 0 {
        return Err(Error::Usage(
            "get-egs: --num-pdfs option is required".into(),
        ));
    }
    let sup = Supervision::Posteriors(
        RandomAccessTableReader::open(&a.common.targets)?,
        a.num_pdfs as usize,
    );
    generate(&a.common, sup, "get-egs")
}

/// Runs `compnet get-egs-dense-targets`.
pub fn run_dense(a: DenseArgs) -> Result<i32> {
    if a.num_targets <= 0 {
        return Err(Error::Usage(
            "get-egs-dense-targets: --num-targets option is required".into(),
        ));
    }
    let sup = Supervision::Dense(
        RandomAccessMatrixReader::open(&a.common.targets)?,
        a.num_targets as usize,
    );
    generate(&a.common, sup, "get-egs-dense-targets")
}
