//! Training on many processes (`compnet fit --parallel=data|average:K` under `mpirun`): the
//! data split, the gradient all-reduce at the step core's reduction point, model averaging,
//! and what only the first process (rank 0) does.
//!
//! - `--parallel=data`: every global minibatch (the groups `--minibatch-size` makes, the same
//!   on every rank) is cut into N contiguous shares, rank r merging share r; each rank runs
//!   the forward and backward pass on its share and the gradients are summed over the ranks
//!   ([`Parallel::reduce`], in buckets of `--parallel-bucket-mb`) before the one update, which
//!   every rank then applies to identical parameters. The learning rate, the frames of
//!   per-minibatch rates and the sequences of the L2 term are those of the global minibatch,
//!   so a command line trains the same model for any N, up to the order of summation.
//! - `--parallel=average:K`: every rank steps on its own share with the learning rate × N
//!   (Kaldi's parallel jobs), and every K minibatches (and before anything is written or
//!   validated) the parameters and the components' statistics are averaged over the ranks;
//!   with plain SGD and K = 1 that is the same training as `data`.
//!
//! The model's statistics (BatchNorm's sums, the nonlinearities' averages) are gathered per
//! rank from its share. Under `data` they are kept so that their sum over the ranks is what
//! one process would hold (every rank starts from 1/N of the loaded statistics; the decay
//! and the additions are linear), and the model that is written or validated carries that
//! sum. BatchNorm normalises each rank's share with the share's own batch statistics (not
//! synchronised), as Horovod and PyTorch's DDP do without SyncBatchNorm.
//!
//! Natural gradient (`--stepper=ng`) preconditions inside the backward pass, before the
//! gradient of a component is formed, so each rank keeps its own preconditioner fed with its
//! own share's rows (Kaldi's parallel jobs do the same); what is summed is the preconditioned,
//! learning-rate-scaled change, and max-change, L2, momentum and the orthonormal constraint
//! then run on the summed change, identical on every rank (the random stream those steps
//! draw from is rank 0's). A checkpoint keeps rank 0's preconditioner.
//!
//! The transport is [`Collective`] (`crate::collective`): MPI's world communicator with the
//! `mpi` cargo feature ([`join`]), one process otherwise. What travels are matrix-library
//! vectors: the parameters laid end to end as one `Vector`, statistics and small figures as
//! `Vector64`s.

pub use crate::collective::{Collective, OneProcess};
use crate::error::{Error, Result};
use crate::kaldi_rand::GlibcRand;
use crate::matrix::{Vector, Vector64};
use crate::nnet::Nnet;
use crate::train::step::GradientReduction;
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// How `compnet fit --parallel` splits the training over the processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ParallelMode {
    /// One process.
    #[default]
    None,
    /// Gradients summed over the ranks every minibatch.
    Data,
    /// Models averaged over the ranks every K minibatches.
    Average(u64),
}

impl ParallelMode {
    /// Parses `--parallel`: `none`, `data` or `average:K`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::Usage(format!(
                "--parallel={s}: expected none, data or average:K (K a whole number of \
                 minibatches >= 1)"
            ))
        };
        Ok(match s {
            "none" => ParallelMode::None,
            "data" => ParallelMode::Data,
            _ => {
                let k = s.strip_prefix("average:").ok_or_else(bad)?;
                let k: u64 = k.parse().map_err(|_| bad())?;
                if k == 0 || k > 1_000_000_000 {
                    return Err(bad());
                }
                ParallelMode::Average(k)
            }
        })
    }
}

/// Default size of one gradient all-reduce: 4 MiB of single-precision values.
pub const DEFAULT_BUCKET_BYTES: usize = 4 << 20;

/// Rank `rank`'s share of a global minibatch `group` (example indexes) among `size` ranks:
/// the contiguous slice `[rank·len/size, (rank+1)·len/size)`, so that the shares in rank
/// order are the group and their sizes differ by at most one (a share is empty when the
/// group has fewer examples than there are ranks).
pub fn share(group: &[usize], rank: usize, size: usize) -> &[usize] {
    let size = size.max(1);
    let len = group.len();
    &group[rank * len / size..(rank + 1) * len / size]
}

/// The ranges of a flat vector of `total` values that one all-reduce each carries: `bucket`
/// values at a time (the last one shorter).
pub fn buckets(total: usize, bucket: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let bucket = bucket.max(1);
    (0..total)
        .step_by(bucket)
        .map(move |s| s..(s + bucket).min(total))
}

/// The parameters of every updatable component of `nnet`, in order, each block row by row,
/// as one vector.
fn flat_parameters(nnet: &Nnet, out: &mut Vector) {
    let blocks: Vec<_> = nnet
        .components
        .iter()
        .filter_map(|c| c.as_updatable())
        .flat_map(|u| u.param_blocks())
        .collect();
    out.resize(blocks.iter().map(|b| b.num_rows() * b.num_cols()).sum());
    let mut flat = out.as_row_mut();
    let mut at = 0;
    for b in blocks {
        let (rows, cols) = (b.num_rows(), b.num_cols());
        flat.cols_range_mut(at, rows * cols)
            .reshaped_mut(rows, cols)
            .expect("a range of a vector is contiguous")
            .copy_from(b);
        at += rows * cols;
    }
}

/// Sets the parameters of every updatable component of `nnet` from `flat`
/// ([`flat_parameters`]'s layout).
fn set_flat_parameters(nnet: &mut Nnet, flat: &Vector) {
    let mut at = 0;
    for u in nnet
        .components
        .iter_mut()
        .filter_map(|c| c.as_updatable_mut())
    {
        for mut b in u.param_blocks_mut() {
            let (rows, cols) = (b.num_rows(), b.num_cols());
            let range = flat.as_row().cols_range(at, rows * cols);
            b.copy_from(
                range
                    .reshaped(rows, cols)
                    .expect("a range of a vector is contiguous"),
            );
            at += rows * cols;
        }
    }
}

/// Every component's exact statistics as one vector.
struct Stats {
    values: Vector64,
    /// Entries per component.
    counts: Vec<usize>,
    /// The entries that describe the layout (the vector lengths some components list, which
    /// are the same on every rank and stay as they are) rather than add up over the ranks (a
    /// sum or a count, which `scale_stats` scales).
    layout: Vec<usize>,
}

impl Stats {
    fn of(nnet: &Nnet) -> Stats {
        let mut st = Stats {
            values: Vector64::default(),
            counts: Vec::new(),
            layout: Vec::new(),
        };
        for c in &nnet.components {
            let s = c.exact_stats();
            st.counts.push(s.dim());
            if s.is_empty() {
                continue;
            }
            let mut probe = c.clone_box();
            probe.scale_stats(2.0);
            let doubled = probe.exact_stats();
            for i in 0..s.dim() {
                let x = s.get(i);
                if x != 0.0 && doubled.dim() == s.dim() && doubled.get(i) == x {
                    st.layout.push(st.values.dim() + i);
                }
            }
            s.append_to(&mut st.values);
        }
        st
    }

    /// Divides the additive entries by `n`.
    fn divide(&mut self, n: f64) {
        let local = self.values.clone();
        self.values.divide(n);
        self.restore_layout(&local);
    }

    /// Puts back the layout entries (after a sum over the ranks) from this rank's `local`.
    fn restore_layout(&mut self, local: &Vector64) {
        for &i in &self.layout {
            self.values.set(i, local.get(i));
        }
    }

    /// Sets `nnet`'s statistics (the network these were taken of, or one of its structure).
    fn set(&self, nnet: &mut Nnet) -> Result<()> {
        let mut at = 0;
        for ((c, name), &n) in nnet
            .components
            .iter_mut()
            .zip(&nnet.component_names)
            .zip(&self.counts)
        {
            if n > 0 && !c.set_exact_stats(&self.values.range(at, n)) {
                return Err(Error::Compute(format!(
                    "the statistics of component {name} summed over the ranks do not fit it"
                )));
            }
            at += n;
        }
        Ok(())
    }
}

/// The processes of one training job and what `fit` does with them.
pub struct Parallel {
    group: Box<dyn Collective>,
    pub mode: ParallelMode,
    /// Values per gradient all-reduce.
    bucket: usize,
    flat: Vector,
    bucket_buf: Vector,
    /// Time spent in the all-reduce of gradients (`data`) or models (`average`), and the
    /// minibatches' whole time.
    reduce_time: Duration,
    step_time: Duration,
    steps: u64,
    frames: f64,
}

impl Parallel {
    /// One process.
    pub fn single() -> Self {
        Self::new(
            Box::new(OneProcess),
            ParallelMode::None,
            DEFAULT_BUCKET_BYTES,
        )
    }

    /// `group`'s processes training as `mode` says, all-reducing gradients `bucket_bytes` at
    /// a time.
    pub fn new(group: Box<dyn Collective>, mode: ParallelMode, bucket_bytes: usize) -> Self {
        Parallel {
            group,
            mode,
            bucket: (bucket_bytes / 4).max(1),
            flat: Vector::default(),
            bucket_buf: Vector::default(),
            reduce_time: Duration::ZERO,
            step_time: Duration::ZERO,
            steps: 0,
            frames: 0.0,
        }
    }

    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    pub fn size(&self) -> usize {
        self.group.size()
    }

    /// Whether this process writes the outputs (rank 0).
    pub fn is_root(&self) -> bool {
        self.group.rank() == 0
    }

    fn split(&self) -> bool {
        self.mode != ParallelMode::None && self.size() > 1
    }

    /// Ends the whole job (every rank) with `code`.
    pub fn abort(&self, code: i32) -> ! {
        self.group.abort(code)
    }

    /// The multiplier of the learning rate: N under `average:K` (each rank's step stands for
    /// 1/N of the averaged one), else 1.
    pub fn lr_scale(&self) -> f64 {
        match self.mode {
            ParallelMode::Average(_) if self.split() => self.size() as f64,
            _ => 1.0,
        }
    }

    /// Whether the frames and sequences of the step are the global minibatch's (`data`,
    /// and one process) rather than this rank's share's (`average`).
    pub fn global_step(&self) -> bool {
        !matches!(self.mode, ParallelMode::Average(_))
    }

    /// This rank's shares of the global minibatches.
    pub fn local_groups(&self, groups: &[Vec<usize>]) -> Vec<Vec<usize>> {
        if !self.split() {
            return groups.to_vec();
        }
        groups
            .iter()
            .map(|g| share(g, self.rank(), self.size()).to_vec())
            .collect()
    }

    /// The seed of this rank's pass from the minibatch's `seed` (dropout masks and other
    /// draws inside the computation): rank 0's is `seed`, so one rank draws as one process
    /// does; the others differ, so that the shares do not get the same masks.
    pub fn rank_seed(&self, seed: u64) -> u64 {
        seed ^ (self.rank() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// Sum over the ranks of small per-minibatch figures (objective sums, flags).
    pub fn sum_scalars<const N: usize>(&mut self, v: &mut [f64; N]) -> Result<()> {
        if self.size() > 1 {
            let mut sum = Vector64::from_vec(v.to_vec());
            self.group.sum64(&mut sum)?;
            for (i, x) in v.iter_mut().enumerate() {
                *x = sum.get(i);
            }
        }
        Ok(())
    }

    /// Rank 0's value of `v` on every rank.
    pub fn from_root(&mut self, v: Option<f64>) -> Result<Option<f64>> {
        if self.size() == 1 {
            return Ok(v);
        }
        let mut b = if self.is_root() {
            [v.is_some() as u8 as f64, v.unwrap_or(0.0)]
        } else {
            [0.0; 2]
        };
        self.sum_scalars(&mut b)?;
        Ok((b[0] != 0.0).then_some(b[1]))
    }

    /// Rank 0's parameters and statistics in every rank's `nnet` (same structure).
    pub fn broadcast_model(&mut self, nnet: &mut Nnet) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let mut flat = std::mem::take(&mut self.flat);
        flat_parameters(nnet, &mut flat);
        if !self.is_root() {
            flat.set_zero();
        }
        self.group.sum(&mut flat)?;
        set_flat_parameters(nnet, &flat);
        self.flat = flat;
        let mut stats = self.stats(nnet)?;
        if !self.is_root() {
            stats.values.set_zero();
        }
        self.group.sum64(&mut stats.values)?;
        stats.set(nnet)
    }

    /// `nnet`'s statistics, after checking that every rank lists them in the same layout
    /// (so that the sums line up): N·Σℓ² = (Σℓ)² over the ranks for every component's length
    /// ℓ holds exactly when all are equal, and every rank comes to the same verdict.
    fn stats(&mut self, nnet: &Nnet) -> Result<Stats> {
        let stats = Stats::of(nnet);
        let k = stats.counts.len();
        let lengths = stats.counts.iter().map(|&n| n as f64);
        let squares = stats.counts.iter().map(|&n| (n * n) as f64);
        let mut check = Vector64::from_vec(lengths.chain(squares).collect());
        self.group.sum64(&mut check)?;
        let n = self.size() as f64;
        for (c, name) in nnet.component_names.iter().enumerate() {
            if n * check.get(k + c) != check.get(c) * check.get(c) {
                return Err(Error::Compute(format!(
                    "the statistics of component {name} have another layout on some ranks \
                     (a rank that has not stored any yet: is --minibatch-size at least the \
                     number of ranks?)"
                )));
            }
        }
        Ok(stats)
    }

    /// Before training (after a resume): every rank holds rank 0's model; under `data` each
    /// keeps 1/N of the statistics, so that their sum is the model's.
    pub fn start(&mut self, nnet: &mut Nnet) -> Result<()> {
        if !self.split() {
            return Ok(());
        }
        self.broadcast_model(nnet)?;
        if self.mode == ParallelMode::Data {
            let mut stats = Stats::of(nnet);
            stats.divide(self.size() as f64);
            stats.set(nnet)?;
        }
        Ok(())
    }

    /// The mean over the ranks of the parameters and statistics, in every rank's `nnet`
    /// (summed in double precision, so that the parameters of N identical models average to
    /// themselves exactly).
    pub fn average_model(&mut self, nnet: &mut Nnet) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let started = Instant::now();
        let n = self.size() as f64;
        let mut flat = std::mem::take(&mut self.flat);
        flat_parameters(nnet, &mut flat);
        let mut wide = Vector64::from_f32(&flat);
        self.group.sum64(&mut wide)?;
        let flat = wide.div_to_f32(n);
        set_flat_parameters(nnet, &flat);
        self.flat = flat;
        let mut stats = self.stats(nnet)?;
        let local = stats.values.clone();
        self.group.sum64(&mut stats.values)?;
        stats.values.divide(n);
        stats.restore_layout(&local);
        stats.set(nnet)?;
        self.reduce_time += started.elapsed();
        Ok(())
    }

    /// After the step of minibatch `done` (counted from 1): `average:K` averages the models
    /// every K minibatches.
    pub fn after_step(&mut self, nnet: &mut Nnet, done: u64) -> Result<()> {
        match self.mode {
            ParallelMode::Average(k) if self.split() && done.is_multiple_of(k) => {
                self.average_model(nnet)
            }
            _ => Ok(()),
        }
    }

    /// The model to validate and write (a collective call): under `data` a copy whose
    /// statistics are the sum over the ranks; under `average` the averaged model itself.
    pub fn output_model<'a>(&mut self, nnet: &'a mut Nnet) -> Result<Cow<'a, Nnet>> {
        if !self.split() {
            return Ok(Cow::Borrowed(nnet));
        }
        match self.mode {
            ParallelMode::Data => {
                let mut stats = self.stats(nnet)?;
                let local = stats.values.clone();
                self.group.sum64(&mut stats.values)?;
                stats.restore_layout(&local);
                let mut out = nnet.clone();
                stats.set(&mut out)?;
                Ok(Cow::Owned(out))
            }
            _ => {
                self.average_model(nnet)?;
                Ok(Cow::Borrowed(nnet))
            }
        }
    }

    /// Rank 0's model after it alone reloaded one (AutoAdjust's best model): every rank's
    /// `nnet` becomes it, with the statistics shared as [`Parallel::start`] shares them.
    pub fn reloaded(&mut self, nnet: &mut Nnet) -> Result<()> {
        self.start(nnet)
    }

    /// The target of the next backward pass may hold a running value (Kaldi's delta holds
    /// the momentum): under `data` only rank 0 keeps it, so that the sum adds it once.
    pub fn before_backward(&mut self, target: &mut Nnet) {
        if self.mode == ParallelMode::Data && self.split() && !self.is_root() {
            for u in target
                .components
                .iter_mut()
                .filter_map(|c| c.as_updatable_mut())
            {
                for mut b in u.param_blocks_mut() {
                    b.set_zero();
                }
            }
        }
    }

    /// After the reduction: the random stream the update draws from (Kaldi's, for the
    /// orthonormal constraint and L2's spot check) is rank 0's on every rank, so that the
    /// update is the same everywhere.
    pub fn sync_stream(&mut self, stream: &mut GlibcRand) -> Result<()> {
        if self.mode != ParallelMode::Data || !self.split() {
            return Ok(());
        }
        let words = stream.state_words();
        let mut v = if self.is_root() {
            Vector64::from_vec(words.iter().map(|&w| w as f64).collect())
        } else {
            Vector64::zeros(words.len())
        };
        self.group.sum64(&mut v)?;
        let words: Vec<u32> = (0..v.dim()).map(|i| v.get(i) as u32).collect();
        *stream = GlibcRand::from_state_words(&words)
            .ok_or_else(|| Error::Compute("the random stream of rank 0 is not valid".into()))?;
        Ok(())
    }

    /// Counts one minibatch of `frames` (global) and its whole time (for
    /// [`Parallel::report`]).
    pub fn note_step(&mut self, took: Duration, frames: f64) {
        self.step_time += took;
        self.steps += 1;
        self.frames += frames;
    }

    /// The training rate and the all-reduce's share of the step, for the log (None without
    /// `--parallel`).
    pub fn report(&self) -> Option<String> {
        if self.mode == ParallelMode::None || self.steps == 0 {
            return None;
        }
        let r = self.reduce_time.as_secs_f64();
        let s = self.step_time.as_secs_f64().max(1e-12);
        Some(format!(
            "{} ranks, --parallel={}: {:.0} frames/s; {} all-reduce {:.3} ms per minibatch, \
             {:.1}% of the step ({:.1} ms per minibatch; buckets of {} values)",
            self.size(),
            match self.mode {
                ParallelMode::Data => "data".to_string(),
                ParallelMode::Average(k) => format!("average:{k}"),
                ParallelMode::None => "none".to_string(),
            },
            self.frames / s,
            if self.mode == ParallelMode::Data {
                "gradient"
            } else {
                "model"
            },
            1e3 * r / self.steps as f64,
            100.0 * r / s,
            1e3 * s / self.steps as f64,
            self.bucket
        ))
    }
}

impl GradientReduction for Parallel {
    /// Under `data`: every updatable component's parameters of `target` (the gradient, or
    /// Kaldi's delta) summed over the ranks, `bucket` values per all-reduce. Statistics the
    /// backward pass left in `target` stay per rank (see the module notes).
    fn reduce(&mut self, target: &mut Nnet) -> Result<()> {
        if self.mode != ParallelMode::Data || !self.split() {
            return Ok(());
        }
        let started = Instant::now();
        let mut flat = std::mem::take(&mut self.flat);
        flat_parameters(target, &mut flat);
        let mut bucket = std::mem::take(&mut self.bucket_buf);
        for r in buckets(flat.dim(), self.bucket) {
            bucket.resize(r.len());
            let part = flat.as_row().cols_range(r.start, r.len());
            bucket.as_row_mut().copy_from(part);
            self.group.sum(&mut bucket)?;
            flat.as_row_mut()
                .cols_range_mut(r.start, r.len())
                .copy_from(bucket.as_row());
        }
        set_flat_parameters(target, &flat);
        self.flat = flat;
        self.bucket_buf = bucket;
        self.reduce_time += started.elapsed();
        Ok(())
    }
}

/// The number of processes the launcher started this one among (`mpirun`'s environment:
/// Open MPI's, MPICH's or PMIx's), if any.
pub fn launched_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// The processes of this job for `mode`: MPI's world under `--parallel=data|average:K` (the
/// `mpi` feature), one process for `none`. Refuses a parallel mode without MPI, and `none`
/// in a job of several processes (they would write the same files).
pub fn join(mode: ParallelMode, bucket_bytes: usize) -> Result<Parallel> {
    if mode == ParallelMode::None {
        if let Some(n) = launched_size().filter(|&n| n > 1) {
            let build = if cfg!(feature = "mpi") {
                ""
            } else {
                " (with a compnet built with --features mpi)"
            };
            return Err(Error::Usage(format!(
                "compnet fit runs as one of {n} processes (mpirun): add --parallel=data or \
                 --parallel=average:K{build}, or run one process"
            )));
        }
        return Ok(Parallel::single());
    }
    mpi_world(mode, bucket_bytes)
}

#[cfg(not(feature = "mpi"))]
fn mpi_world(_mode: ParallelMode, _bucket_bytes: usize) -> Result<Parallel> {
    Err(Error::Usage(
        "--parallel needs MPI, and this compnet was built without it: build with \
         `cargo build --release --features mpi` (the system's MPI, e.g. Debian's openmpi-bin \
         libopenmpi-dev libclang-dev) and start it with mpirun"
            .into(),
    ))
}

#[cfg(feature = "mpi")]
fn mpi_world(mode: ParallelMode, bucket_bytes: usize) -> Result<Parallel> {
    let group = crate::collective::MpiGroup::init()?;
    Ok(Parallel::new(Box::new(group), mode, bucket_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// N ranks, this one rank 0, the others holding `copies - 1` more copies of its values
    /// (N - 1 copies: N identical ranks; none: the others send zeros): every sum is `copies`
    /// times the buffer. Records the length of every single-precision all-reduce.
    struct Identical {
        n: usize,
        copies: std::rc::Rc<std::cell::Cell<usize>>,
        calls: std::rc::Rc<std::cell::RefCell<Vec<usize>>>,
    }

    impl Collective for Identical {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            self.n
        }
        fn sum(&mut self, v: &mut Vector) -> Result<()> {
            self.calls.borrow_mut().push(v.dim());
            v.scale(self.copies.get() as f32);
            Ok(())
        }
        fn sum64(&mut self, v: &mut Vector64) -> Result<()> {
            v.scale(self.copies.get() as f64);
            Ok(())
        }
        fn abort(&self, code: i32) -> ! {
            panic!("abort({code})")
        }
    }

    fn nnet() -> Nnet {
        let config = "input-node name=input dim=5
component name=a type=NaturalGradientAffineComponent input-dim=5 output-dim=7
component name=r type=RectifiedLinearComponent dim=7
component name=o type=AffineComponent input-dim=7 output-dim=3
component name=l type=LogSoftmaxComponent dim=3
component-node name=a component=a input=input
component-node name=r component=r input=a
component-node name=o component=o input=r
component-node name=l component=l input=o
output-node name=output input=l objective=linear";
        let mut rng = crate::random::seeded_rng(3);
        Nnet::from_config_text(config, "test", &mut rng).expect("config")
    }

    fn parallel(n: usize, mode: ParallelMode, bucket_bytes: usize) -> (Parallel, Identical) {
        let calls = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let copies = std::rc::Rc::new(std::cell::Cell::new(n));
        let p = Parallel::new(
            Box::new(Identical {
                n,
                copies: copies.clone(),
                calls: calls.clone(),
            }),
            mode,
            bucket_bytes,
        );
        (p, Identical { n, copies, calls })
    }

    #[test]
    fn shares_partition_the_global_minibatch_in_rank_order() {
        for len in [0usize, 1, 3, 7, 64, 65] {
            let group: Vec<usize> = (100..100 + len).collect();
            for n in 1..=5 {
                let shares: Vec<&[usize]> = (0..n).map(|r| share(&group, r, n)).collect();
                assert_eq!(shares.concat(), group, "len {len}, {n} ranks");
                let sizes: Vec<usize> = shares.iter().map(|s| s.len()).collect();
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "{sizes:?}");
            }
        }
        assert_eq!(share(&[5, 6, 7, 8], 1, 2), &[7, 8]);
    }

    #[test]
    fn buckets_cover_the_vector_once_within_the_size() {
        for (total, b) in [
            (0usize, 4usize),
            (1, 4),
            (8, 4),
            (9, 4),
            (1_000_003, 1 << 20),
        ] {
            let r: Vec<_> = buckets(total, b).collect();
            assert_eq!(r.len(), total.div_ceil(b));
            let mut next = 0;
            for x in &r {
                assert_eq!(x.start, next);
                assert!(!x.is_empty() && x.len() <= b);
                next = x.end;
            }
            assert_eq!(next, total);
        }
    }

    #[test]
    fn the_gradient_is_summed_in_buckets() {
        let mut g = nnet();
        let mut before = Vector::default();
        flat_parameters(&g, &mut before);
        // 16-byte buckets: 4 values per all-reduce.
        let (mut p, probe) = parallel(3, ParallelMode::Data, 16);
        p.reduce(&mut g).unwrap();
        let mut after = Vector::default();
        flat_parameters(&g, &mut after);
        for (a, b) in after.to_vec().iter().zip(before.to_vec()) {
            assert_eq!(*a, 3.0 * b);
        }
        let calls = probe.calls.borrow();
        assert_eq!(calls.len(), before.dim().div_ceil(4));
        assert!(calls.iter().all(|&c| c <= 4));
        assert_eq!(calls.iter().sum::<usize>(), before.dim());
        // Model averaging sums no gradient.
        let (mut p, probe) = parallel(3, ParallelMode::Average(2), 16);
        p.reduce(&mut g).unwrap();
        assert!(probe.calls.borrow().is_empty());
    }

    /// Gives every nonlinearity of `m` statistics in their layout (four counts, then three
    /// vectors, each after its length); returns them.
    fn with_stats(m: &mut Nnet) -> Vector64 {
        let mut all = Vector64::default();
        for c in &mut m.components {
            if c.exact_stats().is_empty() {
                continue;
            }
            let dim = c.output_dim();
            let mut s = Vector64::from_vec(vec![64.0, 32.0, 1.0, 3.0]);
            for k in 0..3 {
                s.push(dim as f64);
                (0..dim).for_each(|i| s.push(0.1 + (i + 10 * k) as f64 / 3.0));
            }
            assert!(c.set_exact_stats(&s));
            s.append_to(&mut all);
        }
        assert!(!all.is_empty(), "the ReLU keeps statistics");
        all
    }

    #[test]
    fn averaging_identical_models_is_the_identity() {
        for n in [2, 3, 4, 7] {
            let mut m = nnet();
            let stats = with_stats(&mut m);
            let mut before = Vector::default();
            flat_parameters(&m, &mut before);
            let (mut p, _) = parallel(n, ParallelMode::Average(1), 1 << 20);
            p.average_model(&mut m).unwrap();
            let mut after = Vector::default();
            flat_parameters(&m, &mut after);
            assert_eq!(after.to_vec(), before.to_vec(), "{n} ranks: the parameters");
            // The statistics are summed and divided in double precision: exact for 2 and 4
            // ranks, within its rounding otherwise.
            let averaged = Stats::of(&m).values;
            for (a, b) in (0..stats.dim()).map(|i| (averaged.get(i), stats.get(i))) {
                if n.is_power_of_two() {
                    assert_eq!(a, b, "{n} ranks: the statistics");
                } else {
                    assert!((a - b).abs() <= 1e-15 * b.abs(), "{n} ranks: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn data_parallel_statistics_are_shared_and_summed_for_output() {
        let mut m = nnet();
        let s = with_stats(&mut m);
        // What the start does: each of 4 ranks keeps a quarter of the sums and counts; the
        // vector lengths stay.
        let mut st = Stats::of(&m);
        st.divide(4.0);
        st.set(&mut m).unwrap();
        let quarter = Stats::of(&m);
        assert_eq!(
            quarter.layout.len(),
            6,
            "the three lengths of the ReLU and the log-softmax"
        );
        for i in 0..s.dim() {
            let (q, x) = (quarter.values.get(i), s.get(i));
            if quarter.layout.contains(&i) {
                assert!(q == x && (x == 7.0 || x == 3.0), "{x} is not a length");
            } else {
                assert_eq!(q, x / 4.0);
            }
        }
        // 4 ranks holding a quarter each: the output model holds the whole.
        let (mut p, _) = parallel(4, ParallelMode::Data, 1 << 20);
        let out = p.output_model(&mut m).unwrap();
        assert_eq!(Stats::of(&out).values, s);
        assert_eq!(
            Stats::of(&m).values,
            quarter.values,
            "training keeps the shares"
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!(ParallelMode::parse("data").unwrap(), ParallelMode::Data);
        assert_eq!(ParallelMode::parse("none").unwrap(), ParallelMode::None);
        assert_eq!(
            ParallelMode::parse("average:8").unwrap(),
            ParallelMode::Average(8)
        );
        for bad in ["average:0", "average:", "average:x", "avg", "", "data:2"] {
            let e = ParallelMode::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--parallel"), "{e}");
        }
    }

    #[test]
    fn one_process_changes_nothing() {
        let mut m = nnet();
        let before = m.write_model(true);
        let mut p = Parallel::single();
        p.start(&mut m).unwrap();
        p.reduce(&mut m).unwrap();
        p.before_backward(&mut m);
        p.after_step(&mut m, 1).unwrap();
        assert!(matches!(p.output_model(&mut m).unwrap(), Cow::Borrowed(_)));
        assert_eq!(m.write_model(true), before);
        assert_eq!(p.lr_scale(), 1.0);
    }
}
