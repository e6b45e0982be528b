//! `compnet eval <model> <data>`: objective and accuracy per output of a network on a data set
//! (CNTK's eval; the data as `compnet fit` reads it: egs or a feature/label directory).

use crate::cli::args::command_args;
use crate::error::Result;
use crate::log::fmt_g;
use crate::train::fit::data::{load, ChunkOptions, ChunkWidth, LabelKind};

command_args! {
    /// Options of `compnet eval`.
    #[usage("compnet eval [options] <model> <data>")]
    #[example("compnet eval final.raw ark:valid.egs")]
    pub struct Args {
        /// Frames per chunk cut from feature archives (as `compnet fit`'s: N, or MIN,MAX with
        /// utt2label).
        #[arg(long = "chunk-width", default_value = "8")]
        pub chunk_width: ChunkWidth,
        /// The labels of a data directory: frame, utterance (utt2label) or auto.
        #[arg(long = "labels", default_value = "auto")]
        pub labels: String,
        /// Seeds per-utterance chunk widths and offsets.
        #[arg(long = "srand", default_value_t = 0)]
        pub srand: u64,
        /// Extra left context of chunks (recurrent networks).
        #[arg(long = "extra-left-context", default_value_t = 0)]
        pub extra_left_context: i32,
        /// Extra right context of chunks.
        #[arg(long = "extra-right-context", default_value_t = 0)]
        pub extra_right_context: i32,
        /// Examples per minibatch.
        #[arg(long = "minibatch-size", default_value_t = 64)]
        pub minibatch_size: usize,
        #[command(flatten)]
        pub threads: crate::cli::args::Threads,
        /// Arithmetic of the affine family's products: `none` (floats) or `int8` (as
        /// `compnet compute --quantize`).
        #[arg(long = "quantize", default_value = "none")]
        pub quantize: String,
        /// `<model> <data>`.
        pub args: Vec<String>,
    }
}

/// Runs the command: one line per output.
pub fn run(a: Args) -> Result<i32> {
    let [model, data] = Args::positionals(&a.args)?;
    a.threads.apply()?;
    let int8 = super::compute::parse_quantize(&a.quantize)?;
    let mut nnet = super::fit::read_or_init(model, None, 0)?;
    if int8 {
        nnet.set_int8_inference(true);
    }
    let chunk = ChunkOptions {
        chunk_width: a.chunk_width,
        extra_left_context: a.extra_left_context,
        extra_right_context: a.extra_right_context,
        labels: LabelKind::parse(&a.labels)?,
        seed: a.srand,
    };
    let set = load(data, &nnet, &chunk)?;
    for (name, objf, acc, frames) in
        crate::train::fit::evaluate(&nnet, &set, a.minibatch_size.max(1), 0)?
    {
        println!(
            "output {name}: objective {} accuracy {} over {} frames",
            fmt_g(objf),
            fmt_g(acc),
            fmt_g(frames)
        );
    }
    Ok(0)
}
