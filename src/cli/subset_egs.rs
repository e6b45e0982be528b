//! `compnet subset-egs` (Kaldi's `nnet3-subset-egs`): a random subset of `--n` examples,
//! holding no more than the subset in memory.
//!
//! Kaldi's choices, reproduced: the first `n` examples fill the subset; example `k > n` then
//! replaces a slot picked with `RandInt(0, n-1)` with probability `n / k` (`WithProb`), both
//! from glibc's unseeded `rand()`; with `--randomize-order` (the default) the subset is
//! shuffled with libstdc++'s `std::shuffle` driven by `std::mt19937` seeded with `--srand`.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::egs::{NnetExample, NnetExampleWriter, SequentialNnetExampleReader};
use crate::kaldi_rand::{GlibcRand, Mt19937};
use crate::log::log;

command_args! {
    /// Options of `compnet subset-egs`.
    #[usage("compnet subset-egs [options] <egs-rspecifier> <egs-wspecifier>")]
    #[example("compnet subset-egs --n=1000 ark:egs.1.ark ark:subset.egs")]
    pub struct Args {
        /// Seed of the shuffle of the subset.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        pub srand: i32,
        /// Number of examples to output.
        #[arg(long, default_value_t = 1000, allow_hyphen_values = true)]
        pub n: i32,
        /// Shuffle the subset before writing it.
        #[arg(long = "randomize-order", kaldi_bool = "true")]
        pub randomize_order: bool,
        /// `<egs-rspecifier> <egs-wspecifier>`.
        pub args: Vec<String>,
    }
}

/// Runs the command (exit status 1 when the input held no example, as Kaldi's).
pub fn run(a: Args) -> Result<i32> {
    let [rspec, wspec] = Args::positionals(&a.args)?;
    if a.n <= 0 {
        return Err(Error::Usage(format!("--n must be positive, got {}", a.n)));
    }
    let n = a.n as usize;
    crate::limits::check_elements(n as u64, 64, "the subset of examples").map_err(Error::Usage)?;
    let mut rng = GlibcRand::default();
    let mut egs: Vec<(String, NnetExample)> = Vec::new();
    let mut num_read = 0u64;
    for item in SequentialNnetExampleReader::open(rspec)? {
        let (key, eg) = item?;
        num_read += 1;
        if num_read <= n as u64 {
            egs.push((key, eg));
        } else {
            let keep_prob = n as f32 / num_read as f32;
            if rng.with_prob(keep_prob) {
                let index = rng.rand_int(0, a.n - 1) as usize;
                egs[index] = (key, eg);
            }
        }
    }
    if a.randomize_order {
        Mt19937::new(a.srand as u32).shuffle(&mut egs);
    }
    let mut writer = NnetExampleWriter::open(wspec)?;
    for (key, eg) in &egs {
        writer.write(key, eg)?;
    }
    writer.close()?;
    log(
        "compnet subset-egs",
        &format!(
            "Selected a subset of {} out of {num_read} neural-network training examples ",
            egs.len()
        ),
    );
    Ok(if num_read != 0 { 0 } else { 1 })
}
