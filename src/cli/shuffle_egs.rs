//! `compnet shuffle-egs` (Kaldi's `nnet3-shuffle-egs`): examples in random order.
//!
//! The order is Kaldi's: the whole input is shuffled with libstdc++'s `std::shuffle` driven by
//! `std::mt19937` seeded with `--srand`; with `--buffer-size`, each example goes to a buffer
//! slot picked with `RandInt` from glibc's unseeded `rand()` (Kaldi's `--srand` does not reach
//! that stream), and an occupied slot's example is written out first.

use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::io::egs::{NnetExample, NnetExampleWriter, SequentialNnetExampleReader};
use crate::kaldi_rand::{GlibcRand, Mt19937};

command_args! {
    /// Options of `compnet shuffle-egs`.
    #[usage("compnet shuffle-egs [options] <egs-rspecifier> <egs-wspecifier>")]
    #[example("compnet shuffle-egs --srand=1 ark:train.egs ark:shuffled.egs")]
    pub struct Args {
        /// Seed of the random numbers.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        pub srand: i32,
        /// If > 0, shuffle through a buffer of this many examples (partial randomisation).
        #[arg(long = "buffer-size", default_value_t = 0, allow_hyphen_values = true)]
        pub buffer_size: i32,
        /// Input examples rspecifier.
        pub egs_in: String,
        /// Output examples wspecifier.
        pub egs_out: String,
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    if a.buffer_size < 0 {
        return Err(Error::Usage(format!(
            "--buffer-size must be >= 0, got {}",
            a.buffer_size
        )));
    }
    let reader = SequentialNnetExampleReader::open(&a.egs_in)?;
    let mut writer = NnetExampleWriter::open(&a.egs_out)?;
    let mut done = 0usize;
    if a.buffer_size == 0 {
        let mut egs = Vec::new();
        for item in reader {
            egs.push(item?);
        }
        Mt19937::new(a.srand as u32).shuffle(&mut egs);
        for (key, eg) in &egs {
            writer.write(key, eg)?;
            done += 1;
        }
    } else {
        crate::limits::check_elements(a.buffer_size as u64, 64, "the shuffle buffer")
            .map_err(Error::Usage)?;
        let mut rng = GlibcRand::default();
        let mut buffer: Vec<Option<(String, NnetExample)>> = vec![None; a.buffer_size as usize];
        for item in reader {
            let (key, eg) = item?;
            let slot = rng.rand_int(0, a.buffer_size - 1) as usize;
            if let Some((old_key, old)) = buffer[slot].replace((key, eg)) {
                writer.write(&old_key, &old)?;
                done += 1;
            }
        }
        for (key, eg) in buffer.iter().flatten() {
            writer.write(key, eg)?;
            done += 1;
        }
    }
    writer.close()?;
    crate::log::log(
        "shuffle-egs",
        &format!(
            "Shuffled order of {done} neural-network training examples {}",
            if a.buffer_size > 0 {
                "using a buffer (partial randomization)"
            } else {
                ""
            }
        ),
    );
    if done == 0 {
        // Kaldi exits with status 1 here too.
        return Err(Error::Usage("shuffle-egs: no examples were written".into()));
    }
    Ok(0)
}
