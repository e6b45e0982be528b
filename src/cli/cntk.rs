//! `compnet cntk <config> [name=value ...]`: runs a CNTK configuration file
//! (`frontend::cntk::config`): the blocks that `command=A:B:C` names, in order, each as its
//! `action`:
//!
//! - `train`: the network from `SimpleNetworkBuilder=[...]` or `NDLNetworkBuilder=[...]`
//!   (`networkDescription=file`, or `run=Name` with `Name=file`; `ndlMacros=file` is read
//!   first), trained with the `SGD=[...]` block through `compnet fit`'s trainer on the
//!   `reader=[...]` data; the model is written to `modelPath`, each earlier epoch's to
//!   `modelPath.N` as CNTK names them, and the trainer's state to the directory
//!   `modelPath.ckp`, from which a new run resumes (removed at the end unless
//!   `keepCheckPointFiles=true`);
//! - `eval` (also `test`, `cv`): the criterion and evaluation over the reader's data, printed
//!   as CNTK's `Final Results` line;
//! - `edit`: the MEL file `editPath` (`frontend::cntk::mel`), with the block's `ndlMacros`
//!   for inline NDL; a `train` block whose `modelPath.0` exists starts from that model (CNTK's
//!   way of retraining an edited model, as layer-by-layer pre-training does);
//! - `adapt`: training continued from `origModelFileName`, with `adaptationRegType=KL`
//!   and `adaptationRegWeight` w: each frame's target is (1 − w)·its label + w·the original
//!   model's posteriors (CNTK's KL-divergence regularisation toward the original model);
//! - `write`: the values of `outputNodeNames` for every utterance of the reader, to
//!   `outputPath` (`outputType=htk`: one HTK file per utterance in that directory, with an HTK
//!   script `outputPath/outputs.scp`; else a Kaldi text archive per node,
//!   `outputPath.<node>`).
//!
//! Readers: `readerType=HTKMLFReader` (a sub-block with `scpFile` and `dim`, one with
//! `mlfFile`, `labelDim` and optionally `labelMappingFile`; relative paths inside the script
//! are taken from the script's directory) and `UCIFastReader` (`file`, a sub-block with `dim`
//! and `start`, one with `start`, `labelDim` and optionally `labelMappingFile`) and
//! `KaldiReader`/`Kaldi2Reader` (see [`kaldi_source`]), and the text sequence readers
//! `LMSequenceReader` and `LUSequenceReader` (see [`read_text_sequences`]: a sentence per
//! example).
//!
//! The SGD block's momentum (`momentumPerMB`, `momentumPerSample`, `momentumAsTimeConstant`,
//! per-epoch schedules, unit gain), `dropoutRate` (per epoch), clipping
//! (`clippingThresholdPerSample`, by truncation or, `gradientClippingWithTruncation=false`,
//! by norm, each Parameter's gradient on its own) and `L1RegWeight`/`L2RegWeight` (per sample) map to `compnet fit`'s options of
//! the same meaning.
//! `randomize=None` turns the per-epoch shuffle off; otherwise frames are shuffled every
//! epoch, seeded by `randomSeed` (CNTK's frame mode: one frame per example).
//!
//! `deviceId` (or a `$DeviceNumber$` it names) must be `-1`, `cpu` or `auto`: compnet runs
//! on the CPU.

use crate::cli::fit;
use crate::error::{Error, Result};
use crate::frontend::cntk::config::{self, Scope};
use crate::index::Index;
use crate::io::egs::{NnetExample, NnetIo};
use crate::io::mlf::LabelMap;
use crate::io::sparse::{GeneralMatrix, SparseMatrix};
use crate::io::Posterior;
use crate::log::{fmt_g, log, warn};
use crate::matrix::Matrix;
use crate::nnet::{Nnet, ObjectiveType};
use crate::train::fit::data::node_dim;
use crate::train::fit::data::{self, ChunkOptions, ChunkWidth, DataSet, HtkSource, Relabel};
use std::sync::Arc;

const P: &str = "compnet cntk";

/// Options of `compnet cntk`.
#[derive(clap::Args, Debug)]
#[command(override_usage = "compnet cntk <config> [name=value ...]   (or configFile=<config>)")]
pub struct Args {
    /// The config file, then `name=value` (or `Block.name=value`) settings that override it.
    #[arg(allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let mut file = None;
    let mut overrides = Vec::new();
    for arg in &a.args {
        match arg.split_once('=') {
            Some((k, v)) if k.eq_ignore_ascii_case("configFile") => file = Some(v.to_string()),
            Some(_) => overrides.push(arg.clone()),
            None if file.is_none() => file = Some(arg.clone()),
            None => {
                return Err(Error::Usage(format!(
                    "compnet cntk: '{arg}' is not name=value (one config file only)"
                )))
            }
        }
    }
    let file =
        file.ok_or_else(|| Error::Usage("usage: compnet cntk <config> [name=value ...]".into()))?;
    let mut root = config::parse_file(&file)?;
    for o in &overrides {
        config::apply_override(&mut root, o)?;
    }
    let top = Scope::root(&root);
    let command = top.get("command")?.ok_or_else(|| {
        Error::Usage(format!(
            "{file}: no command=... (the blocks to run, e.g. command=Train:Test)"
        ))
    })?;
    let names: Vec<&str> = command
        .split(':')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    // Check every block before running any.
    let mut blocks = Vec::new();
    for name in &names {
        let b = top.block(name).ok_or_else(|| {
            Error::Usage(format!(
                "{}: command={command}: there is no block {name}=[...]",
                top.entry("command")
                    .map_or(file.clone(), |e| e.origin.to_string())
            ))
        })?;
        check_device(&b)?;
        let action = b
            .get("action")?
            .ok_or_else(|| Error::Usage(format!("{file}: block {name} has no action=...")))?;
        blocks.push((name.to_string(), b, action.to_ascii_lowercase()));
    }
    for (name, b, action) in blocks {
        log(P, &format!("running {name} (action={action})"));
        match action.as_str() {
            "train" => train(&b)?,
            "eval" | "test" | "cv" => eval(&b)?,
            "write" => write(&b)?,
            "edit" => edit(&b)?,
            "adapt" => adapt(&b)?,
            other => {
                return Err(Error::Usage(format!(
                    "{}: unknown action={other}: expected train, eval, write, edit or adapt",
                    origin(&b, "action")
                )))
            }
        }
    }
    Ok(0)
}

fn origin(b: &Scope, key: &str) -> String {
    b.entry(key)
        .map_or_else(|| b.path.clone(), |e| e.origin.to_string())
}

/// `deviceId`: the CPU only.
fn check_device(b: &Scope) -> Result<()> {
    let Some(v) = b.get_inherited("deviceId")? else {
        return Ok(());
    };
    let v = v.trim();
    if v == "-1" || v.eq_ignore_ascii_case("cpu") || v.eq_ignore_ascii_case("auto") {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{}: deviceId={v}: compnet runs CNTK configurations on the CPU only; use deviceId=-1 \
         (or cpu)",
        b.origin_inherited("deviceId")
            .unwrap_or_else(|| b.path.clone())
    )))
}

fn required(b: &Scope, key: &str) -> Result<String> {
    b.get_inherited(key)?.ok_or_else(|| {
        Error::Usage(format!(
            "block {}: no {key}=... (needed by its action)",
            b.path
        ))
    })
}

/// The network of a train block.
fn build_network(b: &Scope, seed: u64) -> Result<Nnet> {
    let mut rng = crate::random::seeded_rng(seed);
    if let Some(s) = b.block("SimpleNetworkBuilder") {
        let mut text = String::from("SimpleNetworkBuilder=[\n");
        for k in s.keys() {
            if let Some(v) = s.get(k)? {
                text.push_str(&format!("    {k}={v}\n"));
            }
        }
        text.push_str("]\n");
        let name = format!("{} ({})", s.path, origin(b, "SimpleNetworkBuilder"));
        return crate::frontend::ndl::read_ndl(&text, &name, &mut rng);
    }
    let n = b.block("NDLNetworkBuilder").ok_or_else(|| {
        Error::Usage(format!(
            "block {}: no SimpleNetworkBuilder=[...] or NDLNetworkBuilder=[...]",
            b.path
        ))
    })?;
    let network_file = match n.get("networkDescription")? {
        Some(f) => f,
        None => {
            let run = n.get("run")?.ok_or_else(|| {
                Error::Usage(format!(
                    "{}: NDLNetworkBuilder needs networkDescription=file or run=Name with \
                     Name=file",
                    origin(b, "NDLNetworkBuilder")
                ))
            })?;
            n.get(&run)?.ok_or_else(|| {
                Error::Usage(format!(
                    "{}: run={run}, but the block has no {run}=file",
                    origin(&n, "run")
                ))
            })?
        }
    };
    let mut text = String::new();
    if let Some(m) = n.get("ndlMacros")? {
        text.push_str(&crate::frontend::read_text(&m)?);
        text.push('\n');
    }
    let macro_lines = text.lines().count();
    text.push_str(&crate::frontend::read_text(&network_file)?);
    let label = if macro_lines > 0 {
        format!("{network_file} (after the {macro_lines} lines of ndlMacros)")
    } else {
        network_file
    };
    crate::frontend::ndl::read_ndl(&text, &label, &mut rng)
}

/// The reader block of a block (its own, else an enclosing one's).
fn reader_block<'a>(b: &Scope<'a>, key: &str) -> Result<Scope<'a>> {
    b.block_inherited(key)
        .ok_or_else(|| Error::Usage(format!("block {}: no {key}=[...]", b.path)))
}

/// The sub-block of a reader that has `key` (CNTK names them freely: `features`, `labels`);
/// without one, an error saying that reader `reader` needs a `what` block with it.
fn sub_with<'a>(r: &Scope<'a>, key: &str, (reader, what): (&str, &str)) -> Result<Scope<'a>> {
    find_sub(r, key).ok_or_else(|| {
        Error::Usage(format!(
            "{}: {reader} needs a {what} block with {key}=...",
            r.path
        ))
    })
}

/// The sub-block of a reader that has `key`, if any.
fn find_sub<'a>(r: &Scope<'a>, key: &str) -> Option<Scope<'a>> {
    r.keys()
        .into_iter()
        .filter_map(|k| r.block(k))
        .find(|s| s.entry(key).is_some())
}

fn dim_check(s: &Scope, key: &str, want: usize, what: &str) -> Result<()> {
    if let Some(d) = s.parse::<usize>(key)? {
        if d != want {
            return Err(Error::Usage(format!(
                "{}: {}={d}, but the network's {what} has dimension {want}",
                origin(s, key),
                s.name(key)
            )));
        }
    }
    Ok(())
}

/// The data a reader block describes, cut into examples for `nnet`.
fn read_data(r: &Scope, nnet: &Nnet, seed: u64, relabel: Option<Relabel>) -> Result<DataSet> {
    let kind = r.get("readerType")?.unwrap_or_default();
    let input_dim = node_dim(nnet, "input", true)?;
    let out_dim = node_dim(nnet, "output", false)?;
    let chunk = ChunkOptions {
        chunk_width: ChunkWidth { min: 1, max: 1 },
        seed,
        ..Default::default()
    };
    match kind.to_ascii_lowercase().as_str() {
        "htkmlfreader" => {
            let (scp, base) = htk_features(r, input_dim)?;
            let l = sub_with(r, "mlfFile", ("HTKMLFReader", "labels"))?;
            dim_check(&l, "labelDim", out_dim, "output")?;
            let src = HtkSource {
                scp: scp.clone(),
                base_dir: base,
                mlf: l.get("mlfFile")?.unwrap_or_default(),
                label_map: l.get("labelMappingFile")?,
                relabel,
            };
            data::load_htk(&src, nnet, &chunk)
        }
        "kaldireader" | "kaldi2reader" if relabel.is_some() => Err(Error::Usage(format!(
            "{}: KL-regularised adaptation reads an HTKMLFReader",
            r.path
        ))),
        "kaldireader" | "kaldi2reader" => {
            let src = kaldi_source(r, input_dim, Some(out_dim))?;
            data::load_kaldi(&src, nnet, &chunk)
        }
        "ucifastreader" if relabel.is_some() => Err(Error::Usage(format!(
            "{}: KL-regularised adaptation reads an HTKMLFReader",
            r.path
        ))),
        "ucifastreader" => read_uci(r, nnet, input_dim, out_dim),
        "lmsequencereader" | "lusequencereader" if relabel.is_some() => Err(Error::Usage(format!(
            "{}: KL-regularised adaptation reads an HTKMLFReader",
            r.path
        ))),
        "lmsequencereader" => read_text_sequences(r, nnet, false),
        "lusequencereader" => read_text_sequences(r, nnet, true),
        "" => Err(Error::Usage(format!("{}: no readerType=...", r.path))),
        other => Err(Error::Usage(format!(
            "{}: readerType={other} is not supported: expected HTKMLFReader, KaldiReader, \
             UCIFastReader, LMSequenceReader or LUSequenceReader",
            origin(r, "readerType")
        ))),
    }
}

/// Whether a value is a Kaldi rspecifier (`ark:...`, `scp:...`, with options).
fn is_rspecifier(v: &str) -> bool {
    let v = v.trim_start();
    ["ark:", "scp:", "ark,", "scp,"]
        .iter()
        .any(|p| v.starts_with(p))
}

/// A KaldiReader key's rspecifier: the value when it is one, else the first line of the file
/// it names (Kaldi's recipes for CNTK write `cntk_train.feats` holding `scp:feats.scp`).
fn rspecifier_of(s: &Scope, key: &str) -> Result<Option<String>> {
    let Some(v) = s.get(key)? else {
        return Ok(None);
    };
    if is_rspecifier(&v) {
        return Ok(Some(v.trim().to_string()));
    }
    let text = crate::frontend::read_text(&v)?;
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if !is_rspecifier(first) {
        return Err(Error::Usage(format!(
            "{}: {key}={v}: {v}:1 holds '{first}', not a Kaldi rspecifier (ark:..., scp:...)",
            origin(s, key)
        )));
    }
    Ok(Some(first.to_string()))
}

/// CNTK's utterance list of a KaldiReader (`scpFile` with `rx`): `utt frames` per line, as
/// feat-to-len writes it.
fn read_counts(file: &str) -> Result<data::UtteranceList> {
    let text = crate::frontend::read_text(file)?;
    let mut out = std::collections::HashMap::new();
    for (i, l) in text.lines().enumerate() {
        let fields: Vec<&str> = l.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let line = i + 1;
        let frames = match fields.as_slice() {
            [_, n] => n.parse::<usize>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            Error::Usage(format!(
                "{file}:{line}: expected 'utterance frames' (feat-to-len's output), got '{}'",
                l.trim()
            ))
        })?;
        if out.insert(fields[0].to_string(), (frames, line)).is_some() {
            return Err(Error::Usage(format!(
                "{file}:{line}: utterance {} is listed twice",
                fields[0]
            )));
        }
    }
    Ok(out)
}

/// `KaldiReader` (also `Kaldi2Reader`): a features block with `rx` (a feature rspecifier, or
/// a file holding one) and `scpFile` (the utterance list, `utt frames` lines), or with only
/// `scpFile` (Kaldi's feats.scp, or an rspecifier); a labels block with `mlfFile`
/// (posteriors: an rspecifier or a file holding one, as Kaldi's recipes write
/// `ali-to-pdf ... | ali-to-post ...`) or `aliFile` (alignments of pdf ids), `labelDim`, and
/// optionally `labelMappingFile` (which must list 0, 1, ... in order: the labels are pdf ids).
/// `out_dim`: None for features only.
fn kaldi_source(r: &Scope, input_dim: usize, out_dim: Option<usize>) -> Result<data::KaldiSource> {
    let f = find_sub(r, "rx")
        .or_else(|| find_sub(r, "scpFile"))
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: KaldiReader needs a features block with rx=... or scpFile=...",
                r.path
            ))
        })?;
    dim_check(&f, "dim", input_dim, "input")?;
    let (feats, counts) = match rspecifier_of(&f, "rx")? {
        Some(rx) => {
            let counts = f
                .get("scpFile")?
                .map(|c| read_counts(&c).map(|m| (c, m)))
                .transpose()?;
            (rx, counts)
        }
        None => {
            let scp = f.get("scpFile")?.unwrap_or_default();
            let feats = if is_rspecifier(&scp) {
                scp
            } else {
                format!("scp:{scp}")
            };
            (feats, None)
        }
    };
    let (labels, alignments) = match out_dim {
        None => (String::new(), false),
        Some(out_dim) => {
            let (l, key) = match (find_sub(r, "mlfFile"), find_sub(r, "aliFile")) {
                (Some(l), _) => (l, "mlfFile"),
                (None, Some(l)) => (l, "aliFile"),
                (None, None) => {
                    return Err(Error::Usage(format!(
                        "{}: KaldiReader needs a labels block with mlfFile=... (posteriors) or \
                         aliFile=... (alignments)",
                        r.path
                    )))
                }
            };
            dim_check(&l, "labelDim", out_dim, "output")?;
            if let Some(map) = l.get("labelMappingFile")? {
                let text = crate::frontend::read_text(&map)?;
                let names: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .collect();
                if let Some((i, bad)) = names.iter().enumerate().find(|&(i, n)| *n != i.to_string())
                {
                    return Err(Error::Usage(format!(
                        "{map}:{}: '{bad}': a KaldiReader's labels are pdf ids, so the mapping \
                         must list 0, 1, 2, ... in order",
                        i + 1
                    )));
                }
            }
            let labels = rspecifier_of(&l, key)?.unwrap_or_default();
            (labels, key == "aliFile")
        }
    };
    Ok(data::KaldiSource {
        feats,
        labels,
        alignments,
        counts,
    })
}

/// `UCIFastReader`: one example per row, input and output at t = 0 (the network's context
/// filled with copies of the row).
fn read_uci(r: &Scope, nnet: &Nnet, input_dim: usize, out_dim: usize) -> Result<DataSet> {
    let file = r
        .get("file")?
        .ok_or_else(|| Error::Usage(format!("{}: UCIFastReader needs file=...", r.path)))?;
    let l = sub_with(r, "labelDim", ("UCIFastReader", "labels"))?;
    let f = r
        .keys()
        .into_iter()
        .filter_map(|k| r.block(k))
        .find(|s| s.entry("dim").is_some() && s.entry("labelDim").is_none())
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: UCIFastReader needs a features block with dim=...",
                r.path
            ))
        })?;
    dim_check(&f, "dim", input_dim, "input")?;
    dim_check(&l, "labelDim", out_dim, "output")?;
    let cols = crate::io::uci::UciColumns {
        feature_start: f.parse("start")?.unwrap_or(0),
        feature_dim: input_dim,
        label_column: l.parse("start")?.unwrap_or(0),
    };
    let map = l
        .get("labelMappingFile")?
        .map(|m| LabelMap::read(&m))
        .transpose()?;
    let text = crate::frontend::read_text(&file)?;
    let (feats, labels) = crate::io::uci::parse_uci(&text, &file, cols, map.as_ref())?;
    let ctx = crate::compile::context::nnet_context(nnet)?;
    let mut examples = Vec::with_capacity(labels.len());
    for (i, &label) in labels.iter().enumerate() {
        let row = GeneralMatrix::Full(Matrix::from_vec(1, input_dim, feats.row_to_vec(i)));
        let total = ctx.left + 1 + ctx.right;
        let mut eg = NnetExample::default();
        eg.io.push(crate::egs::cut::input_io(
            &row, -ctx.left, total, -ctx.left,
        )?);
        let sup = crate::egs::cut::sparse_row(out_dim, &[(label, 1.0)]).map_err(|bad| {
            Error::Usage(format!(
                "{file}:{}: label {bad} is outside 0..{out_dim} (the network's output \
                 dimension)",
                i + 1
            ))
        })?;
        eg.io.push(NnetIo {
            name: "output".into(),
            indexes: vec![Index::new(0, 0, 0)],
            features: GeneralMatrix::Sparse(SparseMatrix { rows: vec![sup] }),
        });
        examples.push(eg);
    }
    if examples.is_empty() {
        return Err(Error::Usage(format!("{file}: no rows")));
    }
    Ok(DataSet {
        source: file,
        examples: Arc::new(examples),
    })
}

/// The label sub-blocks of a sequence reader: (input words, output labels). CNTK names
/// them freely (`labelIn`, `labels`): the output one is the block with `labelType=NextWord`,
/// else the second block with `labelType` or `labelDim`.
fn sequence_label_blocks<'a>(r: &Scope<'a>, reader: &str) -> Result<(Scope<'a>, Scope<'a>)> {
    let blocks: Vec<Scope<'a>> = r
        .keys()
        .into_iter()
        .filter_map(|k| r.block(k))
        .filter(|s| s.entry("labelType").is_some() || s.entry("labelDim").is_some())
        .collect();
    let kind = |s: &Scope| -> Result<String> {
        Ok(s.get("labelType")?
            .unwrap_or_else(|| "Category".into())
            .to_ascii_lowercase())
    };
    for b in &blocks {
        let k = kind(b)?;
        if !matches!(k.as_str(), "category" | "nextword" | "none") {
            return Err(Error::Usage(format!(
                "{}: labelType={k}: expected Category, NextWord or None",
                origin(b, "labelType")
            )));
        }
    }
    let out = blocks
        .iter()
        .position(|b| kind(b).is_ok_and(|k| k == "nextword"))
        .or_else(|| (blocks.len() == 2).then_some(1));
    match (blocks.len(), out) {
        (2, Some(o)) => Ok((blocks[1 - o].clone(), blocks[o].clone())),
        _ => Err(Error::Usage(format!(
            "{}: {reader} needs two label blocks (the input words, e.g. labelIn=[labelType=\
             Category; ...], and the labels, e.g. labels=[labelType={}; ...]); found {}",
            r.path,
            if reader == "LMSequenceReader" {
                "NextWord"
            } else {
                "Category"
            },
            blocks.len()
        ))),
    }
}

/// `LMSequenceReader` and `LUSequenceReader` (`io::text_seq`): each sentence of `file` is one
/// example, its words one-hot at t = 0, 1, ... (LU: the words of `wordContext`'s offsets
/// stacked), its labels the next words (LM) or the file's per-token labels (LU); the
/// network's context is filled with copies of the first and last word.
fn read_text_sequences(r: &Scope, nnet: &Nnet, lu: bool) -> Result<DataSet> {
    use crate::io::text_seq;
    let reader = if lu {
        "LUSequenceReader"
    } else {
        "LMSequenceReader"
    };
    let file = r
        .get("file")?
        .ok_or_else(|| Error::Usage(format!("{}: {reader} needs file=...", r.path)))?;
    let unk = r.get("unk")?.unwrap_or_else(|| "<unk>".into());
    let (lin, lout) = sequence_label_blocks(r, reader)?;
    let text = crate::frontend::read_text(&file)?;
    let (seqs, vocab_in, context, labels_dim) = if lu {
        let tokens = |b: &Scope, what: &str| -> Result<text_seq::Vocab> {
            let t = b.get("token")?.ok_or_else(|| {
                Error::Usage(format!(
                    "{}: LUSequenceReader's {what} block needs token=file (a token per line)",
                    b.path
                ))
            })?;
            text_seq::read_token_list(&t)
        };
        let (vin, vout) = (tokens(&lin, "input")?, tokens(&lout, "label")?);
        let map = match (r.get("wordmap")?, lin.flag("useWordMap")?.unwrap_or(false)) {
            (Some(m), true) => Some(text_seq::read_word_map(&m)?),
            _ => None,
        };
        let context = match r.get("wordContext")? {
            Some(c) => text_seq::parse_word_context(&c)
                .map_err(|e| Error::Usage(format!("{}: {e}", origin(r, "wordContext"))))?,
            None => vec![0],
        };
        let seqs = text_seq::parse_lu(&text, &file, &vin, &vout, &unk, map.as_ref())?;
        (seqs, vin, context, vout.len())
    } else {
        let v = match (r.get("wordclass")?, lin.get("labelMappingFile")?) {
            (Some(wc), _) => text_seq::read_word_class(&wc)?,
            (None, Some(m)) => text_seq::read_token_list(&m)?,
            (None, None) => {
                return Err(Error::Usage(format!(
                    "{}: LMSequenceReader needs the vocabulary: wordclass=file (index count \
                     word class lines) or a labelMappingFile in the input label block",
                    r.path
                )))
            }
        };
        let begin = lin.get("beginSequence")?;
        let end = lin.get("endSequence")?;
        let seqs = text_seq::parse_lm(&text, &file, &v, &unk, begin.as_deref(), end.as_deref())?;
        let n = v.len();
        (seqs, v, vec![0], n)
    };
    let v = vocab_in.len();
    for (b, dim) in [(&lin, v), (&lout, labels_dim)] {
        if let Some(d) = b.parse::<usize>("labelDim")? {
            if d != dim {
                return Err(Error::Usage(format!(
                    "{}: labelDim={d}, but the token list has {dim} entries",
                    origin(b, "labelDim")
                )));
            }
        }
    }
    let set = data::text_sequence_examples(&file, &seqs, v, &context, labels_dim, nnet)?;
    log(
        P,
        &format!(
            "{}: {} sentences, {} tokens, {v} words in the vocabulary",
            r.path,
            seqs.len(),
            seqs.iter().map(|q| q.inputs.len()).sum::<usize>()
        ),
    );
    Ok(set)
}

/// The keys of the SGD block compnet maps (others are reported and ignored).
const SGD_KEYS: &[&str] = &[
    "minibatchSize",
    "learningRatesPerMB",
    "learningRatesPerSample",
    "momentumPerMB",
    "momentumPerSample",
    "momentumAsTimeConstant",
    "maxEpochs",
    "gradUpdateType",
    "rms_gamma",
    "rms_wgt_inc",
    "rms_wgt_dec",
    "rms_wgt_max",
    "rms_wgt_min",
    "gradientClippingWithTruncation",
    "clippingThresholdPerSample",
    "L2RegWeight",
    "L1RegWeight",
    "dropoutRate",
    "keepCheckPointFiles",
    "epochSize",
    "numMBsToShowResult",
    "gaussianNoiseInjectStd",
    "loadBestModel",
    "AutoAdjust",
    "traceLevel",
    "adaptationRegType",
    "adaptationRegWeight",
];

/// The momentum per minibatch for each of the `epochs` epochs: `momentumPerMB`, or
/// `momentumPerSample` (m per sample is m^size per minibatch of `size` samples) or
/// `momentumAsTimeConstant` (a time constant τ in samples: m = exp(-size/τ)), each a
/// per-epoch schedule in CNTK's notation; 0 when none is given.
fn cntk_momentum(sgd: &Scope, epochs: usize, minibatch: Option<&str>) -> Result<Vec<f64>> {
    use crate::train::fit::schedule::EpochSchedule;
    let given: Vec<&str> = [
        "momentumPerMB",
        "momentumPerSample",
        "momentumAsTimeConstant",
    ]
    .into_iter()
    .filter(|k| sgd.entry(k).is_some())
    .collect();
    let epochs = epochs.max(1);
    let Some(&key) = given.first() else {
        return Ok(vec![0.0; epochs]);
    };
    if given.len() > 1 {
        return Err(Error::Usage(format!(
            "{}: give one of {} (momentum is set once)",
            origin(sgd, given[1]),
            given.join(", ")
        )));
    }
    let text = sgd.get(key)?.unwrap_or_default();
    let at = origin(sgd, key);
    let sched = EpochSchedule::parse(&text, key).map_err(|e| Error::Usage(format!("{at}: {e}")))?;
    let sizes = EpochSchedule::parse(minibatch.unwrap_or("64"), "minibatchSize")?;
    let mut out = Vec::with_capacity(epochs);
    for e in 0..epochs {
        let v = sched.value(e);
        let size = sizes.value(e);
        let m = match key {
            "momentumPerMB" => v,
            "momentumPerSample" => v.powf(size),
            _ if v == 0.0 => 0.0,
            _ => (-size / v).exp(),
        };
        if !(0.0..1.0).contains(&m) || (key != "momentumAsTimeConstant" && v >= 1.0) {
            return Err(Error::Usage(format!(
                "{at}: {key}={text}: epoch {} has momentum {m}, outside [0, 1)",
                e + 1
            )));
        }
        out.push(m);
    }
    Ok(out)
}

/// `compnet fit`'s options from an SGD block.
fn fit_args(sgd: &Scope, ckp_dir: &str, seed: u64, shuffle: bool) -> Result<fit::Args> {
    for k in sgd.keys() {
        if !SGD_KEYS.iter().any(|s| s.eq_ignore_ascii_case(k)) {
            warn(
                P,
                &format!(
                    "{}: {} is not used by compnet (ignored)",
                    origin(sgd, k),
                    sgd.name(k)
                ),
            );
        }
    }
    let mut a = fit::Args {
        out: Some(ckp_dir.to_string()),
        srand: Some(seed),
        resume: Some(true),
        shuffle: Some(shuffle),
        chunk_width: Some(ChunkWidth { min: 1, max: 1 }),
        print_interval: sgd.parse("numMBsToShowResult")?,
        ..Default::default()
    };
    if let Some(e) = sgd.parse::<u64>("epochSize")? {
        if e != 0 {
            return Err(Error::Usage(format!(
                "{}: epochSize={e}: compnet's epochs are whole passes over the data (epochSize=0)",
                origin(sgd, "epochSize")
            )));
        }
    }
    a.num_epochs = sgd.parse("maxEpochs")?;
    a.minibatch_size = sgd.get("minibatchSize")?;
    let epochs = a
        .num_epochs
        .unwrap_or(crate::train::fit::FitOptions::default().num_epochs);
    let momenta = cntk_momentum(sgd, epochs, a.minibatch_size.as_deref())?;
    let momentum = momenta.iter().cloned().fold(0.0f64, f64::max) as f32;
    let update = sgd
        .get("gradUpdateType")?
        .unwrap_or_else(|| "None".into())
        .to_ascii_lowercase();
    let stepper = match update.as_str() {
        "none" if momentum > 0.0 => "momentum",
        "none" => "sgd",
        "adagrad" => "adagrad",
        "rmsprop" => "rmsprop",
        other => {
            return Err(Error::Usage(format!(
                "{}: gradUpdateType={other}: expected None, AdaGrad or RMSProp",
                origin(sgd, "gradUpdateType")
            )))
        }
    };
    a.stepper = Some(stepper.into());
    if stepper == "momentum" {
        // CNTK's momentum has unit gain: the step is (1 - m) times the rate times the
        // gradient plus m times the last step.
        a.momentum_gain = Some("unit".into());
        a.momentum = Some(momenta[0] as f32);
        if momenta.iter().any(|&m| m != momenta[0]) {
            a.momentum_schedule = Some(
                momenta
                    .iter()
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
                    .join(":"),
            );
        }
    } else {
        a.momentum = Some(0.0);
    }
    let (rates, per_mb) = match (
        sgd.get("learningRatesPerMB")?,
        sgd.get("learningRatesPerSample")?,
    ) {
        (Some(r), None) => (r, true),
        (None, Some(r)) => (r, false),
        (None, None) => {
            return Err(Error::Usage(format!(
                "block {}: learningRatesPerMB or learningRatesPerSample is needed",
                sgd.path
            )))
        }
        (Some(_), Some(_)) => {
            return Err(Error::Usage(format!(
                "block {}: give learningRatesPerMB or learningRatesPerSample, not both",
                sgd.path
            )))
        }
    };
    crate::train::fit::schedule::EpochSchedule::parse(&rates, "learningRates")?;
    a.learning_rate = Some(rates);
    a.lr_per = Some(if per_mb { "minibatch" } else { "sample" }.into());
    a.rms_gamma = sgd.parse("rms_gamma")?;
    a.rms_inc = sgd.parse("rms_wgt_inc")?;
    a.rms_dec = sgd.parse("rms_wgt_dec")?;
    a.rms_max = sgd.parse("rms_wgt_max")?;
    a.rms_min = sgd.parse("rms_wgt_min")?;
    a.l2 = sgd.parse("L2RegWeight")?;
    a.l1 = sgd.parse("L1RegWeight")?;
    a.gradient_noise = sgd.parse("gaussianNoiseInjectStd")?;
    // CNTK's L1RegWeight/L2RegWeight are per sample (times the minibatch's frames).
    a.regularize_per = Some("sample".into());
    let threshold: Option<f32> = sgd.parse("clippingThresholdPerSample")?;
    if let Some(t) = threshold.filter(|t| t.is_finite()) {
        a.clip_gradient = Some(t);
        // gradientClippingWithTruncation=false: each parameter's gradient scaled down to a
        // norm of at most the threshold times the minibatch's frames.
        if sgd.flag("gradientClippingWithTruncation")? == Some(false) {
            a.clip_by = Some("norm".into());
        }
    }
    a.dropout_per_epoch = sgd.get("dropoutRate")?;
    if let Some(adj) = sgd.block("AutoAdjust") {
        let when = adj.get("autoAdjustLR")?.unwrap_or_default();
        if when.eq_ignore_ascii_case("adjustAfterEpoch") {
            a.auto_adjust = Some(adj.parse("learnRateDecreaseFactor")?.unwrap_or(0.618));
            a.auto_adjust_threshold = adj.parse("reduceLearnRateIfImproveLessThan")?;
        } else if !when.is_empty() && !when.eq_ignore_ascii_case("none") {
            return Err(Error::Usage(format!(
                "{}: autoAdjustLR={when}: expected None or AdjustAfterEpoch",
                origin(&adj, "autoAdjustLR")
            )));
        }
    }
    a.load_best = sgd.flag("loadBestModel")?;
    Ok(a)
}

fn train(b: &Scope) -> Result<()> {
    train_from(b, None, None)
}

/// `action=adapt`: training continues from `origModelFileName`; with
/// `adaptationRegType=KL` each frame's target is (1 − w)·its label + w·the original model's
/// posteriors (`adaptationRegWeight` w), CNTK's KL-divergence regularisation toward the
/// original model. The settings are read from the SGD block or the adapt block.
fn adapt(b: &Scope) -> Result<()> {
    let orig_path = required(b, "origModelFileName")?;
    let sgd = b.block_inherited("SGD");
    let setting = |key: &str| -> Result<Option<String>> {
        match sgd.as_ref().map(|s| s.get(key)).transpose()?.flatten() {
            Some(v) => Ok(Some(v)),
            None => b.get_inherited(key),
        }
    };
    let kind = setting("adaptationRegType")?.unwrap_or_else(|| "None".into());
    let weight: f32 = match setting("adaptationRegWeight")? {
        None => 0.0,
        Some(v) => v
            .trim()
            .parse()
            .ok()
            .filter(|w| (0.0..=1.0).contains(w))
            .ok_or_else(|| {
                Error::Usage(format!(
                    "block {}: adaptationRegWeight={v}: expected a number in [0, 1]",
                    b.path
                ))
            })?,
    };
    let orig = Nnet::read_model_file(&orig_path)?.nnet;
    let relabel: Option<Relabel> = match kind.to_ascii_lowercase().as_str() {
        "none" => None,
        "kl" if weight == 0.0 => None,
        "kl" => {
            if orig.objective_type("output") != Some(ObjectiveType::Linear) {
                return Err(Error::Usage(format!(
                    "{orig_path}: KL adaptation needs an output of log-probabilities (a \
                     softmax cross-entropy criterion)"
                )));
            }
            let opts = crate::run::chunked::NnetSimpleComputationOptions::default();
            let cc = std::sync::Mutex::new(crate::run::chunked::ChunkComputer::new(
                orig.clone(),
                &opts,
                "output",
                None,
            )?);
            Some(Arc::new(
                move |_key: &str, feats: &GeneralMatrix, hard: Posterior| {
                    let m = cc
                        .lock()
                        .map_err(|_| Error::Compute("a KL target computation failed".into()))?
                        .compute(&feats.to_matrix(), crate::run::chunked::IvectorSource::None)?;
                    Ok(hard
                        .into_iter()
                        .enumerate()
                        .map(|(t, labels)| {
                            let mut row: Vec<(i32, f32)> = labels
                                .into_iter()
                                .map(|(l, v)| (l, v * (1.0 - weight)))
                                .collect();
                            row.extend(
                                m.row_to_vec(t)
                                    .into_iter()
                                    .enumerate()
                                    .map(|(k, lp)| (k as i32, weight * lp.exp()))
                                    .filter(|&(_, p)| p > 1e-7),
                            );
                            row
                        })
                        .collect())
                },
            ))
        }
        other => {
            return Err(Error::Usage(format!(
                "block {}: adaptationRegType={other}: expected None or KL",
                b.path
            )))
        }
    };
    train_from(b, Some(orig), relabel)
}

fn train_from(b: &Scope, start: Option<Nnet>, relabel: Option<Relabel>) -> Result<()> {
    let model_path = required(b, "modelPath")?;
    let seed: u64 = b
        .block_inherited("reader")
        .map(|r| r.parse("randomSeed"))
        .transpose()?
        .flatten()
        .unwrap_or(0);
    let ckp_dir = format!("{model_path}.ckp");
    if std::path::Path::new(&model_path).exists() && !std::path::Path::new(&ckp_dir).exists() {
        log(
            P,
            &format!(
                "{model_path} exists: training of {} is complete (skipped)",
                b.path
            ),
        );
        return Ok(());
    }
    // CNTK starts from `modelPath.0` when there is one (what an MEL edit writes for
    // layer-by-layer pre-training).
    let initial = format!("{model_path}.0");
    let nnet = if let Some(n) = start {
        n
    } else if std::path::Path::new(&initial).exists() {
        log(P, &format!("{}: starting from {initial}", b.path));
        Nnet::read_model_file(&initial)?.nnet
    } else {
        build_network(b, seed)?
    };
    let r = reader_block(b, "reader")?;
    let shuffle = !r
        .get("randomize")?
        .is_some_and(|v| v.eq_ignore_ascii_case("none"));
    let train = read_data(&r, &nnet, seed, relabel)?;
    let valid = b
        .block_inherited("cvReader")
        .map(|cv| read_data(&cv, &nnet, seed, None))
        .transpose()?;
    let sgd = reader_block(b, "SGD")?;
    let fa = fit_args(&sgd, &ckp_dir, seed, shuffle)?;
    let (mut opts, _) = fit::options(&fa)?;
    opts.epoch_models = Some(model_path.clone());
    let g = &opts.gradient;
    let mut settings = Vec::new();
    if opts.stepper.kind.name() == "momentum" {
        settings.push(format!(
            "momentum {} (unit gain)",
            fa.momentum_schedule
                .clone()
                .unwrap_or_else(|| opts.stepper.momentum.to_string())
        ));
    }
    if let Some(d) = &fa.dropout_per_epoch {
        settings.push(format!("dropout per epoch {d}"));
    }
    if g.clip > 0.0 {
        let how = if g.clip_norm { "norm" } else { "truncation" };
        settings.push(format!("clipping by {how} at {} per sample", g.clip));
    }
    if g.l1 > 0.0 || g.l2 > 0.0 {
        settings.push(format!("L1 {} and L2 {} per sample", g.l1, g.l2));
    }
    if !settings.is_empty() {
        log(P, &format!("{}: SGD: {}", b.path, settings.join(", ")));
    }
    log(
        P,
        &format!(
            "{}: {} training examples (one-frame chunks, as get-egs cuts them) from {}, stepper {}, {} epochs",
            b.path,
            train.examples.len(),
            train.source,
            opts.stepper.kind.name(),
            opts.num_epochs
        ),
    );
    let summary = crate::train::fit::fit(&opts, nnet, &train, valid.as_ref())?;
    let bytes = crate::io::read_file(&summary.final_model)?;
    crate::io::write_file_atomic(&model_path, &bytes)?;
    if !sgd.flag("keepCheckPointFiles")?.unwrap_or(false) {
        std::fs::remove_dir_all(&ckp_dir).map_err(|e| Error::io(&ckp_dir, e))?;
    }
    if let Some(last) = summary.records.last() {
        println!(
            "Finished Epoch[{}]: TrainLossPerSample = {}; EvalErrPerSample = {}; learningRate = {}",
            last.epoch,
            fmt_g(-last.train_objective),
            fmt_g(1.0 - last.train_accuracy),
            fmt_g(last.learning_rate)
        );
    }
    println!("model: {model_path}");
    Ok(())
}

/// `action=edit`: the MEL file `editPath`, its `$var$` filled from the block outwards, with
/// the block's `ndlMacros` for inline NDL.
fn edit(b: &Scope) -> Result<()> {
    let path = required(b, "editPath")?;
    let text = b.fill(&crate::frontend::read_text(&path)?, &path)?;
    let macros = match b.get_inherited("ndlMacros")? {
        Some(m) => crate::frontend::read_text(&m)?,
        None => String::new(),
    };
    let seed = b.parse::<u64>("randomSeed")?.unwrap_or(0);
    let read = |p: &str| Nnet::read_model_file(p).map(|r| r.nnet);
    let mut mel = crate::frontend::cntk::mel::Mel::new(&path, macros, seed, &read);
    let result = mel.run(&text);
    for l in &mel.log {
        log(P, l);
    }
    result
}

fn load_model(b: &Scope) -> Result<Nnet> {
    let path = required(b, "modelPath")?;
    let read = Nnet::read_model_file(&path)?;
    Ok(read.nnet)
}

fn eval(b: &Scope) -> Result<()> {
    let nnet = load_model(b)?;
    let r = reader_block(b, "reader")?;
    let data = read_data(&r, &nnet, 0, None)?;
    let mb: usize = b.parse("minibatchSize")?.unwrap_or(1024).max(1);
    let results = crate::train::fit::evaluate(&nnet, &data, mb, 0)?;
    let num_mb = data.examples.len().div_ceil(mb);
    for (name, objf, acc, frames) in results {
        let (crit, value) = match nnet.objective_type(&name) {
            Some(ObjectiveType::Quadratic) => ("SquareError", -objf),
            _ => ("CrossEntropyWithSoftmax", -objf),
        };
        println!(
            "Final Results: Minibatch[1-{num_mb}]: SamplesSeen = {}    {crit}: {name}/Sample = {}    ErrorPrediction: {name}/Sample = {}",
            fmt_g(frames),
            fmt_g(value),
            fmt_g(1.0 - acc)
        );
    }
    Ok(())
}

/// The utterances a reader gives, features only.
fn reader_utterances(r: &Scope, input_dim: usize) -> Result<Vec<(String, Matrix)>> {
    let kind = r.get("readerType")?.unwrap_or_default();
    if kind.eq_ignore_ascii_case("KaldiReader") || kind.eq_ignore_ascii_case("Kaldi2Reader") {
        let src = kaldi_source(r, input_dim, None)?;
        let mut out = Vec::new();
        for item in crate::io::table::SequentialTableReader::<GeneralMatrix>::open(&src.feats)? {
            let (key, m) = item?;
            if let Some((file, list)) = &src.counts {
                match list.get(&key) {
                    None => continue,
                    Some(&(n, line)) if n != m.num_rows() => {
                        return Err(Error::Usage(format!(
                            "{file}:{line}: utterance {key} has {n} frames here but {} in {}",
                            m.num_rows(),
                            src.feats
                        )))
                    }
                    _ => {}
                }
            }
            if m.num_cols() != input_dim {
                return Err(Error::Usage(format!(
                    "{}: utterance {key}: features of dimension {} but the network's input has \
                     dimension {input_dim}",
                    src.feats,
                    m.num_cols()
                )));
            }
            out.push((key, m.to_matrix()));
        }
        return Ok(out);
    }
    if !kind.eq_ignore_ascii_case("HTKMLFReader") {
        return Err(Error::Usage(format!(
            "{}: action=write reads utterances from an HTKMLFReader or KaldiReader \
             (readerType={kind})",
            r.path
        )));
    }
    let (scp, base) = htk_features(r, input_dim)?;
    crate::io::htk::read_scp_features(&scp, base.as_deref(), Some(input_dim))
}

/// An HTKMLFReader block's features: the script file its features block names (its `dim`, if
/// given, checked against the network's input) and the folder the script file is in (None:
/// the current one).
fn htk_features(r: &Scope, input_dim: usize) -> Result<(String, Option<String>)> {
    let f = sub_with(r, "scpFile", ("HTKMLFReader", "features"))?;
    dim_check(&f, "dim", input_dim, "input")?;
    let scp = f.get("scpFile")?.unwrap_or_default();
    let base = std::path::Path::new(&scp)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| !p.is_empty());
    Ok((scp, base))
}

fn write(b: &Scope) -> Result<()> {
    let nnet = load_model(b)?;
    let input_dim = node_dim(&nnet, "input", true)?;
    let r = reader_block(b, "reader")?;
    let utts = reader_utterances(&r, input_dim)?;
    let out = required(b, "outputPath")?;
    let nodes = b.get("outputNodeNames")?.unwrap_or_else(|| "output".into());
    let htk = b
        .get("outputType")?
        .is_some_and(|t| t.eq_ignore_ascii_case("htk"));
    let nodes: Vec<&str> = nodes
        .split(':')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if htk && nodes.len() != 1 {
        return Err(Error::Usage(format!(
            "{}: outputType=htk writes one node's values; outputNodeNames names {}",
            origin(b, "outputNodeNames"),
            nodes.len()
        )));
    }
    for node in nodes {
        if nnet.node_index(node).is_none() {
            let mut names: Vec<&str> = nnet.node_names.iter().map(String::as_str).collect();
            names.sort_unstable();
            return Err(Error::Usage(format!(
                "{}: outputNodeNames: the network has no node '{node}' (its nodes: {})",
                origin(b, "outputNodeNames"),
                names.join(", ")
            )));
        }
        let opts = crate::run::chunked::NnetSimpleComputationOptions::default();
        let mut cc = crate::run::chunked::ChunkComputer::new(nnet.clone(), &opts, node, None)?;
        let mut text = String::new();
        let mut scp = String::new();
        if htk {
            std::fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
        }
        for (key, feats) in &utts {
            let m = cc.compute(feats, crate::run::chunked::IvectorSource::None)?;
            if htk {
                let path = format!("{}/{key}.htk", out.trim_end_matches('/'));
                crate::io::write_file_atomic(
                    &path,
                    &crate::io::htk::write_htk(&m, crate::io::mlf::FRAME_PERIOD as i32, false)?,
                )?;
                scp.push_str(&format!("{key}={key}.htk\n"));
            } else {
                text.push_str(&format!("{key}  [\n"));
                for row in 0..m.num_rows() {
                    let vals: Vec<String> =
                        m.row_to_vec(row).iter().map(|&x| fmt_g(x as f64)).collect();
                    text.push_str(&format!("  {}\n", vals.join(" ")));
                }
                text.push_str("]\n");
            }
        }
        let written = if htk {
            let p = format!("{}/outputs.scp", out.trim_end_matches('/'));
            crate::io::write_file_atomic(&p, scp.as_bytes())?;
            p
        } else {
            let p = format!("{out}.{node}");
            crate::io::write_file_atomic(&p, text.as_bytes())?;
            p
        };
        println!(
            "wrote {} utterances of node {node} to {written}",
            utts.len()
        );
    }
    Ok(())
}
