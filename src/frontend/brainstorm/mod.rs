//! Brainstorm's architecture dictionary (seed 002), read as JSON (lists where Brainstorm's
//! Python has tuples), lowered to an nnet3 network.
//!
//! `json.rs` parses with positions, `arch.rs` turns the dictionary into checked layers and
//! connections in topological order, `layers.rs` is the table of layer types, and `lower.rs`
//! turns each layer into nnet3 config lines. Those lines are the network: the Kaldi reader
//! builds them into an [`Nnet`], and `compnet convert` prints them, so a converted config
//! initialised with the same `--srand` is the same network, parameters included. All checks
//! happen before the lines are built, so errors point into the JSON file; if the Kaldi reader
//! still refuses a line, its error is traced back to the layer that made it.

mod arch;
pub mod json;
pub mod layers;
mod lower;

use crate::error::{Error, Result};
use crate::nnet::Nnet;
use json::Source;

/// The file name given to the generated config in the Kaldi reader's errors.
const GENERATED: &str = "<lowered brainstorm architecture>";

/// An architecture lowered to nnet3 config lines.
pub struct Lowered {
    lines: Vec<lower::Line>,
    /// (name, byte offset of its key) of each layer, to trace errors back.
    layers: Vec<(String, &'static str, usize)>,
}

impl Lowered {
    /// The nnet3 config, one line per entry, with a comment line before each layer's lines.
    pub fn config_text(&self) -> String {
        let mut s = String::new();
        for l in &self.lines {
            s.push_str(&l.text);
            s.push('\n');
        }
        s
    }
}

/// Parses and lowers an architecture (`file` names it in errors).
pub fn lower(text: &str, file: &str) -> Result<Lowered> {
    let src = Source { text, file };
    let root = json::parse(&src)?;
    let arch = arch::read(&src, &root)?;
    let lines = lower::lower(&src, &arch)?;
    Ok(Lowered {
        lines,
        layers: arch
            .layers
            .iter()
            .map(|l| (l.name.clone(), l.kind.name, l.at))
            .collect(),
    })
}

/// Reads a Brainstorm architecture into a network, initialising parameters from `init_rng`.
pub fn read_brainstorm(text: &str, file: &str, init_rng: &mut dyn rand::RngCore) -> Result<Nnet> {
    let lowered = lower(text, file)?;
    let config = lowered.config_text();
    Nnet::from_config_text(&config, GENERATED, init_rng).map_err(|e| {
        let src = Source { text, file };
        let layer = match &e {
            Error::Parse { pos, .. } if pos.file == GENERATED => pos
                .line
                .checked_sub(1)
                .and_then(|i| lowered.lines.get(i))
                .and_then(|l| l.layer),
            _ => None,
        };
        match layer.and_then(|i| lowered.layers.get(i)) {
            Some((name, kind, at)) => src.error(
                *at,
                format!("layer '{name}' ({kind}) lowers to nnet3 that compnet refuses: {e}"),
            ),
            None => src.error(0, format!("the lowered network is refused: {e}")),
        }
    })
}
