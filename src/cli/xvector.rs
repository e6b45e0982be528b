//! `compnet xvector-compute` (Kaldi's `nnet3-xvector-compute`): one vector per utterance from
//! an x-vector network's `output` node at t = 0, given the utterance's frames at t = 0, 1, ...
//! With `--chunk-size`, the utterance is cut into chunks of that many frames (the last one
//! shorter), each chunk's vector computed alone, and their average weighted by the chunks'
//! frame counts written. A chunk shorter than `--min-chunk-size` is padded to it by repeating
//! its first and last frames (`--pad-input`, the default) or, without padding, skipped; an
//! utterance shorter than the minimum is then skipped with a warning. BatchNorm and dropout
//! run in test mode, as in Kaldi's tool.

use crate::cli::kaldi_args::KaldiBool;
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::compile::request::{ComputationRequest, IoSpecification};
use crate::error::{Error, Result};
use crate::io::table::{SequentialTableReader, TableWriter};
use crate::log::{fmt_g, log, warn};
use crate::matrix::{Matrix, Vector};
use crate::nnet::Nnet;
use crate::run::NnetComputer;

/// Options of `compnet xvector-compute`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet xvector-compute [options] <raw-nnet-in> <features-rspecifier> <vector-wspecifier>",
    after_help = "e.g.: compnet xvector-compute final.raw scp:feats.scp ark:xvectors.ark"
)]
pub struct Args {
    /// Frames per chunk; -1: the whole utterance at once.
    #[arg(long = "chunk-size", default_value_t = -1, allow_negative_numbers = true)]
    pub chunk_size: i32,
    /// The fewest frames a chunk may have (shorter ones are padded or skipped).
    #[arg(long = "min-chunk-size", default_value_t = 100)]
    pub min_chunk_size: i32,
    /// Pad chunks shorter than --min-chunk-size by repeating their first and last frames.
    #[arg(long = "pad-input", kaldi_bool = "true")]
    pub pad_input: bool,
    /// Kaldi's device choice: `yes`, `no`, `optional` (a GPU when usable, else the CPU) or
    /// `wait` (as `yes`). `yes` without a usable GPU (or without the `cuda` build) is an error.
    #[arg(long = "use-gpu", default_value = "no")]
    pub use_gpu: String,
    #[command(flatten)]
    pub cuda: crate::cli::args::CudaOptions,
    /// How many compiled computations to keep (one per chunk length).
    #[arg(long = "cache-capacity", default_value_t = 64)]
    pub cache_capacity: usize,
    /// Compile requests with regular structure as a smaller one and expand it.
    #[arg(long = "use-shortcut", kaldi_bool = "true")]
    pub use_shortcut: bool,
    #[command(flatten)]
    pub optimization: crate::cli::compile::OptimizationArgs,
    /// `<raw-nnet-in> <features-rspecifier> <vector-wspecifier>`.
    pub args: Vec<String>,
}

const P: &str = "compnet xvector-compute";

/// The network's `output` at t = 0 for `feats` given at t = 0..rows.
fn xvector_of(nnet: &Nnet, compiler: &CachingCompiler, feats: Matrix) -> Result<Vec<f32>> {
    let request = ComputationRequest {
        inputs: vec![IoSpecification::from_ranges(
            "input",
            0..1,
            0..feats.num_rows() as i32,
            false,
        )],
        outputs: vec![IoSpecification::from_ranges("output", 0..1, 0..1, false)],
        ..Default::default()
    };
    let computation = compiler.compile(nnet, &request)?;
    let mut computer = NnetComputer::new(&computation, nnet, None);
    computer.accept_input("input", feats)?;
    computer.run_forward()?;
    Ok(computer.output("output")?.row_to_vec(0))
}

/// Rows `r0..r0 + n` of `m`, padded to `min` rows (when fewer) by repeating the first row
/// before them and the last after them, the extra rows split as Kaldi splits them.
fn chunk(m: &Matrix, r0: usize, n: usize, min: usize, pad: bool) -> Matrix {
    let cols = m.num_cols();
    let (left, right) = if pad && n < min {
        let left = (min - n) / 2;
        (left, min - n - left)
    } else {
        (0, 0)
    };
    let mut data = Vec::with_capacity((left + n + right) * cols);
    for _ in 0..left {
        data.extend(m.row_to_vec(r0));
    }
    for r in r0..r0 + n {
        data.extend(m.row_to_vec(r));
    }
    for _ in 0..right {
        data.extend(m.row_to_vec(r0 + n - 1));
    }
    Matrix::from_vec(left + n + right, cols, data)
}

/// Runs the command (exit status 1 when no utterance succeeded, as Kaldi's).
pub fn run(a: Args) -> Result<i32> {
    let [model_in, feats_rspec, wspec] = a.args.as_slice() else {
        return Err(Error::Usage(
            "usage: nnet3-xvector-compute [options] <raw-nnet-in> <features-rspecifier> \
             <vector-wspecifier>"
                .into(),
        ));
    };
    crate::cli::args::select_device("nnet3-xvector-compute", &a.use_gpu, &a.cuda)?;
    if a.chunk_size == 0 || a.chunk_size < -1 || a.min_chunk_size < 1 {
        return Err(Error::Usage(format!(
            "--chunk-size must be -1 or positive and --min-chunk-size positive (got {} and {})",
            a.chunk_size, a.min_chunk_size
        )));
    }
    let mut nnet = super::average::read_raw(model_in)?;
    for (name, want_input) in [("input", true), ("output", false)] {
        let ok = nnet.node_index(name).is_some_and(|i| {
            if want_input {
                nnet.is_input_node(i)
            } else {
                nnet.is_output_node(i)
            }
        });
        if !ok {
            return Err(Error::Compute(format!(
                "{model_in}: an x-vector network needs an input node 'input' and an output \
                 node 'output'"
            )));
        }
    }
    nnet.set_test_modes(true, true, 0);
    let compiler = CachingCompiler::new(CachingCompilerOptions {
        use_shortcut: a.use_shortcut,
        cache_capacity: a.cache_capacity,
        optimize: a.optimization.options(),
        ..Default::default()
    });
    let mut writer = TableWriter::<Vector>::open(wspec)?;
    let start = std::time::Instant::now();
    let (mut num_success, mut num_fail, mut frames) = (0usize, 0usize, 0u64);
    let min = a.min_chunk_size as usize;
    for item in SequentialTableReader::<Matrix>::open(feats_rspec)? {
        let (utt, feats) = item?;
        let rows = feats.num_rows();
        if rows == 0 {
            warn(P, &format!("Zero-length utterance: {utt}"));
            num_fail += 1;
            continue;
        }
        let mut this_chunk = a.chunk_size;
        if !a.pad_input && (rows as i64) < a.min_chunk_size as i64 {
            warn(
                P,
                &format!(
                    "Minimum chunk size of {} is greater than the number of rows in \
                     utterance: {utt}",
                    a.min_chunk_size
                ),
            );
            num_fail += 1;
            continue;
        } else if (rows as i64) < a.chunk_size as i64 {
            log(
                P,
                &format!(
                    "Chunk size of {} is greater than the number of rows in utterance: {utt}, \
                     using chunk size  of {rows}",
                    a.chunk_size
                ),
            );
            this_chunk = rows as i32;
        } else if a.chunk_size == -1 {
            this_chunk = rows as i32;
        }
        let this_chunk = this_chunk as usize;
        let num_chunks = rows.div_ceil(this_chunk);
        let in_utt = |e: Error| Error::Compute(format!("{feats_rspec}: utterance {utt}: {e}"));
        let mut avg: Option<Vec<f32>> = None;
        let mut tot_weight = 0.0f32;
        for c in 0..num_chunks {
            let offset = this_chunk.min(rows - c * this_chunk);
            if !a.pad_input && offset < min {
                continue;
            }
            tot_weight += offset as f32;
            let m = chunk(&feats, c * this_chunk, offset, min, a.pad_input);
            let xv = xvector_of(&nnet, &compiler, m).map_err(in_utt)?;
            let acc = avg.get_or_insert_with(|| vec![0.0; xv.len()]);
            for (s, v) in acc.iter_mut().zip(&xv) {
                *s = (offset as f32).mul_add(*v, *s);
            }
        }
        let mut avg = avg.unwrap_or_default();
        let scale = (1.0 / tot_weight as f64) as f32;
        avg.iter_mut().for_each(|x| *x *= scale);
        writer.write(&utt, &Vector::from_vec(avg))?;
        frames += rows as u64;
        num_success += 1;
    }
    writer.close()?;
    let elapsed = start.elapsed().as_secs_f64();
    log(
        P,
        &format!(
            "Time taken {}s: real-time factor assuming 100 frames/sec is {}",
            fmt_g(elapsed),
            fmt_g(elapsed * 100.0 / frames.max(1) as f64)
        ),
    );
    log(
        P,
        &format!("Done {num_success} utterances, failed for {num_fail}"),
    );
    Ok(if num_success != 0 { 0 } else { 1 })
}
