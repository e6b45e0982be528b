//! NnetComputer: executes a compiled [`NnetComputation`] forward and backward.
//!
//! The computer owns one [`Matrix`] per matrix of the computation (unallocated matrices are
//! 0×0), a slot per memo, and the inputs/outputs exchanged with the caller. Every command's
//! indexes are checked once, before the first command runs, so the execution loop itself can
//! index freely without risking a panic on a malformed computation.
//!
//! Borrowing: commands that read one matrix and write another take the written matrix out of
//! the matrix list for the duration of the command (an O(1) move), so reads and writes are
//! disjoint borrows without `unsafe`. When a command reads and writes the *same* matrix (which
//! the compiler only produces for in-place Propagate/Backprop), the read operand is copied into
//! a reusable scratch buffer first.

use crate::compile::analysis::{CommandAccesses, NodeIo};
use crate::compile::checker::check_structure;
use crate::compile::computation::{
    BackpropCommand, Command, NnetComputation, PropagateCommand, SubMatrixInfo,
};
use crate::error::{Error, Result};
use crate::kaldi_rand::GlibcRand;
use crate::matrix::{CuCompressedMatrix, MatView, MatViewMut, Matrix, Real, Trans};
use crate::nnet::component::{
    Backprop, Component, Memo, PrecomputedIndexes, Propagate, PropagateInPlace, Properties,
};
use crate::nnet::Nnet;
use rand::rngs::StdRng;
use rand::RngCore;
use std::collections::HashMap;

/// Every matrix of the computation must fit the memory limit (`crate::limits`) before any is
/// allocated: sizes come from model files and feature archives, and a damaged dimension must
/// give an error, not an allocation failure that aborts the process.
fn check_matrix_sizes(comp: &NnetComputation) -> std::result::Result<(), String> {
    let bytes = std::mem::size_of::<Real>() as u64;
    for (i, m) in comp.matrices.iter().enumerate() {
        crate::limits::check_product(
            &[m.num_rows as u64, m.num_cols as u64, bytes],
            &format!(
                "matrix m{i} ({} x {}) of the computation",
                m.num_rows, m.num_cols
            ),
        )?;
    }
    Ok(())
}

/// At most this many freed matrices are kept for reuse (per computer, and per thread between
/// computers).
const POOL_MAX_BUFFERS: usize = 64;

thread_local! {
    /// Freed matrices handed from one computer to the next on the same thread. Chunked
    /// inference and training run thousands of computations of the same shape; without this
    /// every one of them would get its matrices fresh from the system allocator, which for
    /// large buffers means new pages: page faults and kernel zeroing were 11 % of a wsj TDNN
    /// inference run (docs/PERFORMANCE.md). Like Kaldi's caching allocator it keeps memory
    /// once used: up to POOL_MAX_BUFFERS buffers per thread, for the life of the thread.
    static POOL: std::cell::RefCell<Vec<(usize, Matrix)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Executes an [`NnetComputation`] (Kaldi's `NnetComputer`).
pub struct NnetComputer<'a> {
    computation: &'a NnetComputation,
    nnet: NetRef<'a>,
    /// Receives parameter gradients (Kaldi's `nnet_to_update`).
    delta: Option<&'a mut Nnet>,
    /// Receives component statistics (Kaldi's `nnet_to_store_stats`).
    stats_nnet: Option<&'a mut Nnet>,
    matrices: Vec<Matrix>,
    /// Freed matrices kept for reuse, with their capacities (in elements).
    pool: Vec<(usize, Matrix)>,
    memos: HashMap<usize, Memo>,
    /// Matrices kept compressed between CompressMatrix and DecompressMatrix, by matrix.
    compressed: HashMap<usize, CuCompressedMatrix>,
    /// Matrices supplied by the caller, by node: `[forward inputs, output derivatives]`
    /// (indexed by `backward as usize`).
    given: [HashMap<usize, Matrix>; 2],
    /// Matrices handed out by the computation, by node: `[forward outputs, input
    /// derivatives]`.
    provided: [HashMap<usize, Matrix>; 2],
    /// Index of the NoOperationMarker command (or the number of commands).
    marker: usize,
    /// For each ProvideOutput command: true if its matrix is never touched again except by a
    /// deallocation, so the output can be moved out instead of copied.
    can_take: Vec<bool>,
    /// Per component: its parameter update is consolidated (see [`PendingUpdate`]).
    consolidate: Vec<bool>,
    /// The rows saved for consolidated updates, by component.
    pending: Vec<(usize, PendingUpdate)>,
    checked: Option<std::result::Result<(), String>>,
    forward_done: bool,
    scratch: Matrix,
    /// Fill matrices allocated undefined with NaN (tests: a read before the first write
    /// then shows in the results).
    poison_undefined: bool,
    /// Run an affine Propagate and the ReLU after it in one pass where the component can
    /// ([`Self::propagate_with_relu`]); off only to compare against the two steps.
    fuse: bool,
    /// Command pairs run fused so far.
    fused: usize,
    /// The one source of randomness for the components (dropout masks, self-repair,
    /// sampled statistics). Commands run in order on one thread, so a seed fixes every draw.
    rng: ComputerRng,
}

/// The components' generator: seeded here, or Kaldi's `rand()` stream lent by a trainer
/// ([`NnetComputer::with_kaldi_rand`]) and handed back with [`NnetComputer::take_kaldi_rand`].
enum ComputerRng {
    Seeded(StdRng),
    Kaldi(GlibcRand),
}

impl RngCore for ComputerRng {
    fn next_u32(&mut self) -> u32 {
        match self {
            ComputerRng::Seeded(r) => r.next_u32(),
            ComputerRng::Kaldi(r) => r.next_u32(),
        }
    }
    fn next_u64(&mut self) -> u64 {
        match self {
            ComputerRng::Seeded(r) => r.next_u64(),
            ComputerRng::Kaldi(r) => r.next_u64(),
        }
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        match self {
            ComputerRng::Seeded(r) => r.fill_bytes(dst),
            ComputerRng::Kaldi(r) => r.fill_bytes(dst),
        }
    }
}

/// The network a computer runs: shared, or (training) held mutably so that component
/// statistics go straight into it, as Kaldi's trainer stores them in the model it trains.
enum NetRef<'a> {
    Shared(&'a Nnet),
    Mut(&'a mut Nnet),
}

/// The error of asking for an output (`backward` false) or input derivative the computation
/// did not provide.
fn not_provided(node_name: &str, backward: bool) -> Error {
    let what = if backward {
        "derivative for input node"
    } else {
        "output for node"
    };
    Error::Compute(format!("the computation provided no {what} '{node_name}'"))
}

impl NetRef<'_> {
    fn get(&self) -> &Nnet {
        match self {
            NetRef::Shared(n) => n,
            NetRef::Mut(n) => n,
        }
    }
}

/// Where statistics go: an explicit stats network, else the network itself when it is held
/// mutably. A free function so that it borrows only these two fields.
fn stats_target<'b>(
    stats_nnet: &'b mut Option<&'_ mut Nnet>,
    nnet: &'b mut NetRef<'_>,
) -> Option<&'b mut Nnet> {
    match (stats_nnet, nnet) {
        (Some(s), _) => Some(&mut **s),
        (None, NetRef::Mut(n)) => Some(&mut **n),
        _ => None,
    }
}

/// The seed of a computer's generator unless [`NnetComputer::with_seed`] says otherwise.
pub const DEFAULT_SEED: u64 = 0;

impl<'a> NnetComputer<'a> {
    /// A computer for `computation` on `nnet`; parameter gradients go to `delta` (a copy of
    /// the network whose updatable components were zeroed as gradients), if given.
    pub fn new(
        computation: &'a NnetComputation,
        nnet: &'a Nnet,
        delta: Option<&'a mut Nnet>,
    ) -> Self {
        Self::with_net(computation, NetRef::Shared(nnet), delta)
    }

    /// A computer for training: component statistics (Propagate commands with
    /// `store_stats`) go into `nnet` itself, parameter gradients into `delta` (Kaldi's
    /// `NnetComputer(computation, nnet_, delta_nnet_)` in `NnetTrainer`).
    pub fn for_training(
        computation: &'a NnetComputation,
        nnet: &'a mut Nnet,
        delta: &'a mut Nnet,
    ) -> Self {
        Self::with_net(computation, NetRef::Mut(nnet), Some(delta))
    }

    /// A computer without a backward pass that stores component statistics into `nnet`
    /// (Kaldi's RecomputeStats: BatchNorm statistics of an averaged model).
    pub fn storing_stats(computation: &'a NnetComputation, nnet: &'a mut Nnet) -> Self {
        Self::with_net(computation, NetRef::Mut(nnet), None)
    }

    fn with_net(
        computation: &'a NnetComputation,
        nnet: NetRef<'a>,
        delta: Option<&'a mut Nnet>,
    ) -> Self {
        let marker = computation
            .commands
            .iter()
            .position(|c| matches!(c, Command::NoOperationMarker))
            .unwrap_or(computation.commands.len());
        NnetComputer {
            computation,
            nnet,
            delta,
            stats_nnet: None,
            matrices: (0..computation.matrices.len().max(1))
                .map(|_| Matrix::default())
                .collect(),
            pool: POOL.with(|p| std::mem::take(&mut *p.borrow_mut())),
            memos: HashMap::new(),
            compressed: HashMap::new(),
            given: Default::default(),
            provided: Default::default(),
            marker,
            can_take: Vec::new(),
            consolidate: Vec::new(),
            pending: Vec::new(),
            checked: None,
            forward_done: false,
            scratch: Matrix::default(),
            poison_undefined: false,
            fuse: true,
            fused: 0,
            rng: ComputerRng::Seeded(crate::random::seeded_rng(DEFAULT_SEED)),
        }
    }

    /// Seeds the generator the components draw from (dropout, self-repair). A trainer
    /// passes `--srand` plus the minibatch index, so a run is reproducible and minibatches
    /// draw different masks.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = ComputerRng::Seeded(crate::random::seeded_rng(seed));
        self
    }

    /// Lends the components Kaldi's `rand()` stream (the trainer's, `srand(--srand)`), so
    /// that statistics sampling and self-repair take Kaldi's values in Kaldi's order.
    pub fn with_kaldi_rand(mut self, rand: GlibcRand) -> Self {
        self.rng = ComputerRng::Kaldi(rand);
        self
    }

    /// Gives back the stream lent by [`Self::with_kaldi_rand`], where it now stands.
    pub fn take_kaldi_rand(&mut self) -> Option<GlibcRand> {
        match std::mem::replace(
            &mut self.rng,
            ComputerRng::Seeded(crate::random::seeded_rng(DEFAULT_SEED)),
        ) {
            ComputerRng::Kaldi(r) => Some(r),
            other => {
                self.rng = other;
                None
            }
        }
    }

    /// Sends component statistics (Propagate commands with `store_stats`) to the components
    /// of `stats_nnet` (usually the network being trained, Kaldi's `nnet_to_store_stats`).
    pub fn with_stats_nnet(mut self, stats_nnet: &'a mut Nnet) -> Self {
        self.stats_nnet = Some(stats_nnet);
        self
    }

    /// Fills every matrix the computation allocates as undefined with NaN, so that an
    /// optimizer mistake (reading such a matrix before it is written) cannot go unnoticed.
    pub fn poison_undefined(mut self) -> Self {
        self.poison_undefined = true;
        self
    }

    /// Runs every command on its own: no affine Propagate fused with the ReLU after it
    /// (the reference the fused pass is tested against).
    pub fn without_fusion(mut self) -> Self {
        self.fuse = false;
        self
    }

    /// How many Propagate pairs (an affine layer and its ReLU) ran as one pass.
    pub fn num_fused(&self) -> usize {
        self.fused
    }

    fn node(&self, node_name: &str) -> Result<usize> {
        self.nnet
            .get()
            .node_index(node_name)
            .ok_or_else(|| Error::Compute(format!("no node named '{node_name}' in the network")))
    }

    /// Supplies the matrix of node `node_name` for the forward pass (an input's value) or the
    /// backward pass (an output's derivative).
    fn give(&mut self, node_name: &str, m: Matrix, backward: bool) -> Result<()> {
        let node = self.node(node_name)?;
        self.given[backward as usize].insert(node, m);
        Ok(())
    }

    /// The matrix the forward pass (an output's value) or the backward pass (an input's
    /// derivative) provided for node `node_name`.
    fn provided(&self, node_name: &str, backward: bool) -> Result<&Matrix> {
        let node = self.node(node_name)?;
        self.provided[backward as usize]
            .get(&node)
            .ok_or_else(|| not_provided(node_name, backward))
    }

    /// [`Self::provided`], taken out of the computer.
    fn take_provided(&mut self, node_name: &str, backward: bool) -> Result<Matrix> {
        let node = self.node(node_name)?;
        self.provided[backward as usize]
            .remove(&node)
            .ok_or_else(|| not_provided(node_name, backward))
    }

    /// Supplies the value of input node `node_name` (rows in the request's index order).
    pub fn accept_input(&mut self, node_name: &str, m: Matrix) -> Result<()> {
        self.give(node_name, m, false)
    }

    /// Runs the forward commands (everything before the NoOperationMarker).
    pub fn run_forward(&mut self) -> Result<()> {
        self.check()?;
        if self.forward_done {
            return Err(Error::Compute("run_forward called twice".into()));
        }
        self.run_range(0, self.marker, false)?;
        self.forward_done = true;
        Ok(())
    }

    /// The forward output of node `node_name`.
    pub fn output(&self, node_name: &str) -> Result<&Matrix> {
        self.provided(node_name, false)
    }

    /// Takes the forward output of node `node_name` out of the computer.
    pub fn take_output(&mut self, node_name: &str) -> Result<Matrix> {
        self.take_provided(node_name, false)
    }

    /// Supplies the derivative of the objective w.r.t. output node `node_name`.
    pub fn accept_output_deriv(&mut self, node_name: &str, m: Matrix) -> Result<()> {
        self.give(node_name, m, true)
    }

    /// Runs the backward commands (everything after the NoOperationMarker).
    pub fn run_backward(&mut self) -> Result<()> {
        self.check()?;
        if !self.forward_done {
            return Err(Error::Compute(
                "run_backward called before run_forward".into(),
            ));
        }
        let n = self.computation.commands.len();
        if self.marker < n {
            self.run_range(self.marker + 1, n, true)?;
        }
        self.flush_consolidated_updates();
        Ok(())
    }

    /// The derivative w.r.t. input node `node_name` (after `run_backward`).
    pub fn input_deriv(&self, node_name: &str) -> Result<&Matrix> {
        self.provided(node_name, true)
    }

    /// Takes the derivative w.r.t. input node `node_name` out of the computer.
    pub fn take_input_deriv(&mut self, node_name: &str) -> Result<Matrix> {
        self.take_provided(node_name, true)
    }

    /// Runs each consolidated update: one Backprop per component over the rows of all its
    /// steps, with no input derivative (those were computed step by step).
    fn flush_consolidated_updates(&mut self) {
        // Kaldi appends the consolidated updates after the last command, in component order
        // (which orders their draws from the rand() stream, e.g. the GRUs' statistics).
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| p.0);
        let Some(delta) = self.delta.as_deref_mut() else {
            return;
        };
        for (c, p) in pending {
            let comp: &dyn Component = self.nnet.get().components[c].as_ref();
            let (in_value, out_value, out_deriv) = p.concatenated();
            comp.backprop(Backprop {
                in_value: in_value.view(),
                out_value: out_value.view(),
                to_update: Some(delta.components[c].as_mut()),
                ..Backprop::new(out_deriv.view(), None, &mut self.rng)
            });
        }
    }

    // ------------------------------------------------------------------ checking

    /// Validates the computation once (every index in range, shapes consistent).
    fn check(&mut self) -> Result<()> {
        if self.checked.is_none() {
            let r = check_structure(self.computation, self.nnet.get())
                .map(|accesses| self.can_take = compute_can_take(self.computation, &accesses))
                .map_err(|e| e.to_string())
                .and_then(|()| check_matrix_sizes(self.computation));
            self.checked = Some(r);
            if self.delta.is_some() {
                self.consolidate = components_to_consolidate(self.computation, self.nnet.get());
            }
        }
        match &self.checked {
            Some(Err(e)) => Err(Error::Compute(format!("invalid computation: {e}"))),
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------------ execution

    fn run_range(&mut self, begin: usize, end: usize, backward: bool) -> Result<()> {
        let comp = self.computation;
        let mut i = begin;
        while i < end {
            let cmd = &comp.commands[i];
            if let &Command::Propagate(p) = cmd {
                // The next Propagate, past deallocations of other matrices (the optimizer
                // frees the affine layer's input right after it).
                let out = self.sm(p.output).matrix;
                let next = (i + 1..end).find(
                    |&k| !matches!(comp.commands[k], Command::DeallocMatrix { m } if m != out),
                );
                if let Some(j) = next {
                    if let Command::Propagate(q) = comp.commands[j] {
                        if self.propagate_with_relu(p, q) {
                            for k in i + 1..j {
                                self.exec(k, &comp.commands[k], backward)?;
                            }
                            i = j + 1;
                            continue;
                        }
                    }
                }
            }
            self.exec(i, cmd, backward)?;
            i += 1;
        }
        Ok(())
    }

    /// Runs Propagate `p` and Propagate `q` (the next one, only deallocations of other
    /// matrices between them) in one pass when `q` is a ReLU in place on `p`'s output and
    /// `p`'s component can apply it while writing (an affine layer with 8-bit products,
    /// [`Component::propagate_relu`]): the same floats, one pass over the output fewer.
    /// Returns false, having run nothing, otherwise (then the commands run as they are).
    fn propagate_with_relu(&mut self, p: PropagateCommand, q: PropagateCommand) -> bool {
        if !self.fuse {
            return false;
        }
        let (ii, oi) = (self.sm(p.input), self.sm(p.output));
        if self.sm(q.input) != oi || self.sm(q.output) != oi || ii.matrix == oi.matrix {
            return false;
        }
        let stats = self.stats_nnet.is_some() || matches!(self.nnet, NetRef::Mut(_));
        if p.memo != 0 || q.memo != 0 || (stats && (p.store_stats || q.store_stats)) {
            return false;
        }
        let net = self.nnet.get();
        let (cp, cq): (&dyn Component, &dyn Component) = (
            net.components[p.component].as_ref(),
            net.components[q.component].as_ref(),
        );
        if cq.type_name() != "RectifiedLinearComponent"
            || cp.properties().has(Properties::PROPAGATE_ADDS)
        {
            return false;
        }
        let idx = self.precomputed(p.precomputed);
        let mut omat = std::mem::take(&mut self.matrices[oi.matrix]);
        let done = cp.propagate_relu(Propagate {
            input: sub_view(&self.matrices[ii.matrix], &ii),
            output: sub_view_mut(&mut omat, &oi),
            indexes: idx,
            rng: &mut self.rng,
        });
        self.matrices[oi.matrix] = omat;
        self.fused += usize::from(done);
        done
    }

    #[inline]
    fn sm(&self, s: usize) -> SubMatrixInfo {
        self.computation.submatrices[s]
    }

    /// Allocates matrix `m` from the pool: zeroed, or (`zeroed == false`) holding whatever
    /// the reused buffer held (NaN with [`Self::poison_undefined`]).
    fn alloc(&mut self, m: usize, zeroed: bool) {
        let info = &self.computation.matrices[m];
        let (r, c) = (info.num_rows, info.num_cols);
        let need = r * c;
        // Reuse the pooled buffer that fits best, to avoid allocating in steady state:
        // preferably one that held at least that many elements before (growing into them
        // writes nothing), else the smallest whose capacity covers the matrix (growing past
        // what a buffer held writes zeros).
        let size = |m: &Matrix| m.reusable_len();
        let best = self
            .pool
            .iter()
            .enumerate()
            .filter(|(_, (_, m))| size(m) >= need)
            .min_by_key(|(_, (_, m))| size(m))
            .or_else(|| {
                self.pool
                    .iter()
                    .enumerate()
                    .filter(|(_, (cap, _))| *cap >= need)
                    .min_by_key(|(_, (cap, _))| *cap)
            })
            .or_else(|| {
                self.pool
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, (cap, _))| *cap)
            })
            .map(|(k, _)| k);
        let mut mat = match best {
            Some(k) => self.pool.swap_remove(k).1,
            None => Matrix::default(),
        };
        if zeroed {
            mat.resize(r, c);
        } else {
            mat.resize_undefined(r, c);
            if self.poison_undefined {
                mat.view_mut().set_const(Real::NAN);
            }
        }
        let old = std::mem::replace(&mut self.matrices[m], mat);
        self.release(old);
    }

    fn release(&mut self, old: Matrix) {
        let n = old.capacity();
        if n > 0 && self.pool.len() < POOL_MAX_BUFFERS {
            self.pool.push((n, old));
        }
    }

    fn exec(&mut self, idx: usize, cmd: &Command, backward: bool) -> Result<()> {
        if !super::profile::enabled() {
            return self.exec_command(idx, cmd, backward);
        }
        let name = self.stage_name(cmd);
        super::profile::timed(|| name, || self.exec_command(idx, cmd, backward))
    }

    /// The profile's name for `cmd`: its kind, with the component type for Propagate and
    /// Backprop.
    fn stage_name(&self, cmd: &Command) -> String {
        let net = self.nnet.get();
        match *cmd {
            Command::Propagate(p) => {
                format!("Propagate {}", net.components[p.component].type_name())
            }
            Command::Backprop(b) => {
                format!("Backprop {}", net.components[b.component].type_name())
            }
            _ => {
                let s = format!("{cmd:?}");
                s.split([' ', '{', '(']).next().unwrap_or("").to_string()
            }
        }
    }

    fn exec_command(&mut self, idx: usize, cmd: &Command, backward: bool) -> Result<()> {
        match *cmd {
            Command::AllocMatrix { m } => self.alloc(m, true),
            Command::AllocMatrixUndefined { m } => self.alloc(m, false),
            Command::DeallocMatrix { m } => {
                let old = std::mem::take(&mut self.matrices[m]);
                self.release(old);
            }
            Command::SwapMatrix { a, b } => {
                // allocate-from-other (`a` was not allocated): what `a` now holds is
                // unspecified.
                let moved = self.matrices[a].capacity() == 0;
                self.matrices.swap(a, b);
                if moved && self.poison_undefined {
                    self.matrices[a].view_mut().set_const(Real::NAN);
                }
            }
            Command::CompressMatrix { m, kind } => {
                let mat = std::mem::take(&mut self.matrices[m]);
                self.compressed
                    .insert(m, CuCompressedMatrix::from_matrix(&mat, kind));
                self.release(mat);
            }
            Command::DecompressMatrix { m } => {
                let Some(c) = self.compressed.remove(&m) else {
                    return Err(Error::Compute(format!(
                        "command {idx}: matrix m{m} is not compressed"
                    )));
                };
                self.alloc(m, false);
                c.copy_to_matrix(&mut self.matrices[m]);
            }
            Command::SetConst { s, alpha } => {
                let i = self.sm(s);
                sub_view_mut(&mut self.matrices[i.matrix], &i).set_const(alpha);
            }
            Command::Propagate(p) => self.propagate(p)?,
            Command::Backprop(b) => self.backprop(b)?,
            Command::MatrixCopy { dst, src, alpha } => {
                self.binary_op(dst, src, |mut d, s| {
                    d.copy_from(s);
                    if alpha != 1.0 {
                        d.scale(alpha);
                    }
                });
            }
            Command::MatrixAdd { dst, src, alpha } => {
                self.binary_op(dst, src, |mut d, s| d.add_mat(alpha, s, Trans::No));
            }
            Command::CopyRows(r) => {
                let idx = &self.computation.indexes[r.indexes];
                self.binary_op(r.dst, r.src, |mut d, s| {
                    d.copy_rows(s, idx);
                    if r.alpha != 1.0 {
                        d.scale(r.alpha);
                    }
                });
            }
            Command::AddRows(r) => {
                let idx = &self.computation.indexes[r.indexes];
                self.binary_op(r.dst, r.src, |mut d, s| d.add_rows(r.alpha, s, idx));
            }
            Command::AddRowRanges(r) => {
                let ranges = &self.computation.indexes_ranges[r.indexes];
                self.binary_op(r.dst, r.src, |mut d, s| {
                    add_row_ranges_scaled(&mut d, s, ranges, r.alpha)
                });
            }
            Command::CopyRowsMulti { .. }
            | Command::AddRowsMulti { .. }
            | Command::CopyToRowsMulti { .. }
            | Command::AddToRowsMulti { .. } => {
                if let Some(m) = cmd.multi_rows() {
                    if m.scatter {
                        self.scatter_rows_multi(m.matrix, m.table, m.alpha, m.add)
                    } else {
                        self.rows_multi(m.matrix, m.table, m.alpha, m.add)
                    }
                }
            }
            Command::AcceptInput { s, node } => self.accept(s, node, backward)?,
            Command::ProvideOutput { s, node } => self.provide(idx, s, node, backward),
            Command::NoOperation
            | Command::NoOperationPermanent
            | Command::NoOperationMarker
            | Command::NoOperationLabel => {}
            Command::GotoLabel { .. } => {
                return Err(Error::Compute(
                    "GotoLabel: NnetComputer runs commands in order (compnet loops with compile::looped, which needs no jumps)".into(),
                ))
            }
        }
        Ok(())
    }

    /// Runs `f(dst_view, src_view)`, handling the case where both live in one matrix.
    fn binary_op(&mut self, dst: usize, src: usize, f: impl FnOnce(MatViewMut<'_>, MatView<'_>)) {
        let (di, si) = (self.sm(dst), self.sm(src));
        if di.matrix == si.matrix {
            let mut scratch = std::mem::take(&mut self.scratch);
            copy_into(&mut scratch, sub_view(&self.matrices[si.matrix], &si));
            f(
                sub_view_mut(&mut self.matrices[di.matrix], &di),
                scratch.view(),
            );
            self.scratch = scratch;
        } else {
            let mut dmat = std::mem::take(&mut self.matrices[di.matrix]);
            f(
                sub_view_mut(&mut dmat, &di),
                sub_view(&self.matrices[si.matrix], &si),
            );
            self.matrices[di.matrix] = dmat;
        }
    }

    /// Whether a (sub-matrix, row) pair of multi table `which` lies in matrix `m`.
    fn multi_touches(&self, which: usize, m: usize) -> bool {
        self.computation.indexes_multi[which]
            .iter()
            .any(|&(s, _)| s > 0 && self.computation.submatrices[s as usize].matrix == m)
    }

    /// CopyRowsMulti / AddRowsMulti: each row of `dst` from a (sub-matrix, row) pair.
    fn rows_multi(&mut self, dst: usize, which: usize, alpha: Real, add: bool) {
        let pairs = &self.computation.indexes_multi[which];
        let di = self.sm(dst);
        let aliased = self.multi_touches(which, di.matrix);
        let mut dmat = std::mem::take(&mut self.matrices[di.matrix]);
        // When sources live in the destination matrix, read them from a copy of it.
        let snapshot = if aliased { Some(dmat.clone()) } else { None };
        {
            let mut d = sub_view_mut(&mut dmat, &di);
            for (i, &(s, r)) in pairs.iter().enumerate() {
                if s < 0 {
                    if !add {
                        d.zero_row(i);
                    }
                    continue;
                }
                let si = self.computation.submatrices[s as usize];
                let srcm = match &snapshot {
                    Some(m) if si.matrix == di.matrix => m,
                    _ => &self.matrices[si.matrix],
                };
                let src = sub_view(srcm, &si);
                if add {
                    d.add_row_from(i, alpha, src, r as usize);
                } else if alpha == 1.0 {
                    d.copy_row_from(i, src, r as usize);
                } else {
                    d.copy_row_scaled_from(i, alpha, src, r as usize);
                }
            }
        }
        self.matrices[di.matrix] = dmat;
    }

    /// CopyToRowsMulti / AddToRowsMulti: row i of `src` to a (sub-matrix, row) pair.
    fn scatter_rows_multi(&mut self, src: usize, which: usize, alpha: Real, add: bool) {
        let pairs = &self.computation.indexes_multi[which];
        let si = self.sm(src);
        // Take the source out (copying it if a destination shares its matrix).
        let aliased = self.multi_touches(which, si.matrix);
        let srcm = if aliased {
            self.matrices[si.matrix].clone()
        } else {
            std::mem::take(&mut self.matrices[si.matrix])
        };
        {
            let sv = sub_view(&srcm, &si);
            for (i, &(s, r)) in pairs.iter().enumerate() {
                if s < 0 {
                    continue;
                }
                let di = self.computation.submatrices[s as usize];
                let mut d = sub_view_mut(&mut self.matrices[di.matrix], &di);
                if add {
                    d.add_row_from(r as usize, alpha, sv, i);
                } else if alpha == 1.0 {
                    d.copy_row_from(r as usize, sv, i);
                } else {
                    d.copy_row_scaled_from(r as usize, alpha, sv, i);
                }
            }
        }
        if !aliased {
            self.matrices[si.matrix] = srcm;
        }
    }

    fn precomputed(&self, k: usize) -> Option<&'a dyn PrecomputedIndexes> {
        let comp: &'a NnetComputation = self.computation;
        comp.component_precomputed_indexes
            .get(k)
            .and_then(|p| p.as_deref())
    }

    #[allow(clippy::too_many_arguments)]
    fn propagate(&mut self, p: PropagateCommand) -> Result<()> {
        let (c, memo) = (p.component, p.memo);
        let idx = self.precomputed(p.precomputed);
        let (ii, oi) = (self.sm(p.input), self.sm(p.output));
        let want_stats =
            p.store_stats && (self.stats_nnet.is_some() || matches!(self.nnet, NetRef::Mut(_)));
        let comp: &dyn Component = self.nnet.get().components[c].as_ref();
        let new_memo = if ii == oi && !want_stats {
            let data = sub_view_mut(&mut self.matrices[oi.matrix], &oi);
            let rng = &mut self.rng;
            if comp.properties().has(Properties::PROPAGATE_IN_PLACE) {
                comp.propagate_in_place(PropagateInPlace {
                    data,
                    indexes: idx,
                    rng,
                })
            } else {
                let mut scratch = std::mem::take(&mut self.scratch);
                copy_into(&mut scratch, data.as_view());
                let m = comp.propagate(Propagate {
                    input: scratch.view(),
                    output: data,
                    indexes: idx,
                    rng,
                });
                self.scratch = scratch;
                m
            }
        } else if ii.matrix == oi.matrix {
            let mut scratch = std::mem::take(&mut self.scratch);
            copy_into(&mut scratch, sub_view(&self.matrices[ii.matrix], &ii));
            let m = comp.propagate(Propagate {
                input: scratch.view(),
                output: sub_view_mut(&mut self.matrices[oi.matrix], &oi),
                indexes: idx,
                rng: &mut self.rng,
            });
            if want_stats {
                if let Some(sn) = stats_target(&mut self.stats_nnet, &mut self.nnet) {
                    sn.components[c].store_stats(
                        scratch.view(),
                        sub_view(&self.matrices[oi.matrix], &oi),
                        m.as_ref(),
                        &mut self.rng,
                    );
                }
            }
            self.scratch = scratch;
            if memo != 0 {
                if let Some(m) = m {
                    self.memos.insert(memo, m);
                }
            }
            return Ok(());
        } else {
            let mut omat = std::mem::take(&mut self.matrices[oi.matrix]);
            let m = comp.propagate(Propagate {
                input: sub_view(&self.matrices[ii.matrix], &ii),
                output: sub_view_mut(&mut omat, &oi),
                indexes: idx,
                rng: &mut self.rng,
            });
            self.matrices[oi.matrix] = omat;
            m
        };
        if want_stats {
            if let Some(sn) = stats_target(&mut self.stats_nnet, &mut self.nnet) {
                sn.components[c].store_stats(
                    sub_view(&self.matrices[ii.matrix], &ii),
                    sub_view(&self.matrices[oi.matrix], &oi),
                    new_memo.as_ref(),
                    &mut self.rng,
                );
            }
        }
        if memo != 0 {
            if let Some(m) = new_memo {
                self.memos.insert(memo, m);
            }
        }
        Ok(())
    }

    /// Runs a Backprop command.
    fn backprop(&mut self, b: BackpropCommand) -> Result<()> {
        let BackpropCommand {
            component: c,
            precomputed,
            in_value,
            out_value,
            out_deriv,
            in_deriv,
            memo,
            update,
            ..
        } = b;
        // A consolidated update: save the rows now, update once at the end of the pass.
        let consolidated = update && self.consolidate.get(c).copied().unwrap_or(false);
        if consolidated {
            let rows = |s: usize| view_of(&self.matrices, self.computation, s).to_matrix();
            let saved = (rows(in_value), rows(out_value), rows(out_deriv));
            match self.pending.iter_mut().find(|p| p.0 == c) {
                Some(p) => p.1.push(saved),
                None => {
                    let mut p = PendingUpdate::default();
                    p.push(saved);
                    self.pending.push((c, p));
                }
            }
            if in_deriv == 0 {
                return Ok(());
            }
        }
        let update = update && !consolidated;
        let idx = self.precomputed(precomputed);
        let memo_val = if memo != 0 {
            self.memos.remove(&memo)
        } else {
            None
        };
        // Kaldi hands a component that is not updatable the network that receives the
        // statistics (the one being trained) as its `to_update`, not the delta: the
        // nonlinearities' derivative statistics and a CompositeComponent's go straight into
        // the model. That is the component running the step, so the step runs on a copy.
        let into_stats = update
            && !self.nnet.get().components[c]
                .properties()
                .has(Properties::UPDATABLE)
            && (self.stats_nnet.is_some() || matches!(self.nnet, NetRef::Mut(_)));
        let running: Box<dyn Component>;
        let (comp, to_update): (&dyn Component, Option<&mut dyn Component>) = if into_stats {
            running = self.nnet.get().components[c].clone();
            let target: Option<&mut dyn Component> =
                match stats_target(&mut self.stats_nnet, &mut self.nnet) {
                    Some(n) => Some(n.components[c].as_mut()),
                    None => None,
                };
            (running.as_ref(), target)
        } else {
            let nnet: &Nnet = self.nnet.get();
            let to_update: Option<&mut dyn Component> = if update {
                match self.delta.as_deref_mut() {
                    Some(d) => Some(d.components[c].as_mut()),
                    None => {
                        return Err(Error::Compute(format!(
                            "the computation updates component '{}' but no delta network was given",
                            nnet.component_names.get(c).map_or("?", |s| s.as_str())
                        )))
                    }
                }
            } else {
                None
            };
            (nnet.components[c].as_ref(), to_update)
        };
        // The operands every case shares; each case sets the matrices.
        let empty = MatView::from_slice(&[], 0, 0);
        let mut step = Backprop::new(empty, None, &mut self.rng);
        step.indexes = idx;
        step.memo = memo_val.as_ref();
        step.to_update = to_update;
        if in_deriv == 0 {
            step.out_deriv = view_of(&self.matrices, self.computation, out_deriv);
            step.in_value = view_of(&self.matrices, self.computation, in_value);
            step.out_value = view_of(&self.matrices, self.computation, out_value);
            comp.backprop(step);
            return Ok(());
        }
        let di = self.computation.submatrices[in_deriv];
        let od = self.computation.submatrices[out_deriv];
        if di == od && comp.properties().has(Properties::BACKPROP_IN_PLACE) {
            // In place: the input values must not live in the derivative matrix.
            let mut dmat = std::mem::take(&mut self.matrices[di.matrix]);
            step.in_value = view_of(&self.matrices, self.computation, in_value);
            step.out_value = view_of(&self.matrices, self.computation, out_value);
            comp.backprop_in_place(step.in_place(sub_view_mut(&mut dmat, &di)));
            self.matrices[di.matrix] = dmat;
            return Ok(());
        }
        // General case: take the in-deriv matrix out; operands sharing it are copied first.
        let mut dmat = std::mem::take(&mut self.matrices[di.matrix]);
        let copy_if_shared = |s: usize, m: &Matrix| -> Option<Matrix> {
            if s != 0 && self.computation.submatrices[s].matrix == di.matrix {
                Some(sub_view(m, &self.computation.submatrices[s]).to_matrix())
            } else {
                None
            }
        };
        let iv_c = copy_if_shared(in_value, &dmat);
        let ov_c = copy_if_shared(out_value, &dmat);
        let od_c = copy_if_shared(out_deriv, &dmat);
        let mats: &[Matrix] = &self.matrices;
        let cmp = self.computation;
        step.in_value = iv_c
            .as_ref()
            .map_or_else(|| view_of(mats, cmp, in_value), Matrix::view);
        step.out_value = ov_c
            .as_ref()
            .map_or_else(|| view_of(mats, cmp, out_value), Matrix::view);
        step.out_deriv = od_c
            .as_ref()
            .map_or_else(|| view_of(mats, cmp, out_deriv), Matrix::view);
        step.in_deriv = Some(sub_view_mut(&mut dmat, &di));
        comp.backprop(step);
        self.matrices[di.matrix] = dmat;
        Ok(())
    }

    fn accept(&mut self, s: usize, node: usize, backward: bool) -> Result<()> {
        let i = self.sm(s);
        let name = self
            .nnet
            .get()
            .node_names
            .get(node)
            .map_or("?", |n| n.as_str());
        let what = if backward {
            "output derivative"
        } else {
            "input"
        };
        let m = self.given[backward as usize]
            .remove(&node)
            .ok_or_else(|| Error::Compute(format!("no {what} was supplied for node '{name}'")))?;
        if m.num_rows() != i.num_rows || m.num_cols() != i.num_cols {
            return Err(Error::Compute(format!(
                "the {what} for node '{name}' is {}x{}, but the computation expects {}x{}",
                m.num_rows(),
                m.num_cols(),
                i.num_rows,
                i.num_cols
            )));
        }
        let whole = self.computation.is_whole(s);
        if whole {
            let old = std::mem::replace(&mut self.matrices[i.matrix], m);
            self.release(old);
        } else {
            sub_view_mut(&mut self.matrices[i.matrix], &i).copy_from(m.view());
            self.release(m);
        }
        Ok(())
    }

    fn provide(&mut self, idx: usize, s: usize, node: usize, backward: bool) {
        let i = self.sm(s);
        let whole = self.computation.is_whole(s);
        let m = if whole && self.can_take.get(idx).copied().unwrap_or(false) {
            std::mem::take(&mut self.matrices[i.matrix])
        } else {
            sub_view(&self.matrices[i.matrix], &i).to_matrix()
        };
        self.provided[backward as usize].insert(node, m);
    }
}

/// Hands a matrix this thread is done with (an output taken from a computation, once
/// copied) to the pool the next computations on this thread allocate from.
pub fn recycle(m: Matrix) {
    if m.capacity() > 0 {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_MAX_BUFFERS {
                p.push((m.capacity(), m));
            }
        });
    }
}

impl Drop for NnetComputer<'_> {
    /// Hands every matrix still held, and the pool, to the next computer on this thread.
    fn drop(&mut self) {
        let mut pool = std::mem::take(&mut self.pool);
        let held = std::mem::take(&mut self.matrices);
        for m in held.into_iter().chain([std::mem::take(&mut self.scratch)]) {
            if m.capacity() > 0 && pool.len() < POOL_MAX_BUFFERS {
                pool.push((m.capacity(), m));
            }
        }
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            let room = POOL_MAX_BUFFERS.saturating_sub(p.len());
            p.extend(pool.into_iter().take(room));
        });
    }
}

/// A view of sub-matrix `s` of `matrices` (0 = empty view).
/// The saved rows of a component's steps whose parameter update is consolidated (Kaldi's
/// `ConsolidateModelUpdate`, on by default in its trainer): a recurrent network runs a
/// layer's backprop once per time step, and natural gradient must see the rows of the whole
/// minibatch in one update, not a handful per step (its statistics and its rescaling differ).
/// Each step still computes its input derivative at once; the update waits for the end of
/// the backward pass.
#[derive(Default)]
struct PendingUpdate {
    in_value: Vec<Matrix>,
    out_value: Vec<Matrix>,
    out_deriv: Vec<Matrix>,
}

impl PendingUpdate {
    fn push(&mut self, (i, o, d): (Matrix, Matrix, Matrix)) {
        self.in_value.push(i);
        self.out_value.push(o);
        self.out_deriv.push(d);
    }

    /// The rows of all steps, step after step.
    fn concatenated(&self) -> (Matrix, Matrix, Matrix) {
        fn cat(parts: &[Matrix]) -> Matrix {
            let rows: usize = parts.iter().map(|m| m.num_rows()).sum();
            let cols = parts.iter().map(|m| m.num_cols()).max().unwrap_or(0);
            if rows == 0 || cols == 0 {
                return Matrix::default();
            }
            let mut out = Matrix::zeros(rows, cols);
            let mut r = 0;
            for m in parts {
                if m.num_rows() > 0 && m.num_cols() == cols {
                    out.sub_mut(r, m.num_rows(), 0, cols).copy_from(m.view());
                }
                r += m.num_rows();
            }
            out
        }
        (
            cat(&self.in_value),
            cat(&self.out_value),
            cat(&self.out_deriv),
        )
    }
}

/// Components whose update is consolidated: simple ones (rows independent, no precomputed
/// indexes or memos) with parameters that are updated by more than one Backprop command.
fn components_to_consolidate(comp: &NnetComputation, nnet: &Nnet) -> Vec<bool> {
    let mut count = vec![0usize; nnet.components.len()];
    for cmd in &comp.commands {
        if let Command::Backprop(b) = cmd {
            if let Some(n) = count.get_mut(b.component).filter(|_| b.update) {
                *n += 1;
            }
        }
    }
    nnet.components
        .iter()
        .zip(&count)
        .map(|(c, &n)| {
            let p = c.properties();
            n > 1
                && c.as_updatable().is_some()
                && p.has(Properties::SIMPLE)
                && !p.has(Properties::USES_MEMO)
        })
        .collect()
}

fn view_of<'m>(matrices: &'m [Matrix], comp: &NnetComputation, s: usize) -> MatView<'m> {
    if s == 0 {
        return MatView::from_slice(&[], 0, 0);
    }
    let i = &comp.submatrices[s];
    sub_view(&matrices[i.matrix], i)
}

#[inline]
fn sub_view<'m>(m: &'m Matrix, i: &SubMatrixInfo) -> MatView<'m> {
    m.sub(i.row_offset, i.num_rows, i.col_offset, i.num_cols)
}

#[inline]
fn sub_view_mut<'m>(m: &'m mut Matrix, i: &SubMatrixInfo) -> MatViewMut<'m> {
    m.sub_mut(i.row_offset, i.num_rows, i.col_offset, i.num_cols)
}

/// Copies `v` into `dst`, reusing `dst`'s buffer.
fn copy_into(dst: &mut Matrix, v: MatView<'_>) {
    if dst.num_rows() != v.num_rows() || dst.num_cols() != v.num_cols() {
        // Every element is written next.
        dst.resize_undefined(v.num_rows(), v.num_cols());
    }
    dst.view_mut().copy_from(v);
}

/// `d[i] += alpha · Σ s[start..end)` (AddRowRanges with a scale).
fn add_row_ranges_scaled(
    d: &mut MatViewMut<'_>,
    s: MatView<'_>,
    ranges: &[(i32, i32)],
    alpha: Real,
) {
    if alpha == 1.0 {
        d.add_row_ranges(s, ranges);
    } else {
        d.add_row_ranges_scaled(alpha, s, ranges);
    }
}

/// For each command: whether a ProvideOutput's matrix is untouched afterwards (except for
/// deallocation), so it may be moved out.
fn compute_can_take(comp: &NnetComputation, accesses: &[CommandAccesses]) -> Vec<bool> {
    // Last command index touching each matrix other than by DeallocMatrix.
    let mut last_use = vec![None::<usize>; comp.matrices.len()];
    for (k, acc) in accesses.iter().enumerate() {
        for m in acc.matrices_used(comp) {
            last_use[m] = Some(k);
        }
    }
    accesses
        .iter()
        .enumerate()
        .map(|(k, acc)| match (acc.io, acc.operands.first()) {
            (Some(NodeIo::Provide { .. }), Some(o)) => {
                last_use[comp.submatrices[o.submatrix].matrix] == Some(k)
            }
            _ => false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::computation::{MatrixInfo, RowsCommand};
    use crate::nnet::descriptor::{Descriptor, ForwardingDescriptor, SumDescriptor};
    use crate::nnet::{NetworkNode, ObjectiveType};

    /// input (dim 2) → output, with no components: enough to exercise data movement.
    fn tiny_nnet() -> Nnet {
        Nnet {
            node_names: vec!["input".into(), "output".into()],
            nodes: vec![
                NetworkNode::Input { dim: 2 },
                NetworkNode::Descriptor {
                    descriptor: Descriptor {
                        parts: vec![SumDescriptor::Simple(ForwardingDescriptor::Simple {
                            node: 0,
                            scale: 1.0,
                        })],
                    },
                    objective: ObjectiveType::Linear,
                },
            ],
            component_names: vec![],
            components: vec![],
        }
    }

    fn whole(c: &mut NnetComputation, m: usize) -> usize {
        c.whole_submatrix(m)
    }

    #[test]
    fn row_commands_follow_their_definitions() {
        let nnet = tiny_nnet();
        let mut c = NnetComputation::default();
        let m1 = c.new_matrix(4, 2);
        let m2 = c.new_matrix(3, 2);
        let m3 = c.new_matrix(3, 2);
        let s1 = whole(&mut c, m1);
        let s2 = whole(&mut c, m2);
        let s3 = whole(&mut c, m3);
        // Rows 1..3 of m2.
        let s2b = c.new_submatrix(SubMatrixInfo {
            matrix: m2,
            row_offset: 1,
            num_rows: 2,
            col_offset: 0,
            num_cols: 2,
        });
        c.indexes_multi = vec![
            vec![(s2 as i32, 0), (s2b as i32, 1), (-1, -1), (s2b as i32, 1)],
            vec![(s1 as i32, 3), (-1, -1), (s1 as i32, 0)],
        ];
        c.indexes_ranges = vec![vec![(0, 2), (-1, -1), (1, 4)]];
        c.commands = vec![
            Command::AllocMatrix { m: m1 },
            Command::AllocMatrix { m: m2 },
            Command::AllocMatrix { m: m3 },
            Command::AcceptInput { s: s1, node: 0 },
            // m2[0] = 2·in[0]; m2[2] = 2·in[1] then += 2·in[3] (the copy overwrites, last wins)
            Command::CopyToRowsMulti {
                src: s1,
                indexes_multi: 0,
                alpha: 2.0,
            },
            Command::AddToRowsMulti {
                src: s1,
                indexes_multi: 0,
                alpha: 1.0,
            },
            // m3[i] += Σ in[ranges[i]] (scaled 0.5)
            Command::AddRowRanges(RowsCommand {
                dst: s3,
                src: s1,
                indexes: 0,
                alpha: 0.5,
            }),
            // m3[i] += in[(3, -, 0)[i]] via AddRowsMulti
            Command::AddRowsMulti {
                dst: s3,
                indexes_multi: 1,
                alpha: 1.0,
            },
            Command::SwapMatrix { a: m2, b: m3 },
            Command::ProvideOutput { s: s2, node: 1 },
            Command::NoOperationMarker,
        ];
        let input = Matrix::from_rows(&[
            vec![1.0, 2.0],
            vec![3.0, 4.0],
            vec![5.0, 6.0],
            vec![7.0, 8.0],
        ]);
        let mut comp = NnetComputer::new(&c, &nnet, None);
        comp.accept_input("input", input.clone()).expect("accept");
        comp.run_forward().expect("run");
        // After the swap, matrix m2 holds what was built in m3.
        let out = comp.output("output").expect("output");
        let r = |i: usize| input.row_to_vec(i);
        let add = |a: Vec<f32>, b: Vec<f32>, s: f32| -> Vec<f32> {
            a.iter().zip(&b).map(|(x, y)| x + s * y).collect()
        };
        let want0 = add(add(r(0), r(1), 1.0), vec![0.0, 0.0], 0.0);
        let want0: Vec<f32> = add(want0.iter().map(|x| x * 0.5).collect(), r(3), 1.0);
        let want1 = [0.0f32, 0.0];
        let want2: Vec<f32> = add(
            add(add(r(1), r(2), 1.0), r(3), 1.0)
                .iter()
                .map(|x| x * 0.5)
                .collect(),
            r(0),
            1.0,
        );
        assert_eq!(out.row_to_vec(0), want0);
        assert_eq!(out.row_to_vec(1), want1);
        assert_eq!(out.row_to_vec(2), want2);
        // And m3 (the old m2), built by the scatter commands:
        //   m2[0] = 2·in[0] + in[0]; m2[2] = 2·in[3] + in[1] + in[3]; m2[1] untouched (0).
        let old_m2 = &comp.matrices[m3];
        assert_eq!(old_m2.row_to_vec(0), [3.0, 6.0]);
        assert_eq!(old_m2.row_to_vec(1), [0.0, 0.0]);
        assert_eq!(old_m2.row_to_vec(2), add(add(r(3), r(1), 1.0), r(3), 2.0));
    }

    #[test]
    fn malformed_computations_are_errors_not_panics() {
        let nnet = tiny_nnet();
        let mut c = NnetComputation::default();
        let m1 = c.new_matrix(2, 2);
        let s1 = whole(&mut c, m1);
        c.indexes = vec![vec![0, 5]];
        c.commands = vec![
            Command::AllocMatrix { m: m1 },
            Command::CopyRows(RowsCommand {
                dst: s1,
                src: s1,
                indexes: 0,
                alpha: 1.0,
            }),
        ];
        let mut comp = NnetComputer::new(&c, &nnet, None);
        assert!(comp.run_forward().is_err());
        drop(comp);
        c.matrices.push(MatrixInfo {
            num_rows: 1,
            num_cols: 1,
        });
        c.commands = vec![Command::AllocMatrix { m: 9 }];
        let mut comp = NnetComputer::new(&c, &nnet, None);
        assert!(comp.run_forward().is_err());
        drop(comp);
        // Wrong input shape.
        c.commands = vec![
            Command::AllocMatrix { m: m1 },
            Command::AcceptInput { s: s1, node: 0 },
        ];
        let mut comp = NnetComputer::new(&c, &nnet, None);
        comp.accept_input("input", Matrix::zeros(3, 2))
            .expect("accept");
        let e = comp
            .run_forward()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("3x2"), "{e}");
    }
    /// A matrix too large for memory (here past 2^64 bytes, a damaged size) is an error
    /// before anything is allocated, not an aborted process.
    #[test]
    fn oversized_matrices_are_refused_before_allocation() {
        let nnet = tiny_nnet();
        let mut c = NnetComputation::default();
        let m = c.new_matrix(1 << 40, 1 << 30);
        c.commands = vec![Command::AllocMatrix { m }];
        let mut comp = NnetComputer::new(&c, &nnet, None);
        let e = comp.run_forward().unwrap_err().to_string();
        assert!(e.contains("matrix m1") && e.contains("memory limit"), "{e}");
    }
}
