//! `compnet get-egs` (Kaldi's `nnet3-get-egs`) and `compnet get-egs-dense-targets`
//! (`nnet3-get-egs-dense-targets`): utterances into training examples, chunked by
//! [`crate::egs::splitter`], with Kaldi's random choices reproduced (`egs::kaldi_rand`).

use super::kaldi_args::parse_kaldi_bool;
use crate::cli::args::command_args;
use crate::egs::cut::{chunk_example, rows_with_padding, sparse_row};
use crate::egs::splitter::{parse_num_frames, ExampleGenerationConfig, UtteranceSplitter};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::egs::{NnetExampleWriter, NnetIo};
use crate::io::sparse::{GeneralMatrix, PdfSupervision, SparseMatrix};
use crate::io::table::{RandomAccessMatrixReader, RandomAccessTableReader, SequentialTableReader};
use crate::kaldi_rand::GlibcRand;

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
    #[arg(long = "online-ivectors", default_value = "")]
    pub online_ivectors: String,
    /// Alias of --online-ivectors (used when that one is not given).
    #[arg(long = "ivectors", default_value = "")]
    pub ivectors: String,
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

command_args! {
    /// Options of `compnet get-egs`.
    #[usage("compnet get-egs [options] <features-rspecifier> <pdf-post-rspecifier> <egs-out>")]
    #[example("compnet get-egs --num-pdfs=2658 --left-context=12 --right-context=9 --num-frames=8 scp:feats.scp ark:post.ark ark:cegs.1.ark")]
    pub struct Args {
        /// Number of pdfs (the output dimension); required.
        #[arg(long = "num-pdfs", default_value_t = -1, allow_hyphen_values = true)]
        pub num_pdfs: i32,
        #[command(flatten)]
        pub common: CommonArgs,
    }
}

command_args! {
    /// Options of `compnet get-egs-dense-targets`.
    #[usage("compnet get-egs-dense-targets --num-targets=<n> [options] <features-rspecifier> <targets-rspecifier> <egs-out>")]
    #[example("compnet get-egs-dense-targets --num-targets=26 --left-context=12 --right-context=9 --num-frames=8 scp:feats.scp scp:targets.scp ark:egs.1.ark")]
    pub struct DenseArgs {
        /// Dimension of the targets, checked when given (-1: any).
        #[arg(long = "num-targets", default_value_t = -1, allow_hyphen_values = true)]
        pub num_targets: i32,
        #[command(flatten)]
        pub common: CommonArgs,
    }
}

enum Supervision {
    /// Pdf posteriors and the number of pdfs.
    Posteriors(RandomAccessTableReader<PdfSupervision>, usize),
    /// Dense targets and the dimension they must have (`None`: any).
    Dense(RandomAccessMatrixReader, Option<usize>),
}

fn generate(c: &CommonArgs, mut sup: Supervision, tool: &str) -> Result<i32> {
    let fsf = c.frame_subsampling_factor;
    let (num_frames, rounded) = parse_num_frames(&c.num_frames, fsf)?;
    if rounded {
        let list: Vec<String> = num_frames.iter().map(|n| n.to_string()).collect();
        eprintln!(
            "LOG ({tool}) Rounding up --num-frames={} to multiples of --frame-subsampling-factor={fsf}, to: {}",
            c.num_frames,
            list.join(",")
        );
    }
    const MAX_CONTEXT: i32 = 1 << 20;
    for (name, v) in [
        ("left-context", c.left_context),
        ("right-context", c.right_context),
        ("left-context-initial", c.left_context_initial),
        ("right-context-final", c.right_context_final),
    ] {
        // The -initial / -final ones are unset when negative, as in Kaldi.
        let optional = name.ends_with("initial") || name.ends_with("final");
        if v > MAX_CONTEXT || (!optional && v < 0) {
            return Err(Error::Usage(format!(
                "--{name}={v} is out of range (0..={MAX_CONTEXT})"
            )));
        }
    }
    if c.online_ivector_period < 1 {
        return Err(Error::Usage(
            "--online-ivector-period must be positive".into(),
        ));
    }
    let ivector_spec = if c.online_ivectors.is_empty() {
        c.ivectors.as_str()
    } else {
        c.online_ivectors.as_str()
    };
    let config = ExampleGenerationConfig {
        left_context: c.left_context,
        right_context: c.right_context,
        left_context_initial: c.left_context_initial,
        right_context_final: c.right_context_final,
        num_frames_overlap: c.num_frames_overlap,
        frame_subsampling_factor: fsf,
        num_frames,
    };
    let mut splitter = UtteranceSplitter::new(config)?;
    let mut rng = GlibcRand::default();
    let feats_reader = SequentialTableReader::<GeneralMatrix>::open(&c.features)?;
    let mut ivectors = if ivector_spec.is_empty() {
        None
    } else {
        Some(RandomAccessMatrixReader::open(ivector_spec)?)
    };
    let mut writer = NnetExampleWriter::open(&c.egs_out)?;
    let mut num_err = 0usize;
    for item in feats_reader {
        let (key, feats) = item?;
        let n_rows = feats.num_rows() as i32;
        if n_rows == 0 {
            eprintln!("WARNING ({tool}) Not producing egs for utterance {key}: it has no frames.");
            num_err += 1;
            continue;
        }
        let has = match &mut sup {
            Supervision::Posteriors(r, _) => r.has_key(&key)?,
            Supervision::Dense(r, _) => r.has_key(&key)?,
        };
        if !has {
            match sup {
                Supervision::Posteriors(..) => {
                    eprintln!("WARNING ({tool}) No pdf-level posterior for key {key}")
                }
                Supervision::Dense(..) => {
                    eprintln!("WARNING ({tool}) No target matrix for key {key}")
                }
            }
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
                    let covered = m.num_rows() as i64 * c.online_ivector_period as i64;
                    if (n_rows as i64 - covered).abs() > c.length_tolerance as i64
                        || m.num_rows() == 0
                    {
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
        let target_len = match &mut sup {
            Supervision::Posteriors(r, _) => r.value(&key)?.0.len(),
            Supervision::Dense(r, _) => r.value(&key)?.num_rows(),
        } as i32;
        let expected = (n_rows + fsf - 1) / fsf;
        if target_len == 0 {
            eprintln!("WARNING ({tool}) The supervision of utterance {key} is empty.");
            num_err += 1;
            continue;
        }
        if (target_len - expected).abs() > c.targets_length_tolerance {
            if fsf == 1 {
                eprintln!(
                    "WARNING ({tool}) Supervision does not have expected length for utterance {key}: expected length = {n_rows}, got {target_len}"
                );
            } else {
                eprintln!(
                    "WARNING ({tool}) Supervision does not have expected length for utterance {key}: expected length = ({n_rows} + {fsf} - 1) / {fsf} = {expected}, got: {target_len} (note: --frame-subsampling-factor={fsf})"
                );
            }
            num_err += 1;
            continue;
        }
        if let Supervision::Dense(r, Some(dim)) = &mut sup {
            let got = r.value(&key)?.num_cols();
            if got != *dim {
                return Err(Error::Usage(format!(
                    "utterance {key}: the targets have dimension {got} but --num-targets={dim}"
                )));
            }
        }
        let chunks = splitter.chunks(n_rows, &mut rng)?;
        if chunks.is_empty() {
            eprintln!(
                "WARNING ({tool}) Not producing egs for utterance {key} because it is too short: {n_rows} frames."
            );
        }
        for chunk in &chunks {
            let mut eg = chunk_example(&feats, chunk)?;
            if let Some(iv) = &ivec {
                let start = chunk.first_frame - chunk.left_context;
                // Kaldi draws the frame from a window as long as the whole utterance that
                // starts at the chunk's first input frame.
                let frame = rng.rand_int(start, start + n_rows - 1);
                let row = (frame / c.online_ivector_period).clamp(0, iv.num_rows() as i32 - 1);
                eg.io.push(NnetIo {
                    name: "ivector".into(),
                    indexes: vec![Index::new(0, 0, 0)],
                    features: GeneralMatrix::Full(rows_with_padding(iv, row, 1)),
                });
            }
            let first_out = chunk.first_frame / fsf;
            let n_sub = (chunk.num_frames / fsf) as usize;
            let indexes = (0..n_sub as i32)
                .map(|i| Index::new(0, i * fsf, 0))
                .collect();
            let features = match &mut sup {
                Supervision::Posteriors(r, dim) => {
                    let post = &r.value(&key)?.0;
                    let mut rows = Vec::with_capacity(n_sub);
                    for (i, &w) in chunk.output_weights.iter().enumerate().take(n_sub) {
                        let t = first_out as usize + i;
                        let mut pairs = post.get(t).cloned().unwrap_or_default();
                        for p in &mut pairs {
                            p.1 *= w;
                        }
                        rows.push(sparse_row(*dim, &pairs).map_err(|bad| {
                            Error::Usage(format!(
                                "utterance {key}, frame {t}: pdf id {bad} is outside 0..{dim} (--num-pdfs={dim})"
                            ))
                        })?);
                    }
                    GeneralMatrix::Sparse(SparseMatrix { rows })
                }
                // Kaldi does not weight dense targets by the chunk overlap.
                Supervision::Dense(r, _) => {
                    GeneralMatrix::Full(rows_with_padding(r.value(&key)?, first_out, n_sub))
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
        }
    }
    writer.close()?;
    if num_err > 0 {
        crate::log::warn(
            tool,
            &format!("{num_err} utterances had errors and could not be processed."),
        );
    }
    for line in splitter.summary() {
        crate::log::log(tool, &line);
    }
    if splitter.total_chunks == 0 {
        // Kaldi exits with status 1 here too.
        return Err(Error::Usage(format!("{tool}: no examples were written")));
    }
    Ok(0)
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
    let dim = (a.num_targets >= 0).then_some(a.num_targets as usize);
    let sup = Supervision::Dense(RandomAccessMatrixReader::open(&a.common.targets)?, dim);
    generate(&a.common, sup, "get-egs-dense-targets")
}
