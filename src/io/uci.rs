//! CNTK's `UCIFastReader`: plain-text rows of whitespace-separated numbers, `dim` feature
//! columns from column `start`, and one label column (a whole number, or a name mapped through
//! a label mapping file).

use crate::error::{Error, Result, TextPos};
use crate::io::mlf::LabelMap;
use crate::matrix::Matrix;

/// Where the columns are (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UciColumns {
    pub feature_start: usize,
    pub feature_dim: usize,
    pub label_column: usize,
}

/// The rows of `text` as a feature matrix and a label per row.
pub fn parse_uci(
    text: &str,
    file: &str,
    cols: UciColumns,
    map: Option<&LabelMap>,
) -> Result<(Matrix, Vec<i32>)> {
    let mut data = Vec::new();
    let mut labels = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let words: Vec<&str> = raw.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let err = |msg: String| Error::Parse {
            pos: TextPos {
                file: file.to_string(),
                line: i + 1,
                column: 0,
                line_text: raw.to_string(),
            },
            msg,
        };
        let need = (cols.feature_start + cols.feature_dim).max(cols.label_column + 1);
        if words.len() < need {
            return Err(err(format!(
                "{} columns, but features at columns {}..{} and the label at column {} need {need}",
                words.len(),
                cols.feature_start,
                cols.feature_start + cols.feature_dim,
                cols.label_column
            )));
        }
        for (c, w) in words[cols.feature_start..cols.feature_start + cols.feature_dim]
            .iter()
            .enumerate()
        {
            let v: f32 = w
                .parse()
                .ok()
                .filter(|v: &f32| v.is_finite())
                .ok_or_else(|| {
                    err(format!(
                        "column {}: '{w}' is not a finite number",
                        cols.feature_start + c
                    ))
                })?;
            data.push(v);
        }
        let w = words[cols.label_column];
        let label = match map {
            Some(m) => m
                .get(w)
                .ok_or_else(|| err(format!("unknown label '{w}' (not in {})", m.file)))?,
            None => w
                .parse::<f64>()
                .ok()
                .filter(|v| v.fract() == 0.0 && *v >= 0.0 && *v < i32::MAX as f64)
                .map(|v| v as usize)
                .ok_or_else(|| err(format!("the label '{w}' is not a whole number >= 0")))?,
        };
        labels.push(label as i32);
    }
    let rows = labels.len();
    Ok((Matrix::from_vec(rows, cols.feature_dim, data), labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLS: UciColumns = UciColumns {
        feature_start: 1,
        feature_dim: 2,
        label_column: 0,
    };

    #[test]
    fn rows_give_features_and_labels() {
        let (m, l) = parse_uci("3 0.5 -1\n\n1 2 4e-1 extra\n", "d.txt", COLS, None).unwrap();
        assert_eq!(l, vec![3, 1]);
        assert_eq!(m.to_vec(), vec![0.5, -1.0, 2.0, 0.4]);
        let map = LabelMap::parse("a\nb\n", "labels.map").unwrap();
        let (_, l) = parse_uci("b 1 2\na 3 4\n", "d.txt", COLS, Some(&map)).unwrap();
        assert_eq!(l, vec![1, 0]);
    }

    #[test]
    fn bad_rows_name_the_file_and_line() {
        for (text, want) in [
            ("1 2 3\n1 2\n", "d.txt:2: 2 columns"),
            ("1 2 x\n", "d.txt:1: column 2: 'x' is not a finite number"),
            ("1 2 nan\n", "d.txt:1: column 2: 'nan'"),
            (
                "1.5 2 3\n",
                "d.txt:1: the label '1.5' is not a whole number",
            ),
            ("-1 2 3\n", "d.txt:1: the label '-1'"),
        ] {
            let e = parse_uci(text, "d.txt", COLS, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let map = LabelMap::parse("a\n", "labels.map").unwrap();
        let e = parse_uci("c 1 2\n", "d.txt", COLS, Some(&map))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("d.txt:1: unknown label 'c' (not in labels.map)"),
            "{e}"
        );
    }
}
