//! `compnet convert --from ndl|brainstorm <in> <out.config>`: prints the nnet3 config a
//! network description becomes, so users see what their network is in Kaldi's terms.
//!
//! For Brainstorm the config is the one the front end built the network from (components with
//! the options they were created with, then the nodes), so `compnet init --srand=N out.config`
//! gives the same network, parameters included, as `compnet init --srand=N <in>`; the network
//! is built once here too, so a config that would not initialise is never written. An NDL
//! network is written as a Kaldi text model instead (`--srand` seeds its initial values):
//! NDL's initialisers are not config options, and the NDL front end keeps no config lines.

use crate::error::{Error, Result};
use crate::frontend::{brainstorm, network_from_text, Format};

/// Options of `compnet convert`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet convert [options] <network-in> <config-out>",
    after_help = "e.g.: compnet convert --from=brainstorm net.json net.config\n\
                  <config-out> may be - for stdout."
)]
pub struct Args {
    /// The language of <network-in>: ndl or brainstorm [by extension: .ndl, .json].
    #[arg(long)]
    pub from: Option<String>,
    /// Seed of the initialisation done to check the network (it does not change the config).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub srand: i64,
    /// `<network-in> <config-out>`.
    #[arg(num_args = 2, required = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let [input, output] = a.args.as_slice() else {
        return Err(Error::Usage(
            "usage: compnet convert [--from=ndl|brainstorm] <network-in> <config-out>".into(),
        ));
    };
    let format = match &a.from {
        Some(f) => Format::parse(f)?,
        None => Format::from_path(input),
    };
    let text = crate::frontend::read_text(input)?;
    let name = if input == "-" {
        "<stdin>"
    } else {
        input.as_str()
    };
    if format == Format::Kaldi {
        return Err(Error::Usage(format!(
            "{name} is read as an nnet3 config already (give --from=ndl or --from=brainstorm, \
             or a .ndl / .json file)"
        )));
    }
    // Built once whatever the format, so nothing that would not initialise is written.
    let mut rng = crate::random::seeded_rng(a.srand as u64);
    let nnet = network_from_text(&text, name, format, &mut rng)?;
    if format == Format::Ndl {
        // NDL draws its own initial values (uniform, gaussian, fixed) into components made
        // from config lines it does not keep, and no nnet3 config can carry parameters: the
        // network is written as a text model, whose first lines are the nnet3 config of its
        // nodes and the rest its components, as Kaldi has them.
        crate::io::write_file_atomic(output, &nnet.write_model(false))?;
        eprintln!(
            "compnet convert: wrote {name} as a text model to {output} (NDL's initial values \
             cannot be written as an nnet3 config; the node lines at its top are the config, \
             and compnet info prints it with the components' options)"
        );
        return Ok(0);
    }
    let config = brainstorm::lower(&text, name)?.config_text();
    let header = format!(
        "# nnet3 config from {} ({}), written by compnet convert\n",
        std::path::Path::new(name)
            .file_name()
            .map_or(name.into(), |f| f.to_string_lossy()),
        format.name()
    );
    crate::io::write_file_atomic(output, format!("{header}{config}").as_bytes())?;
    if output != "-" {
        eprintln!("compnet convert: wrote the nnet3 config of {name} to {output}");
    }
    Ok(0)
}
