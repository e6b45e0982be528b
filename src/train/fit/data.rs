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
//!
//! CNTK's `HTKMLFReader` data: a directory holding `labels.mlf` (an HTK master label file,
//! `io::mlf`), `feats.scp` (an HTK script file, `name=file[s,e]` archive ranges allowed; paths
//! relative to the directory) and optionally `labels.map` (CNTK's `labelMappingFile`: the
//! state names of the MLF in index order; without it the MLF's labels are indices). It is cut
//! as the Kaldi archives are; with `--chunk-width=1` (the default for such a directory) every
//! example is one frame with the network's context, and the per-epoch shuffle seeded by
//! `--srand` is CNTK's frame randomisation (`randomize=Auto`).
//!
//! CNTK's text sequences (`io::text_seq`), a sentence per example: a directory holding
//! `sentences.txt` (LMSequenceReader's text, next-word labels) with `wordclass.txt` or
//! `words.txt`, or `slots.txt` (LUSequenceReader's `word label` lines) with `words.txt` and
//! `labels.txt`.
//!
//! Per-utterance labels (x-vector-style pooling networks): a directory with `feats.ark` and
//! `utt2label` (Kaldi's `utt2spk`-style text, one `utt-id int` per line). Each utterance is cut
//! into chunks of `--chunk-width` frames (or a width drawn per utterance from `min,max`, as
//! Kaldi's x-vector egs draw one per archive), input t = 0..width-1, and each chunk's output
//! is one row at t = 0 carrying the utterance's label (as Kaldi's x-vector egs put it).
//! Utterances shorter than the chunk are skipped with a warning, as Kaldi's x-vector egs
//! leave them out.

use crate::compile::context::nnet_context;
use crate::egs::cut::{chunk_example, input_io, sparse_row};
use crate::egs::merge::{merge_examples, structure_hash};
use crate::egs::splitter::{ExampleGenerationConfig, UtteranceSplitter};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::egs::{NnetExample, NnetIo, SequentialNnetExampleReader};
use crate::io::mlf::{LabelMap, Mlf};
use crate::io::sparse::{GeneralMatrix, SparseMatrix};
use crate::io::table::{RandomAccessTableReader, SequentialTableReader};
use crate::io::{Posterior, RandomAccessVectorReader};
use crate::kaldi_rand::GlibcRand;
use crate::matrix::Matrix;
use crate::nnet::Nnet;
use rand::seq::SliceRandom;
use rand::Rng;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

/// How utterances are cut into examples.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkOptions {
    /// Frames per chunk (`--chunk-width`): output frames with frame labels; with
    /// per-utterance labels, input frames, a width drawn per utterance from `min..=max`.
    pub chunk_width: ChunkWidth,
    /// Frames of context beyond the network's own (recurrent networks).
    pub extra_left_context: i32,
    pub extra_right_context: i32,
    /// Which labels a data directory's examples carry (`--labels`).
    pub labels: LabelKind,
    /// Seeds the chunk widths and offsets of per-utterance chunks (`--srand`).
    pub seed: u64,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            chunk_width: ChunkWidth { min: 8, max: 8 },
            extra_left_context: 0,
            extra_right_context: 0,
            labels: LabelKind::Auto,
            seed: 0,
        }
    }
}

/// `--chunk-width`: `N`, or `MIN,MAX` (per-utterance labels only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkWidth {
    pub min: i32,
    pub max: i32,
}

impl std::str::FromStr for ChunkWidth {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let num = |w: &str| {
            w.trim()
                .parse::<i32>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| {
                    format!("--chunk-width={s}: expected N or MIN,MAX (positive whole numbers)")
                })
        };
        let (min, max) = match s.split_once(',') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(s)?, num(s)?),
        };
        if min > max {
            return Err(format!("--chunk-width={s}: MIN is above MAX"));
        }
        Ok(ChunkWidth { min, max })
    }
}

impl<'de> serde::Deserialize<'de> for ChunkWidth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Form {
            Int(i64),
            Text(String),
        }
        let text = match Form::deserialize(d)? {
            Form::Int(v) => v.to_string(),
            Form::Text(t) => t,
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `--labels`: what a data directory's labels are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LabelKind {
    /// Frame labels (`ali.ark`, `post.ark`) if the directory has them, else `utt2label`.
    #[default]
    Auto,
    /// A label per frame: `ali.ark` or `post.ark`.
    Frame,
    /// A label per utterance: `utt2label` (pooling networks).
    Utterance,
}

impl LabelKind {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(LabelKind::Auto),
            "frame" => Ok(LabelKind::Frame),
            "utterance" => Ok(LabelKind::Utterance),
            _ => Err(Error::Usage(format!(
                "--labels={s}: expected auto, frame or utterance"
            ))),
        }
    }
}

/// A data set in memory: unmerged (or pre-merged) examples.
pub struct DataSet {
    /// What it was read from (for messages).
    pub source: String,
    pub examples: Arc<Vec<NnetExample>>,
}

impl DataSet {
    /// The examples made from `source`; none is an error naming it.
    fn new(source: &str, examples: Vec<NnetExample>) -> Result<DataSet> {
        if examples.is_empty() {
            return Err(Error::Usage(format!(
                "{source}: the data set is empty (no examples could be made from it)"
            )));
        }
        Ok(DataSet {
            source: source.to_string(),
            examples: Arc::new(examples),
        })
    }
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
    } else if let Some(set) = load_text_directory(spec, nnet)? {
        return Ok(set);
    } else {
        examples_from_directory(spec, nnet, chunk, None)?
    };
    DataSet::new(spec, examples)
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

/// CNTK's `HTKMLFReader` inputs: an HTK script file, an MLF and optionally a label mapping
/// file.
#[derive(Clone)]
pub struct HtkSource {
    pub scp: String,
    /// Relative paths of the script are taken from here (else as they are).
    pub base_dir: Option<String>,
    pub mlf: String,
    pub label_map: Option<String>,
    /// Turns an utterance's MLF labels into soft targets (CNTK's KL-regularised adaptation):
    /// called with the utterance's name, features and one-hot labels.
    pub relabel: Option<Relabel>,
}

/// See [`HtkSource::relabel`].
pub type Relabel = Arc<dyn Fn(&str, &GeneralMatrix, Posterior) -> Result<Posterior> + Send + Sync>;

/// CNTK's `KaldiReader` inputs: a feature rspecifier and a label rspecifier (posteriors, as
/// Kaldi's recipes for CNTK write them with ali-to-post, or alignments of pdf ids).
#[derive(Clone)]
pub struct KaldiSource {
    pub feats: String,
    pub labels: String,
    pub alignments: bool,
    /// CNTK's utterance list (`scpFile`, feat-to-len's `utt frames` lines): its file and, per
    /// utterance, the frames and the line; only these utterances are read, and their frames
    /// are checked.
    pub counts: Option<(String, UtteranceList)>,
}

/// Utterance → (frames, 1-based line of the list).
pub type UtteranceList = std::collections::HashMap<String, (usize, usize)>;

/// Reads Kaldi features and labels for `nnet`, cut into examples as a data directory is.
pub fn load_kaldi(src: &KaldiSource, nnet: &Nnet, chunk: &ChunkOptions) -> Result<DataSet> {
    let examples = examples_from(&src.feats, nnet, chunk, None, Some(src))?;
    DataSet::new(&src.feats, examples)
}

/// Reads an HTK script and MLF for `nnet`, cut into examples as a data directory is.
pub fn load_htk(src: &HtkSource, nnet: &Nnet, chunk: &ChunkOptions) -> Result<DataSet> {
    let examples = examples_from_directory(&src.scp, nnet, chunk, Some(src.clone()))?;
    DataSet::new(&src.scp, examples)
}

fn examples_from_directory(
    dir: &str,
    nnet: &Nnet,
    chunk: &ChunkOptions,
    htk: Option<HtkSource>,
) -> Result<Vec<NnetExample>> {
    examples_from(dir, nnet, chunk, htk, None)
}

fn examples_from(
    dir: &str,
    nnet: &Nnet,
    chunk: &ChunkOptions,
    htk: Option<HtkSource>,
    kaldi: Option<&KaldiSource>,
) -> Result<Vec<NnetExample>> {
    let path = |f: &str| format!("{}/{f}", dir.trim_end_matches('/'));
    let given = htk.is_some() || kaldi.is_some();
    let exists = |f: &str| !given && std::path::Path::new(&path(f)).exists();
    let htk = htk.or_else(|| {
        exists("labels.mlf").then(|| HtkSource {
            scp: path("feats.scp"),
            base_dir: Some(dir.to_string()),
            mlf: path("labels.mlf"),
            label_map: exists("labels.map").then(|| path("labels.map")),
            relabel: None,
        })
    });
    if !exists("feats.ark") && htk.is_none() && kaldi.is_none() {
        return Err(Error::Usage(format!(
            "{dir}: not an egs rspecifier (ark:..., scp:...) and no {} (a data directory holds \
             feats.ark and ali.ark or post.ark, or HTK's feats.scp and labels.mlf)",
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
    let frame_labels = htk.is_some() || kaldi.is_some() || exists("ali.ark") || exists("post.ark");
    let per_utterance = match chunk.labels {
        LabelKind::Auto => !frame_labels && exists("utt2label"),
        LabelKind::Frame => false,
        LabelKind::Utterance => true,
    };
    if per_utterance {
        return examples_with_utterance_labels(
            dir,
            &path("utt2label"),
            input_dim,
            num_classes,
            nnet,
            chunk,
        );
    }
    let ctx = nnet_context(nnet)?;
    let ChunkWidth { min: width, max } = chunk.chunk_width;
    if width <= 0 || chunk.extra_left_context < 0 || chunk.extra_right_context < 0 {
        return Err(Error::Usage(
            "--chunk-width must be positive and the extra contexts >= 0".into(),
        ));
    }
    if max != width {
        return Err(Error::Usage(format!(
            "{dir}: --chunk-width={width},{max}: a range of widths applies to per-utterance \
             labels (utt2label); frame labels take one width"
        )));
    }
    let mut splitter = UtteranceSplitter::new(ExampleGenerationConfig {
        left_context: ctx.left + chunk.extra_left_context,
        right_context: ctx.right + chunk.extra_right_context,
        left_context_initial: -1,
        right_context_final: -1,
        num_frames_overlap: 0,
        frame_subsampling_factor: 1,
        num_frames: vec![width],
    })?;
    let mut rng = GlibcRand::default();
    enum Labels {
        Ali(RandomAccessTableReader<Vec<i32>>, String),
        Post(RandomAccessTableReader<Posterior>, String),
        Mlf(Mlf, String),
    }
    let mut labels = if let Some(k) = kaldi {
        if k.alignments {
            Labels::Ali(RandomAccessTableReader::open(&k.labels)?, k.labels.clone())
        } else {
            Labels::Post(RandomAccessTableReader::open(&k.labels)?, k.labels.clone())
        }
    } else if let Some(h) = &htk {
        let map = h.label_map.as_deref().map(LabelMap::read).transpose()?;
        Labels::Mlf(Mlf::read(&h.mlf, map.as_ref())?, h.mlf.clone())
    } else if exists("ali.ark") {
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
            "{dir}: no labels: expected {} (a label per frame), {} or {} (a label per \
             utterance)",
            path("ali.ark"),
            path("post.ark"),
            path("utt2label")
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
    let feats_file = match (&htk, kaldi) {
        (_, Some(k)) => k.feats.clone(),
        (Some(h), _) => h.scp.clone(),
        _ => path("feats.ark"),
    };
    let items: Box<dyn Iterator<Item = Result<(String, GeneralMatrix)>> + '_> = if let Some(h) =
        &htk
    {
        let feats =
            crate::io::htk::read_scp_features(&feats_file, h.base_dir.as_deref(), Some(input_dim))?;
        Box::new(
            feats
                .into_iter()
                .map(|(k, m)| Ok((k, GeneralMatrix::Full(m)))),
        )
    } else if kaldi.is_some() {
        Box::new(utterances(&feats_file, &feats_file, input_dim)?)
    } else {
        Box::new(utterances(
            &format!("ark:{feats_file}"),
            &feats_file,
            input_dim,
        )?)
    };
    let counts = kaldi.and_then(|k| k.counts.as_ref());
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for item in items {
        let (key, feats) = item?;
        let n = feats.num_rows();
        if let Some((file, list)) = counts {
            let Some(&(frames, line)) = list.get(&key) else {
                continue;
            };
            if frames != n {
                return Err(Error::Usage(format!(
                    "{file}:{line}: utterance {key} has {frames} frames here but {n} in                      {feats_file}"
                )));
            }
            seen.insert(key.clone());
        }
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
            Labels::Mlf(m, f) => {
                let hard: Posterior = m
                    .get(&key)
                    .ok_or_else(|| {
                        Error::Usage(format!(
                            "{f}: no labels for utterance {key} (in {feats_file})"
                        ))
                    })?
                    .labels
                    .iter()
                    .map(|&l| vec![(l, 1.0f32)])
                    .collect();
                match htk.as_ref().and_then(|h| h.relabel.as_ref()) {
                    Some(r) if hard.len() == n => r(&key, &feats, hard)?,
                    _ => hard,
                }
            }
        };
        let label_file = match &labels {
            Labels::Ali(_, f) | Labels::Post(_, f) | Labels::Mlf(_, f) => f.clone(),
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
            let mut eg = chunk_example(&feats, &chunk)?;
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
    if let Some((file, list)) = counts {
        if let Some((key, (_, line))) = list
            .iter()
            .filter(|(k, _)| !seen.contains(*k))
            .min_by_key(|(_, (_, line))| *line)
        {
            return Err(Error::Usage(format!(
                "{file}:{line}: utterance {key} is not in {feats_file}"
            )));
        }
    }
    Ok(out)
}

/// The utterances of the table `rspecifier` (named `feats_file` in errors), each checked to
/// have `input_dim` columns.
fn utterances<'a>(
    rspecifier: &str,
    feats_file: &'a str,
    input_dim: usize,
) -> Result<impl Iterator<Item = Result<(String, GeneralMatrix)>> + 'a> {
    let reader = SequentialTableReader::<GeneralMatrix>::open(rspecifier)?;
    Ok(reader.map(move |item| {
        let (key, feats) = item?;
        if feats.num_cols() != input_dim {
            return Err(Error::Usage(format!(
                "{feats_file}: utterance {key}: features of dimension {} but the network's \
                 input has dimension {input_dim}",
                feats.num_cols()
            )));
        }
        Ok((key, feats))
    }))
}

/// `utt2label`: `utt-id int` per line, checked (a whole number in `0..num_classes`, no key
/// twice); each key with its 1-based line.
pub fn read_utt2label(
    file: &str,
    num_classes: usize,
) -> Result<std::collections::HashMap<String, (i32, usize)>> {
    let text = String::from_utf8(crate::io::read_file(file)?)
        .map_err(|e| Error::Usage(format!("{file}: not UTF-8 text ({e})")))?;
    let mut out = std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let at = format!("{file}:{}", i + 1);
        let [key, label] = words[..] else {
            return Err(Error::Usage(format!(
                "{at}: expected `utterance-id label`, got {} words",
                words.len()
            )));
        };
        let label: i32 = label.parse().map_err(|_| {
            Error::Usage(format!(
                "{at}: utterance {key}: the label '{label}' is not a whole number"
            ))
        })?;
        if label < 0 || label as usize >= num_classes {
            return Err(Error::Usage(format!(
                "{at}: utterance {key}: label {label} is outside 0..{num_classes} (the \
                 network's output dimension)"
            )));
        }
        if out.insert(key.to_string(), (label, i + 1)).is_some() {
            return Err(Error::Usage(format!(
                "{at}: utterance {key} has a label already"
            )));
        }
    }
    Ok(out)
}

/// The dimension of the input (or output) node `name`, or a usage error naming it.
pub(crate) fn node_dim(nnet: &Nnet, name: &str, input: bool) -> Result<usize> {
    nnet.node_index(name)
        .filter(|&i| {
            if input {
                nnet.is_input_node(i)
            } else {
                nnet.is_output_node(i)
            }
        })
        .map(|i| nnet.node_dim(i))
        .ok_or_else(|| {
            Error::Usage(format!(
                "the network has no {} node named '{name}'",
                if input { "input" } else { "output" }
            ))
        })
}

/// `fit`'s text directories: `sentences.txt` (a sentence per line, LMSequenceReader's
/// format) with `wordclass.txt` (CNTK's word-class file) or `words.txt` (a word per line),
/// labels the next words, `</s>` added at both ends when the vocabulary has it; or
/// `slots.txt` (`word label` lines, sentences between blank lines, LUSequenceReader's format)
/// with `words.txt` and `labels.txt` (a token per line), one word per input row. Words
/// outside the vocabulary are `<unk>`. None when the directory holds neither.
fn load_text_directory(dir: &str, nnet: &Nnet) -> Result<Option<DataSet>> {
    use crate::io::text_seq;
    let path = |f: &str| format!("{}/{f}", dir.trim_end_matches('/'));
    let exists = |f: &str| std::path::Path::new(&path(f)).exists();
    let words = || -> Result<text_seq::Vocab> {
        if exists("wordclass.txt") {
            text_seq::read_word_class(&path("wordclass.txt"))
        } else {
            text_seq::read_token_list(&path("words.txt"))
        }
    };
    let (file, seqs, v, labels) = if exists("sentences.txt") {
        let v = words()?;
        let file = path("sentences.txt");
        let text = crate::frontend::read_text(&file)?;
        let end = v.id("</s>").map(|_| "</s>");
        let seqs = text_seq::parse_lm(&text, &file, &v, "<unk>", end, end)?;
        let n = v.len();
        (file, seqs, v, n)
    } else if exists("slots.txt") {
        let v = text_seq::read_token_list(&path("words.txt"))?;
        let l = text_seq::read_token_list(&path("labels.txt"))?;
        let file = path("slots.txt");
        let text = crate::frontend::read_text(&file)?;
        let seqs = text_seq::parse_lu(&text, &file, &v, &l, "<unk>", None)?;
        (file, seqs, v, l.len())
    } else {
        return Ok(None);
    };
    text_sequence_examples(&file, &seqs, v.len(), &[0], labels, nnet).map(Some)
}

/// Examples of CNTK's text sequence readers (`io::text_seq`; `compnet cntk`'s
/// LMSequenceReader and LUSequenceReader, `fit`'s `sentences.txt`/`slots.txt` directories):
/// one per sentence, its words one-hot (the words at each offset of `context` stacked, `vocab`
/// entries each) at t = 0, 1, ... with the network's context filled with copies of the first
/// and last word, its labels (of `labels` classes) as sparse supervision at t = 0..n-1.
pub fn text_sequence_examples(
    file: &str,
    seqs: &[crate::io::text_seq::Sequence],
    v: usize,
    context: &[i32],
    labels_dim: usize,
    nnet: &Nnet,
) -> Result<DataSet> {
    let input_dim = node_dim(nnet, "input", true)?;
    let out_dim = node_dim(nnet, "output", false)?;
    if v * context.len() != input_dim {
        return Err(Error::Usage(format!(
            "{}: {v} words × {} context position(s) = {} inputs, but the network's input has \
             dimension {input_dim}",
            file,
            context.len(),
            v * context.len()
        )));
    }
    if labels_dim != out_dim {
        return Err(Error::Usage(format!(
            "{file}: {labels_dim} labels, but the network's output has dimension {out_dim}"
        )));
    }
    let ctx = crate::compile::context::nnet_context(nnet)?;
    let mut examples = Vec::with_capacity(seqs.len());
    for q in seqs {
        let rows = crate::io::text_seq::context_rows(&q.inputs, v, context)
            .into_iter()
            .map(|pairs| sparse_row(input_dim, &pairs))
            .collect::<std::result::Result<Vec<_>, i32>>()
            .map_err(|bad| Error::Usage(format!("{file}: input column {bad} out of range")))?;
        let feats = GeneralMatrix::Sparse(SparseMatrix { rows });
        let n = q.inputs.len() as i32;
        let mut eg = NnetExample::default();
        eg.io.push(input_io(
            &feats,
            -ctx.left,
            ctx.left + n + ctx.right,
            -ctx.left,
        )?);
        let sup = q
            .labels
            .iter()
            .map(|&l| sparse_row(out_dim, &[(l as i32, 1.0)]))
            .collect::<std::result::Result<Vec<_>, i32>>()
            .map_err(|bad| {
                Error::Usage(format!(
                    "{file}:{}: label {bad} is outside 0..{out_dim}",
                    q.lines[0]
                ))
            })?;
        eg.io.push(NnetIo {
            name: "output".into(),
            indexes: (0..n).map(|t| Index::new(0, t, 0)).collect(),
            features: GeneralMatrix::Sparse(SparseMatrix { rows: sup }),
        });
        examples.push(eg);
    }
    Ok(DataSet {
        source: file.to_string(),
        examples: Arc::new(examples),
    })
}

/// The chunks (first frame, width) of an utterance of `n` frames for per-utterance labels:
/// a width drawn from `min..=min(max, n)`, as many whole chunks of it as fit, the spare
/// frames left at a random place at the start and end. None when `n < min` (skipped).
pub fn utterance_chunks(n: usize, width: ChunkWidth, rng: &mut impl Rng) -> Vec<(usize, usize)> {
    let (min, max) = (width.min.max(1) as usize, width.max.max(1) as usize);
    if n < min {
        return Vec::new();
    }
    let w = rng.random_range(min..=max.min(n));
    let count = n / w;
    let first = rng.random_range(0..=n - count * w);
    (0..count).map(|i| (first + i * w, w)).collect()
}

/// Examples of a pooling network: chunks of each utterance of `feats.ark`, input at
/// t = 0..width-1, one output row at t = 0 with the utterance's label from `labels_file`.
fn examples_with_utterance_labels(
    dir: &str,
    labels_file: &str,
    input_dim: usize,
    num_classes: usize,
    nnet: &Nnet,
    chunk: &ChunkOptions,
) -> Result<Vec<NnetExample>> {
    if !std::path::Path::new(labels_file).exists() {
        return Err(Error::Usage(format!(
            "{dir}: --labels=utterance but there is no {labels_file}"
        )));
    }
    if nnet
        .node_index("ivector")
        .is_some_and(|n| nnet.is_input_node(n))
    {
        return Err(Error::Usage(format!(
            "{dir}: per-utterance labels with an 'ivector' input are not supported"
        )));
    }
    let labels = read_utt2label(labels_file, num_classes)?;
    let feats_file = format!("{}/feats.ark", dir.trim_end_matches('/'));
    let mut rng = crate::random::seeded_rng(chunk.seed);
    let mut seen = std::collections::HashSet::new();
    let mut skipped = Vec::new();
    let mut out = Vec::new();
    for item in utterances(&format!("ark:{feats_file}"), &feats_file, input_dim)? {
        let (key, feats) = item?;
        let &(label, _) = labels.get(&key).ok_or_else(|| {
            Error::Usage(format!(
                "{labels_file}: no label for utterance {key} (in {feats_file})"
            ))
        })?;
        seen.insert(key.clone());
        let chunks = utterance_chunks(feats.num_rows(), chunk.chunk_width, &mut rng);
        if chunks.is_empty() {
            skipped.push(format!("{key} ({} frames)", feats.num_rows()));
        }
        for (first, width) in chunks {
            let mut eg = NnetExample::default();
            eg.io.push(input_io(&feats, first as i32, width as i32, 0)?);
            let row = sparse_row(num_classes, &[(label, 1.0)])
                .map_err(|bad| Error::Usage(format!("{labels_file}: label {bad}")))?;
            eg.io.push(NnetIo {
                name: "output".into(),
                indexes: vec![Index::new(0, 0, 0)],
                features: GeneralMatrix::Sparse(SparseMatrix { rows: vec![row] }),
            });
            out.push(eg);
        }
    }
    if let Some((key, line)) = labels
        .iter()
        .filter(|(k, _)| !seen.contains(*k))
        .map(|(k, &(_, line))| (k, line))
        .min_by_key(|&(_, line)| line)
    {
        return Err(Error::Usage(format!(
            "{labels_file}:{line}: a label for utterance {key}, which is not in {feats_file}"
        )));
    }
    if !skipped.is_empty() {
        crate::log::warn(
            "compnet fit",
            &format!(
                "{feats_file}: {} utterance(s) shorter than --chunk-width={} left out (as \
                 Kaldi's x-vector egs leave them out): {}{}",
                skipped.len(),
                chunk.chunk_width.min,
                skipped[..skipped.len().min(5)].join(", "),
                if skipped.len() > 5 { ", ..." } else { "" }
            ),
        );
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
/// in the channel. An empty group (a process's empty share of a small minibatch) is `None`.
pub fn spawn_loader(
    data: &DataSet,
    groups: Vec<Vec<usize>>,
    skip: usize,
    ahead: usize,
) -> Receiver<Result<Option<NnetExample>>> {
    let (tx, rx) = sync_channel(ahead.max(1));
    let examples = Arc::clone(&data.examples);
    std::thread::spawn(move || {
        for g in groups.into_iter().skip(skip) {
            let eg = match g.len() {
                0 => Ok(None),
                1 => Ok(Some(examples[g[0]].clone())),
                _ => {
                    let egs: Vec<NnetExample> = g.iter().map(|&i| examples[i].clone()).collect();
                    merge_examples(&egs, false).map(Some)
                }
            };
            if tx.send(eg).is_err() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pooling network: input dim 2, a ±1 splice (so chunks need 3 frames), statistics
    /// pooling over t = 0..100, 3 classes.
    const POOLING: &str = "input-node name=input dim=2
component name=a type=AffineComponent input-dim=6 output-dim=4
component name=se type=StatisticsExtractionComponent input-dim=4 include-variance=true
component name=sp type=StatisticsPoolingComponent input-dim=9 left-context=0 right-context=100 output-stddevs=true
component name=o type=AffineComponent input-dim=8 output-dim=3
component name=ls type=LogSoftmaxComponent dim=3
component-node name=a component=a input=Append(Offset(input, -1), input, Offset(input, 1))
component-node name=se component=se input=a
component-node name=sp component=sp input=se
component-node name=o component=o input=Round(sp, 1)
component-node name=ls component=ls input=o
output-node name=output input=ls objective=linear
";

    fn nnet() -> Nnet {
        Nnet::from_config_text(POOLING, "pooling.config", &mut crate::random::seeded_rng(0))
            .unwrap()
    }

    /// A data directory: utterances (key, frames) with features whose row i is [i, key
    /// index], and `utt2label` text.
    fn data_dir(utts: &[(&str, usize)], utt2label: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut feats = String::new();
        for (k, (key, n)) in utts.iter().enumerate() {
            feats.push_str(&format!("{key} [\n"));
            for i in 0..*n {
                feats.push_str(&format!("  {i} {k}\n"));
            }
            feats.push_str("]\n");
        }
        std::fs::write(dir.path().join("feats.ark"), feats).unwrap();
        std::fs::write(dir.path().join("utt2label"), utt2label).unwrap();
        dir
    }

    fn opts(width: &str) -> ChunkOptions {
        ChunkOptions {
            chunk_width: width.parse().unwrap(),
            seed: 7,
            ..Default::default()
        }
    }

    fn load_dir(dir: &tempfile::TempDir, width: &str) -> Result<DataSet> {
        load_labels(dir, width, LabelKind::Auto)
    }

    fn load_labels(dir: &tempfile::TempDir, width: &str, labels: LabelKind) -> Result<DataSet> {
        let o = ChunkOptions {
            labels,
            ..opts(width)
        };
        load(&dir.path().to_string_lossy(), &nnet(), &o)
    }

    #[test]
    fn chunk_widths_parse_as_one_number_or_a_range() {
        assert_eq!("8".parse(), Ok(ChunkWidth { min: 8, max: 8 }));
        assert_eq!("6,10".parse(), Ok(ChunkWidth { min: 6, max: 10 }));
        for bad in ["0", "-3", "10,6", "a", "4,", ""] {
            assert!(bad.parse::<ChunkWidth>().is_err(), "{bad}");
        }
        let t: std::collections::HashMap<String, ChunkWidth> =
            toml::from_str("a = 8\nb = \"3,5\"").unwrap();
        assert_eq!(t["a"], ChunkWidth { min: 8, max: 8 });
        assert_eq!(t["b"], ChunkWidth { min: 3, max: 5 });
    }

    #[test]
    fn utterance_chunks_are_whole_inside_and_drawn_from_the_range() {
        let mut rng = crate::random::seeded_rng(1);
        let mut widths = std::collections::BTreeSet::new();
        for n in 0..40usize {
            let chunks = utterance_chunks(n, ChunkWidth { min: 4, max: 9 }, &mut rng);
            if n < 4 {
                assert!(chunks.is_empty(), "{n}: {chunks:?}");
                continue;
            }
            let w = chunks[0].1;
            widths.insert(w);
            assert!((4..=9.min(n)).contains(&w), "{n}: {chunks:?}");
            assert_eq!(chunks.len(), n / w, "{n}: {chunks:?}");
            for (i, &(first, width)) in chunks.iter().enumerate() {
                assert_eq!(width, w);
                assert_eq!(first, chunks[0].0 + i * w);
                assert!(first + width <= n, "{n}: {chunks:?}");
            }
        }
        // Over 36 utterances every width of the range is drawn.
        assert_eq!(
            widths.into_iter().collect::<Vec<_>>(),
            (4..=9).collect::<Vec<_>>()
        );
        // Seeded: the same generator state gives the same chunks.
        let a = utterance_chunks(
            30,
            ChunkWidth { min: 4, max: 9 },
            &mut crate::random::seeded_rng(5),
        );
        let b = utterance_chunks(
            30,
            ChunkWidth { min: 4, max: 9 },
            &mut crate::random::seeded_rng(5),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn each_chunk_is_one_sequence_with_the_utterance_label_at_t_0() {
        let dir = data_dir(&[("u1", 10), ("u2", 4), ("u3", 7)], "u1 2\nu2 0\n\nu3 1\n");
        let set = load_dir(&dir, "3").unwrap();
        // 10/3 + 4/3 + 7/3 chunks of 3 frames.
        assert_eq!(set.examples.len(), 3 + 1 + 2);
        let mut labels = Vec::new();
        for eg in set.examples.iter() {
            let input = &eg.io[0];
            assert_eq!(input.name, "input");
            let ts: Vec<i32> = input.indexes.iter().map(|i| i.t).collect();
            assert_eq!(ts, vec![0, 1, 2]);
            let output = &eg.io[1];
            assert_eq!(output.name, "output");
            assert_eq!(output.indexes, vec![Index::new(0, 0, 0)]);
            let GeneralMatrix::Sparse(s) = &output.features else {
                panic!("sparse supervision")
            };
            assert_eq!(s.rows.len(), 1);
            // The features' second column is the utterance's position: its label matches.
            let GeneralMatrix::Full(m) = &input.features else {
                panic!("full features")
            };
            let utt = m.get(0, 1) as usize;
            let label = s.rows[0].pairs[0].0;
            assert_eq!(label, [2, 0, 1][utt]);
            assert_eq!(s.rows[0].pairs[0].1, 1.0);
            // Consecutive frames of the utterance.
            assert_eq!(m.get(1, 0), m.get(0, 0) + 1.0);
            labels.push(label);
        }
        assert_eq!(labels, vec![2, 2, 2, 0, 1, 1]);
        // A range of widths: every chunk of one utterance has one width; they merge in
        // groups of one width only.
        let set = load_dir(&dir, "3,5").unwrap();
        let groups = minibatch_groups(&set, 100, true, 3);
        for g in groups {
            let widths: std::collections::BTreeSet<usize> = g
                .iter()
                .map(|&i| set.examples[i].io[0].indexes.len())
                .collect();
            assert_eq!(widths.len(), 1);
        }
    }

    #[test]
    fn a_short_utterance_is_left_out_and_bad_labels_are_clear_errors() {
        // Shorter than the chunk: left out (Kaldi's x-vector egs do the same).
        let dir = data_dir(&[("u1", 6), ("short", 2)], "u1 1\nshort 0\n");
        assert_eq!(load_dir(&dir, "3").unwrap().examples.len(), 2);
        // All too short: the empty-set error names the directory.
        let e = load_dir(&dir, "7").err().unwrap().to_string();
        assert!(e.contains("empty"), "{e}");
        let utt2label =
            |d: &tempfile::TempDir| d.path().join("utt2label").to_string_lossy().into_owned();
        for (text, want) in [
            ("u1 1\n", "no label for utterance short"),
            (
                "u1 1\nshort 0\nghost 2\n",
                ":3: a label for utterance ghost, which is not in",
            ),
            (
                "u1 3\nshort 0\n",
                ":1: utterance u1: label 3 is outside 0..3",
            ),
            (
                "u1 1\nshort -1\n",
                ":2: utterance short: label -1 is outside",
            ),
            (
                "u1 one\nshort 0\n",
                ":1: utterance u1: the label 'one' is not a whole number",
            ),
            ("u1 1 2\nshort 0\n", ":1: expected `utterance-id label`"),
            (
                "u1 1\nu1 2\nshort 0\n",
                ":2: utterance u1 has a label already",
            ),
        ] {
            let d = data_dir(&[("u1", 6), ("short", 3)], text);
            let e = load_dir(&d, "3").err().unwrap().to_string();
            assert!(
                e.contains(&utt2label(&d)) && e.contains(want),
                "{text:?}: {e}"
            );
        }
        // Frame labels take one width.
        let d = data_dir(&[("u1", 6)], "u1 1\n");
        std::fs::write(d.path().join("ali.ark"), "u1 0 0 0 0 0 0\n").unwrap();
        let e = load_labels(&d, "2,3", LabelKind::Frame)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("a range of widths applies to per-utterance"),
            "{e}"
        );
        // Auto picks the frame labels when there are some; utterance forces utt2label.
        let frame = load_dir(&d, "3");
        let utt = load_labels(&d, "3", LabelKind::Utterance).unwrap();
        assert_eq!(utt.examples[0].io[1].indexes.len(), 1);
        assert!(frame.unwrap().examples[0].io[1].indexes.len() > 1);
    }
}
