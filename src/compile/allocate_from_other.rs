//! allocate-from-other (Kaldi's `RemoveUnnecessaryAllocation`): "free a matrix of R×C, later
//! allocate one of R×C" becomes one [`Command::SwapMatrix`] at the allocation, by which the
//! new matrix takes over the freed one's storage, as Kaldi does it. The allocator is then
//! asked for nothing. A zeroing allocation keeps its zeroing as a `SetConst` after the swap
//! (Kaldi's allocation never zeroes; its zeroing is a separate command already).
//!
//! Pairs are chosen as Kaldi chooses them, from the latest deallocation to the earliest, with
//! one restriction: a deallocation pairs only with the allocation that comes next (of any
//! shape), if that has its shape and is not taken yet. Kaldi takes the first allocation of
//! the shape however far away, which holds the freed storage over everything in between; on
//! the TDNN-F training step (layers whose row counts shrink with the context, so shapes
//! rarely repeat soon) that raised the peak of live matrix memory from 12.0 % to 16.1 % of
//! the unoptimized computation (docs/PERFORMANCE.md). With nothing allocated in between, live
//! memory between the pair only falls, so the peak cannot grow. (compnet's executor also
//! keeps freed buffers in a pool, so what Kaldi's pass saves, a trip to the allocator, was
//! mostly saved already.) The pass runs after move-sizing-commands (so frees are early and
//! allocations late) and leaves looped computations alone (`OptimizeOptions::looped`).

use super::computation::{Command, NnetComputation, SubMatrixInfo};
use std::collections::{BTreeSet, HashMap};

/// Rewrites the pairs (module doc); returns how many it rewrote.
pub fn remove_unnecessary_allocation(comp: &mut NnetComputation) -> usize {
    // Per shape: the deallocation and allocation commands, in command order.
    type Lists = (Vec<usize>, BTreeSet<usize>);
    let mut by_shape: HashMap<(usize, usize), Lists> = HashMap::new();
    for (k, c) in comp.commands.iter().enumerate() {
        let (m, is_alloc) = match *c {
            Command::DeallocMatrix { m } => (m, false),
            Command::AllocMatrix { m } | Command::AllocMatrixUndefined { m } => (m, true),
            _ => continue,
        };
        let Some(info) = comp.matrices.get(m) else {
            continue;
        };
        let lists = by_shape.entry((info.num_rows, info.num_cols)).or_default();
        if is_alloc {
            lists.1.insert(k);
        } else {
            lists.0.push(k);
        }
    }
    // The first allocation (of any shape) after each command.
    let n = comp.commands.len();
    let mut next_alloc = vec![None; n + 1];
    for k in (0..n).rev() {
        next_alloc[k] = match comp.commands.get(k + 1) {
            Some(Command::AllocMatrix { .. } | Command::AllocMatrixUndefined { .. }) => Some(k + 1),
            _ => next_alloc[k + 1],
        };
    }
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (deallocs, mut allocs) in by_shape.into_values() {
        for &d in deallocs.iter().rev() {
            if let Some(&a) = allocs.range(d + 1..).next() {
                if next_alloc[d] == Some(a) {
                    allocs.remove(&a);
                    pairs.push((d, a));
                }
            }
        }
    }
    if pairs.is_empty() {
        return 0;
    }
    // Zeroing after the swap, keyed by the allocation's position.
    let mut zero_after: HashMap<usize, usize> = HashMap::new();
    let mut rewritten = 0;
    for &(d, a) in &pairs {
        let Command::DeallocMatrix { m: old } = comp.commands[d] else {
            continue;
        };
        let (new, zeroed) = match comp.commands[a] {
            Command::AllocMatrix { m } => (m, true),
            Command::AllocMatrixUndefined { m } => (m, false),
            _ => continue,
        };
        if new == old {
            continue;
        }
        comp.commands[d] = Command::NoOperation;
        comp.commands[a] = Command::SwapMatrix { a: new, b: old };
        if zeroed {
            let s = whole_submatrix(comp, new);
            zero_after.insert(a, s);
        }
        rewritten += 1;
    }
    let old = std::mem::take(&mut comp.commands);
    let mut cmds = Vec::with_capacity(old.len());
    for (k, c) in old.into_iter().enumerate() {
        if c == Command::NoOperation {
            continue;
        }
        cmds.push(c);
        if let Some(&s) = zero_after.get(&k) {
            cmds.push(Command::SetConst { s, alpha: 0.0 });
        }
    }
    comp.commands = cmds;
    rewritten
}

/// A sub-matrix that is all of matrix `m` (an existing one, else a new one).
fn whole_submatrix(comp: &mut NnetComputation, m: usize) -> usize {
    let info = &comp.matrices[m];
    let whole = SubMatrixInfo {
        matrix: m,
        row_offset: 0,
        num_rows: info.num_rows,
        col_offset: 0,
        num_cols: info.num_cols,
    };
    match comp.submatrices.iter().position(|s| *s == whole) {
        Some(s) if s > 0 => s,
        _ => comp.new_submatrix(whole),
    }
}
