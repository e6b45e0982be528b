//! What each command reads and writes (Kaldi's nnet-analyze `CommandAttributes`): the one
//! description of command semantics that the optimizer, the checker and the executor's
//! validation share.
//!
//! [`describe`] is the only place that matches on the command kinds for their operands: a
//! new command kind does not compile until it says which of its fields are sub-matrices and
//! what it does with each (there is no wildcard arm). Everything else is derived:
//! [`command_accesses`] resolves the component-dependent parts (a component that adds to
//! its output, in-place execution) and [`rename_submatrices`] lets a pass rewrite the
//! sub-matrix fields without knowing which they are.

use super::computation::{Command, NnetComputation};
use crate::nnet::component::Properties;
use crate::nnet::Nnet;

/// How a command touches a sub-matrix (Kaldi's kReadAccess / kWriteAccess /
/// kReadWriteAccess).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads (part of) it.
    Read,
    /// Overwrites every element of it, reading nothing of it.
    Write,
    /// Reads and writes it, or writes only part of it (adds, scatters, in-place).
    ReadWrite,
}

impl Access {
    /// The access of a command that does both `self` and `other` to one sub-matrix.
    fn and(self, other: Access) -> Access {
        if self == other {
            self
        } else {
            Access::ReadWrite
        }
    }
    /// True if the old contents matter (the sub-matrix must be defined before).
    pub fn reads(self) -> bool {
        self != Access::Write
    }
}

/// Which side of its component an operand is on (its columns are the component's input or
/// output dimension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Input,
    Output,
}

/// What a command does with one sub-matrix field, before the component's properties are
/// known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Read,
    Write,
    /// `dst += …`.
    Add,
    /// A Propagate's output: written, or added to if the component says PROPAGATE_ADDS.
    PropagateOutput,
    /// A Backprop's input derivative: written, or added to with BACKPROP_ADDS.
    BackpropInDeriv,
}

/// One sub-matrix field of a command.
struct Field<'c> {
    value: &'c mut usize,
    name: &'static str,
    role: Role,
    /// Sub-matrix 0 ("none") is allowed.
    optional: bool,
    side: Option<Side>,
}

impl<'c> Field<'c> {
    /// A required operand with no component side.
    fn new(value: &'c mut usize, name: &'static str, role: Role) -> Self {
        Field {
            value,
            name,
            role,
            optional: false,
            side: None,
        }
    }
}

/// One sub-matrix operand of a command, resolved (see [`CommandAccesses::operands`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub submatrix: usize,
    /// The field's name, for error messages ("src", "in-deriv", …).
    pub name: &'static str,
    pub access: Access,
    /// Sub-matrix 0 means "none" here.
    pub optional: bool,
    pub side: Option<Side>,
}

/// How the rows of a command's operands correspond (what the shapes must satisfy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowMap {
    /// No relation between operands.
    None,
    /// `dst` and `src` have the same shape.
    Same { dst: usize, src: usize },
    /// Row i of `dst` pairs with row `indexes[table][i]` of `src` (−1: none).
    Indexes {
        dst: usize,
        src: usize,
        table: usize,
    },
    /// Row i of `dst` pairs with the rows `indexes_ranges[table][i]` of `src`.
    Ranges {
        dst: usize,
        src: usize,
        table: usize,
    },
    /// Row i of `local` pairs with the (sub-matrix, row) `indexes_multi[table][i]`, which has
    /// `local`'s columns.
    Multi {
        local: usize,
        table: usize,
        access: Access,
    },
}

/// What a command does to whole matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixOp {
    None,
    /// Allocates matrix `m`, zeroed or with undefined contents.
    Alloc {
        m: usize,
        zeroed: bool,
    },
    Dealloc {
        m: usize,
    },
    /// Exchanges the storage of `a` and `b`: both allocated, or `a` not allocated and `b`
    /// allocated (then `a` takes `b`'s storage, contents unspecified, and `b` is freed).
    Swap {
        a: usize,
        b: usize,
    },
    /// Keeps allocated matrix `m` compressed; it may not be used until decompressed.
    Compress {
        m: usize,
    },
    /// Restores compressed matrix `m` (values as its compression keeps them).
    Decompress {
        m: usize,
    },
}

/// What a command does with a memo slot (the state a Propagate hands to its Backprop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoUse {
    None,
    /// A Propagate that stores its memo in this slot.
    Writes(usize),
    /// A Backprop that consumes the memo in this slot.
    Reads(usize),
}

impl MemoUse {
    /// `uses(slot)`, or `None` for slot 0 (no memo).
    fn of(slot: usize, uses: fn(usize) -> MemoUse) -> MemoUse {
        if slot == 0 {
            MemoUse::None
        } else {
            uses(slot)
        }
    }
}

/// The component a Propagate or Backprop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComponentUse {
    pub component: usize,
    pub node: usize,
    /// Index into `component_precomputed_indexes` (0 = none).
    pub precomputed: usize,
    /// True for Backprop.
    pub backprop: bool,
    /// The command accumulates a parameter gradient into the delta network's component.
    pub updates: bool,
    /// The command stores statistics into the stats network's component.
    pub stores_stats: bool,
    pub memo: MemoUse,
}

impl ComponentUse {
    /// A Propagate's use of `component` with no memo: no backprop, update or statistics.
    fn new(component: usize, node: usize, precomputed: usize) -> Self {
        ComponentUse {
            component,
            node,
            precomputed,
            backprop: false,
            updates: false,
            stores_stats: false,
            memo: MemoUse::None,
        }
    }
}

/// An exchange of a node's value (or derivative) with the computation's caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeIo {
    /// AcceptInput: the caller's matrix is written into the sub-matrix.
    Accept { node: usize },
    /// ProvideOutput: the sub-matrix is handed to the caller.
    Provide { node: usize },
}

impl NodeIo {
    pub fn node(self) -> usize {
        match self {
            NodeIo::Accept { node } | NodeIo::Provide { node } => node,
        }
    }
}

/// Everything a command reads and writes (Kaldi's `CommandAttributes`).
#[derive(Clone, Debug, PartialEq)]
pub struct CommandAccesses {
    /// The sub-matrix fields, in field order (zeros included, with their field's name).
    pub operands: Vec<Operand>,
    /// How the operands' rows correspond.
    pub rows: RowMap,
    pub matrix: MatrixOp,
    pub component: Option<ComponentUse>,
    /// The exchange with the caller of an AcceptInput / ProvideOutput.
    pub io: Option<NodeIo>,
    /// The target of a GotoLabel.
    pub jump: Option<usize>,
}

impl CommandAccesses {
    /// Every sub-matrix the command touches, each once with the combined access (one that is
    /// both read and written is ReadWrite), including those named in `indexes_multi`.
    /// Sub-matrix 0 and indexes outside `comp` are left out.
    pub fn submatrices(&self, comp: &NnetComputation) -> Vec<(usize, Access)> {
        let mut v: Vec<(usize, Access)> = Vec::with_capacity(self.operands.len());
        let mut add = |s: usize, a: Access| {
            if s == 0 || s >= comp.submatrices.len() {
                return;
            }
            match v.iter_mut().find(|e| e.0 == s) {
                Some(e) => e.1 = e.1.and(a),
                None => v.push((s, a)),
            }
        };
        for o in &self.operands {
            add(o.submatrix, o.access);
        }
        if let RowMap::Multi { table, access, .. } = self.rows {
            for &(s, _) in comp.indexes_multi.get(table).map_or(&[][..], |t| &t[..]) {
                if s > 0 {
                    add(s as usize, access);
                }
            }
        }
        v
    }

    /// Whether the command is the backprop of a component that reads only the sign of its
    /// output (BACKPROP_NEEDS_OUTPUT_SIGN), so that value may be kept lossily compressed.
    pub fn reads_output_sign(&self, nnet: &Nnet) -> bool {
        self.component.is_some_and(|u| {
            u.backprop
                && nnet
                    .components
                    .get(u.component)
                    .is_some_and(|c| c.properties().has(Properties::BACKPROP_NEEDS_OUTPUT_SIGN))
        })
    }

    /// The names of the operand fields that hold sub-matrix `s` ("out-value", …).
    pub fn names_of(&self, s: usize) -> impl Iterator<Item = &'static str> + '_ {
        self.operands
            .iter()
            .filter(move |o| o.submatrix == s)
            .map(|o| o.name)
    }

    /// Every matrix the command touches other than by deallocating it (allocation and swaps
    /// included); unchecked indexes as they stand.
    pub fn matrices_used(&self, comp: &NnetComputation) -> Vec<usize> {
        let mut v: Vec<usize> = match self.matrix {
            MatrixOp::Alloc { m, .. } | MatrixOp::Compress { m } | MatrixOp::Decompress { m } => {
                vec![m]
            }
            MatrixOp::Swap { a, b } => vec![a, b],
            MatrixOp::None | MatrixOp::Dealloc { .. } => Vec::new(),
        };
        for (s, _) in self.submatrices(comp) {
            v.push(comp.submatrices[s].matrix);
        }
        v
    }
}

/// Non-field facts of a command, from [`describe`].
struct Facts {
    rows: RowMap,
    matrix: MatrixOp,
    component: Option<ComponentUse>,
    io: Option<NodeIo>,
    jump: Option<usize>,
}

impl Default for Facts {
    fn default() -> Self {
        Facts {
            rows: RowMap::None,
            matrix: MatrixOp::None,
            component: None,
            io: None,
            jump: None,
        }
    }
}

/// A command's fields as [`describe`] sees them: sub-matrix fields, matrix fields, the rest.
type Described<'c> = (Vec<Field<'c>>, Vec<&'c mut usize>, Facts);

/// The one match on command kinds: every sub-matrix field with its role, every matrix field,
/// and the rest.
fn describe(cmd: &mut Command) -> Described<'_> {
    let f = Field::new;
    fn c<'c>(
        value: &'c mut usize,
        name: &'static str,
        role: Role,
        optional: bool,
        side: Side,
    ) -> Field<'c> {
        Field {
            optional,
            side: Some(side),
            ..Field::new(value, name, role)
        }
    }
    let none = Facts::default();
    // The copy and add forms of a command differ only in how they write dst.
    let dst_role = if matches!(
        cmd,
        Command::MatrixAdd { .. } | Command::AddRows { .. } | Command::AddRowsMulti { .. }
    ) {
        Role::Add
    } else {
        Role::Write
    };
    match cmd {
        Command::AllocMatrix { m } => {
            let matrix = MatrixOp::Alloc {
                m: *m,
                zeroed: true,
            };
            (vec![], vec![m], Facts { matrix, ..none })
        }
        Command::AllocMatrixUndefined { m } => {
            let matrix = MatrixOp::Alloc {
                m: *m,
                zeroed: false,
            };
            (vec![], vec![m], Facts { matrix, ..none })
        }
        Command::DeallocMatrix { m } => {
            let matrix = MatrixOp::Dealloc { m: *m };
            (vec![], vec![m], Facts { matrix, ..none })
        }
        Command::SwapMatrix { a, b } => {
            let matrix = MatrixOp::Swap { a: *a, b: *b };
            (vec![], vec![a, b], Facts { matrix, ..none })
        }
        Command::CompressMatrix { m, .. } => {
            let matrix = MatrixOp::Compress { m: *m };
            (vec![], vec![m], Facts { matrix, ..none })
        }
        Command::DecompressMatrix { m } => {
            let matrix = MatrixOp::Decompress { m: *m };
            (vec![], vec![m], Facts { matrix, ..none })
        }
        Command::SetConst { s, .. } => (vec![f(s, "", Role::Write)], vec![], none),
        Command::Propagate(p) => {
            let mut u = ComponentUse::new(p.component, p.node, p.precomputed);
            u.memo = MemoUse::of(p.memo, MemoUse::Writes);
            u.stores_stats = p.store_stats;
            let facts = Facts {
                component: Some(u),
                ..none
            };
            let (input, output) = (&mut p.input, &mut p.output);
            // Input 0: components such as ConstantComponent read no input.
            let fields = vec![
                c(input, "input", Role::Read, true, Side::Input),
                c(output, "output", Role::PropagateOutput, false, Side::Output),
            ];
            (fields, vec![], facts)
        }
        Command::Backprop(b) => {
            let mut u = ComponentUse::new(b.component, b.node, b.precomputed);
            u.memo = MemoUse::of(b.memo, MemoUse::Reads);
            (u.backprop, u.updates) = (true, b.update);
            let facts = Facts {
                component: Some(u),
                ..none
            };
            let (in_value, out_value) = (&mut b.in_value, &mut b.out_value);
            let (out_deriv, in_deriv) = (&mut b.out_deriv, &mut b.in_deriv);
            // Values the component does not need are 0; so is the input derivative of a
            // Backprop that only updates parameters.
            let fields = vec![
                c(in_value, "in-value", Role::Read, true, Side::Input),
                c(out_value, "out-value", Role::Read, true, Side::Output),
                c(out_deriv, "out-deriv", Role::Read, false, Side::Output),
                c(
                    in_deriv,
                    "in-deriv",
                    Role::BackpropInDeriv,
                    true,
                    Side::Input,
                ),
            ];
            (fields, vec![], facts)
        }
        Command::MatrixCopy { dst, src, .. } | Command::MatrixAdd { dst, src, .. } => {
            let rows = RowMap::Same {
                dst: *dst,
                src: *src,
            };
            let fields = vec![f(dst, "dst", dst_role), f(src, "src", Role::Read)];
            (fields, vec![], Facts { rows, ..none })
        }
        // CopyRows zeroes the rows whose index is −1: all of dst is written.
        Command::CopyRows(r) | Command::AddRows(r) => {
            let rows = RowMap::Indexes {
                dst: r.dst,
                src: r.src,
                table: r.indexes,
            };
            let fields = vec![
                f(&mut r.dst, "dst", dst_role),
                f(&mut r.src, "src", Role::Read),
            ];
            (fields, vec![], Facts { rows, ..none })
        }
        Command::AddRowRanges(r) => {
            let rows = RowMap::Ranges {
                dst: r.dst,
                src: r.src,
                table: r.indexes,
            };
            let fields = vec![
                f(&mut r.dst, "dst", Role::Add),
                f(&mut r.src, "src", Role::Read),
            ];
            (fields, vec![], Facts { rows, ..none })
        }
        // Rows whose pair is (−1, −1) are zeroed: all of dst is written.
        Command::CopyRowsMulti {
            dst, indexes_multi, ..
        }
        | Command::AddRowsMulti {
            dst, indexes_multi, ..
        } => multi(f(dst, "dst", dst_role), *indexes_multi, Access::Read),
        // A scatter writes only the rows it names: the targets are ReadWrite.
        Command::CopyToRowsMulti {
            src, indexes_multi, ..
        }
        | Command::AddToRowsMulti {
            src, indexes_multi, ..
        } => multi(f(src, "src", Role::Read), *indexes_multi, Access::ReadWrite),
        Command::AcceptInput { s, node } => {
            let io = Some(NodeIo::Accept { node: *node });
            (vec![f(s, "", Role::Write)], vec![], Facts { io, ..none })
        }
        Command::ProvideOutput { s, node } => {
            let io = Some(NodeIo::Provide { node: *node });
            (vec![f(s, "", Role::Read)], vec![], Facts { io, ..none })
        }
        Command::GotoLabel { target } => (
            vec![],
            vec![],
            Facts {
                jump: Some(*target),
                ..none
            },
        ),
        Command::NoOperation
        | Command::NoOperationPermanent
        | Command::NoOperationMarker
        | Command::NoOperationLabel => (vec![], vec![], none),
    }
}

/// A Multi command: one local operand and the sub-matrices named in `indexes_multi[table]`.
fn multi(local: Field<'_>, table: usize, targets: Access) -> Described<'_> {
    let facts = Facts {
        rows: RowMap::Multi {
            local: *local.value,
            table,
            access: targets,
        },
        ..Facts::default()
    };
    (vec![local], vec![], facts)
}

/// Everything `cmd` reads and writes; `nnet` says what its component does (a component index
/// outside `nnet` is taken to have no properties, the checker reports it).
pub fn command_accesses(nnet: &Nnet, cmd: &Command) -> CommandAccesses {
    let mut copy = cmd.clone();
    let (fields, _, facts) = describe(&mut copy);
    let props = facts.component.map_or(Properties(0), |u| {
        nnet.components
            .get(u.component)
            .map_or(Properties(0), |c| c.properties())
    });
    let operands = fields
        .into_iter()
        .map(|field| {
            let adds_if = |flag| {
                if props.has(flag) {
                    Access::ReadWrite
                } else {
                    Access::Write
                }
            };
            let access = match field.role {
                Role::Read => Access::Read,
                Role::Write => Access::Write,
                Role::Add => Access::ReadWrite,
                Role::PropagateOutput => adds_if(Properties::PROPAGATE_ADDS),
                Role::BackpropInDeriv => adds_if(Properties::BACKPROP_ADDS),
            };
            Operand {
                submatrix: *field.value,
                name: field.name,
                access,
                optional: field.optional,
                side: field.side,
            }
        })
        .collect();
    CommandAccesses {
        operands,
        rows: facts.rows,
        matrix: facts.matrix,
        component: facts.component,
        io: facts.io,
        jump: facts.jump,
    }
}

/// Replaces every sub-matrix field of `cmd` (not those inside `indexes_multi`) by `f` of it.
pub fn rename_submatrices(cmd: &mut Command, mut f: impl FnMut(usize) -> usize) {
    for field in describe(cmd).0 {
        *field.value = f(*field.value);
    }
}

/// Replaces every matrix field of `cmd` (allocation, deallocation, swap) by `f` of it.
pub fn rename_matrices(cmd: &mut Command, mut f: impl FnMut(usize) -> usize) {
    for m in describe(cmd).1 {
        *m = f(*m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::computation::{BackpropCommand, RowsCommand};

    fn nnet() -> Nnet {
        crate::testing::relu_nnet(false)
    }

    fn comp() -> NnetComputation {
        let mut c = NnetComputation::default();
        for _ in 0..3 {
            let m = c.new_matrix(3, 2);
            c.whole_submatrix(m);
        }
        c.indexes_multi = vec![vec![(1, 0), (-1, -1), (3, 2), (1, 1)]];
        c
    }

    fn propagate(input: usize, output: usize) -> Command {
        crate::testing::propagate_command(0, 1, input, output)
    }

    #[test]
    fn accesses_follow_the_command_semantics() {
        use Access::*;
        let (nnet, c) = (nnet(), comp());
        let subs = |cmd: Command| command_accesses(&nnet, &cmd).submatrices(&c);
        assert_eq!(subs(propagate(1, 2)), vec![(1, Read), (2, Write)]);
        // In place: read and written, so ReadWrite.
        assert_eq!(subs(propagate(2, 2)), vec![(2, ReadWrite)]);
        let copy = Command::MatrixCopy {
            dst: 2,
            src: 1,
            alpha: 1.0,
        };
        assert_eq!(subs(copy), vec![(2, Write), (1, Read)]);
        let add = Command::MatrixAdd {
            dst: 2,
            src: 1,
            alpha: 1.0,
        };
        assert_eq!(subs(add), vec![(2, ReadWrite), (1, Read)]);
        // Gathers read their sources (each once); scatters modify their targets.
        let gather = Command::CopyRowsMulti {
            dst: 2,
            indexes_multi: 0,
            alpha: 1.0,
        };
        assert_eq!(subs(gather), vec![(2, Write), (1, Read), (3, Read)]);
        let scatter = Command::CopyToRowsMulti {
            src: 2,
            indexes_multi: 0,
            alpha: 1.0,
        };
        assert_eq!(
            subs(scatter),
            vec![(2, Read), (1, ReadWrite), (3, ReadWrite)]
        );
        let backprop = Command::Backprop(BackpropCommand {
            component: 0,
            node: 1,
            precomputed: 0,
            in_value: 0,
            out_value: 2,
            out_deriv: 3,
            in_deriv: 3,
            memo: 0,
            update: false,
        });
        assert_eq!(subs(backprop), vec![(2, Read), (3, ReadWrite)]);
        let a = command_accesses(&nnet, &Command::AllocMatrixUndefined { m: 2 });
        assert_eq!(
            a.matrix,
            MatrixOp::Alloc {
                m: 2,
                zeroed: false
            }
        );
        assert!(a.submatrices(&c).is_empty());
    }

    /// Renaming reaches exactly the operands the accesses report.
    #[test]
    fn renaming_reaches_every_operand() {
        let nnet = nnet();
        let cmds = [
            propagate(1, 2),
            Command::AddRowRanges(RowsCommand {
                dst: 1,
                src: 2,
                indexes: 0,
                alpha: 1.0,
            }),
            Command::AddToRowsMulti {
                src: 3,
                indexes_multi: 0,
                alpha: 1.0,
            },
            Command::ProvideOutput { s: 2, node: 2 },
        ];
        for cmd in cmds {
            let mut renamed = cmd.clone();
            rename_submatrices(&mut renamed, |s| s + 10);
            let before = command_accesses(&nnet, &cmd).operands;
            let after = command_accesses(&nnet, &renamed).operands;
            assert_eq!(before.len(), after.len());
            for (b, a) in before.iter().zip(&after) {
                assert_eq!(a.submatrix, b.submatrix + 10, "{cmd:?}");
            }
        }
        let mut swap = Command::SwapMatrix { a: 1, b: 2 };
        rename_matrices(&mut swap, |m| m * 3);
        assert_eq!(swap, Command::SwapMatrix { a: 3, b: 6 });
    }
}
