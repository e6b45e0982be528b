//! `compnet compute`.

use crate::error::{Error, Result};

/// Options of `compnet compute`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Positional arguments.
    pub args: Vec<String>,
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let _ = a;
    Err(Error::Usage("compnet compute: not implemented yet".into()))
}
