//! The row-op passes of Kaldi's optimizer, in its order:
//!
//! - **snip-row-ops** (`SnipRowOps`): an adding or scattering row command whose table starts
//!   or ends with "no row" (−1, or an empty range) acts on a narrower sub-matrix with the
//!   table trimmed. The copying gathers (CopyRows, CopyRowsMulti) are left alone: their −1
//!   rows are zeroed, not skipped.
//! - **split-row-ops** (`SplitRowOps`): a `*Multi` command whose rows come from (or go to) at
//!   most two sub-matrices becomes at most two single-matrix row commands.
//! - **optimize-row-ops** (`ReplaceRowWithMatrixOps`): CopyRows / AddRows whose table is a
//!   run `c, c+1, …` becomes MatrixCopy / MatrixAdd of a sub-matrix of the source.
//!
//! Each replacement does the same arithmetic on each element (a copy is a copy; an add is
//! `x + alpha·y` in every form), so results stay bit-identical. Afterwards the index tables
//! no command uses are dropped ([`drop_unused_tables`]).

use super::computation::{Command, MultiRows, NnetComputation, RowsCommand, SubMatrixInfo};
use super::convert_addition::overlaps;
use super::split::kaldi_splits_in_two;

/// Per matrix: true if it is exchanged with the caller (AcceptInput / ProvideOutput). Their
/// rows are in the request's order (sequence after sequence), so a narrower sub-matrix would
/// cut through the sequence blocks that shortcut compilation widens (`super::cache`); the
/// row passes leave their shapes alone.
fn io_matrices(comp: &NnetComputation) -> Vec<bool> {
    let mut io = vec![false; comp.matrices.len()];
    for c in &comp.commands {
        if let Command::AcceptInput { s, .. } | Command::ProvideOutput { s, .. } = *c {
            if let Some(m) = comp.submatrices.get(s).map(|i| i.matrix) {
                if let Some(x) = io.get_mut(m) {
                    *x = true;
                }
            }
        }
    }
    io
}

/// `rows` rows of sub-matrix `s` starting at its row `first`, as a (possibly new)
/// sub-matrix; None if that would narrow a matrix exchanged with the caller.
fn row_range(
    comp: &mut NnetComputation,
    io: &[bool],
    s: usize,
    first: usize,
    rows: usize,
) -> Option<usize> {
    let info = comp.submatrices[s];
    if first == 0 && rows == info.num_rows {
        return Some(s);
    }
    if io.get(info.matrix).copied().unwrap_or(true) {
        return None;
    }
    let narrow = SubMatrixInfo {
        row_offset: info.row_offset + first,
        num_rows: rows,
        ..info
    };
    Some(match comp.submatrices.iter().position(|x| *x == narrow) {
        Some(k) if k > 0 => k,
        _ => comp.new_submatrix(narrow),
    })
}

/// Leading and trailing entries for which `none` holds.
fn ends<T>(v: &[T], none: impl Fn(&T) -> bool) -> (usize, usize) {
    let lead = v.iter().take_while(|x| none(x)).count();
    if lead == v.len() {
        return (lead, 0);
    }
    (lead, v.iter().rev().take_while(|x| none(x)).count())
}

/// What snipping did to one command.
enum Snip {
    /// Neither end of the table is "no row".
    Unchanged,
    /// Every row is "no row": the command does nothing.
    Empty,
    /// `local` and `table` now name the narrower sub-matrix and the trimmed table.
    Narrowed,
}

/// Snips the rows of sub-matrix `local` that table `table` of `tables(comp)` marks `none` at
/// either end, rewriting both in place.
fn snip<T: Clone>(
    comp: &mut NnetComputation,
    io: &[bool],
    local: &mut usize,
    table: &mut usize,
    tables: fn(&mut NnetComputation) -> &mut Vec<Vec<T>>,
    none: impl Fn(&T) -> bool,
) -> Snip {
    let t = &tables(comp)[*table];
    let (a, b) = ends(t, none);
    let n = t.len();
    if a + b == 0 {
        return Snip::Unchanged;
    }
    if a == n {
        return Snip::Empty;
    }
    let Some(narrow) = row_range(comp, io, *local, a, n - a - b) else {
        return Snip::Unchanged;
    };
    let list = tables(comp);
    let trimmed = list[*table][a..n - b].to_vec();
    list.push(trimmed);
    *table = list.len() - 1;
    *local = narrow;
    Snip::Narrowed
}

/// snip-row-ops; returns the number of commands changed.
pub fn snip_row_ops(comp: &mut NnetComputation) -> usize {
    let io = io_matrices(comp);
    let mut changed = 0;
    for k in 0..comp.commands.len() {
        let mut cmd = comp.commands[k].clone();
        let snipped = match &mut cmd {
            Command::AddRows(r) => snip(
                comp,
                &io,
                &mut r.dst,
                &mut r.indexes,
                |c| &mut c.indexes,
                |&i| i < 0,
            ),
            Command::AddRowRanges(r) => snip(
                comp,
                &io,
                &mut r.dst,
                &mut r.indexes,
                |c| &mut c.indexes_ranges,
                |r| r.0 >= r.1,
            ),
            // The scatters' tables are indexed by the rows of their source.
            Command::AddRowsMulti {
                dst: local,
                indexes_multi,
                ..
            }
            | Command::AddToRowsMulti {
                src: local,
                indexes_multi,
                ..
            }
            | Command::CopyToRowsMulti {
                src: local,
                indexes_multi,
                ..
            } => snip(
                comp,
                &io,
                local,
                indexes_multi,
                |c| &mut c.indexes_multi,
                |p| p.0 < 0,
            ),
            _ => continue,
        };
        comp.commands[k] = match snipped {
            Snip::Unchanged => continue,
            Snip::Empty => Command::NoOperation,
            Snip::Narrowed => cmd,
        };
        changed += 1;
    }
    changed
}

/// `dst = alpha · src[indexes]` (CopyRows), or `+=` (AddRows) when `add`.
fn rows_command(add: bool, dst: usize, src: usize, indexes: usize, alpha: f32) -> Command {
    let r = RowsCommand {
        dst,
        src,
        indexes,
        alpha,
    };
    if add {
        Command::AddRows(r)
    } else {
        Command::CopyRows(r)
    }
}

/// The sub-matrices a `*Multi` table names (−1 left out), in order of first appearance.
fn sources(table: &[(i32, i32)]) -> Vec<usize> {
    let mut v: Vec<usize> = Vec::new();
    for &(s, _) in table {
        if s > 0 && !v.contains(&(s as usize)) {
            v.push(s as usize);
        }
    }
    v
}

/// The single-matrix commands a gather (`CopyRowsMulti` / `AddRowsMulti`) splits into, or
/// None. With two sources a copy becomes a copy from the first (zeroing the rows of the
/// second) and an add from the second.
fn split_gather(comp: &mut NnetComputation, cmd: &Command) -> Option<Vec<Command>> {
    let MultiRows {
        matrix: dst,
        table,
        alpha,
        add,
        scatter: false,
    } = cmd.multi_rows()?
    else {
        return None;
    };
    let srcs = sources(&comp.indexes_multi[table]);
    let d = comp.submatrices[dst];
    // The commands would run one after the other: no source may be written by an earlier
    // one.
    if srcs.len() > 2 || srcs.iter().any(|&s| comp.submatrices[s].matrix == d.matrix) {
        return None;
    }
    let mut out = Vec::new();
    for (j, &s) in srcs.iter().enumerate() {
        let rows: Vec<i32> = comp.indexes_multi[table]
            .iter()
            .map(|&(t, r)| if t as usize == s { r } else { -1 })
            .collect();
        comp.indexes.push(rows);
        let indexes = comp.indexes.len() - 1;
        out.push(rows_command(add || j > 0, dst, s, indexes, alpha));
    }
    if out.is_empty() {
        // Every row is "none": a copy zeroes dst, an add does nothing.
        out.push(if add {
            Command::NoOperation
        } else {
            Command::SetConst { s: dst, alpha: 0.0 }
        });
    }
    Some(out)
}

/// The single-matrix commands a scatter (`CopyToRowsMulti` / `AddToRowsMulti`) splits
/// into, or None: per target, a gather into the rows `min..=max` it names, which must each
/// be named once (and, for a copy, every one of them).
fn split_scatter(comp: &mut NnetComputation, io: &[bool], cmd: &Command) -> Option<Vec<Command>> {
    let MultiRows {
        matrix: src,
        table,
        alpha,
        add,
        scatter: true,
    } = cmd.multi_rows()?
    else {
        return None;
    };
    let targets = sources(&comp.indexes_multi[table]);
    let s_info = comp.submatrices[src];
    if targets.len() > 2
        || targets
            .iter()
            .any(|&t| comp.submatrices[t].matrix == s_info.matrix)
        || (targets.len() == 2
            && overlaps(&comp.submatrices[targets[0]], &comp.submatrices[targets[1]]))
    {
        return None;
    }
    let mut plans = Vec::new();
    for &t in &targets {
        let rows: Vec<(usize, usize)> = comp.indexes_multi[table]
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 as usize == t)
            .map(|(i, p)| (i, p.1 as usize))
            .collect();
        let lo = rows.iter().map(|r| r.1).min()?;
        let hi = rows.iter().map(|r| r.1).max()?;
        let mut inverse = vec![-1i32; hi - lo + 1];
        for &(i, r) in &rows {
            if inverse[r - lo] >= 0 {
                return None; // a row named twice
            }
            inverse[r - lo] = i as i32;
        }
        if !add && inverse.contains(&-1) {
            return None; // a copy would zero rows the scatter leaves alone
        }
        plans.push((t, lo, inverse));
    }
    let mut dsts = Vec::new();
    for &(t, lo, ref inverse) in &plans {
        dsts.push(row_range(comp, io, t, lo, inverse.len())?);
    }
    let mut out = Vec::new();
    for ((_, _, inverse), dst) in plans.into_iter().zip(dsts) {
        comp.indexes.push(inverse);
        let indexes = comp.indexes.len() - 1;
        out.push(rows_command(add, dst, src, indexes, alpha));
    }
    if out.is_empty() {
        out.push(Command::NoOperation);
    }
    Some(out)
}

/// split-row-ops; returns the number of commands split. Also notes on `comp` whether
/// Kaldi's splitter, which cuts a table at the first change of sub-matrix, would have made
/// two commands of one ([`NnetComputation::kaldi_split_inserts`]).
pub fn split_row_ops(comp: &mut NnetComputation) -> usize {
    let kaldi_splits = comp.commands.iter().any(|c| {
        c.multi_rows().is_some_and(|m| {
            // Kaldi's snip-row-ops trims the "none" ends of all but CopyRowsMulti's tables.
            let snipped = m.add || m.scatter;
            comp.indexes_multi
                .get(m.table)
                .is_some_and(|t| kaldi_splits_in_two(t, snipped))
        })
    });
    comp.kaldi_split_inserts |= kaldi_splits;
    let io = io_matrices(comp);
    let old = std::mem::take(&mut comp.commands);
    let mut cmds = Vec::with_capacity(old.len());
    let mut changed = 0;
    for c in old {
        let split = split_gather(comp, &c).or_else(|| split_scatter(comp, &io, &c));
        match split {
            Some(v) => {
                changed += 1;
                cmds.extend(v);
            }
            None => cmds.push(c),
        }
    }
    comp.commands = cmds;
    changed
}

/// optimize-row-ops; returns the number of commands replaced.
pub fn replace_row_with_matrix_ops(comp: &mut NnetComputation) -> usize {
    let io = io_matrices(comp);
    let mut changed = 0;
    for k in 0..comp.commands.len() {
        let (
            RowsCommand {
                dst,
                src,
                indexes,
                alpha,
            },
            add,
        ) = match comp.commands[k] {
            Command::CopyRows(r) => (r, false),
            Command::AddRows(r) => (r, true),
            _ => continue,
        };
        let table = &comp.indexes[indexes];
        let Some(&first) = table.first() else {
            continue;
        };
        let run = first >= 0
            && table
                .iter()
                .enumerate()
                .all(|(i, &j)| j == first + i as i32);
        let n = table.len();
        if !run || first as usize + n > comp.submatrices[src].num_rows {
            continue;
        }
        let Some(src) = row_range(comp, &io, src, first as usize, n) else {
            continue;
        };
        comp.commands[k] = if add {
            Command::MatrixAdd { dst, src, alpha }
        } else {
            Command::MatrixCopy { dst, src, alpha }
        };
        changed += 1;
    }
    changed
}

/// Drops the entries of `indexes`, `indexes_multi` and `indexes_ranges` no command uses and
/// renumbers the rest (the part of Kaldi's `RenumberComputation` the row passes need).
pub fn drop_unused_tables(comp: &mut NnetComputation) {
    fn keep<T>(tables: &mut Vec<T>, used: &[bool]) -> Vec<usize> {
        let mut map = vec![usize::MAX; tables.len()];
        let mut next = 0;
        let old = std::mem::take(tables);
        for (i, t) in old.into_iter().enumerate() {
            if used.get(i).copied().unwrap_or(false) {
                map[i] = next;
                next += 1;
                tables.push(t);
            }
        }
        map
    }
    let mut used = [
        vec![false; comp.indexes.len()],
        vec![false; comp.indexes_multi.len()],
        vec![false; comp.indexes_ranges.len()],
    ];
    for c in &comp.commands {
        if let Some((kind, id)) = table_of(c) {
            if let Some(u) = used[kind].get_mut(id) {
                *u = true;
            }
        }
    }
    let maps = [
        keep(&mut comp.indexes, &used[0]),
        keep(&mut comp.indexes_multi, &used[1]),
        keep(&mut comp.indexes_ranges, &used[2]),
    ];
    for c in &mut comp.commands {
        if let Some((kind, id)) = table_of_mut(c) {
            if let Some(&new) = maps[kind].get(*id) {
                *id = new;
            }
        }
    }
}

/// Which table a command uses: (0 = indexes, 1 = indexes_multi, 2 = indexes_ranges, id).
fn table_of(c: &Command) -> Option<(usize, usize)> {
    let mut c = c.clone();
    table_of_mut(&mut c).map(|(k, id)| (k, *id))
}

fn table_of_mut(c: &mut Command) -> Option<(usize, &mut usize)> {
    match c {
        Command::CopyRows(r) | Command::AddRows(r) => Some((0, &mut r.indexes)),
        Command::CopyRowsMulti { indexes_multi, .. }
        | Command::AddRowsMulti { indexes_multi, .. }
        | Command::CopyToRowsMulti { indexes_multi, .. }
        | Command::AddToRowsMulti { indexes_multi, .. } => Some((1, indexes_multi)),
        Command::AddRowRanges(r) => Some((2, &mut r.indexes)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::checker::check_computation;
    use crate::matrix::Matrix;
    use crate::nnet::Nnet;
    use crate::run::NnetComputer;

    /// m1 = the 3×2 input, m2 and m3 scratch, m4 copied to the output; then `body`.
    fn computation(body: impl FnOnce(&mut NnetComputation) -> Vec<Command>) -> NnetComputation {
        let nnet = crate::testing::relu_nnet(false);
        let mut c = NnetComputation::default();
        for _ in 0..4 {
            let m = c.new_matrix(3, 2);
            c.whole_submatrix(m);
        }
        c.commands = (1..=4).map(|m| Command::AllocMatrix { m }).collect();
        let input = nnet.node_index("input").unwrap();
        c.commands.push(Command::AcceptInput { s: 1, node: input });
        let body = body(&mut c);
        c.commands.extend(body);
        c.commands.push(Command::ProvideOutput {
            s: 4,
            node: nnet.node_index("output").unwrap(),
        });
        for m in 1..=3 {
            c.commands.push(Command::DeallocMatrix { m });
        }
        c
    }

    fn run(c: &NnetComputation) -> Matrix {
        let nnet: Nnet = crate::testing::relu_nnet(false);
        check_computation(c, &nnet).expect("checker");
        let mut comp = NnetComputer::new(c, &nnet, None);
        let input = Matrix::from_rows(&[vec![1.0, -2.0], vec![3.0, 4.0], vec![5.0, -6.0]]);
        comp.accept_input("input", input).unwrap();
        comp.run_forward().unwrap();
        comp.output("output").unwrap().clone()
    }

    fn copy(dst: usize, src: usize) -> Command {
        Command::MatrixCopy {
            dst,
            src,
            alpha: 1.0,
        }
    }

    fn kinds(c: &NnetComputation) -> Vec<&'static str> {
        c.commands[5..c.commands.len() - 4]
            .iter()
            .map(|c| c.kind_name())
            .collect()
    }

    /// `m2.AddRows(m3[-1, 2, -1])` acts on row 1 only, and then is a matrix add of one row.
    #[test]
    fn snip_then_matrix_op() {
        let c = computation(|c| {
            c.indexes.push(vec![-1, 2, -1]);
            // m3, not the input m1: matrices exchanged with the caller keep their shape.
            vec![
                Command::SetConst { s: 2, alpha: 7.0 },
                copy(3, 1),
                Command::AddRows(RowsCommand {
                    dst: 2,
                    src: 3,
                    indexes: 0,
                    alpha: 0.5,
                }),
                copy(4, 2),
            ]
        });
        let mut opt = NnetComputation {
            matrices: c.matrices.clone(),
            submatrices: c.submatrices.clone(),
            indexes: c.indexes.clone(),
            commands: c.commands.clone(),
            ..Default::default()
        };
        assert_eq!(snip_row_ops(&mut opt), 1);
        let Command::AddRows(RowsCommand { dst, indexes, .. }) = opt.commands[7] else {
            panic!("{:?}", opt.commands[7]);
        };
        assert_eq!(opt.indexes[indexes], [2]);
        assert_eq!(
            (
                opt.submatrices[dst].row_offset,
                opt.submatrices[dst].num_rows
            ),
            (1, 1)
        );
        assert_eq!(run(&opt), run(&c));
        assert_eq!(replace_row_with_matrix_ops(&mut opt), 1);
        assert_eq!(
            kinds(&opt),
            ["SetConst", "MatrixCopy", "MatrixAdd", "MatrixCopy"]
        );
        let Command::MatrixAdd { src, .. } = opt.commands[7] else {
            panic!();
        };
        assert_eq!(opt.submatrices[src].row_offset, 2);
        drop_unused_tables(&mut opt);
        assert!(opt.indexes.is_empty());
        assert_eq!(run(&opt), run(&c));
    }

    /// A gather from two matrices becomes a copy and an add; a scatter into one matrix a
    /// gather into the rows it names.
    #[test]
    fn split_gathers_and_scatters() {
        let c = computation(|c| {
            c.indexes_multi.push(vec![(1, 2), (2, 0), (1, 0)]);
            c.indexes_multi.push(vec![(3, 2), (-1, -1), (3, 1)]);
            vec![
                Command::SetConst { s: 2, alpha: 3.0 },
                Command::CopyRowsMulti {
                    dst: 4,
                    indexes_multi: 0,
                    alpha: 2.0,
                },
                Command::AddToRowsMulti {
                    src: 1,
                    indexes_multi: 1,
                    alpha: 1.0,
                },
                Command::MatrixAdd {
                    dst: 4,
                    src: 3,
                    alpha: 1.0,
                },
            ]
        });
        let mut opt = NnetComputation {
            matrices: c.matrices.clone(),
            submatrices: c.submatrices.clone(),
            indexes_multi: c.indexes_multi.clone(),
            commands: c.commands.clone(),
            ..Default::default()
        };
        assert_eq!(split_row_ops(&mut opt), 2);
        assert_eq!(
            kinds(&opt),
            ["SetConst", "CopyRows", "AddRows", "AddRows", "MatrixAdd"]
        );
        // The scatter's gather covers rows 1..=2 of m3: row 1 from input row 2, row 2 from 0.
        let Command::AddRows(RowsCommand { dst, indexes, .. }) = opt.commands[8] else {
            panic!();
        };
        assert_eq!(opt.indexes[indexes], [2, 0]);
        assert_eq!(
            (
                opt.submatrices[dst].row_offset,
                opt.submatrices[dst].num_rows
            ),
            (1, 2)
        );
        assert_eq!(run(&opt), run(&c));
    }

    /// A scatter that copies must name every row of its span, and a gather may not read the
    /// matrix it writes: such commands stay whole.
    #[test]
    fn unsafe_splits_are_left_alone() {
        let mut c = computation(|c| {
            c.indexes_multi.push(vec![(3, 2), (3, 0), (-1, -1)]);
            c.indexes_multi.push(vec![(4, 1), (1, 0), (1, 1)]);
            vec![
                Command::CopyToRowsMulti {
                    src: 1,
                    indexes_multi: 0,
                    alpha: 1.0,
                },
                Command::AddRowsMulti {
                    dst: 4,
                    indexes_multi: 1,
                    alpha: 1.0,
                },
            ]
        });
        assert_eq!(split_row_ops(&mut c), 0);
    }
}
