//! `compnet merge-egs` (Kaldi's `nnet3-merge-egs`): examples into minibatches.

use super::copy_feats::parse_kaldi_bool;
use crate::egs::merge::{eg_size, merge_examples, same_structure, MinibatchSizes};
use crate::error::Result;
use crate::io::egs::{NnetExample, NnetExampleWriter, SequentialNnetExampleReader};

/// Options of `compnet merge-egs`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Minibatch sizes: `256`, `128,256`, `64:128,256` or `128=64:128/256=32,64`.
    #[arg(long = "minibatch-size", default_value = "256")]
    pub minibatch_size: String,
    /// Compress the merged matrices.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
    pub compress: bool,
    /// Drop the minibatches at the end that are smaller than every allowed size.
    #[arg(long = "discard-partial-minibatches", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
    pub discard_partial_minibatches: bool,
    /// Input examples rspecifier.
    pub egs_in: String,
    /// Output minibatches wspecifier.
    pub egs_out: String,
}

struct Merger {
    sizes: MinibatchSizes,
    compress: bool,
    discard_partial: bool,
    /// Pending examples per structure, in order of first appearance.
    buckets: Vec<Vec<NnetExample>>,
    writer: NnetExampleWriter,
    written: usize,
    discarded: usize,
}

impl Merger {
    fn write(&mut self, egs: &[NnetExample]) -> Result<()> {
        let key = format!("merged-{}-{}", self.written, egs.len());
        self.writer
            .write(&key, &merge_examples(egs, self.compress))?;
        self.written += 1;
        Ok(())
    }

    fn accept(&mut self, eg: NnetExample) -> Result<()> {
        let b = match self.buckets.iter().position(|b| same_structure(&b[0], &eg)) {
            Some(b) => b,
            None => {
                self.buckets.push(Vec::new());
                self.buckets.len() - 1
            }
        };
        let size = eg_size(&eg);
        self.buckets[b].push(eg);
        let n = self
            .sizes
            .minibatch_size(size, self.buckets[b].len(), false);
        if n > 0 {
            let batch: Vec<NnetExample> = self.buckets[b].drain(..n).collect();
            self.write(&batch)?;
            if self.buckets[b].is_empty() {
                self.buckets.remove(b);
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(usize, usize)> {
        for b in std::mem::take(&mut self.buckets) {
            let mut rest = b;
            while !rest.is_empty() {
                let size = eg_size(&rest[0]);
                let n = self.sizes.minibatch_size(size, rest.len(), true);
                let n = if n > 0 {
                    n
                } else if self.discard_partial {
                    self.discarded += rest.len();
                    break;
                } else {
                    rest.len()
                };
                let batch: Vec<NnetExample> = rest.drain(..n).collect();
                self.write(&batch)?;
            }
        }
        self.writer.close()?;
        Ok((self.written, self.discarded))
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let sizes = MinibatchSizes::parse(&a.minibatch_size)?;
    let reader = SequentialNnetExampleReader::open(&a.egs_in)?;
    let mut m = Merger {
        sizes,
        compress: a.compress,
        discard_partial: a.discard_partial_minibatches,
        buckets: Vec::new(),
        writer: NnetExampleWriter::open(&a.egs_out)?,
        written: 0,
        discarded: 0,
    };
    let mut read = 0usize;
    for item in reader {
        let (_key, eg) = item?;
        read += 1;
        m.accept(eg)?;
    }
    let (written, discarded) = m.finish()?;
    eprintln!(
        "LOG (merge-egs) Processed {read} egs into {written} minibatches, discarding {discarded} egs."
    );
    Ok(if written == 0 { 1 } else { 0 })
}
