//! Looped (streaming) decoding: Kaldi's `DecodableNnetSimpleLooped` and the online looped
//! decodable. Frames (and iVectors) go in as they come; outputs come out one chunk at a time,
//! `right context` frames behind the input (the network's latency), and every chunk reuses
//! what earlier chunks computed (`compile::looped`), so no frame of any layer is computed
//! twice.
//!
//! As in Kaldi's looped decoder, a chunk's new rows use the iVector current when the chunk
//! runs (offline: the row of the chunk's last input frame); Kaldi's chunked `nnet3-compute`
//! instead gives each chunk the iVector of the middle of its outputs, so with iVectors that
//! change over time the two differ. With a fixed iVector or none, a feed-forward network
//! gives the chunked outputs (frames past either end repeat the edge frame in both).

use crate::compile::context::NnetContext;
use crate::compile::looped::{
    plan_looped, ChunkProgram, LoopedComputation, LoopedOptions, LoopedPlan,
};
use crate::error::{Error, Result};
use crate::matrix::{Matrix, Vector};
use crate::nnet::recurrent_split::split_recurrent_affines;
use crate::nnet::Nnet;
use crate::run::chunked::{
    check_chunk_size, prepare_network, IvectorSource, NnetSimpleComputationOptions, Utterance,
};
use crate::run::NnetComputer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Streams of a recurrent network computed together by [`LoopedDecoder::compute_many`]: a
/// recurrent product then has that many rows per time step (as `RECURRENT_CHUNK_BATCH` in
/// `run::chunked`).
const RECURRENT_STREAMS: usize = 16;

/// `compute --looped`'s chunk size for a recurrent network when none is given: its outputs
/// do not depend on it, and larger chunks give the non-recurrent products more rows (input
/// frames per chunk against CPU time on the Switchboard TDNN-LSTM, 4 streams: 50 → 150 saves
/// about a quarter, 300 and 600 are slower again; docs/PERFORMANCE.md, "Looped computation").
pub const RECURRENT_FRAMES_PER_CHUNK: i32 = 150;

/// The iVector of the chunk whose last input frame is `frame` (Kaldi's looped decoders: the
/// online row of that frame, the last row past the end).
fn looped_ivector(src: IvectorSource<'_>, frame: i64) -> Result<Vec<f32>> {
    src.select(|rows, period| {
        Ok((frame / i64::from(period.max(1))).clamp(0, i64::from(rows) - 1) as i32)
    })
}

/// A network planned for looped decoding, shared by any number of streams. The computation
/// of each stream count (one for [`LoopedDecoder::stream`] and [`LoopedDecoder::compute`],
/// up to 16 for a batch of a recurrent network's utterances) is compiled when first needed:
/// a batch of utterances never needs the one-stream computation.
pub struct LoopedDecoder {
    plan: LoopedPlan,
    /// Compiled computations by stream count.
    batches: Mutex<HashMap<usize, Arc<LoopedComputation>>>,
    context: NnetContext,
    input_dim: usize,
    ivector_dim: usize,
    out_dim: usize,
    log_priors: Option<Vector>,
}

impl LoopedDecoder {
    /// Compiles `nnet` (test mode) for looped computation of node `output_node`, with the
    /// chunk size `--frames-per-chunk` (rounded up as Kaldi's `GetChunkSize` does), the
    /// subsampling factor and `--extra-left-context-initial` of `opts`; the other extra
    /// context options have no meaning here. With `priors`, their logs are subtracted.
    pub fn new(
        nnet: Nnet,
        opts: &NnetSimpleComputationOptions,
        output_node: &str,
        priors: Option<&Vector>,
    ) -> Result<Self> {
        let mut p = prepare_network(nnet, opts, output_node, priors)?;
        // A recurrent affine layer's input part then runs once per chunk, not per time step,
        // and the per-step products (a row per stream) read the weights without repacking
        // them.
        split_recurrent_affines(&mut p.nnet);
        if p.nnet.is_recurrent() {
            for c in p.nnet.components.iter_mut() {
                for w in c.product_weights_mut() {
                    w.set_few_rows(true);
                }
            }
        }
        let looped_opts = LoopedOptions {
            frames_per_chunk: opts.frames_per_chunk,
            frame_subsampling_factor: opts.frame_subsampling_factor,
            extra_left_context_initial: opts.extra_left_context_initial.max(0),
            optimize: opts.optimize.clone(),
        };
        check_chunk_size(&p.nnet, opts, &p.context, RECURRENT_STREAMS)?;
        let plan = plan_looped(Arc::new(p.nnet), &p.output_node, p.context, &looped_opts)?;
        Ok(LoopedDecoder {
            plan,
            batches: Mutex::new(HashMap::new()),
            context: p.context,
            input_dim: p.input_dim,
            ivector_dim: p.ivector_dim,
            out_dim: p.out_dim,
            log_priors: p.log_priors,
        })
    }

    /// The one-stream computation (its first and steady chunks), compiled on first use.
    pub fn computation(&self) -> Result<Arc<LoopedComputation>> {
        self.batch(1)
    }

    /// Input frames per chunk after rounding.
    pub fn chunk_size(&self) -> i32 {
        self.plan.chunk_size
    }

    /// True if the network has an `ivector` input.
    pub fn needs_ivector(&self) -> bool {
        self.ivector_dim > 0
    }

    /// A new stream (one utterance, or one endless input).
    pub fn stream(&self) -> LoopedStream<'_> {
        LoopedStream {
            dec: self,
            looped: None,
            frames: Vec::new(),
            first_kept: 0,
            num_frames: 0,
            finished: false,
            ivector: None,
            chunk: 0,
            carried: Vec::new(),
            ready: Vec::new(),
            emitted: 0,
        }
    }

    /// Computes one whole utterance through a stream, choosing each chunk's iVector as
    /// Kaldi's `DecodableNnetSimpleLooped` does: the row of the chunk's last input frame
    /// (`(k+1)·w + right context − 1`), the last row past the end.
    pub fn compute(&self, feats: &Matrix, ivector: IvectorSource<'_>) -> Result<Matrix> {
        ivector.check_given(self.needs_ivector())?;
        let mut s = self.stream();
        s.accept_frames(feats)?;
        s.input_finished();
        loop {
            if self.needs_ivector() {
                let row = looped_ivector(ivector, s.next_chunk_last_input_frame())?;
                s.set_ivector(&row)?;
            }
            if !s.advance()? {
                break;
            }
        }
        Ok(s.take_output())
    }

    /// [`Self::compute`] for several utterances; with several threads they run in parallel,
    /// one stream per thread with single-threaded GEMMs. On error, the index of the
    /// utterance it concerns comes with it.
    pub fn compute_many(
        &self,
        utts: &[Utterance<'_>],
    ) -> std::result::Result<Vec<Matrix>, (usize, Error)> {
        if self.plan.nnet.is_recurrent() && utts.len() > 1 {
            let mut outs = Vec::with_capacity(utts.len());
            for (b, group) in utts.chunks(RECURRENT_STREAMS).enumerate() {
                let first = b * RECURRENT_STREAMS;
                let l = self.batch(group.len()).map_err(|e| (first, e))?;
                outs.extend(
                    self.compute_batch(&l, group)
                        .map_err(|(u, e)| (first + u, e))?,
                );
            }
            return Ok(outs);
        }
        let run = |(u, utt): (usize, &Utterance<'_>)| {
            self.compute(utt.feats, utt.ivector).map_err(|e| (u, e))
        };
        if utts.len() > 1 && rayon::current_num_threads() > 1 {
            use rayon::prelude::*;
            let saved = crate::matrix::num_threads();
            crate::matrix::set_num_threads(1);
            // The first utterance runs alone: a weight's first products take another GEMM
            // path than later ones (`WeightMatrix`), so which come first must not depend on
            // thread timing (as in `ChunkComputer::compute_many`).
            let first = run((0, &utts[0]));
            let rest: std::result::Result<Vec<Matrix>, (usize, Error)> = utts[1..]
                .par_iter()
                .enumerate()
                .map(|(u, utt)| run((u + 1, utt)))
                .collect();
            crate::matrix::set_num_threads(saved);
            let mut all = vec![first?];
            all.extend(rest?);
            Ok(all)
        } else {
            utts.iter().enumerate().map(run).collect()
        }
    }
}

impl LoopedDecoder {
    /// [`Self::compute_many`] handing each output to `f` in order; on one thread, each as
    /// soon as its utterance is computed (and dropped before the next one is), the same
    /// values. An error of `f` stops the computation and comes back with the index.
    pub fn compute_each(
        &self,
        utts: &[Utterance<'_>],
        mut f: impl FnMut(usize, &mut Matrix) -> Result<()>,
    ) -> std::result::Result<(), (usize, Error)> {
        let together =
            utts.len() > 1 && (self.plan.nnet.is_recurrent() || rayon::current_num_threads() > 1);
        if together {
            for (u, mut out) in self.compute_many(utts)?.into_iter().enumerate() {
                f(u, &mut out).map_err(|e| (u, e))?;
            }
            return Ok(());
        }
        for (u, utt) in utts.iter().enumerate() {
            let mut out = self.compute(utt.feats, utt.ivector).map_err(|e| (u, e))?;
            f(u, &mut out).map_err(|e| (u, e))?;
        }
        Ok(())
    }

    /// The looped computation of `n` streams, compiled once (on the plan's network, shared,
    /// not copied).
    fn batch(&self, n: usize) -> Result<Arc<LoopedComputation>> {
        if let Some(l) = self.batches.lock().ok().and_then(|m| m.get(&n).cloned()) {
            return Ok(l);
        }
        let l = Arc::new(self.plan.compile(n)?);
        if let Ok(mut m) = self.batches.lock() {
            m.insert(n, l.clone());
        }
        Ok(l)
    }

    /// Whole utterances as the streams n = 0.. of one looped computation of
    /// `utts.len()` streams, chunk by chunk until the longest is done (a finished stream
    /// repeats its last frame, and its outputs past its end are dropped). Each stream's
    /// outputs are those of [`Self::compute`] on it alone (up to float rounding).
    fn compute_batch(
        &self,
        l: &LoopedComputation,
        utts: &[Utterance<'_>],
    ) -> std::result::Result<Vec<Matrix>, (usize, Error)> {
        let f = l.frame_subsampling_factor.max(1) as usize;
        let w = i64::from(l.chunk_size);
        let mut outs: Vec<Vec<f32>> = vec![Vec::new(); utts.len()];
        let mut emitted = vec![0usize; utts.len()];
        let mut totals = Vec::with_capacity(utts.len());
        for (u, utt) in utts.iter().enumerate() {
            Error::check_dim(
                "features vs network input",
                self.input_dim,
                utt.feats.num_cols(),
            )
            .map_err(|e| (u, e))?;
            totals.push(utt.feats.num_rows().div_ceil(f));
        }
        let mut carried: Vec<Matrix> = Vec::new();
        let mut k = 0i64;
        while emitted.iter().zip(&totals).any(|(e, t)| e < t) {
            let (p, shift) = program_of(l, k);
            let last_in = (k + 1) * w + i64::from(self.context.right.max(0)) - 1;
            let ivectors: Vec<Vec<f32>> = if self.needs_ivector() {
                utts.iter()
                    .enumerate()
                    .map(|(u, utt)| looped_ivector(utt.ivector, last_in).map_err(|e| (u, e)))
                    .collect::<std::result::Result<_, _>>()?
            } else {
                Vec::new()
            };
            let mut computer = NnetComputer::new(&p.computation, &l.nnet, None);
            for (spec, carry) in p.request.inputs.iter().zip(&p.carried_in) {
                let m = if let Some(i) = carry {
                    match carried.get_mut(*i) {
                        Some(m) => std::mem::take(m),
                        None => {
                            return Err((
                                0,
                                Error::Compute(
                                    "looped batch: internal error: carried value missing".into(),
                                ),
                            ))
                        }
                    }
                } else if spec.name == "ivector" {
                    let mut data = Vec::with_capacity(spec.indexes.len() * self.ivector_dim);
                    for i in &spec.indexes {
                        match ivectors.get(i.n as usize) {
                            Some(v) => data.extend_from_slice(v),
                            None => data.resize(data.len() + self.ivector_dim, 0.0),
                        }
                    }
                    Matrix::from_vec(spec.indexes.len(), self.ivector_dim, data)
                } else if spec.name == "input" {
                    let mut m = Matrix::zeros(spec.indexes.len(), self.input_dim);
                    for (r, i) in spec.indexes.iter().enumerate() {
                        if let Some(utt) = utts.get(i.n as usize) {
                            let last = utt.feats.num_rows() as i64 - 1;
                            let t = (i64::from(i.t) + shift).clamp(0, last.max(0)) as usize;
                            m.view_mut().copy_row_from(r, utt.feats.view(), t);
                        }
                    }
                    m
                } else {
                    return Err((
                        0,
                        Error::Compute(format!(
                            "looped batch: the network's input '{}' is neither 'input' nor 'ivector'",
                            spec.name
                        )),
                    ));
                };
                computer.accept_input(&spec.name, m).map_err(|e| (0, e))?;
            }
            computer.run_forward().map_err(|e| (0, e))?;
            let out = computer.take_output(&l.output_node).map_err(|e| (0, e))?;
            carried = p
                .carried_out
                .iter()
                .map(|name| computer.take_output(name))
                .collect::<Result<_>>()
                .map_err(|e| (0, e))?;
            let spec = &p.request.outputs[0];
            for (r, i) in spec.indexes.iter().enumerate() {
                let n = i.n as usize;
                let sub = ((i64::from(i.t) + shift) / f as i64) as usize;
                if n < utts.len() && sub == emitted[n] && sub < totals[n] {
                    outs[n].extend_from_slice(&out.row_to_vec(r));
                    emitted[n] += 1;
                }
            }
            k += 1;
        }
        Ok(outs
            .into_iter()
            .map(|data| {
                let mut m = Matrix::from_vec(data.len() / self.out_dim.max(1), self.out_dim, data);
                if let Some(lp) = &self.log_priors {
                    m.view_mut().add_vec_to_rows(-1.0, lp, 1.0);
                }
                m
            })
            .collect())
    }
}

/// The program of chunk k of `l` and the shift of its t against its request.
fn program_of(l: &LoopedComputation, k: i64) -> (&ChunkProgram, i64) {
    if k == 0 {
        (&l.first, 0)
    } else {
        (&l.steady, (k - 1) * i64::from(l.chunk_size))
    }
}

/// One stream through a [`LoopedDecoder`]: [`Self::accept_frames`], [`Self::set_ivector`],
/// [`Self::advance`] (or [`Self::run_ready`]) and [`Self::take_output`], then
/// [`Self::input_finished`] to flush the last frames.
pub struct LoopedStream<'a> {
    dec: &'a LoopedDecoder,
    /// The decoder's one-stream computation, once the first chunk has asked for it.
    looped: Option<Arc<LoopedComputation>>,
    /// Input frames from `first_kept` on, row-major.
    frames: Vec<f32>,
    first_kept: usize,
    num_frames: usize,
    finished: bool,
    ivector: Option<Vec<f32>>,
    /// The next chunk to compute.
    chunk: i64,
    /// The previous chunk's values that the next one reads.
    carried: Vec<Matrix>,
    /// Output rows computed and not yet taken, row-major.
    ready: Vec<f32>,
    /// Output frames (subsampled) computed so far.
    emitted: usize,
}

impl LoopedStream<'_> {
    /// Appends input frames (rows of input-dim features).
    pub fn accept_frames(&mut self, feats: &Matrix) -> Result<()> {
        if self.finished {
            return Err(Error::Compute(
                "looped stream: frames given after input_finished".into(),
            ));
        }
        Error::check_dim(
            "looped stream: frames vs network input",
            self.dec.input_dim,
            feats.num_cols(),
        )?;
        for r in 0..feats.num_rows() {
            self.frames.extend_from_slice(&feats.row_to_vec(r));
        }
        self.num_frames += feats.num_rows();
        Ok(())
    }

    /// Sets the iVector used by the chunks computed from now on.
    pub fn set_ivector(&mut self, ivector: &[f32]) -> Result<()> {
        Error::check_dim(
            "looped stream: iVector vs network 'ivector' input",
            self.dec.ivector_dim,
            ivector.len(),
        )?;
        self.ivector = Some(ivector.to_vec());
        Ok(())
    }

    /// No more frames will come: the last chunks may now run, with the last frame repeated.
    pub fn input_finished(&mut self) {
        self.finished = true;
        // Every output row is known now: one allocation for them, not a doubling chain.
        let rows = self.total_outputs().saturating_sub(self.emitted);
        self.ready.reserve(rows * self.dec.out_dim);
    }

    /// Input frames accepted so far.
    pub fn num_frames(&self) -> usize {
        self.num_frames
    }

    /// Kaldi's last input frame of the next chunk, `(k+1)·w + right context − 1`, which picks
    /// the chunk's iVector in [`LoopedDecoder::compute`].
    pub fn next_chunk_last_input_frame(&self) -> i64 {
        (self.chunk + 1) * i64::from(self.dec.plan.chunk_size)
            + i64::from(self.dec.context.right.max(0))
            - 1
    }

    /// Output frames (subsampled) the whole input has, once it is finished.
    fn total_outputs(&self) -> usize {
        let f = self.dec.plan.frame_subsampling_factor.max(1) as usize;
        self.num_frames.div_ceil(f)
    }

    /// The one-stream computation, compiled by the decoder when first needed.
    fn computation(&mut self) -> Result<Arc<LoopedComputation>> {
        if let Some(l) = &self.looped {
            return Ok(Arc::clone(l));
        }
        let l = self.dec.batch(1)?;
        self.looped = Some(Arc::clone(&l));
        Ok(l)
    }

    /// The input t range that chunk k of `l` reads.
    fn input_span(l: &LoopedComputation, k: i64) -> Option<(i64, i64)> {
        let (p, shift) = program_of(l, k);
        let spec = p.request.inputs.iter().find(|s| s.name == "input")?;
        let lo = spec.indexes.iter().map(|i| i.t).min()?;
        let hi = spec.indexes.iter().map(|i| i.t).max()?;
        Some((i64::from(lo) + shift, i64::from(hi) + shift))
    }

    /// Runs the next chunk if its input is there (or the input is finished and outputs are
    /// still missing); returns whether it ran.
    pub fn advance(&mut self) -> Result<bool> {
        if self.finished && (self.emitted >= self.total_outputs() || self.num_frames == 0) {
            return Ok(false);
        }
        let l = self.computation()?;
        // Ready when the chunk's input is there, and its last output frame too (so that no
        // output past the end of a stream that then finishes is ever given out).
        if !self.finished {
            let last_out = (self.chunk + 1) * i64::from(self.dec.plan.chunk_size) - 1;
            let hi = Self::input_span(&l, self.chunk).map_or(last_out, |(_, hi)| hi.max(last_out));
            if hi >= self.num_frames as i64 {
                return Ok(false);
            }
        }
        let dec: &LoopedDecoder = self.dec;
        let dim = dec.input_dim;
        let (p, shift) = program_of(&l, self.chunk);
        let mut computer = NnetComputer::new(&p.computation, &l.nnet, None);
        let mut carried = std::mem::take(&mut self.carried);
        for (spec, carry) in p.request.inputs.iter().zip(&p.carried_in) {
            let m = if let Some(i) = carry {
                if *i >= carried.len() {
                    return Err(Error::Compute(
                        "looped stream: internal error: carried value missing".into(),
                    ));
                }
                std::mem::take(&mut carried[*i])
            } else if spec.name == "ivector" {
                let iv = self.ivector.as_ref().ok_or_else(|| {
                    Error::Compute(
                        "looped stream: the network needs an iVector (set_ivector)".into(),
                    )
                })?;
                let mut data = Vec::with_capacity(iv.len() * spec.indexes.len());
                for _ in &spec.indexes {
                    data.extend_from_slice(iv);
                }
                Matrix::from_vec(spec.indexes.len(), iv.len(), data)
            } else if spec.name == "input" {
                let last = self.num_frames as i64 - 1;
                let mut data = Vec::with_capacity(dim * spec.indexes.len());
                for i in &spec.indexes {
                    let t = (i64::from(i.t) + shift).clamp(0, last.max(0)) as usize;
                    let r = t.checked_sub(self.first_kept).ok_or_else(|| {
                        Error::Compute(format!(
                            "looped stream: internal error: frame {t} was dropped"
                        ))
                    })?;
                    data.extend_from_slice(&self.frames[r * dim..(r + 1) * dim]);
                }
                Matrix::from_vec(spec.indexes.len(), dim, data)
            } else {
                return Err(Error::Compute(format!(
                    "looped stream: the network's input '{}' is neither 'input' nor 'ivector'",
                    spec.name
                )));
            };
            computer.accept_input(&spec.name, m)?;
        }
        computer.run_forward()?;
        let mut out = computer.take_output(&l.output_node)?;
        self.carried = p
            .carried_out
            .iter()
            .map(|name| computer.take_output(name))
            .collect::<Result<_>>()?;
        drop(computer);
        if let Some(lp) = &self.dec.log_priors {
            out.view_mut().add_vec_to_rows(-1.0, lp, 1.0);
        }
        let keep = if self.finished {
            self.total_outputs()
                .saturating_sub(self.emitted)
                .min(out.num_rows())
        } else {
            out.num_rows()
        };
        self.ready
            .extend_from_slice(&out.view().rows_range(0, keep).to_vec());
        // The chunk's output matrix goes back to this thread's pool for the next chunk.
        crate::run::computer::recycle(out);
        self.emitted += keep;
        self.chunk += 1;
        // Frames no later chunk reads are dropped (frame 0 stays while t < 0 can be read).
        if let Some((lo, _)) = Self::input_span(&l, self.chunk) {
            let keep_from = (lo.max(0) as usize).min(self.num_frames.saturating_sub(1));
            if keep_from > self.first_kept {
                self.frames.drain(..(keep_from - self.first_kept) * dim);
                self.first_kept = keep_from;
            }
        }
        Ok(true)
    }

    /// Runs every chunk whose input is there; returns how many ran.
    pub fn run_ready(&mut self) -> Result<usize> {
        let mut n = 0;
        while self.advance()? {
            n += 1;
        }
        Ok(n)
    }

    /// The output rows computed since the last call (output-dim columns).
    pub fn take_output(&mut self) -> Matrix {
        let d = self.dec.out_dim;
        let rows = self.ready.len().checked_div(d).unwrap_or(0);
        Matrix::from_vec(rows, d, std::mem::take(&mut self.ready))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::seeded_rng;

    /// Several utterances of a recurrent network run as the streams of one computation
    /// compiled on the decoder's own network (shared, not copied), each with the outputs
    /// it has alone.
    #[test]
    fn stream_batches_share_the_network() {
        let nnet = Nnet::from_config_text(
            "input-node name=input dim=5
             component name=a type=NaturalGradientAffineComponent input-dim=9 output-dim=4
             component-node name=a component=a input=Append(input, IfDefined(Offset(h, -1)))
             component name=h type=TanhComponent dim=4
             component-node name=h component=h input=a
             component name=o type=AffineComponent input-dim=4 output-dim=3
             component-node name=o component=o input=h
             output-node name=output input=o",
            "<rnn>",
            &mut seeded_rng(5),
        )
        .expect("config");
        let opts = NnetSimpleComputationOptions {
            frames_per_chunk: 8,
            ..Default::default()
        };
        let dec = LoopedDecoder::new(nnet, &opts, "output", None).expect("looped");
        let mut rng = seeded_rng(6);
        let feats: Vec<Matrix> = [19, 7, 30]
            .iter()
            .map(|&t| crate::testing::random_matrix(t, 5, &mut rng))
            .collect();
        let utts: Vec<Utterance<'_>> = feats
            .iter()
            .map(|f| Utterance {
                feats: f,
                ivector: IvectorSource::None,
            })
            .collect();
        let outs = dec.compute_many(&utts).expect("batch");
        let batch = dec.batch(3).expect("compiled");
        assert!(Arc::ptr_eq(&batch.nnet, &dec.plan.nnet));
        for (f, out) in feats.iter().zip(&outs) {
            let alone = dec.compute(f, IvectorSource::None).expect("alone");
            assert_eq!((alone.num_rows(), alone.num_cols()), (out.num_rows(), 3));
            for r in 0..out.num_rows() {
                for (a, b) in alone.row_to_vec(r).iter().zip(out.row_to_vec(r)) {
                    assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
                }
            }
        }
    }
}
