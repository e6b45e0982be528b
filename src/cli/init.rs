//! `compnet init` (Kaldi's `nnet3-init`): creates a network from a config file, or applies a
//! config to an existing network, and writes it as a raw model.
//!
//! Usage: `compnet init [--srand=N] [--binary=true|false] [--format=kaldi|ndl|brainstorm]
//! [<existing-model>] <config> <model-out>`; an NDL (`.ndl`) or Brainstorm (`.json`) file is
//! read by its front end.

use super::kaldi_args::parse_kaldi_bool;
use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::frontend::{read_network, Format};
use crate::nnet::Nnet;

command_args! {
    /// Options of `compnet init`.
    #[usage("compnet init [options] [<existing-model-in>] <config-in> <raw-nnet-out>")]
    #[example("compnet init --srand=1 nnet.config 0.raw")]
    pub struct Args {
        /// Seed for the random initialisation of parameters.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        pub srand: i64,
        /// Write the model in binary (`--binary=false` for text).
        #[arg(long, value_parser = parse_kaldi_bool, num_args = 0..=1, default_value = "true",
              default_missing_value = "true", action = clap::ArgAction::Set)]
        pub binary: bool,
        /// The language of <config>: kaldi, ndl or brainstorm [by extension: .ndl, .json, else kaldi].
        #[arg(long)]
        pub format: Option<String>,
        /// `[<existing-model>] <config> <model-out>`.
        #[arg(num_args = 2..=3, required = true, value_name = "ARGS")]
        pub args: Vec<String>,
    }
}

/// Reads a config file (`-` = stdin) as UTF-8 text.
pub fn read_config_text(path: &str) -> Result<String> {
    let bytes = crate::io::read_file(path)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        Error::format(path, at, "UTF-8 text", "a byte that is not valid UTF-8")
    })
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let (existing, config, out) = match a.args.as_slice() {
        [c, o] => (None, c, o),
        [m, c, o] => (Some(m), c, o),
        _ => {
            return Err(Error::Usage(
                "usage: compnet init [--srand=N] [--binary=true|false] [<existing-model>] <config> <model-out>"
                    .into(),
            ))
        }
    };
    // Kaldi's nnet3-init calls srand(--srand) and every component draws from that rand()
    // stream in config order (each parameter fill through its own RandomState).
    let mut init_rng = crate::kaldi_rand::GlibcRand::new(a.srand as u32);
    let format = match &a.format {
        Some(f) => Format::parse(f)?,
        None => Format::from_path(config),
    };
    let config_name = if config == "-" {
        "<stdin>"
    } else {
        config.as_str()
    };
    let nnet = match existing {
        Some(m) if format == Format::Kaldi => {
            let text = read_config_text(config)?;
            let mut nnet = Nnet::read_model_file(m)?.nnet;
            nnet.apply_config_text(&text, config_name, &mut init_rng)?;
            nnet
        }
        Some(_) => {
            return Err(Error::Usage(format!(
                "compnet init: adding to an existing network takes an nnet3 config; {config} is {}",
                format.name()
            )))
        }
        None => read_network(config, Some(format), &mut init_rng)?,
    };
    nnet.write_model_file(out, a.binary)?;
    eprintln!("compnet init: initialized raw neural net and wrote it to {out}");
    Ok(0)
}
