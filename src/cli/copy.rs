//! `compnet copy` (Kaldi's `nnet3-copy`): reads a network (raw or final.mdl), optionally sets
//! the learning rate or scales the parameters, and writes it as a raw model.

use crate::cli::init::parse_kaldi_bool;
use crate::error::{Error, Result};
use crate::nnet::Nnet;

/// Options of `compnet copy`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet copy [--binary=true|false] [--learning-rate=R] [--scale=S] <model-in> <model-out>"
)]
pub struct Args {
    /// Write the model in binary (`--binary=false` for text).
    #[arg(long, value_parser = parse_kaldi_bool, num_args = 0..=1, default_value = "true",
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub binary: bool,
    /// If >= 0, sets the learning rate of every updatable component (times its
    /// learning-rate-factor).
    #[arg(long = "learning-rate", alias = "learning_rate", default_value_t = -1.0,
          allow_negative_numbers = true)]
    pub learning_rate: f32,
    /// Multiplies all parameters by this factor.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub scale: f32,
    /// Input model (`-` = stdin).
    pub input: String,
    /// Output model (`-` = stdout).
    pub output: String,
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    if !a.learning_rate.is_finite() || !a.scale.is_finite() {
        return Err(Error::Usage(
            "compnet copy: --learning-rate and --scale must be finite numbers".into(),
        ));
    }
    let mut nnet = Nnet::read_model_file(&a.input)?.nnet;
    if a.learning_rate >= 0.0 {
        nnet.set_learning_rate(a.learning_rate);
    }
    nnet.scale_all(a.scale);
    nnet.write_model_file(&a.output, a.binary)?;
    eprintln!(
        "compnet copy: copied raw neural net from {} to {}",
        a.input, a.output
    );
    Ok(0)
}
