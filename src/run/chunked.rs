//! Chunked decoding: a network run over whole utterances chunk by chunk, the counterpart of
//! Kaldi's `DecodableNnetSimple` with its `NnetSimpleComputationOptions`. `compnet compute`
//! is a thin command line around it; benchmarks and (later) decoders call it directly.
//!
//! Chunking: the utterance's output frames (at the subsampled rate) are cut into chunks of
//! `frames_per_chunk` frames (rounded up to a multiple of lcm(frame-subsampling-factor,
//! modulus)); each chunk is an independent computation over input frames
//! `[first_out − L − extra_left, last_out + R + extra_right]` with frames outside `[0, T)`
//! replaced by the first/last frame, and times shifted so that the chunk's first output frame
//! has t = 0. iVectors are supplied as one row at t = 0.

use crate::compile::cache::{compile_with_shortcut, CachingCompilerOptions};
use crate::compile::context::{nnet_context, NnetContext};
use crate::compile::request::{ComputationRequest, IoSpecification};
use crate::compile::{
    compile_computation, optimize, CompilerOptions, NnetComputation, OptimizeOptions,
};
use crate::error::{Error, Result};
use crate::matrix::{Matrix, Vector};
use crate::nnet::descriptor::{Descriptor, ForwardingDescriptor, SumDescriptor};
use crate::nnet::{Index, NetworkNode, Nnet, ObjectiveType};
use crate::run::NnetComputer;
use std::collections::HashMap;

/// How utterances are cut into chunks: Kaldi's `NnetSimpleComputationOptions` (the option
/// names of `nnet3-compute`; the acoustic scale is always 1 here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NnetSimpleComputationOptions {
    /// Output frames (at the subsampled rate × factor) per chunk; rounded up to a multiple of
    /// lcm(frame-subsampling-factor, network modulus).
    pub frames_per_chunk: i32,
    /// Extra input frames of left context per chunk (beyond the network's own context).
    pub extra_left_context: i32,
    /// Extra input frames of right context per chunk.
    pub extra_right_context: i32,
    /// Extra left context for the first chunk of an utterance (-1 = `extra_left_context`).
    pub extra_left_context_initial: i32,
    /// Extra right context for the last chunk of an utterance (-1 = `extra_right_context`).
    pub extra_right_context_final: i32,
    /// Output only every n-th frame (chain models use 3).
    pub frame_subsampling_factor: i32,
    /// The optimizer's options (`--optimization.*`).
    pub optimize: OptimizeOptions,
}

impl Default for NnetSimpleComputationOptions {
    /// Kaldi's defaults.
    fn default() -> Self {
        NnetSimpleComputationOptions {
            frames_per_chunk: 50,
            extra_left_context: 0,
            extra_right_context: 0,
            extra_left_context_initial: -1,
            extra_right_context_final: -1,
            frame_subsampling_factor: 1,
            optimize: OptimizeOptions::default(),
        }
    }
}

impl NnetSimpleComputationOptions {
    /// Rejects values Kaldi rejects, naming the option.
    pub fn check(&self) -> Result<()> {
        if self.frame_subsampling_factor < 1 {
            return Err(Error::Usage(
                "--frame-subsampling-factor must be >= 1".into(),
            ));
        }
        if self.frames_per_chunk < 1 {
            return Err(Error::Usage("--frames-per-chunk must be >= 1".into()));
        }
        if self.extra_left_context < 0 || self.extra_right_context < 0 {
            return Err(Error::Usage(
                "--extra-left-context and --extra-right-context must be >= 0".into(),
            ));
        }
        Ok(())
    }
}

/// Checks, before any graph is built, that the frames one computation spans (a chunk, its
/// context and the extra context options, times the chunks batched together) and the values
/// for them fit the memory limit ([`crate::limits`]); options near 2^31 would otherwise
/// overflow the frame arithmetic or ask for more than exists.
pub(crate) fn check_chunk_size(
    nnet: &Nnet,
    opts: &NnetSimpleComputationOptions,
    context: &NnetContext,
    chunk_batch: usize,
) -> Result<()> {
    let fsf = i64::from(opts.frame_subsampling_factor);
    let modulus = i64::from(context.modulus.max(1));
    let extra_left = i64::from(opts.extra_left_context.max(opts.extra_left_context_initial));
    let extra_right = i64::from(opts.extra_right_context.max(opts.extra_right_context_final));
    // In i64 every term is below 2^32, so no sum or product of two overflows.
    let chunk = i64::from(opts.frames_per_chunk) + fsf * modulus;
    let span = chunk
        + i64::from(context.left.max(0))
        + i64::from(context.right.max(0))
        + extra_left.max(0)
        + extra_right.max(0);
    // Per frame: every node's values as floats, plus the graph's bookkeeping per node.
    const GRAPH_BYTES_PER_NODE: u64 = 64;
    let mut per_frame: u64 = 0;
    for n in 0..nnet.num_nodes() {
        let dim = nnet.checked_node_dim(n).unwrap_or(0) as u64;
        per_frame = per_frame.saturating_add(dim.saturating_mul(4) + GRAPH_BYTES_PER_NODE);
    }
    crate::limits::check_product(
        &[span as u64, chunk_batch as u64, per_frame],
        &format!(
            "a computation over {span} frames (--frames-per-chunk={}, --extra-left-context={}, \
             --extra-right-context={}, --frame-subsampling-factor={}, network context {}/{})",
            opts.frames_per_chunk, extra_left, extra_right, fsf, context.left, context.right
        ),
    )
    .map_err(Error::Usage)
}

/// Where an utterance's iVector comes from.
#[derive(Clone, Copy)]
pub enum IvectorSource<'a> {
    /// No iVector.
    None,
    /// One iVector for the whole utterance (`--ivectors`).
    Fixed(&'a Vector),
    /// Online iVectors: row i covers frames `[i·period, (i+1)·period)`.
    Online(&'a Matrix, i32),
}

impl IvectorSource<'_> {
    /// Errs when a network with an `ivector` input (`needed`) is given none.
    pub(crate) fn check_given(&self, needed: bool) -> Result<()> {
        if needed && matches!(self, IvectorSource::None) {
            return Err(Error::Compute("the network needs an iVector".into()));
        }
        Ok(())
    }

    /// The fixed iVector, or the online row that `pick(rows, period)` chooses (the decoders
    /// differ in which frame's row they take).
    pub(crate) fn select(self, pick: impl FnOnce(i32, i32) -> Result<i32>) -> Result<Vec<f32>> {
        match self {
            IvectorSource::None => Err(Error::Compute("the network needs an iVector".into())),
            IvectorSource::Fixed(v) => Ok(v.to_vec()),
            IvectorSource::Online(m, period) => {
                if m.num_rows() == 0 {
                    return Err(Error::Compute("empty online iVector matrix".into()));
                }
                Ok(m.row_to_vec(pick(m.num_rows() as i32, period)? as usize))
            }
        }
    }
}

/// The logs of `priors` (subtracted from every output row), checked against the output dim.
fn log_priors(priors: Option<&Vector>, out_dim: usize) -> Result<Option<Vector>> {
    let Some(p) = priors else {
        return Ok(None);
    };
    Error::check_dim("--use-priors (priors vs output dim)", out_dim, p.dim())?;
    let mut log_p = p.clone();
    log_p.apply_log();
    Ok(Some(log_p))
}

/// One utterance for [`ChunkComputer::compute_many`].
#[derive(Clone, Copy)]
pub struct Utterance<'a> {
    /// T × input-dim features.
    pub feats: &'a Matrix,
    /// Where its iVector comes from.
    pub ivector: IvectorSource<'a>,
}

/// One chunk to compute: its utterance, first output frame (subsampled) and size, its input
/// range relative to the first output frame ([`ChunkComputer::chunk_shape`]) and its iVector
/// row (empty without one).
struct ChunkJob {
    utt: usize,
    start: i32,
    num: i32,
    shape: (i32, i32, usize),
    ivector: Vec<f32>,
}

/// The utterances' outputs while their chunks are computed ([`ChunkComputer::compute_each`]).
struct Outputs<'a> {
    /// Output rows per utterance.
    rows: Vec<usize>,
    out_dim: usize,
    /// Allocated at the utterance's first placed chunk, taken when handed out.
    mats: Vec<Option<Matrix>>,
    /// Chunks not yet placed, per utterance.
    left: Vec<usize>,
    /// The first utterance not yet handed out.
    next: usize,
    /// Buffers to reuse.
    spare: Vec<Matrix>,
    log_priors: Option<&'a Vector>,
}

impl Outputs<'_> {
    /// Utterance `u`'s output matrix, allocated (or a spare buffer resized) at first use.
    fn get(&mut self, u: usize) -> &mut Matrix {
        let (rows, cols) = (self.rows[u], self.out_dim);
        let spare = &mut self.spare;
        self.mats[u].get_or_insert_with(|| {
            let mut m = spare.pop().unwrap_or_default();
            m.resize_undefined(rows, cols);
            m
        })
    }

    /// Copies a group's output rows (chunk after chunk) to their utterances, handing out
    /// each utterance as soon as it is complete: before the next utterance's first chunk is
    /// placed, so that one can reuse its buffer (one utterance output alive instead of two).
    fn place(
        &mut self,
        jobs: &[ChunkJob],
        group: &[usize],
        m: &Matrix,
        emit: &mut dyn FnMut(usize, Matrix) -> Result<Option<Matrix>>,
    ) -> std::result::Result<(), (usize, Error)> {
        let mut row = 0;
        for &j in group {
            let job = &jobs[j];
            let out = self.get(job.utt);
            for r in 0..job.num as usize {
                out.view_mut()
                    .copy_row_from(job.start as usize + r, m.view(), row);
                row += 1;
            }
            self.left[job.utt] -= 1;
            self.emit_ready(emit)?;
        }
        Ok(())
    }

    /// Hands out, in order, every utterance whose chunks are all placed; keeps what `emit`
    /// gives back.
    fn emit_ready(
        &mut self,
        emit: &mut dyn FnMut(usize, Matrix) -> Result<Option<Matrix>>,
    ) -> std::result::Result<(), (usize, Error)> {
        while self.next < self.rows.len() && self.left[self.next] == 0 {
            let u = self.next;
            self.get(u);
            let mut out = self.mats[u].take().unwrap_or_default();
            if let Some(lp) = self.log_priors {
                out.view_mut().add_vec_to_rows(-1.0, lp, 1.0);
            }
            self.next += 1;
            if let Some(back) = emit(u, out).map_err(|e| (u, e))? {
                if self.spare.len() < SPARE_OUTPUTS {
                    self.spare.push(back);
                }
            }
        }
        Ok(())
    }
}

/// Everything fixed for a run: the network in test mode, its context, the chunking options,
/// the log priors to subtract (if any) and a cache of compiled computations (keyed by the
/// chunk's shape and the batch size).
pub struct ChunkComputer {
    nnet: Nnet,
    output_node: String,
    context: NnetContext,
    frames_per_chunk: i32,
    opts: NnetSimpleComputationOptions,
    has_ivector: bool,
    input_dim: usize,
    ivector_dim: usize,
    log_priors: Option<Vector>,
    cache: HashMap<(i32, i32, usize, usize), NnetComputation>,
    /// Most chunks per computation: [`CHUNK_BATCH`] or [`RECURRENT_CHUNK_BATCH`].
    chunk_batch: usize,
    /// Output matrices handed back by [`Self::compute_each`]'s caller, reused for later
    /// utterances (at most [`SPARE_OUTPUTS`]).
    spare_outputs: Vec<Matrix>,
}

/// Utterance output buffers kept for reuse: an utterance's output (18 MB for 1,500 frames
/// of a 3,000-output network) is otherwise fresh memory whose pages fault in as the chunks
/// fill it.
const SPARE_OUTPUTS: usize = 2;

/// At most this many equally shaped chunks run as one computation; more gave no reliable gain
/// on the feed-forward perf networks (docs/PERFORMANCE.md, "Inference").
const CHUNK_BATCH: usize = 4;

/// The same for recurrent networks, whose recurrent products see only the batch's sequences
/// as rows at every time step: the swbd TDNN-LSTM ran 9.1 / 6.4 / 5.1 / 5.1 s CPU with 4 /
/// 8 / 16 / 32 (docs/PERFORMANCE.md, "How `compute` runs").
const RECURRENT_CHUNK_BATCH: usize = 16;

/// Name of the output node added when `--output-node` names a non-output node.
const EXTRA_OUTPUT: &str = "compnet-extra-output";

impl ChunkComputer {
    /// Prepares `nnet` for computing node `output_node`: test mode, the output node, the
    /// context and the chunk size (logged when it has to be increased, as Kaldi does). With
    /// `priors`, their logs are subtracted from every output row.
    pub fn new(
        nnet: Nnet,
        opts: &NnetSimpleComputationOptions,
        output_node: &str,
        priors: Option<&Vector>,
    ) -> Result<Self> {
        let Prepared {
            nnet,
            output_node,
            context,
            input_dim,
            ivector_dim,
            log_priors,
            ..
        } = prepare_network(nnet, opts, output_node, priors)?;
        let has_ivector = ivector_dim > 0;
        let chunk_batch = if nnet.is_recurrent() {
            RECURRENT_CHUNK_BATCH
        } else {
            CHUNK_BATCH
        };
        check_chunk_size(&nnet, opts, &context, chunk_batch)?;
        let fsf = opts.frame_subsampling_factor;
        let n = lcm(fsf, context.modulus.max(1));
        let mut frames_per_chunk = opts.frames_per_chunk;
        if frames_per_chunk % n != 0 {
            let fixed = frames_per_chunk + n - frames_per_chunk % n;
            eprintln!(
                "compnet compute: increasing --frames-per-chunk from {frames_per_chunk} to {fixed} due to --frame-subsampling-factor={fsf} and nnet shift-invariance modulus = {}",
                context.modulus
            );
            frames_per_chunk = fixed;
        }
        Ok(ChunkComputer {
            nnet,
            output_node,
            context,
            frames_per_chunk,
            opts: opts.clone(),
            has_ivector,
            input_dim,
            ivector_dim,
            log_priors,
            cache: HashMap::new(),
            chunk_batch,
            spare_outputs: Vec::new(),
        })
    }

    /// The chunk size actually used (after rounding).
    pub fn frames_per_chunk(&self) -> i32 {
        self.frames_per_chunk
    }

    /// True if the network has an `ivector` input, so [`Self::compute`] needs an iVector.
    pub fn needs_ivector(&self) -> bool {
        self.has_ivector
    }

    /// The network context used for chunking.
    pub fn context(&self) -> NnetContext {
        self.context
    }

    /// Computes the output for one utterance (`feats`: T × input-dim).
    pub fn compute(&mut self, feats: &Matrix, ivector: IvectorSource<'_>) -> Result<Matrix> {
        let utt = Utterance { feats, ivector };
        self.compute_many(std::slice::from_ref(&utt))
            .map(|mut v| v.pop().unwrap_or_else(|| Matrix::zeros(0, 0)))
            .map_err(|(_, e)| e)
    }

    /// Computes the outputs of several utterances, in order. Equally shaped chunks of
    /// different utterances share one computation (up to [`CHUNK_BATCH`] sequences, or
    /// [`RECURRENT_CHUNK_BATCH`] for a recurrent network), so an
    /// utterance of only a chunk or two still gives every GEMM, and above all every step of a
    /// recurrence, several rows. The outputs are those of [`Self::compute`] per utterance: each
    /// sequence of a batch is exactly one chunk's computation. On error, the index of the
    /// utterance it concerns comes with it.
    pub fn compute_many(
        &mut self,
        utts: &[Utterance<'_>],
    ) -> std::result::Result<Vec<Matrix>, (usize, Error)> {
        let mut outs = Vec::with_capacity(utts.len());
        self.run_utterances(utts, &mut |_, m| {
            outs.push(m);
            Ok(None)
        })?;
        Ok(outs)
    }

    /// [`Self::compute_many`] handing each utterance's output to `f` (with the utterance's
    /// index) as soon as its chunks and those of every utterance before it are computed, in
    /// order; the same values. The matrix is lent: its buffer is reused for a later
    /// utterance, so a long list of utterances holds about one output at a time (more
    /// where a differently shaped last chunk is computed after later utterances' chunks)
    /// instead of all of them. An error of `f` stops the computation and is returned with
    /// the index.
    pub fn compute_each(
        &mut self,
        utts: &[Utterance<'_>],
        mut f: impl FnMut(usize, &mut Matrix) -> Result<()>,
    ) -> std::result::Result<(), (usize, Error)> {
        self.run_utterances(utts, &mut |u, mut m| {
            f(u, &mut m)?;
            Ok(Some(m))
        })
    }

    /// The work of [`Self::compute_many`] and [`Self::compute_each`]: `emit` receives each
    /// finished output in utterance order and may hand the matrix back for reuse.
    fn run_utterances(
        &mut self,
        utts: &[Utterance<'_>],
        emit: &mut dyn FnMut(usize, Matrix) -> Result<Option<Matrix>>,
    ) -> std::result::Result<(), (usize, Error)> {
        let fsf = self.opts.frame_subsampling_factor;
        let sub_per_chunk = self.frames_per_chunk / fsf;
        let out_dim = self
            .nnet
            .node_index(&self.output_node)
            .map(|i| self.nnet.node_dim(i))
            .unwrap_or(0);
        // Every chunk of every utterance, with its iVector row (the only per-chunk input that
        // can be missing), checked before anything runs.
        let mut out_rows = Vec::with_capacity(utts.len());
        let mut jobs: Vec<ChunkJob> = Vec::new();
        for (u, utt) in utts.iter().enumerate() {
            let t_total = utt.feats.num_rows() as i32;
            Error::check_dim(
                "features vs network input",
                self.input_dim,
                utt.feats.num_cols(),
            )
            .and_then(|()| utt.ivector.check_given(self.has_ivector))
            .map_err(|e| (u, e))?;
            let num_sub = (t_total + fsf - 1) / fsf;
            out_rows.push(num_sub.max(0) as usize);
            let mut start = 0;
            while start < num_sub {
                let num = sub_per_chunk.min(num_sub - start);
                let (_, _, first_out, last_out) = self.chunk_range(t_total, start, num);
                let ivector = if self.has_ivector {
                    let row = ivector_row(utt.ivector, first_out, last_out).map_err(|e| (u, e))?;
                    Error::check_dim(
                        "iVector vs network 'ivector' input",
                        self.ivector_dim,
                        row.len(),
                    )
                    .map_err(|e| (u, e))?;
                    row
                } else {
                    Vec::new()
                };
                jobs.push(ChunkJob {
                    utt: u,
                    start,
                    num,
                    shape: self.chunk_shape(t_total, start, num),
                    ivector,
                });
                start += num;
            }
        }
        // Chunks of one shape, in order of appearance, `chunk_batch` to a computation: that
        // many times the rows in every GEMM, and the weights read once instead of that often.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut open: HashMap<(i32, i32, usize), usize> = HashMap::new();
        for (j, job) in jobs.iter().enumerate() {
            match open.get(&job.shape) {
                Some(&g) if groups[g].len() < self.chunk_batch => groups[g].push(j),
                _ => {
                    open.insert(job.shape, groups.len());
                    groups.push(vec![j]);
                }
            }
        }
        // Compile every shape first (the cache needs `&mut self`), then run the groups.
        for g in &groups {
            let job = &jobs[g[0]];
            self.prepare_chunk(job.shape, job.num, g.len())
                .map_err(|e| (job.utt, e))?;
        }
        // An utterance's output is allocated at its first chunk (a spare buffer where there
        // is one: every row is overwritten) and handed out once its last chunk is placed.
        let mut outputs = Outputs {
            rows: out_rows,
            out_dim,
            mats: (0..utts.len()).map(|_| None).collect(),
            left: vec![0; utts.len()],
            next: 0,
            spare: std::mem::take(&mut self.spare_outputs),
            log_priors: self.log_priors.as_ref(),
        };
        for job in &jobs {
            outputs.left[job.utt] += 1;
        }
        let result = (|| {
            outputs.emit_ready(emit)?;
            // Groups are independent computations, so with several threads they run in
            // parallel, one group per thread with single-threaded GEMMs: at these sizes a GEMM
            // split over threads gains nothing (measured: docs/PERFORMANCE.md, "Inference").
            let run = |g: &Vec<usize>| self.run_chunks(utts, &jobs, g);
            let parallel = groups.len() > 1 && rayon::current_num_threads() > 1;
            if parallel {
                use rayon::prelude::*;
                let saved = crate::matrix::num_threads();
                crate::matrix::set_num_threads(1);
                // The first group runs alone: a weight matrix's first products take another
                // GEMM path than later ones (`WeightMatrix` builds its product layout on the
                // second), so which products come first must not depend on thread timing, or
                // the same command could round differently from run to run.
                let mut results = vec![run(&groups[0])];
                results.par_extend(groups[1..].par_iter().map(run));
                crate::matrix::set_num_threads(saved);
                for (g, res) in groups.iter().zip(results) {
                    let m = res.map_err(|e| (jobs[g[0]].utt, e))?;
                    outputs.place(&jobs, g, &m, emit)?;
                }
            } else {
                // One group at a time, its output buffer handed back to this thread's pool
                // once copied, so the next group's output is not a fresh allocation (page
                // faults).
                for g in &groups {
                    let m = run(g).map_err(|e| (jobs[g[0]].utt, e))?;
                    outputs.place(&jobs, g, &m, emit)?;
                    crate::run::computer::recycle(m);
                }
            }
            Ok(())
        })();
        self.spare_outputs = outputs.spare;
        result
    }

    /// The input range of a chunk of `num` output frames (subsampled) starting at subsampled
    /// frame `start` of an utterance of `t_total` frames: (first input, last input, first
    /// output, last output frame).
    fn chunk_range(&self, t_total: i32, start: i32, num: i32) -> (i32, i32, i32, i32) {
        let o = &self.opts;
        let fsf = o.frame_subsampling_factor;
        let num_sub = (t_total + fsf - 1) / fsf;
        let first_out = start * fsf;
        let last_out = first_out + (num - 1) * fsf;
        let extra_left = if start == 0 && o.extra_left_context_initial >= 0 {
            o.extra_left_context_initial
        } else {
            o.extra_left_context
        };
        let extra_right = if start + num == num_sub && o.extra_right_context_final >= 0 {
            o.extra_right_context_final
        } else {
            o.extra_right_context
        };
        let first_in = first_out - self.context.left - extra_left;
        let last_in = last_out + self.context.right + extra_right;
        (first_in, last_in, first_out, last_out)
    }

    /// A chunk's shape: its input range relative to its first output frame, and its size.
    fn chunk_shape(&self, t_total: i32, start: i32, num: i32) -> (i32, i32, usize) {
        let (first_in, last_in, first_out, _) = self.chunk_range(t_total, start, num);
        (first_in - first_out, last_in - first_out, num as usize)
    }

    /// Compiles (once per shape and batch size) the computation of `seqs` chunks of `num`
    /// output frames with input range `shape` (see [`Self::chunk_shape`]).
    fn prepare_chunk(&mut self, shape: (i32, i32, usize), num: i32, seqs: usize) -> Result<()> {
        let (lo, hi, n) = shape;
        let key = (lo, hi, n, seqs);
        if !self.cache.contains_key(&key) {
            let start = std::time::Instant::now();
            let request = self.chunk_request(lo, hi, num, seqs as i32);
            // Several chunks: compiled as 2 and widened (Kaldi's shortcut compilation), which
            // costs what 2 do; a 16-chunk batch of a recurrent network otherwise spends
            // longer compiling than computing. Direct compilation where widening gives up.
            let options = CachingCompilerOptions {
                optimize: self.opts.optimize.clone(),
                ..Default::default()
            };
            let widened = if seqs > 2 {
                compile_with_shortcut(&self.nnet, &request, &options)?.ok()
            } else {
                None
            };
            let comp = match widened {
                Some(c) => c,
                None => {
                    let mut c =
                        compile_computation(&self.nnet, &request, &CompilerOptions::default())?;
                    optimize(&self.nnet, &mut c, &self.opts.optimize);
                    c
                }
            };
            crate::log::vlog(2, "compnet compute", || {
                format!(
                    "compiled {seqs} chunk(s) of {num} output frames, input t {lo}..{hi}: {} commands, {:.1} ms",
                    comp.commands.len(),
                    start.elapsed().as_secs_f64() * 1e3
                )
            });
            self.cache.insert(key, comp);
        }
        Ok(())
    }

    /// Runs a group of equally shaped chunks (indexes into `jobs`) as one computation that
    /// [`Self::prepare_chunk`] compiled; returns their outputs one after the other.
    fn run_chunks(
        &self,
        utts: &[Utterance<'_>],
        jobs: &[ChunkJob],
        group: &[usize],
    ) -> Result<Matrix> {
        let Some(&first) = group.first() else {
            return Ok(Matrix::zeros(0, 0));
        };
        let (lo, hi, n) = jobs[first].shape;
        // Input rows, sequence by sequence, edge frames repeated.
        let n_in = (hi - lo + 1) as usize;
        let mut input = Matrix::zeros(n_in * group.len(), self.input_dim);
        let mut iv_rows = Vec::with_capacity(group.len() * self.ivector_dim);
        for (k, &j) in group.iter().enumerate() {
            let job = &jobs[j];
            let feats = utts[job.utt].feats;
            let t_total = feats.num_rows() as i32;
            let (first_in, last_in, _, _) = self.chunk_range(t_total, job.start, job.num);
            for (r, t) in (first_in..=last_in).enumerate() {
                let src = t.clamp(0, t_total - 1) as usize;
                input
                    .view_mut()
                    .copy_row_from(k * n_in + r, feats.view(), src);
            }
            iv_rows.extend_from_slice(&job.ivector);
        }
        let key = (lo, hi, n, group.len());
        let comp = self
            .cache
            .get(&key)
            .ok_or_else(|| Error::Compute("compiled computation missing from the cache".into()))?;
        let mut computer = NnetComputer::new(comp, &self.nnet, None);
        computer.accept_input("input", input)?;
        if self.has_ivector {
            computer.accept_input(
                "ivector",
                Matrix::from_vec(group.len(), self.ivector_dim, iv_rows),
            )?;
        }
        computer.run_forward()?;
        computer.take_output(&self.output_node)
    }

    /// The request for `seqs` chunks (sequences n = 0..seqs): input t in [t_lo, t_hi],
    /// outputs t = 0, fsf, 2·fsf, ..., one iVector row at t = 0, all n-major.
    fn chunk_request(&self, t_lo: i32, t_hi: i32, num: i32, seqs: i32) -> ComputationRequest {
        let fsf = self.opts.frame_subsampling_factor;
        let mut req = ComputationRequest::default();
        req.inputs.push(IoSpecification {
            name: "input".into(),
            indexes: (0..seqs)
                .flat_map(|n| (t_lo..=t_hi).map(move |t| Index::new(n, t, 0)))
                .collect(),
            has_deriv: false,
        });
        if self.has_ivector {
            req.inputs.push(IoSpecification {
                name: "ivector".into(),
                indexes: (0..seqs).map(|n| Index::new(n, 0, 0)).collect(),
                has_deriv: false,
            });
        }
        req.outputs.push(IoSpecification {
            name: self.output_node.clone(),
            indexes: (0..seqs)
                .flat_map(|n| (0..num).map(move |i| Index::new(n, i * fsf, 0)))
                .collect(),
            has_deriv: false,
        });
        req
    }
}

/// A network made ready for decoding: test mode, the output node (a non-output node gets an
/// output node reading it), its context, the input and output dims and the log-priors.
pub(crate) struct Prepared {
    pub nnet: Nnet,
    pub output_node: String,
    pub context: NnetContext,
    pub input_dim: usize,
    /// 0 without an `ivector` input.
    pub ivector_dim: usize,
    pub out_dim: usize,
    /// The logs of `priors`, subtracted from every output row.
    pub log_priors: Option<Vector>,
}

/// Checks `opts` and prepares `nnet` for computing node `output_node` (chunked or looped),
/// with the logs of `priors` when given.
pub(crate) fn prepare_network(
    mut nnet: Nnet,
    opts: &NnetSimpleComputationOptions,
    output_node: &str,
    priors: Option<&Vector>,
) -> Result<Prepared> {
    opts.check()?;
    // One generator through all components, in order: BatchNorm without statistics
    // invents some, each its own, the same on every run.
    let mut test_mode_rng = crate::random::seeded_rng(0);
    for c in nnet.components.iter_mut() {
        c.set_test_mode(true, &mut test_mode_rng);
    }
    let input = nnet
        .node_index("input")
        .filter(|&i| nnet.is_input_node(i))
        .ok_or_else(|| Error::Network("the network has no input node named 'input'".into()))?;
    let input_dim = nnet.node_dim(input);
    let ivector_dim = match nnet.node_index("ivector") {
        Some(i) if nnet.is_input_node(i) => nnet.node_dim(i),
        _ => 0,
    };
    // The output: the named node; a non-output node gets an output node reading it, and
    // for the context computation that node plays the role of 'output'.
    let node = nnet
        .node_index(output_node)
        .ok_or_else(|| Error::Usage(format!("--output-node: no node named '{output_node}'")))?;
    let (output_node, context) = if nnet.is_output_node(node) && output_node == "output" {
        let ctx = nnet_context(&nnet)?;
        ("output".to_string(), ctx)
    } else {
        let out_name = if nnet.is_output_node(node) {
            output_node.to_string()
        } else {
            nnet.node_names.push(EXTRA_OUTPUT.to_string());
            nnet.nodes.push(NetworkNode::Descriptor {
                descriptor: Descriptor {
                    parts: vec![SumDescriptor::Simple(ForwardingDescriptor::Simple {
                        node,
                        scale: 1.0,
                    })],
                },
                objective: ObjectiveType::Linear,
            });
            EXTRA_OUTPUT.to_string()
        };
        // Context of that output: rename it 'output' in a copy.
        let mut tmp = nnet.clone();
        let k = tmp.node_index(&out_name).unwrap_or(0);
        if let Some(o) = tmp.node_index("output") {
            tmp.node_names[o] = "compnet-original-output".into();
        }
        tmp.node_names[k] = "output".into();
        (out_name, nnet_context(&tmp)?)
    };
    let out_dim = nnet
        .node_index(&output_node)
        .map(|i| nnet.node_dim(i))
        .unwrap_or(0);
    Ok(Prepared {
        log_priors: log_priors(priors, out_dim)?,
        nnet,
        output_node,
        context,
        input_dim,
        ivector_dim,
        out_dim,
    })
}

/// The iVector for a chunk with first and last output frames `a` and `b`.
fn ivector_row(src: IvectorSource<'_>, a: i32, b: i32) -> Result<Vec<f32>> {
    src.select(|rows, period| {
        let frame = a + (b - a) / 2;
        let row = frame / period.max(1);
        if row >= rows && (row - (rows - 1)) * period > 50 {
            return Err(Error::Compute(format!(
                "could not get an iVector for frame {frame}: only {rows} rows of online iVectors with period {period}"
            )));
        }
        Ok(row.min(rows - 1))
    })
}

fn gcd(a: i32, b: i32) -> i32 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i32, b: i32) -> i32 {
    let (a, b) = (a.max(1), b.max(1));
    a / gcd(a, b) * b
}
