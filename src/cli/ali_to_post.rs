//! `compnet ali-to-post` (Kaldi's `ali-to-post`): alignments (integer vectors) to posteriors,
//! each frame's index with weight 1.

use crate::error::{Error, Result};
use crate::io::table::{PosteriorWriter, SequentialTableReader};

/// Options of `compnet ali-to-post`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet ali-to-post [options] <alignments-rspecifier> <posteriors-wspecifier>",
    after_help = "e.g.: compnet ali-to-post ark:1.ali ark:1.post"
)]
pub struct Args {
    /// `<alignments-rspecifier> <posteriors-wspecifier>`.
    pub args: Vec<String>,
}

/// Runs the command (exit status 1 when there was no alignment, as Kaldi's).
pub fn run(a: Args) -> Result<i32> {
    let [rspec, wspec] = a.args.as_slice() else {
        return Err(Error::Usage(
            "usage: ali-to-post [options] <alignments-rspecifier> <posteriors-wspecifier>".into(),
        ));
    };
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
