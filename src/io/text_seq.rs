//! CNTK's text sequence readers' formats.
//!
//! - `LMSequenceReader` (word-level language models): a text file of sentences, one per line,
//!   words separated by white space; the vocabulary from a word-class file (`wordclass`: lines
//!   of `index count word class`, indices 0, 1, 2, ... in order) or a label mapping file (a
//!   word per line). Each sentence is one sequence: the input at t is word t, the label is
//!   word t + 1 (CNTK's `labelType=NextWord`); `beginSequence`/`endSequence` are added where a
//!   line does not start or end with them.
//! - `LUSequenceReader` (language understanding, ATIS-style slot filling): a token per line,
//!   `word label` (further columns ignored), sentences separated by blank lines; the input
//!   vocabulary and the label set from token files (`token`: a token per line), words
//!   optionally rewritten through a word map (`wordmap`: `word replacement` lines) first.
//!
//! Words outside the vocabulary become `unk` when the vocabulary has it, and are an error
//! naming the file and line otherwise. Every error names the file and line.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// A vocabulary: the words in index order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vocab {
    pub words: Vec<String>,
    index: HashMap<String, usize>,
}

impl Vocab {
    /// A vocabulary of `words` in this order; a word given twice is the error `Err(i)`.
    pub fn from_words(words: Vec<String>) -> std::result::Result<Self, usize> {
        let mut index = HashMap::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            if index.insert(w.clone(), i).is_some() {
                return Err(i);
            }
        }
        Ok(Vocab { words, index })
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn id(&self, word: &str) -> Option<usize> {
        self.index.get(word).copied()
    }
}

fn err(file: &str, line: usize, msg: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{file}:{line}: {msg}"))
}

/// CNTK's word-class file (`wordclass=`): `index count word class` per line, the indices
/// 0, 1, 2, ... in order; blank lines skipped.
pub fn read_word_class(path: &str) -> Result<Vocab> {
    let text = crate::io::read_text(path)?;
    let mut words = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let f: Vec<&str> = raw.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let line = i + 1;
        let [index, count, word, class] = f.as_slice() else {
            return Err(err(
                path,
                line,
                format!(
                    "expected 'index count word class' (4 fields), got {}: '{}'",
                    f.len(),
                    raw.trim()
                ),
            ));
        };
        if index.parse::<usize>().ok() != Some(words.len()) {
            return Err(err(
                path,
                line,
                format!(
                    "word index '{index}': the indices must be 0, 1, 2, ... in order (expected {})",
                    words.len()
                ),
            ));
        }
        if count.parse::<f64>().is_err() || class.parse::<u64>().is_err() {
            return Err(err(
                path,
                line,
                format!("count '{count}' and class '{class}' must be numbers"),
            ));
        }
        words.push(word.to_string());
    }
    vocab(path, words, &text)
}

/// A token list (`token=`, CNTK's label mapping files): the first field of each line, blank
/// lines skipped.
pub fn read_token_list(path: &str) -> Result<Vocab> {
    let text = crate::io::read_text(path)?;
    let words = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    vocab(path, words, &text)
}

fn vocab(path: &str, words: Vec<String>, text: &str) -> Result<Vocab> {
    if words.is_empty() {
        return Err(Error::Usage(format!("{path}: no words")));
    }
    Vocab::from_words(words).map_err(|dup| {
        // The line of the second occurrence: the dup-th non-blank line.
        let line = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .nth(dup)
            .map_or(0, |(i, _)| i + 1);
        err(path, line, "this word is listed already")
    })
}

/// A word map (`wordmap=`): `word replacement` per line.
pub fn read_word_map(path: &str) -> Result<HashMap<String, String>> {
    let text = crate::io::read_text(path)?;
    let mut out = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let f: Vec<&str> = raw.split_whitespace().collect();
        match f.as_slice() {
            [] => continue,
            [from, to] => {
                out.insert(from.to_string(), to.to_string());
            }
            _ => {
                return Err(err(
                    path,
                    i + 1,
                    format!("expected 'word replacement', got '{}'", raw.trim()),
                ))
            }
        }
    }
    Ok(out)
}

/// One sequence: word ids in, label ids out (as many), and the file line of each position.
#[derive(Clone, Debug, PartialEq)]
pub struct Sequence {
    pub inputs: Vec<usize>,
    pub labels: Vec<usize>,
    pub lines: Vec<usize>,
}

/// The id of `word`, else of `unk`, else an error at `file:line`.
fn word_id(v: &Vocab, word: &str, unk: &str, file: &str, line: usize, what: &str) -> Result<usize> {
    v.id(word).or_else(|| v.id(unk)).ok_or_else(|| {
        err(
            file,
            line,
            format!("'{word}' is not in the {what}, and neither is unk='{unk}'"),
        )
    })
}

/// `LMSequenceReader` text: one sentence per line, `begin`/`end` added where missing; the
/// labels are the next words. A sentence of fewer than two words (after adding them) has no
/// next word and is an error.
pub fn parse_lm(
    text: &str,
    file: &str,
    vocab: &Vocab,
    unk: &str,
    begin: Option<&str>,
    end: Option<&str>,
) -> Result<Vec<Sequence>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let mut words: Vec<&str> = raw.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        let line = i + 1;
        if let Some(b) = begin.filter(|b| !b.is_empty()) {
            if words[0] != b {
                words.insert(0, b);
            }
        }
        if let Some(e) = end.filter(|e| !e.is_empty()) {
            if words.last() != Some(&e) {
                words.push(e);
            }
        }
        if words.len() < 2 {
            return Err(err(
                file,
                line,
                "a sentence of one word has no next word to predict",
            ));
        }
        let ids = words
            .iter()
            .map(|w| word_id(vocab, w, unk, file, line, "vocabulary"))
            .collect::<Result<Vec<usize>>>()?;
        out.push(Sequence {
            inputs: ids[..ids.len() - 1].to_vec(),
            labels: ids[1..].to_vec(),
            lines: vec![line; ids.len() - 1],
        });
    }
    if out.is_empty() {
        return Err(Error::Usage(format!("{file}: no sentences")));
    }
    Ok(out)
}

/// `LUSequenceReader` text: `word label` per line, sentences separated by blank lines; words
/// rewritten through `word_map` first, then looked up in `inputs` (unknown: `unk`); labels
/// looked up in `labels` (unknown: an error).
pub fn parse_lu(
    text: &str,
    file: &str,
    inputs: &Vocab,
    labels: &Vocab,
    unk: &str,
    word_map: Option<&HashMap<String, String>>,
) -> Result<Vec<Sequence>> {
    let mut out = Vec::new();
    let mut cur = Sequence {
        inputs: Vec::new(),
        labels: Vec::new(),
        lines: Vec::new(),
    };
    let flush = |cur: &mut Sequence, out: &mut Vec<Sequence>| {
        if !cur.inputs.is_empty() {
            out.push(std::mem::replace(
                cur,
                Sequence {
                    inputs: Vec::new(),
                    labels: Vec::new(),
                    lines: Vec::new(),
                },
            ));
        }
    };
    for (i, raw) in text.lines().enumerate() {
        let f: Vec<&str> = raw.split_whitespace().collect();
        if f.is_empty() {
            flush(&mut cur, &mut out);
            continue;
        }
        let line = i + 1;
        if f.len() < 2 {
            return Err(err(
                file,
                line,
                format!("expected 'word label', got '{}'", raw.trim()),
            ));
        }
        let word = word_map
            .and_then(|m| m.get(f[0]))
            .map_or(f[0], String::as_str);
        cur.inputs
            .push(word_id(inputs, word, unk, file, line, "input tokens")?);
        let label = labels.id(f[1]).ok_or_else(|| {
            err(
                file,
                line,
                format!("label '{}' is not in the label tokens", f[1]),
            )
        })?;
        cur.labels.push(label);
        cur.lines.push(line);
    }
    flush(&mut cur, &mut out);
    if out.is_empty() {
        return Err(Error::Usage(format!("{file}: no sentences")));
    }
    Ok(out)
}

/// CNTK's `wordContext` (`0:1:2`): the offsets whose words' one-hot vectors are stacked
/// into each input row.
pub fn parse_word_context(s: &str) -> std::result::Result<Vec<i32>, String> {
    let v: Vec<i32> = s
        .split(':')
        .map(|x| x.trim().parse::<i32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| format!("wordContext={s}: expected offsets such as 0:1:2"))?;
    if v.is_empty() || v.len() > 64 || v.iter().any(|o| o.unsigned_abs() > 1000) {
        return Err(format!(
            "wordContext={s}: expected 1 to 64 offsets within ±1000"
        ));
    }
    Ok(v)
}

/// The input rows of a sequence: for each position, the one-hot vectors (of `vocab`
/// entries) of the words at each offset of `context`, clamped to the sequence as CNTK clamps
/// them, as (column, 1) pairs.
pub fn context_rows(inputs: &[usize], vocab: usize, context: &[i32]) -> Vec<Vec<(i32, f32)>> {
    let last = inputs.len() as i64 - 1;
    (0..inputs.len() as i64)
        .map(|t| {
            context
                .iter()
                .enumerate()
                .map(|(k, &o)| {
                    let w = inputs[(t + i64::from(o)).clamp(0, last) as usize];
                    ((k * vocab + w) as i32, 1.0)
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    fn words(v: &Vocab, ids: &[usize]) -> String {
        ids.iter()
            .map(|&i| v.words[i].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn lm_sentences_round_trip_through_the_vocabulary() {
        let dir = tempfile::tempdir().unwrap();
        let wc = file(
            &dir,
            "vocab.txt",
            "0 10 </s> 0\n1 5 the 0\n\n2 4 cat 1\n3 3 sat 1\n4 1 <unk> 1\n",
        );
        let v = read_word_class(&wc).unwrap();
        assert_eq!(v.words, ["</s>", "the", "cat", "sat", "<unk>"]);
        let text = "the cat sat\n\n</s> the dog sat </s>\n";
        let s = parse_lm(text, "t.txt", &v, "<unk>", Some("</s>"), Some("</s>")).unwrap();
        assert_eq!(s.len(), 2);
        // Inputs then the next word; begin/end added once.
        assert_eq!(words(&v, &s[0].inputs), "</s> the cat sat");
        assert_eq!(words(&v, &s[0].labels), "the cat sat </s>");
        assert_eq!(words(&v, &s[1].inputs), "</s> the <unk> sat");
        assert_eq!(s[1].lines, vec![3; 4]);
        // The text rebuilt from the ids is the sentences with their markers.
        let rebuilt: Vec<String> = s
            .iter()
            .map(|q| {
                format!(
                    "{} {}",
                    words(&v, &q.inputs),
                    v.words[*q.labels.last().unwrap()]
                )
            })
            .collect();
        assert_eq!(
            rebuilt,
            ["</s> the cat sat </s>", "</s> the <unk> sat </s>"]
        );
        // The context rows: offsets 0 and 1, clamped at the end.
        let rows = context_rows(&s[0].inputs, 5, &[0, 1]);
        assert_eq!(rows[0], vec![(0, 1.0), (5 + 1, 1.0)]);
        assert_eq!(rows[3], vec![(3, 1.0), (5 + 3, 1.0)]);
    }

    #[test]
    fn lu_sentences_round_trip_and_bad_input_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let inp = read_token_list(&file(
            &dir,
            "in.txt",
            "BOS\nEOS\nflights\nto\nboston\n<unk>\n",
        ))
        .unwrap();
        let lab = read_token_list(&file(&dir, "out.txt", "O\nB-toloc\n")).unwrap();
        let map: HashMap<String, String> = [("flight".to_string(), "flights".to_string())].into();
        let text =
            "BOS O\nflight O 12:1\nto O\nboston B-toloc\nEOS O\n\n\nBOS O\ndenver B-toloc\nEOS O\n";
        let s = parse_lu(text, "a.txt", &inp, &lab, "<unk>", Some(&map)).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(words(&inp, &s[0].inputs), "BOS flights to boston EOS");
        assert_eq!(words(&lab, &s[0].labels), "O O O B-toloc O");
        assert_eq!(words(&inp, &s[1].inputs), "BOS <unk> EOS");
        assert_eq!(s[1].lines, vec![8, 9, 10]);
        for (text, want) in [
            ("BOS O\nto\n", "a.txt:2: expected 'word label', got 'to'"),
            (
                "BOS O\n\nto B-fromloc\n",
                "a.txt:3: label 'B-fromloc' is not in the label tokens",
            ),
        ] {
            let e = parse_lu(text, "a.txt", &inp, &lab, "<unk>", None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        // Without unk in the vocabulary an unknown word is an error at its line.
        let e = parse_lu("BOS O\nx O\n", "a.txt", &lab, &lab, "<unk>", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.txt:1: 'BOS' is not in the input tokens, and neither is unk='<unk>'"),
            "{e}"
        );
        let e = parse_lm("a\n", "s.txt", &inp, "<unk>", None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.txt:1: a sentence of one word"), "{e}");
        // Bad vocabulary files.
        for (text, want) in [
            (
                "0 1 a 0\n1 1 b\n",
                ":2: expected 'index count word class' (4 fields), got 3",
            ),
            (
                "0 1 a 0\n2 1 b 0\n",
                ":2: word index '2': the indices must be 0, 1, 2",
            ),
            (
                "0 1 a 0\n1 x b 0\n",
                ":2: count 'x' and class '0' must be numbers",
            ),
            ("0 1 a 0\n\n1 1 a 0\n", ":3: this word is listed already"),
        ] {
            let e = read_word_class(&file(&dir, "wc.txt", text))
                .unwrap_err()
                .to_string();
            assert!(e.contains("wc.txt") && e.contains(want), "{text:?}: {e}");
        }
        let e = read_word_map(&file(&dir, "map.txt", "a b\nc\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("map.txt:2: expected 'word replacement'"), "{e}");
        assert!(parse_word_context("0:1:x").is_err());
        assert_eq!(parse_word_context("-1:0:1").unwrap(), vec![-1, 0, 1]);
    }
}
