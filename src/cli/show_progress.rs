//! `compnet show-progress` (Kaldi's `nnet3-show-progress`): how far a network moved from an
//! older one, per updatable component: the norm of the parameter difference, the norms of the
//! new parameters and the relative difference, in the log lines Kaldi's
//! `steps/libs/nnet3/report/log_parse.py` parses (`Relative parameter differences per layer
//! are [ name:value ... ]`).

use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::log::{fmt_g, log, vlog};
use crate::nnet::Nnet;
use crate::train::network_ops::{add_nnet, same_structure};

command_args! {
    /// Options of `compnet show-progress`.
    #[usage("compnet show-progress [options] <old-net-in> <new-net-in>")]
    #[example("compnet show-progress 1.raw 2.raw")]
    pub struct Args {
        /// Accepted for Kaldi scripts; computation is on the CPU.
        #[arg(long = "use-gpu", default_value = "no")]
        pub use_gpu: String,
        /// `<old-net-in> <new-net-in>`.
        pub args: Vec<String>,
    }
}

const P: &str = "compnet show-progress";

/// `[ name1:v1 name2:v2 ]` over the updatable components of `nnet` (Kaldi's
/// `PrintVectorPerUpdatableComponent`).
fn per_component(nnet: &Nnet, values: &[f32]) -> String {
    let names = nnet
        .components
        .iter()
        .zip(&nnet.component_names)
        .filter(|(c, _)| c.as_updatable().is_some())
        .map(|(_, n)| n);
    let mut s = String::from("[ ");
    for (name, v) in names.zip(values) {
        s += &format!("{name}:{} ", fmt_g(f64::from(*v)));
    }
    s.push(']');
    s
}

/// The norm of each updatable component's parameters.
fn component_norms(a: &Nnet) -> Vec<f32> {
    a.components
        .iter()
        .filter_map(|x| x.as_updatable().map(|u| u.dot_product(x.as_ref()).sqrt()))
        .collect()
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let (old_path, new_path) = match a.args.as_slice() {
        [o, n] => (o, n),
        [_, _, _] => {
            return Err(Error::Usage(
                "show-progress: the objective-function breakdown over training examples (a \
                 third argument) is not implemented; give the two networks only"
                    .into(),
            ))
        }
        _ => return Err(Error::Usage(format!("usage: {}", Args::USAGE))),
    };
    let old = super::average::read_raw(old_path)?;
    let new = super::average::read_raw(new_path)?;
    if old.num_parameters() != new.num_parameters() {
        crate::log::warn(P, "Parameter-dim mismatch, cannot show progress.");
        return Ok(0);
    }
    if !same_structure(&old, &new) {
        return Err(Error::Usage(format!(
            "{new_path} does not have the same components and nodes as {old_path}"
        )));
    }
    let mut diff = old.clone();
    add_nnet(&mut diff, -1.0, &new);
    vlog(1, P, || {
        format!(
            "Printing info for the difference between the neural nets: {}",
            super::info::info_text(&diff).unwrap_or_default()
        )
    });
    let diff_norms: Vec<f32> = component_norms(&diff);
    log(
        P,
        &format!(
            "Parameter differences per layer are {}",
            per_component(&old, &diff_norms)
        ),
    );
    let old_norms: Vec<f32> = component_norms(&old);
    let new_norms: Vec<f32> = component_norms(&new);
    log(
        P,
        &format!(
            "Norms of parameter matrices from <new-nnet-in> are {}",
            per_component(&new, &new_norms)
        ),
    );
    let relative: Vec<f32> = diff_norms
        .iter()
        .zip(&old_norms)
        .map(|(d, o)| d / o)
        .collect();
    log(
        P,
        &format!(
            "Relative parameter differences per layer are {}",
            per_component(&old, &relative)
        ),
    );
    Ok(0)
}
