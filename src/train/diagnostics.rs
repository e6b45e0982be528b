//! Evaluating a network on examples without training it (Kaldi's `NnetComputeProb`, the
//! core of `nnet3-compute-prob` and of `combine`'s objective).

use super::example::computation_request;
use super::objective::{add_per_dim_accuracy, compute_accuracy, ObjectiveSum};
use super::step::{output_objectives, run_pass};
use crate::compile::cache::{CachingCompiler, CachingCompilerOptions};
use crate::compile::kaldi_draws::KaldiCompileDraws;
use crate::error::Result;
use crate::io::egs::NnetExample;
use crate::kaldi_rand::GlibcRand;
use crate::log::{fmt_g, log};
use crate::matrix::Vector;
use crate::nnet::{Nnet, ObjectiveType};
use crate::run::NnetComputer;
use std::collections::BTreeMap;

/// Options of the evaluation.
#[derive(Clone, Debug)]
pub struct NnetComputeProbOptions {
    /// Also compute the frame accuracy of `linear` outputs.
    pub compute_accuracy: bool,
    /// Also the accuracy per reference dimension (`--compute-per-dim-accuracy`; of the last
    /// minibatch only, as Kaldi reports it).
    pub compute_per_dim_accuracy: bool,
    /// The compiler's options (`--compiler.*`).
    pub compiler: CachingCompilerOptions,
    /// Also accumulate the gradient of the objective with respect to every parameter
    /// (`NnetComputeProb::deriv`; Kaldi's `compute_deriv`, which `nnet3-show-progress` sets).
    pub compute_deriv: bool,
    /// Name in log lines.
    pub program: String,
}

impl Default for NnetComputeProbOptions {
    fn default() -> Self {
        NnetComputeProbOptions {
            compute_accuracy: true,
            compute_per_dim_accuracy: false,
            compiler: CachingCompilerOptions::default(),
            compute_deriv: false,
            program: "compnet compute-prob".into(),
        }
    }
}

/// Sums the objective (and accuracy) of every output over the examples given.
pub struct NnetComputeProb<'a> {
    opts: NnetComputeProbOptions,
    nnet: &'a Nnet,
    compiler: CachingCompiler,
    objectives: BTreeMap<String, (ObjectiveType, ObjectiveSum)>,
    accuracy: BTreeMap<String, ObjectiveSum>,
    /// Per output: (weight, correct) per reference dimension, of the last minibatch.
    per_dim_accuracy: BTreeMap<String, (Vector, Vector)>,
    /// With `compute_deriv`: the summed gradient, in a copy of the network whose parameters
    /// and statistics were zeroed and whose updatable components are gradient holders
    /// (Kaldi's `ScaleNnet(0)` and `SetNnetAsGradient`).
    deriv: Option<Nnet>,
    /// The requests Kaldi's compiler of this evaluator would hold (for
    /// [`Self::compute_with_kaldi_rand`]).
    compile_draws: KaldiCompileDraws,
}

impl<'a> NnetComputeProb<'a> {
    pub fn new(opts: NnetComputeProbOptions, nnet: &'a Nnet) -> Self {
        let deriv = opts.compute_deriv.then(|| {
            let mut d = nnet.clone();
            d.scale_all(0.0);
            for c in &mut d.components {
                if let Some(u) = c.as_updatable_mut() {
                    u.set_zero(true);
                    u.common_mut().learning_rate_factor = 1.0;
                }
            }
            d
        });
        NnetComputeProb {
            compiler: CachingCompiler::new(opts.compiler.clone()),
            opts,
            nnet,
            objectives: BTreeMap::new(),
            accuracy: BTreeMap::new(),
            per_dim_accuracy: BTreeMap::new(),
            deriv,
            compile_draws: KaldiCompileDraws::default(),
        }
    }

    /// The gradient summed over the examples so far (None without `compute_deriv`).
    pub fn deriv(&self) -> Option<&Nnet> {
        self.deriv.as_ref()
    }

    /// Evaluates one (merged) example.
    pub fn compute(&mut self, eg: &NnetExample) -> Result<()> {
        self.compute_inner(eg, None)
    }

    /// [`Self::compute`] drawing from Kaldi's process-wide `rand()` stream as Kaldi's
    /// `NnetComputeProb` does: the compiler's consistency checks for each request this
    /// evaluator has not compiled yet (`compile::kaldi_draws`), then the components' draws
    /// in the passes (with `compute_deriv`: the nonlinearities' derivative statistics and
    /// self-repair, whose nudge is part of the gradient).
    pub fn compute_with_kaldi_rand(
        &mut self,
        eg: &NnetExample,
        stream: &mut GlibcRand,
    ) -> Result<()> {
        self.compute_inner(eg, Some(stream))
    }

    fn compute_inner(&mut self, eg: &NnetExample, stream: Option<&mut GlibcRand>) -> Result<()> {
        let nnet = self.nnet;
        let backward = self.deriv.is_some();
        let request = computation_request(nnet, eg, backward, false)?;
        let computation = self.compiler.compile(nnet, &request)?;
        let stream = match stream {
            Some(s) => {
                let compiler = &self.compiler;
                self.compile_draws.draw(
                    nnet,
                    &request,
                    compiler.options().use_shortcut,
                    &mut |r| compiler.peek(r),
                    s,
                );
                Some(s)
            }
            None => None,
        };
        let computer = NnetComputer::new(&computation, nnet, self.deriv.as_mut());
        let objectives = output_objectives(nnet, &request);
        run_pass(computer, &objectives, &request, eg, backward, stream, |o| {
            let name = o.name.to_string();
            let e = self
                .objectives
                .entry(name.clone())
                .or_insert((o.objective_type, ObjectiveSum::default()));
            e.1.tot_weight += o.objective.tot_weight;
            e.1.tot_objf += o.objective.tot_objf;
            if self.opts.compute_accuracy {
                // Kaldi reports it for every objective type (for dense targets too).
                let a = compute_accuracy(o.supervision, o.output);
                let e = self.accuracy.entry(name.clone()).or_default();
                e.tot_weight += a.tot_weight;
                e.tot_objf += a.tot_objf;
                if self.opts.compute_per_dim_accuracy {
                    let dim = o.output.num_cols();
                    let (w, c) = self
                        .per_dim_accuracy
                        .entry(name)
                        .or_insert_with(|| (Vector::zeros(dim), Vector::zeros(dim)));
                    // Kaldi's ComputeAccuracy zeroes the per-dim sums on every call, so its
                    // report covers the last minibatch only; scripts compare against that.
                    w.set_zero();
                    c.set_zero();
                    add_per_dim_accuracy(o.supervision, o.output, w, c);
                }
            }
            Ok(())
        })
    }

    /// The objective sums of output `name`.
    pub fn objective(&self, name: &str) -> Option<ObjectiveSum> {
        self.objectives.get(name).map(|e| e.1)
    }

    /// The accuracy sums of output `name`.
    pub fn accuracy(&self, name: &str) -> Option<ObjectiveSum> {
        self.accuracy.get(name).copied()
    }

    /// Logs Kaldi's "Overall log-likelihood ..." / "Overall accuracy ..." lines; false when
    /// nothing was evaluated.
    pub fn print_total_stats(&self) -> bool {
        let p = &self.opts.program;
        let mut any = false;
        for (name, (objective, s)) in &self.objectives {
            if s.tot_weight > 0.0 {
                let what = match objective {
                    ObjectiveType::Linear => "log-likelihood",
                    ObjectiveType::Quadratic => "objective",
                };
                log(
                    p,
                    &format!(
                        "Overall {what} for '{name}' is {} per frame, over {} frames.",
                        fmt_g(s.tot_objf / s.tot_weight),
                        fmt_g(s.tot_weight)
                    ),
                );
                any = true;
            }
        }
        for (name, s) in &self.accuracy {
            if s.tot_weight != 0.0 {
                log(
                    p,
                    &format!(
                        "Overall accuracy for '{name}' is {} per frame, over {} frames.",
                        fmt_g(s.tot_objf / s.tot_weight),
                        fmt_g(s.tot_weight)
                    ),
                );
                if let Some((w, c)) = self.per_dim_accuracy.get(name) {
                    // Dimensions never seen as a reference print 0.
                    let per_dim: Vec<String> = w
                        .to_vec()
                        .into_iter()
                        .zip(c.to_vec())
                        .map(|(w, c)| fmt_g(if w != 0.0 { f64::from(c / w) } else { 0.0 }))
                        .collect();
                    log(
                        p,
                        &format!(
                            "Overall per-dim accuracy vector for '{name}' is  [ {} ]\n per \
                             frame, over {} frames.",
                            per_dim.join(" "),
                            fmt_g(s.tot_weight)
                        ),
                    );
                }
            }
        }
        any
    }
}

/// Zeroes the component statistics of `nnet` and accumulates them afresh over `egs` in a
/// forward pass (Kaldi's `RecomputeStats`, used after averaging models with BatchNorm).
pub fn recompute_stats(egs: &[NnetExample], nnet: &mut Nnet) -> Result<()> {
    super::network_ops::zero_component_stats(nnet);
    let compiler = CachingCompiler::new(CachingCompilerOptions::default());
    for eg in egs {
        let request = computation_request(nnet, eg, false, true)?;
        let computation = compiler.compile(nnet, &request)?;
        let objectives = output_objectives(nnet, &request);
        let computer = NnetComputer::storing_stats(&computation, nnet);
        run_pass(computer, &objectives, &request, eg, false, None, |_| Ok(()))?;
    }
    Ok(())
}
