//! Kaldi's nnet3 front end: config lines (`config_line`), the descriptor syntax
//! (`descriptor_parse`), the two-pass config reader (`network_reader`), config-line output
//! (`config_writer`) and the model files, raw nnet3 and `final.mdl` (`model_file`).

pub mod config_writer;
pub mod model_file;
pub mod network_reader;
