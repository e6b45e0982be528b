//! CNTK's Network Definition Language (NDL, seed 004), lowered to an nnet3 network.
//!
//! `lexer` (tokens with line:column) → `parser` (statements, macro definitions, sections,
//! expressions) → `eval` (macros expanded, forward references and loops through `Delay`
//! resolved: a graph of nodes, each with its position and macro call chain) → `lower` (the
//! graph through [`NetworkBuilder`](crate::nnet::NetworkBuilder) with Kaldi's naming; its
//! module doc has the table) or `simple` (the `SimpleNetworkBuilder` section). Errors name
//! `file:line:column` in the NDL text and the macro calls that led there, never generated
//! config text.

pub mod eval;
pub mod lexer;
pub mod lower;
pub mod parser;
pub mod simple;

use crate::error::{Error, Result, TextPos};
use crate::nnet::Nnet;
use eval::NdlError;
use lexer::Pos;
use rand::RngCore;

/// Reads NDL text (`file` names it in errors) into a network, drawing initial parameters
/// from `rng`.
pub fn read_ndl(text: &str, file: &str, rng: &mut dyn RngCore) -> Result<Nnet> {
    read_ndl_with_config(text, file, rng).map(|(nnet, _)| nnet)
}

/// [`read_ndl`], plus the network as nnet3 config lines (what `compnet convert` prints):
/// the same nodes and components, which `compnet init` fills with Kaldi's initial values
/// instead of NDL's.
pub fn read_ndl_with_config(
    text: &str,
    file: &str,
    rng: &mut dyn RngCore,
) -> Result<(Nnet, String)> {
    let at = |pos: Pos, msg: String| error_at(text, file, pos, msg);
    let tokens = lexer::tokenize(text).map_err(|(p, m)| at(p, m))?;
    let end = Pos {
        line: text.lines().count().max(1),
        column: text.lines().last().map_or(0, |l| l.chars().count()) + 1,
    };
    let stmts = parser::Parser::new(&tokens, end)
        .statements(None)
        .map_err(|(p, m)| at(p, m))?;
    let mut ev = eval::Evaluator::new();
    ev.run(stmts).map_err(|e| ndl_error(text, file, e))?;
    let graph = ev.graph;
    if let Some((pos, settings)) = &graph.simple {
        if graph.nodes.is_empty() {
            return simple::build(settings, rng).map_err(|(p, m)| at(p, m));
        }
        return Err(at(
            *pos,
            "a file holds either a SimpleNetworkBuilder section or NDL nodes, not both".into(),
        ));
    }
    let mut lw = lower::Lowerer::new(&graph, rng);
    lw.lower_roots().map_err(|e| ndl_error(text, file, e))?;
    let (nnet, config) =
        lw.b.build_with_config()
            .map_err(|e| Error::Network(format!("{file}: the lowered network is invalid: {e}")))?;
    let config = config.ok_or_else(|| {
        Error::Network(format!(
            "{file}: a component was made without a config line"
        ))
    })?;
    Ok((nnet, config))
}

fn error_at(text: &str, file: &str, pos: Pos, msg: String) -> Error {
    Error::parse(
        TextPos {
            file: file.to_string(),
            line: pos.line,
            column: pos.column,
            line_text: text
                .lines()
                .nth(pos.line.saturating_sub(1))
                .unwrap_or("")
                .to_string(),
        },
        msg,
    )
}

/// An evaluation error with the macro call chain, innermost call first.
fn ndl_error(text: &str, file: &str, e: NdlError) -> Error {
    let mut msg = e.msg;
    for c in e.origin.chain.iter().rev() {
        msg.push_str(&format!(
            "\n  in macro '{}' called at {file}:{}:{}",
            c.name, c.pos.line, c.pos.column
        ));
    }
    error_at(text, file, e.origin.pos, msg)
}
