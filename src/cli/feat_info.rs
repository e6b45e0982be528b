//! `compnet feat-to-dim` and `compnet feat-to-len` (Kaldi's binaries of those names): the
//! dimension and the number of frames of feature matrices.

use crate::error::{Error, Result};
use crate::io::table::{parse_wspecifier, write_bytes, SequentialMatrixReader, TableWriter};

/// Options of `compnet feat-to-dim`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet feat-to-dim [options] <feat-rspecifier> (<dim-wspecifier>|<dim-wxfilename>)",
    after_help = "With a wxfilename, writes the dimension of the first matrix; with a \
                  wspecifier, the dimension of each, by key.\ne.g.: compnet feat-to-dim \
                  scp:feats.scp -"
)]
pub struct DimArgs {
    /// `<feat-rspecifier> (<dim-wspecifier>|<dim-wxfilename>)`.
    pub args: Vec<String>,
}

/// Options of `compnet feat-to-len`.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = "compnet feat-to-len [options] <in-rspecifier> [<out-wspecifier>]",
    after_help = "With one argument, prints the total number of frames; with two, writes the \
                  number of frames of each matrix by key.\ne.g.: compnet feat-to-len \
                  scp:feats.scp ark,t:feats.lengths"
)]
pub struct LenArgs {
    /// `<in-rspecifier> [<out-wspecifier>]`.
    pub args: Vec<String>,
}

/// Runs `feat-to-dim`.
pub fn run_dim(a: DimArgs) -> Result<i32> {
    let [rspec, out] = a.args.as_slice() else {
        return Err(Error::Usage(
            "usage: feat-to-dim [options] <feat-rspecifier> (<dim-wspecifier>|<dim-wxfilename>)"
                .into(),
        ));
    };
    let reader = SequentialMatrixReader::open(rspec)?;
    if parse_wspecifier(out).is_ok() {
        let mut w = TableWriter::<i32>::open(out)?;
        for item in reader {
            let (key, m) = item?;
            w.write(&key, &(m.num_cols() as i32))?;
        }
        w.close()?;
    } else {
        let Some(first) = reader.into_iter().next() else {
            return Err(Error::Compute(format!(
                "{rspec}: could not read any features (empty archive?)"
            )));
        };
        let (_, m) = first?;
        write_bytes(out, format!("{}\n", m.num_cols()).as_bytes())?;
    }
    Ok(0)
}

/// Runs `feat-to-len`.
pub fn run_len(a: LenArgs) -> Result<i32> {
    match a.args.as_slice() {
        [rspec, wspec] => {
            parse_wspecifier(wspec)?;
            let mut w = TableWriter::<i32>::open(wspec)?;
            for item in SequentialMatrixReader::open(rspec)? {
                let (key, m) = item?;
                w.write(&key, &(m.num_rows() as i32))?;
            }
            w.close()?;
        }
        [rspec] => {
            let mut total = 0u64;
            for item in SequentialMatrixReader::open(rspec)? {
                total += item?.1.num_rows() as u64;
            }
            write_bytes("-", format!("{total}\n").as_bytes())?;
        }
        _ => {
            return Err(Error::Usage(
                "usage: feat-to-len [options] <in-rspecifier> [<out-wspecifier>]".into(),
            ))
        }
    }
    Ok(0)
}
