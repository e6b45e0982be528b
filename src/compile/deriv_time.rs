//! Derivative-time limits (Kaldi's `--optimization.min-deriv-time`, `max-deriv-time` and
//! `max-deriv-time-relative`; its `LimitDerivativeTimes`).
//!
//! Recurrent networks trained on chunks with extra context should not backpropagate into
//! that context. With a range [min, max] of t, derivatives of rows whose t is outside it are
//! taken to be zero, and the backward work for them is skipped: commands that only move
//! such derivatives are dropped, and the others are narrowed to the rows that can be
//! nonzero. This changes the gradients (it is not only an optimization), so the pass runs
//! whether or not the other passes do, and it must run first: it relies on every matrix
//! being zeroed at allocation, as the compiler emits it.
//!
//! Which rows are "inside" follows Kaldi exactly, because the trained model depends on it:
//! - a matrix (from its debug info: the Index of each row) is cut to the smallest
//!   contiguous row span holding every row with t in range; whole-matrix commands and
//!   component backprops act on that span;
//! - row-indexed commands (`CopyRows`, `AddRows`, the `*Multi` commands) drop exactly the
//!   derivative rows whose t is outside the range (their operands stay whole, see
//!   `whole_if_kept`); `AddRowRanges` trims the ends of each range;
//! - only derivative matrices are limited by the matrix and row commands; a Backprop of a
//!   simple component is narrowed to the span of its operands (values included) or deleted
//!   when its output derivative has no row in range, and a memo that no Backprop reads any
//!   more is not kept; a Propagate whose output has no row in range stores no statistics.
//!
//! Non-simple components' backprops are left alone (as in Kaldi). Matrices without debug
//! info are never limited.

use super::analysis::{command_accesses, RowMap};
use super::computation::{
    BackpropCommand, Command, NnetComputation, PropagateCommand, RowsCommand, SubMatrixInfo,
};
use super::request::ComputationRequest;
use crate::nnet::component::Properties;
use crate::nnet::Nnet;
use std::collections::{HashMap, HashSet};

/// Kaldi's "no limit" values of the three options.
pub const NO_MIN_DERIV_TIME: i32 = i32::MIN;
pub const NO_MAX_DERIV_TIME: i32 = i32::MAX;

/// The largest t of any output Index of `request` (Kaldi's `MaxOutputTimeInRequest`), the
/// base of `max-deriv-time-relative`; `None` if the request has no output Indexes.
pub fn max_output_time(request: &ComputationRequest) -> Option<i32> {
    request
        .outputs
        .iter()
        .flat_map(|o| o.indexes.iter().map(|i| i.t))
        .max()
}

/// The range [min, max] of t for derivatives that options `(min, max, max_relative)` give
/// for `request` (`max_relative` replaces `max` when set, added to the largest output t);
/// `None` when nothing is limited.
pub fn deriv_time_range(
    min: i32,
    max: i32,
    max_relative: i32,
    request: &ComputationRequest,
) -> Option<(i32, i32)> {
    let max = if max_relative != NO_MAX_DERIV_TIME {
        match max_output_time(request) {
            Some(t) => {
                (t as i64 + max_relative as i64).clamp(i32::MIN as i64, i32::MAX as i64) as i32
            }
            None => max,
        }
    } else {
        max
    };
    if min == NO_MIN_DERIV_TIME && max == NO_MAX_DERIV_TIME {
        None
    } else {
        Some((min, max))
    }
}

/// Which rows of a matrix are inside the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    /// Every row (or the matrix has no debug info).
    All,
    /// No row.
    Nothing,
    /// The rows `[begin, end)`, the smallest span holding every row in range.
    Rows(usize, usize),
}

/// Limits the derivatives of `comp` (compiled for `nnet`, with matrix debug info, not yet
/// optimized) to t in `[min_t, max_t]`. Errors if the debug info is missing or `min_t >
/// max_t`.
pub fn limit_derivative_times(
    nnet: &Nnet,
    comp: &mut NnetComputation,
    min_t: i32,
    max_t: i32,
) -> Result<(), String> {
    if min_t > max_t {
        return Err(format!(
            "min-deriv-time ({min_t}) is larger than max-deriv-time ({max_t})"
        ));
    }
    if comp.matrices.len() <= 1 {
        return Ok(());
    }
    if comp.matrix_debug_info.len() != comp.matrices.len() {
        return Err("derivative-time limits need the computation's matrix debug info".into());
    }
    Limiter::new(nnet, comp, min_t, max_t).run();
    Ok(())
}

struct Limiter<'a> {
    nnet: &'a Nnet,
    comp: &'a mut NnetComputation,
    min_t: i32,
    max_t: i32,
    spans: Vec<Span>,
    /// Sub-matrix → the part of it inside its matrix's span (0: none), for every matrix.
    map: Vec<usize>,
    /// Narrowed sub-matrices already made, so equal ones are shared.
    made: HashMap<SubMatrixInfo, usize>,
}

impl<'a> Limiter<'a> {
    fn new(nnet: &'a Nnet, comp: &'a mut NnetComputation, min_t: i32, max_t: i32) -> Self {
        let spans = comp
            .matrices
            .iter()
            .zip(&comp.matrix_debug_info)
            .map(|(m, d)| {
                if d.cindexes.len() != m.num_rows {
                    return Span::All;
                }
                let inside = |(_, i): &(usize, crate::index::Index)| i.t >= min_t && i.t <= max_t;
                match (
                    d.cindexes.iter().position(inside),
                    d.cindexes.iter().rposition(inside),
                ) {
                    (Some(b), Some(e)) if b == 0 && e + 1 == m.num_rows => Span::All,
                    (Some(b), Some(e)) => Span::Rows(b, e + 1),
                    _ => Span::Nothing,
                }
            })
            .collect();
        let mut l = Limiter {
            nnet,
            comp,
            min_t,
            max_t,
            spans,
            map: Vec::new(),
            made: HashMap::new(),
        };
        l.map = (0..l.comp.submatrices.len())
            .map(|s| l.narrowed(s))
            .collect();
        l
    }

    /// A sub-matrix of `parent`'s rows `[off, off + rows)`, shared with an equal one made
    /// before.
    fn sub_rows(&mut self, parent: usize, off: usize, rows: usize) -> usize {
        let p = self.comp.submatrices[parent];
        if off == 0 && rows == p.num_rows {
            return parent;
        }
        let info = SubMatrixInfo {
            row_offset: p.row_offset + off,
            num_rows: rows,
            ..p
        };
        if let Some(&s) = self.made.get(&info) {
            return s;
        }
        let s = self.comp.new_submatrix(info);
        self.made.insert(info, s);
        s
    }

    /// The part of sub-matrix `s` inside its matrix's span (0: none).
    fn narrowed(&mut self, s: usize) -> usize {
        if s == 0 {
            return 0;
        }
        let info = self.comp.submatrices[s];
        match self.spans[info.matrix] {
            Span::All => s,
            Span::Nothing => 0,
            Span::Rows(b, e) => {
                let begin = b.max(info.row_offset);
                let end = e.min(info.row_offset + info.num_rows);
                if end <= begin {
                    0
                } else {
                    self.sub_rows(s, begin - info.row_offset, end - begin)
                }
            }
        }
    }

    fn is_deriv(&self, s: usize) -> bool {
        self.comp.matrix_debug_info[self.comp.submatrices[s].matrix].is_deriv
    }

    /// `map`, but only for derivative matrices (values are never limited).
    fn map_if_deriv(&self, s: usize) -> usize {
        if s != 0 && self.is_deriv(s) {
            self.map[s]
        } else {
            s
        }
    }

    /// For row-indexed commands: `s` itself, or 0 if none of its rows is kept. Kaldi narrows
    /// these commands' operands to the span as well, but their rows outside it are dropped
    /// row by row anyway (the span holds every kept row), so the result is the same; keeping
    /// the operands whole leaves sub-matrices that shortcut compilation can widen (a span
    /// of an n-major request matrix cuts through the sequences).
    fn whole_if_kept(&self, s: usize) -> usize {
        if self.map_if_deriv(s) == 0 {
            0
        } else {
            s
        }
    }

    /// A row-indexed command's operands as kept ([`whole_if_kept`](Self::whole_if_kept)) and
    /// the rows cut from each one's start, or `None` when either keeps no row (nothing
    /// nonzero moves; the destination was zeroed at allocation).
    fn kept_operands(&self, dst: usize, src: usize) -> Option<((usize, usize), (usize, usize))> {
        let (d, s) = (self.whole_if_kept(dst), self.whole_if_kept(src));
        if d == 0 || s == 0 {
            return None;
        }
        Some(((d, s), (self.left_cut(dst, d), self.left_cut(src, s))))
    }

    /// Rows cut from the start of `orig` to get `new` (a narrowing of it).
    fn left_cut(&self, orig: usize, new: usize) -> usize {
        self.comp.submatrices[new].row_offset - self.comp.submatrices[orig].row_offset
    }

    fn right_cut(&self, orig: usize, new: usize) -> usize {
        let (o, n) = (self.comp.submatrices[orig], self.comp.submatrices[new]);
        (o.row_offset + o.num_rows) - (n.row_offset + n.num_rows)
    }

    /// Whether row `row` of sub-matrix `s` can hold a nonzero derivative (always, for
    /// values and matrices without debug info).
    fn row_kept(&self, s: usize, row: usize) -> bool {
        let info = self.comp.submatrices[s];
        let d = &self.comp.matrix_debug_info[info.matrix];
        if !d.is_deriv || d.cindexes.len() != self.comp.matrices[info.matrix].num_rows {
            return true;
        }
        match d.cindexes.get(info.row_offset + row) {
            Some((_, i)) => i.t >= self.min_t && i.t <= self.max_t,
            None => true,
        }
    }

    fn run(mut self) {
        for k in 0..self.comp.commands.len() {
            let cmd = self.comp.commands[k].clone();
            if let Some(new) = self.modify(cmd) {
                self.comp.commands[k] = new;
            }
        }
        self.drop_unread_memos();
        self.comp
            .commands
            .retain(|c| !matches!(c, Command::NoOperation));
    }

    /// The limited form of `cmd` (`None`: unchanged).
    fn modify(&mut self, cmd: Command) -> Option<Command> {
        match cmd {
            Command::Propagate(p) if p.store_stats && self.map[p.output] == 0 => {
                Some(Command::Propagate(PropagateCommand {
                    store_stats: false,
                    ..p
                }))
            }
            Command::Backprop(b) => {
                let props = self
                    .nnet
                    .components
                    .get(b.component)
                    .map_or(Properties(0), |c| c.properties());
                if !props.has(Properties::SIMPLE) {
                    return None;
                }
                let mapped =
                    [b.in_value, b.out_value, b.out_deriv, b.in_deriv].map(|s| self.map[s]);
                if mapped[2] == 0 {
                    return Some(Command::NoOperation);
                }
                if mapped[2] == b.out_deriv || props.has(Properties::USES_MEMO) {
                    return None;
                }
                // A simple component's operands share their rows; narrow only if they all
                // narrow alike (they do when their debug info agrees).
                let rows = self.comp.submatrices[mapped[2]].num_rows;
                let cut = self.left_cut(b.out_deriv, mapped[2]);
                let alike = [b.in_value, b.out_value, b.in_deriv]
                    .iter()
                    .zip([mapped[0], mapped[1], mapped[3]])
                    .all(|(&s, m)| {
                        s == 0
                            || (m != 0
                                && self.comp.submatrices[m].num_rows == rows
                                && self.left_cut(s, m) == cut)
                    });
                if !alike {
                    return None;
                }
                Some(Command::Backprop(BackpropCommand {
                    in_value: mapped[0],
                    out_value: mapped[1],
                    out_deriv: mapped[2],
                    in_deriv: mapped[3],
                    ..b
                }))
            }
            Command::MatrixCopy { dst, src, alpha } | Command::MatrixAdd { dst, src, alpha } => {
                let (d, s) = (self.map_if_deriv(dst), self.map_if_deriv(src));
                if d == dst && s == src {
                    return None;
                }
                if d == 0 || s == 0 {
                    return Some(Command::NoOperation);
                }
                let (dl, dr) = (self.left_cut(dst, d), self.right_cut(dst, d));
                let (sl, sr) = (self.left_cut(src, s), self.right_cut(src, s));
                let (nd, ns) = if dl == sl && dr == sr {
                    (d, s)
                } else {
                    // Cut both to what remains after the larger cut on each side.
                    let (l, r) = (dl.max(sl), dr.max(sr));
                    let n = self.comp.submatrices[dst].num_rows;
                    if l + r >= n {
                        return Some(Command::NoOperation);
                    }
                    (
                        self.sub_rows(dst, l, n - l - r),
                        self.sub_rows(src, l, n - l - r),
                    )
                };
                Some(match cmd {
                    Command::MatrixCopy { .. } => Command::MatrixCopy {
                        dst: nd,
                        src: ns,
                        alpha,
                    },
                    _ => Command::MatrixAdd {
                        dst: nd,
                        src: ns,
                        alpha,
                    },
                })
            }
            Command::CopyRows(r) | Command::AddRows(r) => {
                let (dst, src) = (r.dst, r.src);
                let Some(((d, s), (dl, sl))) = self.kept_operands(dst, src) else {
                    return Some(Command::NoOperation);
                };
                let n_src = self.comp.submatrices[s].num_rows;
                let old = self.comp.indexes[r.indexes].clone();
                let mut keep = false;
                let new: Vec<i32> = (0..self.comp.submatrices[d].num_rows)
                    .map(|i| {
                        let o = old.get(i + dl).copied().unwrap_or(-1);
                        if o < 0 || !self.row_kept(src, o as usize) || !self.row_kept(d, i) {
                            return -1;
                        }
                        let r = o as usize - sl;
                        debug_assert!(r < n_src);
                        keep = true;
                        r as i32
                    })
                    .collect();
                if !keep {
                    return Some(Command::NoOperation);
                }
                if d == dst && s == src && new == old {
                    return None;
                }
                self.comp.indexes.push(new);
                let r = RowsCommand {
                    dst: d,
                    src: s,
                    indexes: self.comp.indexes.len() - 1,
                    alpha: r.alpha,
                };
                Some(match cmd {
                    Command::CopyRows(_) => Command::CopyRows(r),
                    _ => Command::AddRows(r),
                })
            }
            Command::CopyRowsMulti { .. }
            | Command::CopyToRowsMulti { .. }
            | Command::AddRowsMulti { .. }
            | Command::AddToRowsMulti { .. } => {
                let RowMap::Multi { local, table, .. } = command_accesses(self.nnet, &cmd).rows
                else {
                    return None;
                };
                let l = self.whole_if_kept(local);
                if l == 0 {
                    return Some(Command::NoOperation);
                }
                let cut = self.left_cut(local, l);
                let old = self.comp.indexes_multi[table].clone();
                let mut keep = false;
                let mut new = Vec::with_capacity(self.comp.submatrices[l].num_rows);
                for i in 0..self.comp.submatrices[l].num_rows {
                    let (s, r) = old.get(i + cut).copied().unwrap_or((-1, -1));
                    if s < 0 {
                        new.push((-1, -1));
                        continue;
                    }
                    let (s, r) = (s as usize, r as usize);
                    if !self.row_kept(s, r) || !self.row_kept(l, i) {
                        new.push((-1, -1));
                        continue;
                    }
                    new.push((s as i32, r as i32));
                    keep = true;
                }
                if !keep {
                    return Some(Command::NoOperation);
                }
                if l == local && new == old {
                    return None;
                }
                self.comp.indexes_multi.push(new);
                let t = self.comp.indexes_multi.len() - 1;
                let mut c = cmd;
                match &mut c {
                    Command::CopyRowsMulti {
                        dst, indexes_multi, ..
                    }
                    | Command::AddRowsMulti {
                        dst, indexes_multi, ..
                    } => {
                        *dst = l;
                        *indexes_multi = t;
                    }
                    Command::CopyToRowsMulti {
                        src, indexes_multi, ..
                    }
                    | Command::AddToRowsMulti {
                        src, indexes_multi, ..
                    } => {
                        *src = l;
                        *indexes_multi = t;
                    }
                    _ => {}
                }
                Some(c)
            }
            Command::AddRowRanges(r) => {
                let src = r.src;
                let Some(((d, s), (dl, sl))) = self.kept_operands(r.dst, src) else {
                    return Some(Command::NoOperation);
                };
                let old = self.comp.indexes_ranges[r.indexes].clone();
                let mut keep = false;
                let new: Vec<(i32, i32)> = (0..self.comp.submatrices[d].num_rows)
                    .map(|i| {
                        let (mut b, mut e) = old.get(i + dl).copied().unwrap_or((-1, -1));
                        if !self.row_kept(d, i) {
                            return (-1, -1);
                        }
                        if b < 0 {
                            return (b, e);
                        }
                        while b < e && !self.row_kept(src, b as usize) {
                            b += 1;
                        }
                        while e > b && !self.row_kept(src, (e - 1) as usize) {
                            e -= 1;
                        }
                        if b == e {
                            return (-1, -1);
                        }
                        keep = true;
                        (b - sl as i32, e - sl as i32)
                    })
                    .collect();
                if !keep {
                    return Some(Command::NoOperation);
                }
                if new == old {
                    return None;
                }
                self.comp.indexes_ranges.push(new);
                Some(Command::AddRowRanges(RowsCommand {
                    dst: d,
                    src: s,
                    indexes: self.comp.indexes_ranges.len() - 1,
                    alpha: r.alpha,
                }))
            }
            _ => None,
        }
    }

    /// A Propagate keeps no memo that no Backprop reads any more.
    fn drop_unread_memos(&mut self) {
        let read: HashSet<usize> = self
            .comp
            .commands
            .iter()
            .filter_map(|c| match c {
                Command::Backprop(b) if b.memo != 0 => Some(b.memo),
                _ => None,
            })
            .collect();
        for c in &mut self.comp.commands {
            if let Command::Propagate(p) = c {
                if p.memo != 0 && !read.contains(&p.memo) {
                    p.memo = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::request::IoSpecification;

    fn request(output_ts: std::ops::Range<i32>) -> ComputationRequest {
        ComputationRequest {
            outputs: vec![IoSpecification::from_ranges(
                "output",
                0..2,
                output_ts,
                true,
            )],
            ..Default::default()
        }
    }

    /// Kaldi's rule: `max-deriv-time-relative` is added to the largest output t and
    /// replaces `max-deriv-time`; nothing set means no limit.
    #[test]
    fn the_range_follows_kaldis_options() {
        let r = request(3..10);
        assert_eq!(max_output_time(&r), Some(9));
        let none = (NO_MIN_DERIV_TIME, NO_MAX_DERIV_TIME, NO_MAX_DERIV_TIME);
        assert_eq!(deriv_time_range(none.0, none.1, none.2, &r), None);
        assert_eq!(
            deriv_time_range(-2, NO_MAX_DERIV_TIME, NO_MAX_DERIV_TIME, &r),
            Some((-2, NO_MAX_DERIV_TIME))
        );
        assert_eq!(
            deriv_time_range(NO_MIN_DERIV_TIME, 5, NO_MAX_DERIV_TIME, &r),
            Some((NO_MIN_DERIV_TIME, 5))
        );
        assert_eq!(deriv_time_range(0, 5, -3, &r), Some((0, 6)));
        assert_eq!(deriv_time_range(0, NO_MAX_DERIV_TIME, 4, &r), Some((0, 13)));
        // No overflow at the ends of i32.
        assert_eq!(
            deriv_time_range(0, 5, i32::MAX - 1, &r),
            Some((0, NO_MAX_DERIV_TIME))
        );
    }

    #[test]
    fn bad_ranges_and_missing_debug_info_are_errors() {
        let nnet = crate::testing::relu_nnet(false);
        let mut comp = NnetComputation::default();
        let m = comp.new_matrix(3, 2);
        comp.whole_submatrix(m);
        let e = limit_derivative_times(&nnet, &mut comp, 5, 4).unwrap_err();
        assert!(e.contains("min-deriv-time (5)"), "{e}");
        let e = limit_derivative_times(&nnet, &mut comp, 0, 4).unwrap_err();
        assert!(e.contains("debug info"), "{e}");
    }
}
