//! `compnet ali-to-post` (Kaldi's `ali-to-post`): alignments (integer vectors) to posteriors,
//! each frame's index with weight 1.

use crate::cli::args::command_args;
use crate::error::Result;
use crate::io::table::{PosteriorWriter, SequentialTableReader};

command_args! {
    /// Options of `compnet ali-to-post`.
    #[usage("compnet ali-to-post [options] <alignments-rspecifier> <posteriors-wspecifier>")]
    #[example("compnet ali-to-post ark:1.ali ark:1.post")]
    pub struct Args {
        /// `<alignments-rspecifier> <posteriors-wspecifier>`.
        pub args: Vec<String>,
    }
}

/// Runs the command (exit status 1 when there was no alignment, as Kaldi's).
pub fn run(a: Args) -> Result<i32> {
    let [rspec, wspec] = Args::positionals(&a.args)?;
    let reader = SequentialTableReader::<Vec<i32>>::open(rspec)?;
    let mut writer = PosteriorWriter::open(wspec)?;
    let mut num_done = 0usize;
    for item in reader {
        let (key, ali) = item?;
        let post: crate::io::sparse::Posterior = ali.iter().map(|&i| vec![(i, 1.0)]).collect();
        writer.write(&key, &post)?;
        num_done += 1;
    }
    writer.close()?;
    crate::log::log(
        "compnet ali-to-post",
        &format!("Converted {num_done} alignments."),
    );
    Ok(if num_done != 0 { 0 } else { 1 })
}
