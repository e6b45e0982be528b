//! `compnet combine` (Kaldi's `nnet3-combine`): the running average of the first n models
//! (n = 1, 2, ...) that does best on held-out egs; BatchNorm statistics recomputed on those
//! egs when the result is an average.

use crate::cli::args::command_args;
use crate::cli::average::read_raw;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::egs::{NnetExample, SequentialNnetExampleReader};
use crate::log::{fmt_g, log};
use crate::nnet::component::Properties;
use crate::nnet::Nnet;
use crate::train::diagnostics::recompute_stats;
use crate::train::network_ops::{add_nnet, same_structure};
use crate::train::{NnetComputeProb, NnetComputeProbOptions};

const P: &str = "compnet combine";

command_args! {
    /// Options of `compnet combine`.
    #[usage("compnet combine [options] <nnet-in1> <nnet-in2> ... <nnet-inN> <valid-examples-in> <nnet-out>")]
    #[example("compnet combine 1.1.raw 1.2.raw 1.3.raw ark:valid.egs 2.raw")]
    pub struct Args {
        /// Write the model in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// At most this many objective evaluations (models are added in groups to stay under it).
        #[arg(long = "max-objective-evaluations", default_value_t = 30)]
        pub max_objective_evaluations: usize,
        /// Evaluate with BatchNorm in test mode.
        #[arg(long = "batchnorm-test-mode", kaldi_bool = "false")]
        pub batchnorm_test_mode: bool,
        /// Evaluate with dropout in test mode.
        #[arg(long = "dropout-test-mode", kaldi_bool = "true")]
        pub dropout_test_mode: bool,
        /// Kaldi's device choice: `yes`, `no`, `optional` (a GPU when usable, else the CPU) or
        /// `wait` (as `yes`). `yes` without a usable GPU (or without the `cuda` build) is an error.
        #[arg(long = "use-gpu", default_value = "no")]
        pub use_gpu: String,
        #[command(flatten)]
        pub cuda: crate::cli::args::CudaOptions,
        /// `<model1> ... <modelN> <valid-egs-rspecifier> <model-out>`.
        pub args: Vec<String>,
    }
}

/// The objective per frame of output `output` of `nnet` on `egs`.
fn objective(nnet: &Nnet, egs: &[(String, NnetExample)], a: &Args) -> Result<f64> {
    let mut copy = nnet.clone();
    copy.set_test_modes(a.batchnorm_test_mode, a.dropout_test_mode, 0);
    let mut prob = NnetComputeProb::new(NnetComputeProbOptions::default(), &copy);
    for (key, eg) in egs {
        prob.compute(eg)
            .map_err(|e| Error::Compute(format!("example {key}: {e}")))?;
    }
    let s = prob.objective("output").ok_or_else(|| {
        Error::Compute("the held-out egs have no supervision for output 'output'".into())
    })?;
    Ok(s.tot_objf / s.tot_weight)
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    if a.args.len() < 3 {
        return Err(Error::Usage(
            "usage: compnet combine [options] <model1> ... <modelN> <valid-egs-rspecifier> <model-out>"
                .into(),
        ));
    }
    if a.max_objective_evaluations == 0 {
        return Err(Error::Usage(
            "--max-objective-evaluations must be positive".into(),
        ));
    }
    crate::cli::args::select_device("nnet3-combine", &a.use_gpu, &a.cuda)?;
    let n_args = a.args.len();
    let models = &a.args[..n_args - 2];
    let (egs_rspec, out) = (&a.args[n_args - 2], &a.args[n_args - 1]);
    let first = read_raw(&models[0])?;
    let egs: Vec<(String, NnetExample)> = SequentialNnetExampleReader::open(egs_rspec)?
        .collect::<Result<_>>()
        .map_err(|e| Error::Compute(format!("{egs_rspec}: {e}")))?;
    if egs.is_empty() {
        return Err(Error::Usage(format!("{egs_rspec}: no examples")));
    }
    log(P, &format!("Read {} examples.", egs.len()));
    let init_objf = objective(&first, &egs, &a)?;
    log(
        P,
        &format!(
            "objective function using the last model is {}",
            fmt_g(init_objf)
        ),
    );
    let (mut best_objf, mut best_n) = (init_objf, 1);
    let mut best = first.clone();
    let mut moving = first;
    let num_to_add = models.len().div_ceil(a.max_objective_evaluations);
    for n in 1..models.len() {
        let next = read_raw(&models[n])?;
        if !same_structure(&moving, &next) {
            return Err(Error::Usage(format!(
                "{} does not have the same components and nodes as {}",
                models[n], models[0]
            )));
        }
        // The running average of the first n + 1 models.
        let k = (n + 1) as f32;
        moving.scale_all((k - 1.0) / k);
        add_nnet(&mut moving, 1.0 / k, &next);
        if (n - 1) % num_to_add == num_to_add - 1 || n == models.len() - 1 {
            let objf = objective(&moving, &egs, &a)?;
            log(
                P,
                &format!(
                    "Combining last {} models, objective function is {}",
                    n + 1,
                    fmt_g(objf)
                ),
            );
            if objf > best_objf {
                best_objf = objf;
                best = moving.clone();
                best_n = n + 1;
            }
        }
    }
    log(
        P,
        &format!(
            "Combining {best_n} nnets, objective function changed from {} to {}",
            fmt_g(init_objf),
            fmt_g(best_objf)
        ),
    );
    if best
        .components
        .iter()
        .any(|c| c.properties().has(Properties::BATCH_STATISTICS))
    {
        log(P, "Recomputing stats on nnet (affects batch-norm)");
        let egs: Vec<NnetExample> = egs.into_iter().map(|(_, e)| e).collect();
        recompute_stats(&egs, &mut best)?;
        log(P, "Done recomputing stats.");
    }
    best.write_model_file(out, a.binary)?;
    log(
        P,
        &format!("Finished combining neural nets, wrote model to {out}"),
    );
    Ok(0)
}
