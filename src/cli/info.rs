//! `compnet info` (Kaldi's `nnet3-info`): context, parameter count, modulus, the config lines
//! with dimensions and one line per component.

use crate::cli::args::command_args;
use crate::compile::context::{nnet_context, nnet_modulus};
use crate::error::Result;
use crate::nnet::Nnet;

command_args! {
    /// Options of `compnet info`.
    #[usage("compnet info [options] <raw-nnet>")]
    #[example("compnet info 0.raw")]
    pub struct Args {
        /// The model (raw network or final.mdl; `-` = stdin).
        pub model: String,
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let nnet = Nnet::read_model_file(&a.model)?.nnet;
    let text = info_text(&nnet)?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| crate::error::Error::io("<stdout>", e))?;
    Ok(0)
}

/// The whole `nnet3-info` text for a network.
pub fn info_text(nnet: &Nnet) -> Result<String> {
    let mut s = String::new();
    // Like nnet3-info, the context is printed only for "simple" networks: an input node
    // named `input` and an output node named `output`.
    let simple = nnet
        .node_index("input")
        .is_some_and(|i| nnet.is_input_node(i))
        && nnet
            .node_index("output")
            .is_some_and(|o| nnet.is_output_node(o));
    if simple {
        let ctx = nnet_context(nnet)?;
        s += &format!("left-context: {}\nright-context: {}\n", ctx.left, ctx.right);
    }
    s += &format!("num-parameters: {}\n", nnet.num_parameters());
    s += &format!("modulus: {}\n", nnet_modulus(nnet));
    for line in nnet.config_lines_with_dims() {
        s += &line;
        s.push('\n');
    }
    for (name, c) in nnet.component_names.iter().zip(&nnet.components) {
        s += &format!("component name={name} type={}\n", c.info());
    }
    Ok(s)
}
