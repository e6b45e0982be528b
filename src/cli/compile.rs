//! `compnet compile`: compiles a request on a network and prints the computation.
//!
//! ```text
//! compnet compile model.raw --input=input:0:-2..12 --output=output:0:0..9 [--backprop]
//!                 [--ivector] [--debug-info] [--shortcut]
//! ```
//! Each `--input` / `--output` is `name:N:T` where N and T are an integer `5` or an inclusive
//! range `0..3`; Indexes are listed n-major (all t of n=0, then n=1, ...). The model may be a
//! Kaldi raw model (binary or text) or a config file (`*.config`, as `nnet3-init` reads).
//! `--shortcut` prints what shortcut compilation gives (`compile::cache`): the request
//! compiled for 2 sequences and widened to all of them.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::compile::cache::compile_with_shortcut;
use crate::compile::memory::peak_matrix_memory;
use crate::compile::print::format_computation;
use crate::compile::{
    compile_computation, optimize_for_request, CachingCompilerOptions, CompilerOptions,
    ComputationRequest, IoSpecification, OptimizeOptions,
};
use crate::error::{Error, Result};
use crate::nnet::{Index, Nnet};

command_args! {
    /// Options of `compnet compile`.
    #[usage("compnet compile [options] <model-in> --input=<node>:<n-range>:<t-range> ... --output=<node>:<n-range>:<t-range> ...")]
    #[example("compnet compile final.raw --input=input:0:-2..12 --output=output:0:0..9 --backprop")]
    pub struct Args {
        /// The model (raw nnet3 model, or a config file ending in .config).
        pub model: String,
        /// An input: `name:N:T`, e.g. `input:0:-2..12` (repeatable).
        #[arg(long = "input")]
        pub inputs: Vec<String>,
        /// An output: `name:N:T`, e.g. `output:0..1:0..9` (repeatable).
        #[arg(long = "output")]
        pub outputs: Vec<String>,
        /// Also compile the backward pass: derivatives at all inputs and outputs, and model
        /// derivatives.
        #[arg(long)]
        pub backprop: bool,
        /// Supply the `ivector` input at t=0 for every n of the first input.
        #[arg(long)]
        pub ivector: bool,
        /// Print what each matrix holds.
        #[arg(long = "debug-info")]
        pub debug_info: bool,
        /// Print the computation as compiled, without the optimizer's rewrites (Kaldi's
        /// `--optimize=false`)
        #[arg(long)]
        pub no_optimize: bool,
        /// Print the computation shortcut compilation gives: compiled for sequences 0 and 1,
        /// then widened to every sequence of the request (which must hold at least 3, laid
        /// out alike).
        #[arg(long)]
        pub shortcut: bool,
        /// Print, instead of the computation, the peak of live matrix memory of the computation
        /// (with the `--optimization.*` options given) and of the unoptimized one.
        #[arg(long)]
        pub memory: bool,
        #[command(flatten)]
        pub compiler: CachingCompilerArgs,
        #[command(flatten)]
        pub optimization: OptimizationArgs,
    }
}

/// The caching compiler's options, with Kaldi's names (`--compiler.*`); for every command
/// that compiles through `compile::CachingCompiler`.
#[derive(clap::Args, Debug, Clone)]
pub struct CachingCompilerArgs {
    /// Compile requests of N > 2 equally shaped sequences as 2 sequences and widen the
    /// result.
    #[arg(long = "compiler.use-shortcut", kaldi_bool = "true")]
    pub use_shortcut: bool,
    /// How many compiled computations to keep.
    #[arg(long = "compiler.cache-capacity", default_value_t = 64)]
    pub cache_capacity: usize,
}

impl CachingCompilerArgs {
    /// The options these arguments select (compiler and optimizer options at their
    /// defaults).
    pub fn options(&self) -> CachingCompilerOptions {
        CachingCompilerOptions {
            use_shortcut: self.use_shortcut,
            cache_capacity: self.cache_capacity,
            ..Default::default()
        }
    }
}

/// Kaldi's `--optimization.*` options that compnet's optimizer has (the others are accepted
/// with a warning or refused, see `cli::kaldi_args`), for every command that compiles.
#[derive(clap::Args, Debug, Clone)]
pub struct OptimizationArgs {
    /// Optimize compiled computations at all (false: run them as compiled).
    #[arg(long = "optimization.optimize", kaldi_bool = "true")]
    pub optimize: bool,
    /// Turn whole-matrix copies into aliases.
    #[arg(long = "optimization.remove-assignments", kaldi_bool = "true")]
    pub remove_assignments: bool,
    /// Run the propagation of components that allow it in place.
    #[arg(long = "optimization.propagate-in-place", kaldi_bool = "true")]
    pub propagate_in_place: bool,
    /// Skip zeroing matrices whose first use overwrites them.
    #[arg(long = "optimization.initialize-undefined", kaldi_bool = "true")]
    pub initialize_undefined: bool,
    /// Allocate each matrix just before its first use and free it after its last.
    #[arg(long = "optimization.move-sizing-commands", kaldi_bool = "true")]
    pub move_sizing_commands: bool,
    /// Turn additions into matrices still zero into copies.
    #[arg(long = "optimization.convert-addition", kaldi_bool = "true")]
    pub convert_addition: bool,
    /// Trim the rows with nothing to add off the ends of row commands.
    #[arg(long = "optimization.snip-row-ops", kaldi_bool = "true")]
    pub snip_row_ops: bool,
    /// Split row commands over several matrices into at most two over one each.
    #[arg(long = "optimization.split-row-ops", kaldi_bool = "true")]
    pub split_row_ops: bool,
    /// Turn row commands that read a run of rows into whole-matrix commands.
    #[arg(long = "optimization.optimize-row-ops", kaldi_bool = "true")]
    pub optimize_row_ops: bool,
    /// Run backprops of components that allow it in place.
    #[arg(long = "optimization.backprop-in-place", kaldi_bool = "true")]
    pub backprop_in_place: bool,
    /// Grow a matrix whose last rows receive a copy of most of another, so the copy can
    /// become an alias.
    #[arg(long = "optimization.extend-matrices", kaldi_bool = "true")]
    pub extend_matrices: bool,
    /// Give a new matrix the storage of a freed one of the same size (a swap).
    #[arg(long = "optimization.allocate-from-other", kaldi_bool = "true")]
    pub allocate_from_other: bool,
    /// Compress matrices kept for backprop: 0 none, 1 ReLU outputs as one byte per element
    /// (exact); Kaldi's lossy level 2 is not built, 2 and 3 act as 1.
    #[arg(long = "optimization.memory-compression-level", default_value_t = 1,
          value_parser = clap::value_parser!(i32).range(0..=3))]
    pub memory_compression_level: i32,
    #[command(flatten)]
    pub deriv_time: DerivTimeArgs,
}

/// Kaldi's derivative-time limits (`--optimization.min-deriv-time` and friends), for every
/// command that computes derivatives.
#[derive(clap::Args, Debug, Clone)]
pub struct DerivTimeArgs {
    /// Derivatives at t below this are taken as zero and not computed (recurrent training on
    /// chunks with extra left context).
    #[arg(long = "optimization.min-deriv-time", default_value_t = i32::MIN,
          allow_negative_numbers = true)]
    pub min_deriv_time: i32,
    /// Derivatives at t above this are taken as zero and not computed.
    #[arg(long = "optimization.max-deriv-time", default_value_t = i32::MAX,
          allow_negative_numbers = true)]
    pub max_deriv_time: i32,
    /// If set, the max-deriv-time of each minibatch is this plus its largest output t
    /// (for egs of varying length).
    #[arg(long = "optimization.max-deriv-time-relative", default_value_t = i32::MAX,
          allow_negative_numbers = true)]
    pub max_deriv_time_relative: i32,
}

impl DerivTimeArgs {
    /// Sets the limits in `o`.
    pub fn apply(&self, o: &mut crate::compile::OptimizeOptions) {
        o.min_deriv_time = self.min_deriv_time;
        o.max_deriv_time = self.max_deriv_time;
        o.max_deriv_time_relative = self.max_deriv_time_relative;
    }
}

impl OptimizationArgs {
    /// The optimizer options these arguments select.
    pub fn options(&self) -> crate::compile::OptimizeOptions {
        if self.memory_compression_level > 1 {
            eprintln!(
                "warning: --optimization.memory-compression-level={} acts as 1 (exact ReLU \
                 output compression); Kaldi's lossy 16-bit compression of level 2 is not built",
                self.memory_compression_level
            );
        }
        crate::compile::OptimizeOptions {
            optimize: self.optimize,
            remove_assignments: self.remove_assignments,
            propagate_in_place: self.propagate_in_place,
            initialize_undefined: self.initialize_undefined,
            move_sizing_commands: self.move_sizing_commands,
            convert_addition: self.convert_addition,
            snip_row_ops: self.snip_row_ops,
            split_row_ops: self.split_row_ops,
            optimize_row_ops: self.optimize_row_ops,
            backprop_in_place: self.backprop_in_place,
            min_deriv_time: self.deriv_time.min_deriv_time,
            max_deriv_time: self.deriv_time.max_deriv_time,
            max_deriv_time_relative: self.deriv_time.max_deriv_time_relative,
            extend_matrices: self.extend_matrices,
            allocate_from_other: self.allocate_from_other,
            memory_compression_level: self.memory_compression_level,
            looped: false,
        }
    }
}

/// Parses `5` or `a..b` (inclusive).
fn parse_range(s: &str, what: &str, spec: &str) -> Result<std::ops::RangeInclusive<i32>> {
    let bad = || {
        Error::Usage(format!(
            "bad {what} range '{s}' in '{spec}': expected an integer like 5 or a range like -2..12"
        ))
    };
    if let Some((a, b)) = s.split_once("..") {
        let a: i32 = a.trim().parse().map_err(|_| bad())?;
        let b: i32 = b.trim().parse().map_err(|_| bad())?;
        if b < a {
            return Err(bad());
        }
        Ok(a..=b)
    } else {
        let a: i32 = s.trim().parse().map_err(|_| bad())?;
        Ok(a..=a)
    }
}

/// Parses `name:N:T` into an IoSpecification.
pub fn parse_io_spec(spec: &str, has_deriv: bool) -> Result<IoSpecification> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [name, n, t] = parts.as_slice() else {
        return Err(Error::Usage(format!(
            "bad io specification '{spec}': expected name:N:T, e.g. input:0:-2..12"
        )));
    };
    if name.is_empty() {
        return Err(Error::Usage(format!(
            "bad io specification '{spec}': empty name"
        )));
    }
    let ns = parse_range(n, "n", spec)?;
    let ts = parse_range(t, "t", spec)?;
    let mut indexes = Vec::new();
    for n in ns {
        for t in ts.clone() {
            indexes.push(Index::new(n, t, 0));
        }
    }
    Ok(IoSpecification {
        name: name.to_string(),
        indexes,
        has_deriv,
    })
}

/// Reads a network from a model file or a config file.
pub fn load_network(path: &str) -> Result<Nnet> {
    if path.ends_with(".config") || path.ends_with(".cfg") {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        // Only the structure matters for compiling; parameters as `init --srand=0` makes them.
        Nnet::from_config_text(&text, path, &mut crate::random::seeded_rng(0))
    } else {
        Ok(Nnet::read_model_file(path)?.nnet)
    }
}

/// Builds the request from the command-line options.
pub fn build_request(a: &Args) -> Result<ComputationRequest> {
    if a.inputs.is_empty() || a.outputs.is_empty() {
        return Err(Error::Usage(
            "compnet compile: give at least one --input=name:N:T and one --output=name:N:T".into(),
        ));
    }
    let mut req = ComputationRequest {
        need_model_derivative: a.backprop,
        ..Default::default()
    };
    for s in &a.inputs {
        req.inputs.push(parse_io_spec(s, a.backprop)?);
    }
    for s in &a.outputs {
        req.outputs.push(parse_io_spec(s, a.backprop)?);
    }
    if a.ivector && req.index_for_input("ivector").is_none() {
        let mut ns: Vec<i32> = req.inputs[0].indexes.iter().map(|i| i.n).collect();
        ns.sort_unstable();
        ns.dedup();
        req.inputs.push(IoSpecification {
            name: "ivector".into(),
            indexes: ns.into_iter().map(|n| Index::new(n, 0, 0)).collect(),
            has_deriv: false,
        });
    }
    Ok(req)
}

/// Compiles the request of `a` with optimizer options `o` (by shortcut with `--shortcut`).
fn compile_for(
    a: &Args,
    nnet: &Nnet,
    req: &ComputationRequest,
    o: &OptimizeOptions,
) -> Result<crate::compile::NnetComputation> {
    let opts = CompilerOptions {
        output_debug_info: a.debug_info,
    };
    if a.shortcut {
        if !a.compiler.use_shortcut {
            return Err(Error::Usage(
                "--shortcut contradicts --compiler.use-shortcut=false".into(),
            ));
        }
        // One request is compiled, so --compiler.cache-capacity has nothing to do here.
        let mut options = a.compiler.options();
        options.compiler = opts;
        options.optimize = o.clone();
        compile_with_shortcut(nnet, req, &options)?.map_err(|why| {
            Error::Usage(format!(
                "--shortcut: this request cannot be compiled by shortcut: {why}"
            ))
        })
    } else {
        let opts = CompilerOptions {
            output_debug_info: opts.output_debug_info || o.limits_deriv_times(),
        };
        let mut comp = compile_computation(nnet, req, &opts)?;
        optimize_for_request(nnet, req, &mut comp, o)?;
        if !a.debug_info {
            comp.matrix_debug_info.clear();
        }
        Ok(comp)
    }
}

/// Bytes as MiB with one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let req = build_request(&a)?;
    let nnet = load_network(&a.model)?;
    let mut o = a.optimization.options();
    o.optimize &= !a.no_optimize;
    let comp = compile_for(&a, &nnet, &req, &o)?;
    print!("{req}");
    if a.memory {
        let plain = compile_for(
            &a,
            &nnet,
            &req,
            &OptimizeOptions {
                optimize: false,
                ..o.clone()
            },
        )?;
        let (p, u) = (peak_matrix_memory(&comp), peak_matrix_memory(&plain));
        println!(
            "# peak matrix memory: {} ({} bytes, after command c{}), {} matrices of {} in all",
            mib(p.peak_bytes),
            p.peak_bytes,
            p.at_command,
            comp.matrices.len().saturating_sub(1),
            mib(p.total_bytes)
        );
        println!(
            "# unoptimized: {} ({} bytes), {} matrices; optimized / unoptimized = {:.1}%",
            mib(u.peak_bytes),
            u.peak_bytes,
            plain.matrices.len().saturating_sub(1),
            100.0 * p.peak_bytes as f64 / u.peak_bytes.max(1) as f64
        );
    } else {
        print!("{}", format_computation(&comp, &nnet));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_specs() {
        let s = parse_io_spec("input:0..1:-1..1", false).unwrap();
        assert_eq!(s.indexes.len(), 6);
        assert_eq!(s.indexes[3], Index::new(1, -1, 0));
        assert!(parse_io_spec("input:0", false).is_err());
        assert!(parse_io_spec("input:x:0", false).is_err());
        assert!(parse_io_spec("input:0:5..2", false).is_err());
    }
}
