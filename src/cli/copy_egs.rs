//! `compnet copy-egs` (Kaldi's `nnet3-copy-egs`): copy examples, optionally selecting one
//! output frame, trimming the input context, shifting times, keeping a random proportion, and
//! spreading them over several outputs (round-robin, or at random with `--random`).
//!
//! Random choices are Kaldi's, from glibc's `rand()` after `srand(--srand)`, drawn per example
//! in Kaldi's order: the copy count (`--keep-proportion` with a fractional part), then for each
//! copy its output (`--random`) and its frame (`--frame=random`).

use super::kaldi_args::parse_kaldi_bool;
use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::egs::{NnetExample, NnetExampleWriter, NnetIo, SequentialNnetExampleReader};
use crate::io::sparse::{GeneralMatrix, SparseMatrix};
use crate::io::table::RandomAccessTableReader;
use crate::kaldi_rand::GlibcRand;
use crate::matrix::Matrix;

command_args! {
    /// Options of `compnet copy-egs`.
    #[usage("compnet copy-egs [options] <egs-rspecifier> <egs-wspecifier1> [<egs-wspecifier2> ...]")]
    #[example("compnet copy-egs ark:train.egs ark,t:text.egs")]
    pub struct Args {
        /// Write each example to a random output instead of round-robin.
        #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
        pub random: bool,
        /// Seed of the random numbers.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        pub srand: i32,
        /// Expected copies of each example (< 1 keeps a random proportion).
        #[arg(long = "keep-proportion", default_value_t = 1.0)]
        pub keep_proportion: f32,
        /// Keep only this output frame (a t value) or `random`.
        #[arg(long, default_value = "")]
        pub frame: String,
        /// Trim the input to this much left context (-1: keep).
        #[arg(long = "left-context", default_value_t = -1, allow_hyphen_values = true)]
        pub left_context: i32,
        /// Trim the input to this much right context (-1: keep).
        #[arg(long = "right-context", default_value_t = -1, allow_hyphen_values = true)]
        pub right_context: i32,
        /// Add this to the t values of every io except `ivector` (after frame selection).
        #[arg(long = "frame-shift", default_value_t = 0, allow_hyphen_values = true)]
        pub frame_shift: i32,
        /// Rspecifier of a weight per example key; the supervision of output `output` is scaled
        /// by it (multilingual training). Examples without a weight are skipped with a warning.
        #[arg(long, default_value = "")]
        pub weights: String,
        /// Rspecifier of an output name per example key; output `output` is renamed to it
        /// (multilingual training). Examples without a name are skipped with a warning.
        #[arg(long, default_value = "")]
        pub outputs: String,
        /// Input examples rspecifier.
        pub egs_in: String,
        /// Output wspecifiers (one or more).
        #[arg(required = true, num_args = 1..)]
        pub egs_out: Vec<String>,
    }
}

/// Kaldi's `ScaleSupervisionWeight`: scales the io named `output`.
fn scale_output(eg: &mut NnetExample, weight: f32, key: &str) -> Result<()> {
    let mut found = false;
    for io in eg.io.iter_mut().filter(|io| io.name == "output") {
        io.features.scale(weight);
        found = true;
    }
    if !found {
        return Err(Error::Usage(format!(
            "copy-egs: example {key} has no supervision named 'output' to weight"
        )));
    }
    Ok(())
}

/// Kaldi's `RenameOutputs`: the io named `output` gets `name`.
fn rename_output(eg: &mut NnetExample, name: &str, key: &str) -> Result<()> {
    let mut found = false;
    for io in eg.io.iter_mut().filter(|io| io.name == "output") {
        io.name = name.to_string();
        found = true;
    }
    if !found {
        return Err(Error::Usage(format!(
            "copy-egs: example {key} has no output named 'output' to rename"
        )));
    }
    Ok(())
}

/// Kaldi's `GetCount`: the whole part of `expected`, plus one with the fractional part's
/// probability.
fn get_count(expected: f32, rng: &mut GlibcRand) -> i32 {
    let whole = expected.floor();
    let frac = expected - whole;
    whole as i32 + i32::from(rng.with_prob(frac))
}

/// The t range of an io named `name` when every index has n = 0 (`Err` names the problem).
fn t_range(eg: &NnetExample, name: &str) -> std::result::Result<(i32, i32), String> {
    let io = eg
        .get(name)
        .ok_or_else(|| format!("the example has no io named \"{name}\""))?;
    let ts = io.indexes.iter().map(|i| i.t);
    match (ts.clone().min(), ts.max()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(format!("the example's \"{name}\" has no indexes")),
    }
}

/// Rows of `m` where `keep` is true (Kaldi's `FilterGeneralMatrixRows`: a compressed matrix
/// comes back full; all rows kept returns the matrix unchanged).
fn filter_rows(m: &GeneralMatrix, keep: &[bool]) -> GeneralMatrix {
    if keep.iter().all(|&k| k) {
        return m.clone();
    }
    match m {
        GeneralMatrix::Sparse(s) => GeneralMatrix::Sparse(SparseMatrix {
            rows: s
                .rows
                .iter()
                .zip(keep)
                .filter(|(_, &k)| k)
                .map(|(r, _)| r.clone())
                .collect(),
        }),
        _ => {
            let full = m.to_matrix();
            let rows: Vec<usize> = (0..keep.len()).filter(|&r| keep[r]).collect();
            let mut out = Matrix::zeros(rows.len(), full.num_cols());
            for (i, &r) in rows.iter().enumerate() {
                out.copy_row_from_slice(i, &full.row_to_vec(r));
            }
            GeneralMatrix::Full(out)
        }
    }
}

/// Kaldi's `SelectFromExample`: `None` when a numbered `--frame` is outside the example.
fn select(
    eg: &NnetExample,
    a: &Args,
    rng: &mut GlibcRand,
    warned: &mut [bool; 2],
) -> Result<Option<NnetExample>> {
    if eg.io.iter().any(|io| io.indexes.iter().any(|i| i.n != 0)) {
        return Err(Error::Usage(
            "copy-egs: too late to select frames or reduce context: the examples are already merged"
                .into(),
        ));
    }
    let (mut in_min, mut in_max) = t_range(eg, "input").map_err(Error::Usage)?;
    let (mut out_min, mut out_max) = t_range(eg, "output").map_err(Error::Usage)?;
    if !a.frame.is_empty() {
        let f = if a.frame == "random" {
            rng.rand_int(out_min, out_max)
        } else {
            let f: i32 = a
                .frame
                .parse()
                .map_err(|_| Error::Usage(format!("invalid option --frame='{}'", a.frame)))?;
            if f < out_min || f > out_max {
                return Ok(None);
            }
            f
        };
        (out_min, out_max) = (f, f);
    }
    if a.left_context != -1 {
        let want = out_min.saturating_sub(a.left_context);
        if in_min > want {
            let has = out_min as i64 - in_min as i64;
            warn_context_once(
                &mut warned[0],
                "left",
                a.left_context,
                has,
                "initial options)",
            );
        }
        in_min = in_min.max(want);
    }
    if a.right_context != -1 {
        let want = out_max.saturating_add(a.right_context);
        if in_max < want {
            let has = in_max as i64 - out_max as i64;
            warn_context_once(
                &mut warned[1],
                "right",
                a.right_context,
                has,
                "final options.",
            );
        }
        in_max = in_max.min(want);
    }
    let mut out = NnetExample::default();
    for io in &eg.io {
        let range = match io.name.as_str() {
            "input" => Some((in_min, in_max)),
            "output" => Some((out_min, out_max)),
            _ => None,
        };
        let mut io = match range {
            None => io.clone(),
            Some((lo, hi)) => {
                let keep: Vec<bool> = io.indexes.iter().map(|i| i.t >= lo && i.t <= hi).collect();
                if !keep.iter().any(|&k| k) {
                    return Err(Error::Usage(format!(
                        "copy-egs: no rows of \"{}\" are left after selection",
                        io.name
                    )));
                }
                NnetIo {
                    name: io.name.clone(),
                    indexes: io
                        .indexes
                        .iter()
                        .zip(&keep)
                        .filter(|(_, &k)| k)
                        .map(|(i, _)| *i)
                        .collect(),
                    features: filter_rows(&io.features, &keep),
                }
            }
        };
        if a.frame_shift != 0 && io.name != "ivector" {
            io.indexes = io
                .indexes
                .iter()
                .map(|i| Index::new(i.n, i.t.wrapping_add(a.frame_shift), i.x))
                .collect();
        }
        out.io.push(io);
    }
    Ok(Some(out))
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    if a.keep_proportion.is_nan() || a.keep_proportion < 0.0 {
        return Err(Error::Usage(format!(
            "--keep-proportion must be >= 0, got {}",
            a.keep_proportion
        )));
    }
    let mut rng = GlibcRand::new(a.srand as u32);
    let reader = SequentialNnetExampleReader::open(&a.egs_in)?;
    let mut writers = a
        .egs_out
        .iter()
        .map(|w| NnetExampleWriter::open(w))
        .collect::<Result<Vec<_>>>()?;
    let n_out = writers.len();
    let plain =
        a.frame.is_empty() && a.left_context == -1 && a.right_context == -1 && a.frame_shift == 0;
    let mut weights = match a.weights.as_str() {
        "" => None,
        r => Some(RandomAccessTableReader::<f32>::open(r)?),
    };
    let mut output_names = match a.outputs.as_str() {
        "" => None,
        r => Some(RandomAccessTableReader::<String>::open(r)?),
    };
    let (mut read, mut written, mut errors) = (0usize, 0usize, 0usize);
    let mut warned = [false; 2];
    for item in reader {
        let (key, mut eg) = item?;
        read += 1;
        // As Kaldi: weight and name are looked up before any random number is drawn, and an
        // example without them counts as an error and is skipped.
        if let Some(r) = weights.as_mut() {
            let Some(&w) = r.get(&key)? else {
                eprintln!("WARNING (copy-egs) No weight for example key {key}");
                errors += 1;
                continue;
            };
            if w != 1.0 {
                scale_output(&mut eg, w, &key)?;
            }
        }
        if let Some(r) = output_names.as_mut() {
            let Some(name) = r.get(&key)? else {
                eprintln!("WARNING (copy-egs) No new output-name for example key {key}");
                errors += 1;
                continue;
            };
            let name = name.clone();
            rename_output(&mut eg, &name, &key)?;
        }
        let count = get_count(a.keep_proportion, &mut rng);
        // Per copy, Kaldi picks the output and then selects frames (so each copy of an
        // example gets its own random frame).
        for _ in 0..count {
            let index = if a.random {
                rng.rand() as usize % n_out
            } else {
                written % n_out
            };
            let selected = if plain {
                None
            } else {
                match select(&eg, &a, &mut rng, &mut warned)? {
                    Some(e) => Some(e),
                    None => continue,
                }
            };
            writers[index].write(&key, selected.as_ref().unwrap_or(&eg))?;
            written += 1;
        }
    }
    for w in writers {
        w.close()?;
    }
    eprintln!(
        "LOG (copy-egs) Read {read} neural-network training examples, wrote {written}, {errors} examples had errors."
    );
    if written == 0 {
        // Kaldi exits with status 1 here too.
        return Err(Error::Usage("copy-egs: no examples were written".into()));
    }
    Ok(0)
}

/// Kaldi's warning (once per run) that an example has less `side` context than requested;
/// `tail` ends it as Kaldi's text does for that side.
fn warn_context_once(warned: &mut bool, side: &str, requested: i32, has: i64, tail: &str) {
    if !*warned {
        *warned = true;
        eprintln!(
            "WARNING (copy-egs) You requested --{side}-context={requested}, but example only has {side}-context of {has} (will warn only once; this may be harmless if using any --*{side}-context-{tail}"
        );
    }
}
