//! Kaldi tables (facts §3.1–3.2): rspecifiers / wspecifiers, rx/wx filenames (files, stdin /
//! stdout, byte offsets, pipes), scp files with range specifiers, sequential and random-access
//! archive readers, and archive / script writers.
//!
//! ```no_run
//! use compnet::io::table::{MatrixWriter, SequentialMatrixReader};
//! # fn main() -> compnet::Result<()> {
//! let mut w = MatrixWriter::open("ark,t:out.txt")?;
//! for item in SequentialMatrixReader::open("ark:feats.ark")? {
//!     let (key, m) = item?;
//!     w.write(&key, &m)?;
//! }
//! w.close()?;
//! # Ok(()) }
//! ```

use super::codec::{TokenReader, TokenWriter};
use super::compressed::{CompressedFormat, CompressedMatrix};
use super::sparse::{GeneralMatrix, Posterior, SparseMatrix};
use crate::error::{Error, Result, TextPos};
use crate::matrix::{Matrix, Vector};
use std::collections::HashMap;
use std::io::Write;
use std::rc::Rc;

// ---------------------------------------------------------------------------------------------
// Specifiers

/// Options of an rspecifier (`o`, `s`, `cs`, `p`, `bg` and their negations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// `o`: each key is requested at most once.
    pub once: bool,
    /// `s`: keys are sorted in the file.
    pub sorted: bool,
    /// `cs`: keys will be requested in sorted order.
    pub called_sorted: bool,
    /// `p`: permissive; skip unreadable entries / ignore a corrupted archive tail.
    pub permissive: bool,
    /// `bg`: read ahead in the background (accepted; reading is in-memory anyway).
    pub background: bool,
}

/// Whether an rspecifier names an archive or a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// `ark:`
    Archive,
    /// `scp:`
    Script,
}

/// A parsed rspecifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rspecifier {
    /// Archive or script.
    pub kind: TableKind,
    /// The rxfilename after the colon, verbatim.
    pub filename: String,
    /// Options.
    pub opts: ReadOptions,
}

/// A parsed wspecifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wspecifier {
    /// Archive wxfilename (`ark` and `ark,scp`).
    pub archive: Option<String>,
    /// Script filename (`scp` and `ark,scp`).
    pub script: Option<String>,
    /// `b` (default) or `t`.
    pub binary: bool,
    /// `f` / `nf`: flush after every object or not (None = default).
    pub flush: Option<bool>,
    /// `p`: permissive.
    pub permissive: bool,
}

/// The option list before the first colon, split at every `,` or space keeping empty pieces
/// (so `ark, t:x` has an empty, invalid piece). None if there is no colon.
fn split_spec(spec: &str) -> Option<(Vec<&str>, &str)> {
    let (head, tail) = spec.split_once(':')?;
    Some((head.split([',', ' ']).collect(), tail))
}

/// The options and the filename of a `what` ("rspecifier" or "wspecifier"), with the checks
/// both share; `forms` says what a spec looks like.
fn spec_parts<'a>(spec: &'a str, what: &str, forms: &str) -> Result<(Vec<&'a str>, &'a str)> {
    if spec.ends_with(|c: char| c.is_ascii_whitespace()) {
        return Err(usage(spec, what, "trailing whitespace"));
    }
    split_spec(spec).ok_or_else(|| usage(spec, what, &format!("expected {forms}")))
}

fn usage(spec: &str, what: &str, why: &str) -> Error {
    Error::Usage(format!("invalid {what} \"{spec}\": {why}"))
}

/// Parses an rspecifier with Kaldi's validity rules.
pub fn parse_rspecifier(spec: &str) -> Result<Rspecifier> {
    let bad = |why: &str| usage(spec, "rspecifier", why);
    let (opts_list, filename) = spec_parts(spec, "rspecifier", "ark:... or scp:...")?;
    let mut kind = None;
    let mut o = ReadOptions::default();
    for piece in opts_list {
        match piece {
            "ark" | "scp" => {
                if kind.is_some() {
                    return Err(bad("exactly one of ark or scp is allowed"));
                }
                kind = Some(if piece == "ark" {
                    TableKind::Archive
                } else {
                    TableKind::Script
                });
            }
            "b" | "t" => {}
            "o" => o.once = true,
            "no" => o.once = false,
            "s" => o.sorted = true,
            "ns" => o.sorted = false,
            "cs" => o.called_sorted = true,
            "ncs" => o.called_sorted = false,
            "p" => o.permissive = true,
            "np" => o.permissive = false,
            "bg" => o.background = true,
            "" => {
                return Err(bad(
                    "empty option (options are separated by exactly one ',')",
                ))
            }
            other => return Err(bad(&format!("unknown option \"{other}\""))),
        }
    }
    let kind = kind.ok_or_else(|| bad("expected ark or scp"))?;
    Ok(Rspecifier {
        kind,
        filename: filename.to_string(),
        opts: o,
    })
}

/// Parses a wspecifier with Kaldi's validity rules (`ark`, `scp`, or `ark,scp` in that order).
pub fn parse_wspecifier(spec: &str) -> Result<Wspecifier> {
    let bad = |why: &str| usage(spec, "wspecifier", why);
    let (opts_list, filename) = spec_parts(spec, "wspecifier", "ark:..., scp:... or ark,scp:...")?;
    #[derive(PartialEq)]
    enum K {
        None,
        Ark,
        Scp,
        Both,
    }
    let mut k = K::None;
    let mut w = Wspecifier {
        archive: None,
        script: None,
        binary: true,
        flush: None,
        permissive: false,
    };
    for piece in opts_list {
        match piece {
            "ark" => {
                if k != K::None {
                    return Err(bad("ark must come first and only once"));
                }
                k = K::Ark;
            }
            "scp" => {
                k = match k {
                    K::None => K::Scp,
                    K::Ark => K::Both,
                    _ => return Err(bad("scp given twice")),
                }
            }
            "b" => w.binary = true,
            "t" => w.binary = false,
            "f" => w.flush = Some(true),
            "nf" => w.flush = Some(false),
            "p" => w.permissive = true,
            "" => {
                return Err(bad(
                    "empty option (options are separated by exactly one ',')",
                ))
            }
            other => return Err(bad(&format!("unknown option \"{other}\""))),
        }
    }
    match k {
        K::None => return Err(bad("expected ark, scp or ark,scp")),
        K::Ark => w.archive = Some(filename.to_string()),
        K::Scp => w.script = Some(filename.to_string()),
        K::Both => {
            let (a, s) = filename
                .split_once(',')
                .ok_or_else(|| bad("ark,scp needs two filenames separated by ','"))?;
            w.archive = Some(a.to_string());
            w.script = Some(s.to_string());
        }
    }
    Ok(w)
}

// ---------------------------------------------------------------------------------------------
// rxfilenames / wxfilenames

/// What an rxfilename names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rx {
    /// `-` or empty.
    Stdin,
    /// A plain file.
    File(String),
    /// `file:offset`.
    Offset(String, usize),
    /// `cmd |`, run with `sh -c`.
    Pipe(String),
}

/// Classifies an rxfilename (Kaldi's ClassifyRxfilename).
pub fn classify_rxfilename(name: &str) -> Result<Rx> {
    let bad = |why: &str| Error::Usage(format!("invalid input filename \"{name}\": {why}"));
    if name.is_empty() || name == "-" {
        return Ok(Rx::Stdin);
    }
    if name.starts_with('|') {
        return Err(bad("'| cmd' is an output pipe"));
    }
    if name.starts_with(|c: char| c.is_ascii_whitespace())
        || name.ends_with(|c: char| c.is_ascii_whitespace())
    {
        return Err(bad("leading or trailing whitespace"));
    }
    if let Some(cmd) = name.strip_suffix('|') {
        return Ok(Rx::Pipe(cmd.to_string()));
    }
    if let Some((file, off)) = name.rsplit_once(':') {
        if !off.is_empty() && off.bytes().all(|b| b.is_ascii_digit()) {
            let o = off.parse().map_err(|_| bad("offset too large"))?;
            return Ok(Rx::Offset(file.to_string(), o));
        }
    }
    Ok(Rx::File(name.to_string()))
}

/// What a wxfilename names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wx {
    /// `-` or empty.
    Stdout,
    /// A plain file (written through a temporary file and renamed into place on close).
    File(String),
    /// `| cmd`, run with `sh -c`.
    Pipe(String),
}

/// Classifies a wxfilename (Kaldi's ClassifyWxfilename).
pub fn classify_wxfilename(name: &str) -> Result<Wx> {
    let bad = |why: &str| Error::Usage(format!("invalid output filename \"{name}\": {why}"));
    if name.is_empty() || name == "-" {
        return Ok(Wx::Stdout);
    }
    if name.starts_with(|c: char| c.is_ascii_whitespace())
        || name.ends_with(|c: char| c.is_ascii_whitespace())
    {
        return Err(bad("leading or trailing whitespace"));
    }
    if let Some(cmd) = name.strip_prefix('|') {
        return Ok(Wx::Pipe(cmd.to_string()));
    }
    if name.ends_with('|') {
        return Err(bad("'cmd |' is an input pipe"));
    }
    if let Some((_, off)) = name.rsplit_once(':') {
        if !off.is_empty() && off.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("an output filename may not end in :<offset>"));
        }
    }
    Ok(Wx::File(name.to_string()))
}

/// Runs `sh -c cmd` and returns its standard output.
fn run_input_pipe(cmd: &str) -> Result<Vec<u8>> {
    let label = format!("{cmd} |");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Error::io(&label, e))?;
    if !out.status.success() {
        return Err(Error::Usage(format!(
            "input pipe \"{label}\" failed: {}",
            out.status
        )));
    }
    Ok(out.stdout)
}

/// Reads an rxfilename into memory; returns the bytes, the start offset and a label for errors.
pub fn read_rxfilename(name: &str) -> Result<(Rc<Vec<u8>>, usize, String)> {
    let mut cache = FileCache::default();
    cache.open(name)
}

/// Keeps the most recently read file so scp entries pointing into one archive read it once.
#[derive(Default)]
struct FileCache {
    last: Option<(String, Rc<Vec<u8>>)>,
}

impl FileCache {
    fn file(&mut self, path: &str) -> Result<Rc<Vec<u8>>> {
        if let Some((p, b)) = &self.last {
            if p == path {
                return Ok(b.clone());
            }
        }
        let b = Rc::new(std::fs::read(path).map_err(|e| Error::io(path, e))?);
        self.last = Some((path.to_string(), b.clone()));
        Ok(b)
    }
    fn open(&mut self, name: &str) -> Result<(Rc<Vec<u8>>, usize, String)> {
        match classify_rxfilename(name)? {
            Rx::Stdin => Ok((Rc::new(super::read_file("-")?), 0, "<stdin>".to_string())),
            Rx::File(f) => Ok((self.file(&f)?, 0, f)),
            Rx::Offset(f, o) => {
                let b = self.file(&f)?;
                if o > b.len() {
                    return Err(Error::format(
                        &f,
                        o,
                        format!("an offset within the file ({} bytes)", b.len()),
                        "end of file",
                    ));
                }
                Ok((b, o, f))
            }
            Rx::Pipe(cmd) => Ok((Rc::new(run_input_pipe(&cmd)?), 0, format!("{cmd} |"))),
        }
    }
}

/// An open output: stdout, a file (see [`super::OutputFile`]), or a pipe.
enum Sink {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    File {
        dest: String,
        w: super::OutputFile,
    },
    Pipe {
        label: String,
        child: std::process::Child,
        w: std::io::BufWriter<std::process::ChildStdin>,
    },
}

impl Sink {
    fn open(name: &str) -> Result<Sink> {
        match classify_wxfilename(name)? {
            Wx::Stdout => Ok(Sink::Stdout(std::io::BufWriter::new(std::io::stdout()))),
            Wx::File(f) => {
                let w = super::OutputFile::create(&f).map_err(|e| Error::io(&f, e))?;
                Ok(Sink::File { dest: f, w })
            }
            Wx::Pipe(cmd) => {
                let label = format!("| {cmd}");
                let mut child = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(&cmd)
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| Error::io(&label, e))?;
                let stdin = child
                    .stdin
                    .take()
                    .ok_or_else(|| Error::Usage(format!("cannot open pipe \"{label}\"")))?;
                Ok(Sink::Pipe {
                    label,
                    child,
                    w: std::io::BufWriter::new(stdin),
                })
            }
        }
    }
    fn label(&self) -> &str {
        match self {
            Sink::Stdout(_) => "<stdout>",
            Sink::File { dest, .. } => dest,
            Sink::Pipe { label, .. } => label,
        }
    }
    fn write_all(&mut self, b: &[u8]) -> Result<()> {
        let r = match self {
            Sink::Stdout(w) => w.write_all(b),
            Sink::File { w, .. } => w.write_all(b),
            Sink::Pipe { w, .. } => w.write_all(b),
        };
        r.map_err(|e| Error::io(self.label(), e))
    }
    fn flush(&mut self) -> Result<()> {
        let r = match self {
            Sink::Stdout(w) => w.flush(),
            Sink::File { w, .. } => w.flush(),
            Sink::Pipe { w, .. } => w.flush(),
        };
        r.map_err(|e| Error::io(self.label(), e))
    }
    /// Finishes the output: flush, rename into place, or wait for the pipe.
    fn close(self) -> Result<()> {
        match self {
            Sink::Stdout(mut w) => w.flush().map_err(|e| Error::io("<stdout>", e)),
            Sink::File { dest, w } => w.commit().map_err(|e| Error::io(&dest, e)),
            Sink::Pipe {
                label,
                mut child,
                w,
            } => {
                // Dropping stdin closes the pipe so the command can finish.
                let flushed = w
                    .into_inner()
                    .map(drop)
                    .map_err(|e| Error::io(&label, e.into_error()));
                let status = child.wait().map_err(|e| Error::io(&label, e))?;
                flushed?;
                if !status.success() {
                    return Err(Error::Usage(format!(
                        "output pipe \"{label}\" failed: {status}"
                    )));
                }
                Ok(())
            }
        }
    }
    /// Abandons the output (a temporary file is removed).
    fn discard(self) {
        if let Sink::File { w, .. } = self {
            w.discard();
        } else {
            let _ = self.close();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Objects and range specifiers

/// A range specifier from an scp entry: `[r1:r2]` or `[r1:r2,c1:c2]` (inclusive; None = the
/// whole axis, written as a bare `:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RangeSpec {
    /// Inclusive row range.
    pub rows: Option<(usize, usize)>,
    /// Inclusive column range.
    pub cols: Option<(usize, usize)>,
}

impl RangeSpec {
    /// Parses the text between the brackets.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let parts: Vec<&str> = s.split(',').collect();
        if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "bad range specifier [{s}]: expected [r1:r2] or [r1:r2,c1:c2]"
            ));
        }
        let axis = |p: &str| -> std::result::Result<Option<(usize, usize)>, String> {
            if p == ":" {
                return Ok(None);
            }
            let (a, b) = p
                .split_once(':')
                .ok_or_else(|| format!("bad range \"{p}\" in [{s}]: expected a:b"))?;
            let a: usize = a
                .trim()
                .parse()
                .map_err(|_| format!("bad range \"{p}\" in [{s}]"))?;
            let b: usize = b
                .trim()
                .parse()
                .map_err(|_| format!("bad range \"{p}\" in [{s}]"))?;
            if a > b {
                return Err(format!("bad range \"{p}\" in [{s}]: start after end"));
            }
            Ok(Some((a, b)))
        };
        Ok(RangeSpec {
            rows: axis(parts[0])?,
            cols: match parts.get(1) {
                Some(p) => axis(p)?,
                None => None,
            },
        })
    }

    /// Resolves the range against a rows×cols object: (row0, nrows, col0, ncols). The row end
    /// may overshoot the last row by up to 2 (Kaldi's length tolerance of 3) and is clamped.
    pub fn resolve(
        &self,
        rows: usize,
        cols: usize,
    ) -> std::result::Result<(usize, usize, usize, usize), String> {
        const ROW_TOLERANCE: usize = 3;
        let (r0, r1) = self.rows.unwrap_or((0, rows.wrapping_sub(1)));
        let (c0, c1) = self.cols.unwrap_or((0, cols.wrapping_sub(1)));
        if rows == 0
            || cols == 0
            || r0 >= rows
            || r1 >= rows + ROW_TOLERANCE
            || c1 >= cols
            || c0 > c1
            || r0 > r1
        {
            return Err(format!(
                "range [{}] does not fit a {rows}x{cols} matrix",
                self.text()
            ));
        }
        let r1 = r1.min(rows - 1);
        Ok((r0, r1 - r0 + 1, c0, c1 - c0 + 1))
    }

    fn text(&self) -> String {
        let ax = |a: Option<(usize, usize)>| a.map_or(":".to_string(), |(x, y)| format!("{x}:{y}"));
        match self.cols {
            None => ax(self.rows),
            Some(_) => format!("{},{}", ax(self.rows), ax(self.cols)),
        }
    }
}

/// An object that can live in a Kaldi table (Kaldi's "holder").
pub trait TableObject: Sized {
    /// Reads one object; the reader is positioned after the optional `\0B` header.
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self>;
    /// Writes one object (without the `\0B` header).
    fn write_object(&self, w: &mut TokenWriter);
    /// As [`Self::write_object`], possibly leaving the object's last bytes out of `w`: they
    /// are returned, borrowed from the object, to be written right after `w`'s bytes (a
    /// large matrix's data is then written from where it is, not copied into the buffer).
    fn write_object_in_place(&self, w: &mut TokenWriter) -> Option<&[u8]> {
        self.write_object(w);
        None
    }
    /// Applies an scp range specifier; the default says ranges are unsupported.
    fn extract_range(&self, range: &RangeSpec) -> std::result::Result<Self, String> {
        let _ = range;
        Err("range specifiers are not supported for this type".to_string())
    }
}

fn sub_matrix(m: &Matrix, range: &RangeSpec) -> std::result::Result<Matrix, String> {
    let (r0, nr, c0, nc) = range.resolve(m.num_rows(), m.num_cols())?;
    Ok(m.sub(r0, nr, c0, nc).to_matrix())
}

impl TableObject for Matrix {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        super::kaldi_matrix::read_matrix(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        w.matrix(self)
    }
    fn write_object_in_place(&self, w: &mut TokenWriter) -> Option<&[u8]> {
        if w.is_binary() {
            if let Some(data) = self.view().le_bytes() {
                w.binary_matrix_header(self.num_rows(), self.num_cols());
                return Some(data);
            }
        }
        w.matrix(self);
        None
    }
    fn extract_range(&self, range: &RangeSpec) -> std::result::Result<Self, String> {
        sub_matrix(self, range)
    }
}

/// A matrix kept in double precision, row-major (Kaldi's `Matrix<double>` tables, e.g. CMVN
/// statistics, whose sums of squares a float would round).
#[derive(Debug, Clone, PartialEq)]
pub struct DoubleMatrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f64>,
}

impl TableObject for DoubleMatrix {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        let (rows, cols, data) = r.matrix_f64()?;
        Ok(DoubleMatrix { rows, cols, data })
    }
    fn write_object(&self, w: &mut TokenWriter) {
        w.matrix_f64(self.rows, self.cols, &self.data)
    }
}

impl TableObject for Vector {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        super::kaldi_matrix::read_vector(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        w.vector(&self.to_vec())
    }
    fn extract_range(&self, range: &RangeSpec) -> std::result::Result<Self, String> {
        match (range.rows, range.cols) {
            (Some((a, b)), None) if b < self.dim() => {
                Ok(Vector::from_vec(self.to_vec().drain(a..=b).collect()))
            }
            _ => Err(format!(
                "range [{}] does not fit a vector of dimension {}",
                range.text(),
                self.dim()
            )),
        }
    }
}

impl CompressedMatrix {
    /// The sub-matrix for a range, still compressed: column headers are kept and the selected
    /// codes copied, so no precision is lost.
    pub fn sub_range(&self, r0: usize, nr: usize, c0: usize, nc: usize) -> CompressedMatrix {
        let (rows, cols) = (self.rows, self.cols);
        let mut data = Vec::new();
        match self.format {
            CompressedFormat::OneByteWithColHeaders => {
                data.extend_from_slice(&self.data[c0 * 8..(c0 + nc) * 8]);
                let bytes = &self.data[cols * 8..];
                for c in c0..c0 + nc {
                    data.extend_from_slice(&bytes[c * rows + r0..c * rows + r0 + nr]);
                }
            }
            CompressedFormat::TwoByte => {
                for r in r0..r0 + nr {
                    data.extend_from_slice(
                        &self.data[(r * cols + c0) * 2..(r * cols + c0 + nc) * 2],
                    );
                }
            }
            CompressedFormat::OneByte => {
                for r in r0..r0 + nr {
                    data.extend_from_slice(&self.data[r * cols + c0..r * cols + c0 + nc]);
                }
            }
        }
        CompressedMatrix {
            format: self.format,
            min_value: self.min_value,
            range: self.range,
            rows: nr,
            cols: nc,
            data,
        }
    }
}

impl TableObject for CompressedMatrix {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        if r.is_binary() && r.rest().first() == Some(&b'C') {
            CompressedMatrix::read(r)
        } else {
            // Kaldi compresses a full matrix it finds here with the automatic method.
            let m = super::kaldi_matrix::read_matrix(r)?;
            Ok(CompressedMatrix::compress(
                &m,
                super::compressed::CompressionMethod::Automatic,
            ))
        }
    }
    fn write_object(&self, w: &mut TokenWriter) {
        self.write(w)
    }
    fn extract_range(&self, range: &RangeSpec) -> std::result::Result<Self, String> {
        let (r0, nr, c0, nc) = range.resolve(self.rows, self.cols)?;
        Ok(self.sub_range(r0, nr, c0, nc))
    }
}

impl TableObject for GeneralMatrix {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        GeneralMatrix::read(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        self.write(w)
    }
    fn extract_range(&self, range: &RangeSpec) -> std::result::Result<Self, String> {
        match self {
            GeneralMatrix::Full(m) => Ok(GeneralMatrix::Full(sub_matrix(m, range)?)),
            GeneralMatrix::Compressed(c) => Ok(GeneralMatrix::Compressed(c.extract_range(range)?)),
            GeneralMatrix::Sparse(_) => {
                Err("range specifiers are not supported for sparse matrices".into())
            }
        }
    }
}

impl TableObject for SparseMatrix {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        SparseMatrix::read(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        self.write(w)
    }
}

impl TableObject for Posterior {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        super::sparse::read_posterior(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        super::sparse::write_posterior(w, self)
    }
}

impl TableObject for super::sparse::PdfSupervision {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        let start = r.pos();
        let posterior = super::sparse::read_posterior(r);
        let all_empty = |p: &Posterior| !p.is_empty() && p.iter().all(|f| f.is_empty());
        if let Ok(p) = &posterior {
            if !all_empty(p) {
                return posterior.map(Self);
            }
        }
        let after_posterior = r.pos();
        r.set_pos(start);
        match super::sparse::read_basic_int_vector(r) {
            Ok(ali) => Ok(Self(ali.iter().map(|&k| vec![(k, 1.0)]).collect())),
            Err(_) => match posterior {
                Ok(p) => {
                    r.set_pos(after_posterior);
                    Ok(Self(p))
                }
                // The posterior's error (the format Kaldi's tool documents), saying that an
                // alignment would have done too.
                Err(Error::Format {
                    file,
                    offset,
                    expected,
                    found,
                }) => Err(Error::Format {
                    file,
                    offset,
                    expected: format!("{expected} (a posterior, or an integer alignment)"),
                    found,
                }),
                Err(e) => Err(e),
            },
        }
    }
    fn write_object(&self, w: &mut TokenWriter) {
        super::sparse::write_posterior(w, &self.0)
    }
}

impl TableObject for Vec<i32> {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        super::sparse::read_basic_int_vector(r)
    }
    fn write_object(&self, w: &mut TokenWriter) {
        super::sparse::write_basic_int_vector(w, self)
    }
}

/// A number per key (Kaldi's `BasicHolder`), read and written by the token reader's and
/// writer's method of the same name, one per line in text: a float (`nnet3-copy-egs
/// --weights`) or an integer (`--write-num-frames`).
macro_rules! basic_holder {
    ($($ty:ident),+) => {$(
        impl TableObject for $ty {
            fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
                r.$ty()
            }
            fn write_object(&self, w: &mut TokenWriter) {
                w.$ty(*self);
                w.newline_if_text();
            }
        }
    )+};
}
basic_holder!(f32, i32);

/// A token per key (Kaldi's `TokenHolder`), e.g. utt2spk maps: `utt1 spk1` per line.
impl TableObject for String {
    fn read_object(r: &mut TokenReader<'_>) -> Result<Self> {
        r.token()
    }
    fn write_object(&self, w: &mut TokenWriter) {
        w.token(self)
    }
}

/// Reads one object at `pos` of `buf` (detecting the `\0B` header); returns it and the end
/// position.
fn read_at<T: TableObject>(buf: &[u8], pos: usize, file: &str) -> Result<(T, usize)> {
    let mut r = TokenReader::new(buf, false, file);
    r.set_pos(pos);
    match r.rest() {
        [0, b'B', ..] => {
            r.set_binary(true);
            r.set_pos(pos + 2);
        }
        [0, ..] => return Err(r.err_at(pos + 1, "'B' after the binary marker \\0")),
        _ => {}
    }
    let v = T::read_object(&mut r)?;
    Ok((v, r.pos()))
}

/// Splits an scp value into its rxfilename and optional range specifier.
fn split_range(value: &str) -> std::result::Result<(&str, Option<RangeSpec>), String> {
    if let Some(body) = value.strip_suffix(']') {
        let (rx, range) = body
            .rsplit_once('[')
            .ok_or_else(|| format!("\"{value}\" ends in ']' without a matching '['"))?;
        return Ok((rx, Some(RangeSpec::parse(range)?)));
    }
    Ok((value, None))
}

/// Reads a single object from an rxfilename (`file`, `file:offset`, `cmd |`, `-`), with an
/// optional trailing range specifier `[r1:r2,c1:c2]` (Kaldi's ReadKaldiObject).
pub fn read_object<T: TableObject>(rxfilename: &str) -> Result<T> {
    let mut cache = FileCache::default();
    read_object_cached(rxfilename, &mut cache)
}

fn read_object_cached<T: TableObject>(rxfilename: &str, cache: &mut FileCache) -> Result<T> {
    let (rx, range) = split_range(rxfilename).map_err(Error::Usage)?;
    let (buf, pos, label) = cache.open(rx)?;
    let (v, _) = read_at::<T>(&buf, pos, &label)?;
    match range {
        None => Ok(v),
        Some(rg) => v
            .extract_range(&rg)
            .map_err(|m| Error::Usage(format!("{rxfilename}: {m}"))),
    }
}

/// Writes a single object to a wxfilename (binary objects start with `\0B`).
pub fn write_object<T: TableObject>(wxfilename: &str, binary: bool, obj: &T) -> Result<()> {
    let mut w = TokenWriter::new(binary);
    w.binary_header();
    obj.write_object(&mut w);
    let mut sink = Sink::open(wxfilename)?;
    if let Err(e) = sink.write_all(w.bytes()) {
        sink.discard();
        return Err(e);
    }
    sink.close()
}

/// Writes `bytes` as they are to a wxfilename (a file, `-`, `| command`): a number in text
/// (`feat-to-dim`'s output), for instance.
pub fn write_bytes(wxfilename: &str, bytes: &[u8]) -> Result<()> {
    let mut sink = Sink::open(wxfilename)?;
    if let Err(e) = sink.write_all(bytes) {
        sink.discard();
        return Err(e);
    }
    sink.close()
}

// ---------------------------------------------------------------------------------------------
// Script files

/// One line of an scp file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScpEntry {
    /// The key.
    pub key: String,
    /// The rxfilename, including any range specifier.
    pub value: String,
    /// 1-based line number, for messages.
    pub line: usize,
}

/// Parses an scp file: `key rxfilename` per line, split at the first whitespace; an empty or
/// one-field line makes the file invalid.
pub fn parse_scp(text: &[u8], file: &str) -> Result<Vec<ScpEntry>> {
    let s = std::str::from_utf8(text).map_err(|e| {
        Error::format(
            file,
            e.valid_up_to(),
            "UTF-8 text in a script file",
            "invalid bytes",
        )
    })?;
    let mut out = Vec::new();
    for (i, raw) in s.lines().enumerate() {
        let line = raw.trim_matches(|c: char| c.is_ascii_whitespace());
        let split = line.find(|c: char| c.is_ascii_whitespace());
        let (key, value) = match split {
            Some(p) => (
                &line[..p],
                line[p..].trim_matches(|c: char| c.is_ascii_whitespace()),
            ),
            None => (line, ""),
        };
        if key.is_empty() || value.is_empty() {
            return Err(Error::parse(
                TextPos {
                    file: file.to_string(),
                    line: i + 1,
                    column: 1,
                    line_text: raw.to_string(),
                },
                "invalid script line: expected \"<key> <rxfilename>\"",
            ));
        }
        out.push(ScpEntry {
            key: key.to_string(),
            value: value.to_string(),
            line: i + 1,
        });
    }
    Ok(out)
}

fn scp_error(file: &str, e: &ScpEntry, err: Error) -> Error {
    Error::parse(
        TextPos {
            file: file.to_string(),
            line: e.line,
            column: 0,
            line_text: String::new(),
        },
        format!("cannot read entry \"{}\" ({}): {err}", e.key, e.value),
    )
}

// ---------------------------------------------------------------------------------------------
// Sequential reader

enum SeqSource {
    Archive {
        buf: Rc<Vec<u8>>,
        pos: usize,
        label: String,
    },
    Script {
        entries: Vec<ScpEntry>,
        next: usize,
        label: String,
        cache: FileCache,
    },
}

/// Iterates over `(key, object)` pairs of an archive or script, in file order. After an error
/// the iteration ends.
pub struct SequentialTableReader<T> {
    src: SeqSource,
    permissive: bool,
    done: bool,
    _t: std::marker::PhantomData<T>,
}

/// Reads the next archive key (Kaldi: `is >> key`, then one space/tab consumed, or a newline
/// left in place). Ok(None) at end of input.
fn read_key(buf: &[u8], pos: &mut usize, label: &str) -> Result<Option<String>> {
    while *pos < buf.len() && buf[*pos].is_ascii_whitespace() {
        *pos += 1;
    }
    if *pos >= buf.len() {
        return Ok(None);
    }
    let start = *pos;
    while *pos < buf.len() && !buf[*pos].is_ascii_whitespace() {
        *pos += 1;
    }
    let key = String::from_utf8_lossy(&buf[start..*pos]).into_owned();
    match buf.get(*pos) {
        Some(b' ') | Some(b'\t') => *pos += 1,
        Some(b'\n') => {}
        _ => {
            return Err(Error::format(
                label,
                *pos,
                format!("a space after key \"{key}\""),
                super::codec::describe(buf, *pos),
            ))
        }
    }
    Ok(Some(key))
}

impl<T: TableObject> SequentialTableReader<T> {
    /// Opens an rspecifier (`ark:...`, `scp:...`, with options).
    pub fn open(rspec: &str) -> Result<Self> {
        let spec = parse_rspecifier(rspec)?;
        let mut cache = FileCache::default();
        let src = match spec.kind {
            TableKind::Archive => {
                let (buf, pos, label) = cache.open(&spec.filename)?;
                SeqSource::Archive { buf, pos, label }
            }
            TableKind::Script => {
                let (buf, pos, label) = cache.open(&spec.filename)?;
                let entries = parse_scp(buf.get(pos..).unwrap_or(&[]), &label)?;
                SeqSource::Script {
                    entries,
                    next: 0,
                    label,
                    cache: FileCache::default(),
                }
            }
        };
        Ok(SequentialTableReader {
            src,
            permissive: spec.opts.permissive,
            done: false,
            _t: std::marker::PhantomData,
        })
    }

    /// A reader over an archive already in memory (`label` names it in errors).
    pub fn from_archive_bytes(bytes: Vec<u8>, label: &str) -> Self {
        SequentialTableReader {
            src: SeqSource::Archive {
                buf: Rc::new(bytes),
                pos: 0,
                label: label.to_string(),
            },
            permissive: false,
            done: false,
            _t: std::marker::PhantomData,
        }
    }

    fn next_item(&mut self) -> Option<Result<(String, T)>> {
        match &mut self.src {
            SeqSource::Archive { buf, pos, label } => {
                let key = match read_key(buf, pos, label) {
                    Ok(Some(k)) => k,
                    Ok(None) => return None,
                    Err(e) => return Some(Err(e)),
                };
                match read_at::<T>(buf, *pos, label) {
                    Ok((v, end)) => {
                        *pos = end;
                        Some(Ok((key, v)))
                    }
                    Err(e) => Some(Err(e)),
                }
            }
            SeqSource::Script {
                entries,
                next,
                label,
                cache,
            } => loop {
                let e = entries.get(*next)?;
                *next += 1;
                match read_object_cached::<T>(&e.value, cache) {
                    Ok(v) => return Some(Ok((e.key.clone(), v))),
                    Err(err) if self.permissive => {
                        let _ = err; // `p`: unreadable scp entries are skipped
                        continue;
                    }
                    Err(err) => return Some(Err(scp_error(label, e, err))),
                }
            },
        }
    }
}

impl<T: TableObject> Iterator for SequentialTableReader<T> {
    type Item = Result<(String, T)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_item();
        match &item {
            None => self.done = true,
            Some(Err(_)) => {
                self.done = true;
                if self.permissive {
                    return None; // `p` on an archive: a corrupted tail just ends it
                }
            }
            Some(Ok(_)) => {}
        }
        item
    }
}

// ---------------------------------------------------------------------------------------------
// Random-access reader

enum RaSource {
    Archive {
        buf: Rc<Vec<u8>>,
        pos: usize,
        label: String,
        finished: bool,
    },
    Script {
        entries: HashMap<String, ScpEntry>,
        label: String,
        cache: FileCache,
    },
}

/// Looks objects up by key in an archive (read lazily, up to the key asked for) or a script.
pub struct RandomAccessTableReader<T> {
    src: RaSource,
    loaded: HashMap<String, T>,
    permissive: bool,
}

impl<T: TableObject> RandomAccessTableReader<T> {
    /// Opens an rspecifier.
    pub fn open(rspec: &str) -> Result<Self> {
        let spec = parse_rspecifier(rspec)?;
        let mut cache = FileCache::default();
        let (buf, pos, label) = cache.open(&spec.filename)?;
        let src = match spec.kind {
            TableKind::Archive => RaSource::Archive {
                buf,
                pos,
                label,
                finished: false,
            },
            TableKind::Script => {
                let mut entries = HashMap::new();
                for e in parse_scp(buf.get(pos..).unwrap_or(&[]), &label)? {
                    entries.entry(e.key.clone()).or_insert(e);
                }
                RaSource::Script {
                    entries,
                    label,
                    cache: FileCache::default(),
                }
            }
        };
        Ok(RandomAccessTableReader {
            src,
            loaded: HashMap::new(),
            permissive: spec.opts.permissive,
        })
    }

    /// The object stored under `key`, or None if the table has no such key.
    pub fn get(&mut self, key: &str) -> Result<Option<&T>> {
        if !self.loaded.contains_key(key) {
            match &mut self.src {
                RaSource::Archive {
                    buf,
                    pos,
                    label,
                    finished,
                } => {
                    while !*finished {
                        let step = read_key(buf, pos, label).and_then(|k| match k {
                            None => Ok(None),
                            Some(k) => {
                                let (v, end) = read_at::<T>(buf, *pos, label)?;
                                *pos = end;
                                Ok(Some((k, v)))
                            }
                        });
                        match step {
                            Ok(None) => *finished = true,
                            Ok(Some((k, v))) => {
                                let hit = k == key;
                                self.loaded.entry(k).or_insert(v);
                                if hit {
                                    break;
                                }
                            }
                            Err(e) => {
                                *finished = true;
                                if !self.permissive {
                                    return Err(e);
                                }
                            }
                        }
                    }
                }
                RaSource::Script {
                    entries,
                    label,
                    cache,
                } => {
                    if let Some(e) = entries.get(key) {
                        match read_object_cached::<T>(&e.value, cache) {
                            Ok(v) => {
                                self.loaded.insert(key.to_string(), v);
                            }
                            Err(_) if self.permissive => {}
                            Err(err) => return Err(scp_error(label, e, err)),
                        }
                    }
                }
            }
        }
        Ok(self.loaded.get(key))
    }

    /// Whether the table has `key` (reading it if needed).
    pub fn has_key(&mut self, key: &str) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// The object under `key`, or an error naming the key.
    pub fn value(&mut self, key: &str) -> Result<&T> {
        self.get(key)?
            .ok_or_else(|| Error::Usage(format!("key \"{key}\" not found in table")))
    }
}

// ---------------------------------------------------------------------------------------------
// Writer

/// Writes `(key, object)` pairs to an archive, a script's files, or both (`ark,scp`). Call
/// [`TableWriter::close`]: an output file only appears (renamed into place) on close; a writer
/// dropped without closing discards its files.
pub struct TableWriter<T> {
    binary: bool,
    flush: bool,
    archive: Option<Sink>,
    archive_name: String,
    written: usize,
    script_out: Option<(Sink, String)>,
    /// For `scp:` wspecifiers: key → wxfilename.
    script_in: Option<HashMap<String, String>>,
    /// The previous object's serialisation buffer, reused so that writing a stream of large
    /// matrices does not fault in fresh pages for every one.
    buffer: Vec<u8>,
    _t: std::marker::PhantomData<T>,
}

impl<T: TableObject> TableWriter<T> {
    /// Opens a wspecifier.
    pub fn open(wspec: &str) -> Result<Self> {
        let spec = parse_wspecifier(wspec)?;
        let mut w = TableWriter {
            binary: spec.binary,
            flush: spec.flush.unwrap_or(false),
            archive: None,
            archive_name: String::new(),
            written: 0,
            script_out: None,
            script_in: None,
            buffer: Vec::new(),
            _t: std::marker::PhantomData,
        };
        match (&spec.archive, &spec.script) {
            (Some(a), Some(s)) => {
                w.archive = Some(Sink::open(a)?);
                w.archive_name = a.clone();
                w.script_out = Some((Sink::open(s)?, s.clone()));
            }
            (Some(a), None) => {
                w.archive = Some(Sink::open(a)?);
                w.archive_name = a.clone();
            }
            (None, Some(s)) => {
                let (buf, pos, label) = read_rxfilename(s)?;
                let map = parse_scp(buf.get(pos..).unwrap_or(&[]), &label)?
                    .into_iter()
                    .map(|e| (e.key, e.value))
                    .collect();
                w.script_in = Some(map);
            }
            (None, None) => return Err(Error::Usage(format!("invalid wspecifier \"{wspec}\""))),
        }
        Ok(w)
    }

    /// Writes one object under `key` (non-empty, no whitespace).
    pub fn write(&mut self, key: &str, obj: &T) -> Result<()> {
        if key.is_empty() || key.contains(|c: char| c.is_ascii_whitespace()) {
            return Err(Error::Usage(format!(
                "invalid table key \"{key}\": keys must be non-empty and contain no whitespace"
            )));
        }
        let mut tw = TokenWriter::with_buffer(self.binary, std::mem::take(&mut self.buffer));
        tw.binary_header();
        // The object's bytes: the buffer, then (a matrix's data) a tail written in place.
        let tail = obj.write_object_in_place(&mut tw).unwrap_or_default();
        let body = tw.into_bytes();
        if let Some(map) = &self.script_in {
            let wx = map.get(key).ok_or_else(|| {
                Error::Usage(format!("key \"{key}\" is not in the output script file"))
            })?;
            let mut sink = Sink::open(wx)?;
            sink.write_all(&body)?;
            sink.write_all(tail)?;
            self.buffer = body;
            return sink.close();
        }
        if let Some(a) = &mut self.archive {
            a.write_all(key.as_bytes())?;
            a.write_all(b" ")?;
            let offset = self.written + key.len() + 1;
            a.write_all(&body)?;
            a.write_all(tail)?;
            self.written = offset + body.len() + tail.len();
            if self.flush {
                a.flush()?;
            }
            if let Some((s, _)) = &mut self.script_out {
                s.write_all(format!("{key} {}:{offset}\n", self.archive_name).as_bytes())?;
            }
        }
        self.buffer = body;
        Ok(())
    }

    /// Finishes all outputs (renames files into place, waits for pipes).
    pub fn close(mut self) -> Result<()> {
        let a = self.archive.take();
        let s = self.script_out.take();
        let ra = a.map_or(Ok(()), |x| x.close());
        let rs = s.map_or(Ok(()), |(x, _)| x.close());
        ra.and(rs)
    }
}

impl<T> Drop for TableWriter<T> {
    fn drop(&mut self) {
        if let Some(a) = self.archive.take() {
            a.discard();
        }
        if let Some((s, _)) = self.script_out.take() {
            s.discard();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Named types

/// Sequential reader of float matrices (compressed entries are decompressed).
pub type SequentialMatrixReader = SequentialTableReader<Matrix>;
/// Sequential reader of float vectors.
pub type SequentialVectorReader = SequentialTableReader<Vector>;
/// Sequential reader of posteriors.
pub type SequentialPosteriorReader = SequentialTableReader<Posterior>;
/// Random-access reader of float matrices.
pub type RandomAccessMatrixReader = RandomAccessTableReader<Matrix>;
/// Random-access reader of float vectors.
pub type RandomAccessVectorReader = RandomAccessTableReader<Vector>;
/// Writer of float matrices.
pub type MatrixWriter = TableWriter<Matrix>;
/// Writer of float vectors.
pub type VectorWriter = TableWriter<Vector>;
/// Writer of compressed matrices.
pub type CompressedMatrixWriter = TableWriter<CompressedMatrix>;
/// Writer of general matrices.
pub type GeneralMatrixWriter = TableWriter<GeneralMatrix>;
/// Writer of posteriors.
pub type PosteriorWriter = TableWriter<Posterior>;
