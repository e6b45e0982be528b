//! Minibatch sizes and merging (Kaldi's `ExampleMergingConfig`, `MergeExamples`).
//!
//! `--minibatch-size` rules: `256`, `128,256`, `64:128,256` or per eg size
//! `128=64:128/256=32,64`. An example uses the rule whose eg size (its largest io, i.e. input
//! frames with context) is closest to its own. While input lasts a minibatch is written when the
//! largest allowed size is reached; at the end the rest goes out in the largest allowed sizes
//! that fit, then (unless `--discard-partial-minibatches`) as one partial minibatch.

use crate::error::{Error, Result};
use crate::index::Index;
use crate::io::compressed::CompressionMethod;
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
            if rules.iter().any(|r: &MinibatchRule| r.eg_size == eg_size) {
                return Err(bad("repeated example sizes"));
            }
            rules.push(MinibatchRule { eg_size, ranges });
        }
        Ok(MinibatchSizes { rules })
    }

    /// The option string these rules parse from (single values as `N`, ranges as `A:B`).
    pub fn to_option_string(&self) -> String {
        let rule = |r: &MinibatchRule| {
            let ranges: Vec<String> = r
                .ranges
                .iter()
                .map(|&(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}:{b}")
                    }
                })
                .collect();
            let ranges = ranges.join(",");
            if self.rules.len() == 1 && r.eg_size == 0 {
                ranges
            } else {
                format!("{}={ranges}", r.eg_size)
            }
        };
        self.rules.iter().map(rule).collect::<Vec<_>>().join("/")
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

/// Kaldi's structure hash of an example (`NnetExampleStructureHasher`): io names, dims and a
/// sample of the indexes. It orders the log's per-structure statistics, and through
/// [`super::stl_order`] the order in which the structures are flushed at the end.
pub fn structure_hash(eg: &NnetExample) -> u64 {
    let mut ans = (eg.io.len() as u64).wrapping_mul(35_099);
    for io in &eg.io {
        ans = ans.wrapping_mul(19_157).wrapping_add(io_hash(io));
    }
    ans
}

fn io_hash(io: &NnetIo) -> u64 {
    let mut name = 0u64;
    for &b in io.name.as_bytes() {
        name = name.wrapping_mul(7_853).wrapping_add(b as i8 as i64 as u64);
    }
    name.wrapping_add(indexes_hash(&io.indexes))
        .wrapping_add(19_249u64.wrapping_mul(io.features.num_rows() as u64))
        .wrapping_add(14_731u64.wrapping_mul(io.features.num_cols() as u64))
}

fn indexes_hash(indexes: &[Index]) -> u64 {
    let mut ans = 1_433u64.wrapping_add(34_949u64.wrapping_mul(indexes.len() as u64));
    let mut add = |i: &Index| {
        for (v, k) in [(i.n, 1_619), (i.t, 15_649), (i.x, 89_809)] {
            ans = ans.wrapping_add(v.wrapping_mul(k) as i64 as u64);
        }
    };
    // The first 15 indexes, then every 10th.
    indexes.iter().take(15).for_each(&mut add);
    indexes.iter().skip(15).step_by(10).for_each(&mut add);
    ans
}

/// Kaldi's `AppendGeneralMatrixRows`: sparse if every non-empty part is sparse, else full.
fn append_rows(parts: &[&GeneralMatrix]) -> Result<GeneralMatrix> {
    let all_sparse = parts
        .iter()
        .all(|m| matches!(m, GeneralMatrix::Sparse(_)) || m.num_rows() == 0);
    if all_sparse {
        let mut rows = Vec::new();
        for m in parts {
            if let GeneralMatrix::Sparse(s) = m {
                rows.extend(s.rows.iter().cloned());
            }
        }
        return Ok(GeneralMatrix::Sparse(SparseMatrix { rows }));
    }
    let mut cols = None;
    let mut total = 0usize;
    for m in parts.iter().filter(|m| m.num_rows() > 0) {
        total += m.num_rows();
        match cols {
            None => cols = Some(m.num_cols()),
            Some(c) if c != m.num_cols() => {
                return Err(Error::Usage(format!(
                    "merging matrices with different numbers of columns: {c} vs. {}",
                    m.num_cols()
                )))
            }
            _ => {}
        }
    }
    let cols = cols.unwrap_or(0);
    crate::limits::check_product(&[total as u64, cols as u64, 4], "a merged matrix")
        .map_err(Error::Usage)?;
    let mut out = Matrix::zeros(total, cols);
    let mut r0 = 0;
    for m in parts.iter().filter(|m| m.num_rows() > 0) {
        let part = m.to_matrix();
        for r in 0..part.num_rows() {
            out.copy_row_from_slice(r0 + r, &part.row_to_vec(r));
        }
        r0 += part.num_rows();
    }
    Ok(GeneralMatrix::Full(out))
}

/// Merges examples into a minibatch (Kaldi's `MergeExamples`): the merged ios are the union of
/// the examples' io names in sorted order; rows of the same name are stacked and each
/// example's `n` values are shifted past the previous examples'.
pub fn merge_examples(egs: &[NnetExample], compress: bool) -> Result<NnetExample> {
    let mut names: Vec<&str> = egs
        .iter()
        .flat_map(|e| e.io.iter().map(|io| io.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut merged = NnetExample::default();
    for name in names {
        let mut indexes = Vec::new();
        let mut parts = Vec::new();
        let mut n_offset = 0;
        for io in egs
            .iter()
            .flat_map(|e| e.io.iter().filter(|io| io.name == name))
        {
            let max_n = io.indexes.iter().map(|i| i.n).max().unwrap_or(0);
            indexes.extend(
                io.indexes
                    .iter()
                    .map(|i| Index::new(i.n + n_offset, i.t, i.x)),
            );
            n_offset += max_n + 1;
            parts.push(&io.features);
        }
        let mut features = append_rows(&parts)?;
        if compress {
            features.compress(CompressionMethod::Automatic);
        }
        merged.io.push(NnetIo {
            name: name.to_string(),
            indexes,
            features,
        });
    }
    Ok(merged)
}

/// Whether two examples can share a minibatch (Kaldi's `NnetExampleStructureCompare`): same
/// io names, indexes and dims.
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
        for bad in [
            "", "0", "a", "3:2", "64/128", "1=", "128=64:", "8,", "-3", "3=2/3=4",
        ] {
            assert!(MinibatchSizes::parse(bad).is_err(), "{bad}");
        }
    }
}
