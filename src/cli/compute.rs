//! `compnet compute` (Kaldi's `nnet3-compute`): reads the options, the model and the tables,
//! runs `run::chunked::ChunkComputer` on every utterance and writes the output matrices.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::table::{RandomAccessTableReader, SequentialTableReader, TableWriter};
use crate::io::GeneralMatrix;
use crate::matrix::{Matrix, Vector};
use crate::nnet::Nnet;
use crate::run::chunked::{ChunkComputer, IvectorSource, NnetSimpleComputationOptions, Utterance};
use crate::run::looped::{LoopedDecoder, RECURRENT_FRAMES_PER_CHUNK};

/// Utterances are read ahead until they hold this many frames (or [`PENDING_UTTERANCES`]),
/// then computed together: enough for several full chunk batches at any chunk size Kaldi's
/// recipes use, little memory next to the network's activations.
const PENDING_FRAMES: usize = 6000;
const PENDING_UTTERANCES: usize = 64;

/// An utterance's iVector, owned while it waits to be computed.
enum OwnedIvector {
    None,
    Fixed(Vector),
    Online(Matrix),
}

impl OwnedIvector {
    fn source(&self, online_period: i32) -> IvectorSource<'_> {
        match self {
            OwnedIvector::None => IvectorSource::None,
            OwnedIvector::Fixed(v) => IvectorSource::Fixed(v),
            OwnedIvector::Online(m) => IvectorSource::Online(m, online_period),
        }
    }
}

command_args! {
    /// Options of `compnet compute`.
    #[derive(Clone)]
    #[usage("compnet compute [options] <nnet-in> <features-rspecifier> <matrix-wspecifier>")]
    #[example("compnet compute final.raw scp:feats.scp ark:nnet_prediction.ark")]
    pub struct Args {
        /// Number of output frames (at the subsampled rate × factor) per chunk; rounded up to a
        /// multiple of lcm(frame-subsampling-factor, network modulus). Default 50; with
        /// --looped on a recurrent network 150 (its outputs do not depend on the chunk size,
        /// and larger chunks give the non-recurrent products more rows).
        #[arg(long = "frames-per-chunk")]
        pub frames_per_chunk: Option<i32>,
        /// Extra input frames of left context per chunk (beyond the network's own context).
        #[arg(long = "extra-left-context", default_value_t = 0)]
        pub extra_left_context: i32,
        /// Extra input frames of right context per chunk.
        #[arg(long = "extra-right-context", default_value_t = 0)]
        pub extra_right_context: i32,
        /// Extra left context for the first chunk of an utterance (-1 = --extra-left-context).
        #[arg(long = "extra-left-context-initial", default_value_t = -1, allow_negative_numbers = true)]
        pub extra_left_context_initial: i32,
        /// Extra right context for the last chunk of an utterance (-1 = --extra-right-context).
        #[arg(long = "extra-right-context-final", default_value_t = -1, allow_negative_numbers = true)]
        pub extra_right_context_final: i32,
        /// Output only every n-th frame (chain models use 3).
        #[arg(long = "frame-subsampling-factor", default_value_t = 1)]
        pub frame_subsampling_factor: i32,
        /// Rspecifier of one iVector (a vector) per utterance.
        #[arg(long)]
        pub ivectors: Option<String>,
        /// Rspecifier of the utterance-to-speaker map; with it, --ivectors holds one iVector per
        /// speaker.
        #[arg(long = "utt2spk", default_value = "")]
        pub utt2spk: String,
        /// Rspecifier of online iVectors (a matrix per utterance, one row per period frames).
        #[arg(long = "online-ivectors")]
        pub online_ivectors: Option<String>,
        /// Number of frames per row of the online iVectors.
        #[arg(long = "online-ivector-period", default_value_t = 0)]
        pub online_ivector_period: i32,
        /// Exponentiate the output (log-probabilities → probabilities).
        #[arg(long = "apply-exp", kaldi_bool = "false")]
        pub apply_exp: bool,
        /// Subtract the log priors stored in a final.mdl from the output.
        #[arg(long = "use-priors", kaldi_bool = "false")]
        pub use_priors: bool,
        /// Kaldi's device choice: `yes`, `no`, `optional` (a GPU when usable, else the CPU) or
        /// `wait` (as `yes`). `yes` without a usable GPU (or without the `cuda` build) is an error.
        #[arg(long = "use-gpu", default_value = "no")]
        pub use_gpu: String,
        #[command(flatten)]
        pub cuda: crate::cli::args::CudaOptions,
        /// Which node's output to write (any node; default the network output `output`).
        #[arg(long = "output-node", default_value = "output")]
        pub output_node: String,
        #[command(flatten)]
        pub threads: crate::cli::args::Threads,
        /// Looped computation (a compnet option; Kaldi has looped decoding only in its
        /// decoders): chunks of --frames-per-chunk frames that reuse what earlier chunks
        /// computed, recurrent state included, instead of recomputing their context; only
        /// --extra-left-context-initial of the extra-context options applies. A chunk's new rows
        /// use the iVector of its last input frame (Kaldi's looped decoders), so with
        /// --online-ivectors the outputs differ from the chunked ones; otherwise a
        /// feed-forward network gives the chunked outputs (unless it reads frames that may be
        /// missing: Failover, IfDefined of a later frame, statistics pooling), and a recurrent
        /// one those of a whole-utterance computation.
        #[arg(long = "looped", kaldi_bool = "false")]
        pub looped: bool,
        /// Arithmetic of the affine family's products (a compnet option): `none` (floats) or
        /// `int8`: weights quantized per output row when the model is loaded, activations per
        /// row on the fly, 8-bit products summed in 32-bit integers and scaled back before the
        /// nonlinearity (AVX-512 VNNI or AVX2 where the CPU has them). Every other component
        /// stays in floats.
        #[arg(long = "quantize", default_value = "none")]
        pub quantize: String,
        #[command(flatten)]
        pub optimization: crate::cli::compile::OptimizationArgs,
        /// `<model> <features-rspecifier> <matrix-wspecifier>`.
        pub args: Vec<String>,
    }
}

impl Args {
    /// The chunking options these arguments give.
    pub fn chunk_options(&self) -> NnetSimpleComputationOptions {
        NnetSimpleComputationOptions {
            frames_per_chunk: self.frames_per_chunk.unwrap_or(50),
            extra_left_context: self.extra_left_context,
            extra_right_context: self.extra_right_context,
            extra_left_context_initial: self.extra_left_context_initial,
            extra_right_context_final: self.extra_right_context_final,
            frame_subsampling_factor: self.frame_subsampling_factor,
            optimize: self.optimization.options(),
        }
    }
}

/// Reads `--quantize`: false for `none`, true for `int8`.
pub(crate) fn parse_quantize(value: &str) -> Result<bool> {
    match value {
        "none" => Ok(false),
        "int8" => Ok(true),
        other => Err(Error::Usage(format!(
            "--quantize={other}: expected none or int8"
        ))),
    }
}

/// What computes the utterances: chunked (Kaldi's nnet3-compute) or looped.
enum Engine {
    Chunked(Box<ChunkComputer>),
    Looped(Box<LoopedDecoder>),
}

impl Engine {
    fn needs_ivector(&self) -> bool {
        match self {
            Engine::Chunked(c) => c.needs_ivector(),
            Engine::Looped(l) => l.needs_ivector(),
        }
    }

    /// The utterances' outputs, handed to `f` in order, each as soon as it is complete
    /// (chunked: its buffer reused for a later one; looped: on one thread).
    fn compute_each(
        &mut self,
        utts: &[Utterance<'_>],
        f: impl FnMut(usize, &mut Matrix) -> Result<()>,
    ) -> std::result::Result<(), (usize, Error)> {
        match self {
            Engine::Chunked(c) => c.compute_each(utts, f),
            Engine::Looped(l) => l.compute_each(utts, f),
        }
    }
}

/// Runs the command.
pub fn run(mut a: Args) -> Result<i32> {
    // Kaldi's scripts spell "not given" as an empty string (`--ivectors=`).
    a.ivectors = a.ivectors.filter(|s| !s.is_empty());
    a.online_ivectors = a.online_ivectors.filter(|s| !s.is_empty());
    let [model, feats_rspec, out_wspec] = Args::positionals(&a.args)?;
    crate::cli::args::select_device("nnet3-compute", &a.use_gpu, &a.cuda)?;
    a.threads.apply()?;
    let int8 = parse_quantize(&a.quantize)?;
    let mut read = Nnet::read_model_file(model)?;
    if int8 {
        read.nnet.set_int8_inference(true);
    }
    let mut opts = a.chunk_options();
    if a.looped && a.frames_per_chunk.is_none() && read.nnet.is_recurrent() {
        opts.frames_per_chunk = RECURRENT_FRAMES_PER_CHUNK;
    }
    opts.check()?;
    if a.online_ivectors.is_some() && a.online_ivector_period <= 0 {
        return Err(Error::Usage(
            "--online-ivectors requires --online-ivector-period > 0".into(),
        ));
    }
    if a.ivectors.is_some() && a.online_ivectors.is_some() {
        return Err(Error::Usage(
            "give --ivectors or --online-ivectors, not both".into(),
        ));
    }
    let priors: Option<Vector> = match (a.use_priors, read.am.as_ref()) {
        (false, _) => None,
        (true, None) => {
            return Err(Error::Usage(
                "--use-priors needs a final.mdl with priors (the model has none)".into(),
            ))
        }
        (true, Some(am)) => Some(am.priors.clone()),
    };
    let mut cc = if a.looped {
        Engine::Looped(Box::new(LoopedDecoder::new(
            read.nnet,
            &opts,
            &a.output_node,
            priors.as_ref(),
        )?))
    } else {
        Engine::Chunked(Box::new(ChunkComputer::new(
            read.nnet,
            &opts,
            &a.output_node,
            priors.as_ref(),
        )?))
    };
    if cc.needs_ivector() && a.ivectors.is_none() && a.online_ivectors.is_none() {
        return Err(Error::Usage(
            "the network has an 'ivector' input: give --ivectors or --online-ivectors".into(),
        ));
    }
    let mut feats = SequentialTableReader::<GeneralMatrix>::open(feats_rspec)?;
    let mut writer = TableWriter::<Matrix>::open(out_wspec)?;
    let mut ivectors = match &a.ivectors {
        Some(r) => Some(RandomAccessTableReader::<Vector>::open(r)?),
        None => None,
    };
    let mut utt2spk = match (a.utt2spk.is_empty(), &a.ivectors) {
        (true, _) => None,
        (false, Some(_)) => Some(RandomAccessTableReader::<String>::open(&a.utt2spk)?),
        (false, None) => {
            return Err(Error::Usage(
                "--utt2spk maps utterances to the speakers of --ivectors; give --ivectors too"
                    .into(),
            ))
        }
    };
    let mut online = match &a.online_ivectors {
        Some(r) => Some(RandomAccessTableReader::<GeneralMatrix>::open(r)?),
        None => None,
    };
    use std::io::IsTerminal;
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message("computing");
        Some(b)
    } else {
        None
    };
    let (mut done, mut failed) = (0usize, 0usize);
    // Utterances are computed a few at a time, so that short ones share computations
    // (`ChunkComputer::compute_each`); outputs are written in input order, each as soon as
    // it and those before it are computed.
    let mut pending: Vec<(String, Matrix, OwnedIvector)> = Vec::new();
    let mut pending_frames = 0usize;
    let flush = |pending: &mut Vec<(String, Matrix, OwnedIvector)>,
                 cc: &mut Engine,
                 writer: &mut TableWriter<Matrix>,
                 done: &mut usize|
     -> Result<()> {
        let utts: Vec<Utterance<'_>> = pending
            .iter()
            .map(|(_, m, iv)| Utterance {
                feats: m,
                ivector: iv.source(a.online_ivector_period),
            })
            .collect();
        // A failed write stops the computation and is reported as it is.
        let mut write_error = None;
        let computed = cc.compute_each(&utts, |u, out| {
            let (key, feats, _) = &pending[u];
            crate::log::vlog(1, "compnet compute", || {
                format!(
                    "utterance {key}: {} frames in, {} output rows",
                    feats.num_rows(),
                    out.num_rows()
                )
            });
            if a.apply_exp {
                out.view_mut().apply_exp();
            }
            match writer.write(key, out) {
                Ok(()) => {
                    *done += 1;
                    Ok(())
                }
                Err(e) => {
                    write_error = Some(e);
                    Err(Error::Compute("output not written".into()))
                }
            }
        });
        if let Some(e) = write_error {
            return Err(e);
        }
        computed.map_err(|(u, e)| {
            Error::Compute(format!("{feats_rspec}: utterance {}: {e}", pending[u].0))
        })?;
        if let Some(b) = &bar {
            b.set_message(format!("{done} utterances"));
            b.tick();
        }
        pending.clear();
        Ok(())
    };
    for item in feats.by_ref() {
        let (key, g) = item?;
        let m = g.to_matrix();
        super::warn_non_finite("compute", &key, &m, false);
        let iv = if m.num_rows() == 0 {
            Err(format!("zero-length utterance: {key}"))
        } else if let Some(r) = ivectors.as_mut() {
            // With --utt2spk the iVectors are per speaker.
            let spk = match utt2spk.as_mut() {
                Some(map) => map.get(&key)?.cloned(),
                None => Some(key.clone()),
            };
            match spk {
                None => Err(format!("no speaker for utterance {key} in --utt2spk")),
                Some(spk) => r
                    .get(&spk)?
                    .map(|v| OwnedIvector::Fixed(v.clone()))
                    .ok_or_else(|| format!("no iVector available for utterance {key}")),
            }
        } else if let Some(r) = online.as_mut() {
            r.get(&key)?
                .map(|v| OwnedIvector::Online(v.to_matrix()))
                .ok_or_else(|| format!("no online iVectors for utterance {key}"))
        } else {
            Ok(OwnedIvector::None)
        };
        // Kaldi's nnet3-compute skips such an utterance with a warning and goes on.
        let iv = match iv {
            Ok(iv) => iv,
            Err(why) => {
                eprintln!("compnet compute: warning: {why}");
                failed += 1;
                continue;
            }
        };
        pending_frames += m.num_rows();
        pending.push((key, m, iv));
        if pending_frames >= PENDING_FRAMES || pending.len() >= PENDING_UTTERANCES {
            flush(&mut pending, &mut cc, &mut writer, &mut done)?;
            pending_frames = 0;
        }
    }
    flush(&mut pending, &mut cc, &mut writer, &mut done)?;
    writer.close()?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    eprintln!("compnet compute: done {done} utterances, failed for {failed}");
    Ok(if done == 0 && failed > 0 { 1 } else { 0 })
}
