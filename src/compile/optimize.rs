//! The optimizer (Kaldi's `Optimize`, nnet-optimize.h): rewrites a compiled
//! [`NnetComputation`] into an equivalent one that copies, zeroes and holds less memory.
//!
//! The compiler gives every step its own matrix, allocates (and zeroes) every matrix before
//! the first command and frees them all after the last. A plain TDNN layer then costs an
//! affine product plus three whole-matrix copies (each component node's input is a
//! descriptor step of its own) and the zeroing of five matrices. The passes here, each
//! named after the Kaldi option that does the same job:
//!
//! - **remove_assignments**: `A = B` (a whole-matrix copy) where A is untouched before and
//!   neither is written after: A becomes another name for B and the copy goes.
//! - **propagate_in_place**: `B = f(A)` for a component that can work in place, where A is
//!   not needed afterwards and B is untouched before: B becomes A, and the component runs
//!   in place.
//! - **initialize_undefined**: a matrix whose first use overwrites all of it is allocated
//!   without zeroing ([`Command::AllocMatrixUndefined`]).
//! - **move_sizing_commands**: each matrix is allocated just before its first use and freed
//!   just after its last, so a freed buffer is reused (still in cache) by the next one.
//!
//! Kaldi's order, with the passes in their own modules: convert-addition, the row-op passes,
//! extend-matrices, the merging above, initialize-undefined, move-sizing-commands,
//! allocate-from-other, memory-compression-level (the last three skipped for looped
//! computations, `OptimizeOptions::looped`).
//!
//! The analysis is per matrix and conservative: it only needs, for every command, which
//! matrices it reads, fully overwrites or otherwise modifies ([`super::analysis`]). Each pass
//! leaves a complete computation ([`optimize_observed`] shows each one; tests run the
//! checker on it). Tests compare optimized and
//! unoptimized computations (values, input derivatives, parameter gradients) on hundreds of
//! random networks, with "undefined" matrices filled with NaN so any read of one shows.

use super::analysis::{command_accesses, rename_matrices, rename_submatrices, Access, MatrixOp};
use super::computation::{Command, MatrixDebugInfo, MatrixInfo, NnetComputation, SubMatrixInfo};
use super::request::ComputationRequest;
use crate::nnet::component::Properties;
use crate::nnet::Nnet;

/// Which optimizations to run (Kaldi's `NnetOptimizeOptions`, the subset we implement).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptimizeOptions {
    /// Master switch (`--optimize` in Kaldi's tools).
    pub optimize: bool,
    pub remove_assignments: bool,
    pub propagate_in_place: bool,
    pub initialize_undefined: bool,
    pub move_sizing_commands: bool,
    /// `--optimization.convert-addition` (`super::convert_addition`).
    pub convert_addition: bool,
    /// `--optimization.snip-row-ops`, `split-row-ops`, `optimize-row-ops`
    /// (`super::row_ops`).
    pub snip_row_ops: bool,
    pub split_row_ops: bool,
    pub optimize_row_ops: bool,
    /// `--optimization.backprop-in-place`: the backprop twin of propagate_in_place.
    pub backprop_in_place: bool,
    /// `--optimization.min-deriv-time`: derivatives at smaller t are zero (i32::MIN: none).
    pub min_deriv_time: i32,
    /// `--optimization.max-deriv-time`: derivatives at larger t are zero (i32::MAX: none).
    pub max_deriv_time: i32,
    /// `--optimization.max-deriv-time-relative`: if set (not i32::MAX), replaces
    /// `max_deriv_time` by this plus the request's largest output t.
    pub max_deriv_time_relative: i32,
    /// `--optimization.extend-matrices` (`super::extend_matrices`).
    pub extend_matrices: bool,
    /// `--optimization.allocate-from-other` (`super::allocate_from_other`).
    pub allocate_from_other: bool,
    /// `--optimization.memory-compression-level` (`super::memory_compression`): 0 off,
    /// 1 (default) the exact compression; higher levels act as 1.
    pub memory_compression_level: i32,
    /// The computation is one of a looped computation's chunks (Kaldi's hidden
    /// `optimize_looped_computation`): extend-matrices, allocate-from-other and memory
    /// compression are skipped, as in Kaldi.
    pub looped: bool,
}

impl Default for OptimizeOptions {
    fn default() -> Self {
        OptimizeOptions {
            optimize: true,
            remove_assignments: true,
            propagate_in_place: true,
            initialize_undefined: true,
            move_sizing_commands: true,
            convert_addition: true,
            snip_row_ops: true,
            split_row_ops: true,
            optimize_row_ops: true,
            backprop_in_place: true,
            min_deriv_time: super::deriv_time::NO_MIN_DERIV_TIME,
            max_deriv_time: super::deriv_time::NO_MAX_DERIV_TIME,
            max_deriv_time_relative: super::deriv_time::NO_MAX_DERIV_TIME,
            extend_matrices: true,
            allocate_from_other: true,
            memory_compression_level: 1,
            looped: false,
        }
    }
}

/// Kaldi's names of the passes that can be switched off one by one, in the order they run
/// (tests switch each off to name the pass behind a difference).
pub const PASS_OPTIONS: &[&str] = &[
    "convert-addition",
    "snip-row-ops",
    "split-row-ops",
    "optimize-row-ops",
    "extend-matrices",
    "remove-assignments",
    "propagate-in-place",
    "backprop-in-place",
    "initialize-undefined",
    "move-sizing-commands",
    "allocate-from-other",
    "memory-compression-level",
];

impl OptimizeOptions {
    /// Switches the pass named `name` (one of [`PASS_OPTIONS`]) on or off; false if there is
    /// no such pass. `memory-compression-level` goes to 1 or 0.
    pub fn set_pass(&mut self, name: &str, on: bool) -> bool {
        if name == "memory-compression-level" {
            self.memory_compression_level = i32::from(on);
            return true;
        }
        let flag = match name {
            "convert-addition" => &mut self.convert_addition,
            "snip-row-ops" => &mut self.snip_row_ops,
            "split-row-ops" => &mut self.split_row_ops,
            "optimize-row-ops" => &mut self.optimize_row_ops,
            "remove-assignments" => &mut self.remove_assignments,
            "propagate-in-place" => &mut self.propagate_in_place,
            "backprop-in-place" => &mut self.backprop_in_place,
            "initialize-undefined" => &mut self.initialize_undefined,
            "move-sizing-commands" => &mut self.move_sizing_commands,
            "extend-matrices" => &mut self.extend_matrices,
            "allocate-from-other" => &mut self.allocate_from_other,
            _ => return false,
        };
        *flag = on;
        true
    }

    /// True if any derivative-time limit is set (the computation then needs debug info).
    pub fn limits_deriv_times(&self) -> bool {
        self.min_deriv_time != super::deriv_time::NO_MIN_DERIV_TIME
            || self.max_deriv_time != super::deriv_time::NO_MAX_DERIV_TIME
            || self.max_deriv_time_relative != super::deriv_time::NO_MAX_DERIV_TIME
    }
}

/// Kaldi's `Optimize` for a computation compiled from `request`: first the derivative-time
/// limits `opts` sets (they change the gradients, so they apply even with `optimize` off; the
/// computation must carry matrix debug info), then [`optimize`].
pub fn optimize_for_request(
    nnet: &Nnet,
    request: &ComputationRequest,
    comp: &mut NnetComputation,
    opts: &OptimizeOptions,
) -> crate::error::Result<()> {
    optimize_for_request_observed(nnet, request, comp, opts, &mut |_, _| {})
}

/// [`optimize_for_request`] with [`optimize_observed`]'s callback (the limit is the pass
/// "limit_deriv_times").
pub fn optimize_for_request_observed(
    nnet: &Nnet,
    request: &ComputationRequest,
    comp: &mut NnetComputation,
    opts: &OptimizeOptions,
    after_pass: &mut dyn FnMut(&str, &NnetComputation),
) -> crate::error::Result<()> {
    if let Some((min, max)) = super::deriv_time::deriv_time_range(
        opts.min_deriv_time,
        opts.max_deriv_time,
        opts.max_deriv_time_relative,
        request,
    ) {
        super::deriv_time::limit_derivative_times(nnet, comp, min, max)
            .map_err(crate::error::Error::Compute)?;
        after_pass("limit_deriv_times", comp);
    }
    optimize_observed(nnet, comp, opts, after_pass);
    Ok(())
}

/// Runs the optimizations `opts` selects on `comp` (compiled for `nnet`). The
/// derivative-time limits need the request: [`optimize_for_request`] applies them.
///
/// Computations with loops, swaps or compression (which the compiler does not produce) are
/// left alone.
pub fn optimize(nnet: &Nnet, comp: &mut NnetComputation, opts: &OptimizeOptions) {
    optimize_observed(nnet, comp, opts, &mut |_, _| {});
}

/// [`optimize`], calling `after_pass(pass name, computation)` after every pass that ran; each
/// computation it sees is complete and equivalent to the input.
pub fn optimize_observed(
    nnet: &Nnet,
    comp: &mut NnetComputation,
    opts: &OptimizeOptions,
    after_pass: &mut dyn FnMut(&str, &NnetComputation),
) {
    if !opts.optimize
        || comp.matrices.len() <= 1
        || comp.commands.iter().any(|c| {
            matches!(
                c,
                Command::SwapMatrix { .. }
                    | Command::CompressMatrix { .. }
                    | Command::DecompressMatrix { .. }
                    | Command::GotoLabel { .. }
                    | Command::NoOperationLabel
                    | Command::AllocMatrixUndefined { .. }
            )
        })
    {
        return;
    }
    if opts.convert_addition {
        super::convert_addition::convert_addition_to_assignment(nnet, comp);
        after_pass("convert_addition", comp);
    }
    if opts.snip_row_ops || opts.split_row_ops || opts.optimize_row_ops {
        use super::row_ops;
        if opts.snip_row_ops {
            row_ops::snip_row_ops(comp);
            after_pass("snip_row_ops", comp);
        }
        if opts.split_row_ops {
            row_ops::split_row_ops(comp);
            after_pass("split_row_ops", comp);
        }
        if opts.optimize_row_ops {
            row_ops::replace_row_with_matrix_ops(comp);
            after_pass("optimize_row_ops", comp);
        }
        row_ops::drop_unused_tables(comp);
    }
    if opts.extend_matrices && !opts.looped {
        super::extend_matrices::extend_matrices(comp);
        after_pass("extend_matrices", comp);
    }
    let mut o = Optimizer::new(nnet, comp);
    if opts.remove_assignments || opts.propagate_in_place || opts.backprop_in_place {
        while o.merge_variables(
            opts.remove_assignments,
            opts.propagate_in_place,
            opts.backprop_in_place,
        ) {}
        after_pass(
            "remove_assignments/propagate_in_place/backprop_in_place",
            o.comp,
        );
    }
    let undefined = if opts.initialize_undefined {
        let undefined = o.undefined_at_alloc();
        o.mark_undefined(&undefined);
        after_pass("initialize_undefined", o.comp);
        undefined
    } else {
        vec![false; o.comp.matrices.len()]
    };
    o.rebuild_sizing(opts.move_sizing_commands, &undefined);
    after_pass("move_sizing_commands", o.comp);
    o.remove_unused_matrices();
    if opts.allocate_from_other && !opts.looped {
        super::allocate_from_other::remove_unnecessary_allocation(comp);
        after_pass("allocate_from_other", comp);
    }
    renumber_submatrices(comp);
    after_pass("renumber", comp);
    if opts.memory_compression_level > 0 && !opts.looped {
        let level = opts.memory_compression_level;
        super::memory_compression::optimize_memory_compression(nnet, comp, level);
        after_pass("memory_compression", comp);
    }
}

/// After merging, several sub-matrices describe the same rectangle and some are unused:
/// keeps one of each in use (in order of first appearance), so the printed computation
/// reads naturally and an in-place command names the same sub-matrix twice.
fn renumber_submatrices(comp: &mut NnetComputation) {
    let mut new_of: std::collections::HashMap<SubMatrixInfo, usize> = Default::default();
    let mut list = vec![comp.submatrices[0]];
    let old = std::mem::take(&mut comp.submatrices);
    let mut map = |s: usize| {
        if s == 0 || s >= old.len() {
            return s;
        }
        let info = old[s];
        *new_of.entry(info).or_insert_with(|| {
            list.push(info);
            list.len() - 1
        })
    };
    for c in &mut comp.commands {
        rename_submatrices(c, &mut map);
    }
    for v in &mut comp.indexes_multi {
        for p in v.iter_mut() {
            if p.0 > 0 {
                p.0 = map(p.0 as usize) as i32;
            }
        }
    }
    comp.submatrices = list;
}

struct Optimizer<'a> {
    nnet: &'a Nnet,
    comp: &'a mut NnetComputation,
    /// Per matrix: (command, sub-matrix, access) in command order (no Alloc/Dealloc).
    accesses: Vec<Vec<(usize, usize, Access)>>,
    /// Per matrix: position of its AllocMatrix / DeallocMatrix (None: none).
    alloc_at: Vec<Option<usize>>,
    dealloc_at: Vec<Option<usize>>,
    /// False once a matrix has been merged into another.
    live: Vec<bool>,
    /// Per matrix: the sub-matrices of it (so a merge renames only those).
    submatrices_of: Vec<Vec<usize>>,
}

impl<'a> Optimizer<'a> {
    fn new(nnet: &'a Nnet, comp: &'a mut NnetComputation) -> Self {
        let nm = comp.matrices.len();
        let mut accesses = vec![Vec::new(); nm];
        let mut alloc_at = vec![None; nm];
        let mut dealloc_at = vec![None; nm];
        for (k, cmd) in comp.commands.iter().enumerate() {
            let acc = command_accesses(nnet, cmd);
            match acc.matrix {
                MatrixOp::Alloc { m, .. } if m < nm => alloc_at[m] = Some(k),
                MatrixOp::Dealloc { m } if m < nm => dealloc_at[m] = Some(k),
                _ => {}
            }
            for (s, a) in acc.submatrices(comp) {
                let m = comp.submatrices[s].matrix;
                if m < nm {
                    accesses[m].push((k, s, a));
                }
            }
        }
        let mut submatrices_of = vec![Vec::new(); nm];
        for (s, info) in comp.submatrices.iter().enumerate().skip(1) {
            if info.matrix < nm {
                submatrices_of[info.matrix].push(s);
            }
        }
        Optimizer {
            nnet,
            comp,
            accesses,
            alloc_at,
            dealloc_at,
            live: vec![true; nm],
            submatrices_of,
        }
    }

    fn matrix_of(&self, s: usize) -> usize {
        self.comp.submatrices[s].matrix
    }

    /// True if sub-matrix `s` is all of its matrix.
    fn is_whole(&self, s: usize) -> bool {
        self.comp.is_whole(s)
    }

    fn same_shape(&self, a: usize, b: usize) -> bool {
        self.comp.matrices[a] == self.comp.matrices[b]
    }

    /// Renames matrix `x` to `y` everywhere (sub-matrices, accesses, sizing) and drops the
    /// accesses command `k` made to either (the caller rewrites that command).
    /// The sizing commands stay a valid program: `y` takes the earlier allocation and the
    /// later deallocation (none if either was never freed); the others become no-ops.
    fn merge(&mut self, x: usize, y: usize, k: usize) {
        let moved = std::mem::take(&mut self.submatrices_of[x]);
        for &s in &moved {
            self.comp.submatrices[s].matrix = y;
        }
        self.submatrices_of[y].extend(moved);
        let mut ax = std::mem::take(&mut self.accesses[x]);
        ax.append(&mut self.accesses[y]);
        ax.retain(|&(c, _, _)| c != k);
        ax.sort_by_key(|&(c, _, _)| c);
        self.accesses[y] = ax;
        let old_sizing = [
            self.alloc_at[x],
            self.alloc_at[y],
            self.dealloc_at[x],
            self.dealloc_at[y],
        ];
        self.alloc_at[y] = match (self.alloc_at[x], self.alloc_at[y]) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A matrix the compiler never frees (an output, a requested derivative) stays so.
        self.dealloc_at[y] = match (self.dealloc_at[x], self.dealloc_at[y]) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        for at in old_sizing.into_iter().flatten() {
            self.comp.commands[at] = Command::NoOperation;
        }
        if let Some(at) = self.dealloc_at[y] {
            self.comp.commands[at] = Command::DeallocMatrix { m: y };
        }
        if let Some(at) = self.alloc_at[y] {
            self.comp.commands[at] = Command::AllocMatrix { m: y };
        }
        self.alloc_at[x] = None;
        self.dealloc_at[x] = None;
        self.live[x] = false;
    }

    /// initialize_undefined's rewrite: the allocations of the `undefined` matrices no longer
    /// zero them.
    fn mark_undefined(&mut self, undefined: &[bool]) {
        for (m, &u) in undefined.iter().enumerate() {
            if let (true, Some(at)) = (u, self.alloc_at[m]) {
                self.comp.commands[at] = Command::AllocMatrixUndefined { m };
            }
        }
    }

    /// remove_assignments, propagate_in_place and backprop_in_place, one pass in command
    /// order; true if anything merged (Kaldi repeats until nothing does).
    fn merge_variables(&mut self, assignments: bool, in_place: bool, backprop: bool) -> bool {
        let mut merged = false;
        for k in 0..self.comp.commands.len() {
            match self.comp.commands[k] {
                Command::MatrixCopy { dst, src, alpha } if assignments && alpha == 1.0 => {
                    if dst == 0 || src == 0 || !self.is_whole(dst) || !self.is_whole(src) {
                        continue;
                    }
                    let (a, b) = (self.matrix_of(dst), self.matrix_of(src));
                    if a == b || !self.same_shape(a, b) {
                        continue;
                    }
                    let untouched_before = self.accesses[a].iter().all(|&(c, _, _)| c >= k);
                    let unwritten_after = |m: usize| {
                        self.accesses[m]
                            .iter()
                            .all(|&(c, _, acc)| c <= k || acc == Access::Read)
                    };
                    if untouched_before && unwritten_after(a) && unwritten_after(b) {
                        self.merge(a, b, k);
                        self.comp.commands[k] = Command::NoOperation;
                        merged = true;
                    }
                }
                Command::Propagate(p) if in_place => {
                    let flags = (Properties::PROPAGATE_IN_PLACE, Properties::PROPAGATE_ADDS);
                    let (src, dst) = (p.input, p.output);
                    if self.merge_operands(k, p.component, flags, (src, dst), [0, 0]) {
                        if let Command::Propagate(q) = &mut self.comp.commands[k] {
                            q.output = src;
                        }
                        merged = true;
                    }
                }
                Command::Backprop(b) if backprop => {
                    let flags = (Properties::BACKPROP_IN_PLACE, Properties::BACKPROP_ADDS);
                    // The values the backprop reads must not share the derivative's storage.
                    let values = [b.in_value, b.out_value];
                    let (src, dst) = (b.out_deriv, b.in_deriv);
                    if self.merge_operands(k, b.component, flags, (src, dst), values) {
                        if let Command::Backprop(q) = &mut self.comp.commands[k] {
                            q.in_deriv = src;
                        }
                        merged = true;
                    }
                }
                _ => {}
            }
        }
        merged
    }

    /// propagate_in_place / backprop_in_place for command `k` of `component`: whether its
    /// output operand `dst` may become its input `src` (both nonzero and distinct, `flags` as
    /// for [`allows_in_place`](Self::allows_in_place), matrices of the same shape that
    /// `values`, the other operands read, do not share), merging the two matrices if so.
    /// The caller then renames the command's operand.
    fn merge_operands(
        &mut self,
        k: usize,
        component: usize,
        flags: (Properties, Properties),
        (src, dst): (usize, usize),
        values: [usize; 2],
    ) -> bool {
        if src == 0 || dst == 0 || src == dst || !self.allows_in_place(component, flags, src, dst) {
            return false;
        }
        let (a, b) = (self.matrix_of(src), self.matrix_of(dst));
        let mut values = values
            .into_iter()
            .filter(|&s| s != 0)
            .map(|s| self.matrix_of(s));
        if a == b || !self.same_shape(a, b) || values.any(|m| m == a || m == b) {
            return false;
        }
        self.merge_in_place(k, src, a, b)
    }

    /// Whether command `component` may run in place from sub-matrix `src` into `dst`: it has
    /// the in-place flag of `flags.0` and not the "adds" flag of `flags.1`, and both
    /// sub-matrices are whole matrices.
    fn allows_in_place(
        &self,
        component: usize,
        flags: (Properties, Properties),
        src: usize,
        dst: usize,
    ) -> bool {
        let props = self
            .nnet
            .components
            .get(component)
            .map_or(Properties(0), |c| c.properties());
        props.has(flags.0) && !props.has(flags.1) && self.is_whole(src) && self.is_whole(dst)
    }

    /// Command `k` reads matrix `a` (through sub-matrix `src`) and writes matrix `b`: if `b`
    /// is untouched before `k` and `a` unused after it, `b` becomes `a` (the command then
    /// reads and writes `src`; the caller renames its output). Returns whether it merged.
    fn merge_in_place(&mut self, k: usize, src: usize, a: usize, b: usize) -> bool {
        let b_untouched_before = self.accesses[b].iter().all(|&(c, _, _)| c >= k);
        let a_unused_after = self.accesses[a].iter().all(|&(c, _, _)| c <= k);
        if !(b_untouched_before && a_unused_after) {
            return false;
        }
        self.merge(b, a, k);
        self.accesses[a].push((k, src, Access::ReadWrite));
        self.accesses[a].sort_by_key(|&(c, _, _)| c);
        true
    }

    /// Per matrix: true if its first uses overwrite all of it before anything reads it, so
    /// zeroing it at allocation is wasted.
    fn undefined_at_alloc(&self) -> Vec<bool> {
        let nm = self.comp.matrices.len();
        let mut ans = vec![false; nm];
        for (m, undefined) in ans.iter_mut().enumerate().skip(1) {
            if !self.live[m] || self.alloc_at[m].is_none() {
                continue;
            }
            let MatrixInfo { num_rows, num_cols } = self.comp.matrices[m];
            let mut covered = vec![false; num_cols];
            let mut left = num_cols;
            let acc = &self.accesses[m];
            let mut i = 0;
            'walk: while i < acc.len() && left > 0 {
                let k = acc[i].0;
                let mut j = i;
                while j < acc.len() && acc[j].0 == k {
                    j += 1;
                }
                // A command that also reads or modifies the matrix ends the walk before its
                // writes count.
                if acc[i..j].iter().any(|&(_, _, a)| a != Access::Write) {
                    break 'walk;
                }
                for &(_, sub, _) in &acc[i..j] {
                    let info = self.comp.submatrices[sub];
                    if info.row_offset != 0 || info.num_rows != num_rows {
                        break 'walk;
                    }
                    for c in &mut covered[info.col_offset..info.col_offset + info.num_cols] {
                        if !*c {
                            *c = true;
                            left -= 1;
                        }
                    }
                }
                i = j;
            }
            *undefined = left == 0 && num_rows > 0;
        }
        ans
    }

    /// Re-emits the allocation and deallocation commands: at the original places (merged
    /// matrices take the earliest allocation and latest deallocation), or with `late` just
    /// before the first and after the last use. Drops NoOperations left by the merges.
    fn rebuild_sizing(&mut self, late: bool, undefined: &[bool]) {
        let n = self.comp.commands.len();
        let nm = self.comp.matrices.len();
        let mut before: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
        let mut after: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
        for m in 1..nm {
            if !self.live[m] {
                continue;
            }
            let Some(orig_alloc) = self.alloc_at[m] else {
                continue;
            };
            let acc = &self.accesses[m];
            if late && acc.is_empty() {
                continue; // never used: neither allocated nor freed
            }
            let first = if late { acc[0].0 } else { orig_alloc };
            before[first].push(m);
            if let Some(d) = self.dealloc_at[m] {
                let last = if late { acc[acc.len() - 1].0 } else { d };
                after[last].push(m);
            }
        }
        let old = std::mem::take(&mut self.comp.commands);
        let mut cmds = Vec::with_capacity(old.len());
        for (k, c) in old.into_iter().enumerate() {
            for &m in &before[k] {
                cmds.push(if undefined[m] {
                    Command::AllocMatrixUndefined { m }
                } else {
                    Command::AllocMatrix { m }
                });
            }
            match command_accesses(self.nnet, &c).matrix {
                MatrixOp::Alloc { .. } | MatrixOp::Dealloc { .. } => {}
                _ if c == Command::NoOperation => {}
                _ => cmds.push(c),
            }
            for &m in &after[k] {
                cmds.push(Command::DeallocMatrix { m });
            }
        }
        self.comp.commands = cmds;
    }

    /// Renumbers the matrices, dropping those merged away.
    fn remove_unused_matrices(&mut self) {
        let nm = self.comp.matrices.len();
        let mut new_index = vec![0usize; nm];
        let mut matrices = vec![self.comp.matrices[0].clone()];
        let has_debug = self.comp.matrix_debug_info.len() == nm;
        let mut debug = vec![MatrixDebugInfo::default()];
        for (m, new) in new_index.iter_mut().enumerate().skip(1) {
            if self.live[m] {
                *new = matrices.len();
                matrices.push(self.comp.matrices[m].clone());
                if has_debug {
                    debug.push(std::mem::take(&mut self.comp.matrix_debug_info[m]));
                }
            }
        }
        for s in self.comp.submatrices.iter_mut().skip(1) {
            s.matrix = new_index[s.matrix];
        }
        for c in &mut self.comp.commands {
            rename_matrices(c, |m| new_index[m]);
        }
        self.comp.matrices = matrices;
        if has_debug {
            self.comp.matrix_debug_info = debug;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;
    use crate::run::NnetComputer;

    /// With a second output, so hand-made computations can hand out two matrices.
    fn net() -> Nnet {
        crate::testing::relu_nnet(true)
    }

    /// A computation with `n` 3×2 matrices (sub-matrix k = all of matrix k), all allocated
    /// first, then `body`.
    fn computation(n: usize, body: Vec<Command>) -> NnetComputation {
        let mut c = NnetComputation::default();
        for _ in 0..n {
            let m = c.new_matrix(3, 2);
            c.whole_submatrix(m);
        }
        c.commands = (1..=n).map(|m| Command::AllocMatrix { m }).collect();
        c.commands.extend(body);
        c
    }

    fn input() -> Matrix {
        Matrix::from_rows(&[vec![1.0, -2.0], vec![-3.0, 4.0], vec![5.0, -6.0]])
    }

    /// Runs `c` on `input()`; returns the outputs of `output` and `output2` (empty if absent).
    fn run(nnet: &Nnet, c: &NnetComputation) -> (Matrix, Matrix) {
        let mut comp = NnetComputer::new(c, nnet, None).poison_undefined();
        comp.accept_input("input", input()).unwrap();
        comp.run_forward().unwrap();
        let get = |name| comp.output(name).cloned().unwrap_or_default();
        (get("output"), get("output2"))
    }

    fn optimized(nnet: &Nnet, c: &NnetComputation) -> NnetComputation {
        let mut o = NnetComputation {
            matrices: c.matrices.clone(),
            submatrices: c.submatrices.clone(),
            commands: c.commands.clone(),
            ..Default::default()
        };
        optimize(nnet, &mut o, &OptimizeOptions::default());
        o
    }

    fn count(c: &NnetComputation, f: impl Fn(&Command) -> bool) -> usize {
        c.commands.iter().filter(|x| f(x)).count()
    }

    /// Node indexes of input, output and output2, and the relu component and its node.
    fn ids(nnet: &Nnet) -> (usize, usize, usize, usize, usize) {
        (
            nnet.node_index("input").unwrap(),
            nnet.node_index("output").unwrap(),
            nnet.node_index("output2").unwrap(),
            nnet.component_index("relu").unwrap(),
            nnet.node_index("relu").unwrap(),
        )
    }

    /// `dst = src` (whole sub-matrices).
    fn copy(dst: usize, src: usize) -> Command {
        Command::MatrixCopy {
            dst,
            src,
            alpha: 1.0,
        }
    }

    /// A Propagate of the relu component from sub-matrix `input` to `output`.
    fn relu(c: usize, node: usize, input: usize, output: usize) -> Command {
        crate::testing::propagate_command(c, node, input, output)
    }

    /// The common case: a copy disappears, the relu runs in place, nothing is zeroed, and
    /// every matrix lives only from its first use to its last.
    #[test]
    fn copy_and_in_place_chain() {
        let nnet = net();
        let (i, o, _, r, relu_node) = ids(&nnet);
        let c = computation(
            3,
            vec![
                Command::AcceptInput { s: 1, node: i },
                copy(2, 1),
                relu(r, relu_node, 2, 3),
                Command::ProvideOutput { s: 3, node: o },
                Command::DeallocMatrix { m: 1 },
                Command::DeallocMatrix { m: 2 },
            ],
        );
        let opt = optimized(&nnet, &c);
        assert_eq!(run(&nnet, &opt).0, run(&nnet, &c).0);
        assert_eq!(opt.matrices.len(), 2, "{:?}", opt.commands);
        assert_eq!(count(&opt, |x| matches!(x, Command::MatrixCopy { .. })), 0);
        assert!(opt
            .commands
            .iter()
            .any(|x| matches!(x, Command::Propagate(p) if p.input == p.output)));
        assert_eq!(
            opt.commands,
            vec![
                Command::AllocMatrixUndefined { m: 1 },
                Command::AcceptInput { s: 1, node: i },
                relu(r, relu_node, 1, 1),
                Command::ProvideOutput { s: 1, node: o },
            ]
        );
    }

    /// `A = B` must stay a copy when B is written afterwards.
    #[test]
    fn copy_kept_when_source_changes_later() {
        let nnet = net();
        let (i, o, _, _, _) = ids(&nnet);
        let c = computation(
            2,
            vec![
                Command::AcceptInput { s: 1, node: i },
                copy(2, 1),
                Command::SetConst { s: 1, alpha: 5.0 },
                Command::ProvideOutput { s: 2, node: o },
            ],
        );
        let opt = optimized(&nnet, &c);
        assert_eq!(run(&nnet, &opt).0, input());
        assert_eq!(count(&opt, |x| matches!(x, Command::MatrixCopy { .. })), 1);
    }

    /// `A = B` must stay a copy when A was used before it.
    #[test]
    fn copy_kept_when_destination_used_before() {
        let nnet = net();
        let (i, o, o2, _, _) = ids(&nnet);
        let c = computation(
            2,
            vec![
                Command::AcceptInput { s: 1, node: i },
                Command::ProvideOutput { s: 2, node: o2 },
                copy(2, 1),
                Command::ProvideOutput { s: 2, node: o },
            ],
        );
        let opt = optimized(&nnet, &c);
        let (out, out2) = run(&nnet, &opt);
        assert_eq!(out, input());
        assert_eq!(out2, Matrix::zeros(3, 2), "the early output must stay zero");
        // ... and that zero must come from a zeroing allocation.
        assert_eq!(count(&opt, |x| matches!(x, Command::AllocMatrix { .. })), 1);
    }

    /// A component must not run in place over an input that is read afterwards.
    #[test]
    fn not_in_place_when_input_read_later() {
        let nnet = net();
        let (i, o, o2, r, relu_node) = ids(&nnet);
        let c = computation(
            2,
            vec![
                Command::AcceptInput { s: 1, node: i },
                relu(r, relu_node, 1, 2),
                Command::ProvideOutput { s: 1, node: o2 },
                Command::ProvideOutput { s: 2, node: o },
            ],
        );
        let opt = optimized(&nnet, &c);
        let (out, out2) = run(&nnet, &opt);
        assert_eq!(out2, input());
        assert_eq!(out, run(&nnet, &c).0);
        assert_eq!(opt.matrices.len(), 3);
    }

    /// Zeroing is dropped only where the first writes cover every row and column before
    /// anything reads the matrix.
    #[test]
    fn undefined_only_when_fully_overwritten_first() {
        let nnet = net();
        let (i, o, o2, _, _) = ids(&nnet);
        let build = |read_between: bool| {
            let mut c = computation(3, vec![]);
            let col = |c: &mut NnetComputation, m: usize, k: usize| {
                c.new_submatrix(SubMatrixInfo {
                    matrix: m,
                    row_offset: 0,
                    num_rows: 3,
                    col_offset: k,
                    num_cols: 1,
                })
            };
            let (l2, r2, l1) = (col(&mut c, 2, 0), col(&mut c, 2, 1), col(&mut c, 1, 0));
            // Matrix 3: only two of its three rows are written.
            let top3 = c.new_submatrix(SubMatrixInfo {
                matrix: 3,
                row_offset: 0,
                num_rows: 2,
                col_offset: 0,
                num_cols: 2,
            });
            let top1 = c.new_submatrix(SubMatrixInfo {
                matrix: 1,
                row_offset: 0,
                num_rows: 2,
                col_offset: 0,
                num_cols: 2,
            });
            c.commands.push(Command::AcceptInput { s: 1, node: i });
            c.commands.push(copy(l2, l1));
            if read_between {
                c.commands.push(Command::ProvideOutput { s: 2, node: o2 });
            }
            c.commands.push(Command::MatrixCopy {
                dst: r2,
                src: l1,
                alpha: 2.0,
            });
            c.commands.push(copy(top3, top1));
            c.commands.push(Command::MatrixAdd {
                dst: 2,
                src: 3,
                alpha: 1.0,
            });
            c.commands.push(Command::ProvideOutput { s: 2, node: o });
            c
        };
        for read_between in [false, true] {
            let c = build(read_between);
            let opt = optimized(&nnet, &c);
            assert_eq!(
                run(&nnet, &opt),
                run(&nnet, &c),
                "read_between {read_between}"
            );
            let undefined = |m| opt.commands.contains(&Command::AllocMatrixUndefined { m });
            // Matrix 1 (the input) is always fully written first; matrix 3 never.
            assert!(undefined(1));
            assert!(!undefined(3));
            assert_eq!(undefined(2), !read_between);
        }
    }

    /// The softmax's backprop runs in place (its output derivative becomes its input
    /// derivative), and the derivative of the additions to zeroed matrices is copied, not
    /// added; with each pass off, the command stays as compiled; results are the same.
    #[test]
    fn backprop_in_place_and_convert_addition_fire() {
        use crate::compile::{compile_computation, CompilerOptions, IoSpecification};
        let nnet = Nnet::from_config_text(
            "input-node name=input dim=2\n\
             component name=softmax type=SoftmaxComponent dim=2\n\
             component-node name=softmax component=softmax input=input\n\
             output-node name=output input=softmax\n",
            "<test>",
            &mut crate::random::seeded_rng(0),
        )
        .unwrap();
        let req = ComputationRequest {
            inputs: vec![IoSpecification::from_ranges("input", 0..2, 0..3, true)],
            outputs: vec![IoSpecification::from_ranges("output", 0..2, 0..3, true)],
            ..Default::default()
        };
        let compiled = |o: &OptimizeOptions| {
            let mut c = compile_computation(&nnet, &req, &CompilerOptions::default()).unwrap();
            optimize(&nnet, &mut c, o);
            c
        };
        let run_both = |c: &NnetComputation| {
            let mut comp = NnetComputer::new(c, &nnet, None).poison_undefined();
            let x = Matrix::from_rows(&[
                vec![1.0, -2.0],
                vec![-3.0, 4.0],
                vec![5.0, -6.0],
                vec![0.5, 0.25],
                vec![-1.0, 2.0],
                vec![3.0, -0.5],
            ]);
            comp.accept_input("input", x.clone()).unwrap();
            comp.run_forward().unwrap();
            comp.accept_output_deriv("output", x).unwrap();
            comp.run_backward().unwrap();
            (
                comp.output("output").unwrap().clone(),
                comp.input_deriv("input").unwrap().clone(),
            )
        };
        let in_place = |c: &NnetComputation| {
            c.commands
                .iter()
                .any(|x| matches!(x, Command::Backprop(b) if b.out_deriv == b.in_deriv))
        };
        let adds = |c: &NnetComputation| {
            count(c, |x| {
                matches!(
                    x,
                    Command::MatrixAdd { .. }
                        | Command::AddRows { .. }
                        | Command::AddRowsMulti { .. }
                )
            })
        };
        let all = compiled(&OptimizeOptions::default());
        assert!(in_place(&all), "{:?}", all.commands);
        assert_eq!(adds(&all), 0, "{:?}", all.commands);
        let mut no_bip = OptimizeOptions::default();
        no_bip.set_pass("backprop-in-place", false);
        assert!(!in_place(&compiled(&no_bip)));
        let mut no_ca = OptimizeOptions::default();
        no_ca.set_pass("convert-addition", false);
        assert!(adds(&compiled(&no_ca)) > 0);
        let plain = compiled(&OptimizeOptions {
            optimize: false,
            ..Default::default()
        });
        assert!(adds(&plain) > 0);
        let want = run_both(&plain);
        for c in [&all, &compiled(&no_bip), &compiled(&no_ca)] {
            assert_eq!(run_both(c), want);
        }
    }

    /// Computations the passes do not understand are left exactly as they are.
    #[test]
    fn swaps_and_loops_are_left_alone() {
        let nnet = net();
        let c = computation(2, vec![Command::SwapMatrix { a: 1, b: 2 }]);
        let opt = optimized(&nnet, &c);
        assert_eq!(opt.commands, c.commands);
    }
}
