//! Front ends: readers that turn a network description in some toolkit's language into an
//! [`Nnet`](crate::nnet::Nnet), and the writers of that toolkit's files.
//!
//! Each front end lowers into the same network types (nodes, descriptors, components) and
//! gates the result with [`Nnet::validate`](crate::nnet::Nnet::validate), so the compiler,
//! the runtime and the trainer never know which language a network came from. Kaldi's is
//! the first; CNTK's NDL (`ndl`) and Brainstorm's architecture dictionary (`brainstorm`) sit
//! beside it, and [`read_network`] picks one by extension or by name for `init`, `fit` and
//! `convert`.

pub mod brainstorm;
pub mod cntk;
pub mod kaldi;
pub mod ndl;

use crate::error::{Error, Result};
use crate::nnet::Nnet;

/// A network description language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Kaldi's nnet3 config language.
    Kaldi,
    /// CNTK's Network Definition Language.
    Ndl,
    /// Brainstorm's architecture dictionary, as JSON.
    Brainstorm,
}

impl Format {
    /// `kaldi`, `ndl` or `brainstorm` (the `--format` / `--from` values).
    pub fn parse(s: &str) -> Result<Format> {
        match s {
            "kaldi" | "nnet3" => Ok(Format::Kaldi),
            "ndl" | "cntk" => Ok(Format::Ndl),
            "brainstorm" | "json" => Ok(Format::Brainstorm),
            _ => Err(Error::Usage(format!(
                "unknown network format '{s}': expected kaldi, ndl or brainstorm"
            ))),
        }
    }

    /// The format a file name says: `.ndl` is NDL, `.json` Brainstorm, anything else Kaldi.
    pub fn from_path(path: &str) -> Format {
        let ext = std::path::Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase());
        match ext.as_deref() {
            Some("ndl") => Format::Ndl,
            Some("json") => Format::Brainstorm,
            _ => Format::Kaldi,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Kaldi => "kaldi",
            Format::Ndl => "ndl",
            Format::Brainstorm => "brainstorm",
        }
    }
}

/// Reads the network description at `path` (`-` = stdin) in `format` (by default the one its
/// extension says), initialising parameters from `init_rng`.
pub fn read_network(
    path: &str,
    format: Option<Format>,
    init_rng: &mut dyn rand::RngCore,
) -> Result<Nnet> {
    let format = format.unwrap_or_else(|| Format::from_path(path));
    let text = read_text(path)?;
    let name = if path == "-" { "<stdin>" } else { path };
    network_from_text(&text, name, format, init_rng)
}

/// The front end of `format` on `text` (`name` names it in errors).
pub fn network_from_text(
    text: &str,
    name: &str,
    format: Format,
    init_rng: &mut dyn rand::RngCore,
) -> Result<Nnet> {
    match format {
        Format::Kaldi => Nnet::from_config_text(text, name, init_rng),
        Format::Brainstorm => brainstorm::read_brainstorm(text, name, init_rng),
        Format::Ndl => ndl::read_ndl(text, name, init_rng),
    }
}

pub use crate::io::read_text;
