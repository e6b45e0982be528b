//! `compnet draw`: a picture of a network, as Kaldi's `steps/nnet3/nnet3_to_dot.sh` gives one:
//! Graphviz DOT text (`.dot`) or an SVG laid out by compnet (`.svg`; no Graphviz needed). The
//! network comes from a model (raw or final.mdl, text or binary) or a config (initialised, so
//! no parameters are needed). The picture itself is `nnet::draw`.

use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::frontend::Format;
use crate::nnet::draw::Picture;

command_args! {
    /// Options of `compnet draw`.
    #[usage("compnet draw [options] <model-or-config> <out.svg|out.dot>")]
    #[example("compnet draw final.raw net.svg")]
    pub struct Args {
        /// The language of a config: kaldi, ndl or brainstorm [by extension: .ndl, .json, else
        /// kaldi].
        #[arg(long)]
        pub format: Option<String>,
        /// `<model-or-config> <out.svg|out.dot>`.
        pub args: Vec<String>,
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let [input, out] = Args::positionals(&a.args)?;
    let extension = std::path::Path::new(out)
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    let svg = match extension.as_deref() {
        Some("svg") => true,
        Some("dot") | Some("gv") => false,
        _ => {
            return Err(Error::Usage(format!(
                "{out}: the picture's file name must end in .svg (a laid-out picture) or .dot \
                 (Graphviz text)"
            )))
        }
    };
    let format = a.format.as_deref().map(Format::parse).transpose()?;
    let (nnet, _) = super::fit::read_model_or_config(input, format, 0)?;
    let picture = Picture::of(&nnet);
    let text = if svg {
        picture.to_svg()
    } else {
        picture.to_dot()
    };
    crate::io::write_file_atomic(out, text.as_bytes())?;
    crate::log::log(
        "compnet draw",
        &format!(
            "Drew {} nodes and {} edges of {input} to {out}",
            picture.nodes.len(),
            picture.edges.len()
        ),
    );
    Ok(0)
}
