//! `compnet compute-from-egs` (Kaldi's `nnet3-compute-from-egs`): the network's output for
//! each example's inputs, as a matrix per example key (`--apply-exp` for posteriors, as the
//! prior estimation of Kaldi's recipes uses it). The network is used as it is: BatchNorm and
//! dropout are not put in test mode, as in Kaldi's tool.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::error::{Error, Result};
use crate::io::egs::SequentialNnetExampleReader;
use crate::io::table::MatrixWriter;
use crate::log::log;
use crate::matrix::Matrix;
use crate::run::NnetComputer;
use crate::train::example::computation_request;
use crate::train::step::run_forward;

command_args! {
    /// Options of `compnet compute-from-egs`.
    #[usage("compnet compute-from-egs [options] <raw-nnet-in> <training-examples-in> <matrices-out>")]
    #[example("compnet compute-from-egs --apply-exp=true 0.raw ark:1.egs ark:-")]
    pub struct Args {
        /// Write the output in binary (table outputs follow their wspecifier).
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Apply exp to the output before writing it.
        #[arg(long = "apply-exp", kaldi_bool = "false")]
        pub apply_exp: bool,
        /// The output node to compute.
        #[arg(long = "output-name", default_value = "output")]
        pub output_name: String,
        /// Accepted for Kaldi scripts; computation is on the CPU.
        #[arg(long = "use-gpu", default_value = "yes")]
        pub use_gpu: String,
        #[command(flatten)]
        pub threads: crate::cli::args::Threads,
        /// `<raw-nnet-in> <training-examples-in> <matrices-out>`.
        pub args: Vec<String>,
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    const P: &str = "compnet compute-from-egs";
    let [model_in, egs_rspec, wspec] = Args::positionals(&a.args)?;
    a.threads.apply()?;
    let nnet = super::average::read_raw(model_in)?;
    if nnet
        .node_index(&a.output_name)
        .is_none_or(|i| !nnet.is_output_node(i))
    {
        return Err(Error::Usage(format!(
            "{model_in} has no output node named '{}'",
            a.output_name
        )));
    }
    let compiler = CachingCompiler::new(CachingCompilerOptions::default());
    let mut writer = MatrixWriter::open(wspec)?;
    let mut num_egs = 0u64;
    for item in SequentialNnetExampleReader::open(egs_rspec)? {
        let (key, eg) = item.map_err(|e| Error::Compute(format!("{egs_rspec}: {e}")))?;
        let in_eg = |e: Error| Error::Compute(format!("{egs_rspec}: example {key}: {e}"));
        let request = computation_request(&nnet, &eg, false, false).map_err(in_eg)?;
        if !request.outputs.iter().any(|o| o.name == a.output_name) {
            return Err(Error::Compute(format!(
                "{egs_rspec}: example {key} has no '{}' to compute",
                a.output_name
            )));
        }
        let computation = compiler.compile(&nnet, &request).map_err(in_eg)?;
        let mut computer = NnetComputer::new(&computation, &nnet, None);
        run_forward(&mut computer, &request, &eg).map_err(in_eg)?;
        let out = computer.output(&a.output_name).map_err(in_eg)?;
        let (rows, cols) = (out.num_rows(), out.num_cols());
        let mut values = out.to_vec();
        if a.apply_exp {
            values.iter_mut().for_each(|x| *x = x.exp());
        }
        writer.write(&key, &Matrix::from_vec(rows, cols, values))?;
        num_egs += 1;
    }
    writer.close()?;
    log(P, &format!("Processed {num_egs} examples."));
    Ok(0)
}
