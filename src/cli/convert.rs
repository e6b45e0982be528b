//! `compnet convert --from ndl|brainstorm <in> <out.config>`: prints the nnet3 config a
//! network description becomes, so users see what their network is in Kaldi's terms.
//!
//! For Brainstorm the config is the one the front end built the network from (components with
//! the options they were created with, then the nodes), so `compnet init --srand=N out.config`
//! gives the same network, parameters included, as `compnet init --srand=N <in>`; the network
//! is built once here too, so a config that would not initialise is never written. For NDL
//! the config has the same components (the lines the front end made them from) and nodes;
//! NDL's initial values (uniform, Gaussian, fixed) are not config options, so `compnet init`
//! on the config draws Kaldi's instead, as a comment line in the output says.

use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::frontend::{brainstorm, network_from_text, Format};

command_args! {
    /// Options of `compnet convert`.
    #[usage("compnet convert [options] <network-in> <config-out>")]
    #[example("compnet convert --from=brainstorm net.json net.config\n\
                  <config-out> may be - for stdout.")]
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
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let [input, output] = Args::positionals(&a.args)?;
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
    // The network is built whatever the format, so nothing that would not initialise is
    // written.
    let mut rng = crate::random::seeded_rng(a.srand as u64);
    let (config, note) = if format == Format::Ndl {
        // NDL draws its own initial values (uniform, Gaussian, fixed), which no nnet3 config
        // line can carry: the config gives the same network with Kaldi's initial values.
        let (_, config) = crate::frontend::ndl::read_ndl_with_config(&text, name, &mut rng)?;
        let note = "# initial values: `compnet init` on this config draws Kaldi's; on the NDL \
                    file, NDL's (uniform, Gaussian or fixed)\n";
        (config, note)
    } else {
        network_from_text(&text, name, format, &mut rng)?;
        (brainstorm::lower(&text, name)?.config_text(), "")
    };
    let header = format!(
        "# nnet3 config from {} ({}), written by compnet convert\n",
        std::path::Path::new(name)
            .file_name()
            .map_or(name.into(), |f| f.to_string_lossy()),
        format.name()
    );
    crate::io::write_file_atomic(output, format!("{header}{note}{config}").as_bytes())?;
    if output != "-" {
        eprintln!("compnet convert: wrote the nnet3 config of {name} to {output}");
    }
    Ok(0)
}
