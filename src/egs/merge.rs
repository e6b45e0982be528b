//! Minibatch sizes and merging (Kaldi's `ExampleMergingConfig`, `MergeExamples`).
//!
//! `--minibatch-size` rules: `256`, `128,256`, `64:128,256` or per eg size
//! `128=64:128/256=32,64`. An example uses the rule whose eg size (its largest io, i.e. input
//! frames with context) is closest to its own. While input lasts a minibatch is written when the
//! largest allowed size is reached; at the end the rest goes out in the largest allowed sizes
//! that fit, then (unless `--discard-partial-minibatches`) as one partial minibatch.

use crate::error::{Error, Result};
use crate::io::egs::{NnetExample, NnetIo};
use crate::io::sparse::{GeneralMatrix, SparseMatrix};
use crate::matrix::Matrix;

/// One rule: the eg size it is for (0 when given without `=`) and its allowed size ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct MinibatchRule {
    /// Eg size the rule is for.
    pub eg_size: i32,
    /// Inclusive ranges of allowed minibatch sizes.
    pub ranges: Vec<(i32, i32)>,
}

/// Parsed `--minibatch-size`.
#[derive(Debug, Clone, PartialEq)]
pub struct MinibatchSizes {
    /// The rules, in the order given.
    pub rules: Vec<MinibatchRule>,
}

impl MinibatchSizes {
    /// Parses the option's value; errors name the part that does not parse.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::Usage(format!("--minibatch-size=\"{s}\": {why}"));
        let num = |p: &str| -> Result<i32> {
            p.trim()
                .parse::<i32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(&format!("\"{p}\" is not a positive integer")))
        };
        let parts: Vec<&str> = s.split('/').collect();
        let mut rules = Vec::new();
        for part in &parts {
            let (eg_size, sizes) = match part.split_once('=') {
                Some((e, r)) => (num(e)?, r),
                None if parts.len() == 1 => (0, *part),
                None => return Err(bad("with several rules each needs an eg size (N=...)")),
            };
            let mut ranges = Vec::new();
            for item in sizes.split(',') {
                let (a, b) = match item.split_once(':') {
                    Some((a, b)) => (num(a)?, num(b)?),
                    None => (num(item)?, num(item)?),
                };
                if a > b {
                    return Err(bad(&format!("range \"{item}\" is empty")));
                }
                ranges.push((a, b));
            }
            rules.push(MinibatchRule { eg_size, ranges });
        }
        Ok(MinibatchSizes { rules })
    }

    fn rule_for(&self, eg_size: i32) -> &MinibatchRule {
        self.rules
            .iter()
            .min_by_key(|r| (r.eg_size - eg_size).abs())
            .expect("parse gives at least one rule")
    }

    /// How many of `available` examples of this size to write now (0: wait for more).
    pub fn minibatch_size(&self, eg_size: i32, available: usize, input_ended: bool) -> usize {
        let rule = self.rule_for(eg_size);
        let largest = rule.ranges.iter().map(|r| r.1).max().unwrap_or(1) as usize;
        if available >= largest {
            return largest;
        }
        if !input_ended {
            return 0;
        }
        rule.ranges
            .iter()
            .filter(|r| r.0 as usize <= available)
            .map(|r| (r.1 as usize).min(available))
            .max()
            .unwrap_or(0)
    }
}

/// The size that selects an example's rule: the row count of its largest io.
pub fn eg_size(eg: &NnetExample) -> i32 {
    eg.io.iter().map(|io| io.indexes.len()).max().unwrap_or(0) as i32
}

/// Merges examples of one structure into a minibatch: ios of the same name are stacked and
/// each example's `n` values are shifted past the previous examples'.
pub fn merge_examples(egs: &[NnetExample], compress: bool) -> NnetExample {
    let first = &egs[0];
    let mut merged = NnetExample::default();
    for (k, io0) in first.io.iter().enumerate() {
        let mut indexes = Vec::new();
        let mut n_offset = 0;
        let parts: Vec<&NnetIo> = egs.iter().map(|e| &e.io[k]).collect();
        for io in &parts {
            let max_n = io.indexes.iter().map(|i| i.n).max().unwrap_or(0);
            indexes.extend(io.indexes.iter().map(|i| {
                let mut j = *i;
                j.n += n_offset;
                j
            }));
            n_offset += max_n + 1;
        }
        let all_sparse = parts
            .iter()
            .all(|io| matches!(io.features, GeneralMatrix::Sparse(_)));
        let mut features = if all_sparse {
            let mut rows = Vec::new();
            for io in &parts {
                if let GeneralMatrix::Sparse(s) = &io.features {
                    rows.extend(s.rows.iter().cloned());
                }
            }
            GeneralMatrix::Sparse(SparseMatrix { rows })
        } else {
            let cols = io0.features.num_cols();
            let total: usize = parts.iter().map(|io| io.features.num_rows()).sum();
            let mut m = Matrix::zeros(total, cols);
            let mut r0 = 0;
            for io in &parts {
                let part = io.features.to_matrix();
                for r in 0..part.num_rows() {
                    m.row_mut(r0 + r).copy_from_slice(part.row(r));
                }
                r0 += part.num_rows();
            }
            GeneralMatrix::Full(m)
        };
        if compress {
            features.compress(crate::io::compressed::CompressionMethod::Automatic);
        }
        merged.io.push(NnetIo {
            name: io0.name.clone(),
            indexes,
            features,
        });
    }
    merged
}

/// Whether two examples can share a minibatch: same io names, dims and indexes.
pub fn same_structure(a: &NnetExample, b: &NnetExample) -> bool {
    a.io.len() == b.io.len()
        && a.io.iter().zip(&b.io).all(|(x, y)| {
            x.name == y.name
                && x.indexes == y.indexes
                && x.features.num_cols() == y.features.num_cols()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_forms_parse() {
        let m = MinibatchSizes::parse("128=64:128/256=32,64").unwrap();
        assert_eq!(m.rules[0].eg_size, 128);
        assert_eq!(m.rules[0].ranges, vec![(64, 128)]);
        assert_eq!(m.rules[1].ranges, vec![(32, 32), (64, 64)]);
        assert_eq!(m.minibatch_size(200, 70, false), 64);
        assert_eq!(m.minibatch_size(150, 70, false), 0);
        assert_eq!(m.minibatch_size(150, 70, true), 70);
        assert_eq!(m.minibatch_size(150, 10, true), 0);
        for bad in ["", "0", "a", "3:2", "64/128", "1=", "128=64:"] {
            assert!(MinibatchSizes::parse(bad).is_err(), "{bad}");
        }
    }
}
