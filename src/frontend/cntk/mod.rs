//! CNTK's configuration files (seed 004): `config` parses the language (blocks, `$var$`,
//! `include`, command-line overrides); `mel` runs the Model Editing Language on compnet's
//! networks; `compnet cntk` (`cli::cntk`) runs their actions.

pub mod config;
pub mod mel;
