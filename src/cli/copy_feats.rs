//! `compnet copy-feats`: copies feature matrices between tables (or single files), optionally
//! compressing them, like Kaldi's `copy-feats`.

use super::kaldi_args::parse_kaldi_bool;
use crate::cli::args::command_args;
use crate::error::{Error, Result};
use crate::io::compressed::{CompressedMatrix, CompressionMethod};
use crate::io::table::{
    parse_rspecifier, parse_wspecifier, read_object, write_object, CompressedMatrixWriter,
    MatrixWriter, SequentialMatrixReader,
};
use crate::matrix::Matrix;

fn parse_method(s: &str) -> std::result::Result<i64, String> {
    let n: i64 = s
        .parse()
        .map_err(|_| format!("expected an integer 1..7, got \"{s}\""))?;
    if CompressionMethod::from_number(n).is_none() {
        return Err(format!("compression method must be 1..7, got {n}"));
    }
    Ok(n)
}

command_args! {
    /// Options of `compnet copy-feats`.
    #[usage("compnet copy-feats [options] <feature-rspecifier> <feature-wspecifier>\n       compnet copy-feats [options] <feats-rxfilename> <feats-wxfilename>")]
    #[example("compnet copy-feats ark:- ark,scp:foo.ark,foo.scp")]
    pub struct Args {
        /// Write single-file output in binary (table outputs follow their wspecifier).
        #[arg(long, default_value = "true", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
        pub binary: bool,
        /// Compress the matrices (CompressedMatrix).
        #[arg(long, default_value = "false", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
        pub compress: bool,
        /// Compression method: 1 automatic, 2 speech-feature (CM), 3 two-byte, 4 two-byte signed
        /// integer, 5 one-byte, 6 one-byte unsigned integer, 7 one-byte 0..1.
        #[arg(long = "compression-method", default_value = "1", value_parser = parse_method)]
        pub compression_method: i64,
        /// Wspecifier to write each utterance's number of frames to (e.g. `ark,t:utt2num_frames`).
        #[arg(long = "write-num-frames", default_value = "")]
        pub write_num_frames: String,
        /// Input: rspecifier (or rxfilename of a single matrix).
        pub input: String,
        /// Output: wspecifier (or wxfilename of a single matrix).
        pub output: String,
    }
}

/// Copies every matrix; returns the number copied.
pub fn copy_feats(a: &Args) -> Result<usize> {
    let method = CompressionMethod::from_number(a.compression_method).ok_or_else(|| {
        Error::Usage(format!(
            "invalid --compression-method={}",
            a.compression_method
        ))
    })?;
    let in_table = parse_rspecifier(&a.input).is_ok();
    let out_table = parse_wspecifier(&a.output).is_ok();
    if in_table != out_table {
        return Err(Error::Usage(
            "copy-feats: either both arguments are tables (rspecifier, wspecifier) or neither"
                .into(),
        ));
    }
    if !in_table {
        if !a.write_num_frames.is_empty() {
            return Err(Error::Usage(
                "--write-num-frames needs table arguments (an rspecifier and a wspecifier)".into(),
            ));
        }
        let m: Matrix = read_object(&a.input)?;
        super::warn_non_finite("copy-feats", &a.input, &m, a.compress);
        if a.compress {
            write_object(&a.output, a.binary, &CompressedMatrix::compress(&m, method))?;
        } else {
            write_object(&a.output, a.binary, &m)?;
        }
        return Ok(1);
    }
    let reader = SequentialMatrixReader::open(&a.input)?;
    let mut num_frames = match a.write_num_frames.as_str() {
        "" => None,
        w => Some(crate::io::table::TableWriter::<i32>::open(w)?),
    };
    let mut count_frames = |key: &str, m: &Matrix| -> Result<()> {
        if let Some(w) = num_frames.as_mut() {
            w.write(key, &(m.num_rows() as i32))?;
        }
        Ok(())
    };
    let mut n = 0;
    if a.compress {
        let mut w = CompressedMatrixWriter::open(&a.output)?;
        for item in reader {
            let (key, m) = item?;
            super::warn_non_finite("copy-feats", &key, &m, true);
            count_frames(&key, &m)?;
            w.write(&key, &CompressedMatrix::compress(&m, method))?;
            n += 1;
        }
        w.close()?;
    } else {
        let mut w = MatrixWriter::open(&a.output)?;
        for item in reader {
            let (key, m) = item?;
            super::warn_non_finite("copy-feats", &key, &m, false);
            count_frames(&key, &m)?;
            w.write(&key, &m)?;
            n += 1;
        }
        w.close()?;
    }
    if let Some(w) = num_frames {
        w.close()?;
    }
    Ok(n)
}

/// Runs the command (exit status 1 when nothing was copied, as Kaldi does).
pub fn run(a: Args) -> Result<i32> {
    let n = copy_feats(&a)?;
    eprintln!("compnet copy-feats: copied {n} feature matrices.");
    if n == 0 {
        // Kaldi's exit status 1, with a message saying why (an empty or truncated archive).
        eprintln!("compnet: error: no feature matrices in {}", a.input);
        return Ok(1);
    }
    Ok(0)
}
