//! `compnet average` (Kaldi's `nnet3-average`): the weighted average of the parameters (and
//! component statistics) of networks with the same structure.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::log::log;
use crate::nnet::Nnet;
use crate::train::network_ops::{add_nnet, same_structure};

command_args! {
    /// Options of `compnet average`.
    #[usage("compnet average [options] <model1> <model2> ... <modelN> <model-out>")]
    #[example("compnet average 1.1.raw 1.2.raw 1.3.raw 2.raw")]
    pub struct Args {
        /// Write the model in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Colon-separated weights, one per model (normalised to sum to one); default equal.
        #[arg(long, default_value = "")]
        pub weights: String,
        /// `<model1> ... <modelN> <model-out>`.
        pub args: Vec<String>,
    }
}

/// The weights `--weights` gives for `n` models, normalised to sum to one.
pub fn parse_weights(s: &str, n: usize) -> Result<Vec<f32>> {
    if s.is_empty() {
        return Ok(vec![1.0 / n as f32; n]);
    }
    let w: Vec<f32> = s
        .split(':')
        .map(|x| x.trim().parse::<f32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            Error::Usage(format!(
                "--weights: expected numbers separated by ':', got '{s}'"
            ))
        })?;
    if w.len() != n {
        return Err(Error::Usage(format!(
            "--weights has {} values but there are {n} models",
            w.len()
        )));
    }
    let sum: f32 = w.iter().sum();
    if !sum.is_finite() || sum <= 0.0 || w.iter().any(|x| !x.is_finite()) {
        return Err(Error::Usage(format!(
            "--weights must be finite with a positive sum, got '{s}'"
        )));
    }
    Ok(w.iter().map(|x| x / sum).collect())
}

/// Reads a raw network; a final.mdl is refused, as by the Kaldi tool.
pub fn read_raw(path: &str) -> Result<Nnet> {
    let read = Nnet::read_model_file(path)?;
    if read.am.is_some() {
        return Err(Error::Usage(format!(
            "{path} is a final.mdl; this tool reads raw networks (as its Kaldi counterpart)"
        )));
    }
    Ok(read.nnet)
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    if a.args.len() < 2 {
        return Err(Error::Usage(
            "usage: compnet average [options] <model1> ... <modelN> <model-out>".into(),
        ));
    }
    let (inputs, out) = a.args.split_at(a.args.len() - 1);
    let weights = parse_weights(&a.weights, inputs.len())?;
    let mut avg = read_raw(&inputs[0])?;
    avg.scale_all(weights[0]);
    for (path, &w) in inputs.iter().zip(&weights).skip(1) {
        let other = read_raw(path)?;
        if !same_structure(&avg, &other) {
            return Err(Error::Usage(format!(
                "{path} does not have the same components and nodes as {}",
                inputs[0]
            )));
        }
        add_nnet(&mut avg, w, &other);
    }
    avg.write_model_file(&out[0], a.binary)?;
    log(
        "compnet average",
        &format!(
            "Averaged parameters of {} neural nets, and wrote to {}",
            inputs.len(),
            out[0]
        ),
    );
    Ok(0)
}
