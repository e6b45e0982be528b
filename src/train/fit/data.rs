//! Data for `fit`: examples from an egs archive, or cut from Kaldi feature archives with
//! frame labels; shuffled with a seed per epoch, merged into minibatches, and produced on a
//! loader thread of their own (a bounded channel), so the trainer does not wait for merging.
//!
//! A data set is either an egs rspecifier (`ark:train.egs`, `scp:...`: as `compnet train`
//! reads them, merged or not) or a directory holding `feats.ark` (features per utterance),
//! labels as `ali.ark` (an integer label per frame, Kaldi's alignment archives) or `post.ark`
//! (posteriors per frame), and optionally `ivector.ark` (one iVector per utterance). The
//! utterances are cut into chunks of `--chunk-width` frames with the network's context plus
//! `--extra-left-context`/`--extra-right-context` (`egs::splitter`, as `get-egs`).

use crate::cli::get_egs::{extract_rows, sparse_row};
use crate::compile::context::nnet_context;
use crate::egs::kaldi_rand::GlibcRand;
use crate::egs::merge::{merge_examples, structure_hash};
use crate::egs::splitter::{ExampleGenerationConfig, UtteranceSplitter};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::egs::{NnetExample, NnetIo, SequentialNnetExampleReader};
use crate::io::sparse::{GeneralMatrix, SparseMatrix};
use crate::io::table::{RandomAccessTableReader, SequentialTableReader};
use crate::io::{Posterior, RandomAccessVectorReader};
use crate::matrix::Matrix;
use crate::nnet::Nnet;
use rand::seq::SliceRandom;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

/// How utterances are cut into examples.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkOptions {
    /// Output frames per chunk (`--chunk-width`).
    pub chunk_width: i32,
    /// Frames of context beyond the network's own (recurrent networks).
    pub extra_left_context: i32,
    pub extra_right_context: i32,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            chunk_width: 8,
            extra_left_context: 0,
            extra_right_context: 0,
        }
    }
}

/// A data set in memory: unmerged (or pre-merged) examples.
pub struct DataSet {
    /// What it was read from (for messages).
    pub source: String,
    pub examples: Arc<Vec<NnetExample>>,
}

/// Reads `spec` (an egs rspecifier or a data directory) for `nnet`, checking every example's
/// inputs and supervision against the network.
pub fn load(spec: &str, nnet: &Nnet, chunk: &ChunkOptions) -> Result<DataSet> {
    let examples = if spec.starts_with("ark") || spec.starts_with("scp") {
        let mut v = Vec::new();
        for item in SequentialNnetExampleReader::open(spec)? {
            let (key, eg) = item.map_err(|e| Error::Compute(format!("{spec}: {e}")))?;
            check_example(nnet, &eg)
                .map_err(|e| Error::Usage(format!("{spec}: example {key}: {e}")))?;
            v.push(eg);
        }
        v
    } else {
        examples_from_directory(spec, nnet, chunk)?
    };
    if examples.is_empty() {
        return Err(Error::Usage(format!(
            "{spec}: the data set is empty (no examples could be made from it)"
        )));
    }
    Ok(DataSet {
        source: spec.to_string(),
        examples: Arc::new(examples),
    })
}

/// Every io must name an input or output node of the same dimension, and sparse supervision
/// must lie within the output's dimension.
fn check_example(nnet: &Nnet, eg: &NnetExample) -> std::result::Result<(), String> {
    for io in &eg.io {
        let node = nnet
            .node_index(&io.name)
            .filter(|&n| nnet.is_input_node(n) || nnet.is_output_node(n))
            .ok_or_else(|| {
                format!(
                    "'{}' is not an input or output node of the network",
                    io.name
                )
            })?;
        let dim = nnet.node_dim(node);
        if io.features.num_cols() != dim {
            return Err(format!(
                "'{}' has dimension {} but the network's node has dimension {dim}",
                io.name,
                io.features.num_cols()
            ));
        }
    }
    Ok(())
}

fn examples_from_directory(
    dir: &str,
    nnet: &Nnet,
    chunk: &ChunkOptions,
) -> Result<Vec<NnetExample>> {
    let path = |f: &str| format!("{}/{f}", dir.trim_end_matches('/'));
    let exists = |f: &str| std::path::Path::new(&path(f)).exists();
    if !exists("feats.ark") {
        return Err(Error::Usage(format!(
            "{dir}: not an egs rspecifier (ark:..., scp:...) and no {} (a data directory holds \
             feats.ark and ali.ark or post.ark)",
            path("feats.ark")
        )));
    }
    let input_dim = nnet
        .node_index("input")
        .filter(|&n| nnet.is_input_node(n))
        .map(|n| nnet.node_dim(n))
        .ok_or_else(|| Error::Usage("the network has no input node named 'input'".into()))?;
    let num_classes = nnet
        .node_index("output")
        .filter(|&n| nnet.is_output_node(n))
        .map(|n| nnet.node_dim(n))
        .ok_or_else(|| Error::Usage("the network has no output node named 'output'".into()))?;
    let ctx = nnet_context(nnet)?;
    if chunk.chunk_width <= 0 || chunk.extra_left_context < 0 || chunk.extra_right_context < 0 {
        return Err(Error::Usage(
            "--chunk-width must be positive and the extra contexts >= 0".into(),
        ));
    }
    let mut splitter = UtteranceSplitter::new(ExampleGenerationConfig {
        left_context: ctx.left + chunk.extra_left_context,
        right_context: ctx.right + chunk.extra_right_context,
        left_context_initial: -1,
        right_context_final: -1,
        num_frames_overlap: 0,
        frame_subsampling_factor: 1,
        num_frames: vec![chunk.chunk_width],
    })?;
    let mut rng = GlibcRand::default();
    enum Labels {
        Ali(RandomAccessTableReader<Vec<i32>>, String),
        Post(RandomAccessTableReader<Posterior>, String),
    }
    let mut labels = if exists("ali.ark") {
        Labels::Ali(
            RandomAccessTableReader::open(&format!("ark:{}", path("ali.ark")))?,
            path("ali.ark"),
        )
    } else if exists("post.ark") {
        Labels::Post(
            RandomAccessTableReader::open(&format!("ark:{}", path("post.ark")))?,
            path("post.ark"),
        )
    } else {
        return Err(Error::Usage(format!(
            "{dir}: no labels: expected {} (a label per frame) or {}",
            path("ali.ark"),
            path("post.ark")
        )));
    };
    let mut ivectors = if exists("ivector.ark") {
        Some(RandomAccessVectorReader::open(&format!(
            "ark:{}",
            path("ivector.ark")
        ))?)
    } else {
        None
    };
    let ivector_dim = nnet
        .node_index("ivector")
        .filter(|&n| nnet.is_input_node(n))
        .map(|n| nnet.node_dim(n));
    if ivector_dim.is_some() != ivectors.is_some() {
        return Err(Error::Usage(format!(
            "{dir}: the network {} an 'ivector' input but {} exists",
            if ivector_dim.is_some() {
                "has"
            } else {
                "has no"
            },
            if ivectors.is_some() {
                path("ivector.ark")
            } else {
                format!("no {}", path("ivector.ark"))
            }
        )));
    }
    let feats_file = path("feats.ark");
    let mut out = Vec::new();
    for item in SequentialTableReader::<GeneralMatrix>::open(&format!("ark:{feats_file}"))? {
        let (key, feats) = item?;
        if feats.num_cols() != input_dim {
            return Err(Error::Usage(format!(
                "{feats_file}: utterance {key}: features of dimension {} but the network's \
                 input has dimension {input_dim}",
                feats.num_cols()
            )));
        }
        let n = feats.num_rows();
        let rows: Posterior = match &mut labels {
            Labels::Ali(r, f) => {
                let ali = r.get(&key)?.ok_or_else(|| {
                    Error::Usage(format!(
                        "{f}: no labels for utterance {key} (in {feats_file})"
                    ))
                })?;
                ali.iter().map(|&l| vec![(l, 1.0f32)]).collect()
            }
            Labels::Post(r, f) => r
                .get(&key)?
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "{f}: no labels for utterance {key} (in {feats_file})"
                    ))
                })?
                .clone(),
        };
        let label_file = match &labels {
            Labels::Ali(_, f) | Labels::Post(_, f) => f.clone(),
        };
        if rows.len() != n {
            return Err(Error::Usage(format!(
                "{label_file}: utterance {key} has {} labels but {n} frames in {feats_file}",
                rows.len()
            )));
        }
        let ivec = match (&mut ivectors, ivector_dim) {
            (Some(r), Some(dim)) => {
                let v = r.get(&key)?.ok_or_else(|| {
                    Error::Usage(format!(
                        "{}: no iVector for utterance {key}",
                        path("ivector.ark")
                    ))
                })?;
                if v.dim() != dim {
                    return Err(Error::Usage(format!(
                        "{}: utterance {key}: iVector of dimension {} but the network's ivector \
                         input has dimension {dim}",
                        path("ivector.ark"),
                        v.dim()
                    )));
                }
                Some(v.clone())
            }
            _ => None,
        };
        for chunk in splitter.chunks(n as i32, &mut rng)? {
            let total = chunk.left_context + chunk.num_frames + chunk.right_context;
            crate::limits::check_product(
                &[total.max(0) as u64, input_dim as u64, 4],
                "an example's input matrix",
            )
            .map_err(Error::Usage)?;
            let start = chunk.first_frame - chunk.left_context;
            let mut eg = NnetExample::default();
            eg.io.push(NnetIo {
                name: "input".into(),
                indexes: (0..total)
                    .map(|i| Index::new(0, i - chunk.left_context, 0))
                    .collect(),
                features: extract_rows(&feats, start, total as usize),
            });
            if let Some(v) = &ivec {
                let mut m = Matrix::zeros(1, v.dim());
                m.copy_row_from_slice(0, &v.to_vec());
                eg.io.push(NnetIo {
                    name: "ivector".into(),
                    indexes: vec![Index::new(0, 0, 0)],
                    features: GeneralMatrix::Full(m),
                });
            }
            let mut sup = Vec::with_capacity(chunk.num_frames as usize);
            for (i, &w) in chunk.output_weights.iter().enumerate() {
                let t = chunk.first_frame as usize + i;
                let mut pairs = rows.get(t).cloned().unwrap_or_default();
                for p in &mut pairs {
                    p.1 *= w;
                }
                sup.push(sparse_row(num_classes, &pairs).map_err(|bad| {
                    Error::Usage(format!(
                        "{label_file}: utterance {key}, frame {t}: label {bad} is outside \
                         0..{num_classes} (the network's output dimension)"
                    ))
                })?);
            }
            eg.io.push(NnetIo {
                name: "output".into(),
                indexes: (0..chunk.num_frames).map(|i| Index::new(0, i, 0)).collect(),
                features: GeneralMatrix::Sparse(SparseMatrix { rows: sup }),
            });
            out.push(eg);
        }
    }
    Ok(out)
}

/// The minibatches of one epoch, as lists of example indexes: the examples in a seeded
/// random order (`shuffle`), grouped by structure, `size` per minibatch (the last of each
/// structure may be smaller).
pub fn minibatch_groups(n: &DataSet, size: usize, shuffle: bool, seed: u64) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..n.examples.len()).collect();
    if shuffle {
        order.shuffle(&mut crate::random::seeded_rng(seed));
    }
    let size = size.max(1);
    let mut open: Vec<(u64, Vec<usize>)> = Vec::new();
    let mut out = Vec::new();
    for i in order {
        let h = structure_hash(&n.examples[i]);
        let slot = match open.iter().position(|(k, _)| *k == h) {
            Some(s) => s,
            None => {
                open.push((h, Vec::new()));
                open.len() - 1
            }
        };
        open[slot].1.push(i);
        if open[slot].1.len() == size {
            out.push(std::mem::take(&mut open[slot].1));
        }
    }
    out.extend(open.into_iter().map(|x| x.1).filter(|g| !g.is_empty()));
    out
}

/// Merges the groups from `skip` on, on a thread of its own; at most `ahead` minibatches wait
/// in the channel.
pub fn spawn_loader(
    data: &DataSet,
    groups: Vec<Vec<usize>>,
    skip: usize,
    ahead: usize,
) -> Receiver<Result<NnetExample>> {
    let (tx, rx) = sync_channel(ahead.max(1));
    let examples = Arc::clone(&data.examples);
    std::thread::spawn(move || {
        for g in groups.into_iter().skip(skip) {
            let eg = if g.len() == 1 {
                Ok(examples[g[0]].clone())
            } else {
                let egs: Vec<NnetExample> = g.iter().map(|&i| examples[i].clone()).collect();
                merge_examples(&egs, false)
            };
            if tx.send(eg).is_err() {
                return;
            }
        }
    });
    rx
}
