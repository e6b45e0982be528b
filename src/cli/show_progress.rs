//! `compnet show-progress` (Kaldi's `nnet3-show-progress`): how far a network moved from an
//! older one, per updatable component: the norm of the parameter difference, the norms of the
//! new parameters and the relative difference, in the log lines Kaldi's
//! `steps/libs/nnet3/report/log_parse.py` parses (`Relative parameter differences per layer
//! are [ name:value ... ]`). Given examples too (and a simple network: inputs `input` and
//! maybe `ivector`, output `output`), it first evaluates the networks on the line between the
//! two at the middle of each of `--num-segments` segments, with the gradient, and attributes
//! the change of the objective to the components: per component, the gradient's dot product
//! with the new parameters minus that with the old ones, per frame, averaged over the
//! segments ("Total objf change per component is [ ... ]"). As in Kaldi's tool, the
//! evaluation uses the models' own BatchNorm and dropout modes and draws (compiler checks,
//! derivative statistics, self-repair) from the C library's `rand()` stream, never seeded.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::egs::SequentialNnetExampleReader;
use crate::kaldi_rand::GlibcRand;
use crate::log::{fmt_g, log, vlog};
use crate::nnet::Nnet;
use crate::train::network_ops::{add_nnet, same_structure};
use crate::train::{NnetComputeProb, NnetComputeProbOptions};

command_args! {
    /// Options of `compnet show-progress`.
    #[usage("compnet show-progress [options] <old-net-in> <new-net-in> [<training-examples-in>]")]
    #[example("compnet show-progress 1.raw 2.raw ark:valid.egs")]
    pub struct Args {
        /// Number of line segments used for computing derivatives (none when < 1: the
        /// objective change then reads 0, as Kaldi's does).
        #[arg(long = "num-segments", default_value_t = 1)]
        pub num_segments: i32,
        /// Also report the frame accuracy.
        #[arg(long = "compute-accuracy", kaldi_bool = "true")]
        pub compute_accuracy: bool,
        /// Also report the accuracy per reference dimension.
        #[arg(long = "compute-per-dim-accuracy", kaldi_bool = "false")]
        pub compute_per_dim_accuracy: bool,
        /// Accepted for Kaldi scripts (Kaldi's debug printout of the computation).
        #[arg(long = "debug-computation", kaldi_bool = "false")]
        pub debug_computation: bool,
        /// Accepted for Kaldi scripts; computation is on the CPU.
        #[arg(long = "use-gpu", default_value = "no")]
        pub use_gpu: String,
        #[command(flatten)]
        pub optimization: crate::cli::compile::OptimizationArgs,
        #[command(flatten)]
        pub compiler: crate::cli::compile::CachingCompilerArgs,
        /// `<old-net-in> <new-net-in> [<training-examples-in>]`.
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

/// The dot product of each updatable component of `a` with the same one of `b`.
fn component_dot_products(a: &Nnet, b: &Nnet) -> Vec<f32> {
    a.components
        .iter()
        .zip(&b.components)
        .filter_map(|(x, y)| x.as_updatable().map(|u| u.dot_product(y.as_ref())))
        .collect()
}

/// Kaldi's `IsSimpleNnet`: an output node `output`, an input node `input`, and besides it
/// at most an input node `ivector`.
fn is_simple(nnet: &Nnet) -> bool {
    let is = |name: &str, input: bool| {
        nnet.node_index(name).is_some_and(|i| {
            if input {
                nnet.is_input_node(i)
            } else {
                nnet.is_output_node(i)
            }
        })
    };
    if !is("output", false) || !is("input", true) {
        return false;
    }
    let inputs = (0..nnet.nodes.len())
        .filter(|&i| nnet.is_input_node(i))
        .count();
    inputs == 1 || is("ivector", true)
}

/// The objective-change breakdown over the examples of `egs_rspec`.
fn objective_breakdown(a: &Args, old: &Nnet, new: &Nnet, egs_rspec: &str) -> Result<()> {
    let mut examples = Vec::new();
    for item in SequentialNnetExampleReader::open(egs_rspec)? {
        let (key, eg) = item.map_err(|e| Error::Compute(format!("{egs_rspec}: {e}")))?;
        examples.push((key, eg));
    }
    if examples.is_empty() {
        return Err(Error::Compute(format!("{egs_rspec}: No examples read.")));
    }
    let segments = a.num_segments;
    let num_updatable = old
        .components
        .iter()
        .filter(|c| c.as_updatable().is_some())
        .count();
    let mut diff = vec![0.0f32; num_updatable];
    // Kaldi's process never seeds rand(): its stream starts at srand(1).
    let mut stream = GlibcRand::new(1);
    let opts = NnetComputeProbOptions {
        compute_accuracy: a.compute_accuracy,
        compute_per_dim_accuracy: a.compute_per_dim_accuracy,
        compute_deriv: true,
        compiler: crate::compile::cache::CachingCompilerOptions {
            optimize: a.optimization.options(),
            ..a.compiler.options()
        },
        program: P.into(),
    };
    for s in 0..segments {
        // The middle of segment s of the line from the old network (0) to the new one (1).
        // (Kaldi keeps the ends in floats and takes the middle in doubles.)
        let start = (f64::from(s) / f64::from(segments)) as f32;
        let end = ((f64::from(s) + 1.0) / f64::from(segments)) as f32;
        let middle = (0.5 * (f64::from(start) + f64::from(end))) as f32;
        let mut interp = new.clone();
        interp.scale_all(middle);
        add_nnet(&mut interp, 1.0 - middle, old);
        let mut prob = NnetComputeProb::new(opts.clone(), &interp);
        for (key, eg) in &examples {
            prob.compute_with_kaldi_rand(eg, &mut stream)
                .map_err(|e| Error::Compute(format!("{egs_rspec}: example {key}: {e}")))?;
        }
        let objf = prob.objective("output").ok_or_else(|| {
            Error::Compute(format!(
                "{egs_rspec}: the examples have no supervision for 'output'"
            ))
        })?;
        if objf.tot_weight.is_nan() || objf.tot_weight <= 0.0 {
            return Err(Error::Compute(format!(
                "{egs_rspec}: the supervision of 'output' has a total weight of {}",
                fmt_g(objf.tot_weight)
            )));
        }
        let objf_per_frame = objf.tot_objf / objf.tot_weight;
        prob.print_total_stats();
        log(
            P,
            &format!(
                "At position {}, objf per frame is {}",
                fmt_g(f64::from(middle)),
                fmt_g(objf_per_frame)
            ),
        );
        let gradient = prob
            .deriv()
            .ok_or_else(|| Error::Compute("internal error: no gradient".into()))?;
        let per_frame = (1.0 / objf.tot_weight) as f32;
        let old_dot = component_dot_products(gradient, old);
        let new_dot = component_dot_products(gradient, new);
        let w = (1.0 / f64::from(segments)) as f32;
        for ((d, o), n) in diff.iter_mut().zip(&old_dot).zip(&new_dot) {
            *d += w * (n * per_frame);
            *d += -w * (o * per_frame);
        }
        vlog(1, P, || {
            format!(
                "By segment {s}, objf change is {}",
                per_component(old, &diff)
            )
        });
    }
    log(
        P,
        &format!(
            "Total objf change per component is {}",
            per_component(old, &diff)
        ),
    );
    Ok(())
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let (old_path, new_path, egs) = match a.args.as_slice() {
        [o, n] => (o, n, None),
        [o, n, e] => (o, n, Some(e)),
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
    if let Some(egs) = egs.filter(|e| !e.is_empty()) {
        if is_simple(&old) {
            objective_breakdown(&a, &old, &new, egs)?;
        }
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
