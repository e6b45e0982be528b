//! What the commands' arguments share: the declaration of a command's usage line and example
//! (`command_args!`), the check of the positional arguments against that usage line, and the
//! option groups several commands take (`Threads`).

use crate::cli::kaldi_args::KaldiBool as _;
use crate::error::{Error, Result};

/// Declares a command's options as a clap struct together with its usage line and example:
///
/// ```ignore
/// command_args! {
///     /// Options of `compnet show-progress`.
///     #[usage("compnet show-progress [options] <old-net-in> <new-net-in>")]
///     #[example("compnet show-progress 1.raw 2.raw")]
///     pub struct Args { /* the options, then `pub args: Vec<String>` */ }
/// }
/// ```
///
/// The usage line is written once: `--help` prints it, and `Args::positionals` gives it in the
/// usage error when the number of positional arguments is wrong.
macro_rules! command_args {
    (
        $(#[doc = $doc:literal])*
        $(#[derive($($derive:path),*)])?
        #[usage($usage:literal)]
        #[example($example:literal)]
        pub struct $name:ident { $($body:tt)* }
    ) => {
        $(#[doc = $doc])*
        #[derive(clap::Args, Debug $($(, $derive)*)?)]
        #[command(override_usage = $usage, after_help = concat!("e.g.: ", $example))]
        pub struct $name { $($body)* }

        impl $name {
            /// The usage line, as `--help` prints it.
            pub const USAGE: &'static str = $usage;

            /// The positional arguments `args`, exactly `N` of them; otherwise a usage error
            /// giving the usage line.
            pub fn positionals<const N: usize>(args: &[String]) -> $crate::error::Result<&[String; N]> {
                $crate::cli::args::positionals(args, Self::USAGE)
            }
        }
    };
}
pub(crate) use command_args;

/// `args` as exactly `N` positional arguments, or a usage error giving `usage`.
pub fn positionals<'a, const N: usize>(args: &'a [String], usage: &str) -> Result<&'a [String; N]> {
    args.try_into()
        .map_err(|_| Error::Usage(format!("usage: {usage}")))
}

/// Most threads `--num-threads` may ask for on a machine with fewer cores than this: beyond
/// the core count threads only cost memory, and thousands cannot be started.
const MAX_THREADS: usize = 256;

/// Rejects a thread count that could not be started (`--num-threads=5000` would panic).
pub(crate) fn check_num_threads(n: usize) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let max = MAX_THREADS.max(cores);
    if n > max {
        return Err(Error::Usage(format!(
            "--num-threads={n} is more than {max} (this machine has {cores} cores)"
        )));
    }
    Ok(())
}

/// `--num-threads`, for the commands that compute.
#[derive(clap::Args, Debug, Clone)]
pub struct Threads {
    /// Bound on the threads of every thread pool (0 = all cores).
    #[arg(long = "num-threads", default_value_t = 0)]
    pub num_threads: usize,
}

impl Threads {
    /// Checks the count and bounds every thread pool by it.
    pub fn apply(&self) -> Result<()> {
        check_num_threads(self.num_threads)?;
        crate::run::set_threads(self.num_threads);
        Ok(())
    }
}

/// Kaldi's CUDA options besides `--use-gpu`, for the commands that can compute on a GPU.
#[derive(clap::Args, Debug, Clone)]
pub struct CudaOptions {
    /// Let the GPU's single-precision matrix products round their inputs to TF32 on the
    /// tensor cores (faster, about 3 decimal digits of input precision); off by default, as
    /// in Kaldi. No effect on the CPU.
    #[arg(long = "cuda-use-tf32-compute", kaldi_bool = "false")]
    pub use_tf32_compute: bool,
}

/// Kaldi's `--use-gpu=yes|no|optional|wait`: chooses the device for the rest of the command
/// (`program` names it in the log line) and applies `cuda`'s options to it. `yes`/`wait`
/// without a usable GPU is an error with the reason; `optional` then says once that it uses
/// the CPU.
pub fn select_device(program: &str, use_gpu: &str, cuda: &CudaOptions) -> Result<()> {
    use crate::matrix::device::{select, use_tf32, Selected, UseGpu};
    let mode = UseGpu::parse(use_gpu).map_err(Error::Usage)?;
    match select(mode) {
        Ok(Selected::Cpu(None)) => {}
        Ok(Selected::Cpu(Some(why))) => crate::log::log(
            program,
            &format!("--use-gpu={use_gpu}: {why}; using the CPU"),
        ),
        Ok(Selected::Gpu(desc)) => crate::log::log(program, &format!("using the GPU: {desc}")),
        Err(e) => return Err(Error::Usage(format!("--use-gpu={use_gpu}: {e}"))),
    }
    use_tf32(cuda.use_tf32_compute)
        .map_err(|e| Error::Compute(format!("--cuda-use-tf32-compute: {e}")))
}
