//! HTK master label files (MLF) and CNTK's label mapping files, as `HTKMLFReader` reads them.
//!
//! ```text
//! #!MLF!#
//! "*/utt1.lab"
//! 0 300000 s1
//! 300000 500000 s2 -12.5 word
//! .
//! ```
//!
//! Each entry is a quoted pattern (the utterance is the base name without directory or
//! extension), then one segment per line, `start end label [score] [more...]` with times in
//! 100 ns units, then `.`. A segment covers frames `start/period .. end/period` (period 100000
//! = 10 ms, rounded to the nearest frame); segments must follow one another without gaps.
//! Label names become indices through the mapping file (one name per line, the line order is
//! the index; CNTK's `labelMappingFile`), or are whole numbers when there is no mapping.

use crate::error::{Error, Result, TextPos};
use std::collections::HashMap;

/// CNTK's `labelMappingFile`: state names in index order.
#[derive(Clone, Debug, Default)]
pub struct LabelMap {
    pub file: String,
    pub names: Vec<String>,
    index: HashMap<String, usize>,
}

impl LabelMap {
    /// One name per line (blank lines skipped); a name twice is an error.
    pub fn parse(text: &str, file: &str) -> Result<LabelMap> {
        let mut m = LabelMap {
            file: file.to_string(),
            ..Default::default()
        };
        for (i, line) in text.lines().enumerate() {
            let name = line.trim();
            if name.is_empty() {
                continue;
            }
            if name.split_whitespace().count() != 1 {
                return Err(parse_err(
                    file,
                    i + 1,
                    line,
                    "expected one state name per line",
                ));
            }
            if let Some(&prev) = m.index.get(name) {
                return Err(parse_err(
                    file,
                    i + 1,
                    line,
                    &format!("state '{name}' is listed already (index {prev})"),
                ));
            }
            m.index.insert(name.to_string(), m.names.len());
            m.names.push(name.to_string());
        }
        if m.names.is_empty() {
            return Err(Error::Usage(format!("{file}: no state names")));
        }
        Ok(m)
    }

    /// Reads and parses the file.
    pub fn read(file: &str) -> Result<LabelMap> {
        LabelMap::parse(&read_text(file)?, file)
    }

    pub fn get(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }
}

/// One utterance of an MLF: a label index per frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MlfUtterance {
    pub name: String,
    pub labels: Vec<i32>,
    /// The 1-based line of its pattern.
    pub line: usize,
}

/// A parsed MLF, utterances in file order.
#[derive(Clone, Debug, Default)]
pub struct Mlf {
    pub file: String,
    pub utterances: Vec<MlfUtterance>,
    index: HashMap<String, usize>,
}

impl Mlf {
    pub fn get(&self, name: &str) -> Option<&MlfUtterance> {
        self.index.get(name).map(|&i| &self.utterances[i])
    }

    /// Reads and parses `file`.
    pub fn read(file: &str, map: Option<&LabelMap>) -> Result<Mlf> {
        parse_mlf(&read_text(file)?, file, map, FRAME_PERIOD)
    }
}

/// CNTK's frame period in 100 ns units (10 ms).
pub const FRAME_PERIOD: u64 = 100000;

fn read_text(file: &str) -> Result<String> {
    String::from_utf8(crate::io::read_file(file)?)
        .map_err(|e| Error::Usage(format!("{file}: not UTF-8 text ({e})")))
}

fn parse_err(file: &str, line: usize, text: &str, msg: &str) -> Error {
    Error::Parse {
        pos: TextPos {
            file: file.to_string(),
            line,
            column: 0,
            line_text: text.to_string(),
        },
        msg: msg.to_string(),
    }
}

/// The utterance name of a pattern line (`"*/dir/utt1.lab"` → `utt1`).
fn pattern_name(p: &str) -> &str {
    let base = p.rsplit(['/', '\\']).next().unwrap_or(p);
    base.rsplit_once('.').map_or(base, |(b, _)| b)
}

/// Parses MLF text; `period` is the frame period in 100 ns units.
pub fn parse_mlf(text: &str, file: &str, map: Option<&LabelMap>, period: u64) -> Result<Mlf> {
    let mut lines = text.lines().enumerate().peekable();
    let mut mlf = Mlf {
        file: file.to_string(),
        ..Default::default()
    };
    match lines.next() {
        Some((_, l)) if l.trim() == "#!MLF!#" => {}
        Some((_, l)) => return Err(parse_err(file, 1, l, "expected the MLF header #!MLF!#")),
        None => return Err(Error::Usage(format!("{file}: empty, not an MLF"))),
    }
    let mut current: Option<(MlfUtterance, u64)> = None;
    for (i, raw) in lines {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let err = |msg: &str| parse_err(file, n, raw, msg);
        match &mut current {
            None => {
                if !(line.len() >= 2 && line.starts_with('"') && line.ends_with('"')) {
                    return Err(err(
                        "expected a quoted label-file pattern such as \"*/utt.lab\"",
                    ));
                }
                let name = pattern_name(&line[1..line.len() - 1]);
                if name.is_empty() || name.contains('*') || name.contains('?') {
                    return Err(err(&format!(
                        "the pattern {line} names no single utterance (only \"*/name.ext\" \
                         patterns are read)"
                    )));
                }
                if let Some(&prev) = mlf.index.get(name) {
                    return Err(err(&format!(
                        "utterance {name} has labels already (line {})",
                        mlf.utterances[prev].line
                    )));
                }
                current = Some((
                    MlfUtterance {
                        name: name.to_string(),
                        labels: Vec::new(),
                        line: n,
                    },
                    0,
                ));
            }
            Some((utt, end_so_far)) => {
                if line == "." {
                    let (utt, _) = current.take().expect("inside an entry");
                    if utt.labels.is_empty() {
                        return Err(err(&format!("utterance {} has no frames", utt.name)));
                    }
                    mlf.index.insert(utt.name.clone(), mlf.utterances.len());
                    mlf.utterances.push(utt);
                    continue;
                }
                let words: Vec<&str> = line.split_whitespace().collect();
                if words.len() < 3 {
                    return Err(err(
                        "expected `start end label` (times in 100 ns units; segments without \
                         times give no frames)",
                    ));
                }
                let time = |w: &str| {
                    w.parse::<u64>().map_err(|_| {
                        err(&format!(
                            "'{w}' is not a time (a whole number of 100 ns units)"
                        ))
                    })
                };
                let (start, end) = (time(words[0])?, time(words[1])?);
                let frame = |t: u64| t.saturating_add(period / 2) / period;
                let (f0, f1) = (frame(start), frame(end));
                if f1 < f0 {
                    return Err(err(&format!(
                        "the segment ends ({end}) before it starts ({start})"
                    )));
                }
                if f0 != *end_so_far {
                    return Err(err(&format!(
                        "the segment starts at frame {f0} but the previous one ended at frame \
                         {end_so_far} (segments must follow one another)"
                    )));
                }
                let label = match map {
                    Some(m) => m.get(words[2]).ok_or_else(|| {
                        err(&format!(
                            "unknown state name '{}' (not in {})",
                            words[2], m.file
                        ))
                    })?,
                    None => words[2].parse::<usize>().map_err(|_| {
                        err(&format!(
                            "the label '{}' is not a whole number (give a label mapping file \
                             for state names)",
                            words[2]
                        ))
                    })?,
                };
                let label = i32::try_from(label).map_err(|_| err("label index too large"))?;
                crate::limits::check_elements(f1, 4, "an utterance's frame labels")
                    .map_err(|e| err(&e))?;
                utt.labels
                    .resize(utt.labels.len() + (f1 - f0) as usize, label);
                *end_so_far = f1;
            }
        }
    }
    if let Some((utt, _)) = current {
        return Err(parse_err(
            file,
            utt.line,
            "",
            &format!("the entry of utterance {} has no closing '.'", utt.name),
        ));
    }
    Ok(mlf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> LabelMap {
        LabelMap::parse("sil\ns1\n\ns2\n", "states.list").unwrap()
    }

    #[test]
    fn segments_become_frame_labels_through_the_map() {
        let text = "#!MLF!#\n\"*/a/utt1.lab\"\n0 200000 s1\n200000 500000 s2 -3.5 word\n.\n\
                    \"utt2.rec\"\n0 100000 sil\n.\n";
        let m = parse_mlf(text, "l.mlf", Some(&map()), FRAME_PERIOD).unwrap();
        assert_eq!(m.utterances.len(), 2);
        assert_eq!(m.get("utt1").unwrap().labels, vec![1, 1, 2, 2, 2]);
        assert_eq!(m.get("utt2").unwrap().labels, vec![0]);
        assert_eq!(m.get("utt2").unwrap().line, 6);
        // Without a map the labels are indices.
        let m = parse_mlf(
            "#!MLF!#\n\"*/u.lab\"\n0 100000 4\n100000 300000 0\n.\n",
            "n.mlf",
            None,
            FRAME_PERIOD,
        )
        .unwrap();
        assert_eq!(m.get("u").unwrap().labels, vec![4, 0, 0]);
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let cases = [
            ("MLF\n", "l.mlf:1: expected the MLF header"),
            ("#!MLF!#\nutt.lab\n", "l.mlf:2: expected a quoted"),
            (
                "#!MLF!#\n\"*/u.lab\"\n0 100000\n.\n",
                "l.mlf:3: expected `start end label`",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n0 1e5 s1\n.\n",
                "l.mlf:3: '1e5' is not a time",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n0 100000 s1\n0 100000 s7\n.\n",
                "l.mlf:4: the segment starts at frame 0 but the previous one ended at frame 1",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n0 100000 s1\n100000 200000 s9\n.\n",
                "l.mlf:4: unknown state name 's9' (not in states.list)",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n300000 100000 s1\n.\n",
                "l.mlf:3: the segment ends",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n0 100000 s1\n",
                "l.mlf:2: the entry of utterance u has no closing",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n0 100000 s1\n.\n\"*/u.lab\"\n0 100000 s1\n.\n",
                "l.mlf:5: utterance u has labels already (line 2)",
            ),
            (
                "#!MLF!#\n\"*.lab\"\n",
                "l.mlf:2: the pattern \"*.lab\" names no single",
            ),
            (
                "#!MLF!#\n\"*/u.lab\"\n.\n",
                "l.mlf:3: utterance u has no frames",
            ),
        ];
        for (text, want) in cases {
            let e = parse_mlf(text, "l.mlf", Some(&map()), FRAME_PERIOD)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let e = parse_mlf(
            "#!MLF!#\n\"*/u.lab\"\n0 100000 s1\n.\n",
            "l.mlf",
            None,
            FRAME_PERIOD,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("l.mlf:3: the label 's1' is not a whole number"),
            "{e}"
        );
        // A huge end time is refused before allocating.
        let e = parse_mlf(
            "#!MLF!#\n\"*/u.lab\"\n0 18446744073709500000 s1\n.\n",
            "l.mlf",
            Some(&map()),
            FRAME_PERIOD,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("l.mlf:3:"), "{e}");
    }

    #[test]
    fn the_mapping_file_is_one_name_per_line() {
        let m = map();
        assert_eq!(m.names, vec!["sil", "s1", "s2"]);
        assert_eq!(m.get("s2"), Some(2));
        let e = LabelMap::parse("a\nb\na\n", "m.list")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.list:3: state 'a' is listed already (index 0)"),
            "{e}"
        );
        let e = LabelMap::parse("a b\n", "m.list").unwrap_err().to_string();
        assert!(e.contains("m.list:1: expected one state name"), "{e}");
    }
}
