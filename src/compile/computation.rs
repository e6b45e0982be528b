//! NnetComputation: the compiled program — matrices, submatrices, index tables and a flat
//! list of commands — that the runtime (`run::NnetComputer`) executes forward and backward.
//! Mirrors Kaldi's `NnetComputation` (`nnet-computation.h`); the printed form is in
//! `compile::print`.

use crate::index::Index;
use crate::matrix::CompressionKind;
use crate::nnet::component::PrecomputedIndexes;

/// One matrix the computation allocates (index 0 is reserved for "none").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixInfo {
    pub num_rows: usize,
    pub num_cols: usize,
}

/// Optional debug information about a matrix: what each row is (node and Cindexes).
#[derive(Clone, Debug, Default)]
pub struct MatrixDebugInfo {
    /// True if the matrix holds derivatives.
    pub is_deriv: bool,
    /// (node, Index) for each row.
    pub cindexes: Vec<(usize, Index)>,
}

/// A sub-matrix of a matrix: rows `[row_offset, row_offset+num_rows)`, columns
/// `[col_offset, col_offset+num_cols)` (index 0 is reserved for "none").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubMatrixInfo {
    pub matrix: usize,
    pub row_offset: usize,
    pub num_rows: usize,
    pub col_offset: usize,
    pub num_cols: usize,
}

/// A Propagate command's operands (see [`Command::Propagate`]), one struct as for Backprop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropagateCommand {
    pub component: usize,
    pub node: usize,
    pub precomputed: usize,
    pub input: usize,
    pub output: usize,
    pub memo: usize,
    pub store_stats: bool,
}

/// A Backprop command's operands, one struct so that the passes that read or rebuild them
/// name the fields they use instead of spelling out the whole variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackpropCommand {
    pub component: usize,
    pub node: usize,
    pub precomputed: usize,
    pub in_value: usize,
    pub out_value: usize,
    pub out_deriv: usize,
    pub in_deriv: usize,
    pub memo: usize,
    pub update: bool,
}

/// The operands of a command that maps rows of `src` to rows of `dst` through a table:
/// CopyRows and AddRows (`indexes` names a table in `indexes`), AddRowRanges (one in
/// `indexes_ranges`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowsCommand {
    pub dst: usize,
    pub src: usize,
    pub indexes: usize,
    pub alpha: f32,
}

/// The command kinds (Kaldi's `CommandType`). Argument meanings follow Kaldi's
/// `NnetComputation::Command` documentation; the fields of [`Command`] are named per kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Allocate matrix `m` (zeroed).
    AllocMatrix { m: usize },
    /// Allocate matrix `m` with unspecified contents (the optimizer's choice when the first
    /// use overwrites all of it; Kaldi's kAllocMatrixUndefined).
    AllocMatrixUndefined { m: usize },
    /// Free matrix `m`.
    DeallocMatrix { m: usize },
    /// Swap the storage of matrices `a` and `b` (Kaldi's kSwapMatrix). With `a` not
    /// allocated and `b` allocated, `a` takes over `b`'s storage (contents unspecified) and
    /// `b` is freed: allocate-from-other's reuse of a freed matrix.
    SwapMatrix { a: usize, b: usize },
    /// Keep matrix `m` in compressed form and free its storage (Kaldi's kCompressMatrix;
    /// memory compression between the forward and backward pass).
    CompressMatrix { m: usize, kind: CompressionKind },
    /// Allocate matrix `m` again, filled from its compressed form (kDecompressMatrix).
    DecompressMatrix { m: usize },
    /// Set every element of sub-matrix `s` to `alpha`.
    SetConst { s: usize, alpha: f32 },
    /// Propagate component `component` (node `node`): input sub-matrix `input`, output
    /// `output`; `precomputed` indexes into `component_precomputed_indexes` (0 = none);
    /// `memo` is the memo slot (0 = none); `store_stats` asks for statistics.
    Propagate(PropagateCommand),
    /// Backprop of component `component` (node `node`); `update` says whether to accumulate
    /// a parameter gradient (Kaldi's kBackprop vs kBackpropNoModelUpdate). Sub-matrix 0
    /// means "not needed / not present".
    Backprop(BackpropCommand),
    /// `dst = alpha · src` (Kaldi's kMatrixCopy).
    MatrixCopy { dst: usize, src: usize, alpha: f32 },
    /// `dst += alpha · src` (Kaldi's kMatrixAdd).
    MatrixAdd { dst: usize, src: usize, alpha: f32 },
    /// `dst[i] = alpha · src[indexes[i]]` (−1 → zero) (kCopyRows).
    CopyRows(RowsCommand),
    /// `dst[i] += alpha · src[indexes[i]]` (−1 → nothing) (kAddRows).
    AddRows(RowsCommand),
    /// `dst[i] = alpha · row (sub-matrix, row) of indexes_multi[..][i]` (kCopyRowsMulti).
    CopyRowsMulti {
        dst: usize,
        indexes_multi: usize,
        alpha: f32,
    },
    /// `(sub-matrix, row) of indexes_multi[..][i] = alpha · src[i]` (kCopyToRowsMulti).
    CopyToRowsMulti {
        src: usize,
        indexes_multi: usize,
        alpha: f32,
    },
    /// `dst[i] += alpha · row (sub-matrix, row) of indexes_multi[..][i]` (kAddRowsMulti).
    AddRowsMulti {
        dst: usize,
        indexes_multi: usize,
        alpha: f32,
    },
    /// `(sub-matrix, row) of indexes_multi[..][i] += alpha · src[i]` (kAddToRowsMulti).
    AddToRowsMulti {
        src: usize,
        indexes_multi: usize,
        alpha: f32,
    },
    /// `dst[i] += alpha · Σ src[ranges[i].0 .. ranges[i].1]` (kAddRowRanges); here the
    /// operands' `indexes` names a table in `indexes_ranges`.
    AddRowRanges(RowsCommand),
    /// Copy the supplied input for node `node` into sub-matrix `s` (kAcceptInput).
    AcceptInput { s: usize, node: usize },
    /// Hand sub-matrix `s` out as the value (or derivative) of node `node` (kProvideOutput).
    ProvideOutput { s: usize, node: usize },
    /// Does nothing (kNoOperation).
    NoOperation,
    /// Does nothing; must not be removed by the optimizer (kNoOperationPermanent).
    NoOperationPermanent,
    /// Marks the boundary between the forward and the backward pass (kNoOperationMarker).
    NoOperationMarker,
    /// A jump target (kNoOperationLabel), for looped computations.
    NoOperationLabel,
    /// Jump to command `target` (kGotoLabel), for looped computations.
    GotoLabel { target: usize },
}

/// The step Indexes a component's precomputed indexes were made from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrecomputedIo {
    /// The component's input rows, in row order.
    pub input_indexes: Vec<Index>,
    /// The component's output rows, in row order.
    pub output_indexes: Vec<Index>,
    /// Whether they were computed for a backward pass too.
    pub need_backprop: bool,
}

impl Command {
    /// The command's kind as Kaldi names it (its `kCopyRows`-style type without the `k`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Command::AllocMatrix { .. } => "AllocMatrix",
            Command::AllocMatrixUndefined { .. } => "AllocMatrixUndefined",
            Command::DeallocMatrix { .. } => "DeallocMatrix",
            Command::SwapMatrix { .. } => "SwapMatrix",
            Command::CompressMatrix { .. } => "CompressMatrix",
            Command::DecompressMatrix { .. } => "DecompressMatrix",
            Command::SetConst { .. } => "SetConst",
            Command::Propagate { .. } => "Propagate",
            Command::Backprop { .. } => "Backprop",
            Command::MatrixCopy { .. } => "MatrixCopy",
            Command::MatrixAdd { .. } => "MatrixAdd",
            Command::CopyRows { .. } => "CopyRows",
            Command::AddRows { .. } => "AddRows",
            Command::CopyRowsMulti { .. } => "CopyRowsMulti",
            Command::CopyToRowsMulti { .. } => "CopyToRowsMulti",
            Command::AddRowsMulti { .. } => "AddRowsMulti",
            Command::AddToRowsMulti { .. } => "AddToRowsMulti",
            Command::AddRowRanges { .. } => "AddRowRanges",
            Command::AcceptInput { .. } => "AcceptInput",
            Command::ProvideOutput { .. } => "ProvideOutput",
            Command::NoOperation => "NoOperation",
            Command::NoOperationPermanent => "NoOperationPermanent",
            Command::NoOperationMarker => "NoOperationMarker",
            Command::NoOperationLabel => "NoOperationLabel",
            Command::GotoLabel { .. } => "GotoLabel",
        }
    }
}

/// The operands of a command over a multi table (`CopyRowsMulti`, `AddRowsMulti`,
/// `CopyToRowsMulti`, `AddToRowsMulti`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MultiRows {
    /// The one-matrix operand: the destination of a gather, the source of a scatter.
    pub matrix: usize,
    /// The table in `indexes_multi`.
    pub table: usize,
    pub alpha: f32,
    /// Adds rather than copies.
    pub add: bool,
    /// Scatters `matrix`'s rows to the table's places (`...ToRowsMulti`) rather than
    /// gathering them into it.
    pub scatter: bool,
}

impl Command {
    /// The operands of a multi-table command; None for any other command.
    pub fn multi_rows(&self) -> Option<MultiRows> {
        let (matrix, table, alpha, add, scatter) = match *self {
            Command::CopyRowsMulti {
                dst,
                indexes_multi,
                alpha,
            } => (dst, indexes_multi, alpha, false, false),
            Command::AddRowsMulti {
                dst,
                indexes_multi,
                alpha,
            } => (dst, indexes_multi, alpha, true, false),
            Command::CopyToRowsMulti {
                src,
                indexes_multi,
                alpha,
            } => (src, indexes_multi, alpha, false, true),
            Command::AddToRowsMulti {
                src,
                indexes_multi,
                alpha,
            } => (src, indexes_multi, alpha, true, true),
            _ => return None,
        };
        Some(MultiRows {
            matrix,
            table,
            alpha,
            add,
            scatter,
        })
    }
}

/// The compiled program.
#[derive(Debug, Default)]
pub struct NnetComputation {
    /// Matrix 0 is a placeholder.
    pub matrices: Vec<MatrixInfo>,
    /// Optional, parallel to `matrices` when filled.
    pub matrix_debug_info: Vec<MatrixDebugInfo>,
    /// Sub-matrix 0 is a placeholder.
    pub submatrices: Vec<SubMatrixInfo>,
    /// Entry 0 is `None`.
    pub component_precomputed_indexes: Vec<Option<Box<dyn PrecomputedIndexes>>>,
    /// What each entry of `component_precomputed_indexes` was computed from (Kaldi's
    /// `PrecomputedIndexesInfo`), so that shortcut compilation (`compile::cache`) can
    /// recompute it for more sequences. Parallel to it when filled; may be empty.
    pub component_precomputed_io: Vec<PrecomputedIo>,
    /// Row index vectors for CopyRows/AddRows (−1 = none).
    pub indexes: Vec<Vec<i32>>,
    /// (sub-matrix, row) pairs for the Multi commands ((−1, −1) = none).
    pub indexes_multi: Vec<Vec<(i32, i32)>>,
    /// Row ranges for AddRowRanges.
    pub indexes_ranges: Vec<Vec<(i32, i32)>>,
    pub commands: Vec<Command>,
    /// Whether backprop commands accumulate parameter gradients.
    pub need_model_derivative: bool,
    /// Whether Kaldi's `SplitRowOps` would have split a `*Multi` command of this computation
    /// into two commands (and so called `InsertCommands`, which draws from `rand()`; see
    /// `compile::kaldi_draws`).
    pub kaldi_split_inserts: bool,
}

impl NnetComputation {
    /// Adds a matrix and returns its index (creating the placeholder 0 if needed).
    pub fn new_matrix(&mut self, num_rows: usize, num_cols: usize) -> usize {
        if self.matrices.is_empty() {
            self.matrices.push(MatrixInfo {
                num_rows: 0,
                num_cols: 0,
            });
        }
        self.matrices.push(MatrixInfo { num_rows, num_cols });
        self.matrices.len() - 1
    }
    /// Adds a sub-matrix and returns its index (creating the placeholder 0 if needed).
    pub fn new_submatrix(&mut self, info: SubMatrixInfo) -> usize {
        if self.submatrices.is_empty() {
            self.submatrices.push(SubMatrixInfo {
                matrix: 0,
                row_offset: 0,
                num_rows: 0,
                col_offset: 0,
                num_cols: 0,
            });
        }
        self.submatrices.push(info);
        self.submatrices.len() - 1
    }
    /// Adds the whole-matrix sub-matrix of matrix `m`.
    pub fn whole_submatrix(&mut self, m: usize) -> usize {
        let info = SubMatrixInfo {
            matrix: m,
            row_offset: 0,
            num_rows: self.matrices[m].num_rows,
            col_offset: 0,
            num_cols: self.matrices[m].num_cols,
        };
        self.new_submatrix(info)
    }

    /// True if sub-matrix `s` is all of its matrix.
    pub fn is_whole(&self, s: usize) -> bool {
        let i = self.submatrices[s];
        let m = &self.matrices[i.matrix];
        i.row_offset == 0
            && i.col_offset == 0
            && i.num_rows == m.num_rows
            && i.num_cols == m.num_cols
    }
}
