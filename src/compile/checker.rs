//! The computation checker (Kaldi's `ComputationChecker`): finds what would make a computation
//! compute the wrong thing or fail, from the command accesses of [`super::analysis`].
//!
//! Two levels:
//! - [`check_structure`]: every index in range and every shape consistent (sub-matrix
//!   bounds, row indexes, operand shapes, component dimensions). The executor runs it once per
//!   computation, so executing a command can index freely without risking a panic.
//! - [`check_computation`]: the structure plus the data flow along the commands in order:
//!   reads of matrices before anything wrote them (an `AllocMatrix` writes zeros, an
//!   `AllocMatrixUndefined` nothing), use before allocation or after free, double allocation
//!   or free, matrices never freed (unless handed out by `ProvideOutput`), backprops
//!   whose forward memo is missing, use of a matrix while compressed, and reads of a
//!   decompressed matrix by anything but the backprop of a component that needs only its
//!   output's sign (`Properties::BACKPROP_NEEDS_OUTPUT_SIGN`; the compression keeps only
//!   that). Tests run it after every optimizer pass.
//!
//! Definedness is tracked per block of a matrix, cut at every row and column boundary of its
//! sub-matrices (Kaldi's "variables"), so a sub-matrix is defined once its blocks are.

use super::analysis::{
    command_accesses, Access, CommandAccesses, MatrixOp, MemoUse, NodeIo, RowMap, Side,
};
use super::computation::{NnetComputation, SubMatrixInfo};
use crate::nnet::component::Properties;
use crate::nnet::Nnet;
use std::fmt;

/// What is wrong, and where (`command`: index into `commands`; None for the tables).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckError {
    pub command: Option<usize>,
    pub problem: Problem,
}

/// (rows, cols).
pub type Shape = (usize, usize);

/// One problem the checker finds.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// A sub-matrix names matrix 0 or a matrix that does not exist.
    SubmatrixMatrix {
        submatrix: usize,
        matrix: usize,
        num_matrices: usize,
    },
    /// A sub-matrix reaches outside its matrix.
    SubmatrixBounds {
        submatrix: SubMatrixInfo,
        index: usize,
        matrix_shape: Shape,
    },
    /// An operand names sub-matrix 0 where one is required, or one that does not exist.
    SubmatrixOutOfRange {
        operand: &'static str,
        submatrix: usize,
        num_submatrices: usize,
    },
    MatrixOutOfRange {
        matrix: usize,
        num_matrices: usize,
    },
    SwapShapes {
        a: usize,
        b: usize,
    },
    ComponentOutOfRange {
        component: usize,
        num_components: usize,
    },
    PrecomputedOutOfRange {
        index: usize,
        len: usize,
    },
    NodeOutOfRange {
        node: usize,
        num_nodes: usize,
    },
    JumpOutOfRange {
        target: usize,
        num_commands: usize,
    },
    /// `indexes`, `indexes_ranges` or `indexes_multi` has no entry `index`.
    TableOutOfRange {
        table: &'static str,
        index: usize,
        len: usize,
    },
    /// Two operands that must agree in shape do not (`expected` is the other operand's).
    ShapeMismatch {
        operand: &'static str,
        submatrix: usize,
        expected: Shape,
        found: Shape,
    },
    /// An index table has a different number of rows than the operand it maps.
    TableRows {
        table: &'static str,
        index: usize,
        expected: usize,
        found: usize,
    },
    /// Entry `row` of an index table points outside its source.
    RowIndex {
        table: &'static str,
        row: usize,
        value: (i32, i32),
        limit: usize,
    },
    /// An operand's columns are not the component's input/output dimension.
    ComponentDim {
        operand: &'static str,
        submatrix: usize,
        side: Side,
        expected: usize,
        found: usize,
    },
    /// The component needs an operand that the command leaves out.
    MissingOperand {
        operand: &'static str,
        why: &'static str,
    },
    /// A read of (part of) a sub-matrix that nothing wrote since its undefined allocation.
    UndefinedRead {
        submatrix: usize,
        matrix: usize,
    },
    UseBeforeAlloc {
        matrix: usize,
    },
    UseAfterFree {
        matrix: usize,
        freed_at: usize,
    },
    DoubleAlloc {
        matrix: usize,
        allocated_at: usize,
    },
    DoubleFree {
        matrix: usize,
        freed_at: usize,
    },
    FreeBeforeAlloc {
        matrix: usize,
    },
    /// Uses (or frees) a matrix while it is compressed.
    UseWhileCompressed {
        matrix: usize,
        compressed_at: usize,
    },
    /// Decompresses a matrix that is not compressed.
    NotCompressed {
        matrix: usize,
    },
    /// Reads a decompressed matrix (which holds only its values' signs) other than as the
    /// output value of a backprop that needs only that.
    LossyRead {
        submatrix: usize,
        matrix: usize,
    },
    /// Allocated, never freed and never handed out.
    NeverFreed {
        matrix: usize,
        allocated_at: usize,
    },
    /// A Backprop whose memo no earlier Propagate of the component stored.
    MemoMissing {
        memo: usize,
        component: usize,
    },
    /// A Propagate stores a memo into a slot whose previous memo nothing consumed.
    MemoReused {
        memo: usize,
        stored_at: usize,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Problem::*;
        let shape = |s: &Shape| format!("{}x{}", s.0, s.1);
        let name = |o: &&str| {
            if o.is_empty() {
                String::new()
            } else {
                format!("{o} ")
            }
        };
        match self {
            SubmatrixMatrix {
                submatrix,
                matrix,
                num_matrices,
            } => write!(
                f,
                "sub-matrix {submatrix} names matrix {matrix}, but matrices are 1..{num_matrices}"
            ),
            SubmatrixBounds {
                submatrix: s,
                index,
                matrix_shape,
            } => write!(
                f,
                "sub-matrix {index} (rows {}..{}, columns {}..{}) exceeds matrix {} ({})",
                s.row_offset,
                s.row_offset + s.num_rows,
                s.col_offset,
                s.col_offset + s.num_cols,
                s.matrix,
                shape(matrix_shape)
            ),
            SubmatrixOutOfRange {
                operand,
                submatrix: 0,
                ..
            } => write!(f, "{}sub-matrix is required but is 0 (none)", name(operand)),
            SubmatrixOutOfRange {
                operand,
                submatrix,
                num_submatrices,
            } => write!(
                f,
                "{}sub-matrix {submatrix} does not exist ({num_submatrices} sub-matrices)",
                name(operand)
            ),
            MatrixOutOfRange {
                matrix,
                num_matrices,
            } => write!(
                f,
                "matrix {matrix} does not exist (matrices are 1..{num_matrices})"
            ),
            SwapShapes { a, b } => write!(f, "swapped matrices {a} and {b} differ in shape"),
            ComponentOutOfRange {
                component,
                num_components,
            } => write!(
                f,
                "component {component} does not exist ({num_components} components)"
            ),
            PrecomputedOutOfRange { index, len } => write!(
                f,
                "precomputed indexes {index} do not exist ({len} entries)"
            ),
            NodeOutOfRange { node, num_nodes } => {
                write!(f, "node {node} does not exist ({num_nodes} nodes)")
            }
            JumpOutOfRange {
                target,
                num_commands,
            } => write!(
                f,
                "jump target {target} is past the end ({num_commands} commands)"
            ),
            TableOutOfRange { table, index, len } => {
                write!(f, "{table} {index} does not exist ({len} entries)")
            }
            ShapeMismatch {
                operand,
                submatrix,
                expected,
                found,
            } => write!(
                f,
                "{}sub-matrix {submatrix} is {}, expected {}",
                name(operand),
                shape(found),
                shape(expected)
            ),
            TableRows {
                table,
                index,
                expected,
                found,
            } => write!(
                f,
                "{table} {index} has {found} entries, expected one per row ({expected})"
            ),
            RowIndex {
                table,
                row,
                value,
                limit,
            } => write!(
                f,
                "{table} entry {row} is {value:?}, outside its source ({limit} rows)"
            ),
            ComponentDim {
                operand,
                submatrix,
                side,
                expected,
                found,
            } => write!(
                f,
                "{}sub-matrix {submatrix} has {found} columns, but the component's {} dimension is {expected}",
                name(operand),
                match side {
                    Side::Input => "input",
                    Side::Output => "output",
                }
            ),
            MissingOperand { operand, why } => write!(f, "no {operand} sub-matrix, but {why}"),
            UndefinedRead { submatrix, matrix } => write!(
                f,
                "reads sub-matrix {submatrix} of matrix {matrix} before anything wrote it (allocated undefined)"
            ),
            UseBeforeAlloc { matrix } => write!(f, "uses matrix {matrix} before it is allocated"),
            UseAfterFree { matrix, freed_at } => write!(
                f,
                "uses matrix {matrix} after command {freed_at} freed it"
            ),
            DoubleAlloc {
                matrix,
                allocated_at,
            } => write!(
                f,
                "allocates matrix {matrix}, already allocated by command {allocated_at}"
            ),
            DoubleFree { matrix, freed_at } => write!(
                f,
                "frees matrix {matrix}, already freed by command {freed_at}"
            ),
            FreeBeforeAlloc { matrix } => {
                write!(f, "frees matrix {matrix}, which was never allocated")
            }
            UseWhileCompressed {
                matrix,
                compressed_at,
            } => write!(
                f,
                "uses matrix {matrix} while compressed (by command {compressed_at}, not yet decompressed)"
            ),
            NotCompressed { matrix } => {
                write!(f, "decompresses matrix {matrix}, which is not compressed")
            }
            LossyRead { submatrix, matrix } => write!(
                f,
                "reads sub-matrix {submatrix} of matrix {matrix}, which holds only signs since its decompression, but not as the out-value of a backprop that needs only signs"
            ),
            NeverFreed {
                matrix,
                allocated_at,
            } => write!(
                f,
                "matrix {matrix} (allocated by command {allocated_at}) is never freed nor handed out"
            ),
            MemoMissing { memo, component } => write!(
                f,
                "backprop of component {component} needs memo {memo}, which no earlier propagate of it stored"
            ),
            MemoReused { memo, stored_at } => write!(
                f,
                "stores memo {memo}, but the memo command {stored_at} stored there was never used"
            ),
        }
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.command {
            Some(k) => write!(f, "command {k}: {}", self.problem),
            None => write!(f, "{}", self.problem),
        }
    }
}

impl std::error::Error for CheckError {}

fn at_command(command: usize, problem: Problem) -> CheckError {
    CheckError {
        command: Some(command),
        problem,
    }
}

/// Checks that every index of `comp` is in range and every shape consistent, so that
/// executing it on `nnet` cannot index out of bounds. Returns each command's accesses.
pub fn check_structure(
    comp: &NnetComputation,
    nnet: &Nnet,
) -> Result<Vec<CommandAccesses>, CheckError> {
    let nm = comp.matrices.len();
    for (k, s) in comp.submatrices.iter().enumerate().skip(1) {
        let table = |problem| CheckError {
            command: None,
            problem,
        };
        let m = comp
            .matrices
            .get(s.matrix)
            .filter(|_| s.matrix > 0)
            .ok_or_else(|| {
                table(Problem::SubmatrixMatrix {
                    submatrix: k,
                    matrix: s.matrix,
                    num_matrices: nm,
                })
            })?;
        if s.row_offset + s.num_rows > m.num_rows || s.col_offset + s.num_cols > m.num_cols {
            return Err(table(Problem::SubmatrixBounds {
                submatrix: *s,
                index: k,
                matrix_shape: (m.num_rows, m.num_cols),
            }));
        }
    }
    let mut all = Vec::with_capacity(comp.commands.len());
    for (k, cmd) in comp.commands.iter().enumerate() {
        let acc = command_accesses(nnet, cmd);
        check_command(comp, nnet, &acc).map_err(|p| at_command(k, p))?;
        all.push(acc);
    }
    Ok(all)
}

fn shape_of(comp: &NnetComputation, s: usize) -> Shape {
    let i = &comp.submatrices[s];
    (i.num_rows, i.num_cols)
}

/// The structural checks of one command.
fn check_command(
    comp: &NnetComputation,
    nnet: &Nnet,
    acc: &CommandAccesses,
) -> Result<(), Problem> {
    let (nm, ns) = (comp.matrices.len(), comp.submatrices.len());
    let matrix = |m: usize| {
        if m == 0 || m >= nm {
            Err(Problem::MatrixOutOfRange {
                matrix: m,
                num_matrices: nm,
            })
        } else {
            Ok(())
        }
    };
    match acc.matrix {
        MatrixOp::None => {}
        MatrixOp::Alloc { m, .. }
        | MatrixOp::Dealloc { m }
        | MatrixOp::Compress { m }
        | MatrixOp::Decompress { m } => matrix(m)?,
        MatrixOp::Swap { a, b } => {
            matrix(a)?;
            matrix(b)?;
            if comp.matrices[a] != comp.matrices[b] {
                return Err(Problem::SwapShapes { a, b });
            }
        }
    }
    for o in &acc.operands {
        if (o.submatrix == 0 && !o.optional) || o.submatrix >= ns.max(1) {
            return Err(Problem::SubmatrixOutOfRange {
                operand: o.name,
                submatrix: o.submatrix,
                num_submatrices: ns,
            });
        }
    }
    check_rows(comp, acc.rows)?;
    if let Some(u) = acc.component {
        let c = nnet
            .components
            .get(u.component)
            .ok_or(Problem::ComponentOutOfRange {
                component: u.component,
                num_components: nnet.components.len(),
            })?;
        let len = comp.component_precomputed_indexes.len().max(1);
        if u.precomputed >= len {
            return Err(Problem::PrecomputedOutOfRange {
                index: u.precomputed,
                len,
            });
        }
        let props = c.properties();
        // Columns are the component's dimensions; rows agree per side (and across sides
        // for simple components, which map row i to row i).
        let mut rows: [Option<(&'static str, usize)>; 2] = [None, None];
        for o in acc.operands.iter().filter(|o| o.submatrix != 0) {
            let Some(side) = o.side else { continue };
            let (r, cols) = shape_of(comp, o.submatrix);
            let dim = match side {
                Side::Input => c.input_dim(),
                Side::Output => c.output_dim(),
            };
            if cols != dim {
                return Err(Problem::ComponentDim {
                    operand: o.name,
                    submatrix: o.submatrix,
                    side,
                    expected: dim,
                    found: cols,
                });
            }
            let slot = if props.has(Properties::SIMPLE) {
                0
            } else {
                side as usize
            };
            match rows[slot] {
                Some((_, want)) if want != r => {
                    return Err(Problem::ShapeMismatch {
                        operand: o.name,
                        submatrix: o.submatrix,
                        expected: (want, cols),
                        found: (r, cols),
                    })
                }
                Some(_) => {}
                None => rows[slot] = Some((o.name, r)),
            }
        }
        if u.backprop {
            for (flag, name, why) in [
                (
                    Properties::BACKPROP_NEEDS_INPUT,
                    "in-value",
                    "the component's backprop needs its input",
                ),
                (
                    Properties::BACKPROP_NEEDS_OUTPUT,
                    "out-value",
                    "the component's backprop needs its output",
                ),
            ] {
                let given = acc
                    .operands
                    .iter()
                    .any(|o| o.name == name && o.submatrix != 0);
                if props.has(flag) && !given {
                    return Err(Problem::MissingOperand { operand: name, why });
                }
            }
        }
    }
    if let Some(node) = acc.io.map(NodeIo::node) {
        if node >= nnet.nodes.len() {
            return Err(Problem::NodeOutOfRange {
                node,
                num_nodes: nnet.nodes.len(),
            });
        }
    }
    if let Some(target) = acc.jump {
        if target >= comp.commands.len() {
            return Err(Problem::JumpOutOfRange {
                target,
                num_commands: comp.commands.len(),
            });
        }
    }
    Ok(())
}

/// The row correspondence of a command: tables exist, have one entry per row, point inside
/// their sources, and the operands' columns agree.
fn check_rows(comp: &NnetComputation, rows: RowMap) -> Result<(), Problem> {
    fn table<'t, T>(
        tables: &'t [Vec<T>],
        name: &'static str,
        index: usize,
        rows: usize,
    ) -> Result<&'t [T], Problem> {
        let t = tables.get(index).ok_or(Problem::TableOutOfRange {
            table: name,
            index,
            len: tables.len(),
        })?;
        if t.len() != rows {
            return Err(Problem::TableRows {
                table: name,
                index,
                expected: rows,
                found: t.len(),
            });
        }
        Ok(t)
    }
    let same_cols = |dst: usize, src: usize, whole: bool| {
        let (d, s) = (shape_of(comp, dst), shape_of(comp, src));
        let mismatch = if whole { d != s } else { d.1 != s.1 };
        if mismatch {
            let expected = if whole { d } else { (s.0, d.1) };
            Err(Problem::ShapeMismatch {
                operand: "src",
                submatrix: src,
                expected,
                found: s,
            })
        } else {
            Ok((d, s))
        }
    };
    match rows {
        RowMap::None => {}
        RowMap::Same { dst, src } => {
            same_cols(dst, src, true)?;
        }
        RowMap::Indexes { dst, src, table: t } => {
            let (d, s) = same_cols(dst, src, false)?;
            let v = table(&comp.indexes, "indexes", t, d.0)?;
            if let Some(row) = v.iter().position(|&j| j >= 0 && j as usize >= s.0) {
                return Err(Problem::RowIndex {
                    table: "indexes",
                    row,
                    value: (v[row], v[row]),
                    limit: s.0,
                });
            }
        }
        RowMap::Ranges { dst, src, table: t } => {
            let (d, s) = same_cols(dst, src, false)?;
            let v = table(&comp.indexes_ranges, "indexes_ranges", t, d.0)?;
            if let Some(row) = v
                .iter()
                .position(|&(a, b)| b > a && (a < 0 || b as usize > s.0))
            {
                return Err(Problem::RowIndex {
                    table: "indexes_ranges",
                    row,
                    value: v[row],
                    limit: s.0,
                });
            }
        }
        RowMap::Multi {
            local, table: t, ..
        } => {
            let (rows, cols) = shape_of(comp, local);
            let v = table(&comp.indexes_multi, "indexes_multi", t, rows)?;
            for (row, &(s, r)) in v.iter().enumerate() {
                if s < 0 {
                    continue;
                }
                let s = s as usize;
                if s == 0 || s >= comp.submatrices.len() {
                    return Err(Problem::SubmatrixOutOfRange {
                        operand: "indexes_multi",
                        submatrix: s,
                        num_submatrices: comp.submatrices.len(),
                    });
                }
                let (srows, scols) = shape_of(comp, s);
                if scols != cols {
                    return Err(Problem::ShapeMismatch {
                        operand: "indexes_multi",
                        submatrix: s,
                        expected: (srows, cols),
                        found: (srows, scols),
                    });
                }
                if r < 0 || r as usize >= srows {
                    return Err(Problem::RowIndex {
                        table: "indexes_multi",
                        row,
                        value: (s as i32, r),
                        limit: srows,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Per matrix: where it stands at some command of the walk.
#[derive(Clone, Debug)]
enum Life {
    Unallocated,
    Allocated { at: usize },
    Freed { at: usize },
    Compressed { at: usize },
}

/// The blocks of one matrix: row and column cut points, and which blocks hold defined data.
struct Blocks {
    row_cuts: Vec<usize>,
    col_cuts: Vec<usize>,
    defined: Vec<bool>,
}

impl Blocks {
    /// The blocks of every matrix of `comp` (all undefined).
    fn of_all(comp: &NnetComputation) -> Vec<Blocks> {
        let mut all: Vec<Blocks> = comp
            .matrices
            .iter()
            .map(|info| Blocks {
                row_cuts: vec![0, info.num_rows],
                col_cuts: vec![0, info.num_cols],
                defined: Vec::new(),
            })
            .collect();
        for s in comp.submatrices.iter().skip(1) {
            let b = &mut all[s.matrix];
            b.row_cuts.extend([s.row_offset, s.row_offset + s.num_rows]);
            b.col_cuts.extend([s.col_offset, s.col_offset + s.num_cols]);
        }
        for b in &mut all {
            for v in [&mut b.row_cuts, &mut b.col_cuts] {
                v.sort_unstable();
                v.dedup();
            }
            b.defined = vec![false; (b.row_cuts.len() - 1) * (b.col_cuts.len() - 1)];
        }
        all
    }

    /// Block indexes covered by sub-matrix `s`.
    fn covered(&self, s: &SubMatrixInfo) -> impl Iterator<Item = usize> + '_ {
        let span = |cuts: &[usize], off: usize, n: usize| {
            let a = cuts.partition_point(|&c| c < off);
            let b = cuts.partition_point(|&c| c < off + n);
            a..b
        };
        let rows = span(&self.row_cuts, s.row_offset, s.num_rows);
        let cols = span(&self.col_cuts, s.col_offset, s.num_cols);
        let width = self.col_cuts.len() - 1;
        rows.flat_map(move |r| cols.clone().map(move |c| r * width + c))
    }

    fn set_all(&mut self, value: bool) {
        self.defined.iter_mut().for_each(|d| *d = value);
    }
}

/// Checks the structure ([`check_structure`]) and the data flow of `comp` (module doc).
/// Commands are taken in order, as the executor runs them (loops are not followed).
pub fn check_computation(comp: &NnetComputation, nnet: &Nnet) -> Result<(), CheckError> {
    let accesses = check_structure(comp, nnet)?;
    let nm = comp.matrices.len();
    let mut life = vec![Life::Unallocated; nm];
    let mut blocks = Blocks::of_all(comp);
    let mut handed_out = vec![false; nm];
    // Per matrix: decompressed, so holding only the signs of its values.
    let mut signs_only = vec![false; nm];
    // Memo slot → (component, command that stored it).
    let mut memos: std::collections::HashMap<usize, (usize, usize)> = Default::default();
    for (k, acc) in accesses.iter().enumerate() {
        match acc.matrix {
            MatrixOp::None => {}
            MatrixOp::Alloc { m, zeroed } => {
                match life[m] {
                    Life::Allocated { at } => {
                        return Err(at_command(
                            k,
                            Problem::DoubleAlloc {
                                matrix: m,
                                allocated_at: at,
                            },
                        ))
                    }
                    Life::Compressed { .. } => {
                        live(&life, m).map_err(|p| at_command(k, p))?;
                    }
                    Life::Unallocated | Life::Freed { .. } => {}
                }
                life[m] = Life::Allocated { at: k };
                blocks[m].set_all(zeroed);
                signs_only[m] = false;
            }
            MatrixOp::Dealloc { m } => match life[m] {
                Life::Allocated { .. } => life[m] = Life::Freed { at: k },
                Life::Freed { at } => {
                    return Err(at_command(
                        k,
                        Problem::DoubleFree {
                            matrix: m,
                            freed_at: at,
                        },
                    ))
                }
                Life::Unallocated => {
                    return Err(at_command(k, Problem::FreeBeforeAlloc { matrix: m }))
                }
                Life::Compressed { .. } => live(&life, m).map_err(|p| at_command(k, p))?,
            },
            // allocate-from-other: `a` takes the storage of `b`, which is freed.
            MatrixOp::Swap { a, b }
                if matches!(life[a], Life::Unallocated)
                    && matches!(life[b], Life::Allocated { .. }) =>
            {
                life[a] = Life::Allocated { at: k };
                life[b] = Life::Freed { at: k };
                blocks[a].set_all(false);
                signs_only[a] = false;
            }
            MatrixOp::Compress { m } => {
                live(&life, m).map_err(|p| at_command(k, p))?;
                life[m] = Life::Compressed { at: k };
            }
            MatrixOp::Decompress { m } => match life[m] {
                // Definedness is as at compression: nothing touched the matrix since.
                Life::Compressed { .. } => {
                    life[m] = Life::Allocated { at: k };
                    signs_only[m] = true;
                }
                _ => return Err(at_command(k, Problem::NotCompressed { matrix: m })),
            },
            MatrixOp::Swap { a, b } => {
                for m in [a, b] {
                    live(&life, m).map_err(|p| at_command(k, p))?;
                }
                // The blocks of a and b may be cut differently: keep only "all defined".
                let full = |m: usize| blocks[m].defined.iter().all(|&d| d);
                let (fa, fb) = (full(a), full(b));
                blocks[a].set_all(fb);
                blocks[b].set_all(fa);
                signs_only.swap(a, b);
            }
        }
        let subs = acc.submatrices(comp);
        let sign_reader = acc.reads_output_sign(nnet);
        for &(s, a) in &subs {
            let m = comp.submatrices[s].matrix;
            let as_out_value = sign_reader && acc.names_of(s).any(|n| n == "out-value");
            if signs_only[m] && a.reads() && !as_out_value {
                return Err(at_command(
                    k,
                    Problem::LossyRead {
                        submatrix: s,
                        matrix: m,
                    },
                ));
            }
        }
        // Reads see the state before the command's writes.
        for &(s, a) in &subs {
            let info = &comp.submatrices[s];
            live(&life, info.matrix).map_err(|p| at_command(k, p))?;
            if a.reads()
                && !blocks[info.matrix]
                    .covered(info)
                    .all(|b| blocks[info.matrix].defined[b])
            {
                return Err(at_command(
                    k,
                    Problem::UndefinedRead {
                        submatrix: s,
                        matrix: info.matrix,
                    },
                ));
            }
        }
        for &(s, a) in &subs {
            if a == Access::Write {
                let info = &comp.submatrices[s];
                let covered: Vec<usize> = blocks[info.matrix].covered(info).collect();
                for b in covered {
                    blocks[info.matrix].defined[b] = true;
                }
            }
        }
        if let Some(NodeIo::Provide { .. }) = acc.io {
            for &(s, _) in &subs {
                handed_out[comp.submatrices[s].matrix] = true;
            }
        }
        if let Some(u) = acc.component {
            match u.memo {
                MemoUse::None => {
                    let uses_memo = nnet.components[u.component]
                        .properties()
                        .has(Properties::USES_MEMO);
                    if u.backprop && uses_memo {
                        return Err(at_command(
                            k,
                            Problem::MemoMissing {
                                memo: 0,
                                component: u.component,
                            },
                        ));
                    }
                }
                MemoUse::Writes(slot) => {
                    if let Some(&(_, stored_at)) = memos.get(&slot) {
                        return Err(at_command(
                            k,
                            Problem::MemoReused {
                                memo: slot,
                                stored_at,
                            },
                        ));
                    }
                    memos.insert(slot, (u.component, k));
                }
                MemoUse::Reads(slot) => match memos.remove(&slot) {
                    Some((c, _)) if c == u.component => {}
                    _ => {
                        return Err(at_command(
                            k,
                            Problem::MemoMissing {
                                memo: slot,
                                component: u.component,
                            },
                        ))
                    }
                },
            }
        }
    }
    for (m, l) in life.iter().enumerate().skip(1) {
        if let Life::Allocated { at } | Life::Compressed { at } = *l {
            if !handed_out[m] {
                return Err(CheckError {
                    command: None,
                    problem: Problem::NeverFreed {
                        matrix: m,
                        allocated_at: at,
                    },
                });
            }
        }
    }
    Ok(())
}

fn live(life: &[Life], m: usize) -> Result<(), Problem> {
    match life[m] {
        Life::Allocated { .. } => Ok(()),
        Life::Freed { at } => Err(Problem::UseAfterFree {
            matrix: m,
            freed_at: at,
        }),
        Life::Unallocated => Err(Problem::UseBeforeAlloc { matrix: m }),
        Life::Compressed { at } => Err(Problem::UseWhileCompressed {
            matrix: m,
            compressed_at: at,
        }),
    }
}
