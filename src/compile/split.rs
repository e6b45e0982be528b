//! Turning per-row lists of source locations into a few row-wise commands (Kaldi's
//! SplitLocations / SplitLocationsBackward / ConvertToIndexes / HasContiguousProperty).
//!
//! A "submat-location" is a pair (sub-matrix index, row); (−1, −1) means "nothing".

use std::collections::{BTreeMap, HashMap};

/// A (sub-matrix, row) pair; (−1, −1) = none.
pub type Loc = (i32, i32);

const NONE: Loc = (-1, -1);

/// Splits per-row lists (`lists[row]` = the locations summed into that row) into vectors of
/// length `lists.len()`, each holding at most one location per row, such that the rows' sums
/// are the same. Sub-matrices that feed many rows get vectors of their own, so that most
/// vectors read a single sub-matrix (then a MatrixAdd / AddRows suffices); the rest is packed
/// into mixed vectors (AddRowsMulti). Vectors that would be all (−1, −1) are dropped.
pub fn split_locations(lists: &[Vec<Loc>]) -> Vec<Vec<Loc>> {
    let num_rows = lists.len();
    let max_len = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    if max_len == 0 {
        return Vec::new();
    }
    // Per sub-matrix: total count and the largest count within one row.
    let mut total: HashMap<i32, usize> = HashMap::new();
    let mut max_in_row: HashMap<i32, usize> = HashMap::new();
    let mut row_counts: HashMap<i32, usize> = HashMap::new();
    for l in lists {
        row_counts.clear();
        for &(s, _) in l {
            if s < 0 {
                continue;
            }
            *total.entry(s).or_insert(0) += 1;
            *row_counts.entry(s).or_insert(0) += 1;
        }
        for (&s, &c) in &row_counts {
            let m = max_in_row.entry(s).or_insert(0);
            *m = (*m).max(c);
        }
    }
    // "Large" sub-matrices get dedicated vectors: those would be at least half full.
    let mut large: Vec<i32> = total
        .iter()
        .filter(|&(s, &c)| c * 2 >= max_in_row[s] * num_rows)
        .map(|(&s, _)| s)
        .collect();
    large.sort_unstable();
    // If everything fits into one vector anyway and there's a single source, no need.
    let mut out: Vec<Vec<Loc>> = Vec::new();
    let mut first_of: BTreeMap<i32, usize> = BTreeMap::new();
    for &s in &large {
        first_of.insert(s, out.len());
        for _ in 0..max_in_row[&s] {
            out.push(vec![NONE; num_rows]);
        }
    }
    let mut mixed: Vec<Vec<Loc>> = Vec::new();
    let mut used_in_row: HashMap<i32, usize> = HashMap::new();
    for (r, l) in lists.iter().enumerate() {
        used_in_row.clear();
        let mut k = 0;
        for &loc in l {
            if loc.0 < 0 {
                continue;
            }
            if let Some(&f) = first_of.get(&loc.0) {
                let u = used_in_row.entry(loc.0).or_insert(0);
                out[f + *u][r] = loc;
                *u += 1;
            } else {
                if mixed.len() <= k {
                    mixed.push(vec![NONE; num_rows]);
                }
                mixed[k][r] = loc;
                k += 1;
            }
        }
    }
    out.extend(mixed);
    out.retain(|v| v.iter().any(|&l| l != NONE));
    out
}

/// The one vector Kaldi's `SplitLocations` makes of lists that hold at most one location
/// per row (it keeps them as they are, where [`split_locations`] gives large sources vectors
/// of their own); None for lists with a longer one.
pub fn kaldi_single_vector(lists: &[Vec<Loc>]) -> Option<Vec<Loc>> {
    if lists.iter().any(|l| l.len() > 1) {
        return None;
    }
    Some(
        lists
            .iter()
            .map(|l| l.first().copied().unwrap_or(NONE))
            .collect(),
    )
}

/// Whether Kaldi's `SplitRowOps` would make two commands of a `*Multi` command with this
/// table (after snip-row-ops trimmed its "none" ends when `snipped`): a first run of pairs
/// naming one sub-matrix, then a run naming another, each without "none" and naming rows
/// spread over no more than twice its length.
pub fn kaldi_splits_in_two(table: &[Loc], snipped: bool) -> bool {
    let mut t = table;
    if snipped {
        while t.first().is_some_and(|p| p.0 < 0) {
            t = &t[1..];
        }
        while t.last().is_some_and(|p| p.0 < 0) {
            t = &t[..t.len() - 1];
        }
    }
    let Some(first) = t.first() else {
        return false;
    };
    let Some(split) = t.iter().position(|p| p.0 != first.0) else {
        return false;
    };
    let run_ok = |run: &[Loc]| {
        let s = run[0].0;
        if s < 0 || run.iter().any(|p| p.0 != s || p.1 < 0) {
            return false;
        }
        let lo = run.iter().map(|p| p.1 as i64).min().unwrap_or(0);
        let hi = run.iter().map(|p| p.1 as i64).max().unwrap_or(0);
        hi + 1 - lo <= 2 * run.len() as i64
    };
    run_ok(&t[..split]) && run_ok(&t[split..])
}

/// If every non-(−1, −1) location has the same sub-matrix, returns it and the row indexes
/// (−1 where none). Returns None for a vector with several sub-matrices or none at all.
pub fn convert_to_indexes(locs: &[Loc]) -> Option<(i32, Vec<i32>)> {
    let mut sub = -1;
    for &(s, _) in locs {
        if s < 0 {
            continue;
        }
        if sub < 0 {
            sub = s;
        } else if s != sub {
            return None;
        }
    }
    if sub < 0 {
        return None;
    }
    Some((
        sub,
        locs.iter()
            .map(|&(s, r)| if s < 0 { -1 } else { r })
            .collect(),
    ))
}

/// True if each value ≥ 0 appears in one contiguous run; then `ranges[v]` is the half-open
/// range of positions holding v ((−1, −1) for values that don't occur), up to the largest v.
pub fn has_contiguous_property(indexes: &[i32]) -> Option<Vec<(i32, i32)>> {
    let max = indexes.iter().copied().max().unwrap_or(-1);
    if max < 0 {
        return Some(Vec::new());
    }
    let mut ranges = vec![(-1i32, -1i32); max as usize + 1];
    for (pos, &v) in indexes.iter().enumerate() {
        if v < 0 {
            continue;
        }
        let r = &mut ranges[v as usize];
        let pos = pos as i32;
        if r.0 == -1 {
            *r = (pos, pos + 1);
        } else if r.1 == pos {
            r.1 = pos + 1;
        } else {
            return None;
        }
    }
    Some(ranges)
}

/// True if no location other than (−1, −1) repeats.
fn all_unique(v: &[Loc]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(v.len());
    v.iter().all(|&l| l == NONE || seen.insert(l))
}

/// Splits `v` so that within each piece every location is unique: the k-th occurrence of a
/// location goes to piece k.
fn split_by_occurrence(v: &[Loc]) -> Vec<Vec<Loc>> {
    let mut count: HashMap<Loc, usize> = HashMap::new();
    let mut out: Vec<Vec<Loc>> = Vec::new();
    for (r, &l) in v.iter().enumerate() {
        if l == NONE {
            continue;
        }
        let c = count.entry(l).or_insert(0);
        if out.len() <= *c {
            out.push(vec![NONE; v.len()]);
        }
        out[*c][r] = l;
        *c += 1;
    }
    out
}

/// As [`split_locations`], but each resulting vector either has unique locations, or reads a
/// single sub-matrix with the contiguous property (so that the backward pass can use
/// AddRows with reversed indexes, AddToRowsMulti, or AddRowRanges without two rows writing
/// the same destination in one command).
pub fn split_locations_backward(lists: &[Vec<Loc>]) -> Vec<Vec<Loc>> {
    let mut out = Vec::new();
    for v in split_locations(lists) {
        if all_unique(&v) {
            out.push(v);
            continue;
        }
        if let Some((_, idx)) = convert_to_indexes(&v) {
            if has_contiguous_property(&idx).is_some() {
                out.push(v);
                continue;
            }
        }
        out.extend(split_by_occurrence(&v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum_of(lists: &[Vec<Loc>]) -> Vec<Vec<Loc>> {
        lists
            .iter()
            .map(|l| {
                let mut v: Vec<Loc> = l.iter().copied().filter(|&x| x != NONE).collect();
                v.sort();
                v
            })
            .collect()
    }

    fn regroup(split: &[Vec<Loc>], rows: usize) -> Vec<Vec<Loc>> {
        let mut out = vec![Vec::new(); rows];
        for v in split {
            for (r, &l) in v.iter().enumerate() {
                if l != NONE {
                    out[r].push(l);
                }
            }
        }
        for o in &mut out {
            o.sort();
        }
        out
    }

    #[test]
    fn split_preserves_sums() {
        let lists = vec![
            vec![(1, 0), (2, 3)],
            vec![(1, 1)],
            vec![(1, 2), (3, 0), (3, 1)],
            vec![],
        ];
        let s = split_locations(&lists);
        assert_eq!(regroup(&s, 4), sum_of(&lists));
        // sub-matrix 1 feeds 3 of 4 rows: it gets a vector of its own.
        assert!(s
            .iter()
            .any(|v| convert_to_indexes(v).map(|x| x.0) == Some(1)));
        let b = split_locations_backward(&lists);
        assert_eq!(regroup(&b, 4), sum_of(&lists));
    }

    #[test]
    fn kaldis_splitter_cuts_at_the_first_change_of_source() {
        // Two runs, each from one sub-matrix, rows spread over at most twice their length.
        assert!(kaldi_splits_in_two(
            &[(3, 0), (3, 1), (5, 0), (5, 1)],
            false
        ));
        assert!(kaldi_splits_in_two(&[(3, 0), (3, 2), (5, 1)], false));
        // One source (one command), three sources, or rows spread too wide: no second one.
        assert!(!kaldi_splits_in_two(&[(3, 0), (3, 1)], false));
        assert!(!kaldi_splits_in_two(&[(3, 0), (5, 0), (7, 0)], false));
        assert!(!kaldi_splits_in_two(&[(3, 0), (3, 5), (5, 0)], false));
        // "None" inside a run stops it; at the ends only snip-row-ops removes it.
        let ends = [(-1, -1), (3, 0), (5, 0), (-1, -1)];
        assert!(!kaldi_splits_in_two(&ends, false));
        assert!(kaldi_splits_in_two(&ends, true));
        assert!(!kaldi_splits_in_two(&[(3, 0), (-1, -1), (5, 0)], true));
        // Kaldi keeps lists of one location per row as they are.
        let lists = vec![vec![(3, 0)], vec![], vec![(5, 1)]];
        assert_eq!(
            kaldi_single_vector(&lists),
            Some(vec![(3, 0), (-1, -1), (5, 1)])
        );
        assert_eq!(kaldi_single_vector(&[vec![(3, 0), (5, 0)]]), None);
    }

    #[test]
    fn contiguous() {
        assert_eq!(has_contiguous_property(&[0, 0, 2, 2, -1, 2]), None);
        assert_eq!(
            has_contiguous_property(&[0, 0, 2, 2, -1]),
            Some(vec![(0, 2), (-1, -1), (2, 4)])
        );
    }

    #[test]
    fn backward_duplicates_split() {
        let lists = vec![vec![(1, 0)], vec![(1, 1)], vec![(1, 0)]];
        let b = split_locations_backward(&lists);
        for v in &b {
            let (_, idx) = convert_to_indexes(v).unwrap();
            let uniq = all_unique(v);
            assert!(uniq || has_contiguous_property(&idx).is_some());
        }
        assert_eq!(regroup(&b, 3), sum_of(&lists));
    }
}
