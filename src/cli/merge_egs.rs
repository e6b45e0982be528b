//! `compnet merge-egs` (Kaldi's `nnet3-merge-egs`): examples into minibatches.
//!
//! Examples are queued per structure (io names, indexes, dims). A queue is written as one
//! minibatch as soon as it reaches the largest size its rule allows; at the end each queue
//! (in the order Kaldi's hash map visits them, [`crate::egs::stl_order`]) is written in the
//! largest allowed sizes that fit, and what is left is discarded, as Kaldi does.
//! `--discard-partial-minibatches` and `--measure-output-frames` are accepted and ignored, as
//! in Kaldi.

use super::kaldi_args::parse_kaldi_bool;
use crate::cli::args::command_args;
use crate::egs::merge::{eg_size, merge_examples, same_structure, structure_hash, MinibatchSizes};
use crate::egs::stl_order::StlOrder;
use crate::error::Result;
use crate::io::codec::fmt_g;
use crate::io::egs::{NnetExample, NnetExampleWriter, SequentialNnetExampleReader};
use std::collections::BTreeMap;

command_args! {
    /// Options of `compnet merge-egs`.
    #[usage("compnet merge-egs [options] <egs-rspecifier> <egs-wspecifier>")]
    #[example("compnet merge-egs --minibatch-size=512 ark:1.egs ark:-")]
    pub struct Args {
        /// Minibatch sizes: `256`, `128,256`, `64:128,256` or `128=64:128/256=32,64`.
        #[arg(long = "minibatch-size", default_value = "256")]
        pub minibatch_size: String,
        /// Compress the merged matrices.
        #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_kaldi_bool, action = clap::ArgAction::Set)]
        pub compress: bool,
        /// Ignored (Kaldi keeps it for back-compatibility).
        #[arg(long = "discard-partial-minibatches", default_value = "deprecated", num_args = 0..=1, default_missing_value = "true")]
        pub discard_partial_minibatches: String,
        /// Ignored (Kaldi keeps it for back-compatibility).
        #[arg(long = "measure-output-frames", default_value = "deprecated", num_args = 0..=1, default_missing_value = "true")]
        pub measure_output_frames: String,
        /// Input examples rspecifier.
        pub egs_in: String,
        /// Output minibatches wspecifier.
        pub egs_out: String,
    }
}

/// Statistics of one example structure, for the log.
#[derive(Default)]
struct Stats {
    /// Minibatch size → count, in Kaldi's (hash map) print order.
    sizes: StlOrder<usize>,
    counts: BTreeMap<usize, usize>,
    discarded: usize,
}

struct Merger {
    sizes: MinibatchSizes,
    compress: bool,
    /// Queues per structure; `order` holds their ids in Kaldi's map order.
    queues: BTreeMap<usize, Vec<NnetExample>>,
    order: StlOrder<usize>,
    next_id: usize,
    writer: NnetExampleWriter,
    written: usize,
    stats: BTreeMap<(i32, u64), Stats>,
}

impl Merger {
    fn write(&mut self, egs: &[NnetExample]) -> Result<()> {
        let stats = self
            .stats
            .entry((eg_size(&egs[0]), structure_hash(&egs[0])))
            .or_default();
        if !stats.counts.contains_key(&egs.len()) {
            stats.sizes.insert(egs.len(), egs.len() as u64);
        }
        *stats.counts.entry(egs.len()).or_insert(0) += 1;
        let key = format!("merged-{}-{}", self.written, egs.len());
        self.writer
            .write(&key, &merge_examples(egs, self.compress)?)?;
        self.written += 1;
        Ok(())
    }

    fn accept(&mut self, eg: NnetExample) -> Result<()> {
        let found = self
            .queues
            .iter()
            .find(|(_, q)| same_structure(&q[0], &eg))
            .map(|(&id, _)| id);
        let id = match found {
            Some(id) => id,
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.order.insert(id, structure_hash(&eg));
                self.queues.insert(id, Vec::new());
                id
            }
        };
        let size = eg_size(&eg);
        let queue = self.queues.get_mut(&id).expect("queue just found or made");
        queue.push(eg);
        if self.sizes.minibatch_size(size, queue.len(), false) > 0 {
            let batch = self.queues.remove(&id).unwrap_or_default();
            self.order.remove(&id);
            self.write(&batch)?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(Vec<String>, usize)> {
        let ids: Vec<usize> = self.order.keys().copied().collect();
        for id in ids {
            let mut rest = self.queues.remove(&id).unwrap_or_default();
            while !rest.is_empty() {
                let n = self
                    .sizes
                    .minibatch_size(eg_size(&rest[0]), rest.len(), true);
                if n == 0 {
                    break;
                }
                let batch: Vec<NnetExample> = rest.drain(..n).collect();
                self.write(&batch)?;
            }
            if !rest.is_empty() {
                let key = (eg_size(&rest[0]), structure_hash(&rest[0]));
                self.stats.entry(key).or_default().discarded += rest.len();
            }
        }
        self.writer.close()?;
        Ok((stats_lines(&self.stats), self.written))
    }
}

/// Kaldi's three log lines about what was merged.
fn stats_lines(stats: &BTreeMap<(i32, u64), Stats>) -> Vec<String> {
    let mut specific = Vec::new();
    let (mut discarded, mut discarded_size, mut kept, mut kept_size) = (0i64, 0i64, 0i64, 0i64);
    let (mut minibatches, mut mb_types) = (0i64, 0i64);
    for (&(size, _), s) in stats {
        let mut fields: Vec<String> = s
            .sizes
            .keys()
            .map(|mb| format!("{mb}->{}", s.counts[mb]))
            .collect();
        fields.push(format!("d={}", s.discarded));
        specific.push(format!(
            "{size}={{{}{}}}",
            if s.counts.is_empty() { "," } else { "" },
            fields.join(",")
        ));
        discarded += s.discarded as i64;
        discarded_size += s.discarded as i64 * size as i64;
        for (&mb, &count) in &s.counts {
            mb_types += 1;
            minibatches += count as i64;
            kept += (count * mb) as i64;
            kept_size += (count * mb) as i64 * size as i64;
        }
    }
    let total = discarded + kept;
    let g = |v: f64| fmt_g(v as f32 as f64, 4);
    vec![
        "Merged specific eg types as follows [format: <eg-size1>={<mb-size1>-><num-minibatches1>,<mbsize2>-><num-minibatches2>.../d=<num-discarded>},<egs-size2>={...},... (note,egs-size == number of input frames including context).".to_string(),
        specific.join(","),
        format!(
            "Processed {total} egs of avg. size {} into {minibatches} minibatches, discarding {}% of egs.  Avg minibatch size was {}, #distinct types of egs/minibatches was {}/{mb_types}",
            g((discarded_size + kept_size) as f64 / total as f64),
            g(discarded as f64 * 100.0 / total as f64),
            g(kept as f64 / minibatches as f64),
            stats.len()
        ),
    ]
}

/// Runs the command.
pub fn run(a: Args) -> Result<i32> {
    let sizes = MinibatchSizes::parse(&a.minibatch_size)?;
    for (name, value) in [
        (
            "discard-partial-minibatches",
            &a.discard_partial_minibatches,
        ),
        ("measure-output-frames", &a.measure_output_frames),
    ] {
        if value != "deprecated" {
            eprintln!("WARNING (merge-egs) The --{name} option is deprecated and will be ignored.");
        }
    }
    let reader = SequentialNnetExampleReader::open(&a.egs_in)?;
    let mut m = Merger {
        sizes,
        compress: a.compress,
        queues: BTreeMap::new(),
        order: StlOrder::default(),
        next_id: 0,
        writer: NnetExampleWriter::open(&a.egs_out)?,
        written: 0,
        stats: BTreeMap::new(),
    };
    for item in reader {
        let (_key, eg) = item?;
        if eg_size(&eg) == 0 {
            return Err(crate::error::Error::Usage(
                "merge-egs: an example with no indexes cannot be merged".into(),
            ));
        }
        m.accept(eg)?;
    }
    let (lines, written) = m.finish()?;
    for line in lines {
        crate::log::log("merge-egs", &line);
    }
    if written == 0 {
        // Kaldi exits with status 1 here too.
        return Err(crate::error::Error::Usage(
            "merge-egs: no minibatches were written".into(),
        ));
    }
    Ok(0)
}
