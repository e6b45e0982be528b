//! `compnet info`.

use crate::error::{Error, Result};

/// Options of `compnet info`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Positional arguments.
    pub args: Vec<String>,
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let _ = a;
    Err(Error::Usage("compnet info: not implemented yet".into()))
}
