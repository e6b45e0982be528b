//! Acoustic models (`final.mdl`: a transition model, the network, its context and the priors;
//! Kaldi's `AmNnetSimple`) and the tools over them: `compnet am-init`, `am-copy`, `am-info`,
//! `am-adjust-priors`, `am-train-transitions` and `ali-to-pdf` (Kaldi's `nnet3-am-init`,
//! `nnet3-am-copy`, `nnet3-am-info`, `nnet3-am-adjust-priors`, `nnet3-am-train-transitions`,
//! `ali-to-pdf`), written byte for byte as Kaldi writes them.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::compile::context::nnet_context;
use crate::error::{Error, Result};
use crate::hmm::tree::ContextDependency;
use crate::hmm::{kaldi_sum, sum_f64, MleConfig, Topology, TransitionModel};
use crate::io::table::{read_object, SequentialTableReader, TableWriter};
use crate::io::{TokenReader, TokenWriter};
use crate::log::{fmt_g, log, warn};
use crate::matrix::Vector;
use crate::nnet::Nnet;

/// A `final.mdl`: transition model, network and priors.
pub struct AmNnet {
    pub trans_model: TransitionModel,
    pub nnet: Nnet,
    /// Empty, or one prior per pdf.
    pub priors: Vec<f32>,
}

impl AmNnet {
    /// Reads a `final.mdl` (`-` = stdin, or any rxfilename).
    pub fn read_file(rxfilename: &str) -> Result<AmNnet> {
        let (bytes, start, name) = crate::io::table::read_rxfilename(rxfilename)?;
        let bytes = &bytes[start..];
        let mut r = TokenReader::detect(bytes, name.clone())?;
        let trans_model = TransitionModel::read(&mut r)?;
        let read = Nnet::read_model(bytes, &name)?;
        let am = read.am.ok_or_else(|| {
            Error::format(&name, 0, "an acoustic model (final.mdl)", "a raw network")
        })?;
        check_simple(&read.nnet, &name)?;
        Ok(AmNnet {
            trans_model,
            nnet: read.nnet,
            priors: am.priors.into_vec(),
        })
    }

    /// The model as Kaldi writes it (context recomputed from the network).
    pub fn to_bytes(&self, binary: bool) -> Result<Vec<u8>> {
        let ctx = nnet_context(&self.nnet)?;
        let mut w = TokenWriter::new(binary);
        w.binary_header();
        self.trans_model.write(&mut w);
        self.nnet.write_nnet_body(&mut w);
        w.token("<LeftContext>");
        w.i32(ctx.left);
        w.token("<RightContext>");
        w.i32(ctx.right);
        w.token("<Priors>");
        w.vector(&self.priors);
        Ok(w.into_bytes())
    }

    /// Writes the model to a wxfilename (a file atomically, `-`, or `| command`).
    pub fn write_file(&self, wxfilename: &str, binary: bool) -> Result<()> {
        crate::io::table::write_bytes(wxfilename, &self.to_bytes(binary)?)
    }

    /// Number of pdfs: the dimension of the output node `output`.
    pub fn num_pdfs(&self) -> i32 {
        node_dim(&self.nnet, "output", false)
    }

    /// Sets the priors; they must be empty or match the output dimension.
    pub fn set_priors(&mut self, priors: Vec<f32>) -> Result<()> {
        if !priors.is_empty() && priors.len() as i32 != self.num_pdfs() {
            return Err(Error::Compute(format!(
                "Dimension mismatch when setting priors: priors have dim {}, model expects {}",
                priors.len(),
                self.num_pdfs()
            )));
        }
        self.priors = priors;
        Ok(())
    }

    /// Replaces the network (Kaldi's `SetNnet`): priors of another dimension are dropped.
    pub fn set_nnet(&mut self, nnet: Nnet, program: &str) {
        self.nnet = nnet;
        let dim = self.num_pdfs();
        if !self.priors.is_empty() && self.priors.len() as i32 != dim {
            warn(
                program,
                &format!(
                    "Removing priors since there is a dimension mismatch after changing the \
                     nnet: {} vs. {dim}",
                    self.priors.len()
                ),
            );
            self.priors.clear();
        }
    }
}

/// Kaldi's acoustic models hold "simple" networks only: an input `input`, an output `output`.
fn check_simple(nnet: &Nnet, file: &str) -> Result<()> {
    nnet_context(nnet).map(|_| ()).map_err(|e| {
        Error::Compute(format!(
            "{file}: an acoustic model needs a simple network (input node 'input', output \
             node 'output' with a context): {e}"
        ))
    })
}

/// Dimension of node `name` if it is an input (`input`) or output node, else -1.
fn node_dim(nnet: &Nnet, name: &str, input: bool) -> i32 {
    match nnet.node_index(name) {
        Some(i) if (input && nnet.is_input_node(i)) || (!input && nnet.is_output_node(i)) => {
            nnet.node_dim(i) as i32
        }
        _ => -1,
    }
}

command_args! {
    /// Options of `compnet am-init`.
    #[usage("compnet am-init [options] <tree-in> <topology-in> <input-raw-nnet> <output-am-nnet>\n       compnet am-init [options] <trans-model-in> <input-raw-nnet> <output-am-nnet>")]
    #[example("compnet am-init tree topo 0.raw 0.mdl")]
    pub struct InitArgs {
        /// Write the model in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// The inputs, then the output.
        pub args: Vec<String>,
    }
}

/// Runs `am-init`.
pub fn run_init(a: InitArgs) -> Result<i32> {
    const P: &str = "compnet am-init";
    let (trans_model, raw, out) = match a.args.as_slice() {
        [tree, topo, raw, out] => {
            let cd = ContextDependency::read_file(tree)?;
            let (bytes, start, name) = crate::io::table::read_rxfilename(topo)?;
            let mut r = TokenReader::detect(&bytes[start..], name)?;
            let topo = Topology::read(&mut r)?;
            let tm = cd
                .transition_model(topo)
                .map_err(|m| Error::Compute(format!("{tree}: {m}")))?;
            (tm, raw, out)
        }
        [tm, raw, out] => (TransitionModel::read_file(tm)?, raw, out),
        _ => return Err(Error::Usage(format!("usage: {}", InitArgs::USAGE))),
    };
    let nnet = Nnet::read_model_file(raw)?.nnet;
    check_simple(&nnet, raw)?;
    let am = AmNnet {
        trans_model,
        nnet,
        priors: Vec::new(),
    };
    am.write_file(out, a.binary)?;
    log(
        P,
        &format!("Initialized am-nnet (neural net acoustic model) and wrote to {out}"),
    );
    Ok(0)
}

command_args! {
    /// Options of `compnet am-copy`.
    #[usage("compnet am-copy [options] <nnet-in> <nnet-out>")]
    #[example("compnet am-copy --binary=false 1.mdl text.mdl\n      compnet am-copy --raw=true 1.mdl 1.raw")]
    pub struct CopyArgs {
        /// Write the output in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Write only the raw network (no transition model, no priors).
        #[arg(long, kaldi_bool = "false")]
        pub raw: bool,
        /// Replace the network inside the model by this raw network (rxfilename); done before
        /// the learning rate is changed.
        #[arg(long = "set-raw-nnet", default_value = "")]
        pub set_raw_nnet: String,
        /// Convert every (natural-gradient) repeated-affine component, inside composite
        /// components too, to the equivalent block-affine component (after --nnet-config,
        /// before --learning-rate).
        #[arg(long = "convert-repeated-to-block", kaldi_bool = "false")]
        pub convert_repeated_to_block: bool,
        /// Apply this nnet3 config to the network (add or replace components and nodes).
        #[arg(long = "nnet-config", default_value = "")]
        pub nnet_config: String,
        /// A file of edit directives, applied after --nnet-config and --learning-rate.
        #[arg(long = "edits-config", default_value = "")]
        pub edits_config: String,
        /// Edit directives inline (`;` separates lines), applied after --edits-config.
        #[arg(long, default_value = "")]
        pub edits: String,
        /// If >= 0, sets the learning rate of every updatable component.
        #[arg(long = "learning-rate", default_value_t = -1.0, allow_negative_numbers = true)]
        pub learning_rate: f32,
        /// Multiplies the parameters by this factor.
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        pub scale: f32,
        /// BatchNorm and dropout in test mode (compnet does not collapse components as Kaldi's
        /// CollapseModel does; the model computes the same outputs).
        #[arg(long = "prepare-for-test", kaldi_bool = "false")]
        pub prepare_for_test: bool,
        /// `<nnet-in> <nnet-out>`.
        pub args: Vec<String>,
    }
}

/// Runs `am-copy`.
pub fn run_copy(a: CopyArgs) -> Result<i32> {
    const P: &str = "compnet am-copy";
    let [input, output] = CopyArgs::positionals(&a.args)?;
    if !a.learning_rate.is_finite() || !a.scale.is_finite() {
        return Err(Error::Usage(
            "nnet3-am-copy: --learning-rate and --scale must be finite numbers".into(),
        ));
    }
    let mut am = AmNnet::read_file(input)?;
    if !a.set_raw_nnet.is_empty() {
        let nnet = Nnet::read_model_file(&a.set_raw_nnet)?.nnet;
        check_simple(&nnet, &a.set_raw_nnet)?;
        am.set_nnet(nnet, P);
    }
    if !a.nnet_config.is_empty() {
        let text = crate::cli::init::read_config_text(&a.nnet_config)?;
        let mut rng = crate::random::seeded_rng(0);
        am.nnet.apply_config_text(&text, &a.nnet_config, &mut rng)?;
        check_simple(&am.nnet, &a.nnet_config)?;
    }
    if a.convert_repeated_to_block {
        crate::nnet::component::block_affine::convert_repeated_to_block(&mut am.nnet.components);
    }
    if a.learning_rate >= 0.0 {
        am.nnet.set_learning_rate(a.learning_rate);
    }
    crate::cli::copy::apply_edit_options(&mut am.nnet, &a.edits_config, &a.edits, P)?;
    am.nnet.scale_all(a.scale);
    if a.prepare_for_test {
        am.nnet.set_test_modes(true, true, 0);
    }
    if a.raw {
        am.nnet.write_model_file(output, a.binary)?;
        log(
            P,
            &format!("Copied neural net from {input} to raw format as {output}"),
        );
    } else {
        am.write_file(output, a.binary)?;
        log(P, &format!("Copied neural net from {input} to {output}"));
    }
    Ok(0)
}

command_args! {
    /// Options of `compnet am-info`.
    #[usage("compnet am-info [options] <nnet>")]
    #[example("compnet am-info 0.mdl")]
    pub struct InfoArgs {
        /// `<nnet>`.
        pub args: Vec<String>,
    }
}

/// The text of `nnet3-am-info`.
pub fn am_info_text(am: &AmNnet) -> Result<String> {
    let mut s = format!(
        "input-dim: {}\nivector-dim: {}\nnum-pdfs: {}\nprior-dimension: {}\n",
        node_dim(&am.nnet, "input", true),
        node_dim(&am.nnet, "ivector", true),
        am.num_pdfs(),
        am.priors.len()
    );
    if !am.priors.is_empty() {
        let min = am.priors.iter().copied().fold(f32::INFINITY, f32::min);
        let max = am.priors.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        s += &format!(
            "prior-sum: {}\nprior-min: {}\nprior-max: {}\n",
            fmt_g(kaldi_sum(&am.priors) as f64),
            fmt_g(min as f64),
            fmt_g(max as f64)
        );
    }
    s += "# Nnet info follows.\n";
    s += &crate::cli::info::info_text(&am.nnet)?;
    Ok(s)
}

/// Runs `am-info`.
pub fn run_info(a: InfoArgs) -> Result<i32> {
    let [model] = InfoArgs::positionals(&a.args)?;
    let text = am_info_text(&AmNnet::read_file(model)?)?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("<stdout>", e))?;
    Ok(0)
}

command_args! {
    /// Options of `compnet am-adjust-priors`.
    #[usage("compnet am-adjust-priors [options] <nnet-in> <summed-posterior-vector-in> <nnet-out>")]
    #[example("compnet am-adjust-priors final.mdl counts.vec final.mdl")]
    pub struct AdjustPriorsArgs {
        /// Write the model in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Accepted as Kaldi's binary accepts it (which does not use it either): the posteriors
        /// are only renormalised.
        #[arg(long = "prior-floor", default_value_t = 1e-15)]
        pub prior_floor: f32,
        /// `<nnet-in> <summed-posterior-vector-in> <nnet-out>`.
        pub args: Vec<String>,
    }
}

/// Kaldi's one-sided K-L divergence of the priors, in its precisions.
fn kl_divergence(p: &[f32], q: &[f32]) -> f32 {
    let (sp, sq) = (kaldi_sum(p), kaldi_sum(q));
    let mut ans = 0.0f64;
    for (&a, &b) in p.iter().zip(q) {
        let (pp, qp) = (a / sp, b / sq);
        ans += (pp * (pp / qp).ln()) as f64;
    }
    ans as f32
}

/// Runs `am-adjust-priors`.
pub fn run_adjust_priors(a: AdjustPriorsArgs) -> Result<i32> {
    const P: &str = "compnet am-adjust-priors";
    let [input, vec_in, output] = AdjustPriorsArgs::positionals(&a.args)?;
    let mut am = AmNnet::read_file(input)?;
    let mut post = read_object::<Vector>(vec_in)?.into_vec();
    let sum = kaldi_sum(&post);
    if sum.is_nan() || sum <= 0.0 {
        return Err(Error::Compute(format!(
            "{vec_in}: the summed posteriors must have a positive sum (got {})",
            fmt_g(sum as f64)
        )));
    }
    // Kaldi's `Scale(1.0 / v.Sum())` inline: the reciprocal of the sum before it is rounded
    // to float (measured against Kaldi's output).
    let scale = (1.0 / sum_f64(&post)) as f32;
    post.iter_mut().for_each(|x| *x *= scale);
    let old = am.priors.clone();
    if old.is_empty() {
        log(P, "Model did not previously have priors attached.");
    } else if old.len() == post.len() {
        let mut idx = 0;
        let mut best = f32::NEG_INFINITY;
        for (i, (&o, &n)) in old.iter().zip(&post).enumerate() {
            let d = (n - o).abs();
            if d > best {
                best = d;
                idx = i;
            }
        }
        log(
            P,
            &format!(
                "Adjusting priors: largest absolute difference was for pdf {idx}, {} -> {}",
                fmt_g(old[idx] as f64),
                fmt_g(post[idx] as f64)
            ),
        );
        log(
            P,
            &format!(
                "Adjusting priors: K-L divergence from old to new is {}",
                fmt_g(kl_divergence(&old, &post) as f64)
            ),
        );
    }
    am.set_priors(post)?;
    am.write_file(output, a.binary)?;
    log(
        P,
        &format!("Modified priors of neural network model and wrote it to {output}"),
    );
    Ok(0)
}

command_args! {
    /// Options of `compnet am-train-transitions`.
    #[usage("compnet am-train-transitions [options] <nnet-in> <alignments-rspecifier> <nnet-out>")]
    #[example("compnet am-train-transitions 1.mdl \"ark:gunzip -c ali.*.gz|\" 2.mdl")]
    pub struct TrainTransitionsArgs {
        /// Write the model in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// Also set the priors of the model from the alignments' pdf counts.
        #[arg(long = "set-priors", kaldi_bool = "true")]
        pub set_priors: bool,
        /// Floor of the priors (then renormalised).
        #[arg(long = "prior-floor", default_value_t = 5e-6)]
        pub prior_floor: f64,
        /// Floor of the transition probabilities.
        #[arg(long = "transition-floor", default_value_t = 0.01)]
        pub transition_floor: f32,
        /// Least count for the transitions of a state to be re-estimated.
        #[arg(long = "transition-min-count", default_value_t = 5.0)]
        pub transition_min_count: f32,
        /// Share the transition probabilities of all states with the same pdf.
        #[arg(long = "share-for-pdfs", kaldi_bool = "false")]
        pub share_for_pdfs: bool,
        /// `<nnet-in> <alignments-rspecifier> <nnet-out>`.
        pub args: Vec<String>,
    }
}

/// Runs `am-train-transitions`.
pub fn run_train_transitions(a: TrainTransitionsArgs) -> Result<i32> {
    const P: &str = "compnet am-train-transitions";
    let [input, ali, output] = TrainTransitionsArgs::positionals(&a.args)?;
    if !(a.prior_floor > 0.0 && a.prior_floor < 1.0) {
        return Err(Error::Compute(format!(
            "--prior-floor must be in (0, 1) (got {})",
            a.prior_floor
        )));
    }
    let mut am = AmNnet::read_file(input)?;
    let tm = &mut am.trans_model;
    let mut stats = tm.init_stats();
    let mut num_done = 0usize;
    for item in SequentialTableReader::<Vec<i32>>::open(ali)? {
        let (key, tids) = item?;
        for &tid in &tids {
            if !tm.is_valid_transition_id(tid) {
                return Err(crate::hmm::bad_transition_id(
                    &format!("{ali}, utterance {key}"),
                    tid,
                    tm,
                ));
            }
            stats[tid as usize] += 1.0;
        }
        num_done += 1;
    }
    log(
        P,
        &format!("Accumulated transition stats from {num_done} utterances."),
    );
    let cfg = MleConfig {
        floor: a.transition_floor,
        min_count: a.transition_min_count,
        share_for_pdfs: a.share_for_pdfs,
    };
    let rep = tm.mle_update(&stats, &cfg);
    let per_frame = fmt_g((rep.objf_impr / rep.count) as f64);
    if a.share_for_pdfs {
        log(
            P,
            &format!(
                "Objf change is {per_frame} per frame over {} frames; {} probabilities floored, \
                 {} pdf-ids skipped due to insuffient data.",
                fmt_g(rep.count as f64),
                rep.num_floored,
                rep.num_skipped
            ),
        );
    } else {
        log(
            P,
            &format!(
                "TransitionModel::Update, objf change is {per_frame} per frame over {} frames. ",
                fmt_g(rep.count as f64)
            ),
        );
        log(
            P,
            &format!(
                "{} probabilities floored, {} out of {} transition-states skipped due to \
                 insuffient data (it is normal to have some skipped.)",
                rep.num_floored,
                rep.num_skipped,
                tm.num_transition_states()
            ),
        );
    }
    log(
        P,
        &format!(
            "Transition model update: average {per_frame} log-like improvement per frame over {} \
             frames.",
            fmt_g(rep.count as f64)
        ),
    );
    if a.set_priors {
        log(P, "Setting priors of pdfs in the model.");
        let (tm_pdfs, nnet_pdfs) = (am.trans_model.num_pdfs(), am.num_pdfs());
        if tm_pdfs != nnet_pdfs {
            return Err(Error::Compute(format!(
                "{input}: the transition model has {tm_pdfs} pdfs, the network's output \
                 {nnet_pdfs}"
            )));
        }
        let tm = &am.trans_model;
        let mut counts = vec![0.0f32; tm.num_pdfs() as usize];
        for (tid, &c) in stats.iter().enumerate().skip(1) {
            let pdf = tm.transition_id_to_pdf(tid as i32) as usize;
            counts[pdf] = (counts[pdf] as f64 + c) as f32;
        }
        let sum = kaldi_sum(&counts);
        if sum == 0.0 {
            return Err(Error::Compute(format!(
                "{ali}: no frames to set the priors from"
            )));
        }
        let scale = (1.0 / sum as f64) as f32;
        let floor = a.prior_floor as f32;
        counts.iter_mut().for_each(|x| *x = (*x * scale).max(floor));
        let scale = (1.0 / kaldi_sum(&counts) as f64) as f32;
        counts.iter_mut().for_each(|x| *x *= scale);
        am.set_priors(counts)?;
    }
    am.write_file(output, a.binary)?;
    log(
        P,
        &format!("Trained transitions of neural network model and wrote it to {output}"),
    );
    Ok(0)
}

command_args! {
    /// Options of `compnet ali-to-pdf`.
    #[usage("compnet ali-to-pdf [options] <model> <alignments-rspecifier> <pdfs-wspecifier>")]
    #[example("compnet ali-to-pdf 1.mdl ark:1.ali ark,t:-")]
    pub struct AliToPdfArgs {
        /// `<model> <alignments-rspecifier> <pdfs-wspecifier>`.
        pub args: Vec<String>,
    }
}

/// Runs `ali-to-pdf`: each transition-id to its pdf-id (zero-based).
pub fn run_ali_to_pdf(a: AliToPdfArgs) -> Result<i32> {
    let [model, ali, wspec] = AliToPdfArgs::positionals(&a.args)?;
    let tm = TransitionModel::read_file(model)?;
    let reader = SequentialTableReader::<Vec<i32>>::open(ali)?;
    let mut writer = TableWriter::<Vec<i32>>::open(wspec)?;
    let mut num_done = 0usize;
    for item in reader {
        let (key, tids) = item?;
        let mut pdfs = Vec::with_capacity(tids.len());
        for &tid in &tids {
            if !tm.is_valid_transition_id(tid) {
                return Err(crate::hmm::bad_transition_id(
                    &format!("{ali}, utterance {key}"),
                    tid,
                    &tm,
                ));
            }
            pdfs.push(tm.transition_id_to_pdf(tid));
        }
        writer.write(&key, &pdfs)?;
        num_done += 1;
    }
    writer.close()?;
    log(
        "compnet ali-to-pdf",
        &format!("Converted {num_done} alignments to pdf sequences."),
    );
    Ok(0)
}
