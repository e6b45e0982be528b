//! HTK parameter files and HTK script files, as CNTK's `HTKMLFReader` reads them.
//!
//! A parameter file is a 12-byte big-endian header (`nSamples` i32, `sampPeriod` i32 in
//! 100 ns units, `sampSize` i16 bytes per sample, `parmKind` u16) followed by the samples as
//! big-endian f32. The compressed form (`_C`) stores each value as an i16 with a per-column
//! scale A and offset B (x = (s + B) / A) written after the header; its `nSamples` counts four
//! extra samples for them. A CRC (`_K`) is two bytes after the data, not checked. Waveforms,
//! `IREFC`, `DISCRETE` and vector-quantised (`_V`) files hold no float features and are
//! refused with the reason.
//!
//! A script file lists one file per line: `path` (the utterance is the file's base name
//! without extension) or `name=path[s,e]`, frames `s..=e` of one file (HTK's archive form).

use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// The qualifier bits of `parmKind` (HTK's `_E`, `_N`, ...), in octal as HTK defines them.
pub const QUALIFIERS: [(&str, u16); 11] = [
    ("_E", 0o100),
    ("_N", 0o200),
    ("_D", 0o400),
    ("_A", 0o1000),
    ("_C", 0o2000),
    ("_Z", 0o4000),
    ("_K", 0o10000),
    ("_0", 0o20000),
    ("_V", 0o40000),
    ("_T", 0o100000),
    ("", 0),
];
/// The base kinds, indexed by `parmKind & 0o77`.
pub const BASE_KINDS: [&str; 14] = [
    "WAVEFORM",
    "LPC",
    "LPREFC",
    "LPCEPSTRA",
    "LPDELCEP",
    "IREFC",
    "MFCC",
    "FBANK",
    "MELSPEC",
    "USER",
    "DISCRETE",
    "PLP",
    "ANON",
    "ANON",
];
/// `USER`, the kind compnet writes.
pub const USER: u16 = 9;
const COMPRESSED: u16 = 0o2000;
const CRC: u16 = 0o10000;
const VQ: u16 = 0o40000;

/// The header of an HTK parameter file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HtkHeader {
    pub num_samples: i32,
    /// The frame period in 100 ns units (100000 = 10 ms).
    pub samp_period: i32,
    /// Bytes per sample.
    pub samp_size: i16,
    pub parm_kind: u16,
}

/// `parmKind` as HTK prints it (`MFCC_E_D_A`).
pub fn kind_name(kind: u16) -> String {
    let base = BASE_KINDS
        .get((kind & 0o77) as usize)
        .copied()
        .unwrap_or("unknown");
    let mut s = if (kind & 0o77) as usize >= BASE_KINDS.len() {
        format!("{base}({})", kind & 0o77)
    } else {
        base.to_string()
    };
    for (q, bit) in QUALIFIERS {
        if bit != 0 && kind & bit != 0 {
            s.push_str(q);
        }
    }
    s
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_f32(b: &[u8], at: usize) -> f32 {
    f32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn format_err(file: &str, offset: usize, expected: impl Into<String>, found: String) -> Error {
    Error::Format {
        file: file.to_string(),
        offset,
        expected: expected.into(),
        found,
    }
}

/// Reads the header of `bytes` (an HTK file named `file`).
pub fn read_header(bytes: &[u8], file: &str) -> Result<HtkHeader> {
    if bytes.len() < 12 {
        return Err(format_err(
            file,
            bytes.len(),
            "a 12-byte HTK header",
            format!("the end of the file after {} bytes", bytes.len()),
        ));
    }
    Ok(HtkHeader {
        num_samples: be_i32(bytes, 0),
        samp_period: be_i32(bytes, 4),
        samp_size: i16::from_be_bytes([bytes[8], bytes[9]]),
        parm_kind: u16::from_be_bytes([bytes[10], bytes[11]]),
    })
}

/// The feature dimension of a file with this header, or why it is refused.
pub fn feature_dim(h: &HtkHeader, file: &str) -> Result<usize> {
    let base = h.parm_kind & 0o77;
    let refuse = |why: &str| {
        Err(Error::Usage(format!(
            "{file}: HTK parameter kind {} ({}) is not supported: {why}",
            kind_name(h.parm_kind),
            h.parm_kind
        )))
    };
    match base {
        0 => return refuse("a waveform holds 16-bit samples, not features"),
        5 => return refuse("IREFC holds 16-bit integer coefficients, not float features"),
        10 => return refuse("DISCRETE holds vector-quantiser indices, not features"),
        b if b as usize >= BASE_KINDS.len() => return refuse("unknown base kind"),
        _ => {}
    }
    if h.parm_kind & VQ != 0 {
        return refuse("vector-quantised (_V) files hold codebook indices, not features");
    }
    if h.num_samples < 0 {
        return Err(format_err(
            file,
            0,
            "a number of samples >= 0",
            h.num_samples.to_string(),
        ));
    }
    let per = if h.parm_kind & COMPRESSED != 0 { 2 } else { 4 };
    if h.samp_size <= 0 || !(h.samp_size as usize).is_multiple_of(per) {
        return Err(format_err(
            file,
            8,
            format!("a sample size that is a positive multiple of {per} bytes"),
            h.samp_size.to_string(),
        ));
    }
    Ok(h.samp_size as usize / per)
}

/// Reads a whole HTK parameter file: the header and the features (one row per sample).
pub fn read_htk(bytes: &[u8], file: &str) -> Result<(HtkHeader, Matrix)> {
    let h = read_header(bytes, file)?;
    let dim = feature_dim(&h, file)?;
    let compressed = h.parm_kind & COMPRESSED != 0;
    let mut pos = 12usize;
    let mut rows = h.num_samples as usize;
    let mut scale = Vec::new();
    if compressed {
        // A and B take 8 * dim bytes, counted as 4 samples of 2 * dim bytes.
        if rows < 4 {
            return Err(format_err(
                file,
                0,
                "a compressed file's sample count, which includes 4 for the scale and offset",
                h.num_samples.to_string(),
            ));
        }
        rows -= 4;
        let need = pos + 8 * dim;
        if bytes.len() < need {
            return Err(format_err(
                file,
                bytes.len(),
                format!("the {dim} scales and {dim} offsets of a compressed file"),
                "the end of the file".into(),
            ));
        }
        scale = (0..2 * dim).map(|i| be_f32(bytes, pos + 4 * i)).collect();
        pos = need;
        if let Some(i) = scale[..dim]
            .iter()
            .position(|a| !a.is_finite() || *a == 0.0)
        {
            return Err(format_err(
                file,
                12 + 4 * i,
                "a finite nonzero scale",
                scale[i].to_string(),
            ));
        }
    }
    let row_bytes = h.samp_size as usize;
    crate::limits::check_product(&[rows as u64, dim as u64, 4], "an HTK feature matrix")
        .map_err(|e| Error::Usage(format!("{file}: {e}")))?;
    let data_end = pos as u64 + rows as u64 * row_bytes as u64;
    if (bytes.len() as u64) < data_end {
        let complete = (bytes.len() - pos) / row_bytes;
        return Err(format_err(
            file,
            bytes.len(),
            format!(
                "{rows} samples of {row_bytes} bytes (the header's count): the file is truncated"
            ),
            format!("the end of the file inside sample {complete}"),
        ));
    }
    let data_end = data_end as usize;
    let trailing = bytes.len() - data_end;
    let allowed = if h.parm_kind & CRC != 0 { 2 } else { 0 };
    if trailing > allowed {
        return Err(format_err(
            file,
            data_end,
            "the end of the file after the header's sample count",
            format!("{trailing} more bytes"),
        ));
    }
    let mut data = Vec::with_capacity(rows * dim);
    for r in 0..rows {
        let at = pos + r * row_bytes;
        for c in 0..dim {
            if compressed {
                let s = i16::from_be_bytes([bytes[at + 2 * c], bytes[at + 2 * c + 1]]) as f32;
                data.push((s + scale[dim + c]) / scale[c]);
            } else {
                data.push(be_f32(bytes, at + 4 * c));
            }
        }
    }
    Ok((h, Matrix::from_vec(rows, dim, data)))
}

/// An HTK parameter file of `m` (kind `USER`, or `USER_C` when `compressed`), `samp_period` in
/// 100 ns units.
pub fn write_htk(m: &Matrix, samp_period: i32, compressed: bool) -> Result<Vec<u8>> {
    let (rows, dim) = (m.num_rows(), m.num_cols());
    let per = if compressed { 2 } else { 4 };
    let extra = if compressed { 4 } else { 0 };
    if dim == 0 || dim * per > i16::MAX as usize || rows + extra > i32::MAX as usize {
        return Err(Error::Usage(format!(
            "an HTK file holds 1..={} columns and fewer than 2^31 samples; this matrix is \
             {rows} x {dim}",
            i16::MAX as usize / per
        )));
    }
    let mut out = Vec::with_capacity(12 + (rows + extra) * dim * per);
    out.extend_from_slice(&((rows + extra) as i32).to_be_bytes());
    out.extend_from_slice(&samp_period.to_be_bytes());
    out.extend_from_slice(&((dim * per) as i16).to_be_bytes());
    let kind = USER | if compressed { COMPRESSED } else { 0 };
    out.extend_from_slice(&kind.to_be_bytes());
    let v = m.to_vec();
    if !compressed {
        for x in v {
            out.extend_from_slice(&x.to_be_bytes());
        }
        return Ok(out);
    }
    // HTK's compression: per column, [min, max] maps onto [-32767, 32767].
    let mut a = vec![0f32; dim];
    let mut b = vec![0f32; dim];
    for c in 0..dim {
        let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
        for r in 0..rows {
            lo = lo.min(v[r * dim + c]);
            hi = hi.max(v[r * dim + c]);
        }
        if !(lo.is_finite() && hi.is_finite()) {
            (lo, hi) = (-1.0, 1.0);
        } else if hi <= lo {
            // A constant column: any range around it decodes it exactly.
            (lo, hi) = (lo - 1.0, hi + 1.0);
        }
        a[c] = 2.0 * 32767.0 / (hi - lo);
        b[c] = (hi + lo) * 32767.0 / (hi - lo);
    }
    for x in a.iter().chain(b.iter()) {
        out.extend_from_slice(&x.to_be_bytes());
    }
    for r in 0..rows {
        for c in 0..dim {
            let s = (v[r * dim + c] * a[c] - b[c])
                .round()
                .clamp(-32767.0, 32767.0) as i16;
            out.extend_from_slice(&s.to_be_bytes());
        }
    }
    Ok(out)
}

/// One line of a script file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScpEntry {
    /// The utterance name (`name=` or the file's base name without extension).
    pub name: String,
    pub path: String,
    /// Frames `first..=last` (the archive form `[s,e]`), or the whole file.
    pub range: Option<(usize, usize)>,
    /// 1-based line in the script file.
    pub line: usize,
}

/// Parses a script file; relative paths are taken relative to `base_dir` when given (the
/// script's own directory for `compnet fit` data directories), else as they are.
pub fn parse_scp(text: &str, file: &str, base_dir: Option<&str>) -> Result<Vec<ScpEntry>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let err = |col: usize, msg: String| Error::Parse {
            pos: crate::error::TextPos {
                file: file.to_string(),
                line: i + 1,
                column: col + 1 + (raw.len() - raw.trim_start().len()),
                line_text: raw.to_string(),
            },
            msg,
        };
        let (name, rest) = match line.find('=') {
            Some(p) => (Some(line[..p].trim()), line[p + 1..].trim()),
            None => (None, line),
        };
        if name == Some("") {
            return Err(err(0, "an empty utterance name before '='".into()));
        }
        let (path, range) = if rest.ends_with(']') {
            let open = rest.rfind('[').ok_or_else(|| {
                err(
                    line.len() - 1,
                    "a ']' without '[' (the archive form is name=file[s,e])".into(),
                )
            })?;
            let inner = &rest[open + 1..rest.len() - 1];
            let col = line.len() - rest.len() + open + 1;
            let (s, e) = inner
                .split_once(',')
                .ok_or_else(|| err(col, format!("expected [first,last] frames, got [{inner}]")))?;
            let num = |w: &str| {
                w.trim().parse::<usize>().map_err(|_| {
                    err(
                        col,
                        format!("'{}' is not a frame number (a whole number >= 0)", w.trim()),
                    )
                })
            };
            let (s, e) = (num(s)?, num(e)?);
            if e < s {
                return Err(err(
                    col,
                    format!("the range [{s},{e}] ends before it starts"),
                ));
            }
            (rest[..open].trim(), Some((s, e)))
        } else {
            (rest, None)
        };
        if path.is_empty() {
            return Err(err(line.len(), "no file name".into()));
        }
        let name = match name {
            Some(n) => n.to_string(),
            None => {
                let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
                base.rsplit_once('.').map_or(base, |(b, _)| b).to_string()
            }
        };
        let rel = std::path::Path::new(path);
        let path = match base_dir {
            Some(d) if rel.is_relative() => format!("{}/{path}", d.trim_end_matches('/')),
            _ => path.to_string(),
        };
        out.push(ScpEntry {
            name,
            path,
            range,
            line: i + 1,
        });
    }
    Ok(out)
}

/// Reads the features of every entry of the script `scp_file`, checking `dim` when given:
/// the utterances in the script's order. A file named by several consecutive lines (the
/// archive form) is read once.
pub fn read_scp_features(
    scp_file: &str,
    base_dir: Option<&str>,
    dim: Option<usize>,
) -> Result<Vec<(String, Matrix)>> {
    let text = String::from_utf8(crate::io::read_file(scp_file)?)
        .map_err(|e| Error::Usage(format!("{scp_file}: not UTF-8 text ({e})")))?;
    let entries = parse_scp(&text, scp_file, base_dir)?;
    let mut cache: Option<(String, Matrix)> = None;
    let mut out = Vec::with_capacity(entries.len());
    let mut seen = std::collections::HashMap::new();
    for e in entries {
        if let Some(prev) = seen.insert(e.name.clone(), e.line) {
            return Err(Error::Usage(format!(
                "{scp_file}:{}: utterance {} is listed already (line {prev})",
                e.line, e.name
            )));
        }
        if cache.as_ref().map(|c| &c.0) != Some(&e.path) {
            let bytes = crate::io::read_file(&e.path)?;
            let (_, m) = read_htk(&bytes, &e.path)?;
            cache = Some((e.path.clone(), m));
        }
        let m = &cache.as_ref().expect("just filled").1;
        if let Some(d) = dim {
            if m.num_cols() != d {
                return Err(Error::Usage(format!(
                    "{scp_file}:{}: {} has features of dimension {} but {d} were expected",
                    e.line,
                    e.path,
                    m.num_cols()
                )));
            }
        }
        let feats = match e.range {
            None => m.clone(),
            Some((s, last)) => {
                if last >= m.num_rows() {
                    return Err(Error::Usage(format!(
                        "{scp_file}:{}: utterance {}: the range [{s},{last}] goes past the end \
                         of {} ({} frames, 0..={})",
                        e.line,
                        e.name,
                        e.path,
                        m.num_rows(),
                        m.num_rows() as i64 - 1
                    )));
                }
                let mut sub = Matrix::zeros(last - s + 1, m.num_cols());
                for r in s..=last {
                    sub.copy_row_from_slice(r - s, &m.row_to_vec(r));
                }
                sub
            }
        };
        out.push((e.name, feats));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mat(rows: usize, cols: usize, f: impl Fn(usize, usize) -> f32) -> Matrix {
        let mut v = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                v.push(f(r, c));
            }
        }
        Matrix::from_vec(rows, cols, v)
    }

    #[test]
    fn the_header_is_big_endian_and_the_kind_prints_as_htk_does() {
        let m = mat(3, 2, |r, c| r as f32 + c as f32 / 2.0);
        let b = write_htk(&m, 100000, false).unwrap();
        assert_eq!(&b[..12], &[0, 0, 0, 3, 0, 1, 0x86, 0xa0, 0, 8, 0, 9]);
        assert_eq!(b.len(), 12 + 3 * 2 * 4);
        assert_eq!(kind_name(6 | 0o100 | 0o400 | 0o1000), "MFCC_E_D_A");
        assert_eq!(kind_name(USER | COMPRESSED), "USER_C");
        let (h, back) = read_htk(&b, "x.htk").unwrap();
        assert_eq!(h.samp_period, 100000);
        assert_eq!(back.to_vec(), m.to_vec());
    }

    #[test]
    fn truncated_trailing_and_refused_files_name_the_file_and_offset() {
        let m = mat(4, 3, |r, c| (r * 3 + c) as f32);
        let b = write_htk(&m, 100000, false).unwrap();
        let e = read_htk(&b[..b.len() - 5], "t.htk")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.htk: at byte 55") && e.contains("truncated"),
            "{e}"
        );
        let e = read_htk(&b[..7], "t.htk").unwrap_err().to_string();
        assert!(
            e.contains("t.htk: at byte 7") && e.contains("header"),
            "{e}"
        );
        let mut long = b.clone();
        long.extend_from_slice(&[0, 0, 0]);
        let e = read_htk(&long, "t.htk").unwrap_err().to_string();
        assert!(
            e.contains("at byte 60") && e.contains("3 more bytes"),
            "{e}"
        );
        // A CRC's two bytes are allowed.
        let mut crc = b.clone();
        crc[10..12].copy_from_slice(&(USER | CRC).to_be_bytes());
        crc.extend_from_slice(&[1, 2]);
        assert_eq!(read_htk(&crc, "t.htk").unwrap().1.to_vec(), m.to_vec());
        for (kind, why) in [
            (0u16, "waveform"),
            (5, "IREFC"),
            (10, "DISCRETE"),
            (USER | VQ, "vector-quantised"),
            (40, "unknown base kind"),
        ] {
            let mut k = b.clone();
            k[10..12].copy_from_slice(&kind.to_be_bytes());
            let e = read_htk(&k, "k.htk").unwrap_err().to_string();
            assert!(
                e.starts_with("k.htk: HTK parameter kind") && e.contains(why),
                "{e}"
            );
        }
        let mut odd = b.clone();
        odd[8..10].copy_from_slice(&6i16.to_be_bytes());
        let e = read_htk(&odd, "o.htk").unwrap_err().to_string();
        assert!(
            e.contains("o.htk: at byte 8") && e.contains("multiple of 4"),
            "{e}"
        );
        // A huge sample count is refused before anything is allocated.
        let mut huge = b.clone();
        huge[0..4].copy_from_slice(&i32::MAX.to_be_bytes());
        huge[8..10].copy_from_slice(&32764i16.to_be_bytes());
        assert!(read_htk(&huge, "h.htk").is_err());
    }

    #[test]
    fn compressed_files_round_trip_within_the_quantisation_step() {
        let m = mat(50, 4, |r, c| {
            if c == 3 {
                2.0
            } else {
                ((r * 7 + c * 13) % 23) as f32 * 0.37 - 3.0
            }
        });
        let b = write_htk(&m, 100000, true).unwrap();
        let (h, back) = read_htk(&b, "c.htk").unwrap();
        assert_eq!(h.num_samples, 54);
        assert_eq!(h.samp_size, 8);
        assert_eq!(kind_name(h.parm_kind), "USER_C");
        for (x, y) in m.to_vec().iter().zip(back.to_vec()) {
            assert!((x - y).abs() <= 8.14 / 65534.0 + 1e-5, "{x} {y}");
        }
        let e = read_htk(&b[..20], "c.htk").unwrap_err().to_string();
        assert!(e.contains("scales and 4 offsets"), "{e}");
    }

    proptest! {
        #[test]
        fn plain_files_round_trip_exactly(rows in 0usize..20, cols in 1usize..8, seed in 0u32..1000) {
            let m = mat(rows, cols, |r, c| ((r * 31 + c * 17) as u32 ^ seed) as f32 * 0.01 - 5.0);
            let b = write_htk(&m, 200000, false).unwrap();
            let (h, back) = read_htk(&b, "p.htk").unwrap();
            prop_assert_eq!(h.num_samples as usize, rows);
            prop_assert_eq!(back.num_cols(), cols);
            prop_assert_eq!(back.to_vec(), m.to_vec());
            // Any cut inside the data is an error, never a panic.
            for cut in 0..b.len() {
                prop_assert!(read_htk(&b[..cut], "p.htk").is_err());
            }
        }
    }

    #[test]
    fn script_lines_give_names_paths_and_ranges() {
        let s = "a/b/utt1.fbank\nx=big.fbank[0,4]\n\n  y = big.fbank[5,9]\n";
        let e = parse_scp(s, "s.scp", Some("dir")).unwrap();
        assert_eq!(e[0].name, "utt1");
        assert_eq!(e[0].path, "dir/a/b/utt1.fbank");
        assert_eq!(e[0].range, None);
        assert_eq!((e[1].name.as_str(), e[1].range), ("x", Some((0, 4))));
        assert_eq!((e[2].name.as_str(), e[2].line), ("y", 4));
        for (bad, want) in [
            ("x=f[3,1]\n", "s.scp:1:5: the range [3,1] ends before"),
            ("x=f[3]\n", "s.scp:1:5: expected [first,last]"),
            ("ok\nx=f[a,2]\n", "s.scp:2:5: 'a' is not a frame number"),
            ("=f\n", "s.scp:1:1: an empty utterance name"),
            ("x=\n", "s.scp:1:3: no file name"),
        ] {
            let e = parse_scp(bad, "s.scp", None).unwrap_err().to_string();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }

    #[test]
    fn archive_ranges_are_cut_and_a_range_past_the_end_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let m = mat(10, 2, |r, c| (r * 2 + c) as f32);
        std::fs::write(
            dir.path().join("big.htk"),
            write_htk(&m, 100000, false).unwrap(),
        )
        .unwrap();
        let scp = dir.path().join("s.scp");
        std::fs::write(&scp, "u1=big.htk[0,3]\nu2=big.htk[4,9]\n").unwrap();
        let d = dir.path().to_str().unwrap();
        let scp_s = scp.to_str().unwrap();
        let u = read_scp_features(scp_s, Some(d), Some(2)).unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].1.num_rows(), 4);
        assert_eq!(u[1].1.row_to_vec(0), vec![8.0, 9.0]);
        std::fs::write(&scp, "u1=big.htk[0,3]\nu2=big.htk[4,10]\n").unwrap();
        let e = read_scp_features(scp_s, Some(d), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.scp:2: utterance u2: the range [4,10] goes past the end")
                && e.contains("(10 frames, 0..=9)"),
            "{e}"
        );
        let e = read_scp_features(scp_s, Some(d), Some(3))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.scp:1:") && e.contains("dimension 2 but 3"),
            "{e}"
        );
        std::fs::write(&scp, "u1=big.htk[0,3]\nu1=big.htk[4,5]\n").unwrap();
        let e = read_scp_features(scp_s, Some(d), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.scp:2: utterance u1 is listed already (line 1)"),
            "{e}"
        );
    }
}
