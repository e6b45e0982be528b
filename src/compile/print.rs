//! A readable, stable rendering of an [`NnetComputation`], in the spirit of Kaldi's
//! `NnetComputation::Print`: a line with the matrices and their sizes, optional debug info
//! (what each matrix row is), the sub-matrices that are not whole matrices, then one line per
//! command (`c4: affine.Propagate(NULL, m1, &m2)`).

use super::computation::{Command, NnetComputation};
use super::request::format_indexes;
use crate::io::codec::fmt_g;
use crate::nnet::{Index, Nnet};
use std::fmt::Write;

/// The name of a sub-matrix: `m3` for a whole matrix, `m3(0:9, 16:31)` for a part
/// (inclusive row and column ranges, as Kaldi writes them).
fn submatrix_name(c: &NnetComputation, s: usize) -> String {
    let Some(sm) = c.submatrices.get(s) else {
        return format!("<bad sub-matrix {s}>");
    };
    if s == 0 {
        return "NULL".into();
    }
    let whole = c.matrices.get(sm.matrix).is_some_and(|m| {
        sm.row_offset == 0
            && sm.col_offset == 0
            && sm.num_rows == m.num_rows
            && sm.num_cols == m.num_cols
    });
    if whole {
        format!("m{}", sm.matrix)
    } else {
        format!(
            "m{}({}:{}, {}:{})",
            sm.matrix,
            sm.row_offset,
            (sm.row_offset + sm.num_rows) as i64 - 1,
            sm.col_offset,
            (sm.col_offset + sm.num_cols) as i64 - 1
        )
    }
}

/// Compresses ascending runs: `[0:3, -1, -1, 7]`.
fn format_int_list(v: &[i32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i + 1;
        while j < v.len() && v[i] >= 0 && v[j] == v[j - 1] + 1 {
            j += 1;
        }
        if j - i >= 3 {
            parts.push(format!("{}:{}", v[i], v[j - 1]));
        } else {
            for x in &v[i..j] {
                parts.push(x.to_string());
            }
        }
        i = j;
    }
    format!("[{}]", parts.join(", "))
}

fn format_multi(c: &NnetComputation, v: &[(i32, i32)]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|&(s, r)| {
            if s < 0 {
                "NULL".to_string()
            } else {
                format!("{}[{}]", submatrix_name(c, s as usize), r)
            }
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn alpha_prefix(alpha: f32) -> String {
    if alpha == 1.0 {
        String::new()
    } else {
        format!("{} * ", fmt_g(alpha as f64, 6))
    }
}

fn name_of(names: &[String], i: usize) -> &str {
    names.get(i).map_or("?", |s| s.as_str())
}

/// One command as text.
pub fn format_command(c: &NnetComputation, nnet: &Nnet, cmd: &Command) -> String {
    let sn = |s: usize| submatrix_name(c, s);
    let multi = |i: usize| {
        c.indexes_multi
            .get(i)
            .map_or("[?]".into(), |v| format_multi(c, v))
    };
    let nodes = &nnet.node_names;
    let comps = &nnet.component_names;
    match cmd {
        Command::AllocMatrix { m } | Command::AllocMatrixUndefined { m } => {
            let (r, k) = c
                .matrices
                .get(*m)
                .map_or((0, 0), |x| (x.num_rows, x.num_cols));
            let how = if matches!(cmd, Command::AllocMatrix { .. }) {
                "zeros"
            } else {
                "undefined"
            };
            format!("m{m} = {how}({r}, {k})")
        }
        Command::DeallocMatrix { m } => format!("m{m} = []"),
        Command::SwapMatrix { a, b } => format!("m{a}.swap(m{b})"),
        // Kaldi's form: matrix, range, type, truncate.
        Command::CompressMatrix { m, kind } => match kind {
            crate::matrix::CompressionKind::SignUint8 => {
                format!("CompressMatrix(m{m}, 0, uint8, true)")
            }
        },
        Command::DecompressMatrix { m } => format!("DecompressMatrix(m{m})"),
        Command::SetConst { s, alpha } => format!("{}.Set({})", sn(*s), fmt_g(*alpha as f64, 6)),
        Command::Propagate(p) => {
            let pre = if p.precomputed == 0 {
                "NULL".to_string()
            } else {
                format!("precomputed{}", p.precomputed)
            };
            let mut s = format!(
                "{}.Propagate({}, {}, &{})",
                name_of(comps, p.component),
                pre,
                sn(p.input),
                sn(p.output)
            );
            if p.memo != 0 {
                s.push_str(&format!(" [memo {}]", p.memo));
            }
            if p.store_stats {
                s.push_str(&format!(
                    "; {}.StoreStats({})",
                    name_of(comps, p.component),
                    sn(p.output)
                ));
            }
            s
        }
        Command::Backprop(b) => {
            let name = name_of(comps, b.component);
            let pre = if b.precomputed == 0 {
                "NULL".to_string()
            } else {
                format!("precomputed{}", b.precomputed)
            };
            let in_d = if b.in_deriv == 0 {
                "NULL".to_string()
            } else {
                format!("&{}", sn(b.in_deriv))
            };
            let mut s = format!(
                "{name}.Backprop({pre}, {}, {}, {}, {}, {in_d})",
                sn(b.in_value),
                sn(b.out_value),
                sn(b.out_deriv),
                if b.update { name } else { "NULL" },
            );
            if b.memo != 0 {
                s.push_str(&format!(" [memo {}]", b.memo));
            }
            s
        }
        Command::MatrixCopy { dst, src, alpha } => {
            format!("{} = {}{}", sn(*dst), alpha_prefix(*alpha), sn(*src))
        }
        Command::MatrixAdd { dst, src, alpha } => {
            format!("{} += {}{}", sn(*dst), alpha_prefix(*alpha), sn(*src))
        }
        Command::CopyRows(r) | Command::AddRows(r) => format!(
            "{}.{}({}, {}{})",
            sn(r.dst),
            cmd.kind_name(),
            fmt_g(r.alpha as f64, 6),
            sn(r.src),
            c.indexes
                .get(r.indexes)
                .map_or("[?]".into(), |v| format_int_list(v))
        ),
        Command::CopyRowsMulti {
            dst,
            indexes_multi,
            alpha,
        }
        | Command::AddRowsMulti {
            dst,
            indexes_multi,
            alpha,
        } => format!(
            "{}.{}({}, {})",
            sn(*dst),
            cmd.kind_name(),
            fmt_g(*alpha as f64, 6),
            multi(*indexes_multi)
        ),
        Command::CopyToRowsMulti {
            src,
            indexes_multi,
            alpha,
        }
        | Command::AddToRowsMulti {
            src,
            indexes_multi,
            alpha,
        } => format!(
            "{}.{}({}, {})",
            multi(*indexes_multi),
            cmd.kind_name(),
            fmt_g(*alpha as f64, 6),
            sn(*src)
        ),
        Command::AddRowRanges(rows) => {
            let r = c
                .indexes_ranges
                .get(rows.indexes)
                .map_or("[?]".into(), |v| {
                    let items: Vec<String> = v.iter().map(|&(a, b)| format!("{a}:{b}")).collect();
                    format!("[{}]", items.join(", "))
                });
            format!(
                "{}.AddRowRanges({}, {}{})",
                sn(rows.dst),
                fmt_g(rows.alpha as f64, 6),
                sn(rows.src),
                r
            )
        }
        Command::AcceptInput { s, node } => {
            format!(
                "{} = user input [for node: '{}']",
                sn(*s),
                name_of(nodes, *node)
            )
        }
        Command::ProvideOutput { s, node } => {
            format!(
                "output {} to user [for node: '{}']",
                sn(*s),
                name_of(nodes, *node)
            )
        }
        Command::NoOperation => "[no-op]".into(),
        Command::NoOperationPermanent => "[no-op-permanent]".into(),
        Command::NoOperationMarker => {
            "# computation segment separator [e.g., begin backward commands]".into()
        }
        Command::NoOperationLabel => "[label]".into(),
        Command::GotoLabel { target } => format!("goto c{target}"),
    }
}

/// The whole computation as text.
pub fn format_computation(c: &NnetComputation, nnet: &Nnet) -> String {
    let mut out = String::new();
    let nm = c.matrices.len().saturating_sub(1);
    let _ = writeln!(
        out,
        "# Computation with {nm} matrices, {} sub-matrices, {} commands",
        c.submatrices.len().saturating_sub(1),
        c.commands.len()
    );
    let ms: Vec<String> = c
        .matrices
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, m)| format!("m{}({}, {})", i, m.num_rows, m.num_cols))
        .collect();
    let _ = writeln!(out, "matrix {}", ms.join(", "));
    if !c.matrix_debug_info.is_empty() {
        let _ = writeln!(
            out,
            "# What each matrix holds: m = <node>.[value|deriv] [ <Indexes> ]"
        );
        for (i, d) in c.matrix_debug_info.iter().enumerate().skip(1) {
            let node = d
                .cindexes
                .first()
                .map_or("?", |x| name_of(&nnet.node_names, x.0));
            let idx: Vec<Index> = d.cindexes.iter().map(|x| x.1).collect();
            let _ = writeln!(
                out,
                "m{} == {}.{} {}",
                i,
                node,
                if d.is_deriv { "deriv" } else { "value" },
                format_indexes(&idx)
            );
        }
    }
    let parts: Vec<String> = (1..c.submatrices.len())
        .filter_map(|s| {
            let n = submatrix_name(c, s);
            n.contains('(').then(|| format!("s{s} = {n}"))
        })
        .collect();
    if !parts.is_empty() {
        let _ = writeln!(out, "# sub-matrices: {}", parts.join(", "));
    }
    for (i, cmd) in c.commands.iter().enumerate() {
        let _ = writeln!(out, "c{}: {}", i, format_command(c, nnet, cmd));
    }
    out
}
