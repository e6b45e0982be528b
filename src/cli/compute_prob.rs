//! `compnet compute-prob` (Kaldi's `nnet3-compute-prob`): the objective (log-likelihood
//! for `linear` outputs) and accuracy of a network on egs, BatchNorm and dropout in test
//! mode by default.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::egs::SequentialNnetExampleReader;
use crate::nnet::Nnet;
use crate::train::{NnetComputeProb, NnetComputeProbOptions};

command_args! {
    /// Options of `compnet compute-prob`.
    #[usage("compnet compute-prob [options] <raw-model-in> <training-examples-in>")]
    #[example("compnet compute-prob 0.raw ark:valid.egs")]
    pub struct Args {
        /// BatchNorm uses its stored statistics (false: the minibatch's).
        #[arg(long = "batchnorm-test-mode", kaldi_bool = "true")]
        pub batchnorm_test_mode: bool,
        /// Dropout is off (the test-time scaling applies).
        #[arg(long = "dropout-test-mode", kaldi_bool = "true")]
        pub dropout_test_mode: bool,
        /// Also report the frame accuracy.
        #[arg(long = "compute-accuracy", kaldi_bool = "true")]
        pub compute_accuracy: bool,
        /// Also report the accuracy per reference dimension.
        #[arg(long = "compute-per-dim-accuracy", kaldi_bool = "false")]
        pub compute_per_dim_accuracy: bool,
        /// Seed of the statistics BatchNorm invents when it has none in test mode.
        #[arg(long, default_value_t = 0)]
        pub srand: u64,
        /// Kaldi's device choice: `yes`, `no`, `optional` (a GPU when usable, else the CPU) or
        /// `wait` (as `yes`). `yes` without a usable GPU (or without the `cuda` build) is an error.
        #[arg(long = "use-gpu", default_value = "no")]
        pub use_gpu: String,
        #[command(flatten)]
        pub cuda: crate::cli::args::CudaOptions,
        #[command(flatten)]
        pub threads: crate::cli::args::Threads,
        #[command(flatten)]
        pub optimization: crate::cli::compile::OptimizationArgs,
        #[command(flatten)]
        pub compiler: crate::cli::compile::CachingCompilerArgs,
        /// `<model-in> <egs-rspecifier>`.
        pub args: Vec<String>,
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let [model_in, egs_rspec] = Args::positionals(&a.args)?;
    crate::cli::args::select_device("nnet3-compute-prob", &a.use_gpu, &a.cuda)?;
    a.threads.apply()?;
    let mut nnet = Nnet::read_model_file(model_in)?.nnet;
    nnet.set_test_modes(a.batchnorm_test_mode, a.dropout_test_mode, a.srand);
    let opts = NnetComputeProbOptions {
        compute_accuracy: a.compute_accuracy,
        compute_per_dim_accuracy: a.compute_per_dim_accuracy,
        compiler: crate::compile::cache::CachingCompilerOptions {
            optimize: a.optimization.options(),
            ..a.compiler.options()
        },
        ..Default::default()
    };
    let mut prob = NnetComputeProb::new(opts, &nnet);
    for item in SequentialNnetExampleReader::open(egs_rspec)? {
        let (key, eg) = item.map_err(|e| Error::Compute(format!("{egs_rspec}: {e}")))?;
        prob.compute(&eg)
            .map_err(|e| Error::Compute(format!("{egs_rspec}: example {key}: {e}")))?;
    }
    if prob.print_total_stats() {
        Ok(0)
    } else {
        Err(Error::Compute(format!(
            "{egs_rspec}: nothing to report: no output had a positive total weight (an empty \
             archive, or supervision whose weights sum to zero or less, or are not finite)"
        )))
    }
}
