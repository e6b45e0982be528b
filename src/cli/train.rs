//! `compnet train` (Kaldi's `nnet3-train`): one pass of training over merged egs, the model
//! written atomically at the end.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::egs::SequentialNnetExampleReader;
use crate::log::log;
use crate::nnet::Nnet;
use crate::train::{NnetTrainer, NnetTrainerOptions};

command_args! {
    /// Options of `compnet train`, Kaldi's names and defaults.
    #[usage("compnet train [options] <raw-model-in> <training-examples-in> <raw-model-out>")]
    #[example("compnet train 1.raw 'ark:compnet merge-egs ark:1.egs ark:-|' 2.raw")]
    pub struct Args {
        /// Write the model in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Seed of every random choice (dropout masks, statistics sampling).
        #[arg(long, default_value_t = 0)]
        pub srand: u64,
        /// Minibatches per objective log line.
        #[arg(long = "print-interval", default_value_t = 100)]
        pub print_interval: usize,
        /// Momentum in [0, 1) (the effective learning rate is unchanged by it).
        #[arg(long, default_value_t = 0.0)]
        pub momentum: f32,
        /// Limit on the norm of the whole parameter change per minibatch (0 = none).
        #[arg(long = "max-param-change", default_value_t = 2.0)]
        pub max_param_change: f32,
        /// Multiplies every component's l2-regularize.
        #[arg(long = "l2-regularize-factor", default_value_t = 1.0)]
        pub l2_regularize_factor: f32,
        /// Backstitch scale (0 = off).
        #[arg(long = "backstitch-training-scale", default_value_t = 0.0)]
        pub backstitch_training_scale: f32,
        /// Backstitch on every this-many-th minibatch.
        #[arg(long = "backstitch-training-interval", default_value_t = 1)]
        pub backstitch_training_interval: usize,
        /// BatchNorm statistics are scaled by this after each minibatch.
        #[arg(long = "batchnorm-stats-scale", default_value_t = 0.8)]
        pub batchnorm_stats_scale: f32,
        /// Accumulate component statistics while training.
        #[arg(long = "store-component-stats", kaldi_bool = "true")]
        pub store_component_stats: bool,
        /// Zero the component statistics first.
        #[arg(long = "zero-component-stats", kaldi_bool = "true")]
        pub zero_component_stats: bool,
        #[command(flatten)]
        pub optimization: crate::cli::compile::OptimizationArgs,
        /// Kaldi's device choice: `yes`, `no`, `optional` (a GPU when usable, else the CPU) or
        /// `wait` (as `yes`). `yes` without a usable GPU (or without the `cuda` build) is an error.
        #[arg(long = "use-gpu", default_value = "no")]
        pub use_gpu: String,
        #[command(flatten)]
        pub cuda: crate::cli::args::CudaOptions,
        #[command(flatten)]
        pub threads: crate::cli::args::Threads,
        /// Accepted for Kaldi scripts; computations are compiled once per run and cached in memory.
        #[arg(long = "read-cache")]
        pub read_cache: Option<String>,
        /// Accepted for Kaldi scripts (see --read-cache).
        #[arg(long = "write-cache")]
        pub write_cache: Option<String>,
        #[command(flatten)]
        pub compiler: crate::cli::compile::CachingCompilerArgs,
        /// `<model-in> <egs-rspecifier> <model-out>`.
        pub args: Vec<String>,
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    const P: &str = "compnet train";
    let [model_in, egs_rspec, model_out] = Args::positionals(&a.args)?;
    crate::cli::args::select_device(P, &a.use_gpu, &a.cuda)?;
    a.threads.apply()?;
    let read = Nnet::read_model_file(model_in)?;
    if read.am.is_some() {
        return Err(Error::Usage(format!(
            "{model_in} is a final.mdl (transition model + network); compnet train reads and \
             writes raw networks, as nnet3-train does"
        )));
    }
    let mut nnet = read.nnet;
    let outputs: Vec<String> = nnet.output_names().into_iter().map(String::from).collect();
    let opts = NnetTrainerOptions {
        zero_component_stats: a.zero_component_stats,
        store_component_stats: a.store_component_stats,
        print_interval: a.print_interval,
        momentum: a.momentum,
        l2_regularize_factor: a.l2_regularize_factor,
        backstitch_training_scale: a.backstitch_training_scale,
        backstitch_training_interval: a.backstitch_training_interval,
        batchnorm_stats_scale: a.batchnorm_stats_scale,
        max_param_change: a.max_param_change,
        srand: a.srand,
        compiler: crate::compile::cache::CachingCompilerOptions {
            optimize: a.optimization.options(),
            ..a.compiler.options()
        },
        program: P.into(),
    };
    let ok = {
        let mut trainer = NnetTrainer::new(opts, &mut nnet)?;
        let reader = SequentialNnetExampleReader::open(egs_rspec)?;
        let bar = crate::log::progress_spinner("training");
        // The rate after the first minibatch, which also pays for compiling the computation
        // (and, on a GPU, for the kernels and the memory pool).
        let mut steady: Option<(std::time::Instant, usize)> = None;
        let mut reader = reader;
        while let Some(item) = crate::run::profile::timed(|| "read egs".into(), || reader.next()) {
            let (key, eg) = item.map_err(|e| Error::Compute(format!("{egs_rspec}: {e}")))?;
            crate::run::profile::timed(|| "trainer: train".into(), || trainer.train(&eg))
                .map_err(|e| Error::Compute(format!("{egs_rspec}: example {key}: {e}")))?;
            let frames: usize = eg
                .io
                .iter()
                .filter(|io| outputs.contains(&io.name))
                .map(|io| io.indexes.len())
                .sum();
            match &mut steady {
                None => steady = Some((std::time::Instant::now(), 0)),
                Some((_, n)) => *n += frames,
            }
            if let Some(b) = &bar {
                b.set_message(format!(
                    "{} minibatches",
                    trainer.num_minibatches_processed()
                ));
                b.tick();
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        if let Some((t0, frames)) = steady.filter(|&(_, n)| n > 0) {
            let secs = t0.elapsed().as_secs_f64();
            log(
                P,
                &format!(
                    "{frames} frames after the first minibatch in {secs:.3} s: {:.0} frames/s",
                    frames as f64 / secs
                ),
            );
        }
        trainer.print_total_stats()
    };
    nnet.write_model_file(model_out, a.binary)?;
    log(P, &format!("Wrote model to {model_out}"));
    if ok {
        Ok(0)
    } else {
        // As nnet3-train: the model is written, and the exit status says nothing was
        // trained on.
        Err(Error::Compute(format!(
            "{egs_rspec}: no frames were trained on (an empty archive, or supervision whose \
             weights sum to zero); {model_out} was written all the same"
        )))
    }
}
