//! `compnet copy` (Kaldi's `nnet3-copy`): reads a network (raw or final.mdl), optionally sets
//! the learning rate or scales the parameters, applies a config and edit directives
//! (`nnet::edit`), and writes it as a raw model.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::{parse_kaldi_bool, KaldiBool};
use crate::error::{Error, Result};
use crate::nnet::{edit, Nnet};

command_args! {
    /// Options of `compnet copy`.
    #[usage("compnet copy [options] <nnet-in> <nnet-out>")]
    #[example("compnet copy --binary=false 0.raw text.raw")]
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
        /// Apply this nnet3 config to the network first: add or replace components and nodes,
        /// as `compnet init <existing> <config>` does (new parameters drawn with seed 0).
        #[arg(long = "nnet-config", default_value = "")]
        pub nnet_config: String,
        /// Edit directives applied after --nnet-config, --learning-rate and --scale (`;`
        /// separates lines), e.g. `--edits='set-dropout-proportion name=* proportion=0.1'`; see
        /// `nnet::edit` for the directives.
        #[arg(long, default_value = "")]
        pub edits: String,
        /// A file of edit directives, one per line, applied before --edits.
        #[arg(long = "edits-config", default_value = "")]
        pub edits_config: String,
        /// Put BatchNorm components in test mode (they use their stored statistics).
        #[arg(long = "batchnorm-test-mode", kaldi_bool = "false")]
        pub batchnorm_test_mode: bool,
        /// Prepare for test time: BatchNorm and dropout in test mode. Kaldi also collapses
        /// components into their neighbours (`CollapseModel`); compnet does not, so the model keeps
        /// its components and computes the same outputs.
        #[arg(long = "prepare-for-test", kaldi_bool = "false")]
        pub prepare_for_test: bool,
        /// Input model (`-` = stdin).
        pub input: String,
        /// Output model (`-` = stdout).
        pub output: String,
    }
}

/// Runs the command.
/// Applies the edit directives of `--edits-config` (a file) and then `--edits` (inline;
/// either may be empty) to `nnet`, logging what each did under `program`.
pub fn apply_edit_options(
    nnet: &mut Nnet,
    edits_config: &str,
    edits: &str,
    program: &str,
) -> Result<()> {
    let mut texts: Vec<(String, String)> = Vec::new();
    if !edits_config.is_empty() {
        texts.push((
            crate::cli::init::read_config_text(edits_config)?,
            edits_config.to_string(),
        ));
    }
    if !edits.is_empty() {
        texts.push((edit::edits_option_text(edits), "--edits".into()));
    }
    for (text, file) in texts {
        for msg in edit::apply_edit_config(nnet, &text, &file)? {
            crate::log::log(program, &msg);
        }
    }
    Ok(())
}

pub fn run(a: Args) -> Result<i32> {
    if !a.learning_rate.is_finite() || !a.scale.is_finite() {
        return Err(Error::Usage(
            "compnet copy: --learning-rate and --scale must be finite numbers".into(),
        ));
    }
    let mut nnet = Nnet::read_model_file(&a.input)?.nnet;
    if !a.nnet_config.is_empty() {
        let text = crate::cli::init::read_config_text(&a.nnet_config)?;
        let mut init_rng = crate::random::seeded_rng(0);
        nnet.apply_config_text(&text, &a.nnet_config, &mut init_rng)?;
    }
    if a.learning_rate >= 0.0 {
        nnet.set_learning_rate(a.learning_rate);
    }
    nnet.scale_all(a.scale);
    apply_edit_options(&mut nnet, &a.edits_config, &a.edits, "compnet copy")?;
    if a.prepare_for_test {
        eprintln!(
            "compnet copy: warning: --prepare-for-test sets BatchNorm and dropout to test mode \
             but does not collapse components into their neighbours as Kaldi's CollapseModel \
             does; the model computes the same outputs"
        );
    }
    nnet.set_test_modes(
        a.batchnorm_test_mode || a.prepare_for_test,
        a.prepare_for_test,
        0,
    );
    nnet.write_model_file(&a.output, a.binary)?;
    eprintln!(
        "compnet copy: copied raw neural net from {} to {}",
        a.input, a.output
    );
    Ok(0)
}
